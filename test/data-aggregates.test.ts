import fc from 'fast-check';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Kysely, KyselyPlugin } from 'kysely';
import { ApiClient, type TestApp, type TestTenant, createTenant, startApp, startPeer } from './helpers.js';
import { FakeProvider, PROVIDER_CLIENT, providerDataSource } from './fake-provider.js';

// Issue 17, P57–P59: dataPointAggregates (docs/data-cache.md, "Aggregating"). The aggregates are checked against
// a brute force over the provider's data (exact decimal sums with BigInt, local dates with Intl), as fresh
// as reads (D10: the same cache, chunks, single-flight, stale data), per child entity, with coverage,
// permissions (D4), tenant isolation (D2) and the cost limit (D11, P28).
//
// Budget: AGG_RUNS generated cases (default 25), each aggregated four times: cold (fetched, then read from
// the cache's rows), warm (LRU hit), on a second instance without an LRU (freshness read from PostgreSQL),
// and served stale after a refresh while the provider fails (the older sets sent along from memory). The seed is fixed (42) when CI is set, random otherwise; AGG_SEED overrides.

const RUNS = Math.max(1, Number(process.env['AGG_RUNS'] ?? 25));
const SEED =
  process.env['AGG_SEED'] !== undefined && process.env['AGG_SEED'] !== ''
    ? Number(process.env['AGG_SEED'])
    : process.env['CI']
      ? 42
      : Math.floor(Math.random() * 2 ** 31);

const DAY = 86_400_000;

// ---------------------------------------------------------------------------------------------------------
// The tenant: org → team-a (→ a1, a2), team-b, team-c (no subjects). Subjects by ExternalId and their locations.

const ENTITIES = [
  { key: 'org', displayName: 'Org', structureTypeKey: 'company' },
  { key: 'team-a', displayName: 'Team A', structureTypeKey: 'department', parentKey: 'org' },
  { key: 'team-b', displayName: 'Team B', structureTypeKey: 'department', parentKey: 'org' },
  { key: 'team-c', displayName: 'Team C', structureTypeKey: 'department', parentKey: 'org' },
  { key: 'a1', displayName: 'A1', structureTypeKey: 'department', parentKey: 'team-a' },
  { key: 'a2', displayName: 'A2', structureTypeKey: 'department', parentKey: 'team-a' },
];
const LOCATIONS: Record<string, string[]> = {
  'S-1': ['team-a'],
  'S-2': ['a1'],
  'S-3': ['team-b'],
  'S-4': ['team-a', 'team-b'],
  'S-5': ['a2'],
  'S-6': ['team-b'],
};
/** The child of org each subject is under (a subject in two teams is in both). */
const TEAMS: Record<string, string[]> = {
  'S-1': ['team-a'],
  'S-2': ['team-a'],
  'S-3': ['team-b'],
  'S-4': ['team-a', 'team-b'],
  'S-5': ['team-a'],
  'S-6': ['team-b'],
};

interface World {
  app: TestApp;
  provider: FakeProvider;
  tenant: TestTenant;
  api: ApiClient;
  subjects: Map<string, string>;
  /** Points per extract key and identifier, served by the provider. */
  data: Map<string, Map<string, any[]>>;
}

