import type { EntitySchema } from "@mikro-orm/core";
import { Account } from "./accounts/account.entity.ts";
import { HosterLogin } from "./hosters/hoster-login.entity.ts";
import { Invite } from "./invites/invite.entity.ts";
import { IpAttempt } from "./ip-attempt.entity.ts";
import { ApiKey } from "./keys/api-key.entity.ts";
import { Session } from "./sessions/session.entity.ts";

/** Every entity of the accounts schema, for openDatabase. */
export const entities = [Account, ApiKey, IpAttempt, Invite, HosterLogin, Session] as unknown as EntitySchema[];
