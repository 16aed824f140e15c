import { encodeGlobalID } from '@pothos/plugin-relay';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, SUBJECTS_WITH_POINTS, createDataTenant, eventually } from './fake-provider.js';

// D10 (provider calls, batching, cache, stale data) and D11 (data points over GraphQL), through HTTP.

const apps: TestApp[] = [];
const providers: FakeProvider[] = [];

async function setup(env: Record<string, string> = {}, count = 10): Promise<{ app: TestApp; provider: FakeProvider; t: DataTenant }> {
  const provider = await new FakeProvider().start();
  providers.push(provider);
  const app = await startApp({ PROVIDER_BACKOFF_MS: '1', ...env });
  apps.push(app);
  return { app, provider, t: await createDataTenant(app, provider, count) };
}

afterAll(async () => {
  await Promise.all(apps.map((a) => a.close()));
  await Promise.all(providers.map((p) => p.close()));
});

const values = (body: any) =>
  body.data.subjects.edges.map((e: any) => [
    e.node.externalId,
    e.node.dataPoints?.edges.map((p: any) => p.node.items.find((i: any) => i.key === 'value').value),
  ]);

const ONE_SUBJECT = `query($id: ID!, $extract: String!, $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $dir: OrderDirection) {
  subject(id: $id) { externalId dataPoints(extractKey: $extract, first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $dir) {
    totalCount pageInfo { hasNextPage hasPreviousPage startCursor endCursor } edges { cursor node { id items { key value } } } } }
}`;

