import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProblemDetailsSchema, ValidationProblemDetailsSchema } from '../src/http/openapi/openapi.js';
import { routes } from '../src/app/routes.js';
import { unwrap } from '../src/core/input.js';
import { type TestApp, type TestTenant, createTenant, expectValidation, startApp } from './helpers.js';

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

  it('passes the Redocly linter with the recommended-strict ruleset: no error, no warning', async () => {
    const config = await createConfig({ extends: ['recommended-strict'] });
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: `${app.url}/openapi.json`, config });
    expect(problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? '?'}`)).toEqual([]);
  });

  it('the validator does catch a broken document (so the check above can fail)', async () => {
    const broken = structuredClone(doc);
    delete broken.info;
    const firstPath = Object.keys(broken.paths)[0]!;
    const firstMethod = Object.keys(broken.paths[firstPath])[0]!;
    broken.paths[firstPath][firstMethod].responses = 'none';
    const config = await createConfig({ extends: ['recommended-strict'] });
    const problems = await lintFromString({ source: JSON.stringify(broken), absoluteRef: `${app.url}/openapi.json`, config });
    expect(problems.filter((p) => p.severity === 'error').length).toBeGreaterThanOrEqual(2);
    // recommended-strict also fails what recommended only warns about (here: a tag without a description).
    const undescribed = structuredClone(doc);
    delete undescribed.tags[0].description;
    const strict = await lintFromString({ source: JSON.stringify(undescribed), absoluteRef: `${app.url}/openapi.json`, config });
    expect(strict.map((p) => `${p.severity} ${p.ruleId}`)).toContain('error tag-description');
  });

  it("has the oauth2 client-credentials scheme whose tokenUrl is the service's /connect/token", async () => {
    const scheme = doc.components?.securitySchemes?.oauth2;
    expect(scheme?.type).toBe('oauth2');
    const flow = scheme.flows?.clientCredentials;
    expect(flow).toBeDefined();
    expect(flow.tokenUrl).toMatch(/\/connect\/token$/);
    expect(flow.tokenUrl).toBe(`${app.url}/connect/token`);
    expect(Object.keys(flow.scopes).sort()).toEqual(['ServiceApi', 'ServiceDataProviderApi']);
    // The documented token URL really issues tokens (here: a well-formed request without a client → 401).
    const res = await fetch(flow.tokenUrl, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'client_credentials', tenant_key: 'x' }),
    });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: string }).error).toBe('invalid_client');
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
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

  it("every operation requires the oauth2 scheme (or a bearer token) with the route's scopes and documents its errors as problem+json", () => {
    const PROBLEM = { $ref: '#/components/schemas/ProblemDetails' };
    const VALIDATION = { $ref: '#/components/schemas/ValidationProblemDetails' };
    for (const r of routes) {
      const op = doc.paths[openApiPath(r.path)][r.method];
      const scopes = r.scopes ?? ['ServiceApi'];
      // P144: the scopes are named in the oauth2 requirements; a bearer requirement names none.
      expect(op.security, r.operationId).toEqual([...scopes.map((s) => ({ oauth2: [s] })), { bearer: [] }]);
      const expected = ['401', '403', '500', ...(r.query || r.body ? ['400'] : []), ...(r.body ? ['413', '415'] : [])];
      expected.push(...Object.keys(r.responses).filter((s) => Number(s) >= 400));
      const problems = Object.keys(op.responses).filter((s) => Number(s) >= 400);
      expect(problems.sort(), r.operationId).toEqual([...new Set(expected)].sort());
      for (const code of problems) {
        const content = op.responses[code].content;
        expect(Object.keys(content), `${r.operationId} ${code}`).toEqual(['application/problem+json']);
        expect(content['application/problem+json'].schema, `${r.operationId} ${code}`).toEqual(code === '400' ? VALIDATION : PROBLEM);
        // Each example is what the service answers: the status and title of the code.
        expect(content['application/problem+json'].example, `${r.operationId} ${code}`).toMatchObject({
          status: Number(code),
          title: expect.any(String),
          traceId: expect.any(String),
        });
      }
      expect(op.responses['401'].headers?.['WWW-Authenticate']?.schema, r.operationId).toEqual({ type: 'string' });
      if (r.body) {
        expect(op.requestBody?.content?.['application/json']?.schema, r.operationId).toBeDefined();
        expect(op.requestBody.required).toBe(r.body.required);
      }
      for (const status of Object.keys(r.responses)) expect(op.responses[status], `${r.operationId} ${status}`).toBeDefined();
    }
    const problem = doc.components.schemas.ProblemDetails;
    expect(problem.required).toEqual(expect.arrayContaining(['type', 'title', 'status', 'traceId']));
    expect(doc.components.schemas.ValidationProblemDetails.properties.errors).toMatchObject({
      type: 'object',
      additionalProperties: { type: 'array', items: { type: 'string' } },
    });
  });

  it('documents the 401 challenge as the service sends it', async () => {
    const res = await fetch(`${app.url}/api/v2/subject`);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer\b/);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json\b/);
    expect(ProblemDetailsSchema.safeParse(await res.json()).success).toBe(true);
  });

  it('has a contact, a license, and a description for every tag it uses', () => {
    expect(doc.info.contact).toEqual({ name: expect.any(String), url: app.url }); // P144
    expect(doc.info.license).toEqual({ name: 'MIT', identifier: 'MIT' });
    const used = new Set(
      Object.values(doc.paths as Record<string, Record<string, { tags: string[] }>>).flatMap((ops) =>
        Object.values(ops).flatMap((op) => op.tags),
      ),
    );
    expect(doc.tags.map((t: { name: string }) => t.name).sort()).toEqual([...used].sort());
    for (const t of doc.tags) expect(t.description, t.name).toMatch(/\S/);
    for (const r of routes) {
      const op = doc.paths[openApiPath(r.path)][r.method];
      expect(op.summary, r.operationId).toBe(r.summary);
      expect(op.operationId).toBe(r.operationId);
    }
  });

  it('documents every path and query parameter under the name the route binds', () => {
    for (const r of routes) {
      const op = doc.paths[openApiPath(r.path)][r.method];
      const params: { name: string; in: string; required: boolean }[] = op.parameters ?? [];
      const pathNames = [...r.path.matchAll(/:(\w+)/g)].map((m) => m[1]);
      expect(
        params
          .filter((p) => p.in === 'path')
          .map((p) => p.name)
          .sort(),
        r.operationId,
      ).toEqual(pathNames.sort());
      for (const p of params.filter((x) => x.in === 'path')) expect(p.required).toBe(true);
      expect(
        params
          .filter((p) => p.in === 'query')
          .map((p) => p.name)
          .sort(),
        r.operationId,
      ).toEqual(shapeKeys(r.query).sort());
    }
  });
});

// Client generators name their types after the component schemas: every body and answer is a named one.
const NAMED = [
  'Subject',
  'SubjectWithLocations',
  'SubjectPage',
  'SubjectEdge',
  'StructuralEntity',
  'StructuralEntityPage',
  'StructuralEntityEdge',
  'SubjectPortalUser',
  'SubjectPortalUserPage',
  'PageInfo',
  'CamelCasePageInfo',
  'User',
  'ProblemDetails',
  'ValidationProblemDetails',
  'UpsertSubjectRequest',
  'UpsertSubjectResponse',
  'UpdateSubjectRequest',
  'AddSubjectToLocationRequest',
  'UpsertStructuralEntityRequest',
  'InviteSubjectToPortalRequest',
  'CustomFieldValueInput',
  'RefreshDataSetResponse',
  'DataChangeCreationOrUpdateRequest',
  'DataChangeRemovalRequest',
  'DataChangeResponse',
  'DataPoint',
];
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

describe('GET /openapi.json for client generators', () => {
  it('names the component schemas and refers to them from every body and answer', () => {
    expect(Object.keys(doc.components.schemas)).toEqual(expect.arrayContaining(NAMED));
    const at = (r: (typeof routes)[number]) => doc.paths[openApiPath(r.path)][r.method];
    const named = (schema: any) => (schema.type === 'array' ? schema.items : schema);
    for (const r of routes) {
      const op = at(r);
      if (r.body)
        expect(named(op.requestBody.content['application/json'].schema).$ref, r.operationId).toMatch(/^#\/components\/schemas\/\w+$/);
      for (const [status, res] of Object.entries<any>(op.responses)) {
        for (const media of Object.values<any>(res.content ?? {}))
          expect(named(media.schema).$ref, `${r.operationId} ${status}`).toMatch(/^#\/components\/schemas\/\w+$/);
      }
    }
    // Every reference resolves, and the envelopes refer to their nodes.
    const refs = JSON.stringify(doc).match(/"#\/components\/schemas\/[^"]+"/g) ?? [];
    for (const r of refs) expect(doc.components.schemas, r).toHaveProperty(JSON.parse(r).slice('#/components/schemas/'.length));
    expect(doc.paths['/api/v2/subject'].get.responses['200'].content['application/json'].schema).toEqual(ref('SubjectPage'));
    expect(doc.components.schemas.SubjectEdge.properties.Node).toEqual(ref('Subject'));
    expect(doc.components.schemas.SubjectWithLocations.properties.StructuralEntities.items).toEqual(ref('StructuralEntity'));
    expect(doc.components.schemas.StructuralEntityPage.properties.Edges.items).toEqual(ref('StructuralEntityEdge'));
    expect(doc.components.schemas.SubjectPortalUserPage.properties.edges.items).toEqual(ref('SubjectPortalUserEdge'));
    expect(doc.paths['/api/v2/messaging/subject'].post.requestBody.content['application/json'].schema).toEqual(ref('UpsertSubjectRequest'));
    expect(doc.paths['/api/v2/messaging/subject'].post.responses['201'].content['application/json'].schema).toEqual(
      ref('UpsertSubjectResponse'),
    );
    expect(doc.paths['/api/v1/structuralEntity'].put.requestBody.content['application/json'].schema).toEqual(
      ref('UpsertStructuralEntityRequest'),
    );
    expect(doc.paths['/api/v2/subject/{subjectId}'].patch.requestBody.content['application/json'].schema).toEqual(
      ref('UpdateSubjectRequest'),
    );
  });

  it('types the query parameters as the contract says', () => {
    const param = (p: string, m: string, name: string) => doc.paths[p][m].parameters.find((x: { name: string }) => x.name === name);
    for (const [p, m] of [
      ['/api/v2/subject', 'get'],
      ['/api/v1/structuralEntity', 'get'],
      ['/api/v1/subject/{subjectId}/subjectAccessUsers', 'get'],
    ]) {
      expect(param(p!, m!, 'First').schema, p).toEqual({ type: 'integer', minimum: 0, maximum: 1000 });
      expect(param(p!, m!, 'Last').schema, p).toEqual({ type: 'integer', minimum: 0, maximum: 1000 });
      expect(param(p!, m!, 'OrderDirection').schema, p).toEqual({ type: 'string', enum: ['Ascending', 'Descending'] });
      expect(param(p!, m!, 'After').schema, p).toEqual({ type: 'string' });
    }
    expect(param('/api/v2/subject', 'get', 'IncludeDescendants').schema).toEqual({ type: 'boolean' });
    expect(param('/api/v2/subject', 'get', 'customFieldValueFilter.match').schema).toEqual({
      type: 'string',
      enum: ['ExactAll', 'ExactAny'],
    });
    expect(param('/api/v2/subject', 'get', 'StructuralEntityKeys')).toMatchObject({
      schema: { type: 'array', items: { type: 'string' } },
      style: 'form',
      explode: true,
    });
    expect(param('/api/v1/structuralEntity', 'get', 'SubjectAssignable').schema).toEqual({ type: 'boolean' });
    expect(param('/api/v1/structuralEntity', 'get', 'Depth').schema).toMatchObject({ type: 'integer' });
    expect(param('/api/v1/users', 'get', 'includeInactive').schema).toEqual({ type: 'boolean' });
  });

  it("has an example for every operation, each one valid for the route's own schemas", () => {
    for (const r of routes) {
      const op = doc.paths[openApiPath(r.path)][r.method];
      const examples = [
        ...(op.requestBody ? [op.requestBody.content['application/json'].example] : []),
        ...Object.entries<any>(op.responses)
          .filter(([status]) => Number(status) < 400)
          .map(([, res]) => res.content?.['application/json']?.example),
      ].filter((e) => e !== undefined);
      expect(examples.length, r.operationId).toBeGreaterThan(0);
      if (r.body?.example !== undefined) {
        expect(op.requestBody.content['application/json'].example).toEqual(r.body.example);
        const parsed = r.body.schema.safeParse(r.body.example);
        expect(parsed.success, `${r.operationId} body: ${JSON.stringify(parsed.error?.issues)}`).toBe(true);
      }
      for (const [status, res] of Object.entries(r.responses)) {
        if (res.example === undefined) continue;
        const schema = res.schema ?? (status === '400' ? ValidationProblemDetailsSchema : ProblemDetailsSchema);
        const parsed = schema.safeParse(res.example);
        expect(parsed.success, `${r.operationId} ${status}: ${JSON.stringify(parsed.error?.issues)}`).toBe(true);
      }
    }
  });

  // P61: OpenAPI types a sent value, so a typed client refuses a wrong kind.
  it('generates a TypeScript client with openapi-typescript that compiles with tsc, examples included', async () => {
    const client = astToString(await openapiTS(structuredClone(doc)));
    // Every example of the document, typed by the generated client: the examples and the types agree.
    const typed: string[] = [];
    for (const [p, ops] of Object.entries<any>(doc.paths)) {
      for (const [m, op] of Object.entries<any>(ops)) {
        const at = `paths[${JSON.stringify(p)}][${JSON.stringify(m)}]`;
        const body = op.requestBody?.content?.['application/json']?.example;
        if (body !== undefined)
          typed.push(
            `export const body_${op.operationId}: NonNullable<${at}['requestBody']>['content']['application/json'] = ${JSON.stringify(body)};`,
          );
        for (const [status, res] of Object.entries<any>(op.responses)) {
          for (const [media, content] of Object.entries<any>(res.content ?? {})) {
            if (content.example === undefined) continue;
            typed.push(
              `export const answer_${op.operationId}_${status}: ${at}['responses'][${status}]['content'][${JSON.stringify(media)}] = ${JSON.stringify(content.example)};`,
            );
          }
        }
      }
    }
    const usage = `import type { components, operations, paths } from './client';

