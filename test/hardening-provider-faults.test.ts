import { sql } from 'kysely';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox } from '../src/domains/data/index.js';
import { TenantConfigError, applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { ApiClient, type TestApp, expectValidation, startApp, startPeer, tenantConfig } from './helpers.js';
import {
  type DataTenant,
  FakeProvider,
  SUBJECTS_WITH_POINTS,
  createDataTenant,
  eventually,
  providerDataSource,
  readSteps,
} from './fake-provider.js';

// Issue 30, F6 (P87, P90): one bad identifier fails one subject. An empty or blank matching value (the
// ExternalId the provider is asked for) is a 400 at upsert and PATCH, REST and GraphQL, and in the tenant
// file; a subject stored with one before is never asked for; a node of a provider's answer that is bad
// is dropped with a logged reason, its subject's valid points stored (no re-fetch on every read), and is
// no provider failure for the circuit breaker.
// Issue 30, F7 (P88): the breaker keeps D10 (a flagged or never-cached read goes to the provider): an open
// circuit refuses only reads that have older data to serve; a read with nothing to serve is its probe at
// once (one at a time, the others waiting for it), also after another chunk of the same aggregate was
// refused, and reads are fresh within 2 s of a recovery.

interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

const OPENED = 'data provider circuit opened';
const logs: LogLine[] = [];
let app: TestApp;
const providers: FakeProvider[] = [];

beforeAll(async () => {
  // One attempt per call: a read is one call through the breaker.
  app = await startApp(
    { LOG_LEVEL: 'info', PROVIDER_RETRIES: '0', PROVIDER_BACKOFF_MS: '1' },
    { logStream: { write: (line: string) => logs.push(JSON.parse(line) as LogLine) } },
  );
});
afterAll(async () => {
  await app?.close();
  await Promise.all(providers.map((p) => p.close()));
});

/** A data tenant of `count` subjects on a fresh fake provider (a circuit of its own), and the log lines from now on. */
async function setup(count = 10) {
  const provider = await new FakeProvider().start();
  provider.pageSize = 1000;
  providers.push(provider);
  const from = logs.length;
  const t = await createDataTenant(app, provider, count);
  return { provider, t, lines: (msg: string) => logs.slice(from).filter((l) => l.msg === msg) };
}

const FRESH = { count: 3, stale: false };

/** Three valid points of a subject, as the fake provider makes them by default. */
const threePoints = (identifier: string) =>
  [5, 40, 300].map((value, n) => ({
    Id: `${identifier || 'X'}-${n + 1}`,
    SubjectIdentifier: identifier,
    DataPointItems: [
      { Key: 'value', Value: { DataType: 'Integer', Value: value } },
      { Key: 'day', Value: { DataType: 'Date', Value: `2026-11-0${n + 1}` } },
    ],
  }));
const sv = (key: string, value: string) => ({ Key: key, Value: { String: { Value: value } } });

describe('one bad identifier fails one subject (F6)', () => {
  it.each([
    ['an empty', ''],
    ['a blank', ' \t '],
  ])('%s matching value is a 400 at REST and GraphQL upsert and PATCH, and nothing is written', async (_what, blank) => {
    const { t } = await setup(1);
    const upsert = await t.api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [sv('employeeNumber', blank), sv('fullName', 'Nobody')],
    });
    expectValidation(upsert, 'CustomFieldValues[0].Value');
    const gqlUpsert = await t.api.gql(`mutation($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created } }`, {
      input: {
        customFieldValues: [
          { key: 'employeeNumber', value: { String: { value: blank } } },
          { key: 'fullName', value: { String: { value: 'Nobody' } } },
        ],
      },
    });
    expect(gqlUpsert.body.errors[0].extensions).toMatchObject({ status: 400 });
    expect(JSON.stringify(gqlUpsert.body.errors[0])).toMatch(/matching field 'employeeNumber' must not be empty/);

    const id = t.subjects.get('E-01')!;
    expectValidation(await t.api.patch(`/api/v2/subject/${id}`, { CustomFields: [sv('employeeNumber', blank)] }), 'CustomFields[0].Value');
    const gqlPatch = await t.api.gql(`mutation($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { externalId } } }`, {
      input: { id, customFields: [{ key: 'employeeNumber', value: { String: { value: blank } } }] },
    });
    expect(gqlPatch.body.errors[0].extensions).toMatchObject({ status: 400 });

    const list = await t.api.get('/api/v2/subject');
    expect(list.body.Edges.map((e: any) => e.Node.ExternalId)).toEqual(['E-01']);
  });

  it('the tenant file refuses a blank matching field key and a data source identifier that names no field', async () => {
    const apply = (overrides: Record<string, unknown>) =>
      applyTenantFile(app.handle.db, new SecretBox(app.handle.db, undefined), { tenants: [tenantConfig(overrides)] }).catch(
        (e: unknown) => e,
      );
    const provider = await new FakeProvider().start();
    providers.push(provider);
    const blankKey = await apply({ matchingFieldKeys: [' '] });
    expect(blankKey).toBeInstanceOf(TenantConfigError);
    expect((blankKey as TenantConfigError).problems.map((p) => p.path)).toContain('tenants[0].matchingFieldKeys[0]');
    for (const subjectIdentifier of ['  ', 'noSuchField']) {
      const err = await apply({ dataSources: [{ ...providerDataSource(provider), subjectIdentifier }] });
      expect(err, subjectIdentifier).toBeInstanceOf(TenantConfigError);
      expect((err as TenantConfigError).problems.map((p) => p.path)).toContain('tenants[0].dataSources[0].subjectIdentifier');
    }
    // A subject field is a valid identifier.
    expect(await apply({ dataSources: [{ ...providerDataSource(provider), subjectIdentifier: 'email' }] })).not.toBeInstanceOf(Error);
  });

  // P36: a subject without an identifier has no data points and causes no call.
  it('a subject stored with an empty ExternalId is never asked for: it has no data points, the others theirs', async () => {
    const { provider, t } = await setup(4);
    // As written before upserts refused it.
    await sql`UPDATE subject SET external_id = '', values = jsonb_set(values, '{employeeNumber}', '""')
      WHERE id = ${t.subjects.get('E-02')!}`.execute(app.handle.db);
    // A provider that answers whatever it is asked for, "" included.
    provider.data = (identifier) => threePoints(identifier);
    const r = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 10, extract: 'steps' });
    expect(r.body.errors).toBeUndefined();
    expect(r.body.data.subjects.edges.map((e: any) => [e.node.externalId, e.node.dataPoints.totalCount]).sort()).toEqual([
      ['', 0],
      ['E-01', 3],
      ['E-03', 3],
      ['E-04', 3],
    ]);
    expect(provider.calls.flatMap((c) => c.body.SubjectIdentifiers)).not.toContain('');
  });

  it('a bad point in the answer is dropped with a logged reason, the valid points stored: no re-fetch, no breaker', async () => {
    const { provider, t, lines } = await setup(5);
    const bad = (identifier: string, n: number) => ({
      Id: `bad-${n}`,
      SubjectIdentifier: identifier,
      DataPointItems: [{ Key: 'value', Value: { DataType: 'Integer', Value: 'nine' } }],
    });
    provider.data = (identifier) =>
      identifier === 'E-02'
        ? [...threePoints(identifier).slice(0, 2), bad(identifier, 2)]
        : identifier === 'E-03'
          ? [...threePoints(identifier), { Id: 'orphan', SubjectIdentifier: '', DataPointItems: [] }]
          : identifier === 'E-04'
            ? [bad(identifier, 4)]
            : threePoints(identifier);
    const counts = async () => {
      const r = await t.api.gql(SUBJECTS_WITH_POINTS, { first: 10, extract: 'steps' });
      expect(r.body.errors).toBeUndefined();
      expect(r.body.extensions?.staleData).toBeUndefined();
      return r.body.data.subjects.edges.map((e: any) => [e.node.externalId, e.node.dataPoints.totalCount]);
    };
    const expected = [
      ['E-01', 3],
      ['E-02', 2],
      ['E-03', 3],
      ['E-04', 0],
      ['E-05', 3],
    ];
    // Stored like any answer: the reads after the first are served from the cache.
    for (let i = 0; i < 5; i++) expect(await counts()).toEqual(expected);
    expect(provider.fetches()).toHaveLength(1);
    const [warning, ...more] = lines('data provider answered invalid data points');
    expect(more).toEqual([]);
    expect(warning).toMatchObject({ level: 40, droppedPoints: 2, ignoredPoints: 1 });
    expect(warning!['points']).toEqual(
      expect.arrayContaining([
        {
          subjectIdentifier: 'E-02',
          subjectIds: [t.subjects.get('E-02')],
          pointId: 'bad-2',
          reason: expect.stringMatching(/^Edges\.\d+\.Node\.DataPointItems\.0\.Value\.Value: An Integer value/),
        },
        expect.objectContaining({ subjectIdentifier: 'E-04', pointId: 'bad-4' }),
        expect.objectContaining({ subjectIdentifier: '', subjectIds: [], pointId: 'orphan' }),
      ]),
    );
    // Re-fetched again and again (a refresh each time): the calls succeed for the circuit breaker.
    for (let i = 0; i < 6; i++) {
      expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);
      expect(await counts()).toEqual(expected);
    }
    expect(provider.fetches().length).toBeGreaterThanOrEqual(7);
    expect(lines(OPENED)).toEqual([]);
  });
});