/** A provider, and a tenant calling it (on `app`, or on a new app with `env`). */
async function world(env: Record<string, string> = {}, on?: TestApp): Promise<World> {
  const provider = await new FakeProvider().start();
  provider.pageSize = 1000;
  const data = new Map<string, Map<string, any[]>>();
  provider.data = (identifier, extractKey) => data.get(extractKey)?.get(identifier) ?? [];
  const app = on ?? (await startApp({ PROVIDER_BACKOFF_MS: '1', ...env }));
  const tenant = await createTenant(app, {
    clients: [
      { clientId: 'full', clientSecret: 'full-client-secret', scopes: ['ServiceApi', 'ServiceDataProviderApi'], permissions: ['*'] },
      PROVIDER_CLIENT,
      {
        clientId: 'no-list',
        clientSecret: 'no-list-client-secret',
        scopes: ['ServiceApi'],
        permissions: ['View:DataExtract', 'View:StructuralEntity'],
      },
      { clientId: 'no-view', clientSecret: 'no-view-client-secret', scopes: ['ServiceApi'], permissions: ['List:Subject'] },
      {
        clientId: 'no-entity',
        clientSecret: 'no-entity-client-secret',
        scopes: ['ServiceApi'],
        permissions: ['List:Subject', 'View:DataExtract'],
      },
    ],
    structuralEntities: ENTITIES,
    dataSources: [{ ...providerDataSource(provider), inboundClientIds: ['provider'] }],
    dataExtracts: [
      { key: 'm', name: 'Measurements', dataSourceKey: 'wearables', options: { metric: 'm' } },
      { key: 'm2', name: 'More measurements', dataSourceKey: 'wearables', options: { metric: 'm2' } },
    ],
  });
  const api = await tenant.client();
  const subjects = new Map<string, string>();
  for (const [ext, keys] of Object.entries(LOCATIONS)) {
    const res = await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: ext } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${ext}` } } },
        { Key: 'grade', Value: { Integer: { Value: Number(ext.slice(2)) % 2 } } },
      ],
      StructuralEntityKeys: keys,
    });
    if (res.status !== 201) throw new Error(`subject upsert failed: ${res.status} ${JSON.stringify(res.body)}`);
    subjects.set(ext, res.body.internalId);
  }
  return { app, provider, tenant, api, subjects, data };
}

const AGGREGATES = `count subjectCount sum sumText average min max stddevSample`;
const QUERY = `query($input: DataPointAggregatesInput!, $p: [Float!]!) { dataPointAggregates(input: $input) {
  aggregates { ${AGGREGATES} percentiles(p: $p) }
  buckets { start startsAt aggregates { ${AGGREGATES} percentiles(p: $p) } }
  groupedAggregates { key aggregates { ${AGGREGATES} percentiles(p: $p) } buckets { start startsAt aggregates { ${AGGREGATES} percentiles(p: $p) } } }
  coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount unavailableSubjects { externalId } }
} }`;

// ---------------------------------------------------------------------------------------------------------
// The brute force: exact decimals (BigInt scaled), local dates with Intl, percentile_cont as PostgreSQL.

/** A decimal as BigInt mantissa × 10^-scale, from a number's JSON text (exponents included). */
interface Dec {
  m: bigint;
  s: number;
}
function dec(text: string): Dec {
  const [mant, exp] = text.toLowerCase().split('e') as [string, string | undefined];
  const neg = mant.startsWith('-');
  const [int, frac = ''] = mant.replace('-', '').split('.') as [string, string | undefined];
  let m = BigInt(int + frac);
  let s = frac.length - Number(exp ?? 0);
  if (s < 0) {
    m *= 10n ** BigInt(-s);
    s = 0;
  }
  return { m: neg ? -m : m, s };
}
const scaleTo = (d: Dec, s: number) => d.m * 10n ** BigInt(s - d.s);
function decText(d: Dec): string {
  // Canonical: no trailing zeros after the point, no point without decimals.
  let { m, s } = d;
  while (s > 0 && m % 10n === 0n) {
    m /= 10n;
    s--;
  }
  const neg = m < 0n;
  const digits = (neg ? -m : m).toString().padStart(s + 1, '0');
  const text = s === 0 ? digits : `${digits.slice(0, -s)}.${digits.slice(-s)}`;
  return neg ? `-${text}` : text;
}
function decSum(values: Dec[]): Dec {
  const s = Math.max(0, ...values.map((v) => v.s));
  return { m: values.reduce((a, v) => a + scaleTo(v, s), 0n), s };
}

const localDates = new Map<string, Intl.DateTimeFormat>();
/** The local calendar date (yyyy-MM-dd) of an instant in a zone, by Intl (independent of the service's code). */
function localDate(ms: number, zone: string): string {
  let f = localDates.get(zone);
  if (!f)
    localDates.set(zone, (f = new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit' })));
  return f.format(ms);
}
const dayOf = (date: string) => Date.parse(`${date}T00:00:00Z`) / DAY;
const dateOf = (day: number) => new Date(day * DAY).toISOString().slice(0, 10);
function bucketStart(interval: string, date: string): string {
  const d = new Date(`${date}T00:00:00Z`);
  if (interval === 'DAY') return date;
  if (interval === 'WEEK') return dateOf(dayOf(date) - ((d.getUTCDay() + 6) % 7));
  if (interval === 'MONTH') return `${date.slice(0, 7)}-01`;
  return `${date.slice(0, 4)}-01-01`;
}
function nextStart(interval: string, start: string): string {
  const d = new Date(`${start}T00:00:00Z`);
  if (interval === 'DAY') return dateOf(dayOf(start) + 1);
  if (interval === 'WEEK') return dateOf(dayOf(start) + 7);
  if (interval === 'MONTH') d.setUTCMonth(d.getUTCMonth() + 1);
  else d.setUTCFullYear(d.getUTCFullYear() + 1);
  return d.toISOString().slice(0, 10);
}
/** The first instant whose local date is `date`: scanned in 15-minute steps, then refined to the second. */
function firstInstant(date: string, zone: string): string {
  let t = Date.parse(`${date}T00:00:00Z`) - 16 * 3_600_000;
  while (localDate(t, zone) < date) t += 15 * 60_000;
  let lo = t - 15 * 60_000;
  while (t - lo > 1000) {
    const mid = lo + Math.floor((t - lo) / 2000) * 1000;
    if (localDate(mid, zone) < date) lo = mid;
    else t = mid;
  }
  return new Date(t).toISOString();
}
/** PostgreSQL's percentile_cont over float8. */
function percentileCont(sorted: number[], p: number): number | null {
  if (sorted.length === 0) return null;
  const row = p * (sorted.length - 1);
  const first = Math.floor(row);
  const second = Math.ceil(row);
  const lo = sorted[first]!;
  return first === second ? lo : lo + (row - first) * (sorted[second]! - lo);
}

/** a / b as the nearest float, whatever their sizes (64 significant bits of the quotient, then scaled). */
function ratio(a: bigint, b: bigint): number {
  if (a === 0n) return 0;
  const negative = a < 0n !== b < 0n;
  const [x, y] = [a < 0n ? -a : a, b < 0n ? -b : b];
  const shift = 64 - (x.toString(2).length - y.toString(2).length);
  let r = Number(shift >= 0 ? (x << BigInt(shift)) / y : x / (y << BigInt(-shift)));
  for (let e = -shift; e !== 0;) {
    const step = Math.max(-1000, Math.min(1000, e));
    r *= 2 ** step;
    e -= step;
  }
  return negative ? -r : r;
}

interface Counted {
  subject: string;
  value: Dec;
  float: number;
  bucket: string;
  group: string | null;
}

function expectedAggregates(points: Counted[], ps: number[]) {
  if (points.length === 0) {
    return {
      count: 0,
      subjectCount: 0,
      sum: null,
      sumText: null,
      average: null,
      min: null,
      max: null,
      stddevSample: null,
      percentiles: ps.map(() => null),
    };
  }
  const sum = decSum(points.map((p) => p.value));
  const n = points.length;
  // Mean and sample variance exactly, as rationals (scaled BigInt), then to floats.
  const s = sum.s;
  const total = sum.m; // Σx · 10^s
  const squares = points.reduce((a, p) => a + scaleTo(p.value, s) ** 2n, 0n); // Σx² · 10^2s
  const variance = n > 1 ? ratio(BigInt(n) * squares - total * total, BigInt(n * (n - 1)) * 10n ** BigInt(2 * s)) : null;
  const floats = points.map((p) => p.float).sort((a, b) => a - b);
  return {
    count: n,
    subjectCount: new Set(points.map((p) => p.subject)).size,
    sum: Number(decText(sum)),
    sumText: decText(sum),
    average: Number(decText(sum)) / n,
    min: floats[0]!,
    max: floats.at(-1)!,
    stddevSample: variance === null ? null : Math.sqrt(Math.max(variance, 0)),
    percentiles: ps.map((p) => percentileCont(floats, p)),
  };
}

/** Compares an answer's aggregates with the brute force: exact where exact, floats within a relative 1e-9. */
function expectAggregates(actual: any, expected: ReturnType<typeof expectedAggregates>, where: string) {
  const close = (a: number | null, e: number | null, what: string) => {
    if (e === null || a === null) return expect(a, `${where} ${what}`).toBe(e);
    expect(Math.abs(a - e), `${where} ${what}: ${a} vs ${e}`).toBeLessThanOrEqual(1e-9 * Math.max(1, Math.abs(e)));
  };
  expect({ count: actual.count, subjectCount: actual.subjectCount, min: actual.min, max: actual.max }, where).toEqual({
    count: expected.count,
    subjectCount: expected.subjectCount,
    min: expected.min,
    max: expected.max,
  });
  // Decimal precision: the exact sum, digit for digit.
  expect(actual.sumText === null ? null : decText(dec(actual.sumText)), `${where} sumText`).toBe(expected.sumText);
  close(actual.sum, expected.sum, 'sum');
  close(actual.average, expected.average, 'average');
  close(actual.stddevSample, expected.stddevSample, 'stddevSample');
  expect(actual.percentiles.length, where).toBe(expected.percentiles.length);
  actual.percentiles.forEach((a: number | null, i: number) => close(a, expected.percentiles[i]!, `percentile ${i}`));
}

interface Case {
  zone: string;
  interval: 'DAY' | 'WEEK' | 'MONTH' | 'YEAR';
  from: string;
  to: string;
  groupBy: 'NONE' | 'ITEM' | 'CHILD_ENTITY';
  ps: number[];
  /** Points per subject ExternalId. */
  series: Record<string, any[]>;
}

/** The expected answer of a case: every bucket, the whole range, the groups, the coverage. */
function bruteForce(c: Case) {
  const counted: Counted[] = [];
  for (const [subject, points] of Object.entries(c.series)) {
    for (const point of points) {
      const item = (key: string) => (point.DataPointItems as any[]).find((i) => i.Key === key)?.Value;
      const v = item('v');
      const t = item('t');
      if (!v || (v.DataType !== 'Integer' && v.DataType !== 'Decimal') || v.Value === null) continue;
      if (!t || t.Value === null) continue;
      const date =
        t.DataType === 'Date' ? t.Value : localDate(Date.parse(/(Z|[+-]\d\d:\d\d)$/.test(t.Value) ? t.Value : `${t.Value}Z`), c.zone);
      if (date < c.from || date >= c.to) continue;
      const g = item('g');
      counted.push({
        subject,
        value: dec(JSON.stringify(v.Value)),
        // As the provider sends it (JSON has no -0).
        float: Number(JSON.stringify(v.Value)),
        bucket: bucketStart(c.interval, date),
        group: g && g.DataType === 'String' && g.Value !== null ? g.Value : null,
      });
    }
  }
  const starts: string[] = [];
  for (let s = bucketStart(c.interval, c.from); s < c.to; s = nextStart(c.interval, s)) starts.push(s);
  const buckets = (pts: Counted[]) =>
    starts.map((start) => ({
      start,
      startsAt: firstInstant(start, c.zone),
      aggregates: expectedAggregates(
        pts.filter((p) => p.bucket === start),
        c.ps,
      ),
    }));
  const groupsOf = (p: Counted): string[] => (c.groupBy === 'ITEM' ? (p.group === null ? [] : [p.group]) : TEAMS[p.subject]!);
  const groupKeys =
    c.groupBy === 'NONE'
      ? []
      : c.groupBy === 'CHILD_ENTITY'
        ? ['team-a', 'team-b', 'team-c']
        : [...new Set(counted.flatMap(groupsOf))].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return {
    aggregates: expectedAggregates(counted, c.ps),
    buckets: buckets(counted),
    groups: groupKeys.map((key) => {
      const mine = counted.filter((p) => groupsOf(p).includes(key));
      return { key, aggregates: expectedAggregates(mine, c.ps), buckets: buckets(mine) };
    }),
    contributing: new Set(counted.map((p) => p.subject)).size,
  };
}

function expectAnswer(body: any, c: Case, where: string, stale = 0) {
  expect(body.errors, `${where}: ${JSON.stringify(body.errors)}`).toBeUndefined();
  const a = body.data.dataPointAggregates;
  const e = bruteForce(c);
  expectAggregates(a.aggregates, e.aggregates, `${where} whole range`);
  const checkBuckets = (actual: any[], expected: typeof e.buckets, at: string) => {
    expect(
      actual.map((b) => [b.start, b.startsAt]),
      at,
    ).toEqual(expected.map((b) => [b.start, b.startsAt]));
    actual.forEach((b, i) => expectAggregates(b.aggregates, expected[i]!.aggregates, `${at} bucket ${b.start}`));
  };
  checkBuckets(a.buckets, e.buckets, where);
  expect(
    a.groupedAggregates.map((g: any) => g.key),
    where,
  ).toEqual(e.groups.map((g) => g.key));
  a.groupedAggregates.forEach((g: any, i: number) => {
    expectAggregates(g.aggregates, e.groups[i]!.aggregates, `${where} group ${g.key}`);
    checkBuckets(g.buckets, e.groups[i]!.buckets, `${where} group ${g.key}`);
  });
  expect(a.coverage).toMatchObject({
    subjectCount: 6,
    contributingSubjectCount: e.contributing,
    staleSubjectCount: stale,
    unavailableSubjectCount: 0,
    unavailableSubjects: [],
  });
}

function inputOf(c: Case, extractKey: string) {
  return {
    extractKey,
    valueItemKey: 'v',
    timeItemKey: 't',
    interval: c.interval,
    from: c.from,
    to: c.to,
    timeZone: c.zone,
    structuralEntityKey: 'org',
    // The cost counts buckets × maxGroups: a case has at most five groups.
    ...(c.groupBy === 'NONE' ? {} : { groupBy: c.groupBy, maxGroups: 5 }),
    ...(c.groupBy === 'ITEM' ? { groupByItemKey: 'g' } : {}),
  };
}

// ---------------------------------------------------------------------------------------------------------
// Generated cases: series around DST changes and ISO-week boundaries in several zones.

/** Zones and their DST changes in 2026 (Santiago's happen at midnight, Lord Howe's are 30 minutes). */
const ZONES: Record<string, string[]> = {
  UTC: [],
  'Asia/Kolkata': [],
  'Europe/Berlin': ['2026-03-29', '2026-10-25'],
  'America/New_York': ['2026-03-08', '2026-11-01'],
  'America/Santiago': ['2026-04-05', '2026-09-06'],
  'Australia/Lord_Howe': ['2026-04-05', '2026-10-04'],
  'Pacific/Chatham': ['2026-04-05', '2026-09-27'],
};
/** ISO-year ends: 2026 has 53 ISO weeks; 2021-01-04 is the Monday of week 1. */
const ISO_ANCHORS = ['2026-12-28', '2021-01-03'];

const decimalArb = fc.oneof(
  // Decimals with up to 6 places: exact sums differ from float sums (0.1 + 0.2).
  fc.tuple(fc.integer({ min: -10_000_000, max: 10_000_000 }), fc.integer({ min: 0, max: 6 })).map(([m, s]) => Number(`${m}e-${s}`)),
  fc.constantFrom(0.1, 0.2, 0.3, 1e-7, 123456789.123, -0.5, 1e21, 2.5e-12),
  fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e12, max: 1e12 }),
);

function caseArb(): fc.Arbitrary<Case> {
  return fc
    .record({
      zone: fc.constantFrom(...Object.keys(ZONES)),
      interval: fc.constantFrom('DAY', 'WEEK', 'WEEK', 'MONTH', 'YEAR') as fc.Arbitrary<Case['interval']>,
      anchor: fc.nat(),
      startShift: fc.integer({ min: -10, max: 3 }),
      days: fc.integer({ min: 1, max: 40 }),
      groupBy: fc.constantFrom('NONE', 'ITEM', 'CHILD_ENTITY') as fc.Arbitrary<Case['groupBy']>,
      ps: fc.uniqueArray(fc.oneof(fc.constantFrom(0, 0.25, 0.5, 0.9, 1), fc.double({ min: 0, max: 1, noNaN: true })), { maxLength: 3 }),
    })
    .chain((base) => {
      const anchors = [...ZONES[base.zone]!, ...ISO_ANCHORS];
      const fromDay = dayOf(anchors[base.anchor % anchors.length]!) + base.startShift;
      // Months and years: a wider range, so that several buckets exist.
      const span = base.interval === 'MONTH' ? base.days * 4 : base.interval === 'YEAR' ? base.days * 20 : base.days;
      const from = dateOf(fromDay);
      const to = dateOf(fromDay + span);
      const instantArb = fc.oneof(
        fc.integer({ min: (fromDay - 3) * DAY, max: (fromDay + span + 3) * DAY - 1 }),
        // Just before, at and after a local midnight (a bucket's edge), around DST changes too.
        fc
          .tuple(fc.integer({ min: fromDay - 1, max: fromDay + span + 1 }), fc.constantFrom(-3_600_000, -1000, -1, 0, 1, 1000, 3_600_000))
          .map(([day, delta]) => Date.parse(firstInstant(dateOf(day), base.zone)) + delta),
      );
      const timeItem = fc.oneof(
        { weight: 6, arbitrary: instantArb.map((ms) => ({ DataType: 'DateTime', Value: new Date(ms).toISOString() })) },
        // An offset other than Z, and no offset (UTC, P17).
        {
          weight: 1,
          arbitrary: instantArb.map((ms) => ({
            DataType: 'DateTime',
            Value: `${new Date(ms + 5.5 * 3_600_000).toISOString().slice(0, 19)}+05:30`,
          })),
        },
        { weight: 1, arbitrary: instantArb.map((ms) => ({ DataType: 'DateTime', Value: new Date(ms).toISOString().slice(0, 19) })) },
        { weight: 2, arbitrary: instantArb.map((ms) => ({ DataType: 'Date', Value: new Date(ms).toISOString().slice(0, 10) })) },
        { weight: 1, arbitrary: fc.constant({ DataType: 'DateTime', Value: null }) },
      );
      const valueItem = fc.oneof(
        { weight: 4, arbitrary: fc.integer({ min: -2_147_483_648, max: 2_147_483_647 }).map((v) => ({ DataType: 'Integer', Value: v })) },
        { weight: 4, arbitrary: decimalArb.map((v) => ({ DataType: 'Decimal', Value: v })) },
        { weight: 1, arbitrary: fc.constant({ DataType: 'Decimal', Value: null }) },
      );
      const pointArb = fc
        .record({
          v: fc.option(valueItem, { freq: 8 }),
          t: fc.option(timeItem, { freq: 10 }),
          g: fc.option(fc.constantFrom('x', 'y', 'Zeta', 'é', 'a b'), { freq: 3 }),
          // A repeated key: the first item of a key counts (as ordering by it does).
          dup: fc.boolean(),
        })
        .map(({ v, t, g, dup }) => {
          const items: any[] = [];
          if (v) items.push({ Key: 'v', Value: v });
          if (t) items.push({ Key: 't', Value: t });
          if (g) items.push({ Key: 'g', Value: { DataType: 'String', Value: g } });
          items.push({ Key: 'other', Value: { DataType: 'Boolean', Value: true } });
          if (dup)
            items.push(
              { Key: 'v', Value: { DataType: 'Integer', Value: 999_999 } },
              { Key: 't', Value: { DataType: 'Date', Value: from } },
            );
          return items;
        });
      const seriesArb = fc.array(pointArb, { maxLength: 12 });
      return fc
        .record({
          series: fc.record(Object.fromEntries(Object.keys(LOCATIONS).map((ext) => [ext, seriesArb]))),
        })
        .map(({ series }) => ({
          zone: base.zone,
          interval: base.interval,
          from,
          to,
          groupBy: base.groupBy,
          ps: base.ps,
          series: Object.fromEntries(
            Object.entries(series).map(([ext, items]) => [
              ext,
              items.map((DataPointItems, i) => ({ Id: `${ext}-${i}`, SubjectIdentifier: ext, DataPointItems })),
            ]),
          ),
        }));
    });
}

/** The measure and kind rows of an extract that differ from what `data_point_measures`/`data_point_kinds` derive. */
async function derivedDifferently(db: Kysely<any>, extractKey: string): Promise<unknown[]> {
  const measures = sql`SELECT p.subject_id, m.value_key, m.time_key, p.ordinal, m.v, m.ms, m.day
    FROM data_cache_point p, data_point_measures(p.items) m WHERE p.extract_key = ${extractKey}`;
  const stored = sql`SELECT subject_id, value_key, time_key, ordinal, v, ms, day FROM data_cache_measure WHERE extract_key = ${extractKey}`;
  const kinds = sql`SELECT DISTINCT p.subject_id, k.key, k.kind FROM data_cache_point p, data_point_kinds(p.items) k WHERE p.extract_key = ${extractKey}`;
  const storedKinds = sql`SELECT subject_id, key, kind FROM data_cache_kind WHERE extract_key = ${extractKey}`;
  const rows = await sql`(${measures} EXCEPT ${stored}) UNION ALL (${stored} EXCEPT ${measures})`.execute(db);
  const kindRows = await sql`(${kinds} EXCEPT ${storedKinds}) UNION ALL (${storedKinds} EXCEPT ${kinds})`.execute(db);
  return [...rows.rows, ...kindRows.rows];
}

describe('aggregates equal a brute force over the provider data (P57)', () => {
  let w: World;
  let peer: TestApp;
  let peerApi: ApiClient;
  const providerClient = () =>
    w.tenant.client({ clientId: PROVIDER_CLIENT.clientId, clientSecret: PROVIDER_CLIENT.clientSecret, scope: 'ServiceDataProviderApi' });
  beforeAll(async () => {
    w = await world({ PROVIDER_RETRIES: '0', PROVIDER_BREAKER_FAILURES: '100000' });
    // A second instance on the same database without an in-process cache: freshness is read from PostgreSQL.
    peer = await startPeer(w.app, { CACHE_MAX_BYTES: '0' });
    peerApi = new ApiClient(peer.url, w.api.token);
  });
  afterAll(async () => {
    await peer?.close();
    await w?.app.close();
    await w?.provider.close();
  });

  it('per bucket, over the range and per group, cold, warm and from the rows, in several time zones (DST, ISO weeks, Decimal precision)', async () => {
    let n = 0;
    let counted = 0;
    await fc.assert(
      fc.asyncProperty(caseArb(), async (c) => {
        const key = `x${n++}`;
        w.data.set(key, new Map(Object.entries(c.series)));
        const created = await w.api.gql(
          `mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key } } }`,
          { input: { key, name: key, dataSourceKey: 'wearables', options: { n } } },
        );
        expect(created.body.errors).toBeUndefined();
        const variables = { input: inputOf(c, key), p: c.ps };
        const before = w.provider.fetches(key).length;
        const cold = (await w.api.gql(QUERY, variables)).body;
        expectAnswer(cold, c, 'cold');
        if (cold.data.dataPointAggregates.aggregates.count > 0) counted++;
        expect(w.provider.fetches(key).length - before).toBe(1);
        expectAnswer((await w.api.gql(QUERY, variables)).body, c, 'warm');
        expectAnswer((await peerApi.gql(QUERY, variables)).body, c, 'rows');
        // D10: one provider call in all (6 subjects, one chunk); the later answers came from the cache.
        expect(w.provider.fetches(key).length - before).toBe(1);
        // Served stale (refreshed, then the provider fails): the older sets go into the statement from memory.
        // (Failing first, so that the background re-fetch the refresh starts fails too.)
        w.provider.always = { status: 503 };
        try {
          expect((await w.api.post(`/api/v1/dataSet/${key}/refresh`)).status).toBe(200);
          expectAnswer((await w.api.gql(QUERY, variables)).body, c, 'stale', 6);
        } finally {
          w.provider.always = undefined;
        }
        // P125: the typed rows follow every write of a set. A refresh after the provider's data changed
        // (one subject now has another's points), then a change report and a removal of one point.
        const [one, two] = Object.keys(c.series) as [string, string];
        const moved = (ext: string, from: string) => c.series[from]!.map((q, i) => ({ ...q, Id: `${ext}-m${i}`, SubjectIdentifier: ext }));
        const changed: Case = { ...c, series: { ...c.series, [one]: moved(one, two) } };
        w.data.set(key, new Map(Object.entries(changed.series)));
        expect((await w.api.post(`/api/v1/dataSet/${key}/refresh`)).status).toBe(200);
        expectAnswer((await w.api.gql(QUERY, variables)).body, changed, 'refreshed');
        const provider = await providerClient();
        const reported: Case = { ...changed, series: { ...changed.series, [two]: moved(two, one) } };
        w.data.set(key, new Map(Object.entries(reported.series)));
        const change = await provider.post('/connector-dataprovider/api/v1/dataChange/creationOrUpdate', {
          SubjectIdentifier: two,
          DataExtractsOptionsValuesFilter: { n },
        });
        expect(change.status).toBe(200);
        expectAnswer((await w.api.gql(QUERY, variables)).body, reported, 'changed');
        const gone = reported.series[one]![0];
        if (gone) {
          const removed: Case = { ...reported, series: { ...reported.series, [one]: reported.series[one]!.slice(1) } };
          const removal = await provider.post('/connector-dataprovider/api/v1/dataChange/removal', {
            SubjectIdentifier: one,
            DataExtractsOptionsValuesFilter: { n },
            RemovedDataPointIdentifiers: [gone.Id],
          });
          expect(removal.status).toBe(200);
          // The provider still serves the removed point: removed ids never reappear (D10).
          expectAnswer((await w.api.gql(QUERY, variables)).body, removed, 'removed');
        }
        // P113, P125: the rows a write derived in JS are those migration 0010's functions derive from the points.
        expect(await derivedDifferently(w.app.handle.db, key)).toEqual([]);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
    // Not vacuous: most cases count points.
    expect(counted).toBeGreaterThanOrEqual(RUNS / 2);
  }, 600_000);
});

// ---------------------------------------------------------------------------------------------------------
// Examples, coverage, permissions, isolation, limits.

/** A point with a value item `v`, a time item `t` and, optionally, a String item `g`. */
function point(id: string, subject: string, v: unknown, t: unknown, g?: string) {
  const type = (x: unknown) => (Number.isInteger(x) ? 'Integer' : 'Decimal');
  const time = typeof t === 'string' && t.length === 10 ? { DataType: 'Date', Value: t } : { DataType: 'DateTime', Value: t };
  return {
    Id: id,
    SubjectIdentifier: subject,
    DataPointItems: [
      { Key: 'v', Value: { DataType: type(v), Value: v } },
      { Key: 't', Value: time },
      ...(g === undefined ? [] : [{ Key: 'g', Value: { DataType: 'String', Value: g } }]),
      { Key: 'label', Value: { DataType: 'String', Value: 'x' } },
      { Key: 'n', Value: { DataType: 'Integer', Value: 1 } },
    ],
  };
}

const SMALL = `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
  aggregates { count subjectCount sumText }
  buckets { start aggregates { count } }
  groupedAggregates { key aggregates { count } }
  coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount unavailableSubjects { externalId } }
} }`;

const base = { extractKey: 'm', valueItemKey: 'v', timeItemKey: 't', interval: 'WEEK', from: '2026-03-23', to: '2026-04-06' };

describe('dataPointAggregates (P57, P59)', () => {
  let w: World;
  beforeAll(async () => {
    w = await world();
    w.data.set(
      'm',
      new Map(
        Object.entries({
          // Berlin: 23:30 on Saturday 28 March (CET), then 00:30 on Monday 30 March (CEST): two ISO weeks.
          'S-1': [point('1a', 'S-1', 10, '2026-03-28T22:30:00Z', 'x'), point('1b', 'S-1', 20, '2026-03-29T22:30:00Z', 'x')],
          'S-2': [point('2a', 'S-2', 1.1, '2026-03-30', 'y'), point('2b', 'S-2', 2.2, '2026-03-31', 'x')],
          'S-3': [point('3a', 'S-3', 5, '2026-03-25T12:00:00Z')],
          'S-4': [point('4a', 'S-4', 0.1, '2026-03-26'), point('4b', 'S-4', 7, '2026-04-06')],
          'S-5': [{ ...point('5a', 'S-5', 1, '2026-03-26'), DataPointItems: [{ Key: 'v', Value: { DataType: 'Decimal', Value: null } }] }],
        }),
      ),
    );
  });
  afterAll(async () => {
    await w?.app.close();
    await w?.provider.close();
  });

  it('buckets by ISO week in the time zone across a DST change, per child entity (every child listed), with exact Decimal sums', async () => {
    const r = await w.api.gql(
      `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
        aggregates { count subjectCount sum sumText average min max percentiles(p: [0.5]) }
        buckets { start startsAt aggregates { count subjectCount sumText min max percentiles(p: [0.5, 0]) } }
        groupedAggregates { key structuralEntity { key displayName } aggregates { count sumText } buckets { start aggregates { count } } }
        coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
      } }`,
      { input: { ...base, timeZone: 'Europe/Berlin', structuralEntityKey: 'org', groupBy: 'CHILD_ENTITY', maxGroups: 10 } },
    );
    expect(r.body.errors).toBeUndefined();
    const a = r.body.data.dataPointAggregates;
    // 4b (6 April) is outside [from, to); S-5's value is null; S-6 has no data.
    expect(a.aggregates).toEqual({
      count: 6,
      subjectCount: 4,
      sum: 38.4,
      sumText: '38.4',
      average: 6.4,
      min: 0.1,
      max: 20,
      percentiles: [3.6],
    });
    expect(a.buckets).toEqual([
      {
        start: '2026-03-23',
        startsAt: '2026-03-22T23:00:00.000Z',
        aggregates: { count: 3, subjectCount: 3, sumText: '15.1', min: 0.1, max: 10, percentiles: [5, 0.1] },
      },
      {
        start: '2026-03-30',
        // Summer time: local midnight is 22:00 UTC.
        startsAt: '2026-03-29T22:00:00.000Z',
        aggregates: { count: 3, subjectCount: 2, sumText: '23.3', min: 1.1, max: 20, percentiles: [2.2, 1.1] },
      },
    ]);
    // A subject located under two teams counts in both; team-c has no subjects and is listed all the same.
    expect(a.groupedAggregates).toEqual([
      {
        key: 'team-a',
        structuralEntity: { key: 'team-a', displayName: 'Team A' },
        aggregates: { count: 5, sumText: '33.4' },
        buckets: [
          { start: '2026-03-23', aggregates: { count: 2 } },
          { start: '2026-03-30', aggregates: { count: 3 } },
        ],
      },
      {
        key: 'team-b',
        structuralEntity: { key: 'team-b', displayName: 'Team B' },
        aggregates: { count: 2, sumText: '5.1' },
        buckets: [
          { start: '2026-03-23', aggregates: { count: 2 } },
          { start: '2026-03-30', aggregates: { count: 0 } },
        ],
      },
      {
        key: 'team-c',
        structuralEntity: { key: 'team-c', displayName: 'Team C' },
        aggregates: { count: 0, sumText: null },
        buckets: [
          { start: '2026-03-23', aggregates: { count: 0 } },
          { start: '2026-03-30', aggregates: { count: 0 } },
        ],
      },
    ]);
    expect(a.coverage).toEqual({ subjectCount: 6, contributingSubjectCount: 4, staleSubjectCount: 0, unavailableSubjectCount: 0 });
  });

  it("selects subjects as subjects(...) does: an entity's subtree or not, entity keys, a custom field filter; groups by an item", async () => {
    const run = async (input: Record<string, unknown>) => {
      const r = await w.api.gql(SMALL, { input: { ...base, ...input } });
      expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
      return r.body.data.dataPointAggregates;
    };
    // team-a and below: S-1, S-2, S-4, S-5 (UTC: 1a falls on Saturday 28 March, 1b on Sunday 29: one week).
    expect((await run({ structuralEntityKey: 'team-a' })).coverage.subjectCount).toBe(4);
    expect((await run({ structuralEntityKey: 'team-a', includeDescendants: false })).coverage.subjectCount).toBe(2);
    expect((await run({ structuralEntityKeys: ['a1', 'team-b'] })).coverage.subjectCount).toBe(4);
    // grade = 1: S-1, S-3, S-5.
    const odd = await run({ customFieldValueFilter: { values: [{ key: 'grade', values: ['1'] }] } });
    expect(odd.coverage).toMatchObject({ subjectCount: 3, contributingSubjectCount: 2 });
    expect(odd.aggregates).toEqual({ count: 3, subjectCount: 2, sumText: '35' });
    // By item: points without the item count in the totals only.
    const byItem = await run({ groupBy: 'ITEM', groupByItemKey: 'g', maxGroups: 2 });
    expect(byItem.aggregates.count).toBe(6);
    expect(byItem.groupedAggregates).toEqual([
      { key: 'x', aggregates: { count: 3 } },
      { key: 'y', aggregates: { count: 1 } },
    ]);
    expect(
      (await w.api.gql(SMALL, { input: { ...base, groupBy: 'ITEM', groupByItemKey: 'g', maxGroups: 1 } })).body.errors[0],
    ).toMatchObject({
      extensions: { code: 'BAD_REQUEST', errors: { groupByItemKey: [expect.stringMatching(/maxGroups/)] } },
    });
    // Every bucket of the range is present, empty ones with count 0.
    const days = await run({ interval: 'DAY', from: '2026-03-20', to: '2026-03-24' });
    expect(days.buckets).toEqual(
      ['2026-03-20', '2026-03-21', '2026-03-22', '2026-03-23'].map((start) => ({ start, aggregates: { count: 0 } })),
    );
    // MONTH and YEAR buckets start on the calendar's first day, even before `from`.
    expect((await run({ interval: 'MONTH' })).buckets.map((b: any) => [b.start, b.aggregates.count])).toEqual([
      ['2026-03-01', 6],
      ['2026-04-01', 0],
    ]);
    expect((await run({ interval: 'YEAR' })).buckets.map((b: any) => b.start)).toEqual(['2026-01-01']);
  });

  it('answers 400 naming the input that is wrong, 404 for unknown keys', async () => {
    const error = async (input: Record<string, unknown>, query = SMALL) => {
      const r = await w.api.gql(query, { input: { ...base, ...input } });
      expect(r.status).toBe(200);
      expect(r.body.data).toEqual({ dataPointAggregates: null });
      return r.body.errors[0].extensions;
    };
    const bad = async (input: Record<string, unknown>, at: string, message?: RegExp) => {
      const e = await error(input);
      expect(e.code, JSON.stringify(e)).toBe('BAD_REQUEST');
      expect(Object.keys(e.errors)).toContain(at);
      if (message) expect(e.errors[at].join(' ')).toMatch(message);
    };
    await bad({ timeZone: 'Mars/Olympus_Mons' }, 'timeZone');
    await bad({ timeZone: '+02:00' }, 'timeZone');
    await bad({ from: '2026-02-30' }, 'from');
    await bad({ to: '2026-03-23' }, 'to');
    await bad({ interval: 'DAY', from: '2020-01-01', to: '2026-01-01' }, 'interval', /1000/);
    await bad({ groupBy: 'CHILD_ENTITY' }, 'groupBy');
    await bad({ groupBy: 'CHILD_ENTITY', structuralEntityKey: 'org', includeDescendants: false }, 'includeDescendants');
    await bad({ groupBy: 'ITEM' }, 'groupByItemKey');
    await bad({ groupByItemKey: 'g' }, 'groupByItemKey');
    await bad({ maxGroups: 101, groupBy: 'ITEM', groupByItemKey: 'g' }, 'maxGroups');
    await bad({ structuralEntityKey: 'org', structuralEntityKeys: ['org'] }, 'structuralEntityKeys');
    await bad({ customFieldValueFilter: { values: [{ key: 'nope', values: ['1'] }] } }, 'customFieldValueFilter.values[nope]');
    // Items of the wrong type, named with the type they hold.
    await bad({ valueItemKey: 'label' }, 'valueItemKey', /String/);
    await bad({ valueItemKey: 't' }, 'valueItemKey', /Date/);
    await bad({ timeItemKey: 'n' }, 'timeItemKey', /Integer or Decimal/);
    await bad({ groupBy: 'ITEM', groupByItemKey: 'n' }, 'groupByItemKey', /Integer or Decimal/);
    const p = await error(
      {},
      `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { aggregates { percentiles(p: [1.5]) } } }`,
    );
    expect(p).toMatchObject({ code: 'BAD_REQUEST', errors: { p: [expect.any(String)] } });
    expect((await error({ extractKey: 'nope' })).code).toBe('NOT_FOUND');
    expect((await error({ structuralEntityKey: 'nope' })).code).toBe('NOT_FOUND');
    // An item no point has: nothing counted, no error.
    expect((await w.api.gql(SMALL, { input: { ...base, valueItemKey: 'missing' } })).body.data.dataPointAggregates.aggregates).toEqual({
      count: 0,
      subjectCount: 0,
      sumText: null,
    });
  });

  it('demands View:DataExtract and List:Subject (D4): a missing one nulls the field only', async () => {
    // Each client also asks for a field it may read: still answered.
    for (const [clientId, other] of [
      ['no-list', 'structuralEntity(key: "org") { key }'],
      ['no-view', 'subjects(first: 1) { totalCount }'],
    ] as const) {
      const client = await w.tenant.client({ clientId, clientSecret: `${clientId}-client-secret` });
      const r = await client.gql(
        `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { aggregates { count } } ${other} }`,
        {
          input: base,
        },
      );
      expect(r.status).toBe(200);
      expect(r.body.data.dataPointAggregates).toBeNull();
      expect(Object.values(r.body.data).filter((v) => v !== null)).toHaveLength(1);
      expect(r.body.errors.map((e: any) => [e.path, e.extensions.code])).toEqual([[['dataPointAggregates'], 'FORBIDDEN']]);
    }
    // The groups' entities need View:StructuralEntity; their keys and aggregates do not.
    const client = await w.tenant.client({ clientId: 'no-entity', clientSecret: 'no-entity-client-secret' });
    const r = await client.gql(
      `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { groupedAggregates { key structuralEntity { key } } } }`,
      { input: { ...base, structuralEntityKey: 'org', groupBy: 'CHILD_ENTITY', maxGroups: 3 } },
    );
    expect(r.body.data.dataPointAggregates.groupedAggregates).toEqual([
      { key: 'team-a', structuralEntity: null },
      { key: 'team-b', structuralEntity: null },
      { key: 'team-c', structuralEntity: null },
    ]);
    expect(r.body.errors.every((e: any) => e.extensions.code === 'FORBIDDEN')).toBe(true);
  });

  it('refuses a query whose buckets × groups exceed GRAPHQL_MAX_COST before running it (D11, P28)', async () => {
    const selection = `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
      buckets { start aggregates { count sum } } groupedAggregates { key buckets { start aggregates { count sum } } } } }`;
    const year = { interval: 'DAY', from: '2026-01-01', to: '2027-01-01', groupBy: 'ITEM', groupByItemKey: 'g' };
    const before = w.provider.calls.length;
    const huge = await w.api.gql(selection, { input: { ...base, ...year } });
    expect(huge.body.data).toBeUndefined();
    expect(huge.body.errors[0].message).toMatch(/cost/i);
    expect(w.provider.calls.length).toBe(before);
    // Fewer groups (maxGroups) or buckets (MONTH) fit.
    const fewer = await w.api.gql(selection, { input: { ...base, ...year, maxGroups: 5 } });
    expect(fewer.body.errors, JSON.stringify(fewer.body.errors)).toBeUndefined();
    expect((await w.api.gql(selection, { input: { ...base, ...year, interval: 'MONTH' } })).body.errors).toBeUndefined();
  });

  it("reads only the token's tenant (D2): another tenant with the same keys aggregates its own provider's data", async () => {
    const other = await world({}, w.app);
    try {
      other.data.set('m', new Map([['S-1', [point('o', 'S-1', 1000, '2026-03-25')]]]));
      const mine = await w.api.gql(SMALL, { input: base });
      const theirs = await other.api.gql(SMALL, { input: base });
      expect(mine.body.data.dataPointAggregates.aggregates).toEqual({ count: 6, subjectCount: 4, sumText: '38.4' });
      expect(theirs.body.data.dataPointAggregates.aggregates).toEqual({ count: 1, subjectCount: 1, sumText: '1000' });
      expect(theirs.body.data.dataPointAggregates.coverage.subjectCount).toBe(6);
    } finally {
      await other.provider.close();
    }
  });

  // P58: cached points are also rows (data_cache_point).
  it('aggregates what the cache holds after a removal (data_cache_point follows data_cache.points)', async () => {
    await w.api.gql(SMALL, { input: base });
    const rows = async () =>
      (
        await sql<{ points: number; rows: number }>`SELECT jsonb_array_length(c.points) AS points,
          (SELECT count(*) FROM data_cache_point p WHERE p.tenant_id = c.tenant_id AND p.extract_key = c.extract_key AND p.subject_id = c.subject_id)::int AS rows
          FROM data_cache c WHERE c.extract_key = 'm' AND c.subject_id = ${w.subjects.get('S-2')!}`.execute(w.app.handle.db)
      ).rows;
    expect(await rows()).toEqual([{ points: 2, rows: 2 }]);
    const provider = await w.tenant.client({
      clientId: PROVIDER_CLIENT.clientId,
      clientSecret: PROVIDER_CLIENT.clientSecret,
      scope: 'ServiceDataProviderApi',
    });
    const removal = await provider.post('/connector-dataprovider/api/v1/dataChange/removal', {
      SubjectIdentifier: 'S-2',
      DataExtractsOptionsValuesFilter: { metric: 'm' },
      RemovedDataPointIdentifiers: ['2a'],
    });
    expect(removal.status).toBe(200);
    expect(await rows()).toEqual([{ points: 1, rows: 1 }]);
    // The provider still returns 2a (a lagging replica): removed ids never reappear (D10).
    const r = await w.api.gql(SMALL, { input: { ...base, structuralEntityKeys: ['a1'] } });
    expect(r.body.data.dataPointAggregates.aggregates).toEqual({ count: 1, subjectCount: 1, sumText: '2.2' });
  });
});

describe('as fresh as a read (D10)', () => {
  it('fetches missing subjects in chunks of PROVIDER_BATCH_SIZE, sharing calls with a concurrent read (single-flight)', async () => {
    const w = await world({ PROVIDER_BATCH_SIZE: '4' });
    try {
      w.data.set('m', new Map([...w.subjects.keys()].map((ext) => [ext, [point(`${ext}-1`, ext, 1, '2026-03-25')]])));
      w.provider.always = { delayMs: 300 };
      const read = `{ subjects(first: 10) { edges { node { dataPoints(extractKey: "m") { totalCount } } } } }`;
      const [aggregate, points] = await Promise.all([w.api.gql(SMALL, { input: base }), w.api.gql(read)]);
      expect(aggregate.body.data.dataPointAggregates.aggregates).toEqual({ count: 6, subjectCount: 6, sumText: '6' });
      expect(points.body.data.subjects.edges.map((e: any) => e.node.dataPoints.totalCount)).toEqual([1, 1, 1, 1, 1, 1]);
      expect(
        w.provider
          .fetches('m')
          .map((c) => c.body.SubjectIdentifiers.length)
          .sort(),
      ).toEqual([2, 4]);
      // Warm: no call.
      await w.api.gql(SMALL, { input: base });
      expect(w.provider.fetches('m')).toHaveLength(2);
    } finally {
      await w.app.close();
      await w.provider.close();
    }
  });

  it('sends at most PROVIDER_CONCURRENCY of its chunks at once', async () => {
    const w = await world({ PROVIDER_BATCH_SIZE: '1', PROVIDER_CONCURRENCY: '2' });
    try {
      w.data.set('m', new Map([...w.subjects.keys()].map((ext) => [ext, [point(`${ext}-1`, ext, 1, '2026-03-25')]])));
      w.provider.always = { delayMs: 100 };
      const r = await w.api.gql(SMALL, { input: base });
      expect(r.body.data.dataPointAggregates.aggregates).toEqual({ count: 6, subjectCount: 6, sumText: '6' });
      expect(w.provider.fetches('m')).toHaveLength(6);
      expect(w.provider.maxInFlight).toBe(2);
    } finally {
      await w.app.close();
      await w.provider.close();
    }
  });

  it('reports stale subjects in extensions.staleData and counts unavailable ones, still aggregating the others', async () => {
    const w = await world({ PROVIDER_RETRIES: '0', PROVIDER_TIMEOUT_MS: '500', PROVIDER_BREAKER_FAILURES: '1000' });
    try {
      w.data.set('m', new Map([...w.subjects.keys()].map((ext) => [ext, [point(`${ext}-1`, ext, Number(ext.slice(2)), '2026-03-25')]])));
      // team-a's subjects are cached: S-1, S-2, S-4, S-5.
      const warm = await w.api.gql(SMALL, { input: { ...base, structuralEntityKey: 'team-a' } });
      expect(warm.body.data.dataPointAggregates.aggregates).toEqual({ count: 4, subjectCount: 4, sumText: '12' });
      // The provider fails (first, so that the background re-fetch fails too); S-1 changes there and is
      // reported (flagged stale).
      w.provider.always = { status: 503 };
      w.data.get('m')!.set('S-1', [point('S-1-1', 'S-1', 100, '2026-03-25')]);
      const provider = await w.tenant.client({
        clientId: PROVIDER_CLIENT.clientId,
        clientSecret: PROVIDER_CLIENT.clientSecret,
        scope: 'ServiceDataProviderApi',
      });
      const change = await provider.post('/connector-dataprovider/api/v1/dataChange/creationOrUpdate', {
        SubjectIdentifier: 'S-1',
        DataExtractsOptionsValuesFilter: {},
        NewOrUpdatedDataPoints: [],
      });
      expect(change.status).toBe(200);
      const r = await w.api.gql(SMALL, { input: { ...base, structuralEntityKey: 'org' } });
      expect(r.body.errors).toBeUndefined();
      const a = r.body.data.dataPointAggregates;
      // S-1's older value (1) served stale, S-2, S-4, S-5 fresh, S-3 and S-6 never fetched: left out, counted.
      expect(a.aggregates).toEqual({ count: 4, subjectCount: 4, sumText: '12' });
      expect(a.coverage).toEqual({
        subjectCount: 6,
        contributingSubjectCount: 4,
        staleSubjectCount: 1,
        unavailableSubjectCount: 2,
        unavailableSubjects: [{ externalId: 'S-3' }, { externalId: 'S-6' }],
      });
      expect(r.body.extensions?.staleData).toEqual([
        { extractKey: 'm', subjectIdentifier: 'S-1', fetchedAt: expect.stringMatching(/^\d{4}-/) },
      ]);
      // Nothing cached at all: the field fails as a read does.
      const none = await w.api.gql(SMALL, { input: { ...base, extractKey: 'm2' } });
      expect(none.body.data.dataPointAggregates).toBeNull();
      expect(none.body.errors[0].extensions.code).toBe('PROVIDER_UNAVAILABLE');
      // The provider is back: S-1's new value, everyone covered.
      w.provider.always = undefined;
      const back = await w.api.gql(SMALL, { input: { ...base, structuralEntityKey: 'org' } });
      expect(back.body.data.dataPointAggregates.aggregates).toEqual({ count: 6, subjectCount: 6, sumText: '120' });
      expect(back.body.extensions?.staleData).toBeUndefined();
    } finally {
      await w.app.close();
      await w.provider.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------------------
// Answers asked again (P63): remembered by what they are computed from, never served once that changed.

/** Counts the aggregate statements (those reading data_cache_measure) an app runs. */
class AggregateStatements implements KyselyPlugin {
  count = 0;
  /** Reads of the subjects' cache rows (where each set is, DataCache.locate). */
  cacheReads = 0;
  transformQuery(args: Parameters<KyselyPlugin['transformQuery']>[0]) {
    if (args.node.kind === 'RawNode' && JSON.stringify(args.node).includes('FROM data_cache_measure m')) this.count++;
    if (args.node.kind === 'SelectQueryNode' && JSON.stringify(args.node.from).includes('"data_cache"')) this.cacheReads++;
    return args.node;
  }
  async transformResult(args: Parameters<KyselyPlugin['transformResult']>[0]) {
    return args.result;
  }
}

describe('an answer asked again (P63)', () => {
  const statements = new AggregateStatements();
  let w: World;
  let peer: TestApp;
  let peerApi: ApiClient;
  const valueOf = (ext: string) => Number(ext.slice(2));
  const ask = async (api: ApiClient, input: Record<string, unknown>) => {
    const r = await api.gql(SMALL, { input: { ...base, ...input } });
    expect(r.body.errors).toBeUndefined();
    return r.body.data.dataPointAggregates;
  };
  const provider = () =>
    w.tenant.client({ clientId: PROVIDER_CLIENT.clientId, clientSecret: PROVIDER_CLIENT.clientSecret, scope: 'ServiceDataProviderApi' });

  beforeAll(async () => {
    const app = await startApp({ PROVIDER_BACKOFF_MS: '1', MAIL_POLL_MS: '3600000' }, { plugins: [statements] });
    w = await world({}, app);
    w.data.set('m', new Map([...w.subjects.keys()].map((ext) => [ext, [point(`${ext}-1`, ext, valueOf(ext), '2026-03-25')]])));
    peer = await startPeer(w.app);
    peerApi = new ApiClient(peer.url, w.api.token);
  });
  afterAll(async () => {
    await peer?.close();
    await w?.app.close();
    await w?.provider.close();
  });

  it('is served without running the statement again, and concurrent askers share one statement', async () => {
    const input = { structuralEntityKey: 'org', groupBy: 'CHILD_ENTITY' };
    const first = await ask(w.api, input);
    expect(first.aggregates).toEqual({ count: 6, subjectCount: 6, sumText: '21' });
    // The counter sees the reads of the cache rows (the cold ask read them).
    expect(statements.cacheReads).toBeGreaterThan(0);
    const before = statements.count;
    const reads = statements.cacheReads;
    expect(await ask(w.api, input)).toEqual(first);
    expect(statements.count - before).toBe(0);
    // P126: nothing under it was invalidated since, and every set is within its TTL: the rows are not read.
    expect(statements.cacheReads - reads).toBe(0);
    // A question not asked before: one statement for eight concurrent askers, all given the same answer.
    const answers = await Promise.all(Array.from({ length: 8 }, () => ask(w.api, { ...input, timeZone: 'Asia/Tokyo' })));
    expect(statements.count - before).toBe(1);
    for (const a of answers) expect(a).toEqual(answers[0]);
    // P126: the same subjects, so where their sets are is known: a new question reads only the typed rows.
    expect(statements.cacheReads - reads).toBe(0);
  });

  // P102: the peer is another app in this process, with an AggregateMemory of its own.
  it('is computed again after a change notification, on this instance and on another', async () => {
    const input = { structuralEntityKey: 'team-b' };
    expect((await ask(w.api, input)).aggregates).toEqual({ count: 3, subjectCount: 3, sumText: '13' });
    expect((await ask(peerApi, input)).aggregates).toEqual({ count: 3, subjectCount: 3, sumText: '13' });
    w.data.get('m')!.set('S-3', [point('S-3-1', 'S-3', 300, '2026-03-25')]);
    const change = await (
      await provider()
    ).post('/connector-dataprovider/api/v1/dataChange/creationOrUpdate', {
      SubjectIdentifier: 'S-3',
      DataExtractsOptionsValuesFilter: {},
      NewOrUpdatedDataPoints: [],
    });
    expect(change.status).toBe(200);
    expect((await ask(w.api, input)).aggregates).toEqual({ count: 3, subjectCount: 3, sumText: '310' });
    expect((await ask(peerApi, input)).aggregates).toEqual({ count: 3, subjectCount: 3, sumText: '310' });
  });

  it('follows the subject list: a subject moved to another team, a subject removed from a team', async () => {
    const input = { structuralEntityKey: 'org', groupBy: 'CHILD_ENTITY' };
    const groups = async () => Object.fromEntries((await ask(w.api, input)).groupedAggregates.map((g: any) => [g.key, g.aggregates.count]));
    const before = await groups();
    // S-6 moves from team-b to team-c.
    const moved = await w.api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'S-6' } } },
        { Key: 'fullName', Value: { String: { Value: 'Person S-6' } } },
      ],
      StructuralEntityKeys: ['team-c'],
    });
    expect(moved.status).toBeLessThan(300);
    expect(await groups()).toEqual({ ...before, 'team-b': before['team-b'] - 1, 'team-c': 1 });
    // S-4 leaves team-b (it stays in team-a).
    const left = await w.api.delete(`/api/v1/subject/${w.subjects.get('S-4')}/structuralEntities?keys=team-b`);
    expect(left.status).toBeLessThan(300);
    expect(await groups()).toEqual({ ...before, 'team-b': before['team-b'] - 2, 'team-c': 1 });
  });
});

describe('an answer remembered past its data (P63, D10)', () => {
  it('is not served once a subject set is past CACHE_TTL_SECONDS: the set is fetched again and the answer computed', async () => {
    const w = await world({ CACHE_TTL_SECONDS: '1' });
    try {
      w.data.set('m', new Map([['S-1', [point('S-1-1', 'S-1', 1, '2026-03-25')]]]));
      const ask = async () =>
        (await w.api.gql(SMALL, { input: { ...base, structuralEntityKeys: ['team-a'], includeDescendants: false } })).body;
      expect((await ask()).data.dataPointAggregates.aggregates).toEqual({ count: 1, subjectCount: 1, sumText: '1' });
      // The provider's data changes without a notification: within the TTL the cached set is the answer.
      w.data.set('m', new Map([['S-1', [point('S-1-1', 'S-1', 2, '2026-03-25')]]]));
      expect((await ask()).data.dataPointAggregates.aggregates).toEqual({ count: 1, subjectCount: 1, sumText: '1' });
      await new Promise((r) => setTimeout(r, 1100));
      expect((await ask()).data.dataPointAggregates.aggregates).toEqual({ count: 1, subjectCount: 1, sumText: '2' });
    } finally {
      await w.app.close();
      await w.provider.close();
    }
  });
});
