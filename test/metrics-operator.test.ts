import { createClient } from 'graphql-ws';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type Delivery, MAX_PENDING_BURSTS } from '../src/domains/data/index.js';
import { MAX_DATA_SOURCE_LABELS, Metrics } from '../src/http/metrics.js';
import { type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually, providerDataSource, readSteps } from './fake-provider.js';
import { ANY_PRINCIPAL as principal, Subscriber, feedWithBus } from './live-updates.js';

// What an operator looks at first on /metrics (P142): provider calls by data source and outcome with
// their latency, token requests, the data cache's lookups, stale sets served and re-fetch backlog, and
// subscriptions open, their events and slow consumers cut; with bounded labels (P143): no subject, tenant
// or client, data source keys capped.

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;

beforeAll(async () => {
  provider = await new FakeProvider().start();
  // One attempt per call, and a circuit that stays closed: each read's outcome is what the provider answered.
  app = await startApp({ PROVIDER_RETRIES: '0', PROVIDER_BACKOFF_MS: '1', PROVIDER_BREAKER_FAILURES: '1000', PROVIDER_TIMEOUT_MS: '1000' });
  t = await createDataTenant(app, provider, 3);
});
afterAll(async () => {
  await app?.close();
  await provider?.close();
});

const scrape = async () => {
  const res = await fetch(`${app.url}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
};

/** The value of one series (0 when absent): `name{labels}` exactly as Prometheus prints it, labels in their order. */
function value(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

/** The change of each series between two scrapes. */
function delta(before: string, after: string, series: string): number {
  return value(after, series) - value(before, series);
}

const calls = (outcome: string) => `provider_calls_total{data_source="wearables",outcome="${outcome}"}`;
const lookups = (result: string) => `data_cache_lookups_total{result="${result}"}`;

describe('provider calls, tokens and the data cache on /metrics', () => {
  it('counts attempts by data source and outcome with their latency, token requests, lookups by result, stale sets served and the re-fetch backlog', async () => {
    const m0 = await scrape();
    // A miss: the provider's two pages (three points, two a page) after one token request.
    expect(await readSteps(t, 'E-01')).toEqual({ count: 3, stale: false });
    const m1 = await scrape();
    expect(delta(m0, m1, calls('ok'))).toBe(2);
    expect(delta(m0, m1, `provider_call_duration_seconds_count{data_source="wearables",outcome="ok"}`)).toBe(2);
    expect(delta(m0, m1, `provider_call_duration_seconds_bucket{le="+Inf",data_source="wearables",outcome="ok"}`)).toBe(2);
    expect(delta(m0, m1, `provider_token_requests_total{data_source="wearables",outcome="ok"}`)).toBe(1);
    expect(delta(m0, m1, `provider_token_request_duration_seconds_count{data_source="wearables"}`)).toBe(1);
    expect(delta(m0, m1, lookups('miss'))).toBe(1);
    expect(delta(m0, m1, lookups('memory'))).toBe(0);

    // The same read again: the instance's memory, no call.
    expect(await readSteps(t, 'E-01')).toEqual({ count: 3, stale: false });
    const m2 = await scrape();
    expect(delta(m1, m2, lookups('memory'))).toBe(1);
    expect(delta(m1, m2, lookups('miss'))).toBe(0);
    expect(delta(m1, m2, calls('ok'))).toBe(0);

    // A provider failing two ways, with nothing cached: PROVIDER_UNAVAILABLE, each attempt counted by its fault.
    provider.faults.push({ status: 500 });
    expect(await readSteps(t, 'E-02')).toBe('PROVIDER_UNAVAILABLE');
    provider.faults.push({ status: 200, body: '{"not":"a page"' });
    expect(await readSteps(t, 'E-03')).toBe('PROVIDER_UNAVAILABLE');
    const m3 = await scrape();
    expect(delta(m2, m3, calls('http_error'))).toBe(1);
    expect(delta(m2, m3, calls('invalid_answer'))).toBe(1);
    expect(delta(m2, m3, `provider_call_duration_seconds_count{data_source="wearables",outcome="http_error"}`)).toBe(1);
    expect(delta(m2, m3, lookups('miss'))).toBe(2);
    expect(delta(m2, m3, 'data_cache_stale_served_total')).toBe(0);

    // E-01's set flagged by a change report while the provider fails: its background re-fetch fails and it
    // waits in the backlog; a read serves the older set, stale (D10).
    provider.always = { status: 503 };
    try {
      expect((await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: {} })).status).toBe(200);
      await eventually(async () => {
        const m = await scrape();
        return delta(m3, m, calls('http_error')) >= 1 && value(m, 'data_cache_refetching') === 0;
      });
      const m4 = await scrape();
      expect(value(m4, 'data_cache_refetch_backlog')).toBe(1);
      expect(await readSteps(t, 'E-01')).toEqual({ count: 3, stale: true });
      const m5 = await scrape();
      expect(delta(m4, m5, 'data_cache_stale_served_total')).toBe(1);
      expect(delta(m4, m5, lookups('miss'))).toBe(1);
      expect(delta(m4, m5, calls('http_error'))).toBe(1);
    } finally {
      provider.always = undefined;
    }
    // The provider back: the read fetches E-01's set again and stores it, and the backlog is empty.
    expect(await readSteps(t, 'E-01')).toEqual({ count: 3, stale: false });
    await eventually(async () => value(await scrape(), 'data_cache_refetch_backlog') === 0);

    const text = await scrape();
    expect(text).toMatch(/# TYPE provider_call_duration_seconds histogram/);
    expect(text).toMatch(/# TYPE data_cache_refetch_backlog gauge/);
  });

  it("names no subject, client or extract on /metrics, and the tenant (its key or id) only on admission's series and the circuits' gauge", async () => {
    // P143, P103: tenants label admission (by key) and the circuits' gauge (by id), nothing else. A read
    // puts the tenant on both, so the search finds it where it is and would find it anywhere else.
    expect(await readSteps(t, 'E-01')).toMatchObject({ count: 3 });
    const text = await scrape();
    for (const id of [...t.subjects.values(), ...t.subjects.keys()]) expect(text).not.toContain(id);
    // The clients that read and reported changes, and the extracts read, are no label's value.
    expect(text).not.toMatch(/="(full|provider|steps|hr)"/);
    const { id: tenantId } = await app.handle.db
      .selectFrom('tenant')
      .select('id')
      .where('key', '=', t.tenant.key)
      .executeTakeFirstOrThrow();
    const naming = text.split('\n').filter((l) => l.includes(t.tenant.key) || l.includes(tenantId));
    expect(naming.some((l) => l.startsWith(`admission_requests_total{tenant="${t.tenant.key}"`))).toBe(true);
    expect(naming.some((l) => l.startsWith(`provider_circuit_state{tenant_id="${tenantId}"`))).toBe(true);
    expect(naming.filter((l) => !/^(admission_\w+|provider_circuit_state)\{/.test(l))).toEqual([]);
  });

  it('shows the re-fetch backlog as NaN, and still answers, while the database is too slow to count it', async () => {
    // P142: the count waits behind a session holding data_cache (PostgreSQL: its lock; PGlite: its one connection).
    const held = await app.handle.db.connection().execute(async (conn) => {
      await sql`BEGIN`.execute(conn);
      await sql`LOCK TABLE data_cache IN ACCESS EXCLUSIVE MODE`.execute(conn);
      try {
        const scrapes = [await scrape(), await scrape()];
        // The second scrape waited for the first one's count instead of starting another.
        const counts =
          app.handle.kind === 'postgres'
            ? (
                await sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND query LIKE '%count(*)::int as "n" from "data_cache"%'`.execute(conn)
              ).rows[0]!.n
            : undefined;
        return { scrapes, counts };
      } finally {
        await sql`ROLLBACK`.execute(conn);
      }
    });
    for (const text of held.scrapes) {
      expect(value(text, 'data_cache_refetch_backlog')).toBeNaN();
      expect(text).toMatch(/^graphql_subscriptions_open\{transport="sse"\} \d+$/m);
    }
    if (held.counts !== undefined) expect(held.counts).toBe(1);
    // Counted again once the database answers.
    await eventually(async () => value(await scrape(), 'data_cache_refetch_backlog') === 0);
  });

  it('counts each subject a read finds fresh in its row as a database lookup', async () => {
    // No in-process cache (CACHE_MAX_BYTES=0): a second read finds each set in its row.
    const bare = await startApp({ CACHE_MAX_BYTES: '0' });
    try {
      const b = await createDataTenant(bare, provider, 3);
      const m = async () => (await fetch(`${bare.url}/metrics`)).text();
      const read = async () => {
        const r = await b.api.gql('{ subjects(first: 3) { edges { node { dataPoints(extractKey: "steps") { totalCount } } } } }');
        expect(
          r.body.data.subjects.edges.map((e: { node: { dataPoints: { totalCount: number } } }) => e.node.dataPoints.totalCount),
        ).toEqual([3, 3, 3]);
      };
      const m0 = await m();
      await read();
      const m1 = await m();
      expect(delta(m0, m1, lookups('miss'))).toBe(3);
      await read();
      const m2 = await m();
      expect(delta(m1, m2, lookups('database'))).toBe(3);
      expect(delta(m1, m2, lookups('memory'))).toBe(0);
      expect(delta(m1, m2, lookups('miss'))).toBe(0);
    } finally {
      await bare.close();
    }
  });

  it('counts an attempt cut at PROVIDER_TIMEOUT_MS as a timeout, with its seconds', async () => {
    const m0 = await scrape();
    provider.faults.push({ delayMs: 1500 });
    expect(await readSteps(t, 'E-02')).toBe('PROVIDER_UNAVAILABLE');
    const m1 = await scrape();
    expect(delta(m0, m1, calls('timeout'))).toBe(1);
    expect(delta(m0, m1, `provider_call_duration_seconds_count{data_source="wearables",outcome="timeout"}`)).toBe(1);
    // Cut at the limit (1 s): not in the buckets below it.
    expect(delta(m0, m1, `provider_call_duration_seconds_bucket{le="0.5",data_source="wearables",outcome="timeout"}`)).toBe(0);
  });

  it('counts a token request the provider refuses, and the attempt it failed', async () => {
    const wrong = await createDataTenant(app, provider, 1, {
      dataSources: [{ ...providerDataSource(provider), clientSecret: 'not-the-secret', inboundClientIds: ['provider'] }],
    });
    const m0 = await scrape();
    expect(await readSteps(wrong, 'E-01')).toBe('PROVIDER_UNAVAILABLE');
    const m1 = await scrape();
    expect(delta(m0, m1, `provider_token_requests_total{data_source="wearables",outcome="rejected"}`)).toBe(1);
    expect(delta(m0, m1, calls('token_error'))).toBe(1);
    expect(delta(m0, m1, calls('ok'))).toBe(0);
  });

  it(`labels the first ${MAX_DATA_SOURCE_LABELS} data source keys, then counts the others as other`, async () => {
    // The tenants' files name the data sources: their number is theirs, the series' number is bounded.
    const metrics = new Metrics();
    const meter = metrics.dataMeter();
    for (let i = 0; i < MAX_DATA_SOURCE_LABELS + 5; i++) meter.call(`source-${i}`, 'ok', 0.01);
    meter.call('source-0', 'timeout', 0.5);
    const text = await metrics.registry.metrics();
    expect(value(text, 'provider_calls_total{data_source="source-0",outcome="ok"}')).toBe(1);
    expect(value(text, 'provider_calls_total{data_source="source-0",outcome="timeout"}')).toBe(1);
    expect(value(text, `provider_calls_total{data_source="source-${MAX_DATA_SOURCE_LABELS - 1}",outcome="ok"}`)).toBe(1);
    expect(text).not.toContain(`source-${MAX_DATA_SOURCE_LABELS}"`);
    expect(value(text, 'provider_calls_total{data_source="other",outcome="ok"}')).toBe(5);
  });
});

