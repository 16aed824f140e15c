import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Delivery, MAX_PENDING_BURSTS, MAX_PENDING_SUBJECTS } from '../src/domains/data/index.js';
import { ApiClient, type TestApp, createTenant, startApp, startPeer } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually } from './fake-provider.js';
import { ANY_PRINCIPAL as principal, Subscriber, feedWithBus, shortLivedToken } from './live-updates.js';

// Issue 17, live updates: `dataPointsChanged` over Yoga's SSE transport, read with the graphql-sse client
// (distinct connections mode). A change answered by one instance reaches subscribers on every instance
// (over the event bus: docs/data-cache.md "Live updates", docs/decisions.md P54 and P55); other
// tenants and clients without View:DataExtract hear nothing; a stream ends when its token expires; a
// client's subscriptions are bounded; a slow subscriber's backlog is coalesced and bounded.

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const REMOVAL = '/connector-dataprovider/api/v1/dataChange/removal';

const SUBSCRIPTION = `subscription($extractKey: String, $subjectIds: [ID!], $structuralEntityKey: String) {
  dataPointsChanged(extractKey: $extractKey, subjectIds: $subjectIds, structuralEntityKey: $structuralEntityKey) {
    extractKey subjectIds kind at
  }
}`;

let a: TestApp;
let b: TestApp;
let provider: FakeProvider;
let t: DataTenant;
let other: DataTenant;
const subscribers: Subscriber[] = [];

/** A subscription open on the server (its answer received). */
async function subscribe(app: TestApp, token: string, variables: Record<string, unknown> = {}): Promise<Subscriber> {
  const s = new Subscriber(app.url, token, SUBSCRIPTION, variables);
  subscribers.push(s);
  await s.ready;
  return s;
}

beforeAll(async () => {
  provider = await new FakeProvider().start();
  // Two units of admission: open subscriptions must hold none (a client with five still gets answers).
  a = await startApp({ PROVIDER_BACKOFF_MS: '1', SUBSCRIPTIONS_PER_CLIENT: '5', ADMISSION_CAPACITY: '2' });
  b = await startPeer(a);
  t = await createDataTenant(a, provider, 4, {
    structuralEntities: [
      { key: 'hq', displayName: 'HQ', structureTypeKey: 'company' },
      { key: 'sales', displayName: 'Sales', structureTypeKey: 'department', parentKey: 'hq' },
      { key: 'ops', displayName: 'Operations', structureTypeKey: 'department' },
    ],
  });
  other = await createDataTenant(a, provider, 2);
});
afterEach(() => {
  // Each test's subscriptions end with it (they count against SUBSCRIPTIONS_PER_CLIENT until the server sees them go).
  for (const s of subscribers.splice(0)) s.close();
});
afterAll(async () => {
  await b?.close();
  await a?.close();
  await provider?.close();
});

