import { describe, expect, it } from "vitest";
import { errorText } from "../src/lib/error-text.ts";

describe("errorText", () => {
  it("passes the server's own sentence through, the pause message verbatim", () => {
    const message = "Your access has been temporarily paused by the hoster.";
    expect(errorText(403, { code: "subscription_paused", message })).toBe(message);
  });

  it("uses plainer words for codes written for developers", () => {
    expect(errorText(401, { code: "unauthenticated", message: "Log in first (POST /auth/login)." })).toBe(
      "You are not logged in, or your session has ended. Please log in again.",
    );
  });

  it("names the request id of a server failure and asks to retry", () => {
    expect(errorText(503, { code: "service_unavailable", message: "The service is unavailable." }, "req-1")).toBe(
      "The service is unavailable. Please try again in a moment (reference req-1).",
    );
    expect(errorText(502, {})).toBe("Something went wrong on our side. Please try again in a moment.");
  });

  it("says the status when the answer had no error body", () => {
    expect(errorText(404, {})).toBe("The request failed (HTTP 404).");
  });
});