describe('the breaker keeps D10 (F7)', () => {
  /** The November aggregate of `steps` over every subject, with its coverage. */
  const aggregate = (api: ApiClient) =>
    api.gql(
      `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
        coverage { subjectCount staleSubjectCount unavailableSubjectCount } } }`,
      {
        input: { extractKey: 'steps', valueItemKey: 'value', timeItemKey: 'day', interval: 'MONTH', from: '2026-11-01', to: '2026-12-01' },
      },
    );

  /** Opens the data source's circuit: five reads of subjects with nothing cached fail. */
  async function open(provider: FakeProvider, t: DataTenant, lines: (msg: string) => LogLine[]) {
    provider.always = { status: 500 };
    for (let i = 0; i < 5; i++) expect(await readSteps(t, 'E-01')).toBe('PROVIDER_UNAVAILABLE');
    expect(lines(OPENED)).toHaveLength(1);
  }

  it('with the circuit open, a read with nothing cached goes to the provider: the first one after a recovery is fresh', async () => {
    const { provider, t, lines } = await setup(3);
    await open(provider, t, lines);
    const before = provider.fetches().length;
    // Still failing: the read is the probe, at once (no refusal without a call).
    expect(await readSteps(t, 'E-02')).toBe('PROVIDER_UNAVAILABLE');
    expect(provider.fetches()).toHaveLength(before + 1);
    provider.always = undefined;
    expect(await readSteps(t, 'E-02')).toEqual(FRESH);
    expect(await readSteps(t, 'E-03')).toEqual(FRESH);
  });

  it('while the circuit is open, one read with nothing cached calls the provider at a time; the others wait for it', async () => {
    const { provider, t, lines } = await setup(6);
    await open(provider, t, lines);
    // Healthy again, but slow: the probe is in flight while the other reads arrive.
    provider.always = { delayMs: 400 };
    provider.maxInFlight = 0;
    const reads = Promise.all(['E-02', 'E-03', 'E-04', 'E-05', 'E-06'].map((s) => readSteps(t, s)));
    await eventually(() => provider.inFlight === 1);
    await sleep(250);
    expect(provider.inFlight).toBe(1);
    expect(await reads).toEqual(Array(5).fill(FRESH));
  });

  it('an aggregate over many chunks, with the circuit open and the provider still failing, costs one probe', async () => {
    const { provider, t } = await setup(10);
    // An instance (a circuit of its own) that asks for 2 subjects per call, one call at a time.
    const peer = await startPeer(app, { PROVIDER_BATCH_SIZE: '2', PROVIDER_CONCURRENCY: '1' });
    try {
      const api = new ApiClient(peer.url, t.api.token);
      provider.always = { status: 500 };
      const one = `query($id: ID!) { subject(id: $id) { dataPoints(extractKey: "steps") { totalCount } } }`;
      for (let i = 0; i < 5; i++) {
        const r = await api.gql(one, { id: t.subjects.get('E-01') });
        expect(r.body.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
      }
      const before = provider.fetches().length;
      const r = await aggregate(api);
      // No subject has data: the aggregate as a whole is unavailable.
      expect(r.body.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
      // The first of its five calls probed; the others, with nothing to serve either, were refused.
      expect(provider.fetches().length - before).toBe(1);
    } finally {
      await peer.close();
    }
  });

  it('an aggregate whose first chunk is refused (older data to serve) still probes for the later ones with nothing cached', async () => {
    const { provider, t } = await setup(6);
    // The order in which an aggregate asks for the subjects: one failed call of this instance's.
    provider.always = { status: 500 };
    expect((await aggregate(t.api)).body.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
    const order: string[] = provider.fetches().at(-1)!.body.SubjectIdentifiers;
    expect(order).toHaveLength(6);
    // An instance asking for 2 subjects per call, one call at a time, whose sets are old after 1 s, and
    // whose circuit, once open, waits a minute before its timed probe.
    const peer = await startPeer(app, {
      PROVIDER_BATCH_SIZE: '2',
      PROVIDER_CONCURRENCY: '1',
      CACHE_TTL_SECONDS: '1',
      PROVIDER_BREAKER_PROBE_MS: '60000',
      PROVIDER_BREAKER_OPEN_MS: '60000',
    });
    try {
      const onPeer = { ...t, api: new ApiClient(peer.url, t.api.token) };
      provider.always = undefined;
      // The first chunk's subjects have data (old by the time of the aggregate), the others nothing.
      for (const s of order.slice(0, 2)) expect(await readSteps(onPeer, s)).toEqual(FRESH);
      provider.always = { status: 500 };
      for (let i = 0; i < 5; i++) expect(await readSteps(onPeer, order[5]!)).toBe('PROVIDER_UNAVAILABLE');
      await sleep(1100);
      provider.always = undefined;
      const before = provider.fetches().length;
      const r = await aggregate(onPeer.api);
      expect(r.body.errors).toBeUndefined();
      // The first chunk refused by the open circuit (served stale), the second the probe, the third a call.
      expect(r.body.data.dataPointAggregates.coverage).toEqual({ subjectCount: 6, staleSubjectCount: 2, unavailableSubjectCount: 0 });
      expect(
        provider
          .fetches()
          .slice(before)
          .map((c) => c.body.SubjectIdentifiers),
      ).toEqual([order.slice(2, 4), order.slice(4)]);
    } finally {
      await peer.close();
    }
  });

  it('reads served stale while the provider failed for 10 s are fresh again within 2 s of its recovery', async () => {
    const { provider, t } = await setup(3);
    expect(await readSteps(t, 'E-01')).toEqual(FRESH);
    provider.always = { status: 500 };
    // E-01 flagged (a refresh): its reads go to the provider, and have older data to serve.
    expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);
    const outageEnds = Date.now() + 10_000;
    while (Date.now() < outageEnds) {
      expect(await readSteps(t, 'E-01')).toEqual({ count: 3, stale: true });
      await sleep(100);
    }
    provider.always = undefined;
    const recovered = Date.now();
    for (;;) {
      const r = await readSteps(t, 'E-01');
      if (typeof r === 'object' && !r.stale) break;
      await sleep(50);
    }
    // Probes every 1.5 s at most (PROVIDER_BREAKER_OPEN_MS): the goal of 2 s, with room for the calls.
    expect(Date.now() - recovered).toBeLessThanOrEqual(2000);
  }, 30_000);
});
