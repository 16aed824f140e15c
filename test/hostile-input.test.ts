import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { ApiClient, type TestApp, createTenant, expectProblem, expectValidation, startApp, startPeer, tenantConfig } from './helpers.js';

// Issue 9: inputs an attacker would send. Each is a named 4xx that changes nothing, never a 500.

let app: TestApp;
let api: ApiClient;
beforeAll(async () => {
  app = await startApp();
  const base = tenantConfig();
  api = await (
    await createTenant(app, { subjectFields: [...base.subjectFields, { key: 'hired', name: 'Hired', dataType: 'DateTime' }] })
  ).client();
});
afterAll(() => app?.close());

const person = (n: string, hired: unknown) => ({
  CustomFieldValues: [
    { Key: 'employeeNumber', Value: { String: { Value: n } } },
    { Key: 'fullName', Value: { String: { Value: `Person ${n}` } } },
    { Key: 'hired', Value: { DateTime: { Value: hired } } },
  ],
});

describe('issue 9 item 5: date-times both databases can hold', () => {
  it('rejects instants outside years 0001-9999 in UTC and offsets beyond ±14:00, naming the location', async () => {
    for (const bad of [
      '0001-01-01T00:00:00+14:00',
      '9999-12-31T23:00:00-14:00',
      '2024-05-01T10:00:00+99:99',
      '2024-05-01T10:00:00+14:30',
    ]) {
      const r = await api.post('/api/v2/messaging/subject', person(`D-${bad}`, bad));
      expectValidation(r, 'CustomFieldValues[2].Value.DateTime.Value');
    }
    // Nothing was written, and ordering by the field still works for the tenant.
    expect((await api.get('/api/v2/subject')).body.PageInfo.TotalCount).toBe(0);
    expect((await api.post('/api/v2/messaging/subject', person('D-ok', '0001-01-01T00:00:00Z'))).status).toBe(201);
    expect((await api.post('/api/v2/messaging/subject', person('D-ok2', '9999-12-31T23:59:59.999+00:00'))).status).toBe(201);
    expect((await api.post('/api/v2/messaging/subject', person('D-ok3', '2024-05-01T10:00:00-12:00'))).status).toBe(201);
    const ordered = await api.get('/api/v2/subject?OrderBy=hired');
    expect(ordered.status).toBe(200);
    expect(ordered.body.Edges.map((e: any) => e.Node.ExternalId)).toEqual(['D-ok', 'D-ok3', 'D-ok2']);
  });
});

describe('issue 9 item 8: bounded search work', () => {
  it('rejects a search term over 200 characters on every list, naming SearchTerm', async () => {
    const long = 'a'.repeat(201);
    expectValidation(await api.get(`/api/v2/subject?SearchTerm=${long}`), 'SearchTerm');
    expectValidation(await api.get(`/api/v1/structuralEntity?SearchTerm=${long}`), 'SearchTerm');
    expectValidation(await api.get(`/api/v1/users?searchTerm=${long}`), 'searchTerm');
    const gql = await api.gql('query($t: String) { subjects(searchTerm: $t) { totalCount } }', { t: long });
    expect(gql.body.errors[0].extensions.code).toBe('BAD_REQUEST');
    expect((await api.get(`/api/v2/subject?SearchTerm=${'a'.repeat(200)}`)).status).toBe(200);
  });

  // P22: relevance cursors are bound to the term by a digest.
  it('keeps relevance cursors small whatever the term', async () => {
    await api.post('/api/v2/messaging/subject', person('S-1', '2024-05-01T10:00:00Z'));
    const term = 'Person S'.padEnd(200, 'x');
    const r = await api.get(`/api/v2/subject?SearchTerm=${encodeURIComponent('Person S-1')}&First=1`);
    expect(r.status).toBe(200);
    expect(r.body.Edges[0].Cursor.length).toBeLessThan(200);
    const long = await api.get(`/api/v2/subject?SearchTerm=${encodeURIComponent(term)}&First=1`);
    expect(long.status).toBe(200);
    for (const e of long.body.Edges) expect(e.Cursor.length).toBeLessThan(200);
  });
});

