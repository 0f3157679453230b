import { describe, expect, it } from "vitest";
import { AccountLines } from "../src/chat/account-lines.ts";

/** A job that runs until released, recording when it started. */
function gate(started: string[], name: string) {
  let release!: () => void;
  const done = new Promise<void>((resolve) => (release = resolve));
  return { job: () => (started.push(name), done.then(() => name)), release };
}

const never = new AbortController().signal;

describe("one line per account", () => {
  it("runs one job per account at a time; another account's job does not wait", async () => {
    const lines = new AccountLines(8);
    const started: string[] = [];
    const a1 = gate(started, "a1");
    const a2 = gate(started, "a2");
    const b1 = gate(started, "b1");
    const running = [lines.run("a", a1.job, never), lines.run("a", a2.job, never), lines.run("b", b1.job, never)];
    await Promise.resolve();
    expect(started).toEqual(["a1", "b1"]);
    b1.release();
    a1.release();
    await running[0];
    await Promise.resolve();
    expect(started).toEqual(["a1", "b1", "a2"]);
    a2.release();
    expect(await Promise.all(running)).toEqual(["a1", "a2", "b1"]);
    expect(lines.busyAccounts).toBe(0);
  });

  it("refuses an account's job past its waiting room with 429 and retry-after", async () => {
    const lines = new AccountLines(1);
    const first = gate([], "first");
    const running = [lines.run("a", first.job, never), lines.run("a", async () => "second", never)];
    await expect(lines.run("a", async () => "third", never)).rejects.toMatchObject({
      code: "rate_limit_exceeded",
      headers: { "retry-after": "1" },
    });
    first.release();
    expect(await Promise.all(running)).toEqual(["first", "second"]);
  });

  it("drops a job whose signal fires while it waits; the line moves on", async () => {
    const lines = new AccountLines(4);
    const started: string[] = [];
    const first = gate(started, "first");
    const abort = new AbortController();
    const running = lines.run("a", first.job, never);
    const waiting = lines.run("a", async () => (started.push("aborted"), "aborted"), abort.signal);
    abort.abort(new Error("deadline"));
    await expect(waiting).rejects.toThrow("deadline");
    const next = lines.run("a", async () => (started.push("next"), "next"), never);
    first.release();
    expect(await running).toBe("first");
    expect(await next).toBe("next");
    expect(started).toEqual(["first", "next"]);
  });
});