describe('batching and the cache (D10)', () => {
  let provider: FakeProvider;
  let t: DataTenant;
  beforeAll(async () => {
    ({ provider, t } = await setup());
  });

  it('asks the provider once for ten subjects of one request, with the contract body exactly, following EndCursor', async () => {
    const res = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 10, extract: 'steps' });
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    expect(values(res.body)).toHaveLength(10);
    for (const [, v] of values(res.body)) expect(v).toEqual([5, 40, 300]);
    expect(provider.fetches()).toHaveLength(1);
    const first = provider.fetches()[0]!;
    // Every property present, nulls explicit, the contract's casing.
    expect(first.body).toEqual({
      SubjectIdentifiers: [...t.subjects.keys()],
      PagingRequest: { After: null, Before: null, First: null, Last: null, OrderBy: null, OrderDirection: null },
      DataExtract: { Key: 'steps', Options: { metric: 'steps', period: { days: 7 } } },
    });
    expect(first.authorization).toMatch(/^Bearer tok-\d+$/);
    // 30 points at 2 a page: the provider was followed through 15 pages, each After the previous EndCursor.
    expect(provider.calls).toHaveLength(15);
    expect(provider.calls[1]!.body.PagingRequest.After).toBe(Buffer.from('1').toString('base64url'));
  });

  it('serves a second read from the cache without calling the provider', async () => {
    const before = provider.calls.length;
    const res = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 10, extract: 'steps' });
    expect(values(res.body).every(([, v]: any) => v.length === 3)).toBe(true);
    expect(provider.calls.length).toBe(before);
    expect(res.body.extensions?.staleData).toBeUndefined();
  });

  it('shares one provider call between ten concurrent identical requests', async () => {
    const before = provider.fetches('hr').length;
    const all = await Promise.all(Array.from({ length: 10 }, () => t.api.gql(SUBJECTS_WITH_POINTS, { first: 10, extract: 'hr' })));
    for (const r of all) expect(values(r.body).map(([, v]: any) => v)).toEqual(Array(10).fill([5, 40, 300]));
    expect(provider.fetches('hr').length - before).toBe(1);
  });

  // P30: DataExtract.dataPoints takes the subject ids it lists.
  it('maps the provider identifiers back to subjects, and lists several subjects through DataExtract.dataPoints (UUIDs or global ids)', async () => {
    const e01 = t.subjects.get('E-01')!;
    const e02 = t.subjects.get('E-02')!;
    const res = await t.api.gql(
      `query($ids: [ID!]) { dataExtract(key: "steps") { key name options dataSource { key name } dataPoints(subjectIds: $ids, first: 10) {
        totalCount edges { node { id subjectIdentifier subject { subjectId externalId } } } } } }`,
      { ids: [e01, encodeGlobalID('Subject', e02), '00000000-0000-0000-0000-000000000000'] },
    );
    expect(res.body.errors).toBeUndefined();
    const x = res.body.data.dataExtract;
    expect(x).toMatchObject({
      key: 'steps',
      name: 'Steps per day',
      options: { metric: 'steps', period: { days: 7 } },
      dataSource: { key: 'wearables' },
    });
    expect(x.dataPoints.totalCount).toBe(6);
    expect(x.dataPoints.edges.map((e: any) => e.node.id)).toEqual(['E-01-1', 'E-01-2', 'E-01-3', 'E-02-1', 'E-02-2', 'E-02-3']);
    expect(x.dataPoints.edges[3].node.subject).toEqual({ subjectId: e02, externalId: 'E-02' });
  });

  // P33: any item key orders data points, typed.
  it('orders data points by Id (default) and by an item key, typed, with exact keyset paging (D6)', async () => {
    const id = t.subjects.get('E-03')!;
    const ids = async (vars: Record<string, unknown>) => {
      const r = await t.api.gql(ONE_SUBJECT, { id, extract: 'steps', ...vars });
      expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
      return r.body.data.subject.dataPoints;
    };
    expect((await ids({})).edges.map((e: any) => e.node.id)).toEqual(['E-03-1', 'E-03-2', 'E-03-3']);
    // Integer values 5, 40, 300: numerically, not as text ("300" < "40").
    expect((await ids({ orderBy: 'value' })).edges.map((e: any) => e.node.items[0].value)).toEqual([5, 40, 300]);
    expect((await ids({ orderBy: 'value', dir: 'DESCENDING' })).edges.map((e: any) => e.node.items[0].value)).toEqual([300, 40, 5]);
    const page1 = await ids({ first: 2, orderBy: 'value' });
    expect(page1.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: false });
    const page2 = await ids({ first: 2, after: page1.pageInfo.endCursor, orderBy: 'value' });
    expect(page2.edges.map((e: any) => e.node.items[0].value)).toEqual([300]);
    expect(page2.pageInfo).toMatchObject({ hasNextPage: false, hasPreviousPage: true });
    expect(page2.totalCount).toBe(3);
    const back = await ids({ last: 1, before: page2.pageInfo.startCursor, orderBy: 'value' });
    expect(back.edges.map((e: any) => e.node.items[0].value)).toEqual([40]);
    // A cursor of another ordering is not a position of this one.
    const wrong = await t.api.gql(ONE_SUBJECT, { id, extract: 'steps', after: page1.pageInfo.endCursor });
    expect(wrong.body.errors[0].extensions.code).toBe('BAD_REQUEST');
  });

  it('answers an unknown extract key as not found, on that field only', async () => {
    const r = await t.api.gql(`{ subjects(first: 1) { edges { node { externalId dataPoints(extractKey: "nope") { totalCount } } } } }`);
    expect(r.body.data.subjects.edges[0].node).toEqual({ externalId: 'E-01', dataPoints: null });
    expect(r.body.errors[0].extensions.code).toBe('NOT_FOUND');
  });

  it('demands View:DataExtract for data points and extracts (D4), other fields still answered', async () => {
    const reader = await t.tenant.client({ clientId: 'reader', clientSecret: 'reader-client-secret' });
    const r = await reader.gql(
      `{ subjects(first: 1) { edges { node { externalId dataPoints(extractKey: "steps") { totalCount } } } } dataExtracts { totalCount } }`,
    );
    expect(r.status).toBe(200);
    expect(r.body.data.subjects.edges[0].node).toEqual({ externalId: 'E-01', dataPoints: null });
    expect(r.body.data.dataExtracts).toBeNull();
    expect(r.body.errors.map((e: any) => e.extensions.code)).toEqual(['FORBIDDEN', 'FORBIDDEN']);
  });

  it('lists extracts as a connection and resolves them as nodes', async () => {
    const r = await t.api.gql(`{ dataExtracts(orderBy: "Name") { totalCount edges { node { id key name } } } }`);
    expect(r.body.data.dataExtracts.totalCount).toBe(2);
    expect(r.body.data.dataExtracts.edges.map((e: any) => e.node.key)).toEqual(['hr', 'steps']);
    const id = r.body.data.dataExtracts.edges[1].node.id;
    const n = await t.api.gql(`query($id: ID!) { node(id: $id) { ... on DataExtract { key } } }`, { id });
    expect(n.body.data.node).toEqual({ key: 'steps' });
  });
});

