import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, StatementCounter, type TestApp, createTenant, startApp } from './helpers.js';

// D11: loading a page of subjects with their structural entities costs a fixed number of SQL
// statements, whatever the page size (per-request dataloaders batch the locations and the types).
const counter = new StatementCounter();
let app: TestApp;
let api: ApiClient;

const QUERY = `query($first: Int) {
  subjects(first: $first) {
    totalCount
    edges { node { subjectId externalId customFieldValues { field { key } values { valueText } }
      structuralEntities { totalCount edges { node { key depth parent { key } structureType { key customFields { key } } customFieldValues { field { key } } } } } } }
  }
}`;

beforeAll(async () => {
  // The counter sees every statement of the instance: the outbox's poll (every MAIL_POLL_MS, two statements)
  // must not land inside a measured request on a slow machine.
  app = await startApp({ MAIL_POLL_MS: '3600000' }, { plugins: [counter] });
  const entities = Array.from({ length: 10 }, (_, i) => ({
    key: `dept-${i}`,
    displayName: `Department ${i}`,
    structureTypeKey: 'department',
    ...(i > 0 ? { parentKey: 'dept-0' } : {}),
  }));
  const tenant = await createTenant(app, { structuralEntities: entities });
  api = await tenant.client();
  for (let chunk = 0; chunk < 100; chunk += 20) {
    await Promise.all(
      Array.from({ length: 20 }, (_, j) => {
        const i = chunk + j;
        return api.post('/api/v2/messaging/subject', {
          CustomFieldValues: [
            { Key: 'employeeNumber', Value: { String: { Value: `E${String(i).padStart(3, '0')}` } } },
            { Key: 'fullName', Value: { String: { Value: `Person ${i}` } } },
          ],
          StructuralEntityKeys: [`dept-${i % 10}`, `dept-${(i + 3) % 10}`],
        });
      }),
    );
  }
});
afterAll(() => app?.close());

async function statementsFor(first: number): Promise<{ statements: number; subjects: number; locations: number }> {
  await api.get('/healthz'); // settle anything in flight
  const before = counter.count;
  const res = await api.gql(QUERY, { first });
  expect(res.status).toBe(200);
  expect(res.body.errors).toBeUndefined();
  const edges = res.body.data.subjects.edges;
  return {
    statements: counter.count - before,
    subjects: edges.length,
    locations: edges.reduce((n: number, e: any) => n + e.node.structuralEntities.edges.length, 0),
  };
}

