import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DataPoint,
  type GetDataPointsResponse,
  type ReferenceProvider,
  type ReferenceProviderOptions,
  type RunningProvider,
  createReferenceProvider,
} from '../src/provider/reference-provider.js';

// The reference provider over real HTTP on loopback: token endpoint, the get-data-points contract
// (request shape, data types, paging, ordering) and the admin operations a demo relies on.

const ANCHOR = '2026-11-20';
const started: RunningProvider[] = [];

async function start(opts: ReferenceProviderOptions = {}): Promise<{ provider: ReferenceProvider; url: string }> {
  const provider = createReferenceProvider({ anchorDate: ANCHOR, ...opts });
  const running = await provider.listen(0);
  started.push(running);
  return { provider, url: running.url };
}

afterAll(async () => {
  await Promise.all(started.map((r) => r.close()));
});

async function tokenRequest(url: string, form: Record<string, string>, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}/connect/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(form).toString(),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

async function token(url: string): Promise<string> {
  const r = await tokenRequest(url, { grant_type: 'client_credentials', client_id: 'service', client_secret: 'provider-secret' });
  expect(r.status).toBe(200);
  return r.body['access_token'] as string;
}

interface Paging {
  After: string | null;
  Before: string | null;
  First: number | null;
  Last: number | null;
  OrderBy: string | null;
  OrderDirection: 'Ascending' | 'Descending' | null;
}
const NO_PAGING: Paging = { After: null, Before: null, First: null, Last: null, OrderBy: null, OrderDirection: null };

function request(subjects: string[], paging: Partial<Paging> = {}, options: Record<string, unknown> = {}) {
  return { SubjectIdentifiers: subjects, PagingRequest: { ...NO_PAGING, ...paging }, DataExtract: { Key: 'steps-week', Options: options } };
}

