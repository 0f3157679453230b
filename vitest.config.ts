import { defineConfig } from "vitest/config";

// Every test talks to the real Postgres and NATS; each file makes its own database and subject
// prefix (packages/testkit), so files run in parallel without colliding.
export default defineConfig({
  test: {
    include: ["**/test/**/*.test.ts"],
    globalSetup: ["packages/testkit/src/global-setup.ts"],
    exclude: ["**/node_modules/**"],
    pool: "forks",
    testTimeout: 30_000,
    hookTimeout: 60_000,
    maxWorkers: 2,
  },
});
