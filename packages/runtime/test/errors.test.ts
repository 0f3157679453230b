import { Metadata, status } from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { AppError } from "../src/errors.ts";

describe("AppError over gRPC", () => {
  it("round-trips code, message, param and headers through metadata", () => {
    const original = new AppError("rate_limit_exceeded", "Slow down.", {
      param: "model",
      headers: { "retry-after": "12" },
    });
    const decoded = AppError.fromGrpc(original.toGrpc());
    expect(decoded.code).toBe("rate_limit_exceeded");
    expect(decoded.httpStatus).toBe(429);
    expect(decoded.headers).toEqual({ "retry-after": "12" });
    expect(decoded.toBody()).toEqual({
      error: { message: "Slow down.", type: "rate_limit_error", param: "model", code: "rate_limit_exceeded" },
    });
  });

  it("falls back on the gRPC status and hides internal messages", () => {
    const internal = AppError.fromGrpc({
      code: status.INTERNAL,
      details: "pg: relation x missing",
      metadata: new Metadata(),
    });
    expect(internal.httpStatus).toBe(500);
    expect(internal.message).not.toContain("relation");
    const unavailable = AppError.fromGrpc({ code: status.UNAVAILABLE, details: "connect ECONNREFUSED 10.0.0.1" });
    expect(unavailable.httpStatus).toBe(503);
    expect(unavailable.message).not.toContain("10.0.0.1");
    expect(AppError.fromGrpc({ code: status.NOT_FOUND, details: "no such thing" }).httpStatus).toBe(404);
  });

  it("gives every 503 a retry-after, unless the thrower set its own", () => {
    const outage = AppError.fromGrpc({ code: status.UNAVAILABLE, details: "connect ECONNREFUSED 10.0.0.1" });
    expect(outage.headers).toEqual({ "retry-after": "1" });
    const relayed = AppError.fromGrpc(new AppError("service_unavailable", "Down.").toGrpc());
    expect(relayed.headers).toEqual({ "retry-after": "1" });
    expect(new AppError("no_healthy_upstream", "None.").headers).toEqual({ "retry-after": "1" });
    const lease = new AppError("service_unavailable", "Later.", { headers: { "retry-after": "10" } });
    expect(AppError.fromGrpc(lease.toGrpc()).headers).toEqual({ "retry-after": "10" });
    expect(new AppError("upstream_error", "Bad gateway.").headers).toEqual({});
  });
});
