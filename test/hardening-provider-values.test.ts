import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../db/migrations.js';
import { type ApiClient, type TestApp, createTenant, startApp } from './helpers.js';
import { FakeProvider, PROVIDER_CLIENT, providerDataSource } from './fake-provider.js';

// Issue 30, F4, F9, F10 (P83–P86): every value a provider may send per the contract is stored and
// aggregated, never an internal error nor a re-fetch on every read.
// - F4: a Decimal of 1e200 aggregates (P83); a lone UTF-16 surrogate in a provider's text is repaired to U+FFFD,
//   so the answer is stored once and aggregates over it work (P84).
// - F9: a DateTime with 7 fraction digits (.NET's round-trip form) keeps its instant truncated to milliseconds
//   in SQL and JS alike (P17, P85): `…23:59:59.9999999Z` is in its own day's bucket, text and order; migration
//   0009 derives the rows stored before it again.
// - F10: `sumText` is exact over the Decimal texts the provider sent, also with 18–29 significant digits (P86).

interface LogLine {
  level: number;
  msg: string;
}

let app: TestApp;
const logs: LogLine[] = [];
beforeAll(async () => {
  app = await startApp(
    { LOG_LEVEL: 'warn', PROVIDER_BACKOFF_MS: '1', PROVIDER_RETRIES: '0' },
    { logStream: { write: (line: string) => logs.push(JSON.parse(line) as LogLine) } },
  );
});
afterAll(() => app?.close());

interface World {
  provider: FakeProvider;
  api: ApiClient;
  /** Subject UUIDs by ExternalId. */
  subjects: Map<string, string>;
  /** Points per identifier of extract `m`. */
  data: Map<string, any[]>;
}