describe('issue 9 items 6 and 7: paths and the GraphQL endpoint', () => {
  const auth = () => ({ authorization: `Bearer ${api.token}` });

  it('answers malformed percent-encoding in a path parameter with 400', async () => {
    for (const p of ['/api/v2/subject/%zz', '/api/v2/subject/%ED%A0%80', '/api/v1/structuralEntity/%E0%A4%A']) {
      const r = await fetch(`${app.url}${p}`, { headers: auth() });
      expect(r.status, p).toBe(400);
      expect(r.headers.get('content-type')).toMatch(/problem\+json/);
    }
  });

  it('answers GET variables that are not a JSON object with a coded GraphQL error', async () => {
    for (const v of ['garbage', '[1]', '"x"']) {
      const r = await fetch(`${app.url}/graphql?query=${encodeURIComponent('{ __typename }')}&variables=${encodeURIComponent(v)}`, {
        headers: auth(),
      });
      expect(r.status, v).toBe(400);
      expect((await r.json()).errors[0].extensions.code).toBe('BAD_REQUEST');
    }
  });

  it('rejects documents nested thousands of levels, or too long, before parsing them', async () => {
    const deep = `query { ${'subjects { edges { node { structuralEntities { edges { node { '.repeat(600)}${'} '.repeat(3600)}}`;
    const frag = `{ ${'...on Query { '.repeat(3000)}__typename${' }'.repeat(3000)} }`;
    const long = `{ ${'__typename '.repeat(30_000)}}`;
    for (const query of [deep, frag, long]) {
      const r = await api.gql(query);
      expect(r.body.errors[0].extensions.code).toBe('BAD_REQUEST');
      expect(r.body.errors[0].message).toMatch(/nests deeper|tokens/);
    }
    // The service is still there.
    expect((await fetch(`${app.url}/healthz`)).status).toBe(200);
  });

  it('limits a GraphQL body to MAX_BODY_BYTES like REST (413)', async () => {
    const r = await api.request('POST', '/graphql', { body: { query: '{ __typename }', variables: { x: 'a'.repeat(2 * 1024 * 1024) } } });
    expect(r.status).toBe(413);
  });
});

// P47: input limits are checked in the shared binding before anything is walked.
describe('issue 9 items 4 and 8: long lists', () => {
  it('binds a list as one array parameter, and refuses lists over 1000 items naming them', async () => {
    const keys = Array.from({ length: 1000 }, (_, i) => `k-${i}`);
    const list = await api.gql('query($k: [String!]) { subjects(structuralEntityKeys: $k) { totalCount } }', { k: keys });
    expect(list.body.errors).toBeUndefined();
    expect(list.body.data.subjects.totalCount).toBe(0);
    const many = Array.from({ length: 70_000 }, (_, i) => `k-${i}`);
    const tooMany = await api.gql('query($k: [String!]) { subjects(structuralEntityKeys: $k) { totalCount } }', { k: many });
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.errors[0].extensions.code).toBe('BAD_REQUEST');
    const id = (await api.post('/api/v2/messaging/subject', person('K-1', '2024-05-01T10:00:00Z'))).body.internalId;
    expectValidation(await api.put(`/api/v1/subject/${id}/structuralEntities`, { Keys: many.slice(0, 40_000) }), 'Keys');
    expectValidation(
      await api.get(
        `/api/v2/subject?StructuralEntityKeys=${many
          .slice(0, 1001)
          .map((k) => k.slice(2))
          .join(',')}`,
      ),
      'StructuralEntityKeys',
    );
    expectValidation(
      await api.post('/api/v2/messaging/subject', {
        CustomFieldValues: [{ Key: 'fullName', Value: { String: { Value: 'x'.repeat(70_000) } } }],
      }),
      'CustomFieldValues[0].Value.String.Value',
    );
  });
});

