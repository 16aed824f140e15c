import type { NextFunction, Request, Response } from 'express';
import type { Db } from '../../db/tables.js';
import { ForbiddenError, UnauthenticatedError } from '../../core/errors.js';
import { findClientByTenantKey } from './auth.repository.js';
import type { Principal, Scope } from '../../core/permissions.js';
import { InvalidTokenError, type TokenService } from './tokens.js';
import type { PrincipalCache, StoredClient } from './principal-cache.js';

const quote = (s: string) => s.replace(/["\\]/g, '');

/** Who a verified token speaks for, before anything is read for it. */
export interface TokenHolder {
  tenant: string;
  client: string;
}

/**
 * Runs between the token's verification and the first database read for the request: it may refuse
 * (an AppError), so a request the service will not serve costs no database work (P52).
 */
export type Gate = (holder: TokenHolder, res: Response) => void | Promise<void>;

/**
 * The one resource-server check (D4), used by REST routes and /graphql alike: a verified bearer token of
 * a known tenant and client, holding one of `scopes`. The tenant comes only from the token.
 */
export async function authenticate(
  db: Db,
  tokens: TokenService,
  clients: PrincipalCache,
  authorization: string | undefined,
  scopes: readonly Scope[],
  gate?: (holder: TokenHolder) => void | Promise<void>,
): Promise<Principal> {
  const match = /^Bearer[ ]+([^ ]+)[ ]*$/i.exec(authorization ?? '');
  if (!match) throw new UnauthenticatedError('An access token is required.', 'Bearer');
  const invalid = (why: string) => new UnauthenticatedError(why, `Bearer error="invalid_token", error_description="${quote(why)}"`);
  let claims;
  try {
    claims = await tokens.verify(match[1]!);
  } catch (e) {
    if (e instanceof InvalidTokenError) throw invalid(e.message);
    throw e;
  }
  await gate?.({ tenant: claims.tenantKey, client: claims.clientId });
  const found = await clients.find(db, claims.tenantKey, claims.clientId);
  if (!found) throw invalid('The access token names an unknown tenant or client.');
  const { client, versions } = found;
  // A scope taken from the client since the token was issued no longer counts (as permissions, P8).
  const granted = new Set(claims.scopes.filter((s) => client.scopes.includes(s)));
  if (!scopes.some((s) => granted.has(s))) {
    throw new ForbiddenError(`The access token lacks the scope ${scopes.join(' or ')}.`, {
      'WWW-Authenticate': `Bearer error="insufficient_scope", scope="${scopes.join(' ')}"`,
    });
  }
  return { ...principalOf(client, granted, versions), expiresAt: claims.expiresAt };
}

/**
 * Who a stored client is when it acts with `scopes`; with its tenant's data version and read floor when
 * they were read with it (`versions`), not when the client came from the cache.
 */
function principalOf(client: StoredClient, scopes: ReadonlySet<string>, versions = true): Principal {
  const principal: Principal = {
    tenantId: client.tenantId,
    tenantKey: client.tenantKey,
    clientId: client.clientId,
    scopes,
    permissions: new Set(client.permissions),
    configVersion: client.configVersion,
  };
  if (versions) {
    principal.dataVersion = client.dataVersion;
    principal.readFloor = client.readFloor;
  }
  return principal;
}

/**
 * A tenant's client acting with every scope it holds, without a token: for work the service does itself
 * through the API's services (the demo's subjects at start-up). Undefined for an unknown tenant or client.
 */
export async function clientPrincipal(db: Db, tenantKey: string, clientId: string): Promise<Principal | undefined> {
  const client = await findClientByTenantKey(db, tenantKey, clientId);
  return client && principalOf(client, new Set(client.scopes));
}

/** Express middleware: sets `req.principal` or passes the 401/403 on to the problem+json handler. */
export function requireToken(db: Db, tokens: TokenService, clients: PrincipalCache, scopes: readonly Scope[], gate?: Gate) {
  return (req: Request, res: Response, next: NextFunction) => {
    authenticate(db, tokens, clients, req.headers.authorization, scopes, gate && ((holder) => gate(holder, res))).then((p) => {
      req.principal = p;
      next();
    }, next);
  };
}
