import { AppError } from "@mkt/runtime/errors";

/**
 * One line per account in front of a shared resource (the prompt tokenizer's workers): each
 * account has at most one job inside at a time and at most `maxWaiting` more waiting behind it,
 * so a flood of large prompts from one account waits behind itself while every other account's
 * job goes in next (docs/adr/0024-bounded-prompt-work.md). Beyond `maxWaiting` the account is told to slow down.
 */
export class AccountLines {
  readonly #maxWaiting: number;
  /** Per account with a job inside: the jobs waiting behind it, oldest first. */
  readonly #waiting = new Map<string, Array<() => void>>();

  constructor(maxWaiting: number) {
    this.#maxWaiting = maxWaiting;
  }

  /** Runs `job` when the account's turn comes; `signal` gives up waiting (the job never runs). */
  async run<T>(account: string, job: () => Promise<T>, signal: AbortSignal): Promise<T> {
    await this.#enter(account, signal);
    try {
      return await job();
    } finally {
      this.#leave(account);
    }
  }

  /** Accounts with a job inside. */
  get busyAccounts(): number {
    return this.#waiting.size;
  }

  #enter(account: string, signal: AbortSignal): Promise<void> {
    const line = this.#waiting.get(account);
    if (!line) {
      this.#waiting.set(account, []);
      return Promise.resolve();
    }
    if (line.length >= this.#maxWaiting) {
      return Promise.reject(
        new AppError("rate_limit_exceeded", "Too many large prompts from this account are waiting to be counted.", {
          headers: { "retry-after": "1" },
        }),
      );
    }
    return new Promise<void>((resolve, reject) => {
      const turn = () => {
        signal.removeEventListener("abort", giveUp);
        resolve();
      };
      const giveUp = () => {
        line.splice(line.indexOf(turn), 1);
        reject(signal.reason);
      };
      line.push(turn);
      signal.addEventListener("abort", giveUp, { once: true });
    });
  }

  #leave(account: string): void {
    const line = this.#waiting.get(account);
    const next = line?.shift();
    if (next) next();
    else this.#waiting.delete(account);
  }
}
