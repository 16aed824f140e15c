import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, createTenant, expectProblem, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant } from './fake-provider.js';

// Issue 30, F3: a subscription refused past SUBSCRIPTIONS_PER_CLIENT carries Retry-After like every other 429
// (P92). F5: @stream's initialCount negative or null, literal or variable, is a request error over JSON, SSE
// and multipart, not a masked internal error (P93). F12: an Accept that refuses a type (q=0) is never
// answered with it, and one refusing all is 406; @defer/@stream in a subscription is a validation error;
// a client's mistake and the drain's 503s are never logged at `error` (level 50), which means the service
// is wrong (P94).

interface LogLine {
  level: number;
  msg?: string;
  [k: string]: unknown;
}

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;
const logs: LogLine[] = [];

beforeAll(async () => {
  provider = await new FakeProvider().start();
  app = await startApp(
    { PROVIDER_BACKOFF_MS: '1', SUBSCRIPTIONS_PER_CLIENT: '2', LOG_LEVEL: 'info' },
    { logStream: { write: (line: string) => logs.push(JSON.parse(line) as LogLine) } },
  );
  t = await createDataTenant(app, provider, 3);
});
afterAll(async () => {
  await app?.close();
  await provider?.close();
});

interface Answer {
  status: number;
  type: string;
  headers: Headers;
  text: string;
}

/**
 * POST /graphql with this Accept; the body read to its end, or for `ms` when it is a stream that stays
 * open (then `open` is true).
 */
