import type { Logger } from "@mkt/runtime/logger";
import type { PromiseClient } from "@mkt/runtime/grpc-client";
import type { SecretBox } from "@mkt/runtime/secret-box";
import type { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import type { ServerCheckSettings } from "@mkt/runtime/server-checks";
import type { HosterStore } from "./hoster-store.ts";
import type { EndpointMinutesStore } from "./endpoint-minutes-store.ts";
import type { VerificationStore } from "../verification/verification-store.ts";
import type { ProductStore } from "../products/product-store.ts";
import type { AnnounceCatalogChange } from "../catalog/catalog-announcer.ts";

/** What the hoster handlers and the prober share. */
export interface HostersContext {
  store: HosterStore;
  /** Hosters' plans (the public hoster list shows the active ones). */
  products: ProductStore;
  /** Each hoster model's live figures by the minute. */
  minutes: EndpointMinutesStore;
  /** Verification runs of open endpoints and each model's verdict. */
  verification: VerificationStore;
  /** Seals and opens hosters' tokens (SECRETS_KEY). */
  box: SecretBox;
  accounts: PromiseClient<AccountsServiceClient>;
  checks: ServerCheckSettings;
  /** ALLOW_PRIVATE_UPSTREAMS. */
  allowPrivate: boolean;
  /** Called after a committed change that can alter a hoster's routes (catalog.changed). */
  announce: AnnounceCatalogChange;
  log: Logger;
  clock: () => Date;
}
