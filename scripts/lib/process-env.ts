/**
 * The memory settings every process of the system runs with, here and in the image
 * (deploy/Dockerfile sets the same values; test/deploy checks they agree).
 * bench/README.md#process-memory has the measurements.
 */
export const PROCESS_ENV = {
  // Under a high allocation rate V8 grows each young-generation semi-space up to 64 MiB and keeps
  // it: ~130 MiB of RSS in the edge and the registry for a heap of ~30 MiB. 16 MiB keeps the cost
  // of a minor GC low and the young generation three times smaller.
  //
  // The tracing hook must load before the entry's module graph is linked (tracing-register.ts);
  // it does nothing unless an OTLP endpoint is configured. A bare specifier resolves from the
  // working directory: the repository root here, /app in the image.
  NODE_OPTIONS: "--max-semi-space-size=16 --import @mkt/runtime/tracing-register",
  // glibc raises its mmap threshold to the largest block freed (up to 32 MiB), so after the first
  // password hash (scrypt takes 16 MiB) those blocks come from arenas that are never given back:
  // ~70 MiB kept by accounts after a burst of sign-ups. A fixed threshold returns them.
  MALLOC_MMAP_THRESHOLD_: "131072",
} as const;

/** The child's environment: the launcher's, PROCESS_ENV (NODE_OPTIONS appended to), the spec's. */
export function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const nodeOptions = [PROCESS_ENV.NODE_OPTIONS, process.env.NODE_OPTIONS].filter(Boolean).join(" ");
  return { ...process.env, ...PROCESS_ENV, NODE_OPTIONS: nodeOptions, ...env };
}
