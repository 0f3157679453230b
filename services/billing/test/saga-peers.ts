import { createLogger } from "@mkt/runtime/logger";
import { startTestAccounts } from "../../accounts/test/accounts-harness.ts";
import { startTestBilling } from "./billing-harness.ts";
import { startRegistryDouble } from "./registry-double.ts";

/**
 * Billing with the subscription saga's collaborators: a real accounts service (e-mails, scoped
 * keys, keys.revoked) and a registry double serving plans, on a clock the test sets.
 */
export async function startBillingWithPeers(clock: () => Date) {
  const accounts = await startTestAccounts();
  const registry = await startRegistryDouble(createLogger("registry-double", "silent")).catch(async (err: unknown) => {
    await accounts.close();
    throw err;
  });
  const billing = await startTestBilling(
    { ACCOUNTS_ADDR: `127.0.0.1:${accounts.accounts.port}`, REGISTRY_ADDR: `127.0.0.1:${registry.port}` },
    { clock },
  ).catch(async (err: unknown) => {
    await registry.close();
    await accounts.close();
    throw err;
  });
  return {
    accounts,
    registry,
    billing,
    async close() {
      await billing.close();
      await registry.close();
      await accounts.close();
    },
  };
}

export type BillingWithPeers = Awaited<ReturnType<typeof startBillingWithPeers>>;