describe('query count (D11, issue 8)', () => {
  // P96: the structure types, subject configuration and TotalCounts come from the app's caches (ctx).
  it('loads 100 subjects with their structural entities in two statements, whatever the page size', async () => {
    // The first request also counts TotalCount for this filter and loads the tenant's structure types,
    // both cached afterwards (the count per data version, the types per configuration version).
    const cold = await statementsFor(100);
    const small = await statementsFor(5);
    const large = await statementsFor(100);
    expect(cold.statements).toBe(large.statements + 2);
    expect(small.subjects).toBe(5);
    expect(large.subjects).toBe(100);
    expect(large.locations).toBe(200);
    // The page; the locations with their parents. The client comes from the instance's cache (issue 35).
    expect(large.statements).toBe(2);
    expect(small.statements).toBe(2);
  });

  it('answers a REST list page with TotalCount in one statement once the client and the count are cached', async () => {
    await api.get('/api/v2/subject?First=20');
    const before = counter.count;
    const res = await api.get('/api/v2/subject?First=20');
    expect(res.status).toBe(200);
    expect(res.body.PageInfo.TotalCount).toBe(100);
    // The page, with the tenant's data version its cached count is found under (P162); the client, the
    // configuration and the count from the instance's caches (issue 35).
    expect(counter.count - before).toBe(1);
  });

  it('answers a deep page (after a cursor) in the same one statement as the first (hasPreviousPage in the page statement)', async () => {
    const mid = (await api.get('/api/v2/subject?First=50')).body.PageInfo.EndCursor;
    await api.get(`/api/v2/subject?First=20&After=${encodeURIComponent(mid)}`);
    const before = counter.count;
    const res = await api.get(`/api/v2/subject?First=20&After=${encodeURIComponent(mid)}`);
    expect(res.body.PageInfo).toMatchObject({ HasPreviousPage: true, HasNextPage: true });
    expect(counter.count - before).toBe(1);
    // Paging back from a cursor: hasNextPage comes with the page the same way.
    const back = await api.get(`/api/v2/subject?Last=20&Before=${encodeURIComponent(mid)}`);
    expect(back.body.PageInfo).toMatchObject({ HasPreviousPage: true, HasNextPage: true });
  });

  it('counts again once a write changed the data version', async () => {
    await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'E999' } } },
        { Key: 'fullName', Value: { String: { Value: 'Person 999' } } },
      ],
    });
    expect((await api.get('/api/v2/subject?First=20')).body.PageInfo.TotalCount).toBe(101);
  });

  it('writes a subject, created or updated with its locations, in two statements and no transaction (issue 19, P64)', async () => {
    const body = (name: string, keys: string[]) => ({
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'W-1' } } },
        { Key: 'fullName', Value: { String: { Value: name } } },
      ],
      StructuralEntityKeys: keys,
    });
    // The subject by its matching values with the entities, unlocked; one statement for the row (under
    // the condition that it is still as read), its index rows, its locations and the data version. The
    // client from the instance's cache.
    let before = counter.count;
    const created = await api.post('/api/v2/messaging/subject', body('Writer', ['dept-1', 'dept-2']));
    expect(created.status).toBe(201);
    expect(counter.count - before).toBe(2);
    before = counter.count;
    const updated = await api.post('/api/v2/messaging/subject', body('Writer again', ['dept-2', 'dept-3']));
    expect(updated.status).toBe(200);
    expect(counter.count - before).toBe(2);
    const read = await api.get(`/api/v2/subject/${created.body.internalId}`);
    expect(read.body.StructuralEntities.map((e: { Key: string }) => e.Key).sort()).toEqual(['dept-2', 'dept-3']);
    expect(read.body.CustomFieldValues.find((v: any) => v.Field.Key === 'fullName').Value.ValueText).toBe('Writer again');
  });

  it('reads a client once per instance: its next requests, REST or GraphQL, run no authentication statement (issue 35)', async () => {
    const other = await createTenant(app);
    const fresh = await other.client();
    await api.get('/healthz');
    let before = counter.count;
    expect((await fresh.get('/api/v1/structuralEntity?First=1')).status).toBe(200);
    const first = counter.count - before;
    before = counter.count;
    expect((await fresh.get('/api/v1/structuralEntity?First=1')).status).toBe(200);
    // The client with its tenant's versions, the first time only.
    expect(first - (counter.count - before)).toBe(1);
    before = counter.count;
    expect((await fresh.gql('{ structuralEntities(first: 1) { edges { node { key } } } }')).status).toBe(200);
    expect(counter.count - before).toBe(1);
  });

  // P163: the page statement's template is compiled once per shape, for every tenant.
  // P167
  it("compiles an unfiltered list's page statement once per shape: later pages run it with their own values (issue 35)", async () => {
    const page1 = await api.get('/api/v2/subject?First=10');
    const page2 = await api.get(`/api/v2/subject?First=10&After=${encodeURIComponent(page1.body.PageInfo.EndCursor)}`);
    const cursor = page2.body.PageInfo.EndCursor;
    await api.get('/healthz');
    const before = { count: counter.count, compiled: counter.compiled };
    const page3 = await api.get(`/api/v2/subject?First=10&After=${encodeURIComponent(cursor)}`);
    expect(page3.body.Edges.map((e: any) => e.Node.ExternalId)).toEqual(
      Array.from({ length: 10 }, (_, i) => `E${String(20 + i).padStart(3, '0')}`),
    );
    expect({ statements: counter.count - before.count, compiled: counter.compiled - before.compiled }).toEqual({
      statements: 1,
      compiled: 0,
    });
    // The page size is part of the text (P167: a prepared statement's plan must know it): another size is
    // another shape, compiled once too.
    const sized = async () => (await api.get(`/api/v2/subject?First=15&After=${encodeURIComponent(cursor)}`)).body.Edges.length;
    expect(await sized()).toBe(15);
    const once = counter.compiled;
    expect(await sized()).toBe(15);
    expect(counter.compiled - once).toBe(0);
    // Another tenant's list of the same shape runs the same statement.
    const other = await (await createTenant(app)).client();
    await other.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'X1' } } },
        { Key: 'fullName', Value: { String: { Value: 'Other tenant' } } },
      ],
    });
    await other.get('/api/v2/subject?First=10');
    await other.get('/healthz');
    const again = counter.compiled;
    expect((await other.get('/api/v2/subject?First=10')).body.Edges.map((e: any) => e.Node.ExternalId)).toEqual(['X1']);
    expect(counter.compiled - again).toBe(0);
  });
});
