import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox } from '../src/domains/data/index.js';
import { TenantConfigError, applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { ApiClient, FULL_CLIENT, type TestApp, createTenant, expectProblem, expectValidation, startApp, tenantConfig } from './helpers.js';

// Inputs at the limits and the paths a review found open: each must be a named 4xx, never a 500.
let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

const sv = (key: string, type: string, value: unknown) => ({ Key: key, Value: { [type]: { Value: value } } });
const person = (n: string, ...more: object[]) => ({
  CustomFieldValues: [sv('employeeNumber', 'String', n), sv('fullName', 'String', `Person ${n}`), ...more],
});
const apply = (doc: unknown) => applyTenantFile(app.handle.db, new SecretBox(app.handle.db, undefined), doc, { listen: app.handle.listen });
const cursor = (parts: unknown[]) => Buffer.from(JSON.stringify(parts)).toString('base64url');

describe('long values (P5: btree entries are bounded, values are not)', () => {
  it('a 20,000-character String value is stored, returned and found by an exact filter', async () => {
    const api = await (await createTenant(app)).client();
    const long = 'ü'.repeat(20_000);
    const r = await api.post('/api/v2/messaging/subject', person('L-1', sv('email', 'String', long)));
    expect(r.status, JSON.stringify(r.body).slice(0, 300)).toBe(201);
    // A URL cannot carry 20,000 characters (the HTTP server's header limit): filter through GraphQL.
    const q =
      'query($v: String!) { subjects(customFieldValueFilter: { values: [{ key: "email", values: [$v] }] }) { edges { node { externalId } } } }';
    expect((await api.gql(q, { v: long })).body.data.subjects.edges).toEqual([{ node: { externalId: 'L-1' } }]);
    // Over the btree limit (~2.7 kB) and still a URL: the REST filter.
    const mid = 'x'.repeat(3_000);
    expect((await api.post('/api/v2/messaging/subject', person('L-2', sv('email', 'String', mid)))).status).toBe(201);
    const found = await api.get(`/api/v2/subject?customFieldValueFilter.values[email]=${mid}`);
    expect(found.body.Edges.map((e: any) => e.Node.ExternalId)).toEqual(['L-2']);
    expect((await api.get('/api/v2/subject?OrderBy=email')).status).toBe(200);
  });

  it('a 5,000-character matching value is a subject like any other (D7)', async () => {
    const api = await (await createTenant(app)).client();
    const id = '東'.repeat(5_000);
    expect((await api.post('/api/v2/messaging/subject', person(id))).status).toBe(201);
    expect((await api.post('/api/v2/messaging/subject', person(id))).status).toBe(200);
  });

  it('a key over 200 or a DisplayName over 400 characters is 400 naming it, nothing written (P5)', async () => {
    const api = await (await createTenant(app)).client();
    expectValidation(
      await api.put('/api/v1/structuralEntity', { Key: 'k'.repeat(201), DisplayName: 'x', StructureTypeKey: 'company' }),
      'Key',
    );
    expectValidation(
      await api.put('/api/v1/structuralEntity', { Key: 'k', DisplayName: '東'.repeat(401), StructureTypeKey: 'company' }),
      'DisplayName',
    );
    expect(
      (await api.put('/api/v1/structuralEntity', { Key: 'k', DisplayName: '東'.repeat(400), StructureTypeKey: 'company' })).status,
    ).toBe(201);
    expect((await api.get('/api/v1/structuralEntity?OrderBy=DisplayName')).body.PageInfo.TotalCount).toBe(1);
  });
});

describe('forged cursors are 400, never 500 (D6)', () => {
  it.each([
    ['a NUL in the value', ['subject', 'ExternalId', '0a\u0000b', '00000000-0000-4000-8000-000000000000']],
    ['a NUL in the id', ['structuralEntity', 'Key', 'a', 'a\u0000b']],
    ['year 0000 in a date', ['structuralEntity', 'opened', '0000-01-01', 'a']],
    ['an offset of +99 hours', ['structuralEntity', 'opened', '2024-01-01 00:00:00+99', 'a']],
  ])('%s', async (_name, parts) => {
    const t = await createTenant(app, {
      structureTypes: [{ key: 'dept', name: 'Dept', customFields: [{ key: 'opened', name: 'Opened', dataType: 'DateTime' }] }],
    });
    const api = await t.client();
    const list = parts[0] === 'subject' ? '/api/v2/subject' : '/api/v1/structuralEntity';
    const orderBy = parts[1] === 'ExternalId' ? 'ExternalId' : parts[1];
    expectValidation(await api.get(`${list}?OrderBy=${orderBy}&After=${cursor(parts)}`), 'After');
  });
});

describe('authentication edges (D4)', () => {
  it('a NUL in a token form field is 400 invalid_request', async () => {
    const t = await createTenant(app);
    const body = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: `${t.key}\u0000`,
      client_id: 'full',
      client_secret: FULL_CLIENT.clientSecret,
    });
    const res = await fetch(`${app.url}/connect/token`, { method: 'POST', body });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('invalid_request');
  });

  it('GET /graphql with Accept: text/* executes nothing without a token: 401', async () => {
    const res = await fetch(`${app.url}/graphql?query=${encodeURIComponent('{ structuralEntities { totalCount } }')}`, {
      headers: { accept: 'text/*' },
    });
    expect(res.status).toBe(401);
  });

  it('a scope taken from the client stops working for tokens issued before (P8)', async () => {
    const cfg = tenantConfig();
    await apply({ tenants: [cfg] });
    const api = new ApiClient(app.url, await (await createTenant(app, { key: cfg.key })).token());
    expect((await api.get('/api/v1/structuralEntity')).status).toBe(200);
    await apply({ tenants: [{ ...cfg, clients: [{ ...FULL_CLIENT, scopes: ['ServiceDataProviderApi'] }] }] });
    expectProblem(await api.get('/api/v1/structuralEntity'), 403);
  });

  // P48: configuration is cached per (tenant, config_version): an apply holds at once.
  it('a permission or a subject field changed by a tenant apply holds on the next request (issue 8: cached per configuration version)', async () => {
    const cfg = tenantConfig();
    await apply({ tenants: [cfg] });
    const api = new ApiClient(app.url, await (await createTenant(app, { key: cfg.key })).token());
    expect((await api.get('/api/v2/subject')).status).toBe(200);
    const nick = { CustomFieldValues: [...person('N1').CustomFieldValues, { Key: 'nickname', Value: { String: { Value: 'Nico' } } }] };
    expectValidation(await api.post('/api/v2/messaging/subject', nick), 'CustomFieldValues[2].Key');
    await apply({
      tenants: [{ ...cfg, subjectFields: [...cfg.subjectFields, { key: 'nickname', name: 'Nickname', dataType: 'String' }] }],
    });
    expect((await api.post('/api/v2/messaging/subject', nick)).status).toBe(201);
    await apply({ tenants: [{ ...cfg, clients: [{ ...FULL_CLIENT, permissions: ['List:StructuralEntity'] }] }] });
    expectProblem(await api.get('/api/v2/subject'), 403);
    expect((await api.get('/api/v1/structuralEntity')).status).toBe(200);
  });

  it('without the permission, a non-UUID subject id is 403 (the permission comes first), with it 404', async () => {
    const t = await createTenant(app, {
      clients: [FULL_CLIENT, { clientId: 'lister', clientSecret: 'lister-secret', scopes: ['ServiceApi'], permissions: ['List:Subject'] }],
    });
    const lister = await t.client({ clientId: 'lister', clientSecret: 'lister-secret' });
    expectProblem(await lister.get('/api/v2/subject/not-a-uuid'), 403);
    expectProblem(await (await t.client()).get('/api/v2/subject/not-a-uuid'), 404);
  });
});

