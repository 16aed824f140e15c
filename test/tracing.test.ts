import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { FULL_CLIENT, freePort, openTestDatabase, tenantConfig } from './helpers.js';
import { FakeProvider, PROVIDER_CLIENT, eventually, providerDataSource } from './fake-provider.js';

// P139: OpenTelemetry traces of the real process, started as `npm start` starts it (its script's node
// arguments, the preload included), exporting OTLP/HTTP as JSON to a receiver this test runs on loopback.
// The batch processor's delay is set beyond the test, so every span arrives through the shutdown's flush
// (SIGTERM). P141: the span tree of a REST list and of a data points read, on the database of this run
// (PostgreSQL: the pg instrumentation's statement spans; PGlite: the service's own). P140: the trace id in
// problem+json and in the log lines. P141: an operation's span is failed by a service's error only, never the
// server span by a GraphQL result; background work a request started is not in its trace.

const NODE = process.execPath;
const SERVER = 'ssdi-service';
const HTTP = '@opentelemetry/instrumentation-http';
const UNDICI = '@opentelemetry/instrumentation-undici';
const PG = '@opentelemetry/instrumentation-pg';
/** OTLP's span kinds. */
const KIND = { internal: 1, server: 2, client: 3 } as const;

/** A span as the receiver got it, its attributes flattened. */
interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  scope: string;
  service: unknown;
  attributes: Record<string, unknown>;
  /** OTLP's status: code 2 is an error. */
  status?: { code?: number };
}

type AnyValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
type KeyValue = { key: string; value: AnyValue };
const valueOf = (v: AnyValue): unknown =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.boolValue ?? v.doubleValue;
const flat = (kvs: KeyValue[] | undefined) => Object.fromEntries((kvs ?? []).map((a) => [a.key, valueOf(a.value)]));