async function post(url: string, bearer: string | undefined, body: unknown) {
  const res = await fetch(`${url}/get-data-points`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

async function page(url: string, bearer: string, body: unknown): Promise<GetDataPointsResponse> {
  const r = await post(url, bearer, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as unknown as GetDataPointsResponse;
}

/** Follows EndCursor (forwards) or StartCursor (backwards, with Last) until the end; returns the nodes in order. */
async function walk(url: string, bearer: string, subjects: string[], paging: Partial<Paging>, options = {}, backwards = false) {
  const nodes: DataPoint[] = [];
  const totals = new Set<number>();
  let cursor: string | null = null;
  for (let i = 0; i < 100; i++) {
    const p = await page(url, bearer, request(subjects, { ...paging, ...(backwards ? { Before: cursor } : { After: cursor }) }, options));
    totals.add(p.PageInfo.TotalCount);
    const got = p.Edges.map((e) => e.Node);
    if (backwards) nodes.unshift(...got);
    else nodes.push(...got);
    const more = backwards ? p.PageInfo.HasPreviousPage : p.PageInfo.HasNextPage;
    if (!more) return { nodes, totals: [...totals], pages: i + 1 };
    cursor = backwards ? p.PageInfo.StartCursor : p.PageInfo.EndCursor;
    expect(cursor).not.toBeNull();
  }
  throw new Error('paging did not end');
}

const item = (p: DataPoint, key: string) => p.DataPointItems.find((i) => i.Key === key)?.Value.Value;

describe('token endpoint', () => {
  let url: string;
  beforeAll(async () => {
    ({ url } = await start());
  });

  it('issues a bearer token to form-posted credentials', async () => {
    const r = await tokenRequest(url, {
      grant_type: 'client_credentials',
      client_id: 'service',
      client_secret: 'provider-secret',
      scope: 'DataProviderApi',
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('no-store');
    expect(r.body).toMatchObject({ token_type: 'Bearer', expires_in: 3600, scope: 'DataProviderApi' });
    expect(r.body['access_token']).toMatch(/^[A-Za-z0-9_-]{40,}$/);
  });

  it('accepts HTTP Basic client authentication', async () => {
    const basic = Buffer.from('service:provider-secret').toString('base64');
    const r = await tokenRequest(url, { grant_type: 'client_credentials' }, { authorization: `Basic ${basic}` });
    expect(r.status).toBe(200);
    const other = await tokenRequest(url, { grant_type: 'client_credentials' }, { authorization: `Basic ${basic}` });
    expect(other.body['access_token']).not.toBe(r.body['access_token']);
  });

  it('rejects a wrong secret with 401 invalid_client', async () => {
    const r = await tokenRequest(url, { grant_type: 'client_credentials', client_id: 'service', client_secret: 'provider-secreT' });
    expect(r.status).toBe(401);
    expect(r.body['error']).toBe('invalid_client');
    const basic = Buffer.from('service:nope').toString('base64');
    expect((await tokenRequest(url, { grant_type: 'client_credentials' }, { authorization: `Basic ${basic}` })).status).toBe(401);
    expect(
      (await tokenRequest(url, { grant_type: 'client_credentials', client_id: 'other', client_secret: 'provider-secret' })).status,
    ).toBe(401);
  });

  it('answers RFC 6749 errors for a missing or unsupported grant type', async () => {
    const missing = await tokenRequest(url, { client_id: 'service', client_secret: 'provider-secret' });
    expect(missing.status).toBe(400);
    expect(missing.body['error']).toBe('invalid_request');
    expect(typeof missing.body['error_description']).toBe('string');
    const unsupported = await tokenRequest(url, { grant_type: 'password', client_id: 'service', client_secret: 'provider-secret' });
    expect(unsupported.status).toBe(400);
    expect(unsupported.body['error']).toBe('unsupported_grant_type');
  });

  it('uses the configured client credentials', async () => {
    const { url: other } = await start({ clientId: 'svc', clientSecret: 's3cret', tokenTtlSeconds: 60 });
    expect(
      (await tokenRequest(other, { grant_type: 'client_credentials', client_id: 'service', client_secret: 'provider-secret' })).status,
    ).toBe(401);
    const r = await tokenRequest(other, { grant_type: 'client_credentials', client_id: 'svc', client_secret: 's3cret' });
    expect(r.status).toBe(200);
    expect(r.body['expires_in']).toBe(60);
  });
});

describe('get data points: authentication and request shape', () => {
  let url: string;
  let bearer: string;
  beforeAll(async () => {
    ({ url } = await start());
    bearer = await token(url);
  });

  it('answers 401 with WWW-Authenticate: Bearer without a valid token', async () => {
    const none = await post(url, undefined, request(['E-1']));
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Bearer\b/);
    const bad = await post(url, 'not-a-token', request(['E-1']));
    expect(bad.status).toBe(401);
    expect(bad.headers.get('www-authenticate')).toMatch(/^Bearer\b.*invalid_token/);
    const { url: other } = await start();
    expect((await post(other, bearer, request(['E-1']))).status).toBe(401); // a token of another provider instance
    expect((await post(url, bearer, request(['E-1']))).status).toBe(200);
  });

  it('rejects an expired token', async () => {
    const { url: short } = await start({ tokenTtlSeconds: 1 });
    const t = await token(short);
    expect((await post(short, t, request(['E-1']))).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1100));
    expect((await post(short, t, request(['E-1']))).status).toBe(401);
  });

  it('requires every PagingRequest property, even the nullable ones', async () => {
    for (const name of ['After', 'Before', 'First', 'Last', 'OrderBy', 'OrderDirection'] as const) {
      const body = request(['E-1']);
      delete (body.PagingRequest as Partial<Paging>)[name];
      const r = await post(url, bearer, body);
      expect(r.status, name).toBe(400);
      expect(Object.keys(r.body['errors'] as object), name).toEqual([`PagingRequest.${name}`]);
      expect(typeof r.body['title']).toBe('string');
    }
  });

  it('requires every top-level and DataExtract property', async () => {
    for (const name of ['SubjectIdentifiers', 'PagingRequest', 'DataExtract'] as const) {
      const body: Record<string, unknown> = request(['E-1']);
      delete body[name];
      const r = await post(url, bearer, body);
      expect(r.status, name).toBe(400);
      expect(Object.keys(r.body['errors'] as object)).toEqual([name]);
    }
    const noOptions = await post(url, bearer, { ...request(['E-1']), DataExtract: { Key: 'k' } });
    expect(Object.keys(noOptions.body['errors'] as object)).toEqual(['DataExtract.Options']);
    const noKey = await post(url, bearer, { ...request(['E-1']), DataExtract: { Options: {} } });
    expect(Object.keys(noKey.body['errors'] as object)).toEqual(['DataExtract.Key']);
  });

  it('validates types, bounds and combinations', async () => {
    const cases: [unknown, string][] = [
      [{ ...request(['E-1']), SubjectIdentifiers: ['ok', 7] }, 'SubjectIdentifiers[1]'],
      [request(['E-1'], { First: 1.5 }), 'PagingRequest.First'],
      [request(['E-1'], { First: 1001 }), 'PagingRequest.First'],
      [request(['E-1'], { Last: -1 }), 'PagingRequest.Last'],
      [request(['E-1'], { First: 2, Last: 2 }), 'PagingRequest.Last'],
      [request(['E-1'], { OrderDirection: 'Up' as never }), 'PagingRequest.OrderDirection'],
      [request(['E-1'], { OrderBy: 'nope' }), 'PagingRequest.OrderBy'],
      [request(['E-1'], {}, { metric: 'weight' }), 'DataExtract.Options.metric'],
      [request(['E-1'], {}, { period: { days: 0 } }), 'DataExtract.Options.period.days'],
      [request(['E-1'], {}, { period: { days: 367 } }), 'DataExtract.Options.period.days'],
    ];
    for (const [body, path] of cases) {
      const r = await post(url, bearer, body);
      expect(r.status, path).toBe(400);
      expect(Object.keys(r.body['errors'] as object), path).toEqual([path]);
    }
    expect((await post(url, bearer, request(['E-1'], { First: 1000 }))).status).toBe(200);
  });

  it('rejects cursors that are not this provider\u2019s or not of this ordering', async () => {
    const p = await page(url, bearer, request(['E-1'], { First: 2 }));
    const cursor = p.PageInfo.EndCursor!;
    expect((await post(url, bearer, request(['E-1'], { After: cursor }))).status).toBe(200);
    for (const paging of [
      { After: cursor, OrderBy: 'value' },
      { After: cursor, OrderDirection: 'Descending' as const },
      { Before: cursor, OrderBy: 'date' },
      { After: 'garbage' },
      { After: Buffer.from(JSON.stringify(['other', 'Id', 'Ascending', null, 'x'])).toString('base64url') },
    ]) {
      const r = await post(url, bearer, request(['E-1'], paging));
      expect(r.status, JSON.stringify(paging)).toBe(400);
      expect(Object.keys(r.body['errors'] as object)[0]).toMatch(/^PagingRequest\.(After|Before)$/);
    }
  });
});

describe('get data points: data', () => {
  let url: string;
  let provider: ReferenceProvider;
  let bearer: string;
  beforeAll(async () => {
    ({ url, provider } = await start());
    bearer = await token(url);
  });

  const REPRESENTATION: Record<string, (v: unknown) => boolean> = {
    String: (v) => typeof v === 'string',
    Decimal: (v) => typeof v === 'number' && Number.isFinite(v),
    Integer: (v) => Number.isInteger(v) && (v as number) >= -(2 ** 31) && (v as number) < 2 ** 31,
    DateTime: (v) => typeof v === 'string' && new Date(v).toISOString() === v,
    Date: (v) => typeof v === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(v) && new Date(`${v}T00:00:00Z`).toISOString().startsWith(v),
    Time: (v) => typeof v === 'string' && /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d$/.test(v),
    Boolean: (v) => typeof v === 'boolean',
  };

  it('covers every data type, each Value in its type\u2019s representation', async () => {
    for (const metric of ['steps', 'heartRate', 'sleep']) {
      const p = await page(url, bearer, request(['E-1001', 'E-1002'], {}, { metric, period: { days: 25 } }));
      let nulls = 0;
      for (const { Node } of p.Edges) {
        const types = new Set<string>();
        for (const { Key, Value } of Node.DataPointItems) {
          types.add(Value.DataType);
          if (Value.Value === null) nulls++;
          else expect(REPRESENTATION[Value.DataType]?.(Value.Value), `${metric} ${Key} ${JSON.stringify(Value)}`).toBe(true);
        }
        expect([...types].sort(), Node.Id).toEqual(Object.keys(REPRESENTATION).sort());
      }
      expect(nulls, metric).toBeGreaterThan(0);
      expect(nulls, metric).toBeLessThan(p.Edges.length); // note is null on most days, not all
    }
  });

  it('gives one point per subject and day with unique ids, ending at the anchor date', async () => {
    const p = await page(url, bearer, request(['E-1001', 'E-1002', 'E-1001'], {}, { metric: 'sleep', period: { days: 3 } }));
    expect(p.PageInfo.TotalCount).toBe(6);
    expect(p.Edges.map((e) => e.Node.Id)).toEqual([
      'E-1001:sleep:2026-11-18',
      'E-1001:sleep:2026-11-19',
      'E-1001:sleep:2026-11-20',
      'E-1002:sleep:2026-11-18',
      'E-1002:sleep:2026-11-19',
      'E-1002:sleep:2026-11-20',
    ]);
    for (const { Node } of p.Edges) {
      expect(Node.Id.startsWith(`${Node.SubjectIdentifier}:`)).toBe(true);
      expect(item(Node, 'date')).toBe(Node.Id.slice(-10));
      expect(item(Node, 'unit')).toBe('h');
      expect(Node.DataPointItems.map((i) => i.Key)).toEqual([
        'date',
        'recordedAt',
        'wakeTime',
        'value',
        'awakenings',
        'goalMet',
        'unit',
        'note',
      ]);
    }
  });

  it('honours metric and period.days, defaulting to steps over 7 days', async () => {
    const dflt = await page(url, bearer, request(['E-1']));
    expect(dflt.PageInfo.TotalCount).toBe(7);
    expect(dflt.Edges.every((e) => e.Node.Id.includes(':steps:') && item(e.Node, 'unit') === 'steps')).toBe(true);
    expect(dflt.Edges.every((e) => Number.isInteger(item(e.Node, 'value')))).toBe(true);
    expect(dflt.Edges[0]!.Node.Id).toBe('E-1:steps:2026-11-14');
    const hr = await page(url, bearer, request(['E-1'], {}, { metric: 'heartRate', period: { days: 2 } }));
    expect(hr.Edges.map((e) => e.Node.Id)).toEqual(['E-1:heartRate:2026-11-19', 'E-1:heartRate:2026-11-20']);
    expect(hr.Edges.map((e) => item(e.Node, 'unit'))).toEqual(['bpm', 'bpm']);
    const year = await page(url, bearer, request(['E-1'], { First: 0 }, { period: { days: 366 } }));
    expect(year.PageInfo.TotalCount).toBe(366);
  });

  it('is deterministic: the same request gives the same answer, on any instance', async () => {
    const body = request(['E-1001', 'E-2002'], { First: 10, OrderBy: 'value' }, { metric: 'heartRate', period: { days: 9 } });
    const a = await post(url, bearer, body);
    const b = await post(url, bearer, body);
    expect(a.status).toBe(200);
    expect(b.body).toEqual(a.body);
    const { url: other } = await start();
    expect((await post(other, await token(other), body)).body).toEqual(a.body);
    const { url: otherDay } = await start({ anchorDate: '2026-11-21' });
    expect((await post(otherDay, await token(otherDay), body)).body).not.toEqual(a.body);
  });

  it('gives unknown subjects a series, and none to missing ones', async () => {
    const { url: u, provider: p } = await start({ missingSubjects: ['GONE'] });
    const t = await token(u);
    expect((await page(u, t, request(['whoever', 'GONE']))).PageInfo.TotalCount).toBe(7);
    p.setMissing('whoever');
    expect((await page(u, t, request(['whoever', 'GONE']))).PageInfo).toMatchObject({
      TotalCount: 0,
      StartCursor: null,
      EndCursor: null,
      HasNextPage: false,
    });
    p.setMissing('GONE', false);
    expect((await page(u, t, request(['whoever', 'GONE']))).PageInfo.TotalCount).toBe(7);
  });

  it('bumpRevision changes that subject\u2019s values only', async () => {
    const body = request(['B-1', 'B-2'], {}, { metric: 'sleep' });
    const before = await page(url, bearer, body);
    expect(provider.bumpRevision('B-1')).toBe(1);
    const after = await page(url, bearer, body);
    const values = (p: GetDataPointsResponse, s: string) =>
      p.Edges.filter((e) => e.Node.SubjectIdentifier === s).map((e) => item(e.Node, 'value'));
    expect(after.Edges.map((e) => e.Node.Id)).toEqual(before.Edges.map((e) => e.Node.Id));
    expect(values(after, 'B-1')).not.toEqual(values(before, 'B-1'));
    expect(values(after, 'B-2')).toEqual(values(before, 'B-2'));
    // Over HTTP as well.
    const res = await fetch(`${url}/admin/subjects/B-1/revision`, { method: 'POST' });
    expect(await res.json()).toEqual({ subjectIdentifier: 'B-1', revision: 2 });
    expect(values(await page(url, bearer, body), 'B-1')).not.toEqual(values(after, 'B-1'));
  });

  it('removePoints hides those ids from now on', async () => {
    const body = request(['R-1', 'R-2']);
    const all = (await page(url, bearer, body)).Edges.map((e) => e.Node.Id);
    expect(all).toHaveLength(14);
    expect(provider.removePoints('R-1', ['R-1:steps:2026-11-15', 'R-1:steps:2026-11-15'])).toEqual(['R-1:steps:2026-11-15']);
    const res = await fetch(`${url}/admin/subjects/R-1/remove`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ids: ['R-1:steps:2026-11-20'] }),
    });
    expect(await res.json()).toEqual({ removed: ['R-1:steps:2026-11-20'], neverServed: [] });
    const now = await page(url, bearer, body);
    expect(now.PageInfo.TotalCount).toBe(12);
    expect(now.Edges.map((e) => e.Node.Id)).toEqual(all.filter((id) => id !== 'R-1:steps:2026-11-15' && id !== 'R-1:steps:2026-11-20'));
    provider.bumpRevision('R-1');
    expect((await page(url, bearer, body)).PageInfo.TotalCount).toBe(12);
    const bad = await fetch(`${url}/admin/subjects/R-1/remove`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"ids":"x"}',
    });
    expect(bad.status).toBe(400);
  });

  it('names the removed ids no series of the subject could hold (another subject, metric, a bad or future date)', async () => {
    const res = await fetch(`${url}/admin/subjects/R-1/remove`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        ids: ['R-1:sleep:2026-11-02', 'R-2:steps:2026-11-02', 'R-1:weight:2026-11-02', 'R-1:steps:2026-02-30', 'R-1:steps:2999-01-01', 'x'],
      }),
    });
    expect(await res.json()).toEqual({
      removed: [
        'R-1:sleep:2026-11-02',
        'R-2:steps:2026-11-02',
        'R-1:weight:2026-11-02',
        'R-1:steps:2026-02-30',
        'R-1:steps:2999-01-01',
        'x',
      ],
      neverServed: ['R-2:steps:2026-11-02', 'R-1:weight:2026-11-02', 'R-1:steps:2026-02-30', 'R-1:steps:2999-01-01', 'x'],
    });
    // npm run provider:notify says so before it notifies the service (unreachable here: it then fails). P134
    const out = await new Promise<string>((resolve) =>
      execFile(
        process.execPath,
        [
          'dist/src/cli/provider-notify.js',
          '--subject',
          'R-1',
          '--remove',
          'R-1:steps:2999-01-01',
          '--provider',
          url,
          '--service',
          'http://127.0.0.1:9',
        ],
        (_e, stdout, stderr) => resolve(stdout + stderr),
      ),
    );
    expect(out).toContain("provider: note: 'R-1:steps:2999-01-01' is no data point the provider ever served for R-1");
    expect(out).toContain('cannot reach http://127.0.0.1:9');
  });

  it('counts calls in stats', async () => {
    const { url: u, provider: p } = await start();
    const t = await token(u);
    await tokenRequest(u, { grant_type: 'client_credentials' });
    await post(u, t, request(['S-1']));
    await post(u, t, request(['S-1']));
    expect(p.stats()).toEqual({ getDataPointsCalls: 2, tokenRequests: 2 });
    expect(await (await fetch(`${u}/admin/stats`)).json()).toEqual({ getDataPointsCalls: 2, tokenRequests: 2 });
  });
});

