import { Metadata, status } from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { isDependencyOutage } from "../src/dependency-outage.ts";

const withCode = (code: string, message = "failed") => Object.assign(new Error(message), { code });

describe("isDependencyOutage", () => {
  it("recognises a PostgreSQL that is down, restarting or full, as the driver and MikroORM report it", () => {
    expect(isDependencyOutage(withCode("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:5432"))).toBe(true);
    expect(isDependencyOutage(withCode("57P01", "terminating connection due to administrator command"))).toBe(true);
    expect(isDependencyOutage(withCode("57P03", "the database system is starting up"))).toBe(true);
    expect(isDependencyOutage(withCode("53300", "sorry, too many clients already"))).toBe(true);
    expect(isDependencyOutage(withCode("08006"))).toBe(true);
    expect(isDependencyOutage(new Error("Connection terminated unexpectedly"))).toBe(true);
    expect(isDependencyOutage(new Error("Client has encountered a connection error and is not queryable"))).toBe(true);
    // Wrapped: MikroORM's DriverException, a cause chain, node's AggregateError of several addresses.
    expect(isDependencyOutage(new Error("wrapped", { cause: withCode("ECONNRESET") }))).toBe(true);
    expect(isDependencyOutage(new AggregateError([withCode("ECONNREFUSED")], "connect failed"))).toBe(true);
  });

  it("recognises NATS and another service being unavailable", () => {
    expect(isDependencyOutage(Object.assign(new Error("closed connection"), { name: "ClosedConnectionError" }))).toBe(
      true,
    );
    const grpcUnavailable = Object.assign(new Error("14 UNAVAILABLE"), {
      code: status.UNAVAILABLE,
      metadata: new Metadata(),
    });
    expect(isDependencyOutage(grpcUnavailable)).toBe(true);
  });

  it("leaves real faults alone: a bad query, a constraint, a bug", () => {
    expect(isDependencyOutage(withCode("42P01", 'relation "x" does not exist'))).toBe(false);
    expect(isDependencyOutage(withCode("23505", "duplicate key value"))).toBe(false);
    expect(isDependencyOutage(new TypeError("cannot read properties of undefined"))).toBe(false);
    expect(
      isDependencyOutage(Object.assign(new Error("14"), { code: status.INTERNAL, metadata: new Metadata() })),
    ).toBe(false);
    expect(isDependencyOutage(undefined)).toBe(false);
  });
});
