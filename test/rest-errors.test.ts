import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ApiClient,
  type ApiResponse,
  FULL_CLIENT,
  type TestApp,
  type TestTenant,
  createTenant,
  startApp,
  expectProblem,
} from './helpers.js';

// D5: every error (except the token endpoint's) is application/problem+json (RFC 9457) with
// {type, title, status, detail, traceId}; validation problems add `errors` keyed by the contract-cased
// location; a failed request writes nothing; a 5xx body never holds a stack trace, SQL or a secret.

const MAX_BODY_BYTES = 2048;

let app: TestApp;
let tenant: TestTenant;
let api: ApiClient;

beforeAll(async () => {
  app = await startApp({ MAX_BODY_BYTES: String(MAX_BODY_BYTES) });
  tenant = await createTenant(app, {
    clients: [
      FULL_CLIENT,
      { clientId: 'reader', clientSecret: 'reader-client-secret', scopes: ['ServiceApi'], permissions: ['View:StructuralEntity'] },
    ],
    structuralEntities: [
      { key: 'root', displayName: 'Root', structureTypeKey: 'company' },
      { key: 'dept', displayName: 'Dept', structureTypeKey: 'department', parentKey: 'root' },
    ],
  });
  api = await tenant.client();
});
afterAll(() => app?.close());

async function entityRows(): Promise<number> {
  const r = await sql<{ n: string | number }>`SELECT count(*) AS n FROM structural_entity`.execute(app.handle.db);
  return Number(r.rows[0]!.n);
}

/** A snapshot of every structural entity row, to prove a failed request changed nothing. */
async function entitySnapshot() {
  return app.handle.db
    .selectFrom('structural_entity')
    .select(['tenant_id', 'key', 'display_name', 'structure_type_key', 'parent_key', 'depth', 'custom_values'])
    .orderBy('tenant_id')
    .orderBy('key')
    .execute();
}

