import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient, type TestApp, startApp, startPeer } from './helpers.js';
import { type DataTenant, FakeProvider, PROVIDER_CLIENT, PROVIDER_CLIENT_2, createDataTenant, eventually } from './fake-provider.js';
import { Subscriber, shortLivedToken } from './live-updates.js';

// Live aggregates (P109–P111, docs/data-cache.md "Live aggregates"): `dataPointAggregatesChanged(input)`
// over SSE, read with the graphql-sse client. Its first event is the query's answer; a change report
// under the question brings the answer a fresh query gives, on whichever instance the subscriber is; a
// change outside it, or one that leaves the answer as it was, brings nothing; many subscribers of one
// question cost one computation (aggregate_recomputations_total in /metrics); it is refused as the query
// is (D4 permissions, the input's bounds, the D11 cost) and counted with dataPointsChanged (P55).

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';

const SELECTION = `aggregates { count subjectCount sumText average percentiles(p: [0.5]) }
  buckets { start aggregates { count sumText } }
  coverage { subjectCount contributingSubjectCount }`;
const SUBSCRIPTION = `subscription($input: DataPointAggregatesInput!) { dataPointAggregatesChanged(input: $input) { ${SELECTION} } }`;
const QUERY = `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { ${SELECTION} } }`;
const WITNESS = `subscription { dataPointsChanged { extractKey subjectIds kind at } }`;

type Answer = Record<string, unknown>;
type AnswerSubscriber = Subscriber<{ dataPointAggregatesChanged: Answer | null }>;

let a: TestApp;
let b: TestApp;
let provider: FakeProvider;
let t: DataTenant;
/** Each subject's level: its points of 2026-11-01 … 03 are level + 1 … level + 3. */
const level = new Map<string, number>();
const subscribers: Subscriber<unknown>[] = [];

/** The question over `hq` (E-01 and E-02, located in its child `sales`), each test its own (`to`). */
const question = (to: string, more: Record<string, unknown> = {}) => ({
  extractKey: 'steps',
  valueItemKey: 'value',
  timeItemKey: 'day',
  interval: 'DAY',
  from: '2026-11-01',
  to,
  structuralEntityKey: 'hq',
  ...more,
});

/** A subscription open on the server (its answer, or its refusal, received). */
async function subscribe(app: TestApp, token: string, query: string, variables: Record<string, unknown> = {}): Promise<AnswerSubscriber> {
  const s = new Subscriber<{ dataPointAggregatesChanged: Answer | null }>(app.url, token, query, variables);
  subscribers.push(s as Subscriber<unknown>);
  await s.ready;
  return s;
}

const answersOf = (s: AnswerSubscriber) => s.results.map((r) => r.data?.dataPointAggregatesChanged).filter((x): x is Answer => !!x);

/** The query's answer, over HTTP. */
async function ask(api: ApiClient, input: Record<string, unknown>): Promise<Answer> {
  const r = await api.gql(QUERY, { input });
  expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
  return r.body.data.dataPointAggregates;
}

