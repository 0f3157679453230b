/**
 * `npm run admin -- <command>`: operator actions through the edge's admin API, with the
 * ADMIN_TOKEN from the environment or the `.env.local` that `npm start` wrote.
 *
 *   npm run admin -- invite [count]              single-use hoster invite codes
 *   npm run admin -- top-up <account_id> <usd>   credit an account (idempotent per call)
 *   npm run admin -- usage dead-letters [billing|registry]
 *       usage events the service kept instead of using (billing: not settled; registry: not in
 *       its hosters' figures); billing when none is named
 *   npm run admin -- usage replay <id|all> [billing|registry]
 *       use them again once the cause is fixed (billing settles them, registry writes their figures)
 *
 * The edge is found at ADMIN_URL, or http://127.0.0.1:$PORT (PORT defaults to 8080).
 */
import { randomUUID } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadEnvFile } from "./lib/env-file.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const stored = loadEnvFile(join(root, ".env.local"));
const token = process.env.ADMIN_TOKEN ?? stored.ADMIN_TOKEN;
const base = process.env.ADMIN_URL ?? `http://127.0.0.1:${process.env.PORT ?? "8080"}`;

function usage(): never {
  console.error(
    "usage: npm run admin -- invite [count] | top-up <account_id> <usd> | usage dead-letters [billing|registry] | " +
      "usage replay <id|all> [billing|registry]",
  );
  process.exit(2);
}

async function call(path: string, body?: unknown, headers: Record<string, string> = {}): Promise<unknown> {
  if (!token) {
    console.error("No ADMIN_TOKEN in the environment or .env.local (npm start generates one).");
    process.exit(1);
  }
  const res = await fetch(`${base}${path}`, {
    // A call without a body reads (GET); one with a body acts (POST).
    ...(body === undefined
      ? { method: "GET", headers: { authorization: `Bearer ${token}`, ...headers } }
      : {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
          body: JSON.stringify(body),
        }),
  }).catch((err: unknown) => {
    console.error(`Cannot reach the edge at ${base} (${(err as Error).message}). Is it running?`);
    process.exit(1);
  });
  const answer = (await res.json()) as { error?: { message: string } };
  if (!res.ok) {
    console.error(`${res.status}: ${answer.error?.message ?? JSON.stringify(answer)}`);
    process.exit(1);
  }
  return answer;
}

const [command, ...args] = process.argv.slice(2);
if (command === "invite") {
  const count = args[0] === undefined ? 1 : Number(args[0]);
  if (!Number.isInteger(count) || count < 1 || count > 100) usage();
  const { data } = (await call("/admin/invites", { count })) as { data: Array<{ invite_code: string }> };
  for (const invite of data) console.log(invite.invite_code);
} else if (command === "top-up") {
  const [accountId, usd] = args;
  if (!accountId || !usd || !Number.isFinite(Number(usd))) usage();
  // One key per invocation: a retry inside this call (none today) could never credit twice.
  const result = (await call(
    `/admin/accounts/${encodeURIComponent(accountId)}/credits`,
    { amount_usd: Number(usd) },
    { "idempotency-key": randomUUID() },
  )) as { credit_balance_usd: number };
  console.log(`credited ${usd} USD; balance now ${result.credit_balance_usd} USD`);
} else if (command === "usage" && args[0] === "dead-letters" && args.length <= 2) {
  const service = serviceQuery(args[1]);
  const { data } = (await call(`/admin/usage/dead-letters${service}`)) as { data: DeadLetter[] };
  if (data.length === 0) console.log("no usage dead letters");
  for (const letter of data) console.log(describe(letter));
} else if (command === "usage" && args[0] === "replay" && (args.length === 2 || args.length === 3)) {
  const service = serviceQuery(args[2]);
  const ids = args[1] === "all" ? [] : [args[1]!];
  const result = (await call(`/admin/usage/dead-letters/replay${service}`, { ids })) as {
    replayed: number;
    failed: DeadLetter[];
  };
  console.log(`replayed ${result.replayed}; still failing ${result.failed.length}`);
  for (const letter of result.failed) console.log(describe(letter));
  if (result.failed.length > 0) process.exitCode = 1;
} else {
  usage();
}

/** Whose dead letters: billing's unless registry's are named (the edge's default is billing's too). */
function serviceQuery(service: string | undefined): string {
  if (service === undefined || service === "billing") return "";
  if (service === "registry") return "?service=registry";
  return usage();
}

interface DeadLetter {
  id: string;
  request_id: string;
  subject: string;
  reason: string;
  attempts: number;
  first_seen_at: string;
  last_seen_at: string;
}

function describe(letter: DeadLetter): string {
  return [
    letter.id,
    letter.request_id || "(no request id)",
    `attempts ${letter.attempts}`,
    `first ${letter.first_seen_at}`,
    `last ${letter.last_seen_at}`,
    letter.subject,
    letter.reason,
  ].join("  ");
}