describe('D5 problem+json on every error', () => {
  it('401 without a token is problem+json with a traceId equal to X-Request-Id', async () => {
    const anon = new (api.constructor as typeof ApiClient)(app.url, undefined);
    const res = await anon.get('/api/v1/structuralEntity');
    const body = expectProblem(res, 401);
    expect(body.title).toBe('Unauthorized');
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
  });

  it('403 for a missing scope or permission is problem+json (D4)', async () => {
    const providerOnly = await tenant.client({ scope: 'ServiceDataProviderApi' });
    const scope = await providerOnly.get('/api/v1/structuralEntity');
    expect(expectProblem(scope, 403).title).toBe('Forbidden');
    expect(scope.headers.get('www-authenticate')).toMatch(/^Bearer error="insufficient_scope"/);

    const reader = await tenant.client({ clientId: 'reader', clientSecret: 'reader-client-secret' });
    expect((await reader.get('/api/v1/structuralEntity/root')).status).toBe(200);
    const before = await entityRows();
    expectProblem(await reader.get('/api/v1/structuralEntity'), 403);
    expectProblem(await reader.put('/api/v1/structuralEntity', { Key: 'not-allowed', DisplayName: 'N', StructureTypeKey: 'company' }), 403);
    expect(await entityRows()).toBe(before);
  });

  it('the token endpoint is the exception: RFC 6749 JSON errors, not problem+json (D4)', async () => {
    const res = await fetch(`${app.url}/connect/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'client_credentials' }),
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/json\b/);
    expect(await res.json()).toEqual({ error: 'invalid_request', error_description: expect.any(String) });
  });

  // P4: traceId is the request id, also X-Request-Id; a safe incoming one is reused.
  it('uses a well-formed incoming X-Request-Id as the traceId', async () => {
    const res = await api.get('/api/v1/structuralEntity/does-not-exist', { 'X-Request-Id': 'trace-abc.123' });
    expect(res.headers.get('x-request-id')).toBe('trace-abc.123');
    expect(expectProblem(res, 404).traceId).toBe('trace-abc.123');
  });

  it('unknown path: 404 problem+json, with and without a token', async () => {
    const anon = new (api.constructor as typeof ApiClient)(app.url, undefined);
    for (const client of [api, anon]) {
      const res = await client.get('/api/v1/noSuchThing');
      const body = expectProblem(res, 404);
      expect(body.title).toBe('Not Found');
    }
    // A known path with a method it lacks is 405 (issue 10), not 404.
    expectProblem(await api.request('DELETE', '/api/v1/structuralEntity'), 405);
  });

  it('unknown structural entity key: 404 problem+json', async () => {
    expectProblem(await api.get('/api/v1/structuralEntity/nope'), 404);
  });
});

describe('D5 request bodies', () => {
  it('body over MAX_BODY_BYTES: 413, nothing written', async () => {
    const before = await entitySnapshot();
    const big = JSON.stringify({ Key: 'too-big', DisplayName: 'x'.repeat(MAX_BODY_BYTES * 2), StructureTypeKey: 'company' });
    const res = await api.request('PUT', '/api/v1/structuralEntity', { raw: big, headers: { 'content-type': 'application/json' } });
    const body = expectProblem(res, 413);
    expect(body.title).toBe('Content Too Large');
    expect(await entitySnapshot()).toEqual(before);
  });

  it('a chunked body (no Content-Length) over MAX_BODY_BYTES: 413 too', async () => {
    const bytes = new TextEncoder().encode(
      JSON.stringify({ Key: 'chunked', DisplayName: 'z'.repeat(MAX_BODY_BYTES * 4), StructureTypeKey: 'company' }),
    );
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < bytes.length; i += 1000) c.enqueue(bytes.slice(i, i + 1000));
        c.close();
      },
    });
    const res = await fetch(`${app.url}/api/v1/structuralEntity`, {
      method: 'PUT',
      body: stream,
      headers: { authorization: `Bearer ${api.token}`, 'content-type': 'application/json' },
      duplex: 'half',
    } as RequestInit);
    const text = await res.text();
    expectProblem({ status: res.status, headers: res.headers, body: JSON.parse(text) }, 413);
    expectProblem(await api.get('/api/v1/structuralEntity/chunked'), 404);
  });

  it('a body just under MAX_BODY_BYTES is accepted (the 413 is about size only)', async () => {
    const value = { String: { Value: '' } };
    const payload = {
      Key: 'just-under',
      DisplayName: 'Just under',
      StructureTypeKey: 'department',
      CustomFieldValues: [{ Key: 'costCenter', Value: value }],
    };
    value.String.Value = 'y'.repeat(MAX_BODY_BYTES - JSON.stringify(payload).length - 10);
    expect(JSON.stringify(payload).length).toBeGreaterThan(MAX_BODY_BYTES - 20);
    const res = await api.put('/api/v1/structuralEntity', payload);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.body.Key).toBe('just-under');
  });

  it('wrong content type on PUT: 415, nothing written', async () => {
    const before = await entityRows();
    const json = JSON.stringify({ Key: 'wrong-type', DisplayName: 'W', StructureTypeKey: 'company' });
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const res = await api.request('PUT', '/api/v1/structuralEntity', { raw: json, headers: { 'content-type': type } });
      expect(expectProblem(res, 415).title).toBe('Unsupported Media Type');
    }
    // A body without any Content-Type is not JSON either.
    const res = await api.request('PUT', '/api/v1/structuralEntity', { raw: new TextEncoder().encode(json) });
    expectProblem(res, 415);
    expect(await entityRows()).toBe(before);
  });

  it('JSON with an unsupported charset: 415', async () => {
    const json = JSON.stringify({ Key: 'latin', DisplayName: 'L', StructureTypeKey: 'company' });
    const res = await api.request('PUT', '/api/v1/structuralEntity', {
      raw: json,
      headers: { 'content-type': 'application/json; charset=iso-8859-1' },
    });
    expectProblem(res, 415);
  });

  it('an unsupported Content-Encoding: 415', async () => {
    const res = await api.request('PUT', '/api/v1/structuralEntity', {
      raw: JSON.stringify({ Key: 'enc', DisplayName: 'E', StructureTypeKey: 'company' }),
      headers: { 'content-type': 'application/json', 'content-encoding': 'x-unknown' },
    });
    expectProblem(res, 415);
  });

  it('malformed JSON: 400, nothing written', async () => {
    const before = await entityRows();
    for (const raw of ['{"Key": "broken",', '{Key: "x"}', 'not json at all']) {
      const res = await api.request('PUT', '/api/v1/structuralEntity', { raw, headers: { 'content-type': 'application/json' } });
      const body = expectProblem(res, 400);
      expect(body.detail).toMatch(/JSON/);
    }
    expect(await entityRows()).toBe(before);
  });

  it('missing body: 400 naming the body', async () => {
    const res = await api.request('PUT', '/api/v1/structuralEntity');
    const body = expectProblem(res, 400);
    expect(body.errors).toBeDefined();
    expect(Object.keys(body.errors!)).toHaveLength(1);
    expect(body.errors!['$']![0]).toMatch(/body/i);

    const empty = await api.request('PUT', '/api/v1/structuralEntity', { raw: '', headers: { 'content-type': 'application/json' } });
    expectProblem(empty, 400);
  });

  it('a JSON body that is not an object: 400', async () => {
    for (const raw of ['null', '[]', '"text"', '42']) {
      const res = await api.request('PUT', '/api/v1/structuralEntity', { raw, headers: { 'content-type': 'application/json' } });
      const body = expectProblem(res, 400);
      expect(body.errors).toBeDefined();
    }
  });
});

describe('D5 validation errors are keyed by the contract-cased location', () => {
  it('body properties: PascalCase as in the contract, even when sent in another casing', async () => {
    const res = await api.put('/api/v1/structuralEntity', { key: 42, displayName: 7 });
    const body = expectProblem(res, 400);
    expect(body.errors).toBeDefined();
    expect(Object.keys(body.errors!).sort()).toEqual(['DisplayName', 'Key']);
    for (const messages of Object.values(body.errors!)) {
      expect(messages.length).toBeGreaterThan(0);
      for (const m of messages) expect(typeof m).toBe('string');
    }
  });

  it('a missing required property on create names it', async () => {
    const res = await api.put('/api/v1/structuralEntity', { Key: 'no-name', StructureTypeKey: 'company' });
    const body = expectProblem(res, 400);
    expect(Object.keys(body.errors!)).toEqual(['DisplayName']);
  });

  it('unknown structure type and unknown parent name StructureTypeKey and ParentKey', async () => {
    const res = await api.put('/api/v1/structuralEntity', {
      Key: 'orphan',
      DisplayName: 'O',
      StructureTypeKey: 'nope',
      ParentKey: 'missing-parent',
    });
    const body = expectProblem(res, 400);
    expect(Object.keys(body.errors!).sort()).toEqual(['ParentKey', 'StructureTypeKey']);
  });

  it('custom field values: indexed paths such as CustomFieldValues[2].Value', async () => {
    const res = await api.put('/api/v1/structuralEntity', {
      Key: 'cfv',
      DisplayName: 'Custom values',
      StructureTypeKey: 'department',
      CustomFieldValues: [
        { Key: 'costCenter', Value: { String: { Value: 'CC-1' } } },
        { Key: 'noSuchField', Value: { String: { Value: 'x' } } },
        { Key: 'headcount', Value: { String: { Value: '12' } } },
        { Key: 'opened', Value: { Date: { Value: '2024-13-45' } } },
      ],
    });
    const body = expectProblem(res, 400);
    expect(body.errors).toEqual({
      'CustomFieldValues[1].Key': [expect.any(String)],
      'CustomFieldValues[2].Value': [expect.stringContaining('Integer')],
      'CustomFieldValues[3].Value.Date.Value': [expect.any(String)],
    });
  });

  it('query parameters: the documented name, whatever casing was sent', async () => {
    for (const q of ['First=abc', 'first=abc', 'FIRST=abc']) {
      const body = expectProblem(await api.get(`/api/v1/structuralEntity?${q}`), 400);
      expect(Object.keys(body.errors!)).toEqual(['First']);
    }
    const depth = expectProblem(await api.get('/api/v1/structuralEntity?depth=deep'), 400);
    expect(Object.keys(depth.errors!)).toEqual(['Depth']);
    const assignable = expectProblem(await api.get('/api/v1/structuralEntity?subjectassignable=maybe'), 400);
    expect(Object.keys(assignable.errors!)).toEqual(['SubjectAssignable']);
  });

  it('errors raised by the operation are mapped to the contract casing too (First, OrderBy, After)', async () => {
    expect(Object.keys(expectProblem(await api.get('/api/v1/structuralEntity?first=1001'), 400).errors!)).toEqual(['First']);
    expect(Object.keys(expectProblem(await api.get('/api/v1/structuralEntity?orderBy=Nope'), 400).errors!)).toEqual(['OrderBy']);
    expect(Object.keys(expectProblem(await api.get('/api/v1/structuralEntity?after=garbage!'), 400).errors!)).toEqual(['After']);
  });

  it('an integer query parameter outside the 32-bit range is a 400 naming it, not a 500', async () => {
    // D5/D6: bad input is 400 and names what is wrong.
    const first = expectProblem(await api.get('/api/v1/structuralEntity?First=3000000000'), 400);
    expect(Object.keys(first.errors!)).toEqual(['First']);
    const depth = expectProblem(await api.get('/api/v1/structuralEntity?Depth=99999999999'), 400);
    expect(Object.keys(depth.errors!)).toEqual(['Depth']);
  });
});

describe('D5 the NUL character (which PostgreSQL text cannot hold) is bad input, not a 500', () => {
  it('in a body property, a custom field value and a query parameter: 400 naming the location', async () => {
    const before = await entitySnapshot();
    const key = expectProblem(
      await api.put('/api/v1/structuralEntity', { Key: 'a\u0000b', DisplayName: 'N', StructureTypeKey: 'company' }),
      400,
    );
    expect(Object.keys(key.errors!)).toEqual(['Key']);
    const value = expectProblem(
      await api.put('/api/v1/structuralEntity', {
        key: 'nul-value',
        displayName: 'N',
        structureTypeKey: 'department',
        customFieldValues: [{ key: 'costCenter', value: { String: { Value: 'x\u0000y' } } }],
      }),
      400,
    );
    expect(Object.keys(value.errors!)).toEqual(['CustomFieldValues[0].Value.String.Value']);
    const search = expectProblem(await api.get('/api/v1/structuralEntity?searchTerm=a%00b'), 400);
    expect(Object.keys(search.errors!)).toEqual(['SearchTerm']);
    expect(await entitySnapshot()).toEqual(before);
  });

  it('in a path key: 404 like any unknown key', async () => {
    expectProblem(await api.get('/api/v1/structuralEntity/a%00b'), 404);
  });
});

describe('D5 nothing is written on a failed request', () => {
  it('a create with one bad custom field value creates nothing', async () => {
    const before = await entitySnapshot();
    const res = await api.put('/api/v1/structuralEntity', {
      Key: 'half-valid',
      DisplayName: 'Half valid',
      StructureTypeKey: 'department',
      ParentKey: 'root',
      CustomFieldValues: [
        { Key: 'costCenter', Value: { String: { Value: 'CC-9' } } },
        { Key: 'manager', Value: { UserIdentifier: { Value: 'no-such-user' } } },
      ],
    });
    const body = expectProblem(res, 400);
    expect(Object.keys(body.errors!)).toEqual(['CustomFieldValues[1].Value.UserIdentifier.Value']);
    expect(await entitySnapshot()).toEqual(before);
    expectProblem(await api.get('/api/v1/structuralEntity/half-valid'), 404);
  });

  it('an update that fails leaves the entity exactly as it was (no partial move, rename or value)', async () => {
    const before = await entitySnapshot();
    const res = await api.put('/api/v1/structuralEntity', {
      Key: 'dept',
      DisplayName: 'Renamed',
      ParentKey: null,
      CustomFieldValues: [
        { Key: 'costCenter', Value: { String: { Value: 'CHANGED' } } },
        { Key: 'headcount', Value: { Integer: { Value: 1.5 } } },
      ],
    });
    expectProblem(res, 400);
    expect(await entitySnapshot()).toEqual(before);
    const dept = await api.get('/api/v1/structuralEntity/dept');
    expect(dept.body).toMatchObject({ DisplayName: 'Dept', ParentKey: 'root', Depth: 2, CustomFieldValues: [] });
  });

  it('making an entity its own ancestor is refused without moving anything', async () => {
    const before = await entitySnapshot();
    const res = await api.put('/api/v1/structuralEntity', { Key: 'root', ParentKey: 'dept' });
    const body = expectProblem(res, 400);
    expect(Object.keys(body.errors!)).toEqual(['ParentKey']);
    expect(await entitySnapshot()).toEqual(before);
  });
});

describe('D5 5xx bodies', () => {
  it('an unexpected failure is a 500 problem+json with no stack trace, SQL or secret', async () => {
    // No input provokes a 500 through the public surface, so the fault is injected into the database:
    // the table the route reads is renamed for the duration of one request.
    await sql`ALTER TABLE structural_entity RENAME TO structural_entity_hidden`.execute(app.handle.db);
    let res: ApiResponse;
    try {
      res = await api.get('/api/v1/structuralEntity/root');
    } finally {
      await sql`ALTER TABLE structural_entity_hidden RENAME TO structural_entity`.execute(app.handle.db);
    }
    const body = expectProblem(res, 500);
    expect(body.title).toBe('Internal Server Error');
    expect(Object.keys(body).sort()).toEqual(['detail', 'status', 'title', 'traceId', 'type']);
    const text = JSON.stringify(body);
    expect(text).not.toMatch(/\bat .+:\d+:\d+/); // stack frames
    expect(text).not.toMatch(/\.ts\b|\.js\b|node_modules/);
    expect(text).not.toMatch(/structural_entity|relation|select|from\s/i); // SQL and the database's own message
    expect(text).not.toContain(api.token!);
    expect(text).not.toContain('full-client-secret');
    // The service is healthy again afterwards.
    expect((await api.get('/api/v1/structuralEntity/root')).status).toBe(200);
  });
});

describe('a known path with a wrong method (issue 10)', () => {
  it('answers 405 problem+json with Allow, as ASP.NET does, and OPTIONS with the methods', async () => {
    const wrong = await api.request('DELETE', '/api/v2/subject/00000000-0000-4000-8000-000000000000');
    expectProblem(wrong, 405);
    expect(wrong.headers.get('allow')).toBe('GET, HEAD, PATCH, OPTIONS');
    const token = await api.get('/connect/token');
    expectProblem(token, 405);
    expect(token.headers.get('allow')).toBe('POST, OPTIONS');
    expect((await api.request('PUT', '/api/v1/dataSet/x/refresh')).headers.get('allow')).toBe('POST, OPTIONS');
    const options = await api.request('OPTIONS', '/api/v1/structuralEntity');
    expect(options.status).toBeLessThan(300);
    expect(options.headers.get('allow')?.replace(/\s/g, '').split(',').sort()).toEqual(expect.arrayContaining(['GET', 'HEAD', 'PUT']));
    // An unknown path is still 404, and a right method still works.
    expectProblem(await api.request('DELETE', '/api/v2/nothing-here'), 404);
    expect((await api.get('/api/v1/structuralEntity')).status).toBe(200);
  });

  it('answers a wrong method on /graphql with 405 and Allow', async () => {
    const res = await api.request('PUT', '/graphql', { body: { query: '{ __typename }' } });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toMatch(/GET.*POST|POST.*GET/);
  });
});
