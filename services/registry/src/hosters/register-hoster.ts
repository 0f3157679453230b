import { AppError } from "@mkt/runtime/errors";
import { newId } from "@mkt/runtime/ids";
import type { RegisterHosterRequest, RegisterHosterResponse } from "@mkt/proto/registry/v1/registry";
import { assertPublicEndpoint } from "@mkt/runtime/endpoint-guard";
import { hosterKeyContext } from "./hoster.entity.ts";
import { hosterView } from "./hoster-view.ts";
import type { HostersContext } from "./hosters-context.ts";
import { validateRegistration } from "./registration-request.ts";
import { ServerCheckError, verifyHosterServer } from "@mkt/runtime/server-checks";

/**
 * POST /hosters/register, a small saga. Order, and why:
 *  1. validate every field (no I/O), so a malformed request costs nothing;
 *  2. accounts.CheckInvite first, so a bad code costs no outbound call and failed codes are
 *     counted per client IP before the registry does any work for them;
 *  3. the endpoint guard (SSRF rules) on the resolved addresses;
 *  4. the server checks: /health 2xx, /v1/models with the token lists every model, /v1/models
 *     without the token refused;
 *  5. insert the hoster as `registering` (not listed, probed or routable), its token sealed;
 *  6. accounts.RegisterHosterLogin consumes the invite and creates the login in one transaction;
 *     if it fails, the registering row is deleted and accounts' error is passed on unchanged;
 *  7. mark the hoster `healthy` (its server passed every check moments ago).
 * A crash between 5 and 7 leaves a `registering` row that nothing shows or calls.
 */
export async function registerHoster(ctx: HostersContext, req: RegisterHosterRequest): Promise<RegisterHosterResponse> {
  const reg = validateRegistration(req);
  await ctx.accounts.checkInvite({ inviteCode: reg.inviteCode, clientIp: reg.clientIp });
  await assertPublicEndpoint(reg.endpoint, ctx.allowPrivate);
  try {
    await verifyHosterServer(
      reg.endpoint,
      reg.apiKey,
      reg.models.map((m) => m.modelId),
      ctx.checks,
    );
  } catch (err) {
    if (err instanceof ServerCheckError) throw new AppError("invalid_request", err.message, { param: err.param });
    throw err;
  }

  const hosterId = newId();
  const endpointUrl = reg.endpoint.toString().replace(/\/+$/, "");
  await ctx.store.insertRegistering({
    id: hosterId,
    name: reg.name,
    endpointUrl,
    apiKeySealed: ctx.box.seal(reg.apiKey, hosterKeyContext(hosterId)),
    models: reg.models,
  });

  let portalPassword: string;
  try {
    const login = await ctx.accounts.registerHosterLogin({
      hosterId,
      inviteCode: reg.inviteCode,
      email: reg.email,
      password: reg.password,
      clientIp: reg.clientIp,
    });
    portalPassword = login.portalPassword;
  } catch (err) {
    // A deadline here is ambiguous (accounts may have committed); the login would then name a
    // hoster that does not exist, which GetHoster answers with not_found. Refusals are the
    // common case and leave nothing behind.
    await ctx.store.deleteRegistering(hosterId).catch((cleanupErr: unknown) => {
      ctx.log.error({ err: cleanupErr, hosterId }, "could not delete a hoster whose registration failed");
    });
    throw err;
  }

  await ctx.store.markRegistered(hosterId, ctx.clock());
  ctx.announce(hosterId);
  ctx.log.info({ hosterId, origin: reg.endpoint.origin, models: reg.models.length }, "hoster registered");
  const hoster = await ctx.store.get(hosterId);
  if (!hoster) throw new Error("registered hoster vanished");
  return { hoster: hosterView(hoster), portalPassword };
}