describe('issue 9 items 1-3: names, nesting and text the database cannot hold', () => {
  it('treats prototype names in a query or a body as names like any other (no 500)', async () => {
    for (const q of ['constructor=1', '__proto__=x', 'hasOwnProperty=x', 'toString=1&valueOf=2']) {
      const r = await api.get(`/api/v2/subject?${q}`);
      expect(r.status, q).toBe(200);
      expect((await api.get(`/api/v1/structuralEntity?${q}`)).status, q).toBe(200);
    }
    const put = await api.request('PUT', '/api/v1/structuralEntity', {
      raw: '{"constructor": 1, "__proto__": {"Key": "x"}, "Key": "proto-test", "DisplayName": "P", "StructureTypeKey": "company"}',
      headers: { 'content-type': 'application/json' },
    });
    expect(put.status).toBe(201);
    expect(put.body.Key).toBe('proto-test');
    const id = (await api.post('/api/v2/messaging/subject', person('P-1', '2024-05-01T10:00:00Z'))).body.internalId;
    const patch = await api.request('PATCH', `/api/v2/subject/${id}`, {
      raw: '{"CustomFields": [{"__proto__": {"Key": "fullName"}, "constructor": {}}]}',
      headers: { 'content-type': 'application/json' },
    });
    expect(patch.status).toBe(400);
    expect(patch.headers.get('content-type')).toMatch(/problem\+json/);
  });

  it('refuses a body nested thousands of levels with 400 naming it, before walking it', async () => {
    const deep = `${'['.repeat(5000)}${']'.repeat(5000)}`;
    for (const [method, path] of [
      ['PUT', '/api/v1/structuralEntity'],
      ['POST', '/api/v2/messaging/subject'],
    ] as const) {
      const r = await api.request(method, path, { raw: `{"CustomFieldValues": ${deep}}`, headers: { 'content-type': 'application/json' } });
      expectValidation(r, '$');
    }
    const g = await api.request('POST', '/graphql', {
      raw: JSON.stringify({
        query: 'query($v: JSON) { __typename }',
        variables: { v: JSON.parse(`${'['.repeat(100)}${']'.repeat(100)}`) },
      }),
      headers: { 'content-type': 'application/json' },
    });
    expect(g.status).toBe(400);
  });

  it('rejects lone UTF-16 surrogates wherever text enters, naming the location, writing nothing', async () => {
    const lone = 'bad\udc00name';
    const entity = await api.request('PUT', '/api/v1/structuralEntity', {
      raw: JSON.stringify({ Key: 'sur', DisplayName: lone, StructureTypeKey: 'company' }),
      headers: { 'content-type': 'application/json' },
    });
    expectValidation(entity, 'DisplayName');
    expect((await api.get('/api/v1/structuralEntity/sur')).status).toBe(404);
    const subject = await api.request('POST', '/api/v2/messaging/subject', {
      raw: JSON.stringify(person(`S-${lone}`, '2024-05-01T10:00:00Z')),
      headers: { 'content-type': 'application/json' },
    });
    expectValidation(subject, 'CustomFieldValues[0].Value.String.Value');
    const query = await api.get(`/api/v2/subject?SearchTerm=${encodeURIComponent('a')}%ED%B0%80`);
    expect(query.status).toBe(400);
    const gqlVar = await api.gql('query($t: String) { subjects(searchTerm: $t) { totalCount } }', { t: lone });
    expect(gqlVar.status).toBe(400);
    expect(gqlVar.body.errors[0].extensions.code).toBe('BAD_REQUEST');
    const gqlLiteral = await api.gql(`{ subjects(searchTerm: "${lone}") { totalCount } }`);
    expect(gqlLiteral.body.errors[0].extensions.code).toBe('BAD_REQUEST');
  });
});

describe('issue 9 item 8: a statement timeout bounds the work of a request (PostgreSQL)', () => {
  it('cancels a statement past DATABASE_STATEMENT_TIMEOUT_MS and answers 503 problem+json', async () => {
    if (!app.handle.url) {
      // The embedded database runs statements in-process, one at a time: there is no server to cancel them.
      expect(app.handle.kind).toBe('pglite');
      return;
    }
    const peer = await startPeer(app, { DATABASE_STATEMENT_TIMEOUT_MS: '300' });
    // Another session holds the subject table, so the list's statement waits until it is cancelled.
    const locker = await app.handle.db.connection().execute(async (conn) => {
      await sql`BEGIN`.execute(conn);
      await sql`LOCK TABLE subject IN ACCESS EXCLUSIVE MODE`.execute(conn);
      try {
        const r = await new ApiClient(peer.url, api.token).get('/api/v2/subject');
        return r;
      } finally {
        await sql`ROLLBACK`.execute(conn);
      }
    });
    try {
      const body = expectProblem(locker, 503);
      expect(body.detail).toMatch(/took too long/);
      // The peer is healthy afterwards.
      expect((await new ApiClient(peer.url, api.token).get('/api/v2/subject')).status).toBe(200);
    } finally {
      await peer.close();
    }
  });
});
