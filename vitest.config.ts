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
    // A failed test runs once more before it fails the run. The suite starts whole systems (edges,
    // services, private NATS and embedded PostgreSQL) two files at a time on the 2-core runner,
    // and a few timing-bound tests (a supervisor's restart, a grant under load) miss now and then
    // when two heavy files overlap; a test that fails twice is a real failure. vitest reports
    // each retried test ("retry x1"), and the closing notes list the ones seen.
    retry: 1,
  },
});
