import { randomUUID } from 'node:crypto';
import {
  type JWK,
  type JWTPayload,
  SignJWT,
  createLocalJWKSet,
  decodeJwt,
  decodeProtectedHeader,
  exportJWK,
  generateKeyPair,
  importJWK,
  jwtVerify,
} from 'jose';
import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ApiClient,
  type ApiResponse,
  FULL_CLIENT,
  type TestApp,
  type TestTenant,
  createTenant,
  startApp,
  expectProblem,
} from './helpers.js';

// Authentication and permissions (D4), tenant isolation (D2), error bodies (D5), through real HTTP only.

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

// ---------------------------------------------------------------------------------------------------------
// Helpers

/** RFC 6749 Appendix B: application/x-www-form-urlencoded encoding of one value. */
const formEncode = (s: string) => encodeURIComponent(s).replace(/%20/g, '+');

/** RFC 6749 §2.3.1: HTTP Basic with the form-encoded client id and secret. */
const basicAuth = (id: string, secret: string) =>
  `Basic ${Buffer.from(`${formEncode(id)}:${formEncode(secret)}`, 'utf8').toString('base64')}`;

interface TokenResponse {
  status: number;
  headers: Headers;
  body: any;
}

/** POST /connect/token with form fields (or a raw body), optionally with an Authorization header. */
async function tokenRequest(
  fields: Record<string, string | string[]> | undefined,
  opts: { authorization?: string; contentType?: string; raw?: string } = {},
): Promise<TokenResponse> {
  const headers: Record<string, string> = {};
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (fields) {
    const form = new URLSearchParams();
    for (const [k, v] of Object.entries(fields)) for (const one of Array.isArray(v) ? v : [v]) form.append(k, one);
    body = form.toString();
    headers['content-type'] = 'application/x-www-form-urlencoded';
  }
  if (opts.contentType) headers['content-type'] = opts.contentType;
  if (opts.authorization) headers['authorization'] = opts.authorization;
  const res = await fetch(`${app.url}/connect/token`, { method: 'POST', headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // left as text: the assertions will say so
  }
  return { status: res.status, headers: res.headers, body: parsed };
}

/** D4: RFC 6749 §5.2 error: plain JSON {error, error_description}, never problem+json. */
function expectOAuthError(res: TokenResponse, status: number, error: string) {
  expect({ status: res.status, body: res.body }).toMatchObject({ status, body: { error } });
  const type = res.headers.get('content-type') ?? '';
  expect(type).toMatch(/^application\/json\b/);
  expect(type).not.toContain('problem');
  expect(Object.keys(res.body).sort()).toEqual(['error', 'error_description']);
  expect(typeof res.body.error_description).toBe('string');
  expect(res.body.error_description.length).toBeGreaterThan(0);
}

/** D4 (RFC 6750 §3.1): a 401 with `WWW-Authenticate: Bearer` and no error attribute, problem+json body. */
function expectNoTokenChallenge(res: ApiResponse) {
  expectProblem(res, 401);
  const challenge = res.headers.get('www-authenticate') ?? '';
  expect(challenge).toMatch(/^Bearer\b/);
  expect(challenge).not.toMatch(/error\s*=/);
}

/** D4: a 401 with `WWW-Authenticate: Bearer error="invalid_token"`, problem+json body. */
function expectInvalidToken(res: ApiResponse) {
  expectProblem(res, 401);
  const challenge = res.headers.get('www-authenticate') ?? '';
  expect(challenge).toMatch(/^Bearer\b/);
  expect(challenge).toMatch(/\berror="invalid_token"/);
}

const b64url = (v: unknown) => Buffer.from(JSON.stringify(v), 'utf8').toString('base64url');
const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The active signing key, straight from the database. */
async function activeKey(): Promise<{ kid: string; privateJwk: JWK; publicJwk: JWK }> {
  const row = await app.handle.db.selectFrom('signing_key').selectAll().where('retired_at', 'is', null).executeTakeFirstOrThrow();
  const parse = (v: unknown) => (typeof v === 'string' ? JSON.parse(v) : v) as JWK;
  return { kid: row.kid, privateJwk: parse(row.private_jwk), publicJwk: parse(row.public_jwk) };
}

/** Claims as our token endpoint issues them, valid for ten minutes. */
function claims(tenantKey: string, overrides: JWTPayload = {}): JWTPayload {
  const now = nowSeconds();
  return {
    iss: app.url,
    sub: FULL_CLIENT.clientId,
    tenant: tenantKey,
    scope: 'ServiceApi',
    iat: now,
    exp: now + 600,
    jti: randomUUID(),
    ...overrides,
  };
}

/** Signs `payload` with the service's own active key (as the token endpoint would). */
async function signWithServiceKey(payload: JWTPayload, header: Record<string, unknown> = {}): Promise<string> {
  const key = await activeKey();
  return new SignJWT(payload)
    .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: key.kid, ...header })
    .sign(await importJWK(key.privateJwk, 'ES256'));
}

const bearer = (token: string) => new ApiClient(app.url, token);
const anonymous = () => new ApiClient(app.url, undefined);

const ALL_ENTITIES_QUERY = '{ structuralEntities { totalCount edges { node { key } } } }';

/** Global id of a structural entity, as the service itself reports it. */
async function globalId(api: ApiClient, key: string): Promise<string> {
  const r = await api.gql<{ structuralEntity: { id: string } | null }>('query($key: String!) { structuralEntity(key: $key) { id } }', {
    key,
  });
  expect(r.status).toBe(200);
  expect(r.body.errors).toBeUndefined();
  const id = r.body.data?.structuralEntity?.id;
  expect(typeof id).toBe('string');
  return id!;
}

// ---------------------------------------------------------------------------------------------------------

