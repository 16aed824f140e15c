import express, { type Request, type Response, Router } from 'express';
import type { Db } from '../../db/tables.js';
import { findClientByTenantKey } from './auth.repository.js';
import { SCOPES } from '../../core/permissions.js';
import { ClientAuthenticator, type ClientAuthOptions } from './client-auth.js';
import type { TokenService } from './tokens.js';

// `temporarily_unavailable` (RFC 6749 §4.1.2.1's code, the registry's only one for "not now") with 429 or
// 503 and Retry-After: a throttled or crowded-out attempt, refused before any hashing (P81).
type OAuthError = 'invalid_request' | 'invalid_client' | 'unsupported_grant_type' | 'invalid_scope' | 'temporarily_unavailable';

// RFC 6749 §5.2: these errors are plain JSON, never problem+json, and never cached.
function oauthError(res: Response, status: 400 | 401 | 429 | 503, error: OAuthError, description: string) {
  res.set('Cache-Control', 'no-store').set('Pragma', 'no-cache');
  if (status === 401) res.set('WWW-Authenticate', 'Basic realm="token", charset="UTF-8"');
  res.status(status).json({ error, error_description: description });
}

function decodeFormComponent(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    return s;
  }
}

/** Client credentials from HTTP Basic (RFC 6749 §2.3.1: form-encoded id and secret) or the form body. */
function clientCredentials(req: Request, form: Record<string, unknown>): { id: string; secret: string } | 'both' | undefined {
  const basic = /^Basic[ ]+([A-Za-z0-9+/=]+)[ ]*$/i.exec(req.headers.authorization ?? '');
  const formId = typeof form['client_id'] === 'string' ? form['client_id'] : undefined;
  const formSecret = typeof form['client_secret'] === 'string' ? form['client_secret'] : undefined;
  if (basic) {
    if (formSecret !== undefined) return 'both';
    const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return undefined;
    const id = decodeFormComponent(decoded.slice(0, colon));
    // A client_id form field naming another client than the Basic credentials is a second, conflicting method.
    if (formId !== undefined && formId !== id) return 'both';
    return { id, secret: decodeFormComponent(decoded.slice(colon + 1)) };
  }
  if (formId !== undefined && formSecret !== undefined) return { id: formId, secret: formSecret };
  return undefined;
}

/** `/connect/token` (D4) and the discovery documents; `clientAuth` bounds what failed attempts cost (P80–P82). */
export function authRoutes(db: Db, tokens: TokenService, maxBodyBytes: number, clientAuth: ClientAuthOptions): Router {
  const router = Router();
  const authenticator = new ClientAuthenticator(clientAuth);
  const form = express.urlencoded({ extended: false, limit: maxBodyBytes, type: () => true });

  router.post('/connect/token', (req, res, next) => {
    if (!req.is('application/x-www-form-urlencoded')) {
      oauthError(res, 400, 'invalid_request', 'The request body must be application/x-www-form-urlencoded.');
      return;
    }
    form(req, res, (err?: unknown) => {
      if (err) {
        oauthError(res, 400, 'invalid_request', 'The request body could not be read.');
        return;
      }
      token(req, res).catch(next);
    });
  });

  async function token(req: Request, res: Response) {
    const body = (req.body ?? {}) as Record<string, unknown>;
    for (const [k, v] of Object.entries(body)) {
      if (Array.isArray(v)) return oauthError(res, 400, 'invalid_request', `Parameter ${k} is repeated.`);
      if (typeof v === 'string' && v.includes('\u0000'))
        return oauthError(res, 400, 'invalid_request', `Parameter ${k} holds a NUL character.`);
    }
    const grantType = body['grant_type'];
    if (typeof grantType !== 'string' || grantType === '') return oauthError(res, 400, 'invalid_request', 'grant_type is required.');
    const creds = clientCredentials(req, body);
    if (creds === 'both') return oauthError(res, 400, 'invalid_request', 'Use one client authentication method, not two.');
    if (creds && (creds.id + creds.secret).includes('\u0000'))
      return oauthError(res, 400, 'invalid_request', 'The client credentials hold a NUL character.');
    if (grantType !== 'client_credentials') return oauthError(res, 400, 'unsupported_grant_type', 'Only client_credentials is supported.');
    const tenantKey = body['tenant_key'];
    if (typeof tenantKey !== 'string' || tenantKey === '') return oauthError(res, 400, 'invalid_request', 'tenant_key is required.');
    // Unknown tenant, unknown client, wrong or missing secret answer alike, after the same hashing work.
    const auth = await authenticator.authenticate(
      { tenantKey, clientId: creds?.id ?? '', secret: creds?.secret ?? '', address: req.socket.remoteAddress ?? '' },
      async () => (creds ? findClientByTenantKey(db, tenantKey, creds.id) : undefined),
      res,
    );
    if (auth.kind === 'failed') return oauthError(res, 401, 'invalid_client', 'Client authentication failed.');
    if (auth.kind !== 'ok') {
      res.set('Retry-After', String(auth.retryAfterSeconds));
      return oauthError(res, auth.kind === 'throttled' ? 429 : 503, 'temporarily_unavailable', auth.reason);
    }
    const client = auth.client;

    const requested = typeof body['scope'] === 'string' ? body['scope'].split(' ').filter(Boolean) : [];
    const scopes = requested.length > 0 ? [...new Set(requested)] : client.scopes;
    const denied = scopes.filter((s) => !client.scopes.includes(s) || !(SCOPES as readonly string[]).includes(s));
    if (denied.length > 0) return oauthError(res, 400, 'invalid_scope', `The client may not request: ${denied.join(' ')}.`);

    const issued = await tokens.issue(client.tenantKey, client.clientId, scopes);
    res.set('Cache-Control', 'no-store').set('Pragma', 'no-cache').json({
      access_token: issued.accessToken,
      token_type: 'Bearer',
      expires_in: issued.expiresIn,
      scope: issued.scope,
    });
  }

  router.get('/.well-known/jwks.json', (_req, res, next) => {
    tokens.publicJwks().then((jwks) => res.set('Cache-Control', 'public, max-age=300').json(jwks), next);
  });

  // RFC 8414 authorization server metadata; the OpenID discovery document is the same with what
  // OpenID Connect requires besides (this server issues no ID tokens).
  const metadata = () => {
    const issuer = tokens.issuer;
    return {
      issuer,
      token_endpoint: `${issuer}/connect/token`,
      jwks_uri: `${issuer}/.well-known/jwks.json`,
      grant_types_supported: ['client_credentials'],
      token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
      scopes_supported: [...SCOPES],
      response_types_supported: ['token'],
    };
  };
  router.get('/.well-known/oauth-authorization-server', (_req, res) => {
    res.json(metadata());
  });
  router.get('/.well-known/openid-configuration', (_req, res) => {
    res.json({ ...metadata(), subject_types_supported: ['public'], id_token_signing_alg_values_supported: ['ES256'] });
  });
  return router;
}
