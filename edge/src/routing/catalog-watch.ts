import type { ClientReadableStream } from "@grpc/grpc-js";
import type { Logger } from "@mkt/runtime/logger";
import {
  WatchCatalogRequest,
  type RegistryServiceClient,
  type WatchCatalogResponse,
} from "@mkt/proto/registry/v1/registry";
import type { RoutingTable } from "./routing-table.ts";

/** A broken stream is opened again after this long, doubling up to MAX_RETRY_MS. */
const FIRST_RETRY_MS = 250;
/** At least once a second while registry is down, as the gRPC channels reconnect (grpc-client.ts). */
const MAX_RETRY_MS = 1_000;

/**
 * Keeps one WatchCatalog stream open to registry and applies every table it sends to `table`.
 * When the stream breaks (registry restarting, unreachable, shutting down) the edge goes on
 * routing from the last table it has, and opens the stream again at least once a second; the
 * first table after that replaces whatever changed meanwhile. Returns a function that stops
 * watching.
 */
export function watchCatalog(registry: RegistryServiceClient, table: RoutingTable, log: Logger): () => void {
  let call: ClientReadableStream<WatchCatalogResponse> | undefined;
  let retry: NodeJS.Timeout | undefined;
  let retryMs = FIRST_RETRY_MS;
  let stopped = false;
  /** Since the stream broke: one log line when it does, one when a table comes again. */
  let broken = false;

  const open = () => {
    if (stopped) return;
    const current = registry.watchCatalog(WatchCatalogRequest.fromPartial({}));
    call = current;
    current.on("data", (response: WatchCatalogResponse) => {
      if (!response.table) return;
      table.apply(response.table);
      retryMs = FIRST_RETRY_MS;
      if (broken) log.info({ version: String(response.table.version) }, "routing table stream is back");
      broken = false;
    });
    let ended = false;
    const reopen = (reason: { code?: number; details?: string }) => {
      if (ended) return;
      ended = true;
      if (stopped) return;
      if (!broken) {
        // Code and details only: the transport's words carry no credentials, the tables do.
        log.warn(
          { grpcCode: reason.code, details: reason.details, version: String(table.version) },
          "routing table stream broke; routing from the last table until it is back",
        );
      }
      broken = true;
      retry = setTimeout(open, retryMs);
      retry.unref();
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    };
    current.on("error", (err: { code?: number; details?: string }) => reopen(err));
    // Registry ends the stream with OK when it shuts down: watched again (another replica, or it once back).
    current.on("end", () => reopen({ details: "registry ended the stream" }));
  };
  open();
  return () => {
    stopped = true;
    clearTimeout(retry);
    call?.cancel();
  };
}
