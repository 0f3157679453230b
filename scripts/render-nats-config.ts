/**
 * `npm run render:nats-config`: writes the nats-server users and permissions
 * (packages/runtime/src/nats-server-config.ts) to the files the deployments mount:
 * deploy/nats/nats-server.conf (docker-compose.yml's single server, whose JetStream syncs every
 * write), deploy/nats/nats-dev.conf (its dev profile's NATS without users, syncing too) and the users
 * alone in the Kubernetes base (kustomize refuses files outside the base's
 * directory; the Helm chart of your NATS writes the JetStream block, docs/deploy.md). test/deploy
 * fails when either differs from its rendering, so run this after changing the permissions table.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { renderNatsDevConfig, renderNatsServerConfig } from "@mkt/runtime/nats-server-config";

const root = fileURLToPath(new URL("..", import.meta.url));
const renderings = {
  "deploy/nats/nats-server.conf": renderNatsServerConfig("", { syncEveryWrite: true }),
  "deploy/k8s/base/config/nats-server.conf": renderNatsServerConfig(""),
  "deploy/nats/nats-dev.conf": renderNatsDevConfig(),
};
for (const [path, text] of Object.entries(renderings)) {
  writeFileSync(`${root}${path}`, text);
  console.log(`wrote ${path}`);
}
