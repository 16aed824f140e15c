import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type CryptoKey, type JWK, SignJWT, exportJWK, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient, FULL_CLIENT, type TestApp, type TestTenant, createTenant, expectProblem, startApp } from './helpers.js';

// D4: tokens of an external identity provider (AUTH_ISSUER + AUTH_JWKS_URL) are accepted too; the tenant
// comes from AUTH_TENANT_CLAIM and the permissions are still those of the client configured in the tenant.
const ISSUER = 'https://idp.example.test/';
let jwksServer: Server;
let app: TestApp;
let tenant: TestTenant;
let privateKey: CryptoKey;
let publicJwk: JWK;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256');
  privateKey = pair.privateKey;
  publicJwk = { ...(await exportJWK(pair.publicKey)), kid: 'ext-1', alg: 'RS256', use: 'sig' };
  jwksServer = createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ keys: [publicJwk] }));
  });
  await new Promise<void>((r) => jwksServer.listen(0, '127.0.0.1', r));
  const jwksUrl = `http://127.0.0.1:${(jwksServer.address() as AddressInfo).port}/jwks`;
  app = await startApp({ AUTH_ISSUER: ISSUER, AUTH_JWKS_URL: jwksUrl, AUTH_TENANT_CLAIM: 'org' });
  tenant = await createTenant(app, {
    clients: [
      FULL_CLIENT,
      { clientId: 'ext-reader', clientSecret: 'ext-reader-secret', scopes: ['ServiceApi'], permissions: ['List:StructuralEntity'] },
    ],
    structuralEntities: [{ key: 'root', displayName: 'Root', structureTypeKey: 'company' }],
  });
});
afterAll(async () => {
  await app?.close();
  jwksServer?.close();
});

function externalToken(claims: Record<string, unknown>, opts: { issuer?: string; key?: CryptoKey; kid?: string } = {}) {
  return new SignJWT({ scope: 'ServiceApi', ...claims })
    .setProtectedHeader({ alg: 'RS256', kid: opts.kid ?? 'ext-1' })
    .setIssuer(opts.issuer ?? ISSUER)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(opts.key ?? privateKey);
}

describe('external issuer (D4)', () => {
  it('accepts its token, with the tenant from AUTH_TENANT_CLAIM and the client from client_id', async () => {
    const api = new ApiClient(app.url, await externalToken({ org: tenant.key, client_id: 'ext-reader', sub: 'someone' }));
    const res = await api.get('/api/v1/structuralEntity');
    expect(res.status).toBe(200);
    expect(res.body.Edges.map((e: any) => e.Node.Key)).toEqual(['root']);
  });

  it('keeps the permissions configured for that client in the tenant (403 otherwise)', async () => {
    const api = new ApiClient(app.url, await externalToken({ org: tenant.key, client_id: 'ext-reader' }));
    expectProblem(await api.get('/api/v1/structuralEntity/root'), 403);
  });

  it('401 for an unknown client, a tenant in the wrong claim, another issuer or another key', async () => {
    const other = await generateKeyPair('RS256');
    for (const token of [
      await externalToken({ org: tenant.key, client_id: 'nobody' }),
      await externalToken({ tenant: tenant.key, client_id: 'ext-reader' }),
      await externalToken({ org: tenant.key, client_id: 'ext-reader' }, { issuer: 'https://evil.example.test/' }),
      await externalToken({ org: tenant.key, client_id: 'ext-reader' }, { key: other.privateKey }),
    ]) {
      const res = await new ApiClient(app.url, token).get('/api/v1/structuralEntity');
      expectProblem(res, 401);
      expect(res.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
    }
  });

  it("still accepts the service's own tokens", async () => {
    const api = await tenant.client();
    expect((await api.get('/api/v1/structuralEntity')).status).toBe(200);
  });
});

describe('external issuer with AUTH_EXTERNAL_AUDIENCE (RFC 9068)', () => {
  let strict: TestApp;
  let strictTenant: TestTenant;
  beforeAll(async () => {
    strict = await startApp({
      AUTH_ISSUER: ISSUER,
      AUTH_JWKS_URL: (app.config as { AUTH_JWKS_URL: string }).AUTH_JWKS_URL,
      AUTH_TENANT_CLAIM: 'org',
      AUTH_EXTERNAL_AUDIENCE: 'https://ssdi.example.test',
    });
    strictTenant = await createTenant(strict, {
      clients: [
        FULL_CLIENT,
        { clientId: 'ext-reader', clientSecret: 'ext-reader-secret', scopes: ['ServiceApi'], permissions: ['List:StructuralEntity'] },
      ],
    });
  });
  afterAll(() => strict?.close());

  it('accepts a token for the configured audience and refuses one without it or for another', async () => {
    const claims = { org: strictTenant.key, client_id: 'ext-reader' };
    const ok = await new ApiClient(strict.url, await externalToken({ ...claims, aud: 'https://ssdi.example.test' })).get(
      '/api/v1/structuralEntity',
    );
    expect(ok.status).toBe(200);
    for (const token of [await externalToken(claims), await externalToken({ ...claims, aud: 'https://other.example.test' })]) {
      const res = await new ApiClient(strict.url, token).get('/api/v1/structuralEntity');
      expectProblem(res, 401);
      expect(res.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
    }
  });
});