/** A tenant with extract `m` of its own fake provider, and subjects S-1 … S-`count`. */
async function world(count = 2): Promise<World> {
  const provider = await new FakeProvider().start();
  provider.pageSize = 1000;
  const data = new Map<string, any[]>();
  provider.data = (identifier) => data.get(identifier) ?? [];
  const tenant = await createTenant(app, {
    clients: [
      { clientId: 'full', clientSecret: 'full-client-secret', scopes: ['ServiceApi', 'ServiceDataProviderApi'], permissions: ['*'] },
      PROVIDER_CLIENT,
    ],
    dataSources: [{ ...providerDataSource(provider), inboundClientIds: ['provider'] }],
    dataExtracts: [{ key: 'm', name: 'Measurements', dataSourceKey: 'wearables', options: { metric: 'm' } }],
  });
  const api = await tenant.client();
  const subjects = new Map<string, string>();
  for (let i = 1; i <= count; i++) {
    const ext = `S-${i}`;
    const res = await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: ext } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${ext}` } } },
      ],
    });
    if (res.status !== 201) throw new Error(`subject upsert failed: ${res.status} ${JSON.stringify(res.body)}`);
    subjects.set(ext, res.body.internalId);
  }
  return { provider, api, subjects, data };
}

const item = (key: string, type: string, value: unknown) => ({ Key: key, Value: { DataType: type, Value: value } });
const point = (id: string, subject: string, value: unknown, at: string, type = 'Decimal') => ({
  Id: id,
  SubjectIdentifier: subject,
  DataPointItems: [item('v', type, value), item('t', 'DateTime', at)],
});

const MEASURES = 'count subjectCount sum sumText average min max stddevSample percentiles(p: [0, 0.25, 0.5, 1])';
const AGGREGATE = `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
  aggregates { ${MEASURES} }
  buckets { start aggregates { count sumText } }
  coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
} }`;
const dayInput = { extractKey: 'm', valueItemKey: 'v', timeItemKey: 't', interval: 'DAY', from: '2026-03-30', to: '2026-04-01' };

const POINTS = `query($ids: [ID!]!, $orderBy: String) { dataExtract(key: "m") {
  dataPoints(subjectIds: $ids, first: 100, orderBy: $orderBy) { edges { node { id items { key dataType value valueText } } } }
} }`;

/** The service's log lines at `error` since `from` (an index into `logs`). */
const errorsSince = (from: number) => logs.slice(from).filter((l) => l.level >= 50);

describe('F4: huge finite Decimals aggregate (P83)', () => {
  let w: World;
  beforeAll(async () => {
    w = await world();
  });
  afterAll(() => w?.provider.close());

  it('1e200 and 2e200 are summed exactly and their Floats (stddev, percentiles included) are computed, not an internal error', async () => {
    w.data.set('S-1', [point('a', 'S-1', 1e200, '2026-03-30T10:00:00Z'), point('b', 'S-1', 2e200, '2026-03-30T11:00:00Z')]);
    w.data.set('S-2', [point('c', 'S-2', 5, '2026-03-31T10:00:00Z')]);
    const logged = logs.length;
    const r = await w.api.gql(AGGREGATE, { input: dayInput });
    expect(r.status).toBe(200);
    expect(r.body.errors).toBeUndefined();
    const a = r.body.data.dataPointAggregates;
    expect(a.aggregates).toEqual({
      count: 3,
      subjectCount: 2,
      sum: 3e200,
      sumText: `3${'0'.repeat(199)}5`,
      average: 1e200,
      min: 5,
      max: 2e200,
      stddevSample: 1e200,
      percentiles: [5, 5e199, 1e200, 2e200],
    });
    expect(a.buckets).toEqual([
      { start: '2026-03-30', aggregates: { count: 2, sumText: `3${'0'.repeat(200)}` } },
      { start: '2026-03-31', aggregates: { count: 1, sumText: '5' } },
    ]);
    expect(a.coverage).toEqual({ subjectCount: 2, contributingSubjectCount: 2, staleSubjectCount: 0, unavailableSubjectCount: 0 });
    expect(errorsSince(logged)).toEqual([]);
  });

  it('a measure beyond the Float range is null, its sumText exact', async () => {
    const max = Number.MAX_VALUE;
    w.data.set('S-1', [point('a', 'S-1', max, '2026-03-30T10:00:00Z'), point('b', 'S-1', max, '2026-03-30T11:00:00Z')]);
    w.data.set('S-2', [point('c', 'S-2', -max, '2026-03-31T10:00:00Z')]);
    expect((await w.api.post('/api/v1/dataSet/m/refresh')).status).toBe(200);
    const logged = logs.length;
    const r = await w.api.gql(AGGREGATE, { input: dayInput });
    expect(r.body.errors).toBeUndefined();
    const a = r.body.data.dataPointAggregates.aggregates;
    // max + max − max: max, as the JSON text 1.7976931348623157e+308 says it.
    expect(a).toMatchObject({ count: 3, sum: max, sumText: `17976931348623157${'0'.repeat(292)}`, min: -max, max });
    expect(a.average).toBeCloseTo(max / 3, -300);
    // The sample standard deviation (≈ 2.08e308) and percentile_cont halfway between −max and max overflow a Float.
    expect(a.stddevSample).toBeNull();
    expect(a.percentiles).toEqual([-max, null, max, max]);
    const days = await w.api.gql(AGGREGATE, { input: { ...dayInput, to: '2026-03-31' } });
    expect(days.body.errors).toBeUndefined();
    // 2 × max: its exact sum, but no Float.
    expect(days.body.data.dataPointAggregates.aggregates).toMatchObject({
      count: 2,
      sum: null,
      sumText: `35953862697246314${'0'.repeat(292)}`,
    });
    expect(errorsSince(logged)).toEqual([]);
  });
});

describe('F4: invalid text from a provider is repaired, stored once and aggregated (P84)', () => {
  let w: World;
  beforeAll(async () => {
    w = await world();
  });
  afterAll(() => w?.provider.close());

  it('lone surrogates in a String value, an item key and an id become U+FFFD; the answer is stored (one provider call) and aggregates', async () => {
    w.data.set('S-1', [
      {
        ...point('a\ud800', 'S-1', 3, '2026-03-30T10:00:00Z'),
        DataPointItems: [
          item('v', 'Decimal', 3),
          item('t', 'DateTime', '2026-03-30T10:00:00Z'),
          item('label', 'String', 'x\udc00y\ud800'),
          item('k\udfff', 'String', 'ok'),
        ],
      },
    ]);
    w.data.set('S-2', [point('b', 'S-2', 4, '2026-03-30T12:00:00Z')]);
    const logged = logs.length;
    const ids = [...w.subjects.values()];
    const read = async () => {
      const r = await w.api.gql(POINTS, { ids });
      expect(r.body.errors).toBeUndefined();
      return r.body.data.dataExtract.dataPoints.edges.map((e: any) => e.node);
    };
    const first = await read();
    const a = first.find((n: any) => n.id !== 'b');
    expect(a.id).toBe('a\ufffd');
    expect(a.items.map((i: any) => [i.key, i.valueText])).toEqual([
      ['v', '3'],
      ['t', '2026-03-30T10:00:00.000Z'],
      ['label', 'x\ufffdy\ufffd'],
      ['k\ufffd', 'ok'],
    ]);
    const calls = w.provider.fetches().length;
    expect(calls).toBe(1);
    // Stored: read again (the in-process cache and PostgreSQL), no provider call.
    expect(await read()).toEqual(first);
    const r = await w.api.gql(AGGREGATE, { input: dayInput });
    expect(r.body.errors).toBeUndefined();
    expect(r.body.data.dataPointAggregates.aggregates).toMatchObject({ count: 2, subjectCount: 2, sumText: '7' });
    // Grouped by the repaired String value.
    const g = await w.api.gql(
      `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { groupedAggregates { key aggregates { count } } } }`,
      { input: { ...dayInput, groupBy: 'ITEM', groupByItemKey: 'label' } },
    );
    expect(g.body.errors).toBeUndefined();
    expect(g.body.data.dataPointAggregates.groupedAggregates).toEqual([{ key: 'x\ufffdy\ufffd', aggregates: { count: 1 } }]);
    expect(w.provider.fetches().length).toBe(calls);
    expect(errorsSince(logged)).toEqual([]);
  });
});

describe('F9: a DateTime with 7 fraction digits keeps its instant, truncated to milliseconds, in SQL and JS (P17, P85)', () => {
  let w: World;
  const zone = process.env['TZ'];
  beforeAll(async () => {
    // A service whose local zone is not UTC: a DateTime without an offset is UTC all the same (P17).
    process.env['TZ'] = 'Asia/Tokyo';
    w = await world();
    w.data.set('S-1', [
      point('a', 'S-1', 1, '2026-03-30T23:59:59.9999999Z', 'Integer'),
      point('b', 'S-1', 2, '2026-03-31T00:00:00Z', 'Integer'),
      point('c', 'S-1', 4, '2026-03-31T01:59:59.9999999+02:00', 'Integer'),
      point('d', 'S-1', 8, '2026-03-30T23:59:59.9999999', 'Integer'),
    ]);
    w.data.set('S-2', [point('e', 'S-2', 16, '2026-03-30T23:59:59.9995Z', 'Integer')]);
  });
  afterAll(async () => {
    if (zone === undefined) delete process.env['TZ'];
    else process.env['TZ'] = zone;
    await w?.provider.close();
  });

  // P113: the rows a cache write derives in JS read the instant as the SQL functions do.
  it("…23:59:59.9999999Z is in its own day's bucket, its text is …59.999Z, and it orders before the next day", async () => {
    const r = await w.api.gql(AGGREGATE, { input: dayInput });
    expect(r.body.errors).toBeUndefined();
    expect(r.body.data.dataPointAggregates.buckets).toEqual([
      { start: '2026-03-30', aggregates: { count: 4, sumText: '29' } },
      { start: '2026-03-31', aggregates: { count: 1, sumText: '2' } },
    ]);
    // [from, to) ending at the next midnight holds them.
    const day = await w.api.gql(AGGREGATE, { input: { ...dayInput, to: '2026-03-31' } });
    expect(day.body.data.dataPointAggregates.aggregates).toMatchObject({ count: 4, sumText: '29' });
    // In Tokyo the same instants are on 31 March, 08:59:59.999 local.
    const tokyo = await w.api.gql(AGGREGATE, { input: { ...dayInput, timeZone: 'Asia/Tokyo' } });
    expect(tokyo.body.data.dataPointAggregates.buckets).toEqual([
      { start: '2026-03-30', aggregates: { count: 0, sumText: null } },
      { start: '2026-03-31', aggregates: { count: 5, sumText: '31' } },
    ]);

    const points = await w.api.gql(POINTS, { ids: [...w.subjects.values()], orderBy: 't' });
    expect(points.body.errors).toBeUndefined();
    const order = points.body.data.dataExtract.dataPoints.edges.map((e: any) => [
      e.node.id,
      e.node.items.find((i: any) => i.key === 't').valueText,
    ]);
    // One instant, then ties by id.
    expect(order).toEqual([
      ['a', '2026-03-30T23:59:59.999Z'],
      ['c', '2026-03-30T23:59:59.999Z'],
      ['d', '2026-03-30T23:59:59.999Z'],
      ['e', '2026-03-30T23:59:59.999Z'],
      ['b', '2026-03-31T00:00:00.000Z'],
    ]);
  });

  it('migration 0009 derives the aggregate rows of points stored before it again, and 0010 the typed rows from them (down, then up)', async () => {
    // Each question new (another `from`): an answer asked before is served from memory (P63).
    const day30 = async (from: string) => {
      const r = await w.api.gql(AGGREGATE, { input: { ...dayInput, from } });
      expect(r.body.errors).toBeUndefined();
      return r.body.data.dataPointAggregates.buckets.find((b: any) => b.start === '2026-03-30').aggregates;
    };
    const m = migrations['0009_data_point_instants']!;
    // P125: aggregates read the typed rows 0010 derives from the points' rows.
    const typed = migrations['0010_data_cache_measure']!;
    await typed.down!(app.handle.db);
    await m.down!(app.handle.db);
    await typed.up(app.handle.db);
    try {
      // As before 0009: only `e` (…59.9995Z) stayed in its day.
      expect(await day30('2026-03-29')).toEqual({ count: 1, sumText: '16' });
    } finally {
      await typed.down!(app.handle.db);
      await m.up(app.handle.db);
      await typed.up(app.handle.db);
    }
    expect(await day30('2026-03-28')).toEqual({ count: 4, sumText: '29' });
  });
});

describe('F10: sumText is exact over the Decimal texts the provider sent (P86)', () => {
  let w: World;
  beforeAll(async () => {
    w = await world(1);
  });
  afterAll(() => w?.provider.close());

  // Numbers a double cannot hold: the provider's JSON text as it is on the wire.
  const page = (values: string[]) =>
    `{"PageInfo":{"HasNextPage":false,"HasPreviousPage":false,"StartCursor":null,"EndCursor":null,"TotalCount":${values.length}},"Edges":[${values
      .map(
        (v, i) =>
          `{"Cursor":"${i}","Node":{"Id":"p${i}","SubjectIdentifier":"S-1","DataPointItems":[{"Key":"v","Value":{"DataType":"Decimal","Value":${v}}},{"Key":"t","Value":{"DataType":"DateTime","Value":"2026-03-30T10:00:00Z"}},{"Key":"n","Value":{"DataType":"Decimal","Value":1.5}}]}}`,
      )
      .join(',')}]}`;

  it('18 to 29 significant digits are summed as sent: stored and read from the rows, and served stale from memory', async () => {
    w.provider.always = {
      body: page(['1.000000000000000001', '2.000000000000000002', '1234567890123456789012345', '-0.1e-20', '12345678901234567.5']),
    };
    const expected = '1234567902469135690246915.500000000000000002999';
    const total = async () => {
      const r = await w.api.gql(AGGREGATE, { input: dayInput });
      expect(r.body.errors).toBeUndefined();
      return r.body.data.dataPointAggregates;
    };
    const fetched = await total();
    expect(fetched.aggregates).toMatchObject({ count: 5, sumText: expected, sum: Number(expected) });
    expect(fetched.buckets[0].aggregates).toEqual({ count: 5, sumText: expected });
    // The values read back are the nearest Floats, as before.
    const read = await w.api.gql(POINTS, { ids: [...w.subjects.values()] });
    expect(read.body.data.dataExtract.dataPoints.edges.map((e: any) => e.node.items[0].value)).toEqual([
      1, 2, 1.2345678901234568e24, -1e-21, 12345678901234568,
    ]);
    // Served stale after a refresh while the provider fails: the older set goes into the statement from memory.
    w.provider.always = { status: 503 };
    try {
      expect((await w.api.post('/api/v1/dataSet/m/refresh')).status).toBe(200);
      const stale = await total();
      expect(stale.coverage.staleSubjectCount).toBe(1);
      expect(stale.aggregates.sumText).toBe(expected);
    } finally {
      w.provider.always = undefined;
    }
  });
});
