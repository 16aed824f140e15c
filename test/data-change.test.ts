import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/tenant-apply.service.js';
import {
  ApiClient,
  type ApiResponse,
  type TestApp,
  createTenant,
  expectProblem,
  expectValidation,
  startApp,
  tenantConfig,
} from './helpers.js';
import {
  type DataTenant,
  FakeProvider,
  PROVIDER_CLIENT,
  PROVIDER_CLIENT_2,
  SUBJECTS_WITH_POINTS,
  createDataTenant,
  eventually,
  providerDataSource,
} from './fake-provider.js';

// Change notifications from data providers (D4 who may send them, D10 what they do to the cache),
// refresh of a data set, extract management over GraphQL and tenant isolation (D2): through real HTTP
// (REST and /graphql) only, against a loopback fake provider that counts its calls.
//
// Each group gets its own FakeProvider and tenant: the provider's call log is then that group's alone,
// so a background re-fetch started by another group can never be counted here (the extract keys
// `steps` and `hr` and the identifiers E-01 … are the same in every data tenant).

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const REMOVAL = '/connector-dataprovider/api/v1/dataChange/removal';
const refreshPath = (key: string) => `/api/v1/dataSet/${encodeURIComponent(key)}/refresh`;

const PROVIDER = { clientId: PROVIDER_CLIENT.clientId, clientSecret: PROVIDER_CLIENT.clientSecret, scope: 'ServiceDataProviderApi' };
const PROVIDER_2 = { clientId: PROVIDER_CLIENT_2.clientId, clientSecret: PROVIDER_CLIENT_2.clientSecret, scope: 'ServiceApi' };
const READER = { clientId: 'reader', clientSecret: 'reader-client-secret', scope: 'ServiceApi' };
const FULL_AS_PROVIDER = { clientId: 'full', clientSecret: 'full-client-secret', scope: 'ServiceDataProviderApi' };

let app: TestApp;
const providers: FakeProvider[] = [];

beforeAll(async () => {
  app = await startApp({ PROVIDER_BACKOFF_MS: '1' });
});
afterAll(async () => {
  await app?.close();
  for (const p of providers) await p.close();
});

/** A fresh fake provider and a data tenant on it with `count` subjects E-01 …. */
async function setup(count: number): Promise<{ p: FakeProvider; t: DataTenant }> {
  const p = await new FakeProvider().start();
  providers.push(p);
  return { p, t: await createDataTenant(app, p, count) };
}

/** The fake provider's point values for a version: Ids -1, -2, -3 carry 5, 40, 300 plus the version. */
const valuesAt = (version: number) => [5 + version, 40 + version, 300 + version];

interface ReadPoint {
  id: string;
  value: unknown;
  label: unknown;
}

/** Reads the first `first` subjects' points of an extract through GraphQL; fails on any error. */
async function read(api: ApiClient, extract: string, first: number): Promise<{ points: Record<string, ReadPoint[]>; extensions: any }> {
  const r = await api.gql(SUBJECTS_WITH_POINTS, { first, extract });
  expect(r.status).toBe(200);
  expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
  const points: Record<string, ReadPoint[]> = {};
  for (const e of r.body.data.subjects.edges) {
    points[e.node.externalId] = e.node.dataPoints.edges.map((pe: any) => ({
      id: pe.node.id,
      value: pe.node.items.find((i: any) => i.key === 'value')?.value,
      label: pe.node.items.find((i: any) => i.key === 'label')?.value,
    }));
  }
  return { points, extensions: (r.body as any).extensions };
}

/** One subject's points of an extract (by ExternalId) through GraphQL; fails on any error. */
async function readOne(t: DataTenant, extract: string, externalId: string): Promise<ReadPoint[]> {
  const r = await t.api.gql(
    `query($id: ID!, $extract: String!) { subject(id: $id) { dataPoints(extractKey: $extract, first: 100) { edges { node { id items { key value } } } } } }`,
    { id: t.subjects.get(externalId), extract },
  );
  expect(r.status).toBe(200);
  expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
  expect((r.body as any).extensions?.staleData).toBeUndefined();
  return r.body.data.subject.dataPoints.edges.map((pe: any) => ({
    id: pe.node.id,
    value: pe.node.items.find((i: any) => i.key === 'value')?.value,
    label: pe.node.items.find((i: any) => i.key === 'label')?.value,
  }));
}

/** Waits until background re-fetches have settled: reads of these extracts are all served from the cache. */
async function settled(t: DataTenant, p: FakeProvider, reads: [extract: string, first: number][]): Promise<void> {
  await eventually(async () => {
    const n = p.calls.length;
    for (const [extract, first] of reads) await read(t.api, extract, first);
    return p.calls.length === n;
  });
}

const idsOf = (pts: ReadPoint[] | undefined) => (pts ?? []).map((p) => p.id);
const valuesOf = (pts: ReadPoint[] | undefined) => (pts ?? []).map((p) => p.value);

/** The subject identifiers the provider was asked for in fetches of `extract` after the first `from` ones. */
const fetchedSince = (p: FakeProvider, extract: string, from: number) =>
  p
    .fetches(extract)
    .slice(from)
    .flatMap((c) => c.body.SubjectIdentifiers as string[]);

/** One data point as a provider reports it. */
function point(id: string, subject: string, value: unknown = 1, dataType = 'Integer') {
  return { Id: id, SubjectIdentifier: subject, DataPointItems: [{ Key: 'value', Value: { DataType: dataType, Value: value } }] };
}

const changeBody = (subject = 'E-01', extra: Record<string, unknown> = {}) => ({
  SubjectIdentifier: subject,
  DataExtractsOptionsValuesFilter: {},
  NewOrUpdatedDataPoints: [point(`${subject}-1`, subject, 7)],
  ...extra,
});
const removalBody = (subject = 'E-01', extra: Record<string, unknown> = {}) => ({
  SubjectIdentifier: subject,
  DataExtractsOptionsValuesFilter: {},
  RemovedDataPointIdentifiers: [`${subject}-9`],
  ...extra,
});

