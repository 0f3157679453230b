import type { Em } from "../context.ts";

/** How often rows of edges that stopped holding a key are deleted. */
export const KEY_HOLDER_PRUNE_INTERVAL_MS = 10 * 60_000;

/**
 * The edges that may still hold the key's principal
 * (docs/adr/0018-revocation-waits-for-the-edges.md): a revocation waits for their acks.
 */
export async function keyHolders(em: Em, keyId: string): Promise<Set<string>> {
  const rows = await em.execute(`select edge_id from key_holders where key_id = ? and holds_until > now()`, [keyId]);
  return new Set(rows.map((row) => row.edge_id as string));
}

/** Deletes holder rows past their time: an edge that still uses the key wrote a later one. */
export async function pruneKeyHolders(em: Em): Promise<void> {
  await em.execute(`delete from key_holders where holds_until < now()`);
}