async function metric(app: TestApp, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${app.url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : 0;
}
const computations = (app: TestApp, reason: 'subscribe' | 'change') => metric(app, 'aggregate_recomputations_total', `reason="${reason}"`);

/** A provider's change report of one subject's `steps`, as it posts it. */
async function report(subject: string): Promise<void> {
  const res = await t.provider.post(CHANGE, { SubjectIdentifier: subject, DataExtractsOptionsValuesFilter: { metric: 'steps' } });
  expect(res.status).toBe(200);
}

beforeAll(async () => {
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  provider.data = (identifier) =>
    [1, 2, 3].map((n) => ({
      Id: `${identifier}-${n}`,
      SubjectIdentifier: identifier,
      DataPointItems: [
        { Key: 'value', Value: { DataType: 'Integer', Value: (level.get(identifier) ?? 10) + n } },
        { Key: 'day', Value: { DataType: 'Date', Value: `2026-11-0${n}` } },
      ],
    }));
  a = await startApp({ PROVIDER_BACKOFF_MS: '1', SUBSCRIPTIONS_PER_CLIENT: '25' });
  b = await startPeer(a);
  t = await createDataTenant(a, provider, 4, {
    clients: [
      { clientId: 'full', clientSecret: 'full-client-secret', scopes: ['ServiceApi', 'ServiceDataProviderApi'], permissions: ['*'] },
      PROVIDER_CLIENT,
      PROVIDER_CLIENT_2,
      { clientId: 'reader', clientSecret: 'reader-client-secret', scopes: ['ServiceApi'], permissions: ['List:Subject', 'View:Subject'] },
      { clientId: 'no-list', clientSecret: 'no-list-client-secret', scopes: ['ServiceApi'], permissions: ['View:DataExtract'] },
      {
        clientId: 'viewer',
        clientSecret: 'viewer-client-secret',
        scopes: ['ServiceApi'],
        permissions: ['View:DataExtract', 'List:Subject'],
      },
    ],
    structuralEntities: [
      { key: 'hq', displayName: 'HQ', structureTypeKey: 'company' },
      { key: 'sales', displayName: 'Sales', structureTypeKey: 'department', parentKey: 'hq' },
      { key: 'ops', displayName: 'Operations', structureTypeKey: 'department' },
    ],
  });
  for (const [subject, entity] of [
    ['E-01', 'sales'],
    ['E-02', 'sales'],
    ['E-03', 'ops'],
  ] as const) {
    const r = await t.api.gql(
      `mutation($input: SubjectLocationsInput!) { addSubjectToStructuralEntities(input: $input) { subject { id } } }`,
      { input: { subjectId: t.subjects.get(subject), keys: [entity] } },
    );
    expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
  }
});
afterEach(async () => {
  for (const s of subscribers.splice(0)) s.close();
  // The servers have seen them go: no question of a test is computed during the next.
  await eventually(async () => (await metric(a, 'aggregate_subscriptions', 'kind="subscriptions"')) === 0);
  await eventually(async () => (await metric(b, 'aggregate_subscriptions', 'kind="subscriptions"')) === 0);
});
afterAll(async () => {
  await b?.close();
  await a?.close();
  await provider?.close();
});

describe('dataPointAggregatesChanged over SSE (graphql-sse client)', () => {
  it("sends the query's answer first, then after a change report under the question the answer a fresh query gives", async () => {
    const input = question('2026-11-04');
    const sub = await subscribe(a, await t.tenant.token(), SUBSCRIPTION, { input });
    expect(sub.ended).toBeUndefined();
    await eventually(() => answersOf(sub).length >= 1);
    // P109: the first event is the current answer, as the query gives it.
    expect(answersOf(sub)[0]).toEqual(await ask(t.api, input));
    expect(answersOf(sub)[0]).toMatchObject({ aggregates: { count: 6, subjectCount: 2, sumText: '72' } });

    level.set('E-01', 100);
    await report('E-01');
    await eventually(() => answersOf(sub).length >= 2);
    expect(answersOf(sub)[1]).toMatchObject({ aggregates: { count: 6, subjectCount: 2, sumText: '342' } });
    expect(answersOf(sub)[1]).toEqual(await ask(t.api, input));
    expect(sub.errors).toEqual([]);
  });

  it('sends nothing for a change outside the question: another extract, a subject not under its entity', async () => {
    const input = question('2026-11-05');
    const sub = await subscribe(a, await t.tenant.token(), SUBSCRIPTION, { input });
    const witness = await subscribe(a, await t.tenant.token(), WITNESS);
    await eventually(() => answersOf(sub).length >= 1);
    const before = await computations(a, 'change');
    level.set('E-03', 500);
    level.set('E-02', 700);
    await report('E-03'); // steps, but E-03 is in ops, not under hq
    const hr = await t.provider.post(CHANGE, { SubjectIdentifier: 'E-02', DataExtractsOptionsValuesFilter: { metric: 'heartRate' } });
    expect(hr.status).toBe(200);
    await eventually(() => witness.changes.length >= 2);
    expect(witness.changes.map((c) => c.extractKey).sort()).toEqual(['hr', 'steps']);
    // P110: past the longest wait before a computation (the changes were heard on this instance).
    await sleep(1_500);
    expect(answersOf(sub)).toHaveLength(1);
    expect(await computations(a, 'change')).toBe(before);
    level.delete('E-02');
  });

  it('sends nothing when a change leaves the answer as it was, and the next answer that differs', async () => {
    const input = question('2026-11-06');
    const sub = await subscribe(a, await t.tenant.token(), SUBSCRIPTION, { input });
    await eventually(() => answersOf(sub).length >= 1);
    const before = await computations(a, 'change');
    await report('E-02'); // the provider's data is as it was
    await eventually(async () => (await computations(a, 'change')) > before);
    level.set('E-02', 50);
    await report('E-02');
    await eventually(() => answersOf(sub).length >= 2);
    // P110: deliveries keep their order, so an answer for the first report would have come before this one.
    expect(answersOf(sub)).toHaveLength(2);
    expect(answersOf(sub)[1]).toEqual(await ask(t.api, input));
    expect(answersOf(sub)[1]).not.toEqual(answersOf(sub)[0]);
  });

  it('computes once for many subscribers of one question; a client with other permissions is computed for apart', async () => {
    const input = question('2026-11-07', { groupBy: 'CHILD_ENTITY' });
    const token = await t.tenant.token();
    const subscribeBefore = await computations(a, 'subscribe');
    const many = await Promise.all(Array.from({ length: 20 }, () => subscribe(a, token, SUBSCRIPTION, { input })));
    await eventually(() => many.every((s) => answersOf(s).length >= 1));
    // One first answer for the twenty (P109).
    expect(await computations(a, 'subscribe')).toBe(subscribeBefore + 1);
    const viewer = await subscribe(a, await t.tenant.token({ clientId: 'viewer', clientSecret: 'viewer-client-secret' }), SUBSCRIPTION, {
      input,
    });
    await eventually(() => answersOf(viewer).length >= 1);
    // Other permissions, another group: never an answer computed for someone else (P109).
    expect(await computations(a, 'subscribe')).toBe(subscribeBefore + 2);
    expect(answersOf(viewer)[0]).toEqual(answersOf(many[0]!)[0]);

    const witness = await subscribe(
      a,
      token,
      `subscription { dataPointsChanged(extractKey: "steps", structuralEntityKey: "hq") { extractKey subjectIds kind at } }`,
    );
    const before = await computations(a, 'change');
    level.set('E-01', 1_000);
    await report('E-01');
    await eventually(() => [...many, viewer].every((s) => answersOf(s).length >= 2));
    const fresh = await ask(t.api, input);
    for (const s of [...many, viewer]) expect(answersOf(s)[1]).toEqual(fresh);
    // Computed once per group for each change heard under the question, not once per subscriber (P110).
    const made = (await computations(a, 'change')) - before;
    expect(made).toBeGreaterThanOrEqual(2);
    expect(made).toBeLessThanOrEqual(2 * witness.changes.length);
    expect(witness.changes.length).toBeLessThan(many.length);
  });

  it("is served over SSE and over Apollo's multipart protocol, as dataPointsChanged is", async () => {
    // P111, P137: a subscription whose client prefers multipart/mixed gets Apollo's parts (the first: the current answer).
    for (const query of [SUBSCRIPTION, WITNESS]) {
      const controller = new AbortController();
      const res = await fetch(`${a.url}/graphql`, {
        method: 'POST',
        signal: controller.signal,
        headers: { 'content-type': 'application/json', accept: 'multipart/mixed', authorization: `Bearer ${await t.tenant.token()}` },
        body: JSON.stringify({ query, variables: { input: question('2026-11-04') } }),
      });
      try {
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toBe('multipart/mixed;boundary="graphql";subscriptionSpec="1.0"');
        if (query === SUBSCRIPTION) {
          const reader = res.body!.getReader();
          let text = '';
          while (!/"payload":/.test(text)) text += Buffer.from((await reader.read()).value!).toString();
          expect(text).toContain('"dataPointAggregatesChanged"');
        }
      } finally {
        controller.abort();
      }
    }
  });
});

describe('two instances on one database', () => {
  it('a subscriber on B gets the new answer after a change answered by A', async () => {
    const input = question('2026-11-08');
    const onB = await subscribe(b, await t.tenant.token(), SUBSCRIPTION, { input });
    await eventually(() => answersOf(onB).length >= 1);
    expect(answersOf(onB)[0]).toEqual(await ask(new ApiClient(b.url, t.api.token), input));
    level.set('E-02', 3_000);
    await report('E-02'); // answered by A
    await eventually(() => answersOf(onB).length >= 2);
    expect(answersOf(onB)[1]).toEqual(await ask(new ApiClient(b.url, t.api.token), input));
    expect(answersOf(onB)[1]).toEqual(await ask(t.api, input));
    expect(answersOf(onB)[1]).not.toEqual(answersOf(onB)[0]);
  });
});

describe('refused as the query is', () => {
  /** The query's errors and the subscription's, as clients read them. */
  async function both(token: string, input: Record<string, unknown>, selection = SELECTION) {
    const query = await new ApiClient(a.url, token).gql(
      `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { ${selection} } }`,
      { input },
    );
    const sub = await subscribe(
      a,
      token,
      `subscription($input: DataPointAggregatesInput!) { dataPointAggregatesChanged(input: $input) { ${selection} } }`,
      { input },
    );
    await eventually(() => sub.ended !== undefined);
    expect(answersOf(sub)).toEqual([]);
    return { query: query.body.errors, subscription: sub.errors, ended: sub.ended };
  }
  /** The errors without their path and locations; scope-auth's message names the field. */
  const plain = (errors: any[] | undefined) =>
    (errors ?? []).map((e) => ({
      message: String(e.message).replace('Subscription.dataPointAggregatesChanged', 'Query.dataPointAggregates'),
      extensions: e.extensions,
    }));

  it('without View:DataExtract or without List:Subject: FORBIDDEN (D4)', async () => {
    for (const [clientId, permission] of [
      ['reader', 'View:DataExtract'],
      ['no-list', 'List:Subject'],
    ] as const) {
      const token = await t.tenant.token({ clientId, clientSecret: `${clientId}-client-secret` });
      const { query, subscription, ended } = await both(token, question('2026-11-04'));
      expect(ended).toBe('complete');
      expect(plain(subscription)).toEqual(plain(query));
      expect(subscription[0].extensions).toMatchObject({ code: 'FORBIDDEN' });
      if (permission === 'List:Subject') expect(subscription[0].message).toMatch(/List:Subject/);
    }
  });

  it('an input the query refuses, with the same error: too many buckets, to before from, an unknown extract', async () => {
    const token = await t.tenant.token();
    for (const [input, code] of [
      [question('2026-11-04', { from: '2020-01-01' }), 'BAD_REQUEST'],
      [question('2026-10-01'), 'BAD_REQUEST'],
      [question('2026-11-04', { extractKey: 'nope' }), 'NOT_FOUND'],
    ] as const) {
      const { query, subscription, ended } = await both(token, input, 'aggregates { count }');
      expect(ended).toBe('complete');
      expect(plain(subscription)).toEqual(plain(query));
      expect(subscription[0].extensions.code).toBe(code);
    }
  });

  it("a question over the cost limit (D11): refused before anything runs, with the query's error", async () => {
    const token = await t.tenant.token();
    const input = question('2027-11-01', { from: '2025-01-01', groupBy: 'ITEM', groupByItemKey: 'value', interval: 'DAY' });
    const query = await new ApiClient(a.url, token).gql(QUERY, { input });
    expect(query.body.errors[0].message).toMatch(/cost .* exceeds the limit/);
    const res = await fetch(`${a.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: SUBSCRIPTION, variables: { input } }),
    });
    const text = await res.text();
    expect(text).toContain(query.body.errors[0].message);
  });

  it('counts under SUBSCRIPTIONS_PER_CLIENT together with dataPointsChanged (429, P55)', async () => {
    const token = await t.tenant.token({ clientId: 'viewer', clientSecret: 'viewer-client-secret' });
    for (let i = 0; i < 24; i++) await subscribe(a, token, WITNESS);
    const last = await subscribe(a, token, SUBSCRIPTION, { input: question('2026-11-04') });
    expect(last.ended).toBeUndefined();
    const res = await fetch(`${a.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: SUBSCRIPTION, variables: { input: question('2026-11-04') } }),
    });
    // P111, P92: one count for both fields.
    expect(res.status).toBe(429);
    expect(await res.text()).toMatch(/SUBSCRIPTIONS_PER_CLIENT = 25/);
  });

  it('ends the stream with UNAUTHENTICATED when the token expires', async () => {
    const sub = await subscribe(a, await shortLivedToken(a, t.tenant.key, 2), SUBSCRIPTION, { input: question('2026-11-04') });
    await eventually(() => answersOf(sub).length >= 1);
    // P111, P55: the stream ends at the token's exp.
    await eventually(() => sub.ended !== undefined, 5_000);
    expect(sub.ended).toBe('complete');
    expect(sub.errors.map((e) => e.extensions?.code)).toEqual(['UNAUTHENTICATED']);
  });
});
