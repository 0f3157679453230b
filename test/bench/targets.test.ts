import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { targetsMarkdown } from "../../bench/gateway/targets.ts";

describe("the gateway benchmark's targets", () => {
  it("are listed in bench/README.md as bench/gateway/targets.ts states them", () => {
    const readme = readFileSync(new URL("../../bench/README.md", import.meta.url), "utf8");
    expect(readme).toContain(`\n${targetsMarkdown()}\n`);
  });
});
