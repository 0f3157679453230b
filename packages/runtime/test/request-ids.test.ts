import { describe, expect, it } from "vitest";
import { validate, version } from "uuid";
import { newRequestId } from "../src/ids.ts";

describe("request ids", () => {
  it("are UUIDv7s of the current millisecond, unique, and sort in the order they were minted", () => {
    const before = Date.now();
    // More than one pool's worth (256 ids), so refills are crossed too.
    const ids = Array.from({ length: 20_000 }, () => newRequestId());
    const after = Date.now();
    expect(ids.every((id) => validate(id) && version(id) === 7)).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    // Many ids share a millisecond here: the sequence keeps them in order within it.
    expect(ids.every((id, i) => i === 0 || ids[i - 1]! < id)).toBe(true);
    const msOf = (id: string) => parseInt(id.replace(/-/g, "").slice(0, 12), 16);
    expect(msOf(ids[0]!)).toBeGreaterThanOrEqual(before);
    // A sequence that overflows moves the time on by a millisecond at most now and then.
    expect(msOf(ids.at(-1)!)).toBeLessThanOrEqual(after + 1);
  });
});
