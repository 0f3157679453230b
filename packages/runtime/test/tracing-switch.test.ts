import { expect, it } from "vitest";
import { tracingEnabled } from "../src/tracing-switch.ts";

it("traces only when an OTLP endpoint is configured, and the standard switches still turn it off", () => {
  expect(tracingEnabled({})).toBe(false);
  expect(tracingEnabled({ OTEL_SERVICE_NAME: "edge" })).toBe(false);
  expect(tracingEnabled({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" })).toBe(true);
  expect(tracingEnabled({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://collector:4318/v1/traces" })).toBe(true);
  const on = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };
  expect(tracingEnabled({ ...on, OTEL_SDK_DISABLED: "true" })).toBe(false);
  expect(tracingEnabled({ ...on, OTEL_TRACES_EXPORTER: "none" })).toBe(false);
});
