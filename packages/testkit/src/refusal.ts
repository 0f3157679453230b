import { expect } from "vitest";
import { AppError } from "@mkt/runtime/errors";

/** Awaits a call that must be refused and returns its AppError (gRPC errors arrive as AppErrors). */
export async function refusal(promise: Promise<unknown>): Promise<AppError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  return err as AppError;
}