async function post(accept: string, query: string, variables?: Record<string, unknown>, ms = 2_000): Promise<Answer & { open: boolean }> {
  const control = new AbortController();
  const timer = setTimeout(() => control.abort(), ms);
  const res = await fetch(`${app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept, authorization: `Bearer ${t.api.token}` },
    body: JSON.stringify({ query, variables }),
    signal: control.signal,
  });
  let text = '';
  let open = false;
  try {
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
  } catch {
    open = true;
  } finally {
    clearTimeout(timer);
  }
  return { status: res.status, type: res.headers.get('content-type') ?? '', headers: res.headers, text, open };
}

/** The GraphQL results in a JSON, SSE (`data:` lines) or multipart/mixed (JSON parts) body. */
function results(a: Answer): any[] {
  if (a.type.startsWith('text/event-stream'))
    return [...a.text.matchAll(/^event: next\ndata: (.*)$/gm)].map((m) => JSON.parse(m[1]!) as unknown);
  if (a.type.startsWith('multipart/mixed')) return [...a.text.matchAll(/\r\n\r\n(\{.*\})\r\n/g)].map((m) => JSON.parse(m[1]!) as unknown);
  return [JSON.parse(a.text) as unknown];
}

/** Log lines at `error` or above written while `fn` ran. */
async function errorsLoggedDuring(fn: () => Promise<void>): Promise<LogLine[]> {
  const from = logs.length;
  await fn();
  // Access log lines are written when the response finishes.
  await new Promise((r) => setTimeout(r, 100));
  return logs.slice(from).filter((l) => l.level >= 50);
}

const EDGES_STREAMED = (count: string) =>
  `query${count === '$n' ? '($n: Int)' : ''} { subjects(first: 3) { edges @stream(initialCount: ${count}) { node { externalId } } } }`;

describe('F5: @stream(initialCount) that is negative or null is a request error', () => {
  const cases: [string, string, Record<string, unknown> | undefined][] = [
    ['literal -1', EDGES_STREAMED('-1'), undefined],
    ['literal null', EDGES_STREAMED('null'), undefined],
    ['variable -1', EDGES_STREAMED('$n'), { n: -1 }],
    ['variable null', EDGES_STREAMED('$n'), { n: null }],
    ['variable default -2', `query($n: Int = -2) { subjects(first: 3) { edges @stream(initialCount: $n) { node { externalId } } } }`, {}],
  ];
  // Each transport with the status GraphQL over HTTP gives a request error there (P62); SSE's is in its event.
  const transports: [string, number][] = [
    ['application/graphql-response+json', 400],
    ['application/json', 200],
    ['text/event-stream', 200],
    ['multipart/mixed', 400],
  ];

  for (const [name, query, variables] of cases) {
    it(`${name}: GRAPHQL_VALIDATION_FAILED naming initialCount over JSON, SSE and multipart, nothing executed or logged at error`, async () => {
      const logged = await errorsLoggedDuring(async () => {
        for (const [accept, status] of transports) {
          const a = await post(accept, query, variables);
          expect(a.status, `${accept}: ${a.text}`).toBe(status);
          expect(a.open).toBe(false);
          const [result, ...more] = results(a);
          expect(more, accept).toEqual([]);
          expect(result.data, accept).toBeUndefined();
          expect(result.errors, accept).toHaveLength(1);
          expect(result.errors[0].extensions, accept).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', status: 400 });
          expect(result.errors[0].message).toMatch(/initialCount must be a non-negative integer/);
          expect(a.text).not.toMatch(/Unexpected error|INTERNAL_SERVER_ERROR/);
        }
      });
      expect(logged).toEqual([]);
    });
  }

  it('a valid count, literal or variable, still streams', async () => {
    for (const [query, variables] of [
      [EDGES_STREAMED('1'), undefined],
      [EDGES_STREAMED('$n'), { n: 1 }],
      [EDGES_STREAMED('$n'), {}],
    ] as const) {
      const a = await post('multipart/mixed', query, variables);
      expect(a.status).toBe(200);
      const parts = results(a);
      const first = parts[0].data.subjects.edges.length;
      const later = parts.slice(1).flatMap((p) => (p.incremental ?? []).flatMap((i: any) => i.items ?? []));
      expect(first + later.length, JSON.stringify(parts)).toBe(3);
      expect(first).toBe(variables && !('n' in variables) ? 0 : 1);
    }
  });
});

/** The live subscription selecting `selection` besides extractKey; `$on` declared when it uses it. */
const SUBSCRIPTION = (selection = '', fragments = '') =>
  `subscription${/\$on\b/.test(selection + fragments) ? '($on: Boolean)' : ''} { dataPointsChanged { extractKey ${selection} } } ${fragments}`;

describe('F12: @defer and @stream inside a subscription are validation errors', () => {
  for (const [name, query, variables] of [
    ['@defer', SUBSCRIPTION('... @defer { kind }'), undefined],
    ['@stream', SUBSCRIPTION('subjectIds @stream'), undefined],
    // The fragment written before the operation that uses it.
    ['@defer in a fragment', `fragment F on DataPointsChange { ... @defer { kind } } ${SUBSCRIPTION('...F')}`, undefined],
    ['@defer(if: $on) with $on true', SUBSCRIPTION('... @defer(if: $on) { kind }'), { on: true }],
    ['@stream(if: $on) with $on left out (if: true)', SUBSCRIPTION('subjectIds @stream(if: $on)'), {}],
  ] as const) {
    it(`${name}: answered at once with the error, no stream opened`, async () => {
      const sse = await post('text/event-stream', query, variables);
      expect(sse.open, 'the stream stayed open').toBe(false);
      const [result] = results(sse);
      expect(result.errors[0].extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', status: 400 });
      expect(result.errors[0].message).toMatch(/directive not supported on subscription operations/);
      const json = await post('application/graphql-response+json', query, variables);
      expect(json.status).toBe(400);
      expect(JSON.parse(json.text).errors[0].message).toMatch(/not supported on subscription operations/);
    });
  }

  it('disabled (`if: false`, literal or variable) the subscription opens as without it', async () => {
    for (const [selection, variables] of [
      ['... @defer(if: false) { kind }', undefined],
      ['subjectIds @stream(if: $on)', { on: false }],
    ] as const) {
      const a = await post('text/event-stream', SUBSCRIPTION(selection), variables, 700);
      expect(a.status).toBe(200);
      expect(a.open, `${selection}: ${a.text}`).toBe(true);
      expect(a.text).not.toMatch(/errors/);
    }
  });

  it('@defer in a query of the same document is still allowed', async () => {
    const a = await post('multipart/mixed', `query Q { subjects(first: 1) { totalCount ... @defer { edges { node { externalId } } } } }`);
    expect(a.status).toBe(200);
    expect(results(a).length).toBeGreaterThan(1);
  });
});

describe('F12: Accept with q=0', () => {
  const QUERY = '{ subjects(first: 1) { totalCount } }';
  it('refusing every type GraphQL answers is 406 problem+json, for a query and a subscription', async () => {
    for (const accept of ['text/event-stream;q=0', 'application/json;q=0, text/event-stream;q=0.000', '*/*;q=0']) {
      for (const query of [QUERY, SUBSCRIPTION()]) {
        const res = await t.api.request('POST', '/graphql', { body: { query }, headers: { accept } });
        const body = expectProblem(res, 406);
        expect(body.detail).toMatch(/GraphQL answers/);
      }
    }
  });

  it('a refused type is never the answer, even when a wildcard or another range also matches it', async () => {
    const json = await post('text/event-stream;q=0, application/json', QUERY);
    expect(json.status).toBe(200);
    expect(json.type).toMatch(/^application\/json/);
    expect(JSON.parse(json.text)).toEqual({ data: { subjects: { totalCount: 3 } } });
    // @defer with SSE refused and */* otherwise: multipart/mixed, the other stream type.
    const deferred = await post(
      'text/event-stream;q=0, */*',
      `{ subjects(first: 1) { totalCount ... @defer { edges { node { externalId } } } } }`,
    );
    expect(deferred.status).toBe(200);
    expect(deferred.type).toMatch(/^multipart\/mixed/);
    expect(results(deferred).length).toBeGreaterThan(1);
    // A subscription with SSE refused and */* otherwise: Apollo's multipart protocol (P137), never SSE.
    const sub = await post('text/event-stream;q=0, */*', SUBSCRIPTION(), undefined, 700);
    expect(sub.status).toBe(200);
    expect(sub.type).toBe('multipart/mixed;boundary="graphql";subscriptionSpec="1.0"');
    expect(sub.open).toBe(true);
    const strict = await post('application/json;q=0, application/graphql-response+json', '{ nope }');
    expect(strict.status).toBe(400);
    expect(strict.type).toMatch(/^application\/graphql-response\+json/);
  });

  it("a refusal before execution (429 of the client's rate limit) is not written in a refused type either", async () => {
    const limited = await startApp({ RATE_LIMIT_REQUESTS: '1' });
    try {
      const api = await (await createTenant(limited)).client();
      expect((await api.gql('{ dataExtracts { totalCount } }')).status).toBe(200);
      const res = await api.request('POST', '/graphql', {
        body: { query: '{ dataExtracts { totalCount } }' },
        headers: { accept: 'application/graphql-response+json;q=0, application/json' },
      });
      expect(res.status).toBe(429);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(res.body.errors[0].extensions.code).toBe('TOO_MANY_REQUESTS');
    } finally {
      await limited.close();
    }
  });

  it('parameters other than q do not refuse a type (multipart/mixed;deferSpec=20220824)', async () => {
    const a = await post(
      'multipart/mixed;deferSpec=20220824, application/json;q=0.5',
      `{ subjects(first: 1) { totalCount ... @defer { edges { node { externalId } } } } }`,
    );
    expect(a.status).toBe(200);
    expect(a.type).toMatch(/^multipart\/mixed/);
  });
});

describe('F3: the 429 of a subscription past SUBSCRIPTIONS_PER_CLIENT', () => {
  it('carries Retry-After, like every other 429', async () => {
    const control = new AbortController();
    const open = async () =>
      fetch(`${app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${t.api.token}` },
        body: JSON.stringify({ query: SUBSCRIPTION() }),
        signal: control.signal,
      });
    try {
      // Answered once the subscription is open on the server.
      for (let i = 0; i < 2; i++) expect((await open()).status).toBe(200);
      const refused = await open();
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('1');
      const text = await refused.text();
      expect(text).toMatch(/"code":"TOO_MANY_REQUESTS"/);
      expect(text).toMatch(/SUBSCRIPTIONS_PER_CLIENT = 2/);
    } finally {
      control.abort();
    }
  });
});

describe('F12: nothing a client does is logged at error', () => {
  it('a U+0000 in a key, over GraphQL and REST, and the other usual mistakes: 4xx, logged below error', async () => {
    const logged = await errorsLoggedDuring(async () => {
      const key = await t.api.gql('query($k: String!) { dataExtract(key: $k) { key } }', { k: 'a\u0000b' });
      expect(key.status).toBe(200);
      expect(key.body.errors[0].extensions).toEqual({ code: 'BAD_REQUEST', status: 400 });
      const literal = await t.api.gql('{ structuralEntity(key: "a\\u0000b") { key } }');
      expect(literal.body.errors[0].extensions).toEqual({ code: 'BAD_REQUEST', status: 400 });
      const statuses = [
        (await t.api.get('/api/v1/structuralEntity/a%00b')).status,
        (await t.api.get('/api/v1/structuralEntity/%zz')).status,
        (await t.api.request('PUT', '/api/v1/structuralEntity', { raw: '{"Key":', headers: { 'content-type': 'application/json' } }))
          .status,
        (await t.api.request('PUT', '/api/v1/structuralEntity', { raw: 'x', headers: { 'content-type': 'text/plain' } })).status,
        (await t.api.request('POST', '/graphql', { raw: '{"query":', headers: { 'content-type': 'application/json' } })).status,
        (await t.api.request('DELETE', '/openapi.json')).status,
        (await fetch(`${app.url}/graphql`, { method: 'POST', headers: { authorization: 'Bearer nope' } })).status,
      ];
      for (const s of statuses) expect(s).toBeGreaterThanOrEqual(400);
      for (const s of statuses) expect(s).toBeLessThan(500);
    });
    expect(logged).toEqual([]);
    // Still logged, below error: the access log has them at info.
    expect(logs.some((l) => l.level === 30 && (l['res'] as { statusCode?: number } | undefined)?.statusCode === 400)).toBe(true);
  });

  // Last: the instance drains.
  it("the drain's /readyz 503s (and its refused subscriptions) are logged at info", async () => {
    const logged = await errorsLoggedDuring(async () => {
      app.drain!();
      for (let i = 0; i < 3; i++) expectProblem(await t.api.get('/readyz'), 503);
      const refused = await post('text/event-stream', SUBSCRIPTION());
      expect(refused.status).toBe(503);
    });
    expect(logged).toEqual([]);
    const readyz = logs.filter((l) => (l['req'] as { path?: string } | undefined)?.path === '/readyz');
    expect(readyz.length).toBeGreaterThanOrEqual(3);
    for (const l of readyz) expect(l.level).toBe(30);
  });
});