describe('token endpoint (D4)', () => {
  let tenant: TestTenant;
  // A client id and secret that need form-encoding in HTTP Basic (RFC 6749 §2.3.1).
  const SPECIAL = { clientId: 'svc:one+two', clientSecret: 'p@ss w+rd:%/é-secret', scopes: ['ServiceApi'], permissions: ['*'] };
  const PROVIDER = { clientId: 'provider-only', clientSecret: 'provider-only-secret', scopes: ['ServiceDataProviderApi'], permissions: [] };
  const OTHER_CLIENT = { clientId: 'other-tenant-client', clientSecret: 'other-tenant-secret', scopes: ['ServiceApi'], permissions: ['*'] };

  beforeAll(async () => {
    tenant = await createTenant(app, {
      clients: [FULL_CLIENT, SPECIAL, PROVIDER],
      structuralEntities: [{ key: 'tok-root', displayName: 'Token root', structureTypeKey: 'company' }],
    });
    await createTenant(app, { clients: [OTHER_CLIENT] }); // its client must not work with this tenant key
  });

  const formFields = (overrides: Record<string, string | undefined> = {}) => {
    const f: Record<string, string | undefined> = {
      grant_type: 'client_credentials',
      tenant_key: tenant.key,
      client_id: FULL_CLIENT.clientId,
      client_secret: FULL_CLIENT.clientSecret,
      scope: 'ServiceApi',
      ...overrides,
    };
    return Object.fromEntries(Object.entries(f).filter((e): e is [string, string] => e[1] !== undefined));
  };

  it('issues a bearer token for form client authentication, with the documented fields and claims', async () => {
    const res = await tokenRequest(formFields());
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type') ?? '').toMatch(/^application\/json\b/);
    expect(res.headers.get('cache-control')).toContain('no-store');
    expect(Object.keys(res.body).sort()).toEqual(['access_token', 'expires_in', 'scope', 'token_type']);
    expect(res.body.token_type).toBe('Bearer');
    expect(res.body.expires_in).toBe(app.config.TOKEN_TTL_SECONDS);
    expect(res.body.scope).toBe('ServiceApi');

    // The JWT carries the claims D4 names.
    const header = decodeProtectedHeader(res.body.access_token);
    expect(header.alg).toBe('ES256');
    expect(header.kid).toBe((await activeKey()).kid);
    const c = decodeJwt(res.body.access_token);
    expect(c).toMatchObject({ iss: app.url, sub: FULL_CLIENT.clientId, tenant: tenant.key, scope: 'ServiceApi' });
    expect(typeof c.jti).toBe('string');
    expect(c.exp! - c.iat!).toBe(app.config.TOKEN_TTL_SECONDS);

    // And it is accepted by the resource server.
    const list = await bearer(res.body.access_token).get('/api/v1/structuralEntity');
    expect(list.status).toBe(200);
    expect(list.body.Edges.map((e: any) => e.Node.Key)).toEqual(['tok-root']);
  });

  it('accepts a form content type with a charset parameter', async () => {
    const res = await tokenRequest(undefined, {
      contentType: 'application/x-www-form-urlencoded; charset=UTF-8',
      raw: new URLSearchParams(formFields()).toString(),
    });
    expect(res.status).toBe(200);
    expect(res.body.token_type).toBe('Bearer');
  });

  it('issues a distinct token (jti) on every request', async () => {
    const a = await tokenRequest(formFields());
    const b = await tokenRequest(formFields());
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(decodeJwt(a.body.access_token).jti).not.toBe(decodeJwt(b.body.access_token).jti);
  });

  it('accepts HTTP Basic client authentication with the form-encoded id and secret (RFC 6749 §2.3.1)', async () => {
    const res = await tokenRequest(formFields({ client_id: undefined, client_secret: undefined }), {
      authorization: basicAuth(SPECIAL.clientId, SPECIAL.clientSecret),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toContain('no-store');
    expect(res.body).toMatchObject({ token_type: 'Bearer', expires_in: app.config.TOKEN_TTL_SECONDS, scope: 'ServiceApi' });
    expect(decodeJwt(res.body.access_token)).toMatchObject({ sub: SPECIAL.clientId, tenant: tenant.key });
    expect((await bearer(res.body.access_token).get('/api/v1/structuralEntity')).status).toBe(200);
  });

  it('accepts HTTP Basic together with a client_id form field naming the same client', async () => {
    const res = await tokenRequest(formFields({ client_secret: undefined }), {
      authorization: basicAuth(FULL_CLIENT.clientId, FULL_CLIENT.clientSecret),
    });
    expect(res.status).toBe(200);
    expect(decodeJwt(res.body.access_token).sub).toBe(FULL_CLIENT.clientId);
  });

  it('grants every scope of the client when scope is omitted', async () => {
    const res = await tokenRequest(formFields({ scope: undefined }));
    expect(res.status).toBe(200);
    expect(res.body.scope.split(' ').sort()).toEqual([...FULL_CLIENT.scopes].sort());
    expect(String(decodeJwt(res.body.access_token).scope).split(' ').sort()).toEqual([...FULL_CLIENT.scopes].sort());

    const provider = await tokenRequest(
      formFields({ scope: undefined, client_id: PROVIDER.clientId, client_secret: PROVIDER.clientSecret }),
    );
    expect(provider.status).toBe(200);
    expect(provider.body.scope).toBe('ServiceDataProviderApi');
  });

  it("grants exactly the requested scopes when they are a subset of the client's", async () => {
    const res = await tokenRequest(formFields({ scope: 'ServiceDataProviderApi' }));
    expect(res.status).toBe(200);
    expect(res.body.scope).toBe('ServiceDataProviderApi');
    expect(decodeJwt(res.body.access_token).scope).toBe('ServiceDataProviderApi');
  });

  describe('400 invalid_request', () => {
    it('when grant_type is missing', async () => {
      expectOAuthError(await tokenRequest(formFields({ grant_type: undefined })), 400, 'invalid_request');
    });
    it('when grant_type is empty', async () => {
      expectOAuthError(await tokenRequest(formFields({ grant_type: '' })), 400, 'invalid_request');
    });
    it('when tenant_key is missing', async () => {
      expectOAuthError(await tokenRequest(formFields({ tenant_key: undefined })), 400, 'invalid_request');
    });
    it('when the body is JSON instead of form-encoded', async () => {
      const res = await tokenRequest(undefined, { contentType: 'application/json', raw: JSON.stringify(formFields()) });
      expectOAuthError(res, 400, 'invalid_request');
    });
    it('when the form body is sent with a JSON content type', async () => {
      const res = await tokenRequest(undefined, { contentType: 'application/json', raw: new URLSearchParams(formFields()).toString() });
      expectOAuthError(res, 400, 'invalid_request');
    });
    it('when the body is plain text', async () => {
      const res = await tokenRequest(undefined, { contentType: 'text/plain', raw: new URLSearchParams(formFields()).toString() });
      expectOAuthError(res, 400, 'invalid_request');
    });
    it('when there is no body at all', async () => {
      expectOAuthError(await tokenRequest(undefined), 400, 'invalid_request');
    });
    // P7: Basic and a form secret together, or a repeated parameter, is invalid_request.
    it('when the client authenticates both with HTTP Basic and with a form secret', async () => {
      const res = await tokenRequest(formFields(), { authorization: basicAuth(FULL_CLIENT.clientId, FULL_CLIENT.clientSecret) });
      expectOAuthError(res, 400, 'invalid_request');
    });
    it('when HTTP Basic names one client and the client_id form field another', async () => {
      const res = await tokenRequest(formFields({ client_id: SPECIAL.clientId, client_secret: undefined }), {
        authorization: basicAuth(FULL_CLIENT.clientId, FULL_CLIENT.clientSecret),
      });
      expectOAuthError(res, 400, 'invalid_request');
    });
    it('when a parameter is repeated (RFC 6749 §3.2)', async () => {
      const res = await tokenRequest({ ...formFields(), scope: ['ServiceApi', 'ServiceDataProviderApi'] });
      expectOAuthError(res, 400, 'invalid_request');
    });
  });

  describe('401 invalid_client, the same answer for every cause', () => {
    const cases: [string, () => Promise<TokenResponse>][] = [
      ['no client credentials at all', () => tokenRequest(formFields({ client_id: undefined, client_secret: undefined }))],
      ['a client id without a secret', () => tokenRequest(formFields({ client_secret: undefined }))],
      ['an unknown tenant', () => tokenRequest(formFields({ tenant_key: 'no-such-tenant' }))],
      ['an unknown client', () => tokenRequest(formFields({ client_id: 'no-such-client' }))],
      ['a wrong secret', () => tokenRequest(formFields({ client_secret: `${FULL_CLIENT.clientSecret}x` }))],
      // D2: keys are case-sensitive; client ids too.
      ['the tenant key in another case', () => tokenRequest(formFields({ tenant_key: tenant.key.toUpperCase() }))],
      ['the client id in another case', () => tokenRequest(formFields({ client_id: FULL_CLIENT.clientId.toUpperCase() }))],
      ['an empty secret', () => tokenRequest(formFields({ client_secret: '' }))],
      ['the secret of another client of the tenant', () => tokenRequest(formFields({ client_secret: SPECIAL.clientSecret }))],
      [
        'a client of another tenant',
        () => tokenRequest(formFields({ client_id: OTHER_CLIENT.clientId, client_secret: OTHER_CLIENT.clientSecret })),
      ],
      [
        'a wrong secret over HTTP Basic',
        () =>
          tokenRequest(formFields({ client_id: undefined, client_secret: undefined }), {
            authorization: basicAuth(SPECIAL.clientId, 'wrong-secret-value'),
          }),
      ],
      [
        'HTTP Basic credentials sent without form-encoding',
        () =>
          tokenRequest(formFields({ client_id: undefined, client_secret: undefined }), {
            // '+' decodes to a space and '%/é' is not valid form-encoding: not the stored secret.
            authorization: `Basic ${Buffer.from(`${SPECIAL.clientId}:${SPECIAL.clientSecret}`).toString('base64')}`,
          }),
      ],
    ];

    it.each(cases)('for %s', async (_name, send) => {
      const res = await send();
      expectOAuthError(res, 401, 'invalid_client');
      expect(res.body.access_token).toBeUndefined();
    });

    it('with an identical body whatever the cause (no tenant or client enumeration)', async () => {
      const bodies = await Promise.all(cases.map(([, send]) => send()));
      for (const r of bodies) expect(r.status).toBe(401);
      const distinct = new Set(bodies.map((r) => JSON.stringify(r.body)));
      expect(distinct.size).toBe(1);
    });

    it('with a WWW-Authenticate challenge when the client tried HTTP Basic (RFC 6749 §5.2)', async () => {
      const res = await tokenRequest(formFields({ client_id: undefined, client_secret: undefined }), {
        authorization: basicAuth(FULL_CLIENT.clientId, 'wrong-secret-value'),
      });
      expectOAuthError(res, 401, 'invalid_client');
      expect(res.headers.get('www-authenticate') ?? '').toMatch(/^Basic\b/i);
    });
  });

  describe('400 unsupported_grant_type', () => {
    it.each(['password', 'authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:jwt-bearer'])('for %s', async (grant) => {
      expectOAuthError(await tokenRequest(formFields({ grant_type: grant })), 400, 'unsupported_grant_type');
    });
  });

  describe('400 invalid_scope', () => {
    it('for a scope the client is not configured for', async () => {
      const res = await tokenRequest(
        formFields({ client_id: PROVIDER.clientId, client_secret: PROVIDER.clientSecret, scope: 'ServiceApi' }),
      );
      expectOAuthError(res, 400, 'invalid_scope');
    });
    it('for an unknown scope', async () => {
      expectOAuthError(await tokenRequest(formFields({ scope: 'openid' })), 400, 'invalid_scope');
    });
    it('when one of several requested scopes is not allowed', async () => {
      const res = await tokenRequest(
        formFields({ client_id: PROVIDER.clientId, client_secret: PROVIDER.clientSecret, scope: 'ServiceDataProviderApi ServiceApi' }),
      );
      expectOAuthError(res, 400, 'invalid_scope');
    });
    it('for a scope that differs only in case', async () => {
      expectOAuthError(await tokenRequest(formFields({ scope: 'serviceapi' })), 400, 'invalid_scope');
    });
  });

  it('serves its errors as plain JSON, not problem+json, also for the client-authentication failure', async () => {
    const res = await tokenRequest(formFields({ client_secret: 'definitely-wrong' }));
    expect(res.headers.get('content-type') ?? '').not.toMatch(/problem/);
    expect(res.body).not.toHaveProperty('type');
    expect(res.body).not.toHaveProperty('title');
    expect(res.body).not.toHaveProperty('status');
    expect(res.body).not.toHaveProperty('traceId');
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('a standard OAuth client library (oauth4webapi) against the service (D4)', () => {
  let tenant: TestTenant;
  const insecure = { [oauth.allowInsecureRequests]: true };

  beforeAll(async () => {
    tenant = await createTenant(app, {
      structuralEntities: [{ key: 'lib-root', displayName: 'Library root', structureTypeKey: 'company' }],
    });
  });

  async function discover(): Promise<oauth.AuthorizationServer> {
    const issuer = new URL(app.url);
    return oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, insecure));
  }

  it('discovers the server from /.well-known/openid-configuration', async () => {
    const as = await discover();
    expect(as.token_endpoint).toBe(`${app.url}/connect/token`);
    expect(as.jwks_uri).toBe(`${app.url}/.well-known/jwks.json`);
  });

  it('discovers the server from its RFC 8414 metadata (/.well-known/oauth-authorization-server)', async () => {
    const issuer = new URL(app.url);
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
    expect(as.issuer).toBe(app.url);
    expect(as.token_endpoint).toBe(`${app.url}/connect/token`);
    expect(as.grant_types_supported).toEqual(['client_credentials']);
  });

  // P60: RFC 9068 access tokens (aud, client_id).
  it('issues RFC 9068 access tokens: validateJwtAccessToken accepts them, with aud and client_id', async () => {
    const as = await discover();
    const client: oauth.Client = { client_id: FULL_CLIENT.clientId };
    const response = await oauth.clientCredentialsGrantRequest(
      as,
      client,
      oauth.ClientSecretBasic(FULL_CLIENT.clientSecret),
      { tenant_key: tenant.key, scope: 'ServiceApi' },
      insecure,
    );
    const { access_token } = await oauth.processClientCredentialsResponse(as, client, response);
    const request = new Request(`${app.url}/api/v1/structuralEntity`, { headers: { authorization: `Bearer ${access_token}` } });
    // The audience is the service's resource identifier: PUBLIC_URL unless AUTH_AUDIENCE says otherwise.
    const claims = await oauth.validateJwtAccessToken(as, request, app.url, insecure);
    expect(claims.client_id).toBe(FULL_CLIENT.clientId);
    expect(claims.sub).toBe(FULL_CLIENT.clientId);
    expect(claims.aud).toBe(app.url);
    expect(typeof claims.jti).toBe('string');
    // Another resource's audience does not validate.
    await expect(oauth.validateJwtAccessToken(as, request, 'https://other.example', insecure)).rejects.toThrow();
  });

  it('still accepts a token issued before aud and client_id were added (until it expires)', async () => {
    const legacy = await signWithServiceKey(claims(tenant.key));
    expect(decodeJwt(legacy)).not.toHaveProperty('aud');
    const list = await bearer(legacy).get('/api/v1/structuralEntity');
    expect(list.status).toBe(200);
  });

  it.each([
    ['client_secret_basic', oauth.ClientSecretBasic],
    ['client_secret_post', oauth.ClientSecretPost],
  ] as const)('gets a token with %s and a tenant_key parameter, and uses it on the REST API', async (_name, auth) => {
    const as = await discover();
    const client: oauth.Client = { client_id: FULL_CLIENT.clientId };
    const response = await oauth.clientCredentialsGrantRequest(
      as,
      client,
      auth(FULL_CLIENT.clientSecret),
      { tenant_key: tenant.key, scope: 'ServiceApi' },
      insecure,
    );
    const result = await oauth.processClientCredentialsResponse(as, client, response);
    expect(result.token_type).toBe('bearer');
    expect(result.expires_in).toBe(app.config.TOKEN_TTL_SECONDS);
    expect(result.scope).toBe('ServiceApi');

    const list = await bearer(result.access_token).get('/api/v1/structuralEntity');
    expect(list.status).toBe(200);
    expect(list.body.Edges.map((e: any) => e.Node.Key)).toEqual(['lib-root']);
  });

  /** Runs a client-credentials request through the library and returns what it throws. */
  async function failingGrant(clientAuth: oauth.ClientAuth, parameters: Record<string, string>): Promise<unknown> {
    const as = await discover();
    const client: oauth.Client = { client_id: FULL_CLIENT.clientId };
    const response = await oauth.clientCredentialsGrantRequest(as, client, clientAuth, parameters, insecure);
    return oauth.processClientCredentialsResponse(as, client, response).then(
      () => undefined,
      (e: unknown) => e,
    );
  }

  it('reads our invalid_client answer as a Basic challenge with the OAuth error body', async () => {
    const error = await failingGrant(oauth.ClientSecretBasic('not-the-secret'), { tenant_key: tenant.key });
    // A 401 carrying WWW-Authenticate (RFC 6749 §5.2) surfaces as a challenge; its body is the OAuth error.
    expect(error).toBeInstanceOf(oauth.WWWAuthenticateChallengeError);
    const challenge = error as oauth.WWWAuthenticateChallengeError;
    expect(challenge.status).toBe(401);
    expect(challenge.cause.map((c) => c.scheme)).toEqual(['basic']);
    expect(await challenge.response.json()).toMatchObject({ error: 'invalid_client' });
  });

  it('reads our invalid_scope answer as an OAuth error response', async () => {
    const error = await failingGrant(oauth.ClientSecretPost(FULL_CLIENT.clientSecret), { tenant_key: tenant.key, scope: 'openid' });
    expect(error).toBeInstanceOf(oauth.ResponseBodyError);
    expect((error as oauth.ResponseBodyError).error).toBe('invalid_scope');
    expect((error as oauth.ResponseBodyError).status).toBe(400);
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('discovery documents (D4)', () => {
  it('serves /.well-known/openid-configuration without a token, with the app URL as issuer', async () => {
    const res = await anonymous().get('/.well-known/openid-configuration');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      issuer: app.url,
      token_endpoint: `${app.url}/connect/token`,
      jwks_uri: `${app.url}/.well-known/jwks.json`,
    });
    expect(res.body.grant_types_supported).toContain('client_credentials');
    expect(res.body.token_endpoint_auth_methods_supported).toEqual(expect.arrayContaining(['client_secret_basic', 'client_secret_post']));
    expect(res.body.scopes_supported).toEqual(expect.arrayContaining(['ServiceApi', 'ServiceDataProviderApi']));
  });

  it('serves /.well-known/jwks.json without a token: public EC keys only, one of them the active key', async () => {
    const res = await anonymous().get('/.well-known/jwks.json');
    expect(res.status).toBe(200);
    expect(Array.isArray(res.body.keys)).toBe(true);
    expect(res.body.keys.length).toBeGreaterThan(0);
    for (const k of res.body.keys) {
      expect(k).toMatchObject({
        kty: 'EC',
        crv: 'P-256',
        alg: 'ES256',
        use: 'sig',
        kid: expect.any(String),
        x: expect.any(String),
        y: expect.any(String),
      });
      // Never the private part.
      expect(k).not.toHaveProperty('d');
    }
    expect(res.body.keys.map((k: JWK) => k.kid)).toContain((await activeKey()).kid);
  });

  it('publishes keys that verify the issued tokens (a standard JWT library with the JWKS)', async () => {
    const tenant = await createTenant(app);
    const token = await tenant.token();
    const jwks = (await anonymous().get('/.well-known/jwks.json')).body as { keys: JWK[] };
    const { payload } = await jwtVerify(token, createLocalJWKSet(jwks), { issuer: app.url, algorithms: ['ES256'] });
    expect(payload).toMatchObject({ sub: FULL_CLIENT.clientId, tenant: tenant.key });
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('resource server: 401 (D4)', () => {
  let tenant: TestTenant;

  beforeAll(async () => {
    tenant = await createTenant(app, {
      structuralEntities: [{ key: 'rs-root', displayName: 'RS root', structureTypeKey: 'company' }],
    });
  });

  const restCall = (api: ApiClient) => api.get('/api/v1/structuralEntity');
  const graphqlCall = (api: ApiClient) => api.gql(ALL_ENTITIES_QUERY);

  it('accepts a token signed with the service key and the issued claims (control for the cases below)', async () => {
    const token = await signWithServiceKey(claims(tenant.key));
    const rest = await restCall(bearer(token));
    expect(rest.status).toBe(200);
    expect(rest.body.Edges.map((e: any) => e.Node.Key)).toEqual(['rs-root']);
    const gql = await graphqlCall(bearer(token));
    expect(gql.status).toBe(200);
    expect(gql.body.data?.structuralEntities.totalCount).toBe(1);
  });

  it('accepts the "bearer" scheme in any case (RFC 7235 §2.1)', async () => {
    const token = await tenant.token();
    const res = await anonymous().get('/api/v1/structuralEntity', { authorization: `bearer ${token}` });
    expect(res.status).toBe(200);
  });

  describe.each([
    ['REST GET /api/v1/structuralEntity', restCall],
    ['POST /graphql', graphqlCall],
  ] as const)('%s', (_name, call) => {
    it('401 with `WWW-Authenticate: Bearer` (no error) without a token', async () => {
      const res = await call(anonymous());
      expectNoTokenChallenge(res);
    });

    it('401 with `WWW-Authenticate: Bearer` (no error) for a non-Bearer Authorization header', async () => {
      const api = anonymous();
      const res =
        call === restCall
          ? await api.get('/api/v1/structuralEntity', { authorization: basicAuth(FULL_CLIENT.clientId, FULL_CLIENT.clientSecret) })
          : await api.request('POST', '/graphql', {
              body: { query: ALL_ENTITIES_QUERY },
              headers: { authorization: basicAuth(FULL_CLIENT.clientId, FULL_CLIENT.clientSecret) },
            });
      expectNoTokenChallenge(res);
    });

    const invalidTokens: [string, () => Promise<string>][] = [
      ['garbage', async () => 'not-a-jwt'],
      ['three garbage segments', async () => 'aaaa.bbbb.cccc'],
      ['an expired token', async () => signWithServiceKey(claims(tenant.key, { iat: nowSeconds() - 7200, exp: nowSeconds() - 3600 }))],
      [
        'an `alg: none` token',
        async () => `${b64url({ alg: 'none', typ: 'at+jwt', kid: (await activeKey()).kid })}.${b64url(claims(tenant.key))}.`,
      ],
      [
        'a token signed by another key under the active kid',
        async () => {
          const { privateKey } = await generateKeyPair('ES256');
          return new SignJWT(claims(tenant.key))
            .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: (await activeKey()).kid })
            .sign(privateKey);
        },
      ],
      [
        'a token signed by another key under its own kid',
        async () => {
          const { privateKey, publicKey } = await generateKeyPair('ES256');
          const kid = `other-${(await exportJWK(publicKey)).x}`;
          return new SignJWT(claims(tenant.key)).setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid }).sign(privateKey);
        },
      ],
      [
        'an HS256 token keyed with the published public key (algorithm confusion)',
        async () => {
          const key = await activeKey();
          const secret = new TextEncoder().encode(JSON.stringify(key.publicJwk));
          return new SignJWT(claims(tenant.key)).setProtectedHeader({ alg: 'HS256', typ: 'at+jwt', kid: key.kid }).sign(secret);
        },
      ],
      [
        'a real token whose tenant claim was changed without re-signing',
        async () => {
          const [h, , s] = (await tenant.token()).split('.');
          return `${h}.${b64url(claims('some-other-tenant'))}.${s}`;
        },
      ],
      ['a token from another issuer', async () => signWithServiceKey(claims(tenant.key, { iss: 'https://evil.example' }))],
      ['a token naming an unknown tenant', async () => signWithServiceKey(claims('no-such-tenant'))],
      ['a token naming an unknown client of the tenant', async () => signWithServiceKey(claims(tenant.key, { sub: 'no-such-client' }))],
      ['a token without a tenant claim', async () => signWithServiceKey(claims(tenant.key, { tenant: undefined }))],
      // RFC 9068: a token for another resource, or whose client_id is not its subject.
      ['a token for another audience', async () => signWithServiceKey(claims(tenant.key, { aud: 'https://other.example' }))],
      ['a token whose client_id is not its subject', async () => signWithServiceKey(claims(tenant.key, { client_id: 'someone-else' }))],
    ];

    it.each(invalidTokens)('401 with `Bearer error="invalid_token"` for %s', async (_what, make) => {
      const res = await call(bearer(await make()));
      expectInvalidToken(res);
      // The whole request fails: no GraphQL data leaks out.
      if (call === graphqlCall) expect(res.body).not.toHaveProperty('data');
    });
  });

  it('never needs a token for the public endpoints (D4)', async () => {
    const api = anonymous();
    for (const path of [
      '/healthz',
      '/readyz',
      '/openapi.json',
      '/.well-known/jwks.json',
      '/.well-known/openid-configuration',
      '/.well-known/oauth-authorization-server',
    ]) {
      const res = await api.get(path);
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
    }
    // The GraphiQL page (GET /graphql asking for HTML) is served without a token outside production.
    const page = await api.get('/graphql', { accept: 'text/html' });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type') ?? '').toMatch(/text\/html/);
  });

  it('needs a token for a GraphQL operation over GET', async () => {
    const res = await anonymous().get(`/graphql?query=${encodeURIComponent('{ __typename }')}`, { accept: 'application/json' });
    expectNoTokenChallenge(res);
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('signing key rotation (D4)', () => {
  let tenant: TestTenant;

  beforeAll(async () => {
    tenant = await createTenant(app, {
      structuralEntities: [{ key: 'rot-root', displayName: 'Rotation root', structureTypeKey: 'company' }],
    });
  });

  // P6: service-wide signing keys; retired keys stay in the JWKS for a token lifetime.
  it('keeps tokens issued before a rotation valid, signs new ones with the new key, and publishes both', async () => {
    const before = await tenant.token();
    const oldKid = decodeProtectedHeader(before).kid;
    expect((await bearer(before).get('/api/v1/structuralEntity')).status).toBe(200);

    const newKid = await app.tokens.rotate();
    expect(newKid).not.toBe(oldKid);

    const res = await bearer(before).get('/api/v1/structuralEntity');
    expect(res.status).toBe(200);
    expect(res.body.Edges.map((e: any) => e.Node.Key)).toEqual(['rot-root']);
    expect((await bearer(before).gql(ALL_ENTITIES_QUERY)).body.data?.structuralEntities.totalCount).toBe(1);

    const after = await tenant.token();
    expect(decodeProtectedHeader(after).kid).toBe(newKid);
    expect((await bearer(after).get('/api/v1/structuralEntity')).status).toBe(200);

    const jwks = await anonymous().get('/.well-known/jwks.json');
    expect(jwks.status).toBe(200);
    expect(jwks.body.keys.map((k: JWK) => k.kid)).toEqual(expect.arrayContaining([oldKid, newKid]));
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('scopes and permissions (D4)', () => {
  let tenant: TestTenant;
  let full: ApiClient;
  const client = (clientId: string, scopes: string[], permissions: string[]) => ({
    clientId,
    clientSecret: `${clientId}-secret-value`,
    scopes,
    permissions,
  });
  const PROVIDER = client('provider', ['ServiceDataProviderApi'], ['*']);
  const LISTER = client('lister', ['ServiceApi'], ['List:StructuralEntity']);
  const VIEWER = client('viewer', ['ServiceApi'], ['View:StructuralEntity']);
  const CREATOR = client('creator', ['ServiceApi'], ['Create:StructuralEntity', 'View:StructuralEntity', 'List:StructuralEntity']);
  const EDITOR = client('editor', ['ServiceApi'], ['Edit:StructuralEntity', 'View:StructuralEntity', 'List:StructuralEntity']);
  // Every permission except the structural-entity ones.
  const OTHERS = client(
    'others',
    ['ServiceApi'],
    [
      'List:Subject',
      'View:Subject',
      'Edit:Subject',
      'Create:Subject',
      'Create:SubjectLocation',
      'Delete:SubjectLocation',
      'View:SubjectAccessInvite',
      'Create:SubjectAccessInvite',
      'Delete:SubjectAccessInvite',
      'List:User',
      'Refresh:DataSet',
      'View:DataExtract',
      'Create:DataExtract',
      'Edit:DataExtract',
    ],
  );
  const as = async (c: { clientId: string; clientSecret: string }, scope?: string) =>
    tenant.client({ clientId: c.clientId, clientSecret: c.clientSecret, ...(scope ? { scope } : {}) });

  beforeAll(async () => {
    tenant = await createTenant(app, {
      clients: [FULL_CLIENT, PROVIDER, LISTER, VIEWER, CREATOR, EDITOR, OTHERS],
      structuralEntities: [
        { key: 'perm-root', displayName: 'Permission root', structureTypeKey: 'company' },
        { key: 'perm-child', displayName: 'Permission child', structureTypeKey: 'department', parentKey: 'perm-root' },
      ],
    });
    full = await tenant.client();
  });

  /** D4: a permission 403 is problem+json (D5). */
  const expectForbidden = (res: ApiResponse) => {
    expectProblem(res, 403);
    expect(res.body.detail).toEqual(expect.any(String));
  };

  /** How many entities the tenant holds, as the full client sees it (other tests in this block add some). */
  const entityCount = async () => {
    const r = await full.gql<{ structuralEntities: { totalCount: number } }>('{ structuralEntities { totalCount } }');
    expect(r.body.errors).toBeUndefined();
    return r.body.data!.structuralEntities.totalCount;
  };

  /** The entity as the full client sees it (status, display name). */
  const peek = async (key: string) => {
    const r = await full.get(`/api/v1/structuralEntity/${encodeURIComponent(key)}`);
    return { status: r.status, displayName: r.body?.DisplayName as string | undefined };
  };

  describe('a token without the ServiceApi scope', () => {
    let provider: ApiClient;
    beforeAll(async () => {
      provider = await as(PROVIDER, 'ServiceDataProviderApi');
    });

    const expectInsufficientScope = (res: ApiResponse) => {
      expectProblem(res, 403);
      const challenge = res.headers.get('www-authenticate') ?? '';
      expect(challenge).toMatch(/^Bearer\b/);
      expect(challenge).toMatch(/\berror="insufficient_scope"/);
    };

    it('gets 403 insufficient_scope on GET /api/v1/structuralEntity', async () => {
      expectInsufficientScope(await provider.get('/api/v1/structuralEntity'));
    });
    it('gets 403 insufficient_scope on GET /api/v1/structuralEntity/{key}', async () => {
      expectInsufficientScope(await provider.get('/api/v1/structuralEntity/perm-root'));
    });
    it('gets 403 insufficient_scope on PUT /api/v1/structuralEntity, and nothing is written', async () => {
      const res = await provider.put('/api/v1/structuralEntity', { Key: 'scope-new', DisplayName: 'Scope', StructureTypeKey: 'company' });
      expectInsufficientScope(res);
      expect((await peek('scope-new')).status).toBe(404);
    });
    it('gets 403 insufficient_scope on POST /graphql (the whole request)', async () => {
      const res = await provider.gql(ALL_ENTITIES_QUERY);
      expectInsufficientScope(res);
      expect(res.body).not.toHaveProperty('data');
    });
  });

  describe('REST: 403 for each missing permission', () => {
    it('GET /api/v1/structuralEntity needs List:StructuralEntity', async () => {
      expectForbidden(await (await as(VIEWER)).get('/api/v1/structuralEntity'));
      expectForbidden(await (await as(OTHERS)).get('/api/v1/structuralEntity'));
      const ok = await (await as(LISTER)).get('/api/v1/structuralEntity?Depth=2');
      expect(ok.status).toBe(200);
      expect(ok.body.Edges.map((e: any) => e.Node.Key)).toEqual(['perm-child']);
    });

    it('GET /api/v1/structuralEntity/{key} needs View:StructuralEntity', async () => {
      expectForbidden(await (await as(LISTER)).get('/api/v1/structuralEntity/perm-root'));
      expectForbidden(await (await as(OTHERS)).get('/api/v1/structuralEntity/perm-root'));
      const ok = await (await as(VIEWER)).get('/api/v1/structuralEntity/perm-root');
      expect(ok.status).toBe(200);
      expect(ok.body.Key).toBe('perm-root');
    });

    it('GET /api/v1/structuralEntity/{key} of an unknown key needs View:StructuralEntity too (403, not 404)', async () => {
      expectForbidden(await (await as(LISTER)).get('/api/v1/structuralEntity/no-such-entity'));
    });

    it('PUT /api/v1/structuralEntity creating needs Create:StructuralEntity; nothing is written without it', async () => {
      const body = { Key: 'perm-new-by-editor', DisplayName: 'New', StructureTypeKey: 'company' };
      expectForbidden(await (await as(EDITOR)).put('/api/v1/structuralEntity', body));
      expectForbidden(await (await as(OTHERS)).put('/api/v1/structuralEntity', body));
      expect((await peek(body.Key)).status).toBe(404);

      const created = await (await as(CREATOR)).put('/api/v1/structuralEntity', { ...body, Key: 'perm-new-by-creator' });
      expect(created.status).toBe(201);
      expect(await peek('perm-new-by-creator')).toEqual({ status: 200, displayName: 'New' });
    });

    it('PUT /api/v1/structuralEntity updating needs Edit:StructuralEntity; nothing changes without it', async () => {
      const body = { Key: 'perm-child', DisplayName: 'Renamed by creator' };
      expectForbidden(await (await as(CREATOR)).put('/api/v1/structuralEntity', body));
      expectForbidden(await (await as(OTHERS)).put('/api/v1/structuralEntity', body));
      expect(await peek('perm-child')).toEqual({ status: 200, displayName: 'Permission child' });

      const updated = await (await as(EDITOR)).put('/api/v1/structuralEntity', { Key: 'perm-child', DisplayName: 'Renamed by editor' });
      expect(updated.status).toBe(200);
      expect(updated.body.DisplayName).toBe('Renamed by editor');
      expect(await peek('perm-child')).toEqual({ status: 200, displayName: 'Renamed by editor' });
    });
  });

  describe('GraphQL: FORBIDDEN on the field, HTTP 200, other fields answered', () => {
    type GqlError = { message: string; path?: (string | number)[]; extensions?: Record<string, any> };
    const forbiddenAt = (errors: GqlError[] | undefined, path: (string | number)[]) => {
      expect(errors, 'a FORBIDDEN error').toBeDefined();
      const match = errors!.filter((e) => JSON.stringify(e.path) === JSON.stringify(path));
      expect(match.map((e) => e.extensions?.['code'])).toEqual(['FORBIDDEN']);
    };

    it('structuralEntities needs List:StructuralEntity; structuralEntity(key) in the same query is answered', async () => {
      const res = await (
        await as(VIEWER)
      ).gql('{ structuralEntities { totalCount } structuralEntity(key: "perm-root") { key displayName } }');
      expect(res.status).toBe(200);
      expect(res.body.data).toEqual({ structuralEntities: null, structuralEntity: { key: 'perm-root', displayName: 'Permission root' } });
      forbiddenAt(res.body.errors, ['structuralEntities']);
      expect(res.body.errors).toHaveLength(1);
    });

    it('structuralEntity(key) needs View:StructuralEntity; structuralEntities in the same query is answered', async () => {
      const res = await (await as(LISTER)).gql('{ structuralEntities { totalCount } structuralEntity(key: "perm-root") { key } }');
      expect(res.status).toBe(200);
      expect(res.body.data).toEqual({ structuralEntities: { totalCount: await entityCount() }, structuralEntity: null });
      forbiddenAt(res.body.errors, ['structuralEntity']);
      expect(res.body.errors).toHaveLength(1);
    });

    it('a client with no structural-entity permission gets FORBIDDEN on both fields, still with HTTP 200', async () => {
      const res = await (await as(OTHERS)).gql('{ structuralEntities { totalCount } structuralEntity(key: "perm-root") { key } }');
      expect(res.status).toBe(200);
      expect(res.body.data).toEqual({ structuralEntities: null, structuralEntity: null });
      forbiddenAt(res.body.errors, ['structuralEntities']);
      forbiddenAt(res.body.errors, ['structuralEntity']);
    });

    it('children of an entity needs List:StructuralEntity, like the REST list', async () => {
      const res = await (await as(VIEWER)).gql('{ structuralEntity(key: "perm-root") { key children { totalCount } } }');
      expect(res.status).toBe(200);
      expect(res.body.data).toEqual({ structuralEntity: { key: 'perm-root', children: null } });
      forbiddenAt(res.body.errors, ['structuralEntity', 'children']);
    });

    it('node(id) of a StructuralEntity needs View:StructuralEntity', async () => {
      const id = await globalId(full, 'perm-root');
      const query = 'query($id: ID!) { node(id: $id) { id ... on StructuralEntity { key } } structuralEntities { totalCount } }';

      const denied = await (await as(LISTER)).gql(query, { id });
      expect(denied.status).toBe(200);
      expect(denied.body.data).toEqual({ node: null, structuralEntities: { totalCount: await entityCount() } });
      forbiddenAt(denied.body.errors, ['node']);

      const allowed = await (await as(VIEWER)).gql('query($id: ID!) { node(id: $id) { id ... on StructuralEntity { key } } }', { id });
      expect(allowed.status).toBe(200);
      expect(allowed.body.errors).toBeUndefined();
      expect(allowed.body.data).toEqual({ node: { id, key: 'perm-root' } });
    });

    it('nodes(ids) of StructuralEntities needs View:StructuralEntity', async () => {
      const id = await globalId(full, 'perm-root');
      const denied = await (
        await as(LISTER)
      ).gql('query($ids: [ID!]!) { nodes(ids: $ids) { id } structuralEntities { totalCount } }', { ids: [id] });
      expect(denied.status).toBe(200);
      expect(denied.body.data?.structuralEntities).toEqual({ totalCount: await entityCount() });
      expect(denied.body.errors?.map((e: GqlError) => e.extensions?.['code'])).toContain('FORBIDDEN');
      expect(JSON.stringify(denied.body.data?.nodes ?? null)).not.toContain(id);

      const allowed = await (await as(VIEWER)).gql('query($ids: [ID!]!) { nodes(ids: $ids) { id } }', { ids: [id] });
      expect(allowed.body.errors).toBeUndefined();
      expect(allowed.body.data).toEqual({ nodes: [{ id }] });
    });

    it('upsertStructuralEntity creating needs Create:StructuralEntity, updating needs Edit:StructuralEntity', async () => {
      const mutation = `mutation($input: UpsertStructuralEntityInput!) {
        upsertStructuralEntity(input: $input) { created structuralEntity { key displayName } }
      }`;
      const create = { key: 'perm-gql-new', displayName: 'GraphQL new', structureTypeKey: 'company' };

      const editorCreate = await (await as(EDITOR)).gql(mutation, { input: create });
      expect(editorCreate.status).toBe(200);
      expect(editorCreate.body.data).toEqual({ upsertStructuralEntity: null });
      forbiddenAt(editorCreate.body.errors, ['upsertStructuralEntity']);
      expect((await peek('perm-gql-new')).status).toBe(404);

      const creatorCreate = await (await as(CREATOR)).gql(mutation, { input: create });
      expect(creatorCreate.body.errors).toBeUndefined();
      expect(creatorCreate.body.data?.upsertStructuralEntity).toEqual({
        created: true,
        structuralEntity: { key: 'perm-gql-new', displayName: 'GraphQL new' },
      });

      const update = { key: 'perm-gql-new', displayName: 'GraphQL renamed' };
      const creatorUpdate = await (await as(CREATOR)).gql(mutation, { input: update });
      expect(creatorUpdate.status).toBe(200);
      expect(creatorUpdate.body.data).toEqual({ upsertStructuralEntity: null });
      forbiddenAt(creatorUpdate.body.errors, ['upsertStructuralEntity']);
      expect(await peek('perm-gql-new')).toEqual({ status: 200, displayName: 'GraphQL new' });

      const editorUpdate = await (await as(EDITOR)).gql(mutation, { input: update });
      expect(editorUpdate.body.errors).toBeUndefined();
      expect(editorUpdate.body.data?.upsertStructuralEntity).toEqual({
        created: false,
        structuralEntity: { key: 'perm-gql-new', displayName: 'GraphQL renamed' },
      });
    });
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('tenant isolation (D2)', () => {
  let tenantA: TestTenant;
  let tenantB: TestTenant;
  let a: ApiClient;
  let b: ApiClient;

  beforeAll(async () => {
    tenantA = await createTenant(app, {
      structuralEntities: [
        { key: 'alpha-hq', displayName: 'Alpha Confidential HQ', structureTypeKey: 'company' },
        { key: 'alpha-dept', displayName: 'Alpha Confidential Department', structureTypeKey: 'department', parentKey: 'alpha-hq' },
        { key: 'shared-key', displayName: 'Shared key of A', structureTypeKey: 'department', parentKey: 'alpha-hq' },
      ],
    });
    tenantB = await createTenant(app, {
      structuralEntities: [{ key: 'bravo-hq', displayName: 'Bravo HQ', structureTypeKey: 'company' }],
    });
    a = await tenantA.client();
    b = await tenantB.client();
  });

  const withoutTrace = (body: any) => {
    const { traceId: _t, ...rest } = body as Record<string, unknown>;
    return rest;
  };

  it('tenant A sees its own entities (control for the cases below)', async () => {
    expect((await a.get('/api/v1/structuralEntity/alpha-dept')).status).toBe(200);
    const search = await a.get('/api/v1/structuralEntity?SearchTerm=Confidential');
    expect(search.status).toBe(200);
    expect(search.body.Edges.map((e: any) => e.Node.Key)).toEqual(['alpha-dept', 'alpha-hq']);
  });

  it("B gets 404 for A's key over REST, exactly as for an unknown key", async () => {
    const foreign = await b.get('/api/v1/structuralEntity/alpha-dept');
    const unknown = await b.get('/api/v1/structuralEntity/no-such-key-anywhere');
    expectProblem(foreign, 404);
    expectProblem(unknown, 404);
    expect(withoutTrace(foreign.body)).toEqual(withoutTrace(unknown.body));
  });

  it("B gets null for A's key over GraphQL structuralEntity(key)", async () => {
    const res = await b.gql('{ structuralEntity(key: "alpha-dept") { key displayName } }');
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data).toEqual({ structuralEntity: null });
  });

  it("B gets null for the global id of A's entity over node(id) and nodes(ids)", async () => {
    const id = await globalId(a, 'alpha-dept');
    const node = await b.gql('query($id: ID!) { node(id: $id) { id ... on StructuralEntity { key displayName } } }', { id });
    expect(node.status).toBe(200);
    expect(node.body.errors).toBeUndefined();
    expect(node.body.data).toEqual({ node: null });

    const nodes = await b.gql('query($ids: [ID!]!) { nodes(ids: $ids) { id } }', { ids: [id] });
    expect(nodes.status).toBe(200);
    expect(nodes.body.errors).toBeUndefined();
    expect(nodes.body.data).toEqual({ nodes: [null] });

    // A itself resolves the same id.
    const own = await a.gql('query($id: ID!) { node(id: $id) { ... on StructuralEntity { key } } }', { id });
    expect(own.body.data).toEqual({ node: { key: 'alpha-dept' } });
  });

  it("B never sees A's entities in lists", async () => {
    const list = await b.get('/api/v1/structuralEntity');
    expect(list.status).toBe(200);
    expect(list.body.Edges.map((e: any) => e.Node.Key)).toEqual(['bravo-hq']);
    expect(list.body.PageInfo.TotalCount).toBe(1);

    const gql = await b.gql(ALL_ENTITIES_QUERY);
    expect(gql.body.data?.structuralEntities).toEqual({ totalCount: 1, edges: [{ node: { key: 'bravo-hq' } }] });
  });

  it("B never sees A's entities in lists with a SearchTerm or a filter naming A's data", async () => {
    for (const q of [
      'SearchTerm=Confidential',
      'SearchTerm=alpha',
      'SearchTerm=Alpha%20Confidentail',
      'ParentKey=alpha-hq',
      'StructureTypeKey=department',
    ]) {
      const res = await b.get(`/api/v1/structuralEntity?${q}`);
      expect({ q, status: res.status, keys: res.body.Edges.map((e: any) => e.Node.Key), total: res.body.PageInfo.TotalCount }).toEqual({
        q,
        status: 200,
        keys: [],
        total: 0,
      });
    }
    const gql = await b.gql('{ structuralEntities(searchTerm: "Confidential") { totalCount edges { node { key } } } }');
    expect(gql.body.data?.structuralEntities).toEqual({ totalCount: 0, edges: [] });
  });

  it("B cannot hang its entity under A's entity: A's key is an unknown parent", async () => {
    const foreign = await b.put('/api/v1/structuralEntity', {
      Key: 'bravo-child',
      DisplayName: 'Child',
      StructureTypeKey: 'department',
      ParentKey: 'alpha-hq',
    });
    const unknown = await b.put('/api/v1/structuralEntity', {
      Key: 'bravo-child',
      DisplayName: 'Child',
      StructureTypeKey: 'department',
      ParentKey: 'no-such-parent',
    });
    expectProblem(foreign, 400);
    expectProblem(unknown, 400);
    expect(JSON.stringify(withoutTrace(foreign.body))).toEqual(
      JSON.stringify(withoutTrace(unknown.body)).replace('no-such-parent', 'alpha-hq'),
    );
    expect((await b.get('/api/v1/structuralEntity/bravo-child')).status).toBe(404);
  });

  it("B upserting A's key creates B's own entity and leaves A's untouched", async () => {
    const created = await b.put('/api/v1/structuralEntity', {
      Key: 'shared-key',
      DisplayName: 'Shared key of B',
      StructureTypeKey: 'company',
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      Key: 'shared-key',
      DisplayName: 'Shared key of B',
      ParentKey: null,
      Depth: 1,
      StructureType: { Key: 'company' },
    });

    const mine = await b.get('/api/v1/structuralEntity/shared-key');
    expect(mine.body).toMatchObject({ Key: 'shared-key', DisplayName: 'Shared key of B', ParentKey: null });

    const theirs = await a.get('/api/v1/structuralEntity/shared-key');
    expect(theirs.status).toBe(200);
    expect(theirs.body).toMatchObject({
      Key: 'shared-key',
      DisplayName: 'Shared key of A',
      ParentKey: 'alpha-hq',
      Depth: 2,
      StructureType: { Key: 'department' },
    });

    // A second upsert by B updates B's entity, still not A's.
    const updated = await b.put('/api/v1/structuralEntity', { Key: 'shared-key', DisplayName: 'Shared key of B, renamed' });
    expect(updated.status).toBe(200);
    expect((await a.get('/api/v1/structuralEntity/shared-key')).body.DisplayName).toBe('Shared key of A');

    // Each tenant's list holds its own.
    expect((await b.get('/api/v1/structuralEntity')).body.Edges.map((e: any) => e.Node.Key)).toEqual(['bravo-hq', 'shared-key']);
    expect((await a.get('/api/v1/structuralEntity')).body.PageInfo.TotalCount).toBe(3);

    // A global id resolves within the caller's tenant only: the same id reaches each tenant's own entity.
    const idA = await globalId(a, 'shared-key');
    const query = 'query($id: ID!) { node(id: $id) { ... on StructuralEntity { displayName } } }';
    expect((await a.gql(query, { id: idA })).body.data).toEqual({ node: { displayName: 'Shared key of A' } });
    const viaB = await b.gql(query, { id: idA });
    expect(viaB.body.data).toEqual({ node: { displayName: 'Shared key of B, renamed' } });
  });
});
