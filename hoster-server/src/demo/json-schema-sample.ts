type Schema = Record<string, unknown>;

const isObject = (value: unknown): value is Schema =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Words a sampled string is made of (the demo never needs meaning, only validity). */
const WORDS = [
  "alpha",
  "bravo",
  "delta",
  "echo",
  "river",
  "stone",
  "cloud",
  "maple",
  "orbit",
  "pixel",
  "quartz",
  "tango",
];

/** Past this nesting a recursive schema gets its smallest valid value (no optional depth). */
const MAX_DEPTH = 6;

/** Values for string formats clients ask for (zod's email(), url(), uuid(), iso datetimes). */
const FORMAT_SAMPLES: Record<string, string> = {
  "date-time": "2026-01-15T12:00:00Z",
  date: "2026-01-15",
  time: "12:00:00Z",
  email: "demo@example.com",
  uri: "https://example.com/demo",
  url: "https://example.com/demo",
  uuid: "00000000-0000-4000-8000-000000000000",
  ipv4: "192.0.2.1",
  ipv6: "2001:db8::1",
  hostname: "example.com",
};

/**
 * A value valid against `schema`, chosen by `random` (so equal prompts get equal documents): the
 * demo model's answer to `response_format: json_schema` and its tool-call arguments. Covers what
 * structured-output schemas use: types (and type lists), enum, const, objects with their
 * properties (every listed one, as strict mode requires), arrays within min/maxItems, numbers and
 * integers within their bounds, string lengths and common formats, anyOf/oneOf (first variant),
 * allOf (merged) and local `$ref`s (`#/$defs/...`, `#/definitions/...`). Not `pattern` or
 * `multipleOf`: a demo, not a solver.
 */
export function sampleJson(schema: unknown, random: () => number): unknown {
  return sample(schema, isObject(schema) ? schema : {}, random, 0);
}

function sample(schema: unknown, root: Schema, random: () => number, depth: number): unknown {
  if (!isObject(schema)) return word(random); // `true` or a missing schema: anything goes
  if (typeof schema.$ref === "string") return sample(resolveRef(schema.$ref, root), root, random, depth + 1);
  if ("const" in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return pick(schema.enum, random);
  const variants = (schema.anyOf ?? schema.oneOf) as unknown[] | undefined;
  if (Array.isArray(variants) && variants.length > 0) {
    // The first variant that is not `null`: an optional field still gets a real value.
    const variant = variants.find((v) => !(isObject(v) && v.type === "null")) ?? variants[0];
    return sample(variant, root, random, depth);
  }
  if (Array.isArray(schema.allOf)) return sample(mergeAll(schema), root, random, depth);

  switch (typeOf(schema)) {
    case "object":
      return sampleObject(schema, root, random, depth);
    case "array":
      return sampleArray(schema, root, random, depth);
    case "integer":
      return sampleInteger(schema, random);
    case "number":
      return sampleNumber(schema, random);
    case "boolean":
      return random() < 0.5;
    case "null":
      return null;
    default:
      return sampleString(schema, random);
  }
}

function typeOf(schema: Schema): string {
  const { type } = schema;
  if (typeof type === "string") return type;
  if (Array.isArray(type)) return (type.find((t) => t !== "null") ?? "null") as string;
  if (isObject(schema.properties) || Array.isArray(schema.required)) return "object";
  if (schema.items !== undefined || Array.isArray(schema.prefixItems)) return "array";
  return "string";
}

function resolveRef(ref: string, root: Schema): unknown {
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return {};
  let node: unknown = root;
  for (const part of ref.slice(2).split("/")) {
    const key = part.replace(/~1/g, "/").replace(/~0/g, "~");
    node = isObject(node) ? node[key] : undefined;
  }
  return node ?? {};
}

function mergeAll(schema: Schema): Schema {
  const merged: Schema = { ...schema, allOf: undefined, properties: {}, required: [] };
  for (const part of [schema, ...(schema.allOf as unknown[])].filter(isObject)) {
    Object.assign(merged.properties as Schema, isObject(part.properties) ? part.properties : {});
    (merged.required as unknown[]).push(...(Array.isArray(part.required) ? part.required : []));
    if (part.type !== undefined && merged.type === undefined) merged.type = part.type;
  }
  return merged;
}

function sampleObject(schema: Schema, root: Schema, random: () => number, depth: number): Schema {
  const properties = isObject(schema.properties) ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r) => typeof r === "string") : []);
  const value: Schema = {};
  for (const [name, property] of Object.entries(properties)) {
    // Deep in a recursive schema only what is required is filled in, so the value ends.
    if (depth >= MAX_DEPTH && !required.has(name)) continue;
    value[name] = sample(property, root, random, depth + 1);
  }
  for (const name of required) if (!(name in value)) value[name] = word(random);
  return value;
}

