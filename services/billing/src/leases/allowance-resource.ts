import { LeaseResource } from "@mkt/proto/billing/v1/leases";

/**
 * What a lease allowance is room in (`lease_allowances.resource`): the account's credit and
 * request windows, a spend-limited key's credit, and a subscription's windows, included tokens
 * and concurrency slots. Each is shown to the edge as a LeaseResource, but `credit`, which the
 * lease carries as its hold.
 */
export const ALLOWANCE_RESOURCES = {
  credit: undefined,
  key_credit: LeaseResource.LEASE_RESOURCE_KEY_CREDIT,
  requests_minute: LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE,
  requests_day: LeaseResource.LEASE_RESOURCE_REQUESTS_PER_DAY,
  sub_requests_minute: LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE,
  sub_tokens_minute: LeaseResource.LEASE_RESOURCE_TOKENS_PER_MINUTE,
  included_tokens: LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS,
  slots: LeaseResource.LEASE_RESOURCE_SLOTS,
} as const satisfies Record<string, LeaseResource | undefined>;

export type AllowanceResource = keyof typeof ALLOWANCE_RESOURCES;

/** A column value read back as an AllowanceResource; an unknown one is a bug, not a room. */
export function allowanceResource(value: unknown): AllowanceResource {
  if (typeof value === "string" && Object.hasOwn(ALLOWANCE_RESOURCES, value)) return value as AllowanceResource;
  throw new Error(`unknown lease allowance resource ${JSON.stringify(value)}`);
}