const ENDPOINTS = [
  { name: 'creationOrUpdate', path: CHANGE, body: changeBody },
  { name: 'removal', path: REMOVAL, body: removalBody },
] as const;

const sorted = (xs: readonly string[]) => [...xs].sort();

// P31: the change answers are PascalCase: {FlaggedDataExtractKeys}.
/** A 200 change answer; returns its flagged keys sorted (the contract gives them no order). */
function flagged(res: ApiResponse): string[] {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(Object.keys(res.body)).toEqual(['FlaggedDataExtractKeys']);
  expect(Array.isArray(res.body.FlaggedDataExtractKeys)).toBe(true);
  return sorted(res.body.FlaggedDataExtractKeys);
}

type GqlError = { message: string; path?: (string | number)[]; extensions?: Record<string, any> };

/** Exactly one GraphQL error at `path`, with this code; HTTP 200, other fields answered (P27, D4). */
function gqlErrorAt(res: ApiResponse<{ data?: any; errors?: GqlError[] }>, path: (string | number)[], code: string): GqlError {
  expect(res.status).toBe(200);
  expect(res.body.errors, JSON.stringify(res.body)).toBeDefined();
  const match = res.body.errors!.filter((e) => JSON.stringify(e.path) === JSON.stringify(path));
  expect(
    match.map((e) => e.extensions?.['code']),
    JSON.stringify(res.body.errors),
  ).toEqual([code]);
  return match[0]!;
}

// ---------------------------------------------------------------------------------------------------------

