import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, SUBJECTS_WITH_POINTS, createDataTenant, eventually } from './fake-provider.js';

// Issue 32, cold fills: an aggregate over subjects nothing has cached fetches them in chunks of
// PROVIDER_BATCH_SIZE, at most PROVIDER_CONCURRENCY calls in flight per data source across every reader
// of the instance, a Retry-After pausing them all (P112); each chunk's answer is stored as it arrives, so
// what arrived stays written when the rest fails, and a question asked meanwhile shares the calls (P114).

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const BATCH = 2;
const CONCURRENCY = 3;
const SUBJECTS = 12;
const CHUNKS = SUBJECTS / BATCH;
/** The fake provider's points: three a subject, on 2026-11-01 to 03, values 5, 40 and 300. */
const POINTS = 3;

const AGGREGATE = `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
  aggregates { count subjectCount sumText }
  coverage { subjectCount contributingSubjectCount unavailableSubjectCount unavailableSubjects { externalId } }
} }`;
const input = (extractKey: string, interval = 'DAY') => ({
  extractKey,
  valueItemKey: 'value',
  timeItemKey: 'day',
  interval,
  from: '2026-11-01',
  to: '2026-11-08',
  timeZone: 'UTC',
});

let app: TestApp;
const providers: FakeProvider[] = [];

beforeAll(async () => {
  app = await startApp({
    PROVIDER_BATCH_SIZE: String(BATCH),
    PROVIDER_CONCURRENCY: String(CONCURRENCY),
    PROVIDER_RETRIES: '1',
    PROVIDER_BACKOFF_MS: '1',
  });
});
afterAll(async () => {
  await app?.close();
  await Promise.all(providers.map((p) => p.close()));
});

/** A data tenant of SUBJECTS subjects on a fresh fake provider (a data source and circuit of its own), a page per call. */
async function setup(): Promise<{ provider: FakeProvider; t: DataTenant }> {
  const provider = await new FakeProvider().start();
  provider.pageSize = 100;
  providers.push(provider);
  return { provider, t: await createDataTenant(app, provider, SUBJECTS) };
}

async function aggregate(t: DataTenant, extractKey: string, interval?: string) {
  const r = await t.api.gql(AGGREGATE, { input: input(extractKey, interval) });
  expect(r.status).toBe(200);
  return r.body;
}

/** The whole answer: every subject's three points. */
const COMPLETE = { count: SUBJECTS * POINTS, subjectCount: SUBJECTS, sumText: String(SUBJECTS * 345) };

