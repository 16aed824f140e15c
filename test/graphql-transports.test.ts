import { setTimeout as sleep } from 'node:timers/promises';
import { ApolloClient, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { Client as UrqlClient, subscriptionExchange } from '@urql/core';
import { type Client as WsClient, createClient } from 'graphql-ws';
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type TestApp, startApp, startPeer } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually } from './fake-provider.js';
import { type Change, Subscriber, shortLivedToken } from './live-updates.js';

// Issue 33: subscriptions over every common transport, one implementation behind them. graphql-ws over a
// WebSocket on /graphql (P136) and Apollo's multipart HTTP subscriptions (P137) beside SSE, read with the
// real clients (Apollo Client, urql, graphql-ws); the same token check, subscription limit, slow-consumer
// rule and token-expiry end; and what a client that accepts only JSON gets for @defer/@stream (P138).

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const SUBSCRIPTION = `subscription { dataPointsChanged(extractKey: "steps") { extractKey subjectIds kind at } }`;
const PER_CLIENT = 3;
/** The smallest bound allowed: a client that reads nothing is cut after a few answers. */
const MAX_BUFFERED = 64 * 1024;

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;
const logLines: string[] = [];
const cleanups: (() => void)[] = [];

beforeAll(async () => {
  provider = await new FakeProvider().start();
  app = await startApp(
    {
      PROVIDER_BACKOFF_MS: '1',
      SUBSCRIPTIONS_PER_CLIENT: String(PER_CLIENT),
      WEBSOCKET_MAX_BUFFERED_BYTES: String(MAX_BUFFERED),
      // The slow reader reads the close frame after what waits before it: the connection must still be there.
      RESPONSE_WRITE_TIMEOUT_MS: '120000',
      LOG_LEVEL: 'info',
    },
    {
      logStream: new Writable({
        write(chunk: Buffer, _enc, done) {
          logLines.push(chunk.toString());
          done();
        },
      }),
    },
  );
  t = await createDataTenant(app, provider, 2);
});
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});
afterAll(async () => {
  await app?.close();
  await provider?.close();
});

const wsUrl = (a: TestApp) => `${a.url.replace(/^http/, 'ws')}/graphql`;

/** A graphql-ws client (Node's WebSocket from `ws`), closed after the test. */
function wsClient(a: TestApp, connectionParams: Record<string, unknown>): WsClient {
  const client = createClient({ url: wsUrl(a), webSocketImpl: WebSocket, connectionParams, retryAttempts: 0 });
  cleanups.push(() => void client.dispose());
  return client;
}

/** Posts a change report for E-01 until `heard()` (a subscription may still be opening on the server when the first is posted). */
async function changeUntil(heard: () => boolean): Promise<void> {
  await eventually(async () => {
    if (heard()) return true;
    expect((await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: {} })).status).toBe(200);
    await sleep(150);
    return heard();
  }, 10_000);
}

/** A series' value on an app's /metrics (absent: 0). */
async function metricOf(a: TestApp, series: string): Promise<number> {
  const text = await (await fetch(`${a.url}/metrics`)).text();
  return Number(
    text
      .split('\n')
      .find((l) => l.startsWith(`${series} `))
      ?.split(' ')[1] ?? 0,
  );
}

/** graphql_subscriptions_open by transport. */
async function openSubscriptions(a = app): Promise<Record<'sse' | 'multipart' | 'other', number>> {
  const value = (transport: string) => metricOf(a, `graphql_subscriptions_open{transport="${transport}"}`);
  return { sse: await value('sse'), multipart: await value('multipart'), other: await value('other') };
}

interface RawSocket {
  ws: WebSocket;
  messages: any[];
  closed: Promise<{ code: number; reason: string }>;
}

/** A WebSocket speaking graphql-transport-ws by hand: `connection_init` with `params` once open. */
async function rawSocket(a: TestApp, params: Record<string, unknown> | undefined): Promise<RawSocket> {
  const ws = new WebSocket(wsUrl(a), 'graphql-transport-ws');
  cleanups.push(() => ws.terminate());
  const messages: any[] = [];
  ws.on('message', (data: Buffer) => messages.push(JSON.parse(data.toString())));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  ws.send(JSON.stringify({ type: 'connection_init', ...(params ? { payload: params } : {}) }));
  return { ws, messages, closed };
}