describe('D4: only inbound clients of a data source may report data changes', () => {
  // D4: both scopes (ServiceDataProviderApi, ServiceApi) are accepted; the client must be listed as an
  // inbound client of one of the tenant's data sources, whatever its permissions.
  let t: DataTenant;
  beforeAll(async () => {
    ({ t } = await setup(2));
  });

  for (const ep of ENDPOINTS) {
    describe(ep.name, () => {
      it('no token: 401 with a `WWW-Authenticate: Bearer` challenge', async () => {
        const res = await new ApiClient(app.url, undefined).post(ep.path, ep.body());
        expectProblem(res, 401);
        expect(res.headers.get('www-authenticate') ?? '').toMatch(/^Bearer\b/);
      });

      it('a malformed token: 401 (invalid_token)', async () => {
        const res = await new ApiClient(app.url, 'not-a.jwt-at-all').post(ep.path, ep.body());
        expectProblem(res, 401);
        expect(res.headers.get('www-authenticate') ?? '').toMatch(/^Bearer\b.*invalid_token/);
      });

      it('the full client, not an inbound client of any data source: 403 with either scope', async () => {
        for (const scope of ['ServiceApi', 'ServiceDataProviderApi']) {
          const full = await t.tenant.client({ clientId: 'full', clientSecret: 'full-client-secret', scope });
          expectProblem(await full.post(ep.path, ep.body()), 403);
        }
      });

      it('the reader client (not inbound): 403', async () => {
        expectProblem(await (await t.tenant.client(READER)).post(ep.path, ep.body()), 403);
      });

      it('the inbound client `provider` with scope ServiceDataProviderApi: 200', async () => {
        expect(flagged(await (await t.tenant.client(PROVIDER)).post(ep.path, ep.body()))).toEqual(['hr', 'steps']);
      });

      it('the inbound client `provider-2` with scope ServiceApi: 200 (both scopes are accepted)', async () => {
        expect(flagged(await (await t.tenant.client(PROVIDER_2)).post(ep.path, ep.body()))).toEqual(['hr', 'steps']);
      });
    });
  }

  it('GraphQL reportDataChange / reportDataRemoval: the inbound client answers, the full client is FORBIDDEN', async () => {
    const change = `mutation($input: DataChangeInput!) { reportDataChange(input: $input) { flaggedDataExtractKeys } }`;
    const removal = `mutation($input: DataRemovalInput!) { reportDataRemoval(input: $input) { flaggedDataExtractKeys } }`;
    const changeInput = { subjectIdentifier: 'E-01', dataExtractsOptionsValuesFilter: { metric: 'steps' } };
    const removalInput = {
      subjectIdentifier: 'E-01',
      removedDataPointIdentifiers: ['E-01-9'],
      dataExtractsOptionsValuesFilter: { metric: 'heartRate' },
    };

    const inbound = await t.tenant.client(PROVIDER_2);
    const a = await inbound.gql(change, { input: changeInput });
    expect(a.body).toEqual({ data: { reportDataChange: { flaggedDataExtractKeys: ['steps'] } } });
    const b = await inbound.gql(removal, { input: removalInput });
    expect(b.body).toEqual({ data: { reportDataRemoval: { flaggedDataExtractKeys: ['hr'] } } });

    const full = await t.tenant.client();
    const c = await full.gql(change, { input: changeInput });
    gqlErrorAt(c, ['reportDataChange'], 'FORBIDDEN');
    expect(c.body.data?.reportDataChange ?? null).toBeNull();
    gqlErrorAt(await full.gql(removal, { input: removalInput }), ['reportDataRemoval'], 'FORBIDDEN');
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('D10: the body of a change notification', () => {
  // D10: the body is validated before anything is written; locations use the contract's casing (D5).
  let p: FakeProvider;
  let t: DataTenant;
  beforeAll(async () => {
    ({ p, t } = await setup(2));
  });

  for (const ep of ENDPOINTS) {
    describe(ep.name, () => {
      it('a body that is not JSON: 400', async () => {
        const res = await t.provider.request('POST', ep.path, {
          raw: '{"SubjectIdentifier": "E-01",',
          headers: { 'content-type': 'application/json' },
        });
        expectProblem(res, 400);
      });

      it('a body that is not application/json: 415', async () => {
        const res = await t.provider.request('POST', ep.path, {
          raw: JSON.stringify(ep.body()),
          headers: { 'content-type': 'text/plain' },
        });
        expectProblem(res, 415);
      });

      it('no body at all: 400', async () => {
        expectProblem(await t.provider.request('POST', ep.path), 400);
      });

      it('SubjectIdentifier missing: 400 naming SubjectIdentifier', async () => {
        const { SubjectIdentifier: _, ...rest } = ep.body();
        expectValidation(await t.provider.post(ep.path, rest), 'SubjectIdentifier');
      });

      it('SubjectIdentifier empty or blank: 400 naming SubjectIdentifier', async () => {
        for (const blank of ['', '   ']) {
          const body = { ...ep.body(), SubjectIdentifier: blank, NewOrUpdatedDataPoints: [] };
          expectValidation(await t.provider.post(ep.path, body), 'SubjectIdentifier');
        }
      });

      it('an unknown subject identifier: 404', async () => {
        expectProblem(await t.provider.post(ep.path, ep.body('E-99')), 404);
      });
    });
  }

  it("a data point whose SubjectIdentifier is not the request's: 400 naming NewOrUpdatedDataPoints[0].SubjectIdentifier", async () => {
    const res = await t.provider.post(CHANGE, changeBody('E-01', { NewOrUpdatedDataPoints: [point('E-02-1', 'E-02', 3)] }));
    expectValidation(res, 'NewOrUpdatedDataPoints[0].SubjectIdentifier');
  });

  it('an item value of the wrong kind (Integer "x"): 400 naming NewOrUpdatedDataPoints[0].DataPointItems[0].Value.Value', async () => {
    const res = await t.provider.post(CHANGE, changeBody('E-01', { NewOrUpdatedDataPoints: [point('E-01-1', 'E-01', 'x', 'Integer')] }));
    expectValidation(res, 'NewOrUpdatedDataPoints[0].DataPointItems[0].Value.Value');
  });

  it('the location names the failing point and item, not the first ones', async () => {
    const good = point('E-01-1', 'E-01', 3);
    const bad = {
      Id: 'E-01-2',
      SubjectIdentifier: 'E-01',
      DataPointItems: [good.DataPointItems[0], { Key: 'day', Value: { DataType: 'Date', Value: '2026-13-45' } }],
    };
    const res = await t.provider.post(CHANGE, changeBody('E-01', { NewOrUpdatedDataPoints: [good, bad] }));
    const body = expectValidation(res, 'NewOrUpdatedDataPoints[1].DataPointItems[1].Value.Value');
    expect(Object.keys(body.errors!)).toEqual(['NewOrUpdatedDataPoints[1].DataPointItems[1].Value.Value']);
  });

  it('an unknown DataType: 400 naming its location', async () => {
    const res = await t.provider.post(CHANGE, changeBody('E-01', { NewOrUpdatedDataPoints: [point('E-01-1', 'E-01', 3, 'Currency')] }));
    expectValidation(res, 'NewOrUpdatedDataPoints[0].DataPointItems[0].Value.DataType');
  });

  it('RemovedDataPointIdentifiers missing on a removal: 400 naming it', async () => {
    const { RemovedDataPointIdentifiers: _, ...rest } = removalBody();
    expectValidation(await t.provider.post(REMOVAL, rest), 'RemovedDataPointIdentifiers');
  });

  it('nothing is written on any 4xx: a read afterwards makes no provider call and still shows every point', async () => {
    const before = await read(t.api, 'steps', 2);
    expect(idsOf(before.points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
    const mark = p.calls.length;
    // The first read's fetches are stored before it answers: a second read is served from the cache.
    expect(idsOf((await read(t.api, 'steps', 2)).points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
    expect(p.calls.length).toBe(mark);

    const reader = await t.tenant.client(READER);
    const full = await t.tenant.client(FULL_AS_PROVIDER);
    const valid = point('E-01-1', 'E-01', 99);
    const removeE012 = removalBody('E-01', { RemovedDataPointIdentifiers: ['E-01-2'] });
    const rejected: [string, number, Promise<ApiResponse>][] = [
      // 400: one good point and one bad one, both for a known subject, matching every extract.
      [
        'change, bad second point',
        400,
        t.provider.post(CHANGE, changeBody('E-01', { NewOrUpdatedDataPoints: [valid, point('E-01-2', 'E-01', 'x')] })),
      ],
      [
        'change, foreign point',
        400,
        t.provider.post(CHANGE, changeBody('E-01', { NewOrUpdatedDataPoints: [valid, point('E-02-1', 'E-02', 1)] })),
      ],
      ['removal, empty identifier', 400, t.provider.post(REMOVAL, removalBody('E-01', { RemovedDataPointIdentifiers: ['E-01-2', ''] }))],
      [
        'removal, not JSON',
        400,
        t.provider.request('POST', REMOVAL, {
          raw: JSON.stringify(removeE012).slice(0, -1),
          headers: { 'content-type': 'application/json' },
        }),
      ],
      [
        'removal, text/plain',
        415,
        t.provider.request('POST', REMOVAL, { raw: JSON.stringify(removeE012), headers: { 'content-type': 'text/plain' } }),
      ],
      // 403 (D4): not inbound clients.
      ['removal by reader', 403, reader.post(REMOVAL, removeE012)],
      ['removal by full', 403, full.post(REMOVAL, removeE012)],
      ['change by full', 403, full.post(CHANGE, changeBody('E-01'))],
      // 401 (D4): no token.
      ['removal without token', 401, new ApiClient(app.url, undefined).post(REMOVAL, removeE012)],
    ];
    for (const [name, status, pending] of rejected) {
      const res = await pending;
      expect(res.status, `${name}: ${JSON.stringify(res.body)}`).toBe(status);
    }
    // A 4xx that had flagged E-01 would make this read (or a background re-fetch) call the provider.
    const after = await read(t.api, 'steps', 2);
    expect(idsOf(after.points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
    expect(valuesOf(after.points['E-01'])).toEqual(valuesAt(0));
    await sleep(300);
    expect(p.calls.slice(mark)).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('D10: which extracts a notification flags (DataExtractsOptionsValuesFilter)', () => {
  // D10: each filter entry is a dot path into the extract's options and must hold; scalars compare by
  // their text ("7" equals 7); an empty or missing filter matches every extract.
  let p: FakeProvider;
  let t: DataTenant;
  beforeAll(async () => {
    ({ p, t } = await setup(2));
  });

  it('{"metric": "steps"} flags only `steps` and re-fetches only it in the background', async () => {
    // Both extracts cached for E-01, so either could be re-fetched.
    await read(t.api, 'steps', 1);
    await read(t.api, 'hr', 1);
    const steps = p.fetches('steps').length;
    const hr = p.fetches('hr').length;
    expect(steps).toBeGreaterThan(0);
    expect(hr).toBeGreaterThan(0);

    const res = await t.provider.post(CHANGE, changeBody('E-01', { DataExtractsOptionsValuesFilter: { metric: 'steps' } }));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ FlaggedDataExtractKeys: ['steps'] });

    await eventually(() => p.fetches('steps').length === steps + 1);
    expect(fetchedSince(p, 'steps', steps)).toEqual(['E-01']);
    await sleep(300);
    expect(p.fetches('hr').length).toBe(hr);
    expect(p.fetches('steps').length).toBe(steps + 1);
  });

  const cases: [string, Record<string, unknown> | null | undefined, string[]][] = [
    ['a dot path {"period.days": 7} matches both', { 'period.days': 7 }, ['hr', 'steps']],
    ['{"period.days": "7"}: "7" equals 7', { 'period.days': '7' }, ['hr', 'steps']],
    ['{"period.days": 8} matches none', { 'period.days': 8 }, []],
    ['an empty filter {} matches all', {}, ['hr', 'steps']],
    ['a missing filter matches all', undefined, ['hr', 'steps']],
    ['a null filter matches all', null, ['hr', 'steps']],
    ['a path that does not exist matches none', { 'period.weeks': 1 }, []],
    ['a top-level key that does not exist matches none', { unit: 'count' }, []],
    ['a path through a scalar matches none', { 'metric.name': 'steps' }, []],
    ['every entry must hold (one holds, one does not): none', { metric: 'steps', 'period.days': 8 }, []],
    ['every entry holds: that extract only', { metric: 'heartRate', 'period.days': '7' }, ['hr']],
  ];
  for (const [name, filter, expected] of cases) {
    for (const ep of ENDPOINTS) {
      it(`${ep.name}: ${name}`, async () => {
        const body: Record<string, unknown> = ep.body('E-02');
        if (filter === undefined) delete body['DataExtractsOptionsValuesFilter'];
        else body['DataExtractsOptionsValuesFilter'] = filter;
        expect(flagged(await t.provider.post(ep.path, body))).toEqual(expected);
      });
    }
  }
});

// ---------------------------------------------------------------------------------------------------------

describe('D10: a change notification is never answered with the old data', () => {
  // D10: the notified entries are invalidated before the notification is answered; others stay cached.
  let p: FakeProvider;
  let t: DataTenant;
  beforeAll(async () => {
    ({ p, t } = await setup(4));
  });

  // P32: a notification's points are validated, not stored: the entry is flagged and re-fetched.
  it('right after creationOrUpdate the notified subject shows the new values; another subject stays cached', async () => {
    const first = await read(t.api, 'steps', 2);
    expect(valuesOf(first.points['E-01'])).toEqual(valuesAt(0));
    expect(valuesOf(first.points['E-02'])).toEqual(valuesAt(0));

    p.version = 1;
    const mark = p.fetches('steps').length;
    const res = await t.provider.post(CHANGE, {
      SubjectIdentifier: 'E-01',
      DataExtractsOptionsValuesFilter: { metric: 'steps' },
      NewOrUpdatedDataPoints: [point('E-01-1', 'E-01', 6)],
    });
    expect(res.body).toEqual({ FlaggedDataExtractKeys: ['steps'] });

    // No waiting: the very next read.
    const next = await read(t.api, 'steps', 2);
    expect(valuesOf(next.points['E-01'])).toEqual(valuesAt(1));
    expect(next.points['E-01']!.map((x) => x.label)).toEqual(['steps v1', 'steps v1', 'steps v1']);
    expect(next.extensions?.staleData).toBeUndefined();
    // E-02 was not notified: still the cached (old) values, and the provider was not asked for it.
    expect(valuesOf(next.points['E-02'])).toEqual(valuesAt(0));
    expect(fetchedSince(p, 'steps', mark)).toContain('E-01');
    expect(fetchedSince(p, 'steps', mark)).not.toContain('E-02');

    // And it stays so once the background re-fetch has settled.
    await settled(t, p, [['steps', 2]]);
    const later = await read(t.api, 'steps', 2);
    expect(valuesOf(later.points['E-01'])).toEqual(valuesAt(1));
    expect(valuesOf(later.points['E-02'])).toEqual(valuesAt(0));
    expect(fetchedSince(p, 'steps', mark)).not.toContain('E-02');
  });

  it("the notified subject's other extracts not matching the filter stay cached", async () => {
    await read(t.api, 'hr', 3);
    const hr = p.fetches('hr').length;
    p.version = 2;
    const res = await t.provider.post(CHANGE, changeBody('E-03', { DataExtractsOptionsValuesFilter: { metric: 'steps' } }));
    expect(res.body).toEqual({ FlaggedDataExtractKeys: ['steps'] });
    const next = await read(t.api, 'hr', 3);
    // hr was fetched at version 1 (set by the test above) and is not flagged.
    expect(valuesOf(next.points['E-03'])).toEqual(valuesAt(1));
    expect(p.fetches('hr').length).toBe(hr);
    const steps = await read(t.api, 'steps', 3);
    expect(valuesOf(steps.points['E-03'])).toEqual(valuesAt(2));
  });

  // D10: the fetch begun before the notification may hold old data: it must not be stored as fresh.
  it('a notification while a fetch of that subject is in flight: the next read does not get the in-flight answer', async () => {
    // E-04 is not cached. Its fetch takes two pages; the second one is held until the notification is in.
    await settled(t, p, [
      ['steps', 3],
      ['hr', 3],
    ]);
    const mark = p.calls.length;
    p.faults = [{ delayMs: 0 }, { delayMs: 500 }];
    const pending = readOne(t, 'steps', 'E-04');
    await eventually(() => p.calls.length >= mark + 2);
    expect(p.calls[mark]!.body.SubjectIdentifiers).toEqual(['E-04']);
    // The first page was answered at version 2; from now on the provider answers version 3.
    p.version = 3;
    const res = await t.provider.post(CHANGE, changeBody('E-04', { DataExtractsOptionsValuesFilter: { metric: 'steps' } }));
    expect(res.body).toEqual({ FlaggedDataExtractKeys: ['steps'] });
    expect(valuesOf(await readOne(t, 'steps', 'E-04'))).toEqual(valuesAt(3));
    await pending; // asked before the notification: whatever it got, it must not have been kept as fresh
    expect(valuesOf(await readOne(t, 'steps', 'E-04'))).toEqual(valuesAt(3));
    expect(p.faults).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('D10: removal', () => {
  // D10: removed ids leave the cache at once and stay out while a lagging provider still returns them,
  // until the provider reports them created again.
  let p: FakeProvider;
  let t: DataTenant;
  beforeAll(async () => {
    ({ p, t } = await setup(3));
  });

  it('a removed id leaves at once, stays gone while the provider lags, and comes back when re-created', async () => {
    expect(idsOf((await read(t.api, 'steps', 1)).points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
    expect(p.hidden.size).toBe(0); // the provider is lagging: it still returns E-01-2 throughout

    const removed = await t.provider.post(REMOVAL, { SubjectIdentifier: 'E-01', RemovedDataPointIdentifiers: ['E-01-2'] });
    expect(flagged(removed)).toEqual(['hr', 'steps']);
    expect(idsOf((await read(t.api, 'steps', 1)).points['E-01'])).toEqual(['E-01-1', 'E-01-3']);

    // A refresh re-fetches in the background; the provider still returns E-01-2, the cache still hides it.
    const mark = p.fetches('steps').length;
    const refreshed = await t.api.post(refreshPath('steps'));
    expect(refreshed.status, JSON.stringify(refreshed.body)).toBe(200);
    expect(refreshed.body).toEqual({ DataExtractKey: 'steps', FlaggedEntries: 1 });
    await eventually(() => p.fetches('steps').length > mark);
    // Until a read is served from the cache (the re-fetched answer is stored), every read hides E-01-2.
    await eventually(async () => {
      const n = p.calls.length;
      expect(idsOf((await read(t.api, 'steps', 1)).points['E-01'])).toEqual(['E-01-1', 'E-01-3']);
      return p.calls.length === n;
    });
    expect(idsOf((await read(t.api, 'steps', 1)).points['E-01'])).toEqual(['E-01-1', 'E-01-3']);

    // The provider reports E-01-2 created again: the next read shows it.
    const recreated = await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', NewOrUpdatedDataPoints: [point('E-01-2', 'E-01', 40)] });
    expect(flagged(recreated)).toEqual(['hr', 'steps']);
    expect(idsOf((await read(t.api, 'steps', 1)).points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
  });

  it("a removal restricted by the filter leaves the other extract's point in place", async () => {
    await read(t.api, 'steps', 2);
    await read(t.api, 'hr', 2);
    const res = await t.provider.post(REMOVAL, {
      SubjectIdentifier: 'E-02',
      DataExtractsOptionsValuesFilter: { metric: 'heartRate' },
      RemovedDataPointIdentifiers: ['E-02-1'],
    });
    expect(res.body).toEqual({ FlaggedDataExtractKeys: ['hr'] });
    expect(idsOf((await read(t.api, 'hr', 2)).points['E-02'])).toEqual(['E-02-2', 'E-02-3']);
    expect(idsOf((await read(t.api, 'steps', 2)).points['E-02'])).toEqual(['E-02-1', 'E-02-2', 'E-02-3']);
  });

  it('a removal for a subject nothing is cached for yet still hides the id on its first read', async () => {
    const res = await t.provider.post(REMOVAL, {
      SubjectIdentifier: 'E-03',
      DataExtractsOptionsValuesFilter: { metric: 'steps' },
      RemovedDataPointIdentifiers: ['E-03-3'],
    });
    expect(res.body).toEqual({ FlaggedDataExtractKeys: ['steps'] });
    const r = await read(t.api, 'steps', 3);
    expect(idsOf(r.points['E-03'])).toEqual(['E-03-1', 'E-03-2']);
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('D10: refresh data set', () => {
  // D10: every cached entry of the extract is flagged and re-fetched in the background (D4: Refresh:DataSet).
  let p: FakeProvider;
  let t: DataTenant;
  const REFRESH = `mutation($input: RefreshDataSetInput!) { refreshDataSet(input: $input) { dataExtractKey flaggedEntries } }`;
  beforeAll(async () => {
    ({ p, t } = await setup(5));
  });

  it('an unknown extract key: 404 (REST) and NOT_FOUND (GraphQL)', async () => {
    expectProblem(await t.api.post(refreshPath('nope')), 404);
    expectProblem(await t.api.post(refreshPath('STEPS')), 404); // keys are case-sensitive (D2)
    const g = await t.api.gql(REFRESH, { input: { dataExtractKey: 'nope' } });
    gqlErrorAt(g, ['refreshDataSet'], 'NOT_FOUND');
    expect(g.body.data?.refreshDataSet ?? null).toBeNull();
  });

  it('a client without Refresh:DataSet: 403 (REST) and FORBIDDEN (GraphQL)', async () => {
    const reader = await t.tenant.client(READER);
    expectProblem(await reader.post(refreshPath('steps')), 403);
    gqlErrorAt(await reader.gql(REFRESH, { input: { dataExtractKey: 'steps' } }), ['refreshDataSet'], 'FORBIDDEN');
    // An inbound provider client holds no permissions either.
    expectProblem(await (await t.tenant.client(PROVIDER_2)).post(refreshPath('steps')), 403);
  });

  it('flags every cached entry of the extract (3), re-fetches them in the background, and later reads show new values', async () => {
    const first = await read(t.api, 'steps', 3);
    expect(valuesOf(first.points['E-01'])).toEqual(valuesAt(0));
    // Entries of another extract are not counted.
    await read(t.api, 'hr', 5);

    p.version = 1;
    const mark = p.fetches('steps').length;
    const hr = p.fetches('hr').length;
    const res = await t.api.post(refreshPath('steps'));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({ DataExtractKey: 'steps', FlaggedEntries: 3 });

    await eventually(() => sorted(fetchedSince(p, 'steps', mark)).join() === 'E-01,E-02,E-03');
    expect(fetchedSince(p, 'steps', mark)).toHaveLength(3);
    const later = await read(t.api, 'steps', 3);
    for (const e of ['E-01', 'E-02', 'E-03']) expect(valuesOf(later.points[e]), e).toEqual(valuesAt(1));
    expect(later.extensions?.staleData).toBeUndefined();
    // hr was not refreshed: cached at version 0, not fetched again.
    const hrLater = await read(t.api, 'hr', 5);
    for (const e of ['E-01', 'E-02', 'E-03', 'E-04', 'E-05']) expect(valuesOf(hrLater.points[e]), e).toEqual(valuesAt(0));
    expect(p.fetches('hr').length).toBe(hr);
  });

  it('REST and GraphQL answer alike', async () => {
    for (const [key, n] of [
      ['steps', 3],
      ['hr', 5],
    ] as const) {
      const rest = await t.api.post(refreshPath(key));
      expect(rest.status).toBe(200);
      const gql = await t.api.gql(REFRESH, { input: { dataExtractKey: key } });
      expect(gql.body.errors).toBeUndefined();
      expect(rest.body).toEqual({ DataExtractKey: key, FlaggedEntries: n });
      expect(gql.body.data.refreshDataSet).toEqual({ dataExtractKey: rest.body.DataExtractKey, flaggedEntries: rest.body.FlaggedEntries });
    }
  });

  // D10: as for a change notification, an answer begun before the refresh is not kept as fresh after it.
  it('a refresh while a first fetch is in flight: a later read does not get the answer begun before the refresh', async () => {
    // E-05's steps are not cached; its fetch takes two pages and the second is held until the refresh is in.
    await settled(t, p, [
      ['steps', 3],
      ['hr', 5],
    ]);
    const mark = p.calls.length;
    p.faults = [{ delayMs: 0 }, { delayMs: 500 }];
    const pending = readOne(t, 'steps', 'E-05');
    await eventually(() => p.calls.length >= mark + 2);
    expect(p.calls[mark]!.body.SubjectIdentifiers).toEqual(['E-05']);
    p.version = 7; // bumped before the refresh, as above
    expect((await t.api.post(refreshPath('steps'))).status).toBe(200);
    await pending; // begun before the refresh (its first page is of the old version): not kept as fresh
    expect(valuesOf(await readOne(t, 'steps', 'E-05'))).toEqual(valuesAt(7));
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('P37: a tenant file that changes an extract', () => {
  // P100: the tenant apply flags the extract through the one invalidate, as a change report does.
  it('invalidates through the one invalidate: this instance re-fetches the cached sets at once, with the new options', async () => {
    const { p, t } = await setup(2);
    await read(t.api, 'steps', 2);
    const mark = p.fetches('steps').length;
    const options = { metric: 'steps', period: { days: 28 } };
    await applyTenantFile(
      app.handle.db,
      new SecretBox(app.handle.db, undefined),
      {
        tenants: [
          tenantConfig({
            key: t.tenant.key,
            dataSources: [{ ...providerDataSource(p), inboundClientIds: ['provider', 'provider-2'] }],
            dataExtracts: [{ key: 'steps', name: 'Steps per day', dataSourceKey: 'wearables', options }],
          }),
        ],
      },
      { listen: app.handle.listen },
    );
    // No request reads it: the instance heard the invalidation and its sweep fetched the flagged sets
    // (before, they waited for a read or the 30 s sweep).
    const since = () => p.fetches('steps').slice(mark);
    await eventually(() => since().flatMap((c) => c.body.SubjectIdentifiers).length >= 2);
    for (const c of since()) expect(c.body.DataExtract).toEqual({ Key: 'steps', Options: options });
  });
});

describe('data extract management over GraphQL', () => {
  // D4: Create:DataExtract, Edit:DataExtract, View:DataExtract. D10: new options drop the extract's cache.
  let p: FakeProvider;
  let t: DataTenant;
  const CREATE = `mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key name options dataSource { key } } } }`;
  const UPDATE = `mutation($input: UpdateDataExtractInput!) { updateDataExtract(input: $input) { dataExtract { key name options dataSource { key } } } }`;
  const COUNT = `{ dataExtracts { totalCount edges { node { key } } } }`;
  beforeAll(async () => {
    ({ p, t } = await setup(2));
  });

  const extractCount = async () => {
    const r = await t.api.gql(COUNT);
    expect(r.body.errors).toBeUndefined();
    return r.body.data.dataExtracts.totalCount as number;
  };

  it('an unknown dataSourceKey: BAD_REQUEST naming dataSourceKey; nothing is created', async () => {
    const r = await t.api.gql(CREATE, { input: { key: 'x-1', name: 'X', dataSourceKey: 'nope', options: {} } });
    const e = gqlErrorAt(r, ['createDataExtract'], 'BAD_REQUEST');
    expect(Object.keys(e.extensions?.['errors'] ?? {})).toContain('dataSourceKey');
    expect(r.body.data?.createDataExtract ?? null).toBeNull();
    expect(await extractCount()).toBe(2);
  });

  for (const options of [[1, 2], 'metric=steps', 5, true]) {
    it(`options ${JSON.stringify(options)} (not an object): BAD_REQUEST naming options`, async () => {
      const r = await t.api.gql(CREATE, { input: { key: 'x-2', name: 'X', dataSourceKey: 'wearables', options } });
      const e = gqlErrorAt(r, ['createDataExtract'], 'BAD_REQUEST');
      expect(Object.keys(e.extensions?.['errors'] ?? {})).toContain('options');
      expect(await extractCount()).toBe(2);
    });
  }

  it('an existing key: CONFLICT, the existing extract unchanged', async () => {
    const r = await t.api.gql(CREATE, { input: { key: 'steps', name: 'Other', dataSourceKey: 'wearables', options: { metric: 'other' } } });
    gqlErrorAt(r, ['createDataExtract'], 'CONFLICT');
    const x = await t.api.gql(`{ dataExtract(key: "steps") { name options } }`);
    expect(x.body.data.dataExtract).toEqual({ name: 'Steps per day', options: { metric: 'steps', period: { days: 7 } } });
  });

  it('a created extract is readable through dataExtract(key) and dataExtracts, and serves data points', async () => {
    const options = { metric: 'sleep', period: { days: 7 }, granularity: 'night' };
    const r = await t.api.gql(CREATE, { input: { key: 'sleep', name: 'Sleep', dataSourceKey: 'wearables', options } });
    expect(r.body).toEqual({
      data: { createDataExtract: { dataExtract: { key: 'sleep', name: 'Sleep', options, dataSource: { key: 'wearables' } } } },
    });

    const one = await t.api.gql(`{ dataExtract(key: "sleep") { key name options dataSource { key subjectIdentifier } } }`);
    expect(one.body).toEqual({
      data: { dataExtract: { key: 'sleep', name: 'Sleep', options, dataSource: { key: 'wearables', subjectIdentifier: 'ExternalId' } } },
    });
    const all = await t.api.gql(COUNT);
    expect(all.body.data.dataExtracts.totalCount).toBe(3);
    expect(all.body.data.dataExtracts.edges.map((e: any) => e.node.key)).toEqual(['hr', 'sleep', 'steps']);

    const mark = p.fetches('sleep').length;
    expect(idsOf((await read(t.api, 'sleep', 1)).points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
    expect(
      p
        .fetches('sleep')
        .slice(mark)
        .map((c) => c.body.DataExtract.Options),
    ).toEqual([options]);
    // A change notification matches it like the extracts from the tenant file.
    expect(
      flagged(await t.provider.post(CHANGE, changeBody('E-01', { DataExtractsOptionsValuesFilter: { granularity: 'night' } }))),
    ).toEqual(['sleep']);
  });

  it('updating an unknown key: NOT_FOUND', async () => {
    const r = await t.api.gql(UPDATE, { input: { key: 'nope', name: 'Nope' } });
    gqlErrorAt(r, ['updateDataExtract'], 'NOT_FOUND');
    expect(r.body.data?.updateDataExtract ?? null).toBeNull();
  });

  it('updating options flags the cache (P37): the next read fetches again with the new Options', async () => {
    await read(t.api, 'steps', 1);
    const mark = p.fetches('steps').length;
    await read(t.api, 'steps', 1);
    expect(p.fetches('steps').length).toBe(mark); // cached

    // A new name alone keeps the cached data.
    const renamed = await t.api.gql(UPDATE, { input: { key: 'steps', name: 'Daily steps' } });
    expect(renamed.body.errors).toBeUndefined();
    expect(renamed.body.data.updateDataExtract.dataExtract).toEqual({
      key: 'steps',
      name: 'Daily steps',
      options: { metric: 'steps', period: { days: 7 } },
      dataSource: { key: 'wearables' },
    });
    await read(t.api, 'steps', 1);
    expect(p.fetches('steps').length).toBe(mark);

    const options = { metric: 'steps', period: { days: 14 } };
    const updated = await t.api.gql(UPDATE, { input: { key: 'steps', options } });
    expect(updated.body.errors).toBeUndefined();
    expect(updated.body.data.updateDataExtract.dataExtract).toEqual({
      key: 'steps',
      name: 'Daily steps',
      options,
      dataSource: { key: 'wearables' },
    });

    await read(t.api, 'steps', 1);
    const calls = p.fetches('steps').slice(mark);
    // P37: flagged stale (never deleted, D3) and fetched again with the new options, by the read or in
    // the background; no call after the update carries the old options.
    expect(calls.flatMap((c) => c.body.SubjectIdentifiers)).toContain('E-01');
    for (const c of calls) expect(c.body.DataExtract).toEqual({ Key: 'steps', Options: options });
    // The filter now sees the new options.
    expect(flagged(await t.provider.post(CHANGE, changeBody('E-02', { DataExtractsOptionsValuesFilter: { 'period.days': 14 } })))).toEqual([
      'steps',
    ]);
  });

  // D10: an answer to the old options is not an answer to the new ones, even when it arrives after the update.
  it('updating options while a fetch is in flight: the in-flight answer (for the old options) is not kept', async () => {
    // E-02's hr is not cached; its fetch (old options) is held on its second page.
    await settled(t, p, [
      ['steps', 1],
      ['sleep', 1],
    ]);
    const mark = p.calls.length;
    p.faults = [{ delayMs: 0 }, { delayMs: 500 }];
    const pending = readOne(t, 'hr', 'E-02');
    await eventually(() => p.calls.length >= mark + 2);
    expect(p.calls[mark]!.body.DataExtract).toEqual({ Key: 'hr', Options: { metric: 'heartRate', period: { days: 7 } } });
    const options = { metric: 'heartRate', period: { days: 1 } };
    const updated = await t.api.gql(UPDATE, { input: { key: 'hr', options } });
    expect(updated.body.errors).toBeUndefined();
    await pending;
    const after = p.calls.length;
    await readOne(t, 'hr', 'E-02');
    const calls = p.fetches('hr').filter((c) => p.calls.indexOf(c) >= after);
    expect(
      calls.map((c) => c.body.DataExtract),
      'the next read asks the provider with the new options',
    ).toEqual([{ Key: 'hr', Options: options }]);
  });

  it('reader: FORBIDDEN on createDataExtract and updateDataExtract; nothing changes', async () => {
    const reader = await t.tenant.client(READER);
    const c = await reader.gql(CREATE, { input: { key: 'by-reader', name: 'R', dataSourceKey: 'wearables', options: {} } });
    gqlErrorAt(c, ['createDataExtract'], 'FORBIDDEN');
    const u = await reader.gql(UPDATE, { input: { key: 'hr', name: 'Renamed by reader' } });
    gqlErrorAt(u, ['updateDataExtract'], 'FORBIDDEN');
    const x = await t.api.gql(`{ dataExtract(key: "hr") { name } byReader: dataExtract(key: "by-reader") { name } }`);
    expect(x.body.data).toEqual({ dataExtract: { name: 'Heart rate' }, byReader: null });
  });

  it('reader: FORBIDDEN on dataExtracts and dataExtract (View:DataExtract) while other fields answer', async () => {
    const reader = await t.tenant.client(READER);
    const r = await reader.gql(`{ dataExtracts { totalCount } dataExtract(key: "steps") { key } subjects(first: 1) { totalCount } }`);
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ dataExtracts: null, dataExtract: null, subjects: { totalCount: 2 } });
    gqlErrorAt(r, ['dataExtracts'], 'FORBIDDEN');
    gqlErrorAt(r, ['dataExtract'], 'FORBIDDEN');
    expect(r.body.errors).toHaveLength(2);
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('D2: tenants are isolated', () => {
  // D2: another tenant's keys and subjects answer as if they did not exist (404), and nothing of theirs changes.
  let pA: FakeProvider;
  let a: DataTenant;
  let b: DataTenant;
  beforeAll(async () => {
    ({ p: pA, t: a } = await setup(2));
    // Tenant B has its own data source and inbound client, but no subjects.
    ({ t: b } = await setup(0));
    const r = await a.api.gql(
      `mutation { createDataExtract(input: { key: "a-only", name: "A only", dataSourceKey: "wearables", options: { metric: "aOnly" } }) { dataExtract { key } } }`,
    );
    expect(r.body.errors).toBeUndefined();
  });

  it("B cannot refresh A's extract (404 / NOT_FOUND), and A's cache is untouched", async () => {
    await read(a.api, 'a-only', 2);
    await read(a.api, 'steps', 2);
    const mark = pA.calls.length;
    expectProblem(await b.api.post(refreshPath('a-only')), 404);
    gqlErrorAt(
      await b.api.gql(`mutation { refreshDataSet(input: { dataExtractKey: "a-only" }) { flaggedEntries } }`),
      ['refreshDataSet'],
      'NOT_FOUND',
    );
    const seen = await b.api.gql(`{ dataExtract(key: "a-only") { key } dataExtracts { totalCount edges { node { key } } } }`);
    expect(seen.body.data).toEqual({
      dataExtract: null,
      dataExtracts: { totalCount: 2, edges: [{ node: { key: 'hr' } }, { node: { key: 'steps' } }] },
    });
    // B's own `steps` holds nothing cached: 0, whatever A has cached under the same key.
    expect((await b.api.post(refreshPath('steps'))).body).toEqual({ DataExtractKey: 'steps', FlaggedEntries: 0 });
    await sleep(300);
    await read(a.api, 'a-only', 2);
    await read(a.api, 'steps', 2);
    expect(pA.calls.length).toBe(mark);
  });

  it("B's inbound client reporting for A's subject identifier: 404 (B has no such subject); A's cache is untouched", async () => {
    const before = await read(a.api, 'steps', 1);
    expect(idsOf(before.points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
    const mark = pA.calls.length;
    expectProblem(await b.provider.post(CHANGE, changeBody('E-01')), 404);
    expectProblem(await b.provider.post(REMOVAL, removalBody('E-01', { RemovedDataPointIdentifiers: ['E-01-2'] })), 404);
    const b2 = await b.tenant.client(PROVIDER_2);
    expectProblem(await b2.post(REMOVAL, removalBody('E-01', { RemovedDataPointIdentifiers: ['E-01-2'] })), 404);
    const after = await read(a.api, 'steps', 1);
    expect(idsOf(after.points['E-01'])).toEqual(['E-01-1', 'E-01-2', 'E-01-3']);
    await sleep(300);
    expect(pA.calls.length).toBe(mark);
  });

  it('a tenant with no data source: its clients are inbound nowhere, 403', async () => {
    const c = await createTenant(app);
    const full = await c.client({ scope: 'ServiceDataProviderApi' });
    expectProblem(await full.post(CHANGE, changeBody('E-01')), 403);
    expectProblem(await full.post(REMOVAL, removalBody('E-01')), 403);
  });
});
