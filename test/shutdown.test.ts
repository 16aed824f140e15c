import { type ChildProcess, spawn } from 'node:child_process';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Agent, type IncomingHttpHeaders, request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrateToLatest } from '../src/db/migrate.js';
import { openDatabase } from '../src/db/database.js';
import { FULL_CLIENT, freePort, tenantConfig } from './helpers.js';
import { FakeProvider, eventually, providerDataSource } from './fake-provider.js';

// Issue 15: drained shutdown of the real process (`npm start`'s build, on the embedded database). On
// SIGTERM, /readyz answers 503 at once and, for SHUTDOWN_DRAIN_MS, the service keeps serving with
// `Connection: close` on every response (a load balancer stops sending, kept-alive clients reconnect
// elsewhere); then the listener closes, in-flight requests finish, and the process exits 0. SIGINT
// (Ctrl-C) skips the drain. A slow request is a data point read whose provider answers late.

const NODE = process.execPath;
const SERVER = ['--enable-source-maps', 'dist/src/server.js'];
const DRAIN_MS = 1500;
/** The provider's delay: the in-flight read outlives the drain by a clear margin. */
const PROVIDER_DELAY_MS = 3000;

/** A JSON log line of the service. */
interface Line {
  msg: string;
  reason?: string;
  drainMs?: number;
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** Whether the request went over a connection opened before (keep-alive). */
  reused: boolean;
}

/** One HTTP request with node:http (fetch hides `Connection`); a fresh connection unless an agent is given. */
function call(
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string; agent?: Agent } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method ?? 'GET', headers: opts.headers, agent: opts.agent ?? false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body, reused: req.reusedSocket }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** The service as `npm start` runs it, with its own tenant file whose data source is `provider`. */
class ServiceProcess {
  url = '';
  out = '';
  token = '';
  subjectId = '';
  exit!: Promise<number | null>;
  private child!: ChildProcess;
  private dir = '';