describe('graphql-ws over a WebSocket on /graphql (P136)', () => {
  it('Apollo Client with GraphQLWsLink receives a dataPointsChanged event', async () => {
    // P136: the same subscription, the token in connectionParams.
    const token = await t.tenant.token();
    const apollo = new ApolloClient({
      link: new GraphQLWsLink(wsClient(app, { Authorization: `Bearer ${token}` })),
      cache: new InMemoryCache(),
    });
    const events: Change[] = [];
    const sub = apollo.subscribe<{ dataPointsChanged: Change }>({ query: gql(SUBSCRIPTION) }).subscribe({
      next: (r) => r.data && events.push(r.data.dataPointsChanged),
    });
    cleanups.push(() => sub.unsubscribe());
    await changeUntil(() => events.length > 0);
    expect(events[0]).toMatchObject({ extractKey: 'steps', subjectIds: [t.subjects.get('E-01')], kind: 'CHANGED' });
  });

  it('urql with subscriptionExchange over graphql-ws receives a dataPointsChanged event (token as `token`)', async () => {
    const ws = wsClient(app, { token: await t.tenant.token() });
    const urql = new UrqlClient({
      url: `${app.url}/graphql`,
      exchanges: [
        subscriptionExchange({
          forwardSubscription: (request) => ({
            subscribe: (sink) => ({ unsubscribe: ws.subscribe({ ...request, query: request.query ?? '' }, sink) }),
          }),
        }),
      ],
    });
    const events: Change[] = [];
    const sub = urql.subscription<{ dataPointsChanged: Change }>(SUBSCRIPTION, {}).subscribe((r) => {
      if (r.data) events.push(r.data.dataPointsChanged);
    });
    cleanups.push(() => sub.unsubscribe());
    await changeUntil(() => events.length > 0);
    expect(events[0]).toMatchObject({ extractKey: 'steps', kind: 'CHANGED' });
  });

  it('runs queries and mutations through the same plugins: limits, error codes (D4), permissions', async () => {
    // P136, D4, D11: every operation over the socket runs through Yoga as an HTTP request's.
    const ws = wsClient(app, { Authorization: `Bearer ${await t.tenant.token()}` });
    const run = (query: string) =>
      new Promise<any>((resolve, reject) => {
        let last: unknown;
        ws.subscribe({ query }, { next: (r) => (last = r), error: reject, complete: () => resolve(last) });
      });
    expect(await run('{ subjects(first: 2) { totalCount edges { node { externalId } } } }')).toEqual({
      data: { subjects: { totalCount: 2, edges: [{ node: { externalId: 'E-01' } }, { node: { externalId: 'E-02' } }] } },
    });
    // A validation error and the D11 cost limit answer as over HTTP: coded, without Yoga's internals.
    const invalid = await run('{ nope }');
    expect(invalid.errors).toEqual([expect.objectContaining({ extensions: { code: 'GRAPHQL_VALIDATION_FAILED', status: 400 } })]);
    const costly = await run(
      '{ subjects(first: 1000) { edges { node { dataPoints(extractKey: "steps", first: 1000) { totalCount } } } } }',
    );
    expect(costly.errors[0].message).toMatch(/^The query cost \d+ exceeds the limit of 50000\.$/);
    expect(costly.errors[0].extensions).toEqual({ code: 'GRAPHQL_VALIDATION_FAILED', status: 400 });
    // A mutation a reader may not run is refused at its field (D4: FORBIDDEN, 403).
    const reader = wsClient(app, {
      Authorization: `Bearer ${await t.tenant.token({ clientId: 'reader', clientSecret: 'reader-client-secret' })}`,
    });
    const refused = await new Promise<any>((resolve, reject) => {
      let last: unknown;
      reader.subscribe(
        {
          query: `mutation { createDataExtract(input: { key: "x", name: "X", dataSourceKey: "wearables", options: {} }) { dataExtract { key } } }`,
        },
        { next: (r) => (last = r), error: reject, complete: () => resolve(last) },
      );
    });
    expect(refused.errors[0].extensions).toMatchObject({ code: 'FORBIDDEN', status: 403 });
    expect(refused.errors[0].extensions.http).toBeUndefined();
  });

  it('refuses variables over the limits (a lone surrogate, nesting too deep) as over HTTP: 400, nothing written', async () => {
    // P47: one rule for every transport (Yoga's parameters), the socket's included.
    const ws = wsClient(app, { Authorization: `Bearer ${await t.tenant.token()}` });
    const run = (query: string, variables: Record<string, unknown>) =>
      new Promise<any>((resolve, reject) => {
        let last: unknown;
        ws.subscribe({ query, variables }, { next: (r) => (last = r), error: reject, complete: () => resolve(last) });
      });
    const create = `mutation ($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key } } }`;
    const input = (key: string) => ({ key, name: 'X', dataSourceKey: 'wearables', options: {} });
    let deep: unknown = 1;
    for (let i = 0; i < 40; i++) deep = { d: deep };
    for (const [key, variables] of [
      ['ws-surrogate', { input: { ...input('ws-surrogate'), name: 'X\uD800' } }],
      ['ws-deep', { input: { ...input('ws-deep'), options: { deep } } }],
    ] as const) {
      const answer = await run(create, variables);
      expect(answer.data).toBeUndefined();
      expect(answer.errors).toEqual([expect.objectContaining({ extensions: { code: 'BAD_REQUEST', status: 400 } })]);
      expect(answer.errors[0].message).toMatch(/^Variable \$/);
      expect(await run(`{ dataExtract(key: "${key}") { key } }`, {})).toEqual({ data: { dataExtract: null } });
    }
  });

  it('streams a @defer query as messages (each part one)', async () => {
    const ws = wsClient(app, { token: await t.tenant.token() });
    const parts: any[] = [];
    await new Promise((resolve, reject) =>
      ws.subscribe(
        { query: `{ subjects(first: 2) { edges { node { externalId ... @defer { dataPoints(extractKey: "steps") { totalCount } } } } } }` },
        { next: (r) => parts.push(r), error: reject, complete: () => resolve(undefined) },
      ),
    );
    expect(parts[0]).toMatchObject({
      data: { subjects: { edges: [{ node: { externalId: 'E-01' } }, { node: { externalId: 'E-02' } }] } },
      hasNext: true,
    });
    expect(parts.slice(1).flatMap((p) => p.incremental ?? [])).toEqual([
      expect.objectContaining({ data: { dataPoints: { totalCount: 3 } } }),
      expect.objectContaining({ data: { dataPoints: { totalCount: 3 } } }),
    ]);
    expect(parts.at(-1).hasNext).toBe(false);
  });

  it('closes a connection that never sends its connection_init (4408, graphql-ws)', async () => {
    const ws = new WebSocket(wsUrl(app), 'graphql-transport-ws');
    cleanups.push(() => ws.terminate());
    const closed = await new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    expect(closed).toEqual({ code: 4408, reason: 'Connection initialisation timeout' });
  });

  it('refuses a connection without a valid token: 4401 with the reason; a token without the scope 4403', async () => {
    // P136: the token check of an HTTP request's header; its refusal as a close code and reason.
    const missing = await rawSocket(app, undefined);
    expect(await missing.closed).toEqual({ code: 4401, reason: 'UNAUTHENTICATED: An access token is required.' });
    const bad = await rawSocket(app, { Authorization: 'Bearer not-a-token' });
    const closed = await bad.closed;
    expect(closed.code).toBe(4401);
    expect(closed.reason).toMatch(/^UNAUTHENTICATED: /);
    const providerToken = await t.tenant.token({
      clientId: 'provider',
      clientSecret: 'provider-client-secret',
      scope: 'ServiceDataProviderApi',
    });
    const scoped = await rawSocket(app, { token: providerToken });
    expect(await scoped.closed).toEqual({ code: 4403, reason: 'FORBIDDEN: The access token lacks the scope ServiceApi.' });
    // No operation ran on any of them.
    expect([...missing.messages, ...bad.messages, ...scoped.messages]).toEqual([]);
  });

  it('counts WebSocket subscriptions under SUBSCRIPTIONS_PER_CLIENT with SSE ones (429, P55)', async () => {
    // P136, P55: one count per client, whatever the transport.
    const token = await t.tenant.token();
    const sse = new Subscriber(app.url, token, SUBSCRIPTION);
    cleanups.push(() => sse.close());
    await sse.ready;
    const socket = await rawSocket(app, { token });
    await eventually(() => socket.messages.some((m) => m.type === 'connection_ack'));
    for (let i = 1; i <= PER_CLIENT; i++)
      socket.ws.send(JSON.stringify({ id: String(i), type: 'subscribe', payload: { query: SUBSCRIPTION } }));
    // One SSE stream and two WebSocket subscriptions fill the client's three places: the third is refused.
    await eventually(() => socket.messages.some((m) => m.type === 'next' && m.payload.errors));
    const refused = socket.messages.filter((m) => m.type === 'next' && m.payload.errors);
    expect(refused).toHaveLength(1);
    expect(refused[0].payload.errors[0].extensions).toMatchObject({ code: 'TOO_MANY_REQUESTS', status: 429 });
    expect(refused[0].payload.errors[0].message).toMatch(/SUBSCRIPTIONS_PER_CLIENT = 3/);
    // Ending one (graphql-ws `complete`) frees its place: a new one (sent until the server has seen the end) hears changes.
    const open = ['1', '2', '3'].filter((id) => id !== refused[0].id);
    socket.ws.send(JSON.stringify({ id: open[0], type: 'complete' }));
    let heard: any;
    for (let again = 1; !heard && again <= 20; again++) {
      const id = `again-${again}`;
      socket.ws.send(JSON.stringify({ id, type: 'subscribe', payload: { query: SUBSCRIPTION } }));
      await changeUntil(() => socket.messages.some((m) => m.id === id && m.type === 'next'));
      const answer = socket.messages.find((m) => m.id === id && m.type === 'next');
      if (!answer.payload.errors) heard = answer.payload.data.dataPointsChanged;
    }
    expect(heard).toMatchObject({ extractKey: 'steps', kind: 'CHANGED' });
    expect(socket.ws.readyState).toBe(WebSocket.OPEN);
  });

  it('refuses an operation past WEBSOCKET_MAX_OPERATIONS under way on one connection (TOO_MANY_REQUESTS); one ending frees its place', async () => {
    // P136: what one connection may have under way is bounded, as an HTTP client's connections are.
    const capped = await startApp({ WEBSOCKET_MAX_OPERATIONS: '2' });
    try {
      const ct = await createDataTenant(capped, provider, 1);
      const socket = await rawSocket(capped, { token: await ct.tenant.token() });
      await eventually(() => socket.messages.some((m) => m.type === 'connection_ack'));
      for (const id of ['a', 'b', 'c']) socket.ws.send(JSON.stringify({ id, type: 'subscribe', payload: { query: SUBSCRIPTION } }));
      await eventually(() => socket.messages.some((m) => m.id === 'c'));
      expect(socket.messages.find((m) => m.id === 'c')).toEqual({
        id: 'c',
        type: 'error',
        payload: [
          expect.objectContaining({
            message: 'This connection has 2 operations under way (WEBSOCKET_MAX_OPERATIONS): complete one first.',
            extensions: expect.objectContaining({ code: 'TOO_MANY_REQUESTS', status: 429 }),
          }),
        ],
      });
      expect(socket.messages.filter((m) => m.id === 'a' || m.id === 'b')).toEqual([]);
      // Ended by the client, the first frees its place (sent until the server has seen the end).
      socket.ws.send(JSON.stringify({ id: 'a', type: 'complete' }));
      let answered: any;
      for (let again = 1; !answered && again <= 50; again++) {
        socket.ws.send(JSON.stringify({ id: `q${again}`, type: 'subscribe', payload: { query: '{ __typename }' } }));
        await eventually(() => socket.messages.some((m) => m.id === `q${again}`));
        answered = socket.messages.find((m) => m.id === `q${again}` && m.type === 'next');
      }
      expect(answered.payload).toEqual({ data: { __typename: 'Query' } });
      socket.ws.terminate();
    } finally {
      await capped.close();
    }
  });

  it('ends a subscription when its token expires (UNAUTHENTICATED, as over SSE), then closes the connection (4403)', async () => {
    // P136: the feed's expiry end, then the connection's.
    const socket = await rawSocket(app, { token: await shortLivedToken(app, t.tenant.key, 2) });
    await eventually(() => socket.messages.some((m) => m.type === 'connection_ack'));
    socket.ws.send(JSON.stringify({ id: 's', type: 'subscribe', payload: { query: SUBSCRIPTION } }));
    expect(await socket.closed).toEqual({ code: 4403, reason: 'The access token expired: connect again with a new token.' });
    const ended = socket.messages.filter((m) => m.id === 's');
    expect(ended[0].payload.errors[0].extensions).toMatchObject({ code: 'UNAUTHENTICATED', status: 401 });
  });

  it('cuts a client that does not read (1008 SLOW_CONSUMER past WEBSOCKET_MAX_BUFFERED_BYTES)', async () => {
    // P136, P78: what waits for a client is bounded.
    const socket = await rawSocket(app, { token: await t.tenant.token() });
    await eventually(() => socket.messages.some((m) => m.type === 'connection_ack'));
    socket.ws.pause();
    // Answers of ~25 KB, none read: the kernel's buffers fill (a few MB), then the socket's, past the bound.
    const schema = '{ __schema { types { name description fields { name description args { name description type { name } } } } } }';
    const cuts = () => logLines.filter((l) => l.includes('client not reading')).length;
    const before = cuts();
    let sent = 0;
    for (; cuts() === before && sent < 4_000; sent++) {
      socket.ws.send(JSON.stringify({ id: `q${sent}`, type: 'subscribe', payload: { query: schema } }));
      // In batches within admission's queue (ADMISSION_QUEUE_LIMIT 100).
      if (sent % 50 === 49) await sleep(100);
    }
    await eventually(() => cuts() > before, 20_000);
    socket.ws.resume();
    const closed = await socket.closed;
    expect(closed.code).toBe(1008);
    expect(closed.reason).toMatch(/^SLOW_CONSUMER: more than 65536 bytes waited for the client/);
    // What it was sent before the cut arrived whole (each answer once, complete), and not all of it.
    const answered = socket.messages.filter((m) => m.type === 'next');
    expect(answered.length).toBeLessThan(sent);
    expect(new Set(answered.map((m) => m.id)).size).toBe(answered.length);
    expect(answered.every((m) => m.payload.data?.__schema.types.length > 0)).toBe(true);
  });

  it('closes every connection at the shutdown drain (1001) and refuses new ones (503)', async () => {
    // P136, P53.
    const peer = await startPeer(app, { LOG_LEVEL: 'silent' });
    try {
      const token = await t.tenant.token();
      const socket = await rawSocket(peer, { token });
      await eventually(() => socket.messages.some((m) => m.type === 'connection_ack'));
      socket.ws.send(JSON.stringify({ id: 's', type: 'subscribe', payload: { query: SUBSCRIPTION } }));
      await eventually(async () => (await metricOf(peer, 'graphql_subscriptions_open{transport="websocket"}')) === 1);
      peer.drain!();
      expect(await socket.closed).toEqual({ code: 1001, reason: 'The service instance is shutting down: connect again.' });
      // The subscription's end went out before the close.
      expect(socket.messages.filter((m) => m.id === 's')).toEqual([
        expect.objectContaining({
          type: 'next',
          payload: expect.objectContaining({
            errors: [expect.objectContaining({ extensions: expect.objectContaining({ code: 'SERVICE_UNAVAILABLE' }) })],
          }),
        }),
        { id: 's', type: 'complete' },
      ]);
      const late = new WebSocket(wsUrl(peer), 'graphql-transport-ws');
      const status = await new Promise<number | undefined>((resolve) => {
        late.on('unexpected-response', (_req, res) => resolve(res.statusCode));
        late.on('error', () => resolve(undefined));
      });
      expect(status).toBe(503);
    } finally {
      await peer.close();
    }
  });
});