describe('dataPointsChanged over SSE (graphql-sse client)', () => {
  it('hears a change report, a removal and a refresh, with the subjects as UUIDs', async () => {
    const token = await t.tenant.token();
    const sub = await subscribe(a, token, { extractKey: 'steps' });
    expect(sub.ended).toBeUndefined();
    const e1 = t.subjects.get('E-01')!;
    expect(
      (await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: {}, NewOrUpdatedDataPoints: [] }))
        .status,
    ).toBe(200);
    await eventually(() => sub.changes.length >= 1);
    expect(sub.changes[0]).toMatchObject({ extractKey: 'steps', subjectIds: [e1], kind: 'CHANGED' });
    expect(Date.parse(sub.changes[0]!.at)).toBeGreaterThan(Date.now() - 60_000);
    expect((await t.provider.post(REMOVAL, { SubjectIdentifier: 'E-01', RemovedDataPointIdentifiers: ['E-01-2'] })).status).toBe(200);
    await eventually(() => sub.changes.length >= 2);
    expect(sub.changes[1]).toMatchObject({ extractKey: 'steps', subjectIds: [e1], kind: 'REMOVED' });
    expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);
    await eventually(() => sub.changes.length >= 3);
    expect(sub.changes[2]).toMatchObject({ extractKey: 'steps', subjectIds: [], kind: 'REFRESHED' });
    // Only `steps` was asked for: the change report named both extracts, `hr` was not delivered.
    expect(sub.changes.every((c) => c.extractKey === 'steps')).toBe(true);
    expect(sub.errors).toEqual([]);
  });

  it('names the subjects a background re-fetch changed, and only when their data changed', async () => {
    const token = await t.tenant.token();
    const sub = await subscribe(a, token, { extractKey: 'hr' });
    // Cached first: the sweep re-fetches entries that hold data.
    const read = async () => {
      const r = await t.api.gql(`{ subjects(first: 10) { edges { node { dataPoints(extractKey: "hr") { totalCount } } } } }`);
      expect(r.body.errors).toBeUndefined();
    };
    await read();
    const fetches = provider.fetches('hr').length;
    expect((await t.api.post('/api/v1/dataSet/hr/refresh')).status).toBe(200);
    await eventually(() => provider.fetches('hr').length > fetches);
    await eventually(() => sub.changes.length >= 1);
    // The same data came back: the refresh is all there is to hear.
    await sleep(300);
    expect(sub.changes.map((c) => c.kind)).toEqual(['REFRESHED']);

    provider.version++;
    try {
      expect((await t.api.post('/api/v1/dataSet/hr/refresh')).status).toBe(200);
      await eventually(() => sub.changes.length >= 3);
      expect(sub.changes[1]).toMatchObject({ extractKey: 'hr', subjectIds: [], kind: 'REFRESHED' });
      const changed = sub.changes.slice(2).flatMap((c) => (c.kind === 'CHANGED' ? c.subjectIds : []));
      await eventually(() => sub.changes.slice(2).flatMap((c) => c.subjectIds).length >= 4);
      expect(new Set(sub.changes.slice(2).flatMap((c) => c.subjectIds))).toEqual(new Set(t.subjects.values()));
      expect(changed.length).toBeGreaterThan(0);
      expect(sub.changes.slice(2).every((c) => c.kind === 'CHANGED')).toBe(true);
    } finally {
      provider.version--;
    }
  });

  it('filters by subject ids (UUIDs or global ids) and by structural entity, subtree included', async () => {
    const token = await t.tenant.token();
    const [e2, e3, e4] = ['E-02', 'E-03', 'E-04'].map((k) => t.subjects.get(k)!);
    const locate = async (id: string, key: string) => {
      const r = await t.api.gql(
        `mutation($input: SubjectLocationsInput!) { addSubjectToStructuralEntities(input: $input) { subject { id } } }`,
        { input: { subjectId: id, keys: [key] } },
      );
      expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
    };
    await locate(e2!, 'sales');
    await locate(e3!, 'ops');
    const globalId = Buffer.from(`Subject:${e3}`).toString('base64');
    const bySubject = await subscribe(a, token, { extractKey: 'steps', subjectIds: [globalId] });
    const byEntity = await subscribe(a, token, { extractKey: 'steps', structuralEntityKey: 'hq' });
    const change = async (identifier: string) =>
      expect(
        (await t.provider.post(CHANGE, { SubjectIdentifier: identifier, DataExtractsOptionsValuesFilter: { metric: 'steps' } })).status,
      ).toBe(200);

    await change('E-02'); // below hq (in sales)
    await change('E-03'); // in ops: not below hq
    await eventually(() => byEntity.changes.length >= 1 && bySubject.changes.length >= 1);
    // Located after subscribing: the filter follows.
    await locate(e4!, 'sales');
    await change('E-04');
    await eventually(() => byEntity.changes.length >= 2);
    await sleep(200);
    expect(byEntity.changes.map((c) => c.subjectIds)).toEqual([[e2], [e4]]);
    expect(bySubject.changes.map((c) => c.subjectIds)).toEqual([[e3]]);
    // A change of the whole extract reaches both.
    expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);
    await eventually(() => byEntity.changes.length >= 3 && bySubject.changes.length >= 2);
    expect(byEntity.changes[2]).toMatchObject({ subjectIds: [], kind: 'REFRESHED' });
    expect(bySubject.changes[1]).toMatchObject({ subjectIds: [], kind: 'REFRESHED' });
  });

  it('answers an unknown extract or entity with NOT_FOUND at subscribe', async () => {
    const token = await t.tenant.token();
    for (const variables of [{ extractKey: 'nope' }, { structuralEntityKey: 'nope' }]) {
      const sub = await subscribe(a, token, variables);
      await eventually(() => sub.ended !== undefined);
      expect(sub.ended).toBe('complete');
      expect(sub.errors.map((e) => e.extensions?.code)).toEqual(['NOT_FOUND']);
      expect(sub.changes).toEqual([]);
    }
  });
});

