/**
 * Runs a lease transaction again when PostgreSQL aborted it as a deadlock victim (40P01) or a
 * serialization failure (40001). Lease calls lock wallets in ascending account order, but a
 * settler or a fence taking rows in another order can still cross them; the retry is safe
 * because the aborted attempt left nothing behind.
 */
export async function withDeadlockRetry<T>(run: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (attempt >= attempts || (code !== "40P01" && code !== "40001")) throw err;
    }
  }
}