describe("Apollo's multipart HTTP subscriptions (P137)", () => {
  it('Apollo Client with a plain HttpLink receives a dataPointsChanged event', async () => {
    // P137
    const apollo = new ApolloClient({
      link: new HttpLink({ uri: `${app.url}/graphql`, headers: { authorization: `Bearer ${await t.tenant.token()}` } }),
      cache: new InMemoryCache(),
    });
    const events: Change[] = [];
    const errors: unknown[] = [];
    const sub = apollo.subscribe<{ dataPointsChanged: Change }>({ query: gql(SUBSCRIPTION) }).subscribe({
      next: (r) => {
        if (r.data) events.push(r.data.dataPointsChanged);
        if (r.error) errors.push(r.error);
      },
      error: (e) => errors.push(e),
    });
    cleanups.push(() => sub.unsubscribe());
    await changeUntil(() => events.length > 0 || errors.length > 0);
    expect(errors).toEqual([]);
    expect(events[0]).toMatchObject({ extractKey: 'steps', subjectIds: [t.subjects.get('E-01')], kind: 'CHANGED' });
  });

  it('answers with the protocol: its Content-Type, each event as {"payload": …}, a heartbeat {} every 5 s', async () => {
    // P137
    const controller = new AbortController();
    cleanups.push(() => controller.abort());
    const res = await fetch(`${app.url}/graphql`, {
      method: 'POST',
      signal: controller.signal,
      headers: {
        'content-type': 'application/json',
        accept: 'multipart/mixed;boundary="graphql";subscriptionSpec="1.0",application/json',
        authorization: `Bearer ${await t.tenant.token()}`,
      },
      body: JSON.stringify({ query: SUBSCRIPTION }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('multipart/mixed;boundary="graphql";subscriptionSpec="1.0"');
    let text = '';
    const reader = res.body!.getReader();
    void (async () => {
      for (;;) {
        const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
        if (done) return;
        text += Buffer.from(value!).toString();
      }
    })();
    const parts = () =>
      text
        .split('\r\n--graphql')
        .slice(1, -1)
        .map((p) => JSON.parse(p.slice(p.indexOf('\r\n\r\n') + 4)));
    await changeUntil(() => parts().some((p) => p.payload));
    expect(parts().find((p) => p.payload)).toEqual({
      payload: { data: { dataPointsChanged: expect.objectContaining({ extractKey: 'steps', kind: 'CHANGED' }) } },
    });
    await eventually(() => parts().some((p) => Object.keys(p).length === 0), 12_000);
    expect(text.startsWith('\r\n--graphql\r\nContent-Type: application/json; charset=utf-8\r\n\r\n')).toBe(true);
  });

  it('a client preferring SSE still gets SSE, and is counted so on /metrics', async () => {
    // P137, P142: the transport served is the one counted.
    for (const accept of ['text/event-stream, multipart/mixed', '*/*']) {
      const m0 = await openSubscriptions();
      const controller = new AbortController();
      cleanups.push(() => controller.abort());
      const res = await fetch(`${app.url}/graphql`, {
        method: 'POST',
        signal: controller.signal,
        headers: { 'content-type': 'application/json', accept, authorization: `Bearer ${t.api.token}` },
        body: JSON.stringify({ query: SUBSCRIPTION }),
      });
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      await eventually(async () => (await openSubscriptions()).sse === m0.sse + 1);
      expect(await openSubscriptions()).toMatchObject({ multipart: m0.multipart, other: m0.other });
      controller.abort();
      await eventually(async () => (await openSubscriptions()).sse === m0.sse);
    }
  });

  it('ends the subscription of a multipart or SSE reader that stops reading, then goes: the open gauge goes back', async () => {
    // P137, P142: the server adapter neither cancels a body it stopped sending nor ends its events; the subscription ends with its response.
    const stalling = await startApp({ PROVIDER_BACKOFF_MS: '1', GRAPHQL_MAX_BREADTH: '5000' });
    try {
      const st = await createDataTenant(stalling, provider, 2);
      // Events of ~200 KB: a client that reads nothing fills the kernel's buffers after a few, and the answer waits for it.
      const wide = `subscription { dataPointsChanged(extractKey: "steps") { ${Array.from({ length: 4000 }, (_, i) => `a${i}: subjectIds`).join(' ')} } }`;
      const body = JSON.stringify({ query: wide });
      for (const [transport, accept] of [
        ['multipart', 'multipart/mixed;subscriptionSpec="1.0"'],
        ['sse', 'text/event-stream'],
      ] as const) {
        const open = async () => (await openSubscriptions(stalling))[transport];
        const open0 = await open();
        const socket = connect(Number(new URL(stalling.url).port), '127.0.0.1');
        cleanups.push(() => socket.destroy());
        socket.on('error', () => undefined);
        socket.write(
          `POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${await st.tenant.token()}\r\n` +
            `Content-Type: application/json\r\nAccept: ${accept}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
        socket.pause();
        await eventually(async () => (await open()) === open0 + 1);
        // Changes until the answer no longer takes its events (the kernel's buffers full): five in a row not handed over.
        const events = () => metricOf(stalling, `graphql_subscription_events_total{transport="${transport}"}`);
        let [last, still] = [await events(), 0];
        for (let i = 0; still < 5 && i < 200; i++) {
          expect((await st.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: {} })).status).toBe(200);
          await sleep(150);
          const now = await events();
          [last, still] = [now, now === last ? still + 1 : 0];
        }
        expect(still).toBe(5);
        socket.destroy();
        await eventually(async () => (await open()) === open0, 10_000);
      }
    } finally {
      await stalling.close();
    }
  }, 60_000);
});

describe('a client that accepts only JSON (P138)', () => {
  const json = async (query: string, accept = 'application/json') => {
    const res = await fetch(`${app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept, authorization: `Bearer ${t.api.token}` },
      body: JSON.stringify({ query }),
    });
    return { status: res.status, type: res.headers.get('content-type'), body: (await res.json()) as any };
  };

  it('gets a deferred or streamed query whole, in one JSON answer', async () => {
    // P138
    for (const accept of ['application/json', 'application/graphql-response+json']) {
      const deferred = await json(
        `{ subjects(first: 2) { edges { node { externalId ... @defer { dataPoints(extractKey: "steps") { totalCount } } } } } }`,
        accept,
      );
      expect(deferred.status).toBe(200);
      expect(deferred.type).toMatch(new RegExp(`^${accept.replace('+', '\\+')}`));
      expect(deferred.body).toEqual({
        data: {
          subjects: {
            edges: [
              { node: { externalId: 'E-01', dataPoints: { totalCount: 3 } } },
              { node: { externalId: 'E-02', dataPoints: { totalCount: 3 } } },
            ],
          },
        },
      });
    }
    const streamed = await json(`{ subjects(first: 2) { edges @stream(initialCount: 0) { node { externalId } } } }`);
    expect(streamed.body).toEqual({ data: { subjects: { edges: [{ node: { externalId: 'E-01' } }, { node: { externalId: 'E-02' } }] } } });
  });

  it('gets 406 for a subscription, naming the Accept to send', async () => {
    // P138
    const r = await json(SUBSCRIPTION);
    expect(r.status).toBe(406);
    // D5: problem+json, as the endpoint's other 406.
    expect(r.type).toBe('application/problem+json; charset=utf-8');
    expect(r.body).toMatchObject({ status: 406, title: 'Not Acceptable' });
    expect(r.body.detail).toMatch(/text\/event-stream.*multipart\/mixed.*graphql-ws/);
  });
});
