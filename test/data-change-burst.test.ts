import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, pool, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually } from './fake-provider.js';

// Issue 32, change posts at provider scale: a provider's burst of change posts (its client, 50 in
// flight) is absorbed, not refused; the background re-fetch of the subjects it flagged in one extract
// costs ⌈flagged / PROVIDER_BATCH_SIZE⌉ provider calls (the sweep's coalescing window, P105).

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const SUBJECTS = 250;
const BATCH = 100;
const IN_FLIGHT = 50;

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;
const numbers = Array.from({ length: SUBJECTS }, (_, i) => `N-${String(i).padStart(4, '0')}`);

/** Each subject's `steps` set read once, so it is cached with data (only such entries are re-fetched). */
async function warm(): Promise<void> {
  await pool(numbers, 8, async (n) => {
    const r = await t.api.gql(`query($id: ID!) { subject(id: $id) { dataPoints(extractKey: "steps") { totalCount } } }`, {
      id: t.subjects.get(n),
    });
    expect(r.body.data?.subject.dataPoints.totalCount, JSON.stringify(r.body)).toBe(3);
  });
}

/** The burst: one change post per subject of `steps`, IN_FLIGHT at a time; the statuses by count. */
async function burst(subjects: readonly string[]): Promise<Record<number, number>> {
  const statuses = await pool(subjects, IN_FLIGHT, async (n) => {
    const r = await t.provider.post(CHANGE, { SubjectIdentifier: n, DataExtractsOptionsValuesFilter: { metric: 'steps' } });
    return r.status;
  });
  const counts: Record<number, number> = {};
  for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
  return counts;
}

beforeAll(async () => {
  provider = await new FakeProvider().start();
  // One page holds a batch's points: a provider call is one fetch.
  provider.pageSize = 1000;
  app = await startApp({ PROVIDER_BATCH_SIZE: String(BATCH) });
  t = await createDataTenant(app, provider, 0);
  await pool(numbers, 16, async (n) => {
    const r = await t.api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: n } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${n}` } } },
      ],
    });
    if (r.status !== 201) throw new Error(`upsert ${n}: ${r.status} ${JSON.stringify(r.body)}`);
    t.subjects.set(n, r.body.internalId);
  });
}, 120_000);
afterAll(async () => {
  await app?.close();
  await provider?.close();
});

describe('a burst of change posts from one provider client', () => {
  it('accepts every post of a burst of 1,000 (50 in flight): none refused with 429', async () => {
    const posts = Array.from({ length: 1000 }, (_, i) => numbers[i % SUBJECTS]!);
    expect(await burst(posts)).toEqual({ 200: 1000 });
  }, 120_000);

  it('re-fetches the 250 subjects one burst flagged in one extract in ⌈250 / 100⌉ = 3 provider calls', async () => {
    await warm();
    // Whatever the previous burst left to re-fetch is done.
    await eventually(async () => {
      const before = provider.calls.length;
      await new Promise((r) => setTimeout(r, 500));
      return provider.calls.length === before;
    }, 20_000);
    const before = provider.fetches('steps').length;
    provider.version = 1;
    expect(await burst(numbers)).toEqual({ 200: SUBJECTS });
    await eventually(async () => {
      const refetched = new Set(
        provider
          .fetches('steps')
          .slice(before)
          .flatMap((c) => c.body.SubjectIdentifiers as string[]),
      );
      return refetched.size === SUBJECTS;
    }, 20_000);
    // Time for a (wrong) extra call to show.
    await new Promise((r) => setTimeout(r, 300));
    const calls = provider.fetches('steps').slice(before);
    expect(calls.map((c) => c.body.SubjectIdentifiers.length)).toHaveLength(Math.ceil(SUBJECTS / BATCH));
  }, 120_000);
});
