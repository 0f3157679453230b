import type { LeaseSettings } from "@mkt/proto/billing/v1/leases";
import type { BillingConfig } from "../config.ts";

/**
 * Billing's lease settings as every lease reply carries them (docs/leases.md#settings): billing
 * owns them, and an edge uses these instead of settings of its own, so the two cannot disagree.
 */
export function leaseSettings(
  config: Pick<BillingConfig, "LEASE_TTL_MS" | "EDGE_ISOLATION_MS" | "MAX_REQUEST_MS">,
): LeaseSettings {
  return {
    leaseTtlMs: BigInt(config.LEASE_TTL_MS),
    edgeIsolationMs: BigInt(config.EDGE_ISOLATION_MS),
    maxRequestMs: BigInt(config.MAX_REQUEST_MS),
  };
}
