/**
 * `npm run render:nats-config`: writes the nats-server users and permissions
 * (packages/runtime/src/nats-server-config.ts) to the files the deployments mount:
 * deploy/nats/nats-server.conf (docker-compose.yml) and its copy in the Kubernetes base
 * (kustomize refuses files outside the base's directory). test/deploy fails when either differs
 * from the rendering, so run this after changing the permissions table.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { renderNatsServerConfig } from "@mkt/runtime/nats-server-config";

const root = fileURLToPath(new URL("..", import.meta.url));
const text = renderNatsServerConfig();
for (const path of ["deploy/nats/nats-server.conf", "deploy/k8s/base/config/nats-server.conf"]) {
  writeFileSync(`${root}${path}`, text);
  console.log(`wrote ${path}`);
}