describe('chunks and tokens (D10)', () => {
  it('sends at most PROVIDER_BATCH_SIZE subject identifiers per call', async () => {
    const { provider, t } = await setup({ PROVIDER_BATCH_SIZE: '4' });
    provider.pageSize = 100;
    const res = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 10, extract: 'steps' });
    expect(values(res.body).every(([, v]: any) => v.length === 3)).toBe(true);
    expect(
      provider
        .fetches()
        .map((c) => c.body.SubjectIdentifiers.length)
        .sort(),
    ).toEqual([2, 4, 4]);
    expect(new Set(provider.fetches().flatMap((c) => c.body.SubjectIdentifiers)).size).toBe(10);
  });

  it('fetches one token for many concurrent calls, and a new one once when the provider refuses it', async () => {
    const { provider, t } = await setup({}, 3);
    provider.tokenDelayMs = 200;
    const ids = [...t.subjects.values()];
    // Different subjects and extracts: separate provider calls, all needing a token at the same moment.
    await Promise.all(ids.flatMap((id) => ['steps', 'hr'].map((x) => t.api.gql(ONE_SUBJECT, { id, extract: x }))));
    expect(provider.fetches().length).toBeGreaterThanOrEqual(2);
    expect(provider.tokenRequests).toHaveLength(1);
    expect(provider.tokenRequests[0]!.get('scope')).toBe('DataProviderApi');
    provider.revoked.add('tok-1');
    await t.api.post('/api/v1/dataSet/steps/refresh');
    await eventually(() => provider.tokenRequests.length === 2 && provider.calls.some((c) => c.authorization === 'Bearer tok-2'));
    const r = await t.api.gql(ONE_SUBJECT, { id: ids[0], extract: 'steps' });
    expect(r.body.data.subject.dataPoints.totalCount).toBe(3);
  });
});

describe('retries (D10)', () => {
  // P35: which provider failures are retried, and how often.
  it('tries exactly 1 + PROVIDER_RETRIES times, waiting as Retry-After says', async () => {
    const { provider, t } = await setup({ PROVIDER_RETRIES: '2' }, 1);
    provider.faults = [1, 2, 3].map(() => ({ status: 503, headers: { 'retry-after': '1' } }));
    const started = Date.now();
    const r = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 1, extract: 'steps' });
    expect(provider.calls).toHaveLength(3);
    // Two waits of Retry-After: 1 s each (the backoff alone is 1 ms here).
    expect(Date.now() - started).toBeGreaterThanOrEqual(1900);
    expect(r.body.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
  });

  it('retries a 429 and serves the answer of the retry', async () => {
    const { provider, t } = await setup({ PROVIDER_RETRIES: '2' }, 1);
    provider.faults = [{ status: 429, headers: { 'retry-after': '0' } }];
    const r = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 1, extract: 'steps' });
    expect(values(r.body)).toEqual([['E-01', [5, 40, 300]]]);
    expect(provider.fetches()).toHaveLength(2);
  });

  it('retries an attempt that ran out of time (PROVIDER_TIMEOUT_MS)', async () => {
    const { provider, t } = await setup({ PROVIDER_RETRIES: '1', PROVIDER_TIMEOUT_MS: '1000' }, 1);
    provider.pageSize = 100;
    provider.faults = [{ delayMs: 3000 }];
    const r = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 1, extract: 'steps' });
    expect(values(r.body)).toEqual([['E-01', [5, 40, 300]]]);
    expect(provider.fetches()).toHaveLength(2);
  });

  // P34: a malformed provider answer fails the call.
  it('does not retry an answer that will not change (400, malformed)', async () => {
    const { provider, t } = await setup({ PROVIDER_RETRIES: '2' }, 1);
    provider.faults = [{ status: 400 }];
    const r = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 1, extract: 'steps' });
    expect(provider.calls).toHaveLength(1);
    expect(r.body.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
  });
});

