import { NATS_USERS, natsPermissions, type NatsUser } from "./nats-permissions.ts";

/** The account every service user belongs to; JetStream is enabled for it alone. */
export const NATS_ACCOUNT = "MARKETPLACE";

/**
 * The environment variable the nats-server reads a user's password from (`$NATS_EDGE_PASSWORD`).
 * The services read theirs from NATS_PASSWORD; the operator gives both the same value (or the
 * server a bcrypt hash of it: docs/deploy.md).
 */
export function natsPasswordVariable(user: NatsUser): string {
  return `NATS_${user.toUpperCase()}_PASSWORD`;
}

/** A subject list, one a line (indented by `pad`): the file is read by people reviewing permissions. */
const list = (subjects: readonly string[], pad: string) =>
  `[\n${subjects.map((subject) => `${pad}  ${JSON.stringify(subject)}`).join("\n")}\n${pad}]`;

/**
 * The nats-server configuration for the service users of natsPermissions(prefix): one account
 * with JetStream, one user per service with its allow lists, passwords taken from the server's
 * environment (never written in the file). docker-compose.yml and the Kubernetes base mount its
 * committed rendering (`npm run render:nats-config`); tests start private servers with it.
 */
export function renderNatsServerConfig(prefix = ""): string {
  const permissions = natsPermissions(prefix);
  const users = NATS_USERS.map((user) => {
    const { publish, subscribe, allowResponses } = permissions[user];
    const pad = "            ";
    // No publish allowed at all is written as a deny of everything: an empty allow list would
    // read as "no restriction" to a person, if not to the server.
    const publishRule = publish.length > 0 ? `allow: ${list(publish, pad)}` : `deny: [">"]`;
    return [
      `      {`,
      `        user: ${JSON.stringify(user)}`,
      `        password: $${natsPasswordVariable(user)}`,
      `        permissions: {`,
      `          publish: {`,
      `            ${publishRule}`,
      `          }`,
      `          subscribe: {`,
      `            allow: ${list(subscribe, pad)}`,
      `          }`,
      ...(allowResponses ? [`          allow_responses: true`] : []),
      `        }`,
      `      }`,
    ].join("\n");
  });
  return [
    `# nats-server users and permissions for the marketplace (docs/deploy.md, "NATS users").`,
    `# Generated from packages/runtime/src/nats-permissions.ts by \`npm run render:nats-config\`;`,
    `# test/deploy checks that this file is that output. Edit the table, not this file.`,
    `# Passwords (or bcrypt hashes of them) come from the server's environment:`,
    `# ${NATS_USERS.map((u) => natsPasswordVariable(u)).join(", ")}.`,
    `accounts: {`,
    `  ${NATS_ACCOUNT}: {`,
    `    jetstream: enabled`,
    `    users: [`,
    users.join("\n"),
    `    ]`,
    `  }`,
    `}`,
    ``,
  ].join("\n");
}
