import { AppError } from "@mkt/runtime/errors";
import { modelNotFound, noHealthyUpstream } from "@mkt/runtime/route-errors";
import {
  Route,
  type CatalogTable,
  type OpenEndpoint,
  type OpenModel,
  type PlatformModel,
  type RoutableHoster,
  type RouteScope,
} from "@mkt/proto/registry/v1/registry";
import { ModelAliases } from "./model-aliases.ts";
import { orderEndpoints, randomDraw, stickyDraw, type RandomSource } from "./open-routes.ts";
import { NO_PREFERENCES, type ProviderPreferences } from "./provider-preferences.ts";
import type { EjectionView, UpstreamDirectory, UpstreamTarget } from "./upstream-target.ts";

/** A model a caller may name, with what decides its health. */
interface Candidate {
  modelId: string;
  modelAlias: string;
  route(scope: RouteScope | undefined): Route;
  upstreams: UpstreamTarget[];
  /** False while registry's probes find its hoster unhealthy (platform servers are not probed). */
  probedHealthy: boolean;
}

/** One namespace of models (the platform's, or one hoster's), indexed the way names resolve. */
interface Namespace {
  /** In routing order: `auto` takes the first healthy one. */
  ordered: Candidate[];
  byId: Map<string, Candidate>;
  byAlias: Map<string, Candidate>;
  byFoldedId: Map<string, Candidate>;
}

interface IndexedHoster {
  hoster: RoutableHoster;
  models: Namespace;
}

const EMPTY: Namespace = { ordered: [], byId: new Map(), byAlias: new Map(), byFoldedId: new Map() };

/** True when a request carries a subscription scope (a scoped key). */
const isScoped = (scope: RouteScope | undefined): scope is RouteScope =>
  !!scope && (scope.subscriptionId !== "" || scope.productId !== "" || scope.hosterId !== "");

/** Model-name suffixes that choose a sort for an open model (OpenRouter's shortcuts). */
const SORT_SUFFIXES = { ":floor": "price", ":nitro": "throughput" } as const;

/** The edge's view of upstream failures: ejection, and faults within the last 30 s. */
export type OutlierView = EjectionView & { recovered?(key: string): void; faultedRecently?(key: string): boolean };

/** An open endpoint's route: reached with an account key, priced at its plan's prices. */
function openRoute(e: OpenEndpoint): Route {
  return Route.fromPartial({
    modelId: e.modelId,
    provider: "hoster",
    hosterId: e.hosterId,
    productId: e.productId,
    inputPricePer1mMicros: e.inputPricePer1mMicros,
    outputPricePer1mMicros: e.outputPricePer1mMicros,
    cachedInputPricePer1mMicros: e.cachedInputPricePer1mMicros,
    contextWindow: e.contextWindow,
    maxOutputTokensCap: e.maxOutputTokens,
    maxN: e.maxN > 0n ? e.maxN : 1n,
    kind: "chat",
    open: true,
  });
}

function namespace(candidates: Candidate[]): Namespace {
  const index: Namespace = { ordered: candidates, byId: new Map(), byAlias: new Map(), byFoldedId: new Map() };
  // The first model with a name wins, as a search in routing order would find it.
  for (const c of candidates) {
    if (!index.byId.has(c.modelId)) index.byId.set(c.modelId, c);
    const alias = c.modelAlias.toLowerCase();
    if (alias !== "" && !index.byAlias.has(alias)) index.byAlias.set(alias, c);
    const folded = c.modelId.toLowerCase();
    if (!index.byFoldedId.has(folded)) index.byFoldedId.set(folded, c);
  }
  return index;
}

function platformCandidate(m: PlatformModel): Candidate {
  const route = Route.fromPartial({
    modelId: m.modelId,
    provider: m.provider,
    inputPricePer1mMicros: m.inputPricePer1mMicros,
    outputPricePer1mMicros: m.outputPricePer1mMicros,
    cachedInputPricePer1mMicros: m.cachedInputPricePer1mMicros,
    contextWindow: m.contextWindow,
    maxOutputTokensCap: m.maxOutputTokensCap,
    maxN: m.maxN,
    kind: m.kind,
  });
  return {
    modelId: m.modelId,
    modelAlias: m.modelAlias,
    route: () => route,
    upstreams: m.upstreams.map((u) => ({
      baseUrl: u.baseUrl,
      token: u.token,
      upstreamModel: u.upstreamModel,
      trust: u.trust === "hoster" ? "hoster" : "platform",
      key: u.key,
    })),
    probedHealthy: true,
  };
}

/**
 * A hoster's models for its subscribers' scoped keys. Routes are priced at 0 because a
 * subscription request is priced by billing from the subscription's terms (the plan the customer
 * bought), not from the route; the output cap is the model's context window, which billing
 * narrows further with the plan's limits. The hoster has one server, so no failover; one whose
 * token registry could not open has none.
 */
