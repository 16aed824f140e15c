import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient, type TestApp, startApp, startPeer } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually } from './fake-provider.js';

// D10: with several instances on one database, an invalidation answered by one has reached the
// in-process cache of every other before the answer; a background re-fetch runs on one instance only.

let a: TestApp;
let b: TestApp;
let provider: FakeProvider;
let t: DataTenant;
let onB: ApiClient;

const POINTS = `query($id: ID!) { subject(id: $id) { dataPoints(extractKey: "steps") { edges { node { id items { key value } } } } } }`;
const valuesVia = async (api: ApiClient, id: string) => {
  const r = await api.gql(POINTS, { id });
  expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
  return {
    ids: r.body.data.subject.dataPoints.edges.map((e: any) => e.node.id),
    first: r.body.data.subject.dataPoints.edges[0]?.node.items[0].value,
    stale: r.body.extensions?.staleData,
  };
};

beforeAll(async () => {
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  a = await startApp({ PROVIDER_BACKOFF_MS: '1' });
  b = await startPeer(a);
  t = await createDataTenant(a, provider, 3);
  onB = new ApiClient(b.url, t.api.token);
});
afterAll(async () => {
  await b?.close();
  await a?.close();
  await provider?.close();
});

describe('two instances on one database', () => {
  it('serves what one instance fetched from the shared cache on the other', async () => {
    const id = t.subjects.get('E-01')!;
    expect((await valuesVia(t.api, id)).first).toBe(5);
    const calls = provider.calls.length;
    expect((await valuesVia(onB, id)).first).toBe(5);
    expect((await valuesVia(onB, id)).first).toBe(5);
    expect(provider.calls.length).toBe(calls);
  });

  it('never serves pre-notification data as fresh on the other instance once a change is answered', async () => {
    const id = t.subjects.get('E-02')!;
    for (let round = 1; round <= 15; round++) {
      // B holds the subject in its in-process cache...
      await valuesVia(onB, id);
      await valuesVia(onB, id);
      provider.version = round;
      // ...A answers a change notification...
      const res = await t.provider.post('/connector-dataprovider/api/v1/dataChange/creationOrUpdate', {
        SubjectIdentifier: 'E-02',
        DataExtractsOptionsValuesFilter: {},
        NewOrUpdatedDataPoints: [],
      });
      expect(res.status).toBe(200);
      // ...and B's very next read shows the new data, fresh.
      const after = await valuesVia(onB, id);
      expect(after.first, `round ${round}`).toBe(5 + round);
      expect(after.stale).toBeUndefined();
    }
  });

  it('hides removed ids on the other instance at once', async () => {
    const id = t.subjects.get('E-03')!;
    expect((await valuesVia(onB, id)).ids).toContain('E-03-2');
    const res = await t.provider.post('/connector-dataprovider/api/v1/dataChange/removal', {
      SubjectIdentifier: 'E-03',
      RemovedDataPointIdentifiers: ['E-03-2'],
    });
    expect(res.status).toBe(200);
    expect((await valuesVia(onB, id)).ids).toEqual(['E-03-1', 'E-03-3']);
  });

  it('re-fetches a flagged entry once, on one instance, not on every instance', async () => {
    const id = t.subjects.get('E-01')!;
    await valuesVia(t.api, id);
    const before = provider.fetches('steps').length;
    const res = await onB.post('/api/v1/dataSet/steps/refresh');
    expect(res.status).toBe(200);
    expect(res.body.FlaggedEntries).toBe(3);
    await eventually(() => provider.fetches('steps').length > before);
    // Both instances sweep for flagged rows: give the other one time to (wrongly) fetch too.
    await new Promise((r) => setTimeout(r, 500));
    const refetched = provider
      .fetches('steps')
      .slice(before)
      .flatMap((c) => c.body.SubjectIdentifiers);
    expect(refetched.sort()).toEqual(['E-01', 'E-02', 'E-03']);
  });

  it('keeps invalidating after the listener connection drops and reconnects', async () => {
    if (!a.handle.url) {
      // PGlite is one process: its notifications cannot be lost, there is no connection to drop.
      expect(b.handle).toBe(a.handle);
      return;
    }
    const id = t.subjects.get('E-01')!;
    await valuesVia(onB, id);
    const listeners = async () =>
      Number(
        (
          await sql<{
            n: string;
          }>`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'ssdi-listener' AND datname = current_database()`.execute(
            a.handle.db,
          )
        ).rows[0]!.n,
      );
    const before = await listeners();
    expect(before).toBeGreaterThanOrEqual(2);
    await sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ssdi-listener' AND datname = current_database()`.execute(
      a.handle.db,
    );
    // While B is without its listener, it serves nothing from its in-process cache; once reconnected it listens again.
    await eventually(async () => (await listeners()) === before);
    await valuesVia(onB, id);
    provider.version = 100;
    await t.provider.post('/connector-dataprovider/api/v1/dataChange/creationOrUpdate', {
      SubjectIdentifier: 'E-01',
      DataExtractsOptionsValuesFilter: {},
    });
    expect((await valuesVia(onB, id)).first).toBe(105);
  });
});