describe('provider failures (D10)', () => {
  let app: TestApp;
  let provider: FakeProvider;
  let t: DataTenant;
  beforeAll(async () => {
    ({ app, provider, t } = await setup({ PROVIDER_RETRIES: '0', PROVIDER_TIMEOUT_MS: '300', PROVIDER_BREAKER_FAILURES: '1000' }, 4));
  });

  const failures: [string, () => void][] = [
    ['a 500', () => (provider.always = { status: 500 })],
    ['malformed JSON', () => (provider.always = { status: 200, body: '{"PageInfo": ' })],
    ['a wrong shape', () => (provider.always = { status: 200, body: JSON.stringify({ PageInfo: { HasNextPage: false }, Edges: 'no' }) })],
    ['too slow an answer', () => (provider.always = { delayMs: 1500 })],
  ];

  for (const [what, fail] of failures) {
    it(`serves older data flagged as stale in extensions.staleData when the provider answers ${what}`, async () => {
      provider.always = undefined;
      const id = t.subjects.get('E-02')!;
      const fresh = await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' });
      expect(fresh.body.data.subject.dataPoints.totalCount).toBe(3);
      // Flag it (D10: refresh), then make the provider fail.
      expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);
      fail();
      const r = await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' });
      expect(r.status).toBe(200);
      expect(r.body.errors).toBeUndefined();
      expect(r.body.data.subject.dataPoints.edges.map((e: any) => e.node.id)).toEqual(['E-02-1', 'E-02-2', 'E-02-3']);
      expect(r.body.extensions?.staleData).toEqual([
        { extractKey: 'steps', subjectIdentifier: 'E-02', fetchedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) },
      ]);
      provider.always = undefined;
      // Once the provider answers again, the data is fresh (no staleData).
      await eventually(async () => (await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' })).body.extensions?.staleData === undefined);
    });
  }

  it('drops an item value of the wrong type, no failure: the answer is stored without that point (P90)', async () => {
    provider.always = undefined;
    const id = t.subjects.get('E-02')!;
    expect((await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' })).body.data.subject.dataPoints.totalCount).toBe(3);
    expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);
    provider.always = {
      status: 200,
      body: JSON.stringify({
        PageInfo: { HasNextPage: false, HasPreviousPage: false, TotalCount: 2 },
        Edges: [
          {
            Cursor: 'a',
            Node: { Id: 'x', SubjectIdentifier: 'E-02', DataPointItems: [{ Key: 'v', Value: { DataType: 'Integer', Value: 'nine' } }] },
          },
          {
            Cursor: 'b',
            Node: { Id: 'y', SubjectIdentifier: 'E-02', DataPointItems: [{ Key: 'v', Value: { DataType: 'Integer', Value: 9 } }] },
          },
        ],
      }),
    };
    for (let i = 0; i < 2; i++) {
      const r = await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' });
      expect(r.body.errors).toBeUndefined();
      expect(r.body.extensions?.staleData).toBeUndefined();
      expect(r.body.data.subject.dataPoints.edges.map((e: any) => e.node.id)).toEqual(['y']);
    }
    provider.always = undefined;
  });

  it('answers PROVIDER_UNAVAILABLE on the field when nothing is cached, other fields answered, the service ready', async () => {
    provider.always = { status: 503 };
    const r = await t.api.gql(`query($id: ID!) { subject(id: $id) { externalId dataPoints(extractKey: "hr") { totalCount } } }`, {
      id: t.subjects.get('E-04'),
    });
    expect(r.status).toBe(200);
    expect(r.body.data.subject).toEqual({ externalId: 'E-04', dataPoints: null });
    expect(r.body.errors).toHaveLength(1);
    expect(r.body.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
    expect(r.body.errors[0].path).toEqual(['subject', 'dataPoints']);
    expect(JSON.stringify(r.body)).not.toMatch(/at .*\.ts|stack/);
    expect((await fetch(`${app.url}/readyz`)).status).toBe(200);
    provider.always = undefined;
  });
});

describe('time to live (D10)', () => {
  it('re-fetches entries older than CACHE_TTL_SECONDS, and serves them as stale when the provider fails', async () => {
    const { provider, t } = await setup({ CACHE_TTL_SECONDS: '1', PROVIDER_RETRIES: '0' }, 1);
    const id = t.subjects.get('E-01')!;
    await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' });
    expect(provider.fetches()).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 1100));
    provider.version = 1;
    const r = await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' });
    expect(provider.fetches()).toHaveLength(2);
    expect(r.body.data.subject.dataPoints.edges[0].node.items[0].value).toBe(6);
    await new Promise((r) => setTimeout(r, 1100));
    provider.always = { status: 500 };
    const stale = await t.api.gql(ONE_SUBJECT, { id, extract: 'steps' });
    expect(stale.body.data.subject.dataPoints.edges[0].node.items[0].value).toBe(6);
    expect(stale.body.extensions?.staleData).toHaveLength(1);
  });
});

describe('restart (D10: the cache is in PostgreSQL)', () => {
  it('serves from the database after the in-process cache is gone', async () => {
    const { provider, t } = await setup({ CACHE_MAX_BYTES: '0' }, 2);
    await t.api.gql(SUBJECTS_WITH_POINTS, { first: 2, extract: 'steps' });
    const calls = provider.calls.length;
    const again: ApiClient = t.api;
    const r = await again.gql(SUBJECTS_WITH_POINTS, { first: 2, extract: 'steps' });
    expect(values(r.body)).toEqual([
      ['E-01', [5, 40, 300]],
      ['E-02', [5, 40, 300]],
    ]);
    expect(provider.calls.length).toBe(calls);
  });
});