describe('cold fills', () => {
  it('runs at most PROVIDER_CONCURRENCY calls per data source across readers, more than one when there is work for several', async () => {
    const { provider, t } = await setup();
    // Every subject's heart rate cached, then reported changed: the background re-fetch (up to
    // PROVIDER_REFETCH_CONCURRENCY, 4, calls at once) runs while an aggregate over steps fills cold.
    const list = await t.api.gql(SUBJECTS_WITH_POINTS, { first: SUBJECTS, extract: 'hr' });
    expect(list.body.data.subjects.edges.map((e: any) => e.node.dataPoints.totalCount)).toEqual(Array(SUBJECTS).fill(POINTS));
    // Each call answers after a while, so calls started together overlap.
    provider.always = { delayMs: 300 };
    provider.maxInFlight = 0;
    for (const n of t.subjects.keys()) {
      const r = await t.provider.post(CHANGE, { SubjectIdentifier: n, DataExtractsOptionsValuesFilter: { metric: 'heartRate' } });
      expect(r.status).toBe(200);
    }
    await eventually(() => provider.inFlight > 0, 10_000);
    const steps = await aggregate(t, 'steps');
    expect(steps.data.dataPointAggregates.aggregates).toEqual(COMPLETE);
    await eventually(() => provider.fetches('hr').length === 2 * CHUNKS, 10_000);
    expect(provider.fetches('steps')).toHaveLength(CHUNKS);
    expect(provider.maxInFlight).toBeLessThanOrEqual(CONCURRENCY); // P112
    expect(provider.maxInFlight).toBeGreaterThan(1);
  });

  it('a 429 with Retry-After pauses every call of the data source for that long, and the answer is still complete', async () => {
    const { provider, t } = await setup();
    // Arrival times of the calls, in order.
    const arrived: number[] = [];
    const push = provider.calls.push.bind(provider.calls);
    provider.calls.push = (...calls) => {
      for (const _ of calls) arrived.push(Date.now());
      return push(...calls);
    };
    // The first call is refused at once for 1 s; the others take 200 ms, so the refusal is read while the
    // calls that started with it are still in flight.
    provider.faults = [{ status: 429, headers: { 'retry-after': '1' } }];
    provider.always = { delayMs: 200 };
    const r = await aggregate(t, 'steps');
    expect(r.errors).toBeUndefined();
    expect(r.data.dataPointAggregates.aggregates).toEqual(COMPLETE);
    // Every chunk once, and the refused one again.
    expect(provider.fetches()).toHaveLength(CHUNKS + 1);
    // The calls in flight with the refused one started with it; every later one waited out the pause (a
    // timer may fire a millisecond early). // P112
    const refusedAt = arrived[0]!;
    const later = arrived.slice(CONCURRENCY);
    expect(later).toHaveLength(CHUNKS + 1 - CONCURRENCY);
    for (const at of later) expect(at - refusedAt).toBeGreaterThanOrEqual(990);
  });

  it('the circuit still opens when the calls fail', async () => {
    const { provider, t } = await setup();
    provider.always = { status: 500 };
    const r = await aggregate(t, 'steps');
    expect(r.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
    const tenant = await app.handle.db.selectFrom('tenant').select('id').where('key', '=', t.tenant.key).executeTakeFirstOrThrow();
    const metrics = await (await fetch(`${app.url}/metrics`)).text();
    expect(metrics).toContain(`provider_circuit_state{tenant_id="${tenant.id}",data_source="wearables",state="open"} 1`);
  });

  it('an aggregate that fails half-way keeps what arrived; the next one fetches only the rest', async () => {
    const { provider, t } = await setup();
    // Two calls answer, every later one fails.
    provider.faults = [{}, {}];
    provider.always = { status: 500 };
    const first = await aggregate(t, 'steps');
    const coverage = first.data.dataPointAggregates.coverage;
    expect(coverage.contributingSubjectCount).toBe(2 * BATCH);
    expect(coverage.unavailableSubjectCount).toBe(SUBJECTS - 2 * BATCH);
    const missing = (coverage.unavailableSubjects as { externalId: string }[]).map((s) => s.externalId).sort();

    provider.always = undefined;
    const before = provider.fetches().length;
    const second = await aggregate(t, 'steps');
    expect(second.data.dataPointAggregates.aggregates).toEqual(COMPLETE);
    const asked = provider
      .fetches()
      .slice(before)
      .flatMap((c) => c.body.SubjectIdentifiers as string[]);
    expect(asked.sort()).toEqual(missing); // P114
  });

  it('a question asked while a cold fill runs finds what is stored and shares the calls in flight', async () => {
    const { provider, t } = await setup();
    provider.always = { delayMs: 100 };
    const first = aggregate(t, 'steps');
    // Some chunks answered and stored, others still to come.
    await eventually(() => provider.fetches().length > CONCURRENCY, 10_000);
    const second = await aggregate(t, 'steps', 'WEEK');
    expect(second.data.dataPointAggregates.aggregates).toEqual(COMPLETE);
    expect((await first).data.dataPointAggregates.aggregates).toEqual(COMPLETE);
    // Each chunk was asked for once, by the first question. // P114
    expect(provider.fetches()).toHaveLength(CHUNKS);
  });
});
