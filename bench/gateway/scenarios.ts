// The scenario sizes the targets (targets.ts) are stated for, which are also the bench's default
// knobs (config.ts): on their own so that neither of the two imports the other for them.

/** The scenarios the targets are stated for (and the bench's defaults). */
export const TARGET_SCENARIOS = {
  throughputConnections: 64,
  /** Streams started at once. */
  streams: 1000,
  /** New streams per second, and for how long. */
  arrivalRate: 100,
  arrivalSeconds: 10,
  /** Sparse accounts: each sends one request every so often, for so long. */
  sparseAccounts: 1000,
  sparseEverySeconds: 5,
  sparseSeconds: 60,
} as const;