/** A trace collector on loopback: OTLP/HTTP with JSON bodies (POST /v1/traces). */
class OtlpReceiver {
  url = '';
  spans: ReceivedSpan[] = [];
  private server!: Server;

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        if (req.method !== 'POST' || req.url !== '/v1/traces' || !/^application\/json/.test(req.headers['content-type'] ?? '')) {
          return void res.writeHead(404).end();
        }
        const doc = JSON.parse(body) as {
          resourceSpans: {
            resource: { attributes: KeyValue[] };
            scopeSpans: {
              scope: { name: string };
              spans: (Omit<ReceivedSpan, 'attributes' | 'scope' | 'service'> & { attributes: KeyValue[] })[];
            }[];
          }[];
        };
        for (const rs of doc.resourceSpans) {
          const service = flat(rs.resource.attributes)['service.name'];
          for (const ss of rs.scopeSpans)
            for (const s of ss.spans)
              this.spans.push({ ...s, parentSpanId: s.parentSpanId ?? '', scope: ss.scope.name, service, attributes: flat(s.attributes) });
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** The spans of `trace` below `ancestor` (at any depth). */
function descendants(trace: ReceivedSpan[], ancestor: ReceivedSpan): ReceivedSpan[] {
  const below = trace.filter((s) => s.parentSpanId === ancestor.spanId);
  return below.flatMap((s) => [s, ...descendants(trace, s)]);
}

/** The one span of `spans` that `match` picks. */
function one(spans: ReceivedSpan[], match: (s: ReceivedSpan) => boolean, what: string): ReceivedSpan {
  const found = spans.filter(match);
  expect(
    found.map((s) => s.name),
    `${what} in ${JSON.stringify(spans.map((s) => [s.scope, s.name]))}`,
  ).toHaveLength(1);
  return found[0]!;
}

const statementText = (s: ReceivedSpan) => String(s.attributes['db.query.text'] ?? s.attributes['db.statement'] ?? '');

/** A W3C `traceparent` of a caller: a new trace id and the caller's span id. */
function callerContext() {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

/** The node arguments of `npm start` (package.json's script without its `node`). */
async function startArguments(): Promise<string[]> {
  const pkg = JSON.parse(await readFile('package.json', 'utf8')) as { scripts: { start: string } };
  const [node, ...args] = pkg.scripts.start.split(/\s+/);
  expect(node).toBe('node');
  return args;
}

/** A JSON log line of the service. */
interface Line {
  msg: string;
  req?: { id: string; path: string };
  trace_id?: string;
  span_id?: string;
}

let receiver: OtlpReceiver;
let provider: FakeProvider;
let child: ChildProcess;
let out = '';
let exitCode: number | null;
let dir = '';
let disposeDb: (() => Promise<void>) | undefined;
const onPostgres = Boolean(inject('pgTemplate'));

/** What the test asked and what it was answered. */
const asked = {
  list: { ...callerContext(), status: 0, requestId: '' },
  read: { ...callerContext(), status: 0, requestId: '', body: '', traceparents: [] as (string | undefined)[] },
  missing: { status: 0, requestId: '', body: {} as Record<string, unknown> },
  unsampled: { ...callerContext(), status: 0, requestId: '', body: {} as Record<string, unknown> },
  unknownExtract: { ...callerContext(), status: 0, body: '' },
  change: { ...callerContext(), status: 0, refetchTraceparents: [] as (string | undefined)[] },
  providerDown: { ...callerContext(), status: 0, body: '' },
};

beforeAll(async () => {
  receiver = await new OtlpReceiver().start();
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  dir = await mkdtemp(path.join(tmpdir(), 'ssdi-tracing-'));
  let database: Record<string, string>;
  if (onPostgres) {
    const db = await openTestDatabase();
    disposeDb = db.dispose;
    database = { DATABASE_URL: db.url! };
  } else {
    await cp(inject('pgliteTemplate'), path.join(dir, 'data'), { recursive: true });
    database = { DATA_DIR: path.join(dir, 'data') };
  }
  const tenant = tenantConfig({
    clients: [FULL_CLIENT, PROVIDER_CLIENT],
    dataSources: [{ ...providerDataSource(provider), inboundClientIds: [PROVIDER_CLIENT.clientId] }],
    dataExtracts: [{ key: 'steps', name: 'Steps per day', dataSourceKey: 'wearables', options: { metric: 'steps' } }],
  });
  const file = path.join(dir, 'tenant.json');
  await writeFile(file, JSON.stringify({ tenants: [tenant] }));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const { DATABASE_URL: _, ...env } = process.env;
  child = spawn(NODE, await startArguments(), {
    env: {
      ...env,
      ...database,
      NODE_ENV: 'development',
      LOG_LEVEL: 'info',
      PORT: String(port),
      TENANT_CONFIG: file,
      SHUTDOWN_DRAIN_MS: '0',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'ssdi-under-test',
      // Nothing exported before the shutdown: what arrives came through its flush.
      OTEL_BSP_SCHEDULE_DELAY: '600000',
    },
  });
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  await eventually(() => {
    if (child.exitCode !== null) throw new Error(`server stopped:\n${out}`);
    return out.includes('"msg":"listening"');
  }, 50_000).catch((e: Error) => {
    throw new Error(`${e.message}\n${out}`);
  });

  const form = new URLSearchParams({
    grant_type: 'client_credentials',
    tenant_key: tenant.key,
    client_id: FULL_CLIENT.clientId,
    client_secret: FULL_CLIENT.clientSecret,
    scope: 'ServiceApi',
  });
  const tokenOf = async (form: URLSearchParams) =>
    ((await (await fetch(`${url}/connect/token`, { method: 'POST', body: form })).json()) as { access_token: string }).access_token;
  const auth = { authorization: `Bearer ${await tokenOf(form)}` };
  const createSubject = async (externalId: string) => {
    const created = await fetch(`${url}/api/v2/messaging/subject`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({
        CustomFieldValues: [
          { Key: 'employeeNumber', Value: { String: { Value: externalId } } },
          { Key: 'fullName', Value: { String: { Value: `Person ${externalId}` } } },
        ],
      }),
    });
    expect(created.status).toBe(201);
    return ((await created.json()) as { internalId: string }).internalId;
  };
  const subjectId = await createSubject('E-01');
  const otherSubjectId = await createSubject('E-02');
  const graphql = (traceparent: string, query: string, variables: Record<string, unknown>) =>
    fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { ...auth, traceparent, 'content-type': 'application/json' },
      body: JSON.stringify({ query, variables }),
    });

  // (a) One REST list, (b) one data points read that calls the provider, both under a caller's trace.
  const list = await fetch(`${url}/api/v2/subject?First=5`, { headers: { ...auth, traceparent: asked.list.traceparent } });
  Object.assign(asked.list, { status: list.status, requestId: list.headers.get('x-request-id') });
  await list.arrayBuffer();
  const read = await graphql(
    asked.read.traceparent,
    'query ReadSteps($id: ID!) { subject(id: $id) { externalId dataPoints(extractKey: "steps") { totalCount } } }',
    { id: subjectId },
  );
  Object.assign(asked.read, { status: read.status, requestId: read.headers.get('x-request-id'), body: await read.text() });
  asked.read.traceparents = provider.calls.map((c) => c.traceparent);
  // (c) A problem, without a caller's trace.
  const missing = await fetch(`${url}/api/v2/subject/${randomUUID()}`, { headers: auth });
  Object.assign(asked.missing, { status: missing.status, requestId: missing.headers.get('x-request-id'), body: await missing.json() });
  // (c') The same under a caller's trace it does not sample (flags 00): the parent-based sampler follows it.
  const unsampled = await fetch(`${url}/api/v2/subject/${randomUUID()}`, {
    headers: { ...auth, traceparent: asked.unsampled.traceparent.replace(/-01$/, '-00') },
  });
  Object.assign(asked.unsampled, {
    status: unsampled.status,
    requestId: unsampled.headers.get('x-request-id'),
    body: await unsampled.json(),
  });
  // (d) A GraphQL field error that is the client's (NOT_FOUND).
  const unknownExtract = await graphql(
    asked.unknownExtract.traceparent,
    'query ReadUnknown($id: ID!) { subject(id: $id) { dataPoints(extractKey: "nope") { totalCount } } }',
    { id: subjectId },
  );
  Object.assign(asked.unknownExtract, { status: unknownExtract.status, body: await unknownExtract.text() });
  // (e) A provider's change report for E-01 (D10), whose flagged set this instance re-fetches in the background.
  const providerAuth = {
    authorization: `Bearer ${await tokenOf(
      new URLSearchParams({
        grant_type: 'client_credentials',
        tenant_key: tenant.key,
        client_id: PROVIDER_CLIENT.clientId,
        client_secret: PROVIDER_CLIENT.clientSecret,
        scope: 'ServiceDataProviderApi',
      }),
    )}`,
  };
  const callsBefore = provider.calls.length;
  const change = await fetch(`${url}/connector-dataprovider/api/v1/dataChange/creationOrUpdate`, {
    method: 'POST',
    headers: { ...providerAuth, traceparent: asked.change.traceparent, 'content-type': 'application/json' },
    body: JSON.stringify({
      SubjectIdentifier: 'E-01',
      DataExtractsOptionsValuesFilter: {},
      NewOrUpdatedDataPoints: [
        { Id: 'E-01-1', SubjectIdentifier: 'E-01', DataPointItems: [{ Key: 'value', Value: { DataType: 'Integer', Value: 7 } }] },
      ],
    }),
  });
  asked.change.status = change.status;
  await change.arrayBuffer();
  await eventually(() => provider.calls.length > callsBefore, 20_000);
  asked.change.refetchTraceparents = provider.calls.slice(callsBefore).map((c) => c.traceparent);
  // (f) A service's error at a field: the provider fails and nothing of E-02 is cached (502).
  provider.always = { status: 500 };
  const providerDown = await graphql(
    asked.providerDown.traceparent,
    'query ReadDown($id: ID!) { subject(id: $id) { dataPoints(extractKey: "steps") { totalCount } } }',
    { id: otherSubjectId },
  );
  Object.assign(asked.providerDown, { status: providerDown.status, body: await providerDown.text() });
  provider.always = undefined;

  child.kill('SIGTERM');
  exitCode = await exited;
}, 90_000);

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await receiver?.close();
  await provider?.close();
  await disposeDb?.();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('OpenTelemetry traces of the running service (P139, P141)', () => {
  it('exports every span through the shutdown flush, as the service OTEL_SERVICE_NAME names', () => {
    expect(exitCode, out).toBe(0);
    expect(receiver.spans.length).toBeGreaterThan(0);
    expect(new Set(receiver.spans.map((s) => s.service))).toEqual(new Set(['ssdi-under-test']));
  });

  it("a REST list: the HTTP server span in the caller's trace, the route span named by its template, admission and the SQL statements below it", () => {
    expect(asked.list.status).toBe(200);
    const trace = receiver.trace(asked.list.traceId);
    // The incoming traceparent is honoured: same trace, the caller's span as parent.
    const server = one(trace, (s) => s.scope === HTTP && s.kind === KIND.server, 'the server span');
    expect(server.parentSpanId).toBe(asked.list.spanId);
    expect(server.attributes['http.route']).toBe('/api/v2/subject');
    // The query's names, not its values (a client's search terms, GraphQL GET variables).
    expect(server.attributes['url.query']).toBe('First=REDACTED');
    const route = one(trace, (s) => s.name === 'GET /api/v2/subject', 'the route span');
    expect(route).toMatchObject({ parentSpanId: server.spanId, scope: SERVER, attributes: { 'http.route': '/api/v2/subject' } });
    const below = descendants(trace, route);
    one(below, (s) => s.name === 'admission' && s.parentSpanId === route.spanId, 'the admission span');
    const statements = below.filter((s) => s.kind === KIND.client && s.attributes['db.system.name'] === 'postgresql');
    // PostgreSQL: the pg instrumentation's spans; PGlite: the service's own (src/db/tracing.ts).
    expect(new Set(statements.map((s) => s.scope))).toEqual(new Set([onPostgres ? PG : SERVER]));
    expect(
      statements.some((s) => /from "subject"/.test(statementText(s))),
      JSON.stringify(statements.map(statementText)),
    ).toBe(true);
  });

  it("a data points read: the operation span, the data cache's miss, and the provider's token and data calls, the provider's request carrying the trace's traceparent", () => {
    expect(asked.read.status, asked.read.body).toBe(200);
    expect(JSON.parse(asked.read.body)).toMatchObject({ data: { subject: { externalId: 'E-01', dataPoints: { totalCount: 3 } } } });
    const trace = receiver.trace(asked.read.traceId);
    const server = one(trace, (s) => s.scope === HTTP && s.kind === KIND.server && s.parentSpanId === asked.read.spanId, 'the server span');
    const operation = one(descendants(trace, server), (s) => s.name === 'query ReadSteps', 'the operation span');
    expect(operation.attributes).toMatchObject({ 'graphql.operation.type': 'query', 'graphql.operation.name': 'ReadSteps' });
    const inOperation = descendants(trace, operation);
    one(inOperation, (s) => s.name === 'admission', 'the admission span');
    expect(inOperation.some((s) => s.kind === KIND.client && s.attributes['db.system.name'] === 'postgresql')).toBe(true);
    const cache = one(inOperation, (s) => s.name === 'data cache', 'the data cache span');
    expect(cache.attributes).toMatchObject({
      'ssdi.data.extract': 'steps',
      'ssdi.cache.hits': 0,
      'ssdi.cache.misses': 1,
      'ssdi.cache.stale': 0,
    });
    const calls = descendants(trace, cache).filter((s) => s.scope === UNDICI && s.kind === KIND.client);
    const token = one(calls, (s) => s.attributes['url.full'] === provider.tokenUrl, 'the token request');
    expect(token.name).toBe('POST');
    const data = one(calls, (s) => s.attributes['url.full'] === provider.getDataPointsUrl, 'the get-data-points call');
    expect(data.attributes['http.response.status_code']).toBe(200);
    // The provider got the trace: W3C trace context, the client span as its parent.
    expect(asked.read.traceparents).toEqual([`00-${asked.read.traceId}-${data.spanId}-01`]);
  });

  // P140: the trace id in problem+json, next to the request id (P4).
  it('a problem+json carries the trace id of its request (a new trace without a caller’s) as otelTraceId', () => {
    expect(asked.missing.status).toBe(404);
    const body = asked.missing.body;
    expect(body['traceId']).toBe(asked.missing.requestId);
    expect(body['otelTraceId']).toMatch(/^[0-9a-f]{32}$/);
    const trace = receiver.trace(String(body['otelTraceId']));
    const server = one(trace, (s) => s.scope === HTTP && s.kind === KIND.server, 'the server span');
    expect(server.parentSpanId).toBe('');
    expect(server.attributes['http.response.status_code']).toBe(404);
    // The client's mistake is named on its route's span, which it does not mark failed.
    const route = one(trace, (s) => s.name === 'GET /api/v2/subject/:subjectId', 'the route span');
    expect(route.attributes['error.type']).toBe('NotFoundError');
    expect(route.status?.code ?? 0).not.toBe(2);
  });

  it("a client's error at a GraphQL field (NOT_FOUND) fails neither the operation's span nor the server span", () => {
    expect(asked.unknownExtract.status).toBe(200);
    expect(JSON.parse(asked.unknownExtract.body)).toMatchObject({ errors: [{ extensions: { code: 'NOT_FOUND' } }] });
    const trace = receiver.trace(asked.unknownExtract.traceId);
    const server = one(trace, (s) => s.scope === HTTP && s.kind === KIND.server, 'the server span');
    const operation = one(trace, (s) => s.name === 'query ReadUnknown', 'the operation span');
    expect(server.status?.code ?? 0).not.toBe(2);
    expect(operation.status?.code ?? 0).not.toBe(2);
  });

  it("a service's error at a GraphQL field (the provider down: 502) fails the operation's span, not the server span", () => {
    expect(asked.providerDown.status).toBe(200);
    expect(JSON.parse(asked.providerDown.body)).toMatchObject({ errors: [{ extensions: { code: 'PROVIDER_UNAVAILABLE' } }] });
    const trace = receiver.trace(asked.providerDown.traceId);
    const server = one(trace, (s) => s.scope === HTTP && s.kind === KIND.server, 'the server span');
    const operation = one(trace, (s) => s.name === 'query ReadDown', 'the operation span');
    expect(operation.status?.code).toBe(2);
    // The response is a 200 (D4): the HTTP conventions leave its span unset.
    expect(server.status?.code ?? 0).not.toBe(2);
  });

  it("a change report's background re-fetch is not in the change request's trace", () => {
    expect(asked.change.status).toBe(200);
    const trace = receiver.trace(asked.change.traceId);
    one(trace, (s) => s.scope === HTTP && s.kind === KIND.server, 'the server span');
    // The re-fetch called the provider, from another trace than the change request's.
    expect(asked.change.refetchTraceparents.length).toBeGreaterThan(0);
    for (const tp of asked.change.refetchTraceparents) expect(tp ?? '').not.toContain(asked.change.traceId);
    expect(trace.filter((s) => s.scope === UNDICI)).toEqual([]);
    // Its provider calls are spans of their own traces.
    const refetches = receiver.spans.filter((s) => s.scope === UNDICI && s.attributes['url.full'] === provider.getDataPointsUrl);
    expect(refetches.length).toBeGreaterThan(1);
  });

  it('an unsampled trace is named nowhere: no otelTraceId, no trace id in its log line, no span exported', () => {
    expect(asked.unsampled.status).toBe(404);
    expect(asked.unsampled.body['traceId']).toBe(asked.unsampled.requestId);
    expect(asked.unsampled.body).not.toHaveProperty('otelTraceId');
    expect(receiver.trace(asked.unsampled.traceId)).toEqual([]);
    const line = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Line)
      .find((l) => l.msg === 'request completed' && l.req?.id === asked.unsampled.requestId);
    expect(line).toBeDefined();
    expect(line).not.toHaveProperty('trace_id');
  });

  it("every request's log line carries its trace and span ids", () => {
    const lines = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Line);
    const logged = (requestId: string) => {
      const found = lines.filter((l) => l.msg === 'request completed' && l.req?.id === requestId);
      expect(found).toHaveLength(1);
      return found[0]!;
    };
    expect(logged(asked.list.requestId).trace_id).toBe(asked.list.traceId);
    expect(logged(asked.read.requestId).trace_id).toBe(asked.read.traceId);
    expect(logged(asked.missing.requestId).trace_id).toBe(asked.missing.body['otelTraceId']);
    for (const l of [asked.list, asked.read, asked.missing].map((a) => logged(a.requestId))) expect(l.span_id).toMatch(/^[0-9a-f]{16}$/);
  });
});