describe('who hears what (D2, D4)', () => {
  it("never delivers another tenant's changes, nor any to a client without View:DataExtract (FORBIDDEN at subscribe)", async () => {
    const witness = await subscribe(a, await t.tenant.token());
    const stranger = await subscribe(a, await other.tenant.token());
    const strangerOnB = await subscribe(b, await other.tenant.token());
    const reader = await subscribe(a, await t.tenant.token({ clientId: 'reader', clientSecret: 'reader-client-secret' }));
    await eventually(() => reader.ended !== undefined);
    expect(reader.ended).toBe('complete');
    expect(reader.errors.map((e) => e.extensions)).toEqual([{ code: 'FORBIDDEN', status: 403 }]);
    expect(reader.changes).toEqual([]);

    expect((await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: {} })).status).toBe(200);
    await eventually(() => witness.changes.length >= 2); // steps and hr
    await sleep(300);
    expect(stranger.results).toEqual([]);
    expect(strangerOnB.results).toEqual([]);
    expect(stranger.ended).toBeUndefined();
  });

  it('needs a token: 401 problem+json without one, as every /graphql request', async () => {
    const res = await fetch(`${a.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: SUBSCRIPTION }),
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('content-type')).toMatch(/problem\+json/);
  });

  it('ends the stream with UNAUTHENTICATED when the token expires', async () => {
    const token = await shortLivedToken(a, t.tenant.key, 2);
    const sub = await subscribe(a, token);
    expect(sub.ended).toBeUndefined();
    const start = Date.now();
    await eventually(() => sub.ended !== undefined, 5_000);
    expect(sub.ended).toBe('complete');
    expect(sub.errors.map((e) => e.extensions?.code)).toEqual(['UNAUTHENTICATED']);
    expect(sub.errors[0].message).toMatch(/expired/);
    expect(Date.now() - start).toBeLessThan(4_000);
  });
});

describe('two instances on one database', () => {
  it('a subscriber on B hears a change answered by A within 1 s', async () => {
    const onB = await subscribe(b, await t.tenant.token(), { extractKey: 'steps', subjectIds: [t.subjects.get('E-04')] });
    const res = await t.provider.post(CHANGE, { SubjectIdentifier: 'E-04', DataExtractsOptionsValuesFilter: { metric: 'steps' } });
    const answered = Date.now();
    expect(res.status).toBe(200);
    await eventually(() => onB.changes.length >= 1, 2_000);
    expect(onB.changes[0]).toMatchObject({ extractKey: 'steps', subjectIds: [t.subjects.get('E-04')], kind: 'CHANGED' });
    expect(onB.arrivals[0]! - answered).toBeLessThan(1_000);
  });
});

describe('bounds', () => {
  it("refuses a client's subscription past SUBSCRIPTIONS_PER_CLIENT with TOO_MANY_REQUESTS, and counts a closed one out", async () => {
    const tenant = await createTenant(a);
    const token = await tenant.token();
    const open = [];
    for (let i = 0; i < 5; i++) open.push(await subscribe(a, token));
    const res = await fetch(`${a.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: SUBSCRIPTION }),
    });
    expect(res.status).toBe(429);
    const text = await res.text();
    expect(text).toMatch(/TOO_MANY_REQUESTS/);
    expect(text).toMatch(/SUBSCRIPTIONS_PER_CLIENT = 5/);
    // Subscriptions hold no admission units: the client's queries are answered at once.
    const query = await new ApiClient(a.url, token).gql('{ dataExtracts { totalCount } }');
    expect(query.status).toBe(200);
    expect(query.body.errors).toBeUndefined();
    // Another instance counts its own.
    const onB = await subscribe(b, token);
    expect(onB.ended).toBeUndefined();
    // The client goes away: its place is free again.
    open[0]!.close();
    await eventually(async () => {
      const again = new Subscriber(a.url, token, SUBSCRIPTION);
      await again.ready;
      const ok = again.ended === undefined;
      again.close();
      return ok;
    });
  });

  it('sends heartbeats on an idle stream (SSE comments), over GET as well', async () => {
    const control = new AbortController();
    const params = new URLSearchParams({
      query: SUBSCRIPTION,
      variables: JSON.stringify({ extractKey: 'steps', subjectIds: [randomUUID()] }),
    });
    const res = await fetch(`${a.url}/graphql?${params}`, {
      headers: { accept: 'text/event-stream', authorization: `Bearer ${await t.tenant.token()}` },
      signal: control.signal,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    let text = '';
    const until = Date.now() + 1_500;
    // Yoga pings every 12 s (every 300 ms when NODE_ENV is test, as under vitest).
    while (Date.now() < until && (text.match(/^:\n\n/gm) ?? []).length < 3) text += new TextDecoder().decode((await reader.read()).value);
    control.abort();
    expect((text.match(/^:\n\n/gm) ?? []).length).toBeGreaterThanOrEqual(3);
    expect(text).not.toMatch(/event: next/);
  });
});

