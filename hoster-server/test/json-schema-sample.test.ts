import { describe, expect, it } from "vitest";
import { z } from "zod";
import { prng } from "../src/demo/demo-text.ts";
import { sampleJson } from "../src/demo/json-schema-sample.ts";

// Schemas written the way clients write them (zod, converted to JSON schema as the AI SDK does),
// and each sampled value checked by zod itself: a validator nobody here wrote.
const schemas = {
  strings: z.object({ name: z.string(), code: z.string().min(12).max(14), mail: z.email(), when: z.iso.datetime() }),
  numbers: z.object({
    count: z.number().int().min(3).max(5),
    ratio: z.number().gt(0).lt(1),
    big: z.number().int().positive(),
    temperature: z.number(),
  }),
  choices: z.object({ unit: z.enum(["celsius", "fahrenheit"]), fixed: z.literal("always"), flag: z.boolean() }),
  nested: z.object({
    recipe: z.object({
      name: z.string(),
      ingredients: z
        .array(z.object({ name: z.string(), amount: z.string() }))
        .min(2)
        .max(4),
      steps: z.array(z.string()),
    }),
    tags: z.array(z.enum(["a", "b"])).length(3),
  }),
  optional: z.object({
    note: z.string().nullable(),
    maybe: z.number().optional(),
    either: z.union([z.string(), z.number()]),
  }),
};

describe("sampleJson", () => {
  it.each(Object.entries(schemas))(
    "samples a value the %s schema accepts, the same for the same seed",
    (_n, schema) => {
      const json = z.toJSONSchema(schema);
      for (const seed of [1, 2, 3, 42, 1234]) {
        const value = sampleJson(json, prng(seed));
        expect(schema.safeParse(value).error).toBeUndefined();
        expect(sampleJson(json, prng(seed))).toEqual(value);
      }
    },
  );

  it("follows local $refs, and ends recursive ones", () => {
    const node: z.ZodType = z.object({
      label: z.string(),
      get children() {
        return z.array(node);
      },
    });
    const json = z.toJSONSchema(node);
    const value = sampleJson(json, prng(7));
    expect(node.safeParse(value).error).toBeUndefined();
    const defs = { $defs: { point: { type: "object", properties: { x: { type: "integer" } }, required: ["x"] } } };
    const viaRef = sampleJson({ ...defs, type: "array", minItems: 1, items: { $ref: "#/$defs/point" } }, prng(1));
    expect(viaRef).toEqual(expect.arrayContaining([{ x: expect.any(Number) }]));
  });

  it("gives a string for a missing or empty schema, and an object for tool parameters without properties", () => {
    expect(typeof sampleJson(undefined, prng(1))).toBe("string");
    expect(sampleJson({ type: "object", properties: {} }, prng(1))).toEqual({});
  });
});