describe('tenant configuration edges (D3, D7)', () => {
  it('upserting subjects in a tenant without matching fields is 409, never a merge of two subjects', async () => {
    const api = await (await createTenant(app, { matchingFieldKeys: undefined, externalIdFieldKey: undefined })).client();
    expectProblem(await api.post('/api/v2/messaging/subject', person('A')), 409);
    expect((await api.get('/api/v2/subject')).body.PageInfo.TotalCount).toBe(0);
  });

  it('an empty matchingFieldKeys list is rejected', async () => {
    await expect(apply({ tenants: [tenantConfig({ matchingFieldKeys: [] })] })).rejects.toThrow(/matchingFieldKeys/);
  });

  it('a clientSecretHash with parameters scrypt rejects is a file error, not a failing token endpoint', async () => {
    const hash = `scrypt$3$8$1$${'A'.repeat(22)}$${'A'.repeat(43)}`;
    const err = await apply({
      tenants: [tenantConfig({ clients: [{ clientId: 'c', clientSecretHash: hash, scopes: ['ServiceApi'], permissions: [] }] })],
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TenantConfigError);
    expect((err as TenantConfigError).problems.map((p) => p.path)).toContain('tenants[0].clients[0].clientSecretHash');
  });

  it('a structure type field holding values cannot change its data type; the entity keeps its value', async () => {
    const cfg = tenantConfig({
      structuralEntities: [
        {
          key: 'd1',
          displayName: 'D1',
          structureTypeKey: 'department',
          customFieldValues: [{ key: 'costCenter', value: { String: { Value: 'abc' } } }],
        },
      ],
    });
    await apply({ tenants: [cfg] });
    const types = (cfg.structureTypes as any[]).map((t) =>
      t.key === 'department'
        ? { ...t, customFields: t.customFields.map((f: any) => (f.key === 'costCenter' ? { ...f, dataType: 'Integer' } : f)) }
        : t,
    );
    const err = await apply({ tenants: [{ ...cfg, structureTypes: types }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TenantConfigError);
    expect((err as TenantConfigError).problems.map((p) => p.path)).toContain('tenants[0].structureTypes[1].customFields[0].dataType');
    const api = await (await createTenant(app, { key: cfg.key })).client();
    const d1 = await api.get('/api/v1/structuralEntity/d1');
    expect(d1.body.CustomFieldValues[0].Value).toMatchObject({ DataType: 'String', ValueText: 'abc' });
    expect((await api.get('/api/v1/structuralEntity?OrderBy=costCenter')).status).toBe(200);
  });

  it('DELETE locations without keys names the documented parameter `keys`', async () => {
    const api = await (await createTenant(app)).client();
    const id = (await api.post('/api/v2/messaging/subject', person('K-1'))).body.internalId;
    expectValidation(await api.delete(`/api/v1/subject/${id}/structuralEntities`), 'keys');
  });
});

describe('nodes(ids) with a forbidden item (D4, D11)', () => {
  it("fails only that item; the next item is its own node, not a neighbour's", async () => {
    const t = await createTenant(app, {
      clients: [
        FULL_CLIENT,
        { clientId: 'viewer', clientSecret: 'viewer-secret', scopes: ['ServiceApi'], permissions: ['View:StructuralEntity'] },
      ],
      structuralEntities: [{ key: 'root', displayName: 'Root', structureTypeKey: 'company' }],
    });
    const full = await t.client();
    const subjectId = (await full.post('/api/v2/messaging/subject', person('N-1'))).body.internalId;
    const subjectGid = Buffer.from(`Subject:${subjectId}`).toString('base64');
    const entityGid = Buffer.from('StructuralEntity:root').toString('base64');
    const viewer = await t.client({ clientId: 'viewer', clientSecret: 'viewer-secret' });
    const res = await viewer.gql(
      'query($ids: [ID!]!) { nodes(ids: $ids) { id ... on StructuralEntity { key } ... on Subject { externalId } } }',
      { ids: [subjectGid, entityGid] },
    );
    expect(res.status).toBe(200);
    expect(res.body.data.nodes).toEqual([null, { id: entityGid, key: 'root' }]);
    expect(res.body.errors).toHaveLength(1);
    expect(res.body.errors![0]).toMatchObject({ path: ['nodes', 0], extensions: { code: 'FORBIDDEN' } });
  });
});

describe('second review: GraphQL limits and ids (D4, D11, P28, P29)', () => {
  it('a malformed global id fails only its own field; the rest of the query is answered', async () => {
    const api = await (
      await createTenant(app, { structuralEntities: [{ key: 'root', displayName: 'Root', structureTypeKey: 'company' }] })
    ).client();
    const res = await api.gql('{ a: node(id: "garbage") { id } b: structuralEntities(first: 1) { totalCount } }');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ a: null, b: { totalCount: 1 } });
    expect(res.body.errors!.map((e: any) => e.path)).toEqual([['a']]);
  });

  it('nodes(ids) takes at most 100 ids (its cost counts 100): more is a BAD_REQUEST on that field', async () => {
    const api = await (await createTenant(app)).client();
    const ids = Array.from({ length: 101 }, (_, i) => Buffer.from(`StructuralEntity:k${i}`).toString('base64'));
    const res = await api.gql('query($ids: [ID!]!) { nodes(ids: $ids) { id } }', { ids });
    // nodes is [Node]! (Relay), so its error nulls the data.
    expect(res.body.data).toBeNull();
    expect(res.body.errors![0]).toMatchObject({ path: ['nodes'], extensions: { code: 'BAD_REQUEST' } });
    expect((await api.gql('query($ids: [ID!]!) { nodes(ids: $ids) { id } }', { ids: ids.slice(0, 100) })).body.errors).toBeUndefined();
  });

  it("more than two introspection root fields are rejected before execution; GraphiQL's own introspection passes", async () => {
    const api = await (await createTenant(app)).client();
    const fanOut = await api.gql(`{ ${[1, 2, 3].map((i) => `a${i}: __schema { types { name fields { name } } }`).join(' ')} }`);
    expect(fanOut.body.data).toBeUndefined();
    expect(fanOut.body.errors![0]!.message).toMatch(/introspection/);
    const { getIntrospectionQuery } = await import('graphql');
    const full = await api.gql(getIntrospectionQuery());
    expect(full.body.errors).toBeUndefined();
    expect(full.body.data.__schema.queryType.name).toBe('Query');
  });

  it('a relevance cursor holding a float PostgreSQL cannot read is 400 (D6)', async () => {
    const api = await (await createTenant(app)).client();
    const c = cursor(['subject~ann', '~relevance', '1e-400', '00000000-0000-4000-8000-000000000000']);
    expectValidation(await api.get(`/api/v2/subject?SearchTerm=ann&After=${c}`), 'After');
  });
});

describe('second review: configuration edges (P9, D3)', () => {
  it('a structure type field dropped and re-added with another data type starts empty', async () => {
    const cfg = tenantConfig({
      structuralEntities: [
        {
          key: 'd1',
          displayName: 'D1',
          structureTypeKey: 'department',
          customFieldValues: [{ key: 'costCenter', value: { String: { Value: 'CC-1' } } }],
        },
      ],
    });
    await apply({ tenants: [cfg] });
    const department = (cfg.structureTypes as any[]).find((t) => t.key === 'department');
    const without = { ...department, customFields: department.customFields.filter((f: any) => f.key !== 'costCenter') };
    const readded = {
      ...department,
      customFields: [...without.customFields, { key: 'costCenter', name: 'Cost center', dataType: 'Integer' }],
    };
    const others = (cfg.structureTypes as any[]).filter((t) => t.key !== 'department');
    await apply({ tenants: [{ ...cfg, structuralEntities: [], structureTypes: [...others, without] }] });
    await apply({ tenants: [{ ...cfg, structuralEntities: [], structureTypes: [...others, readded] }] });
    const api = await (await createTenant(app, { key: cfg.key, structuralEntities: [], structureTypes: [...others, readded] })).client();
    expect((await api.get('/api/v1/structuralEntity/d1')).body.CustomFieldValues).toEqual([]);
    expect((await api.get('/api/v1/structuralEntity?OrderBy=costCenter')).status).toBe(200);
  });

  it('a clientSecretHash needing more scrypt memory than verification allows is a file error', async () => {
    const hash = `scrypt$262144$8$1$${'A'.repeat(22)}$${'A'.repeat(43)}`;
    const err = await apply({
      tenants: [tenantConfig({ clients: [{ clientId: 'c', clientSecretHash: hash, scopes: ['ServiceApi'], permissions: [] }] })],
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TenantConfigError);
  });
});
