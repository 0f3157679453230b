import { commonSpecs, loadConfig, host, str, intBetween, listenPort } from "@mkt/runtime/config";
import { tlsSpecs } from "@mkt/runtime/service-tls";

export function loadAccountsConfig(env: NodeJS.ProcessEnv = process.env) {
  return loadConfig(
    {
      ...commonSpecs,
      ...tlsSpecs,
      GRPC_HOST: host({ default: "127.0.0.1" }),
      // 0 picks a free port (tests).
      GRPC_PORT: listenPort({ default: 50051 }),
      // Plain HTTP on GRPC_HOST, no client certificate: GET /metrics, /healthz, /readyz (probes).
      METRICS_PORT: listenPort({ default: 9466 }),
      /** The tier new accounts start on; billing maps tiers to their limits. */
      DEFAULT_TIER: str({ default: "free" }),
      /** Sign-up attempts allowed per client IP per UTC hour; 0 turns the limit off. */
      SIGNUP_LIMIT_PER_IP_PER_HOUR: intBetween(0, 1_000_000)({ default: 20 }),
      /** Wrong invite codes allowed per client IP per UTC hour; 0 turns the limit off. */
      INVITE_FAILURES_PER_IP_PER_HOUR: intBetween(0, 1_000_000)({ default: 10 }),
      /** Failed logins allowed per client IP per UTC hour; 0 turns the limit off. */
      LOGIN_FAILURES_PER_IP_PER_HOUR: intBetween(0, 1_000_000)({ default: 20 }),
      /**
       * How long an edge may use a principal past its check's send: accounts owns it and sends it
       * in every Authenticate and RevalidateKeys reply, and the edges use that. A revocation waits
       * at most this long for the acks of the edges that checked the key
       * (docs/adr/0018-revocation-waits-for-the-edges.md). It was LEASE_TTL_MS, which is billing's
       * alone now: accounts reads no LEASE_TTL_MS (one environment may serve every process).
       */
      PRINCIPAL_TTL_MS: intBetween(200, 60_000)({ default: 2_000 }),
      /** How long a login session lasts. */
      SESSION_TTL_HOURS: intBetween(1, 24 * 90)({ default: 24 * 7 }),
    },
    env,
  );
}

export type AccountsConfig = ReturnType<typeof loadAccountsConfig>;