/**
 * The @opentelemetry packages a process imports when started with the service's preload and `env`: a
 * module resolve hook ahead of it prints each (Node's module.registerHooks).
 */
function openTelemetryImports(env: Record<string, string>): Promise<string[]> {
  const spy = `import { registerHooks } from 'node:module';
registerHooks({ resolve(specifier, context, next) {
  if (specifier.startsWith('@opentelemetry/')) process.stdout.write(specifier + '\\n');
  return next(specifier, context);
} });`;
  const { DATABASE_URL: _, ...base } = process.env;
  const clean = Object.fromEntries(Object.entries(base).filter(([k]) => !k.startsWith('OTEL_')));
  return new Promise((resolve, reject) =>
    execFile(
      NODE,
      ['--import', `data:text/javascript,${encodeURIComponent(spy)}`, '--import', './dist/src/tracing.js', '-e', ''],
      { env: { ...clean, ...env } },
      (err, stdout) => (err ? reject(err) : resolve(stdout.split('\n').filter(Boolean))),
    ),
  );
}

describe('tracing off by default (P139)', () => {
  it('loads nothing of the SDK without OpenTelemetry variables, nor when they disable it; the endpoint turns it on', async () => {
    const sdk = (imports: string[]) => imports.filter((m) => m !== '@opentelemetry/api');
    expect(sdk(await openTelemetryImports({}))).toEqual([]);
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' };
    expect(sdk(await openTelemetryImports({ ...endpoint, OTEL_SDK_DISABLED: 'true' }))).toEqual([]);
    expect(sdk(await openTelemetryImports({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' }))).toEqual([]);
    expect(sdk(await openTelemetryImports(endpoint))).toEqual(
      expect.arrayContaining(['@opentelemetry/sdk-node', '@opentelemetry/instrumentation-http', '@opentelemetry/instrumentation-undici']),
    );
  });
});