describe('get data points: paging and ordering', () => {
  const SUBJECTS = ['P-3', 'P-1', 'P-2'];
  const OPTIONS = { metric: 'steps', period: { days: 7 } };
  let url: string;
  let bearer: string;
  let expectedIds: string[];
  beforeAll(async () => {
    ({ url } = await start({ pageSize: 5 }));
    bearer = await token(url);
    expectedIds = SUBJECTS.flatMap((s) => Array.from({ length: 7 }, (_, i) => `${s}:steps:2026-11-${14 + i}`)).sort();
  });

  it('following EndCursor yields every point exactly once, in Id order, never more than pageSize per page', async () => {
    const first = await page(url, bearer, request(SUBJECTS, { First: 100 }, OPTIONS));
    expect(first.Edges).toHaveLength(5);
    expect(first.PageInfo).toMatchObject({ HasNextPage: true, HasPreviousPage: false, TotalCount: 21 });
    expect(first.PageInfo.StartCursor).toBe(first.Edges[0]!.Cursor);
    expect(first.PageInfo.EndCursor).toBe(first.Edges[4]!.Cursor);
    const { nodes, totals, pages } = await walk(url, bearer, SUBJECTS, {}, OPTIONS);
    expect(nodes.map((n) => n.Id)).toEqual(expectedIds);
    expect(new Set(nodes.map((n) => n.Id)).size).toBe(nodes.length);
    expect(totals).toEqual([nodes.length]);
    expect(pages).toBe(5);
    const small = await walk(url, bearer, SUBJECTS, { First: 2 }, OPTIONS);
    expect(small.nodes.map((n) => n.Id)).toEqual(expectedIds);
    expect(small.pages).toBe(11);
  });

  it('reports exact HasNextPage/HasPreviousPage and empty pages', async () => {
    const middle = await page(url, bearer, request(SUBJECTS, { First: 3 }, OPTIONS));
    const next = await page(url, bearer, request(SUBJECTS, { First: 3, After: middle.PageInfo.EndCursor }, OPTIONS));
    expect(next.PageInfo).toMatchObject({ HasNextPage: true, HasPreviousPage: true });
    const last = await page(url, bearer, request(SUBJECTS, { Last: 1 }, OPTIONS));
    const end = await page(url, bearer, request(SUBJECTS, { After: last.PageInfo.EndCursor }, OPTIONS));
    expect(end.Edges).toEqual([]);
    expect(end.PageInfo).toEqual({ HasNextPage: false, HasPreviousPage: true, StartCursor: null, EndCursor: null, TotalCount: 21 });
    const zero = await page(url, bearer, request(SUBJECTS, { First: 0 }, OPTIONS));
    expect(zero.PageInfo).toMatchObject({ HasNextPage: true, HasPreviousPage: false, StartCursor: null, TotalCount: 21 });
  });

  it('pages backwards with Last and Before', async () => {
    const lastPage = await page(url, bearer, request(SUBJECTS, { Last: 4 }, OPTIONS));
    expect(lastPage.Edges.map((e) => e.Node.Id)).toEqual(expectedIds.slice(-4));
    expect(lastPage.PageInfo).toMatchObject({ HasNextPage: false, HasPreviousPage: true });
    const { nodes, pages } = await walk(url, bearer, SUBJECTS, { Last: 4 }, OPTIONS, true);
    expect(nodes.map((n) => n.Id)).toEqual(expectedIds);
    expect(pages).toBe(6);
    // After and Before together bound a window.
    const all = await walk(url, bearer, SUBJECTS, {}, OPTIONS);
    const cursors = (await page(url, bearer, request(SUBJECTS, { First: 5 }, OPTIONS))).Edges.map((e) => e.Cursor);
    const window = await page(url, bearer, request(SUBJECTS, { After: cursors[0]!, Before: cursors[4]! }, OPTIONS));
    expect(window.Edges.map((e) => e.Node.Id)).toEqual(all.nodes.slice(1, 4).map((n) => n.Id));
    expect(window.PageInfo).toMatchObject({ HasNextPage: true, HasPreviousPage: true });
  });

  it('orders by an item key by its typed value; Descending is the exact reverse of Ascending', async () => {
    const asc = (await walk(url, bearer, SUBJECTS, { OrderBy: 'value', OrderDirection: 'Ascending' }, OPTIONS)).nodes;
    const desc = (await walk(url, bearer, SUBJECTS, { OrderBy: 'value', OrderDirection: 'Descending' }, OPTIONS)).nodes;
    expect(asc).toHaveLength(21);
    const values = asc.map((n) => item(n, 'value') as number);
    expect(values).toEqual([...values].sort((a, b) => a - b)); // numeric, not textual
    expect(desc.map((n) => n.Id)).toEqual(asc.map((n) => n.Id).reverse());
    const backwards = (await walk(url, bearer, SUBJECTS, { OrderBy: 'value', OrderDirection: 'Descending', Last: 5 }, OPTIONS, true)).nodes;
    expect(backwards.map((n) => n.Id)).toEqual(desc.map((n) => n.Id));
  });

  it('puts null values last in Ascending, ties broken by Id', async () => {
    const opts = { period: { days: 30 } };
    const asc = (await walk(url, bearer, SUBJECTS, { OrderBy: 'note' }, opts)).nodes;
    const desc = (await walk(url, bearer, SUBJECTS, { OrderBy: 'note', OrderDirection: 'Descending' }, opts)).nodes;
    expect(asc).toHaveLength(90);
    const notes = asc.map((n) => item(n, 'note'));
    const firstNull = notes.indexOf(null);
    expect(firstNull).toBeGreaterThan(0);
    expect(notes.slice(firstNull).every((v) => v === null)).toBe(true);
    const nullIds = asc.slice(firstNull).map((n) => n.Id);
    expect(nullIds).toEqual([...nullIds].sort());
    expect(desc.map((n) => n.Id)).toEqual(asc.map((n) => n.Id).reverse());
    const goal = (await walk(url, bearer, SUBJECTS, { OrderBy: 'goalMet' }, opts)).nodes.map((n) => item(n, 'goalMet'));
    expect(goal).toEqual([...goal].sort((a, b) => Number(a) - Number(b)));
    expect(new Set(goal).size).toBe(2);
  });
});

describe('latency', () => {
  it('delays each get-data-points answer by latencyMs', async () => {
    const { url: fast } = await start();
    const { url: slow } = await start({ latencyMs: 300 });
    const time = async (u: string) => {
      const t = await token(u);
      const at = performance.now();
      expect((await post(u, t, request(['L-1']))).status).toBe(200);
      return performance.now() - at;
    };
    expect(await time(slow)).toBeGreaterThanOrEqual(290);
    expect(await time(fast)).toBeLessThan(290);
  });
});
