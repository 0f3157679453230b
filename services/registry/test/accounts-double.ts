import { randomBytes } from "node:crypto";
import { AppError } from "@mkt/runtime/errors";
import { startGrpcServer, unary, type GrpcServerHandle } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { testCertificates } from "@mkt/testkit/test-certificates";
import {
  AccountsServiceService,
  type CheckInviteRequest,
  type CheckInviteResponse,
  type RegisterHosterLoginRequest,
  type RegisterHosterLoginResponse,
} from "@mkt/proto/accounts/v1/accounts";
import { ACCOUNTS_CALLERS } from "../../accounts/src/accounts-callers.ts";

const invalidInvite = () =>
  new AppError("invalid_request", "The invite code is not valid or has already been used.", { param: "invite_code" });

/**
 * A small real accounts gRPC server with the semantics registration relies on: single-use
 * invites checked by CheckInvite and consumed by RegisterHosterLogin together with the login,
 * one login per e-mail (email_taken, which leaves the invite unspent). It holds accounts'
 * certificate and caller table. It is the registry's
 * collaborator here, not what is under test; services/accounts has its own tests.
 */
export async function startAccountsDouble(log: Logger) {
  /** Invite code → the hoster that consumed it (undefined while unused). */
  const invites = new Map<string, string | undefined>();
  const emails = new Set<string>();
  const calls: Array<{ method: "CheckInvite" | "RegisterHosterLogin"; inviteCode: string; clientIp: string }> = [];

  const handle: GrpcServerHandle = await startGrpcServer(
    "127.0.0.1",
    0,
    [
      [
        AccountsServiceService,
        {
          checkInvite: unary(log, "CheckInvite", async (req: CheckInviteRequest): Promise<CheckInviteResponse> => {
            calls.push({ method: "CheckInvite", inviteCode: req.inviteCode, clientIp: req.clientIp });
            if (!invites.has(req.inviteCode) || invites.get(req.inviteCode) !== undefined) throw invalidInvite();
            return {};
          }),
          registerHosterLogin: unary(
            log,
            "RegisterHosterLogin",
            async (req: RegisterHosterLoginRequest): Promise<RegisterHosterLoginResponse> => {
              calls.push({ method: "RegisterHosterLogin", inviteCode: req.inviteCode, clientIp: req.clientIp });
              if (!invites.has(req.inviteCode) || invites.get(req.inviteCode) !== undefined) throw invalidInvite();
              const email = req.email.trim().toLowerCase();
              if (emails.has(email)) {
                throw new AppError("email_taken", "A hoster with this e-mail is already registered.");
              }
              emails.add(email);
              invites.set(req.inviteCode, req.hosterId);
              const portalPassword = req.password === "" ? randomBytes(18).toString("base64url") : "";
              return { hosterId: req.hosterId, email: req.email.trim(), portalPassword };
            },
          ),
        },
        ACCOUNTS_CALLERS,
      ],
    ],
    { tls: (await testCertificates()).tls("accounts"), log },
  );

  return Object.assign(handle, {
    calls,
    /** A fresh unused invite code. */
    invite(): string {
      const code = `inv_${randomBytes(12).toString("base64url")}`;
      invites.set(code, undefined);
      return code;
    },
    /** The hoster that consumed `code`, if any. */
    consumedBy: (code: string) => invites.get(code),
  });
}

export type AccountsDouble = Awaited<ReturnType<typeof startAccountsDouble>>;
