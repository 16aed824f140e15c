import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient, type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, PROVIDER_CLIENT, createDataTenant, eventually } from './fake-provider.js';
import { Subscriber } from './live-updates.js';

// The fan-out of a live aggregate (P129): the subscribers of one question share each answer's execution
// and its JSON text. What is shared must stay within who may see it: a client with other permissions
// (here without View:StructuralEntity, so a group's `structuralEntity` is null with FORBIDDEN) gets what
// its own query gives, and subscribers with another selection of the same question get theirs. /metrics
// shows the sharing: a change executes one result per group (tenant and permission set) and request
// (document, variables), however many subscribers it reaches.

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const SELECTION = `aggregates { count sumText }
  groupedAggregates { key structuralEntity { key displayName } aggregates { count sumText } }`;
const OTHER_SELECTION = `aggregates { count subjectCount } coverage { subjectCount }`;
const subscription = (selection: string) =>
  `subscription($input: DataPointAggregatesInput!) { dataPointAggregatesChanged(input: $input) { ${selection} } }`;
const query = (selection: string) => `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { ${selection} } }`;
const INPUT = {
  extractKey: 'steps',
  valueItemKey: 'value',
  timeItemKey: 'day',
  interval: 'DAY',
  from: '2026-11-01',
  to: '2026-11-04',
  structuralEntityKey: 'hq',
  groupBy: 'CHILD_ENTITY',
};

type Event = { data?: unknown; errors?: unknown[] };
type AnswerSubscriber = Subscriber<{ dataPointAggregatesChanged: unknown }>;

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;
/** Each subject's level: its points of 2026-11-01 … 03 are level + 1 … level + 3. */
const level = new Map<string, number>();
const open: AnswerSubscriber[] = [];

/** An event or a query's result as a client compares them: the field's data, the errors' messages, codes and paths below it. */
function seen(r: Event, field: string) {
  return {
    data: (r.data as Record<string, unknown> | null | undefined)?.[field],
    errors: (r.errors ?? []).map((e: any) => ({ message: e.message, code: e.extensions?.code, path: e.path?.slice(1) })),
  };
}

async function subscribe(token: string, selection: string): Promise<AnswerSubscriber> {
  const s = new Subscriber<{ dataPointAggregatesChanged: unknown }>(app.url, token, subscription(selection), { input: INPUT });
  open.push(s);
  await s.ready;
  return s;
}

const events = (s: AnswerSubscriber) => s.results.map((r) => seen(r as Event, 'dataPointAggregatesChanged'));

/** The shared events' executions and deliveries so far, from /metrics. */
async function sharing() {
  const text = await (await fetch(`${app.url}/metrics`)).text();
  const count = (name: string) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1]);
  return { executions: count('graphql_shared_event_executions_total'), deliveries: count('graphql_shared_event_deliveries_total') };
}

async function ask(token: string, selection: string) {
  const r = await new ApiClient(app.url, token).gql(query(selection), { input: INPUT });
  return seen(r.body as Event, 'dataPointAggregates');
}

beforeAll(async () => {
  provider = await new FakeProvider().start();
  provider.data = (identifier) =>
    [1, 2, 3].map((n) => ({
      Id: `${identifier}-${n}`,
      SubjectIdentifier: identifier,
      DataPointItems: [
        { Key: 'value', Value: { DataType: 'Integer', Value: (level.get(identifier) ?? 10) + n } },
        { Key: 'day', Value: { DataType: 'Date', Value: `2026-11-0${n}` } },
      ],
    }));
  app = await startApp({ PROVIDER_BACKOFF_MS: '1' });
  t = await createDataTenant(app, provider, 3, {
    clients: [
      { clientId: 'full', clientSecret: 'full-client-secret', scopes: ['ServiceApi', 'ServiceDataProviderApi'], permissions: ['*'] },
      PROVIDER_CLIENT,
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
      { key: 'ops', displayName: 'Operations', structureTypeKey: 'department', parentKey: 'hq' },
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
afterEach(() => {
  for (const s of open.splice(0)) s.close();
});
afterAll(async () => {
  await app?.close();
  await provider?.close();
});

describe('the subscribers of one question share its answers (P129)', () => {
  it('each gets what its own query gives: many alike, another permission set and another selection apart, before and after a change', async () => {
    const full = await t.tenant.token();
    const viewer = await t.tenant.token({ clientId: 'viewer', clientSecret: 'viewer-client-secret' });
    const many = await Promise.all(Array.from({ length: 12 }, () => subscribe(full, SELECTION)));
    const restricted = await Promise.all(Array.from({ length: 3 }, () => subscribe(viewer, SELECTION)));
    const other = await subscribe(full, OTHER_SELECTION);
    const all = [...many, ...restricted, other];
    await eventually(() => all.every((s) => s.results.length >= 1), 10_000);

    /** Every subscriber's `n`-th event: what its own client's query gives now. */
    const check = async (n: number) => {
      const asked = { full: await ask(full, SELECTION), viewer: await ask(viewer, SELECTION), other: await ask(full, OTHER_SELECTION) };
      // The viewer may not see the child entities (D4): its answer is not the full client's.
      expect(asked.viewer.errors.map((e) => e.code)).toEqual(['FORBIDDEN', 'FORBIDDEN']);
      expect(asked.full.errors).toEqual([]);
      for (const s of many) expect(events(s)[n]).toEqual(asked.full);
      for (const s of restricted) expect(events(s)[n]).toEqual(asked.viewer);
      expect(events(other)[n]).toEqual(asked.other);
      return asked;
    };
    const first = await check(0);
    expect(first.full.data).toMatchObject({
      groupedAggregates: [
        { key: 'ops', structuralEntity: { key: 'ops', displayName: 'Operations' } },
        { key: 'sales', structuralEntity: { key: 'sales', displayName: 'Sales' } },
      ],
    });
    expect(first.viewer.data).toMatchObject({
      groupedAggregates: [
        { key: 'ops', structuralEntity: null },
        { key: 'sales', structuralEntity: null },
      ],
    });

    const before = await sharing();
    level.set('E-03', 200);
    const res = await t.provider.post(CHANGE, { SubjectIdentifier: 'E-03', DataExtractsOptionsValuesFilter: { metric: 'steps' } });
    expect(res.status).toBe(200);
    await eventually(() => all.every((s) => s.results.length >= 2), 10_000);
    // One execution each for the full client's two selections and the viewer's one, however many
    // subscribers they reach; every subscriber is handed one result.
    const after = await sharing();
    expect({ executions: after.executions - before.executions, deliveries: after.deliveries - before.deliveries }).toEqual({
      executions: 3,
      deliveries: all.length,
    });
    const next = await check(1);
    expect(next.full.data).not.toEqual(first.full.data);
    for (const s of all) expect(s.ended).toBeUndefined();
  });
});