function sampleArray(schema: Schema, root: Schema, random: () => number, depth: number): unknown[] {
  const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : [];
  const min = Math.max(nonNegative(schema.minItems) ?? 0, prefix.length);
  const max = nonNegative(schema.maxItems) ?? min + 3;
  const wanted = depth >= MAX_DEPTH ? min : min + Math.floor(random() * 3) + (min === 0 ? 1 : 0);
  const count = Math.min(Math.max(wanted, min), Math.max(max, min));
  return Array.from({ length: count }, (_, i) =>
    sample(i < prefix.length ? prefix[i] : schema.items, root, random, depth + 1),
  );
}

function bounds(schema: Schema): {
  low: number | undefined;
  high: number | undefined;
  lowOpen: boolean;
  highOpen: boolean;
} {
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  const exclusiveLow = num(schema.exclusiveMinimum);
  const exclusiveHigh = num(schema.exclusiveMaximum);
  return {
    low: num(schema.minimum) ?? exclusiveLow,
    high: num(schema.maximum) ?? exclusiveHigh,
    lowOpen: num(schema.minimum) === undefined && exclusiveLow !== undefined,
    highOpen: num(schema.maximum) === undefined && exclusiveHigh !== undefined,
  };
}

function sampleInteger(schema: Schema, random: () => number): number {
  const b = bounds(schema);
  let low = b.low === undefined ? undefined : b.lowOpen ? Math.floor(b.low) + 1 : Math.ceil(b.low);
  let high = b.high === undefined ? undefined : b.highOpen ? Math.ceil(b.high) - 1 : Math.floor(b.high);
  low ??= high === undefined ? 1 : Math.min(1, high);
  high ??= low + 99;
  if (high < low) return low; // an empty range has no valid value; the nearest will do
  return low + Math.floor(random() * (high - low + 1));
}

function sampleNumber(schema: Schema, random: () => number): number {
  const b = bounds(schema);
  const low = b.low ?? (b.high === undefined ? 0 : b.high - 100);
  const high = b.high ?? low + 100;
  // Two decimals inside the open interval: never one of its excluded ends.
  const span = high - low;
  const value = Math.round((low + span * (0.1 + 0.8 * random())) * 100) / 100;
  return value > low && value < high ? value : (low + high) / 2;
}

function sampleString(schema: Schema, random: () => number): string {
  const format = typeof schema.format === "string" ? FORMAT_SAMPLES[schema.format] : undefined;
  if (format !== undefined) return format;
  const min = nonNegative(schema.minLength) ?? 0;
  const max = nonNegative(schema.maxLength);
  let text = `${word(random)} ${word(random)}`;
  while (text.length < min) text += ` ${word(random)}`;
  return max === undefined ? text : text.slice(0, max).trimEnd().padEnd(Math.min(min, max), "x");
}

function nonNegative(value: unknown): number | undefined {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : undefined;
}

const pick = <T>(values: readonly T[], random: () => number): T => values[Math.floor(random() * values.length)]!;
const word = (random: () => number) => pick(WORDS, random);
