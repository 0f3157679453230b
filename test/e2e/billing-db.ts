import pg from "pg";

/**
 * A read-only look into billing's schema of a running system, for asserting on money the way an
 * auditor would: from the ledger and the usage records, not from what the API says about them.
 */
export async function openBillingDb(databaseUrl: string) {
  const db = new pg.Client({ connectionString: databaseUrl, options: "-c search_path=billing" });
  await db.connect();
  return {
    async query<R extends Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<R[]> {
      return (await db.query<R>(sql, params)).rows;
    },
    /** One bigint figure from a query whose single row has a `v` column (null → 0). */
    async figure(sql: string, params: unknown[] = []): Promise<bigint> {
      const { rows } = await db.query<{ v: string | null }>(sql, params);
      return BigInt(rows[0]?.v ?? "0");
    },
    close: () => db.end(),
  };
}

export type BillingDb = Awaited<ReturnType<typeof openBillingDb>>;

/** Sends one chat completion request with plain fetch (so every status and header is visible). */
export function postChat(url: string, apiKey: string, body: Record<string, unknown>, signal?: AbortSignal) {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
}
