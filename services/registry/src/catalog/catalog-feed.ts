import type { ServerWritableStream } from "@grpc/grpc-js";
import { AppError } from "@mkt/runtime/errors";
import { writeWithBackpressure } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { repeatEvery } from "@mkt/runtime/periodic";
import { CatalogTable, type WatchCatalogRequest, type WatchCatalogResponse } from "@mkt/proto/registry/v1/registry";

type WatchCall = ServerWritableStream<WatchCatalogRequest, WatchCatalogResponse>;

interface Watcher {
  call: WatchCall;
  /** The newest table not yet written: a slow edge skips the tables it never got to. */
  pending: CatalogTable | undefined;
  writing: boolean;
  /** Ends the watch (registry is shutting down). */
  end(): void;
}

export interface CatalogFeedOptions {
  /** Builds the table (its version aside) from configuration and the database. */
  build(): Promise<CatalogTable>;
  /**
   * A change is sent this long after it is announced, so a burst (a plan edited twice, a probe
   * round flipping several hosters, the same change heard locally and back from NATS) is one table.
   */
  debounceMs: number;
  /**
   * The table is rebuilt and sent this often anyway: a nudge lost while NATS was down (another
   * replica's change) reaches the edges within this time, and an edge's table is never older than
   * this while it hears from registry (its age gauge tells an operator when it does not).
   */
  resyncMs: number;
  log: Logger;
}

/**
 * The routing table and the edges watching it (WatchCatalog). Every watcher gets the whole table
 * when it subscribes, again whenever a rebuild finds it changed, and at least every `resyncMs`;
 * `changed()` asks for a rebuild (after a change committed here, or another replica's
 * `catalog.changed`). Tables are rebuilt once for all watchers, and only a table that differs from
 * the last one sent gets a new version.
 */
export class CatalogFeed {
  readonly #options: CatalogFeedOptions;
  readonly #watchers = new Set<Watcher>();
  #latest: CatalogTable | undefined;
  #latestBytes: Uint8Array | undefined;
  #version = 0n;
  /** Bumped by every send to the watchers, so the resync knows whether it still has to send. */
  #sends = 0;
  #debounce: NodeJS.Timeout | undefined;
  #building: Promise<void> | undefined;
  #again = false;
  #closed = false;
  readonly #stopResync: () => Promise<void>;

  constructor(options: CatalogFeedOptions) {
    this.#options = options;
    this.#stopResync = repeatEvery(
      options.resyncMs,
      async () => {
        const sends = this.#sends;
        await this.#refresh();
        if (this.#sends === sends) this.#broadcast();
      },
      options.log,
      "routing table resync",
    );
  }

  /** The latest table, built now when none has been yet. */
  async table(): Promise<CatalogTable> {
    if (!this.#latest) await this.#refresh();
    return this.#latest ?? CatalogTable.fromPartial({});
  }

  /** Tables sent to watchers so far are numbered up to this (0 before the first). */
  get version(): bigint {
    return this.#version;
  }

  /** Something that can alter a route changed: rebuild soon and send the table if it differs. */
  changed(): void {
    if (this.#closed || this.#debounce) return;
    this.#debounce = setTimeout(() => {
      this.#debounce = undefined;
      this.#refresh().catch((err: unknown) => {
        this.#options.log.error({ err }, "could not rebuild the routing table; retrying");
        // The change is not lost: tried again shortly (and by the resync at the latest).
        setTimeout(() => this.changed(), 1_000).unref();
      });
    }, this.#options.debounceMs);
    this.#debounce.unref();
  }

  /** Serves one WatchCatalog call until the edge cancels it or registry shuts down. */
  async watch(call: WatchCall): Promise<void> {
    if (this.#closed) throw new AppError("service_unavailable", "Registry is shutting down.");
    // A watch before the first table (or after failed builds) builds it; a database outage then
    // fails the call as unavailable, and the edge retries.
    if (!this.#latest) await this.#refresh();
    await new Promise<void>((resolve) => {
      const watcher: Watcher = { call, pending: this.#latest, writing: false, end: resolve };
      if (call.cancelled) return resolve();
      this.#watchers.add(watcher);
      call.once("cancelled", resolve);
      call.once("close", resolve);
      void this.#write(watcher);
    }).finally(() => {
      for (const w of this.#watchers) if (w.call === call) this.#watchers.delete(w);
    });
  }

  /** Ends every watch (each ends with OK, so its edge watches again elsewhere) and stops rebuilding. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#debounce);
    for (const watcher of this.#watchers) watcher.end();
    this.#watchers.clear();
    await this.#stopResync();
    await this.#building;
  }

  /** Rebuilds, one build at a time; a request during a build runs one more after it. */
  async #refresh(): Promise<void> {
    if (this.#building) {
      this.#again = true;
      return this.#building;
    }
    this.#building = this.#rebuild().finally(() => (this.#building = undefined));
    await this.#building;
    if (this.#again && !this.#closed) {
      this.#again = false;
      await this.#refresh();
    }
  }

  async #rebuild(): Promise<void> {
    const table = await this.#options.build();
    const bytes = CatalogTable.encode({ ...table, version: 0n }).finish();
    if (this.#latestBytes && Buffer.from(bytes).equals(this.#latestBytes)) return;
    // Milliseconds since the epoch, past the last one: a restarted replica numbers higher too.
    const now = BigInt(Date.now());
    this.#version = now > this.#version ? now : this.#version + 1n;
    this.#latest = { ...table, version: this.#version };
    this.#latestBytes = bytes;
    this.#broadcast();
  }

  /** Sends the latest table to every watcher. */
  #broadcast(): void {
    if (!this.#latest) return;
    this.#sends++;
    for (const watcher of this.#watchers) {
      watcher.pending = this.#latest;
      void this.#write(watcher);
    }
  }

  async #write(watcher: Watcher): Promise<void> {
    if (watcher.writing) return;
    watcher.writing = true;
    try {
      for (let table = watcher.pending; table; table = watcher.pending) {
        watcher.pending = undefined;
        if (!(await writeWithBackpressure(watcher.call, { table }))) return watcher.end();
      }
    } finally {
      watcher.writing = false;
    }
  }
}
