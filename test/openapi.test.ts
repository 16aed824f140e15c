import { createConfig, lintFromString } from '@redocly/openapi-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routes } from '../src/routes.js';
import { unwrap } from '../src/rest.js';
import { type TestApp, startApp } from './helpers.js';

// GET /openapi.json (D4: no token needed): OpenAPI 3.1 generated from the route table, valid for a
// third-party validator, with the OAuth 2.0 client-credentials scheme of the embedded identity provider.

let app: TestApp;
let doc: any;
let status: number;
let contentType: string | null;

beforeAll(async () => {
  app = await startApp();
  const res = await fetch(`${app.url}/openapi.json`);
  status = res.status;
  contentType = res.headers.get('content-type');
  doc = await res.json();
});
afterAll(() => app?.close());

const METHODS = ['get', 'put', 'post', 'patch', 'delete', 'head', 'options', 'trace'] as const;
const openApiPath = (expressPath: string) => expressPath.replace(/:(\w+)/g, '{$1}');
const shapeKeys = (schema: unknown) =>
  schema ? Object.keys((unwrap(schema as never) as unknown as { shape?: Record<string, unknown> }).shape ?? {}) : [];

describe('GET /openapi.json', () => {
  it('is served without a token as JSON, OpenAPI 3.1', () => {
    expect(status).toBe(200);
    expect(contentType).toMatch(/^application\/json\b/);
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(typeof doc.info?.title).toBe('string');
    expect(typeof doc.info?.version).toBe('string');
    expect(doc.servers).toEqual([{ url: app.url }]);
  });

  it('passes the Redocly validator (recommended ruleset) without errors', async () => {
    const config = await createConfig({ extends: ['recommended'] });
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: `${app.url}/openapi.json`, config });
    const errors = problems.filter((p) => p.severity === 'error');
    expect(errors.map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? '?'}`)).toEqual([]);
  });

  it('the validator does catch a broken document (so the check above can fail)', async () => {
    const broken = structuredClone(doc);
    delete broken.info;
    const firstPath = Object.keys(broken.paths)[0]!;
    const firstMethod = Object.keys(broken.paths[firstPath])[0]!;
    broken.paths[firstPath][firstMethod].responses = 'none';
    const config = await createConfig({ extends: ['recommended'] });
    const problems = await lintFromString({ source: JSON.stringify(broken), absoluteRef: `${app.url}/openapi.json`, config });
    expect(problems.filter((p) => p.severity === 'error').length).toBeGreaterThanOrEqual(2);
  });

  it('has the oauth2 client-credentials scheme whose tokenUrl is the service\'s /connect/token', async () => {
    const scheme = doc.components?.securitySchemes?.oauth2;
    expect(scheme?.type).toBe('oauth2');
    const flow = scheme.flows?.clientCredentials;
    expect(flow).toBeDefined();
    expect(flow.tokenUrl).toMatch(/\/connect\/token$/);
    expect(flow.tokenUrl).toBe(`${app.url}/connect/token`);
    expect(Object.keys(flow.scopes).sort()).toEqual(['ServiceApi', 'ServiceDataProviderApi']);
    // The documented token URL really issues tokens (here: a well-formed request without a client → 401).
    const res = await fetch(flow.tokenUrl, { method: 'POST', body: new URLSearchParams({ grant_type: 'client_credentials', tenant_key: 'x' }) });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: string }).error).toBe('invalid_client');
  });

  it('lists every route of the route table with its method, and nothing else', () => {
    expect(routes.length).toBeGreaterThan(0);
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([p, ops]) =>
      Object.keys(ops)
        .filter((m) => (METHODS as readonly string[]).includes(m))
        .map((m) => `${m.toUpperCase()} ${p}`),
    );
    const expected = routes.map((r) => `${r.method.toUpperCase()} ${openApiPath(r.path)}`);
    expect([...documented].sort()).toEqual([...expected].sort());
    for (const r of routes) {
      const op = doc.paths[openApiPath(r.path)][r.method];
      expect(op.operationId).toBe(r.operationId);
    }
  });

  it('every operation requires the oauth2 scheme with the route\'s scopes and documents its errors as problem+json', () => {
    for (const r of routes) {
      const op = doc.paths[openApiPath(r.path)][r.method];
      expect(op.security, r.operationId).toEqual((r.scopes ?? ['ServiceApi']).map((s) => ({ oauth2: [s] })));
      for (const code of ['400', '401', '403']) {
        expect(op.responses[code]?.content?.['application/problem+json']?.schema, `${r.operationId} ${code}`).toEqual({ $ref: '#/components/schemas/ProblemDetails' });
      }
      if (r.body) {
        expect(op.requestBody?.content?.['application/json']?.schema, r.operationId).toBeDefined();
        expect(op.requestBody.required).toBe(r.body.required);
        expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['413', '415']));
      }
      for (const status of Object.keys(r.responses)) expect(op.responses[status], `${r.operationId} ${status}`).toBeDefined();
    }
    const problem = doc.components.schemas.ProblemDetails;
    expect(problem.required).toEqual(expect.arrayContaining(['type', 'title', 'status', 'traceId']));
  });

  it('documents every path and query parameter under the name the route binds', () => {
    for (const r of routes) {
      const op = doc.paths[openApiPath(r.path)][r.method];
      const params: { name: string; in: string; required: boolean }[] = op.parameters ?? [];
      const pathNames = [...r.path.matchAll(/:(\w+)/g)].map((m) => m[1]);
      expect(params.filter((p) => p.in === 'path').map((p) => p.name).sort(), r.operationId).toEqual(pathNames.sort());
      for (const p of params.filter((x) => x.in === 'path')) expect(p.required).toBe(true);
      expect(params.filter((p) => p.in === 'query').map((p) => p.name).sort(), r.operationId).toEqual(shapeKeys(r.query).sort());
    }
  });
});