type Json<P extends keyof paths, M extends 'get' | 'put' | 'post' | 'patch' | 'delete'> = paths[P][M] extends { responses: { 200: { content: { 'application/json': infer T } } } } ? T : never;
export const externalId: paths['/api/v2/subject']['get']['responses'][200]['content']['application/json']['Edges'][number]['Node']['ExternalId'] = 'E-1003';
export const firstSubject = (page: Json<'/api/v2/subject', 'get'>): components['schemas']['Subject'] | undefined => page.Edges[0]?.Node;
export const locations = (s: Json<'/api/v2/subject/{subjectId}', 'get'>): components['schemas']['StructuralEntity'][] => s.StructuralEntities;
export const entityPage: components['schemas']['StructuralEntityPage'] | undefined = undefined;
export const portalPage: components['schemas']['SubjectPortalUserPage'] | undefined = undefined;
export const users: components['schemas']['User'][] = [{ id: 'u-ann', displayName: 'Ann Smith' }];
export const upsert: components['schemas']['UpsertSubjectRequest'] = { CustomFieldValues: [{ Key: 'employeeNumber', Value: { String: { Value: 'E-1003' } } }] };
export const upserted = (a: components['schemas']['UpsertSubjectResponse']): string => a.internalId;
export const entity: components['schemas']['UpsertStructuralEntityRequest'] = { Key: 'sales-west', ParentKey: null };
export const update: components['schemas']['UpdateSubjectRequest'] = { CustomFields: [] };
export const invalid = (p: components['schemas']['ValidationProblemDetails']): string[] => Object.keys(p.errors ?? {});
export const notFound = (p: components['schemas']['ProblemDetails']): string => p.traceId;
export const subjects: NonNullable<operations['getSubjects']['parameters']['query']> = {
  First: 1000, Last: 0, OrderDirection: 'Descending', IncludeDescendants: true, 'customFieldValueFilter.match': 'ExactAny', StructuralEntityKeys: ['hq'],
};
export const entities: NonNullable<operations['getStructuralEntities']['parameters']['query']> = { Depth: 2, SubjectAssignable: true };
export const inactive: NonNullable<operations['getUsers']['parameters']['query']> = { includeInactive: true };
// @ts-expect-error the documented directions only
export const sideways: NonNullable<operations['getSubjects']['parameters']['query']>['OrderDirection'] = 'Sideways';
// @ts-expect-error First is a number
export const firstText: NonNullable<operations['getSubjects']['parameters']['query']>['First'] = '20';
// @ts-expect-error a boolean, not text
export const descendantsText: NonNullable<operations['getSubjects']['parameters']['query']>['IncludeDescendants'] = 'true';
${typed.join('\n')}
`;
    const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-openapi-client-'));
    try {
      await writeFile(path.join(dir, 'client.ts'), client);
      await writeFile(path.join(dir, 'usage.ts'), usage);
      const program = ts.createProgram([path.join(dir, 'usage.ts')], {
        strict: true,
        noUncheckedIndexedAccess: true,
        exactOptionalPropertyTypes: true,
        noEmit: true,
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        moduleResolution: ts.ModuleResolutionKind.Bundler,
        lib: ['lib.es2022.d.ts'],
        types: [],
      });
      const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => {
        const where =
          d.file && d.start !== undefined
            ? `${path.basename(d.file.fileName)}:${d.file.getLineAndCharacterOfPosition(d.start).line + 1} `
            : '';
        return `${where}${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      });
      expect(diagnostics).toEqual([]);
      expect(program.getSourceFiles().map((f) => path.basename(f.fileName))).toEqual(expect.arrayContaining(['client.ts', 'usage.ts']));
      expect(typed.length).toBeGreaterThan(routes.length);

      // A file that must not compile: a misspelt data type name and a value of the wrong JSON kind in the
      // main write shape are compile errors for a typed client, each on its own line.
      await writeFile(
        path.join(dir, 'wrong.ts'),
        `import type { components } from './client';
type Sent = components['schemas']['CustomFieldValueInput'];
export const misspelt: Sent = { Key: 'grade', Value: { Strng: { Value: 'x' } } };
export const wrongKind: Sent = { Key: 'grade', Value: { Integer: { Value: '5' } } };
export const wrongInList: Sent = { Key: 'tags', Value: [{ String: { Value: 'a' } }, { Boolean: { Value: 1 } }] };
export const fine: Sent[] = [{ Key: 'grade', Value: { Integer: { Value: 5 } } }, { Key: 'tags', Value: [{ String: { Value: 'a' } }] }, { Key: 'x', Value: null }];
`,
      );
      const failing = ts.createProgram([path.join(dir, 'wrong.ts')], program.getCompilerOptions());
      const errorLines = ts
        .getPreEmitDiagnostics(failing)
        .filter((d) => d.file && path.basename(d.file.fileName) === 'wrong.ts' && d.start !== undefined)
        .map((d) => d.file!.getLineAndCharacterOfPosition(d.start!).line + 1);
      expect([...new Set(errorLines)].sort()).toEqual([3, 4, 5]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

// The document and the binding agree: every value a generated client may send for a typed query
// parameter is accepted (no 400), and the bounds of the integers are where the service draws them.
describe('documented query parameter types and the service', () => {
  let tenant: TestTenant;
  let token: string;
  let subjectId: string;
  beforeAll(async () => {
    tenant = await createTenant(app);
    token = await tenant.token();
    const api = await tenant.client();
    const created = await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'E-1' } } },
        { Key: 'fullName', Value: { String: { Value: 'Lars Berg' } } },
      ],
    });
    expect(created.status).toBe(201);
    subjectId = created.body.internalId;
  });

  // A subject that exists, so a list of its portal users gets as far as its paging checks.
  const send = async (p: string, method: string, name: string, value: string) => {
    const url = new URL(`${app.url}${p.replace('{subjectId}', subjectId)}`);
    url.searchParams.set(name, value);
    const res = await fetch(url, { method: method.toUpperCase(), headers: { authorization: `Bearer ${token}` } });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
  };

  it('accepts every documented value, enum names in any case, and rejects integers out of range naming the parameter', async () => {
    let checked = 0;
    for (const [p, ops] of Object.entries<any>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(ops)) {
        for (const param of op.parameters ?? []) {
          if (param.in !== 'query') continue;
          const s = param.schema;
          const good: string[] = [];
          const bad: string[] = [];
          if (s.enum) good.push(...s.enum, ...s.enum.map((v: string) => v.toLowerCase()), ...s.enum.map((v: string) => v.toUpperCase()));
          else if (s.type === 'boolean') good.push('true', 'false', 'TRUE', 'False');
          else if (s.type === 'integer') {
            good.push(String(s.minimum), String(s.maximum));
            bad.push(String(s.minimum - 1), String(s.maximum + 1));
          } else continue;
          for (const v of good) {
            const res = await send(p, method, param.name, v);
            expect([200, 404], `${op.operationId} ${param.name}=${v}: ${JSON.stringify(res.body)}`).toContain(res.status);
            checked++;
          }
          for (const v of bad) {
            expectValidation({ ...(await send(p, method, param.name, v)) }, param.name);
            checked++;
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(40);
  });
});
