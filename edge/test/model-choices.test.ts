import { describe, expect, it } from "vitest";
import type { AppError } from "@mkt/runtime/errors";
import { modelChoices } from "../src/chat/model-choices.ts";

const refusal = (body: Parameters<typeof modelChoices>[0]) => {
  try {
    modelChoices(body);
  } catch (err) {
    return err as AppError;
  }
  throw new Error("accepted");
};

describe("modelChoices", () => {
  it("tries `model`, then the `models` fallbacks, each name once", () => {
    expect(modelChoices({ model: "a", models: ["b", "a", "c", "b"] })).toEqual([
      { name: "a", param: "model" },
      { name: "b", param: "models" },
      { name: "c", param: "models" },
    ]);
    expect(modelChoices({ models: ["x"] })).toEqual([{ name: "x", param: "models" }]);
    expect(modelChoices({ model: "auto", models: null })).toEqual([{ name: "auto", param: "model" }]);
  });

  it("refuses a request naming no model, naming `model`", () => {
    expect(refusal({})).toMatchObject({ code: "invalid_request", param: "model" });
  });

  it("refuses more than five models, `model` included, naming `models`", () => {
    expect(modelChoices({ models: ["a", "b", "c", "d", "e"] })).toHaveLength(5);
    expect(modelChoices({ model: "a", models: ["a", "b", "c", "d", "e"] })).toHaveLength(5);
    expect(refusal({ model: "z", models: ["a", "b", "c", "d", "e"] })).toMatchObject({
      code: "invalid_request",
      param: "models",
    });
  });
});