function hosterNamespace(h: RoutableHoster): Namespace {
  return namespace(
    h.models.map((m) => ({
      modelId: m.modelId,
      modelAlias: m.modelAlias,
      route: (scope) =>
        Route.fromPartial({
          modelId: m.modelId,
          provider: "hoster",
          hosterId: h.hosterId,
          productId: scope?.productId ?? "",
          inputPricePer1mMicros: 0n,
          outputPricePer1mMicros: 0n,
          contextWindow: m.contextWindow,
          maxOutputTokensCap: m.contextWindow,
          // Tables from before hosters declared them: a chat model of one choice.
          maxN: m.maxN > 0n ? m.maxN : 1n,
          kind: m.kind || "chat",
        }),
      upstreams:
        h.token === ""
          ? []
          : [{ baseUrl: h.endpointUrl, token: h.token, upstreamModel: m.modelId, trust: "hoster", key: h.upstreamKey }],
      probedHealthy: h.status === "healthy",
    })),
  );
}

/**
 * The last routing table registry sent (WatchCatalog), indexed for the hot path: resolving a
 * model name is a few map lookups, with no I/O. This is the one place model names resolve: a name
 * is an exact model id first, then an alias, then a model id, both case-insensitively; `auto` is
 * the first healthy model. An account key sees the local then the cloud models; a scoped key only
 * its own hoster's. A model is unhealthy while registry's probes find its hoster unhealthy, or while
 * every one of its servers is ejected by the edge's own outlier detection.
 */
export class RoutingTable implements UpstreamDirectory {
  readonly #outliers: OutlierView;
  readonly #random: RandomSource;
  /** The operator's MODEL_ALIASES, consulted for a name no model answers to. */
  readonly aliases: ModelAliases;
  #table: CatalogTable | undefined;
  #receivedAt: number | undefined;
  #platform: Namespace = EMPTY;
  #hosters = new Map<string, IndexedHoster>();
  /** Open models by lower-cased canonical id. */
  #open = new Map<string, OpenModel>();
  #loaded!: Promise<void>;
  #markLoaded!: () => void;

  /**
   * `outliers` is the edge's outlier ejection: read for health, and told when registry's probes
   * find a hoster healthy again after finding it unhealthy (`recovered`): the probe is the proof it
   * is back, so this edge's own ejection of it ends at once rather than at its back-off.
   * `random` draws open models' endpoints for requests with no sticky key (tests inject a sequence).
   */
  constructor(
    outliers: OutlierView = { isEjected: () => false },
    aliases: ModelAliases = new ModelAliases(),
    random: RandomSource = Math.random,
  ) {
    this.#outliers = outliers;
    this.aliases = aliases;
    this.#random = random;
    this.#loaded = new Promise((resolve) => (this.#markLoaded = resolve));
  }