  async start(provider: FakeProvider, template: string): Promise<this> {
    this.dir = await mkdtemp(path.join(tmpdir(), 'ssdi-shutdown-'));
    // A migrated embedded database to start from: creating and migrating one is most of a start-up.
    await cp(template, path.join(this.dir, 'data'), { recursive: true });
    const tenant = tenantConfig({
      dataSources: [providerDataSource(provider)],
      dataExtracts: [{ key: 'steps', name: 'Steps per day', dataSourceKey: 'wearables', options: { metric: 'steps' } }],
    });
    const file = path.join(this.dir, 'tenant.json');
    await writeFile(file, JSON.stringify({ tenants: [tenant] }));
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    // The embedded database whatever this test run uses (DATABASE_URL removed), as server.test.ts does.
    const { DATABASE_URL: _, ...env } = process.env;
    this.child = spawn(NODE, SERVER, {
      env: {
        ...env,
        NODE_ENV: 'development',
        LOG_LEVEL: 'info',
        PORT: String(port),
        DATA_DIR: path.join(this.dir, 'data'),
        TENANT_CONFIG: file,
        SHUTDOWN_DRAIN_MS: String(DRAIN_MS),
        SHUTDOWN_TIMEOUT_MS: '10000',
      },
    });
    this.child.stdout!.on('data', (d: Buffer) => (this.out += d.toString()));
    this.child.stderr!.on('data', (d: Buffer) => (this.out += d.toString()));
    this.exit = new Promise((r) => this.child.on('exit', (code) => r(code)));
    await eventually(() => {
      if (this.child.exitCode !== null) throw new Error(`server stopped:\n${this.out}`);
      return this.out.includes('"msg":"listening"');
    }, 50_000).catch((e: Error) => {
      throw new Error(`${e.message}\n${this.out}`);
    });

    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: tenant.key,
      client_id: FULL_CLIENT.clientId,
      client_secret: FULL_CLIENT.clientSecret,
      scope: 'ServiceApi',
    });
    this.token = (
      (await (await fetch(`${this.url}/connect/token`, { method: 'POST', body: form })).json()) as { access_token: string }
    ).access_token;
    const created = await this.api('POST', '/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'E-01' } } },
        { Key: 'fullName', Value: { String: { Value: 'Person 1' } } },
      ],
    });
    if (created.status !== 201) throw new Error(`subject upsert failed: ${created.status} ${created.body}`);
    this.subjectId = (JSON.parse(created.body) as { internalId: string }).internalId;
    return this;
  }

  /** An authenticated request (fresh connection unless `agent`). */
  api(method: string, p: string, body?: unknown, agent?: Agent): Promise<Answer> {
    return call(`${this.url}${p}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      ...(agent ? { agent } : {}),
    });
  }

  /** The subject's data points: slow while the provider delays its answer. */
  slowRead(): Promise<Answer> {
    return this.api('POST', '/graphql', {
      query: `query($id: ID!) { subject(id: $id) { externalId dataPoints(extractKey: "steps") { totalCount } } }`,
      variables: { id: this.subjectId },
    });
  }

  kill(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  /** The JSON log lines, in order. */
  lines(): Line[] {
    return this.out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Line);
  }

  async dispose(): Promise<void> {
    if (this.child && this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGKILL');
      await this.exit;
    }
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

/** Resolves once a new connection is refused (the listener closed); rejects on any other error. */
async function untilRefused(url: string, ms: number): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    const err = await call(`${url}/healthz`).then(
      () => undefined,
      (e: NodeJS.ErrnoException) => e,
    );
    if (err?.code === 'ECONNREFUSED') return;
    // A connection caught in the accept backlog as the listener closed is reset: not served either; look again.
    if (err && err.code !== 'ECONNRESET') throw err;
    if (Date.now() > until) throw new Error('the listener was still accepting connections');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const tracked = <T>(p: Promise<T>) => {
  const t = { settled: false, promise: p };
  void p.finally(() => (t.settled = true)).catch(() => {});
  return t;
};

let provider: FakeProvider;
let term: ServiceProcess;
let int: ServiceProcess;
let ownTemplate: string | undefined;

/**
 * A migrated embedded database directory: the suite's (PGlite runs), else one made here (a PostgreSQL
 * run's template is a PostgreSQL database; the children run on the embedded one all the same).
 */
async function embeddedTemplate(): Promise<string> {
  const suite = inject('pgliteTemplate');
  if (suite) return suite;
  ownTemplate = await mkdtemp(path.join(tmpdir(), 'ssdi-shutdown-tpl-'));
  const handle = await openDatabase({ dataDir: ownTemplate });
  await migrateToLatest(handle.db);
  await handle.close();
  return ownTemplate;
}

beforeAll(async () => {
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  provider.always = { delayMs: PROVIDER_DELAY_MS };
  const template = await embeddedTemplate();
  [term, int] = await Promise.all([new ServiceProcess().start(provider, template), new ServiceProcess().start(provider, template)]);
}, 60_000);

afterAll(async () => {
  await Promise.all([term?.dispose(), int?.dispose()]);
  await provider?.close();
  if (ownTemplate) await rm(ownTemplate, { recursive: true, force: true });
});

describe('SIGTERM: a drained shutdown (issue 15)', () => {
  // P53: shutdown drains.
  it('answers /readyz 503 at once, serves with Connection: close during the drain (kept-alive connections too), then refuses connections, finishes the in-flight request and exits 0', async () => {
    const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      // A kept-alive connection opened before the signal.
      const first = await term.api('GET', '/api/v2/subject?First=1', undefined, keepAlive);
      expect(first.status).toBe(200);
      expect(first.headers.connection).toBe('keep-alive');
      expect((await call(`${term.url}/readyz`)).status).toBe(200);

      // A slow request in flight: it has reached the provider, which answers in PROVIDER_DELAY_MS.
      const calls = provider.calls.length;
      const slow = tracked(term.slowRead());
      await eventually(() => provider.calls.length > calls);

      const signalled = Date.now();
      term.kill('SIGTERM');

      // Not ready at once.
      let ready: Answer;
      do ready = await call(`${term.url}/readyz`);
      while (ready.status === 200 && Date.now() - signalled < 2000);
      const notReadyAfter = Date.now() - signalled;
      expect(ready.status).toBe(503);
      expect(notReadyAfter).toBeLessThan(100);
      expect(ready.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(ready.body)).toMatchObject({ status: 503, detail: expect.any(String) });
      expect(ready.headers.connection).toBe('close');

      // Still serving during the drain, asking every client to reconnect (elsewhere).
      const during = await term.api('GET', '/api/v2/subject?First=1');
      expect(during.status, during.body).toBe(200);
      expect(JSON.parse(during.body).Edges).toHaveLength(1);
      expect(during.headers.connection).toBe('close');
      const reused = await term.api('GET', '/api/v2/subject?First=1', undefined, keepAlive);
      expect(reused.reused).toBe(true);
      expect(reused.status).toBe(200);
      expect(reused.headers.connection).toBe('close');
      expect(Date.now() - signalled).toBeLessThan(DRAIN_MS);

      // After the drain: no new connections, while the slow request is still running.
      await untilRefused(term.url, DRAIN_MS + 2000);
      // Timers may fire up to a millisecond early; the listener was open for the whole drain.
      expect(Date.now() - signalled).toBeGreaterThanOrEqual(DRAIN_MS - 5);
      expect(slow.settled).toBe(false);

      // The in-flight request is finished, not cut.
      const done = await slow.promise;
      expect(done.status, done.body).toBe(200);
      expect(JSON.parse(done.body)).toEqual({ data: { subject: { externalId: 'E-01', dataPoints: { totalCount: 3 } } } });

      expect(await term.exit).toBe(0);
      const lines = term.lines();
      const stopping = lines.findIndex((l) => l.msg.startsWith('shutting down'));
      expect(stopping).toBeGreaterThanOrEqual(0);
      expect(lines[stopping]).toMatchObject({ reason: 'SIGTERM', drainMs: DRAIN_MS });
      expect(lines.findIndex((l) => l.msg === 'stopped')).toBeGreaterThan(stopping);
    } finally {
      keepAlive.destroy();
    }
  });
});

describe('SIGINT: no drain (issue 15)', () => {
  it('closes the listener at once, still finishes the in-flight request, and exits 0', async () => {
    const calls = provider.calls.length;
    const slow = tracked(int.slowRead());
    await eventually(() => provider.calls.length > calls);
    const signalled = Date.now();
    int.kill('SIGINT');
    // Refused well before a drain could have ended, the slow request still running.
    await untilRefused(int.url, DRAIN_MS);
    expect(Date.now() - signalled).toBeLessThan(DRAIN_MS);
    expect(slow.settled).toBe(false);
    const done = await slow.promise;
    expect(done.status, done.body).toBe(200);
    expect(JSON.parse(done.body).data.subject.dataPoints.totalCount).toBe(3);
    expect(await int.exit).toBe(0);
    const lines = int.lines();
    const stopping = lines.findIndex((l) => l.msg.startsWith('shutting down'));
    expect(lines[stopping]).toMatchObject({ reason: 'SIGINT', drainMs: 0 });
    expect(lines.findIndex((l) => l.msg === 'stopped')).toBeGreaterThan(stopping);
  });
});