describe('a slow subscriber (in process)', () => {
  const ev = (x: string, s: string[], k = 'CHANGED') => ({ t: 't1', x, s, k, a: new Date().toISOString() });
  const take = async (it: AsyncIterator<Delivery>, n: number) => {
    const out: Delivery[] = [];
    for (let i = 0; i < n; i++) out.push((await it.next()).value as Delivery);
    return out;
  };

  it('coalesces unread changes per extract and widens ids past the bound', async () => {
    const { feed, send } = await feedWithBus();
    const it = feed.open(principal, {});
    for (let i = 0; i < 10_000; i++) send(ev(`x${i % 3}`, [`s${i}`]));
    send(ev('x0', ['late'], 'REMOVED'));
    send({ ...ev('x9', ['s']), t: 'another tenant' });
    const got = await take(it, 3);
    expect(got.map((d) => ('change' in d ? d.change.extractKey : d.end.message))).toEqual(['x1', 'x2', 'x0']);
    // 10,000 ids waited: past MAX_PENDING_SUBJECTS they became "the whole extract"; mixed kinds are CHANGED.
    for (const d of got) expect('change' in d && d.change.subjectIds).toEqual([]);
    expect('change' in got[2]! && got[2].change.kind).toBe('CHANGED');
    send(ev('x5', ['a', 'b']));
    send(ev('x5', ['b', 'c']));
    expect(await take(it, 1)).toEqual([{ change: expect.objectContaining({ extractKey: 'x5', subjectIds: ['a', 'b', 'c'] }) }]);
    expect(MAX_PENDING_SUBJECTS).toBeLessThan(10_000);
    await it.return!();
    expect(feed.size).toBe(0);
    feed.close();
  });

  it('ends a subscriber that falls behind by more bursts (events of distinct transactions) than the bound with SLOW_CONSUMER', async () => {
    const { feed, send } = await feedWithBus();
    const it = feed.open(principal, {});
    for (let i = 0; i <= MAX_PENDING_BURSTS; i++) send(ev(`x${i}`, ['s']));
    const [d] = await take(it, 1);
    expect(d && 'end' in d && d.end.extensions['code']).toBe('SLOW_CONSUMER');
    expect(await it.next()).toEqual({ value: undefined, done: true });
    expect(feed.size).toBe(0);
    feed.close();
  });

  it('ends every subscription with SERVICE_UNAVAILABLE when the bus drops (changes may be missed) or the instance drains', async () => {
    const { feed, send, drop } = await feedWithBus();
    const first = feed.open(principal, {});
    send(ev('x', ['s']));
    drop();
    const [d] = await take(first, 1);
    // What waited unread is dropped with it: the subscriber is told to reload instead.
    expect(d && 'end' in d && d.end.extensions['code']).toBe('SERVICE_UNAVAILABLE');
    expect((await first.next()).done).toBe(true);
    // While deaf, a subscription would hear nothing: refused.
    expect(() => feed.open(principal, {})).toThrow(/unavailable/);
    feed.close();
    expect(() => feed.open(principal, {})).toThrow(/shutting down/);
  });
});