  /** Replaces the table with the one registry just sent. */
  apply(table: CatalogTable, receivedAt = Date.now()): void {
    for (const h of table.hosters) {
      const before = this.#hosters.get(h.hosterId.toLowerCase())?.hoster;
      if (before?.status === "unhealthy" && h.status === "healthy") this.#outliers.recovered?.(h.upstreamKey);
    }
    this.#platform = namespace(table.platformModels.map(platformCandidate));
    this.#hosters = new Map(
      table.hosters.map((h) => [h.hosterId.toLowerCase(), { hoster: h, models: hosterNamespace(h) }]),
    );
    this.#open = new Map(table.openModels.map((m) => [m.canonicalId.toLowerCase(), m]));
    this.#table = table;
    this.#receivedAt = receivedAt;
    this.#markLoaded();
  }

  /** The version of the table in use (0 before the first). */
  get version(): bigint {
    return this.#table?.version ?? 0n;
  }

  /** When the table in use arrived (milliseconds since the epoch), undefined before the first. */
  get receivedAt(): number | undefined {
    return this.#receivedAt;
  }

  /**
   * Resolves once a table is in use. Routing from an empty table would answer model_not_found for
   * every model while the edge is merely starting, so a request waits for the first table up to
   * `timeoutMs`, then is refused 503 service_unavailable (with retry-after), never misrouted.
   */
  async ready(timeoutMs: number): Promise<void> {
    if (this.#table) return;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new AppError("service_unavailable", "The gateway is starting; try again shortly.")),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.#loaded, timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The route a model name resolves to for a caller (`scope` undefined for an account key).
   * Throws model_not_found (param "model") for a name the caller may not use, whether or not it
   * exists elsewhere, and no_healthy_upstream for a match (or `auto`) with no usable server.
   */
  resolve(model: string, scope: RouteScope | undefined, kind: "chat" | "embedding" = "chat"): Route {
    return this.resolveRoutes(model, scope, kind)[0]!;
  }

  /**
   * The routes a model name resolves to, in the order to try them: one for a platform model or a
   * scoped key's hoster model; for an account key naming an open model (its canonical id, with an
   * optional `:floor` / `:nitro` suffix), its endpoints in the order the default rule, the
   * request's `provider` preferences and this edge's recent faults give (docs/routing.md). A
   * platform model's name wins over an open model's. Errors as `resolve`'s; an open model whose
   * endpoints the preferences all rule out is model_not_found naming `provider`. `stickyKey` gives
   * the request's conversation key (sticky-key.ts), read only for an open model: with one, each tier
   * is in the conversation's rendezvous order instead of a random draw.
   */
  resolveRoutes(
    model: string,
    scope: RouteScope | undefined,
    kind: "chat" | "embedding" = "chat",
    prefs: ProviderPreferences = NO_PREFERENCES,
    stickyKey: () => string | undefined = () => undefined,
  ): Route[] {
    const route = this.#resolveName(model, scope, kind);
    if (route) return [route];
    const open = kind === "chat" && !isScoped(scope) ? this.#openRoutes(model, prefs, stickyKey) : undefined;
    if (open) return open;
    // An alias is read only for a name no model has: it names a model, whose errors are its own.
    const target = this.aliases.targetOf(model);
    const aliased = target === undefined ? undefined : this.#resolveName(target, scope, kind);
    if (aliased) return [aliased];
    throw modelNotFound(model);
  }

  /** An open model's routes for an account key, or undefined when the name is no open model's. */
  #openRoutes(model: string, prefs: ProviderPreferences, stickyKey: () => string | undefined): Route[] | undefined {
    let folded = model.toLowerCase();
    let found = this.#open.get(folded);
    if (!found) {
      const suffix = Object.keys(SORT_SUFFIXES).find((s) => folded.endsWith(s)) as
        keyof typeof SORT_SUFFIXES | undefined;
      if (!suffix) return undefined;
      folded = folded.slice(0, -suffix.length);
      found = this.#open.get(folded);
      if (!found) return undefined;
      prefs = { ...prefs, sort: prefs.sort ?? SORT_SUFFIXES[suffix] };
    }
    const choices = found.endpoints.flatMap((endpoint) => {
      const hoster = this.#hosters.get(endpoint.hosterId.toLowerCase())?.hoster;
      if (!hoster) return [];
      return [
        {
          endpoint,
          hosterName: hoster.name.toLowerCase(),
          recentFault: this.#outliers.faultedRecently?.(hoster.upstreamKey) ?? false,
        },
      ];
    });
    const key = prefs.sort ? undefined : stickyKey();
    const ordered = orderEndpoints(choices, prefs, key === undefined ? randomDraw(this.#random) : stickyDraw(key));
    if (ordered.length === 0) {
      throw new AppError(
        "model_not_found",
        `No endpoint of the model \`${found.canonicalId}\` matches the request's provider preferences.`,
        { param: "provider" },
      );
    }
    return ordered.map(openRoute);
  }

  /** `auto` is the first healthy model of the kind asked (an embedding model answers no chat). */
  #resolveName(model: string, scope: RouteScope | undefined, kind: "chat" | "embedding"): Route | undefined {
    const models = this.#namespaceFor(scope);
    const folded = model.toLowerCase();
    const match = models.byId.get(model) ?? models.byAlias.get(folded) ?? models.byFoldedId.get(folded);
    if (match) {
      if (!this.#healthy(match)) throw noHealthyUpstream(match.modelId);
      return match.route(scope);
    }
    if (folded === "auto" && models.ordered.length > 0) {
      const healthy = models.ordered.find(
        (c) => (c.route(scope).kind === "embedding" ? "embedding" : "chat") === kind && this.#healthy(c),
      );
      if (!healthy) throw noHealthyUpstream(model);
      return healthy.route(scope);
    }
    return undefined;
  }

  /**
   * The servers able to serve a route now, in the order to try them; each serves the route's very
   * model at the route's price. Ejected servers are included (the caller skips them); empty when
   * the model is gone, or its hoster is unhealthy, gone or without a usable token.
   */
  candidatesFor(route: Route): UpstreamTarget[] {
    if (route.provider === "hoster") {
      const found = this.#hosters.get(route.hosterId.toLowerCase());
      const model = found?.models.byId.get(route.modelId);
      return model?.probedHealthy ? model.upstreams : [];
    }
    const model = this.#platform.byId.get(route.modelId);
    return model && model.route(undefined).provider === route.provider ? model.upstreams : [];
  }

  #namespaceFor(scope: RouteScope | undefined): Namespace {
    if (!isScoped(scope)) return this.#platform;
    if (scope.hosterId === "") return EMPTY;
    return this.#hosters.get(scope.hosterId.toLowerCase())?.models ?? EMPTY;
  }

  #healthy(c: Candidate): boolean {
    return c.probedHealthy && c.upstreams.some((u) => !this.#outliers.isEjected(u.key));
  }
}