describe('subscriptions on /metrics', () => {
  const open = 'graphql_subscriptions_open{transport="sse"}';
  const events = 'graphql_subscription_events_total{transport="sse"}';

  it('shows a subscription open by transport while it is, and counts the events it was handed', async () => {
    const m0 = await scrape();
    const sub = new Subscriber(app.url, await t.tenant.token(), 'subscription { dataPointsChanged { extractKey subjectIds } }');
    try {
      await sub.ready;
      expect(sub.ended).toBeUndefined();
      expect(delta(m0, await scrape(), open)).toBe(1);
      expect((await t.provider.post(CHANGE, { SubjectIdentifier: 'E-02', DataExtractsOptionsValuesFilter: {} })).status).toBe(200);
      // The report flags both extracts: one event each.
      await eventually(() => sub.changes.length >= 2);
      const m1 = await scrape();
      expect(delta(m0, m1, events)).toBeGreaterThanOrEqual(2);
      // The event names the subject; the metrics do not.
      expect(sub.changes[0]!.subjectIds).toEqual([t.subjects.get('E-02')]);
      expect(m1).not.toContain(t.subjects.get('E-02')!);
    } finally {
      sub.close();
    }
    await eventually(async () => delta(m0, await scrape(), open) === 0);
  });

  it('counts subscriptions over graphql-ws and multipart HTTP under their own transports', async () => {
    const query = 'subscription { dataPointsChanged { extractKey } }';
    const token = await t.tenant.token();
    const m0 = await scrape();
    const ws = createClient({
      url: `${app.url.replace(/^http/, 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: `Bearer ${token}` },
      retryAttempts: 0,
    });
    let wsEvents = 0;
    const unsubscribe = ws.subscribe({ query }, { next: () => wsEvents++, error: () => {}, complete: () => {} });
    const stop = new AbortController();
    const res = await fetch(`${app.url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'multipart/mixed;boundary="graphql";subscriptionSpec="1.0",application/json',
        authorization: `Bearer ${token}`,
      },
      body: JSON.stringify({ query }),
      signal: stop.signal,
    });
    expect(res.status).toBe(200);
    let parts = '';
    const reading = (async () => {
      for await (const chunk of res.body!) parts += Buffer.from(chunk).toString();
    })().catch(() => {});
    try {
      const opened = (m: string, transport: string) => delta(m0, m, `graphql_subscriptions_open{transport="${transport}"}`);
      await eventually(async () => {
        const m = await scrape();
        return opened(m, 'websocket') === 1 && opened(m, 'multipart') === 1;
      });
      expect((await t.provider.post(CHANGE, { SubjectIdentifier: 'E-03', DataExtractsOptionsValuesFilter: {} })).status).toBe(200);
      await eventually(() => wsEvents >= 2 && (parts.match(/dataPointsChanged/g) ?? []).length >= 2);
      const m1 = await scrape();
      expect(delta(m0, m1, 'graphql_subscription_events_total{transport="websocket"}')).toBeGreaterThanOrEqual(2);
      expect(delta(m0, m1, 'graphql_subscription_events_total{transport="multipart"}')).toBeGreaterThanOrEqual(2);
    } finally {
      unsubscribe();
      await ws.dispose();
      stop.abort();
      await reading;
    }
    await eventually(async () => {
      const m = await scrape();
      return ['websocket', 'multipart'].every((transport) => delta(m0, m, `graphql_subscriptions_open{transport="${transport}"}`) === 0);
    });
  });

  it('counts a subscriber ended as a slow consumer and the unread events it dropped (in process)', async () => {
    // The app's metrics object over a feed whose bus messages the test hands in: a reader that reads nothing.
    const metrics = new Metrics();
    const { feed, send } = await feedWithBus(metrics.liveMeter());
    const it = feed.open(principal, {});
    for (let i = 0; i <= MAX_PENDING_BURSTS; i++) send({ t: 't1', x: `x${i}`, s: ['s'], k: 'CHANGED', a: new Date().toISOString() });
    const d = (await it.next()).value as Delivery;
    expect('end' in d && d.end.extensions['code']).toBe('SLOW_CONSUMER');
    const text = await metrics.registry.metrics();
    expect(value(text, 'graphql_subscription_slow_consumers_total')).toBe(1);
    // The bound's unread events (one per extract) and the one that did not fit.
    expect(value(text, 'graphql_subscription_events_dropped_total')).toBe(MAX_PENDING_BURSTS + 1);
    feed.close();
  });
});
