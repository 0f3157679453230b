import { describe, expect, it } from "vitest";
import { csvLine, csvText } from "../src/usage/csv-line.ts";

describe("the export's CSV writer", () => {
  it("passes plain text through and quotes RFC 4180 specials, doubling quotes", () => {
    expect(csvText("llama-3-8b.gguf")).toBe("llama-3-8b.gguf");
    expect(csvText("a,b")).toBe('"a,b"');
    expect(csvText('say "hi"')).toBe('"say ""hi"""');
    expect(csvText("two\nlines")).toBe('"two\nlines"');
  });

  it("defuses text a spreadsheet would run as a formula", () => {
    expect(csvText("=HYPERLINK(1)")).toBe("'=HYPERLINK(1)");
    expect(csvText("@cmd")).toBe("'@cmd");
    expect(csvText("-1+2,3")).toBe(`"'-1+2,3"`);
  });

  it("joins a record with commas and ends it with a newline", () => {
    expect(csvLine(["2026-11-22T00:00:00.000Z", "m", "local", "1", "true"])).toBe(
      "2026-11-22T00:00:00.000Z,m,local,1,true\n",
    );
  });
});
