/**
 * The dashboards scenario (issue 17): what a dashboard over data points costs.
 *
 *  1. An aggregate over BENCH_DASHBOARDS_SUBJECTS (10,000) subjects × 7 points from a warm cache
 *     (`dataPointAggregates`: DAY buckets of `recordedAt` in Europe/Berlin over 8 days, with percentiles
 *     and the coverage), BENCH_DASHBOARDS_ITERATIONS (30) sequential requests after 3 warm-ups; target
 *     p50 ≤ 50 ms on PostgreSQL. Its baseline: the statements one warm request ran (recorded through
 *     openDatabase's onQuery, only those of that request), replayed on one connection with their
 *     parameters, the same number of times: all of them, and the aggregate's own transaction alone.
 *     Twice: a new question each time (`maxGroups` varied, so the service's answer cache misses and the
 *     statement runs), and the same question again (answered from the cache, P63).
 *  2. The cold path: BENCH_DASHBOARDS_COLD (2) times a new extract (createDataExtract, the same options),
 *     one aggregate over it; each must make exactly ⌈subjects / PROVIDER_BATCH_SIZE⌉ provider calls
 *     (the reference provider's page size, 1000, holds a batch's points: one page per call).
 *  3. BENCH_DASHBOARDS_SUBSCRIPTIONS (1,000) open `dataPointsChanged` subscriptions over SSE, held by a
 *     child process (sse-clients.ts) on the load core: the server's heap and RSS before and after they
 *     open (this process, after a forced GC), then one change report (the data-change REST endpoint, as
 *     a provider's inbound client sends it) and the time until each subscriber receives the event.
 *  4. Issue 32's live fan-out: BENCH_DASHBOARDS_LIVE (1,000) `dataPointAggregatesChanged` subscribers of the
 *     question of part 1, one change post (the provider's points of one subject changed first): each
 *     subscriber's next answer after the post returned, the computations (/metrics), the memory per open
 *     subscription; then BENCH_DASHBOARDS_LIVE_RSS (10,000) open subscriptions and the server's RSS.
 *  5. Once the app is gone, bench/change-burst.ts's change posts (unless BENCH_DASHBOARDS_BURST=0).
 *
 * The app is built in this process (buildApp) on a fresh database (PGlite in a temp dir, or with
 * DATABASE_URL a new `ssdi_bench_<random>` database, dropped at the end) seeded by seed.ts; the
 * reference provider runs as a process of its own (provider-process.ts) on loopback with
 * BENCH_PROVIDER_LATENCY_MS (20) per call. On Linux with 2 cores this process (the service, the
 * harness's requests) is pinned to core 0, the provider and the subscribers to core 1. See
 * bench/README.md, "Dashboards".
 *
 * `npm run bench:dashboards` runs it alone and writes bench/results/<date>-dashboards[-<BENCH_LABEL>]-<db>.json;
 * `npm run bench` runs it last (runDashboards) into its own report unless BENCH_DASHBOARDS_SKIP is set.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { CompiledQuery, sql } from 'kysely';
import { pino } from 'pino';
import { createAppServer } from '../src/http/app-server.js';
import { buildApp } from '../src/app/app.js';
import { loadConfig } from '../src/core/config.js';
import { migrateToLatest } from '../src/db/migrate.js';
import { DEFAULT_AGGREGATE_SUBJECTS } from '../src/domains/data/index.js';
import { classify } from './capture.js';
import { type ChangeBurstResult, runChangeBurst } from './change-burst.js';
import { DATASETS, type Dataset } from './dashboard-questions.js';
import { type ScaleResult, beforeAfterMarkdown, runScale, scaleMarkdown, scaleTargets } from './dashboard-scale.js';
import { readFile, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { makeWorkDir, onCleanup, pinSelf, runMain } from './processes.js';
import { type Machine, type Target, machineFacts, provenance, writeReport } from './report.js';
import { createBenchDatabase, seedTenant } from './seed.js';
import { type CodeFacts, LOAD_CORE, REPO, SERVER_CORE, baseEnv, bearer, envNumber, startBenchProvider, watchCode } from './service.js';
import type { FromClients, ToClients } from './sse-clients.js';
import { CLIENT, EXTRACT_KEY, EXTRACT_OPTIONS, LEVELS, POINTS_PER_SUBJECT, TENANT_KEY, employeeNumber, entityKey } from './tenant-data.js';

/** The issue's target for the warm aggregate's p50 on PostgreSQL. */
export const WARM_P50_TARGET_MS = 50;
/** The provider's last day of every series (fixed, so runs on different days aggregate the same points). */
const ANCHOR = '2026-11-20';
const PROVIDER_PAGE_SIZE = 1000;
const WARMUPS = 3;
/** The client a provider reports changes with (an inbound client of the bench's data source). */
const INBOUND_CLIENT = { clientId: 'bench-provider', clientSecret: 'bench-provider-secret' };
const CHANGE_PATH = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
/** Subscriptions opened and closed before the measured ones (code paths warm, the pipeline checked). */
const SUBSCRIPTION_WARMUPS = 20;

/** A dashboard's aggregate: daily buckets of a week in a time zone, over both companies' subtrees. */
const AGGREGATE_INPUT = {
  valueItemKey: 'value',
  timeItemKey: 'recordedAt',
  interval: 'DAY',
  // recordedAt is 20:00–24:00 UTC on each of the 7 days, so up to 01:00 of the next day in Berlin: 8 days.
  from: '2026-11-14',
  to: '2026-11-22',
  timeZone: 'Europe/Berlin',
  structuralEntityKeys: Array.from({ length: LEVELS[0].count }, (_, j) => entityKey(1, j)),
};
const BUCKETS = 8;
const AGGREGATE_QUERY = `query Dashboard($input: DataPointAggregatesInput!) {
  dataPointAggregates(input: $input) {
    aggregates { count subjectCount sum average min max stddevSample percentiles(p: [0.5, 0.9]) }
    buckets { start startsAt aggregates { count subjectCount sum average min max percentiles(p: [0.5, 0.9]) } }
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
  }
}`;
const CREATE_EXTRACT = `mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key } } }`;
const SUBSCRIPTION = `subscription($extractKey: String) { dataPointsChanged(extractKey: $extractKey) { extractKey subjectIds kind at } }`;

export interface Timing {
  iterations: number;
  p50Ms: number;
  p95Ms: number;
  meanMs: number;
  minMs: number;
  maxMs: number;
}

export interface Memory {
  heapUsedBytes: number;
  rssBytes: number;
  externalBytes: number;
}

/** Recorded statements as the report lists them: kind, tables, SQL, parameter count, Kysely's time. */
export interface StatementsSeen {
  statements: { kind: string; tables: string[]; sql: string; parameterCount: number; ms: number }[];
  /** Their time as Kysely measured it, summed. */
  sqlMs: number;
}

function describeStatements(list: Recorded[]): StatementsSeen & { summary: string } {
  const statements = list.map((s) => {
    const c = classify(s);
    return { kind: c.kind, tables: c.tables, sql: s.sql, parameterCount: s.parameters.length, ms: Math.round(s.ms * 100) / 100 };
  });
  const sqlMs = Math.round(list.reduce((n, s) => n + (Number.isFinite(s.ms) ? s.ms : 0), 0) * 100) / 100;
  const summary = statements
    .map((s) => `${s.kind === 'transaction' ? s.sql.trim().split(/\s/)[0]! : s.tables.join('+') || s.kind} ${f(s.ms)} ms`)
    .join(', ');
  return { statements, sqlMs, summary };
}

/** One row of the scenario's table. */
export interface DashboardRow {
  scenario: string;
  p50Ms?: number;
  p95Ms?: number;
  target: string;
  holds?: boolean;
  note: string;
}

export interface ColdRun {
  extractKey: string;
  ms: number;
  providerCalls: number;
  abandonedCalls: number;
  /** Calls for a page asked for before (retries). */
  repeatedCalls: number;
  /** The provider's answers by status. */
  statuses: Record<string, number>;
  slowestCallMs: number;
  /** What the service logged (warn and above) meanwhile, by message. */
  serviceLog: Record<string, number>;
}

/** Sequential warm requests, and the statements of one of them replayed alone as their baseline. */
export interface WarmSeries extends Timing {
  providerCalls: number;
  answerBytes: number;
  /** One request's statements (in order, with their kind and tables) and the SQL time Kysely measured in it. */
  captured: StatementsSeen;
  baseline: { all: Timing; aggregateOnly?: Timing & { statements: number } };
}

export interface DashboardsResult {
  subjects: number;
  pointsPerSubject: number;
  providerLatencyMs: number;
  providerPageSize: number;
  providerBatchSize: number;
  /** The service's PROVIDER_TIMEOUT_MS: one provider attempt's time limit (then a retry). */
  providerTimeoutMs: number;
  iterations: number;
  seedSeconds: number;
  runtimeSeconds: number;
  /** Whether this process was pinned to core 0 and the subscribers to core 1. */
  pinned: boolean;
  aggregate: { query: string; input: Record<string, unknown>; answer: unknown };
  /** The same question asked again and again (the service's answer cache serves it, P63). */
  warm: WarmSeries;
  /**
   * A new question each time over the same warm sets (`maxGroups` differs per request, which changes
   * nothing in the answer but its cache key): the subject list is cached, the statement runs.
   */
  newQuestion: WarmSeries;
  cold: {
    expectedCalls: number;
    /**
     * `abandonedCalls`: calls whose connection closed before the provider answered (the service gave up:
     * its PROVIDER_TIMEOUT_MS attempt time-out, then a retry); `slowestCallMs`: the provider's slowest
     * answer, from its request's arrival (in this process: its event loop is the service's).
     */
    runs: ColdRun[];
    /** The seeded extract's first aggregate (priming the warm cache): a cold path too. */
    prime: Omit<ColdRun, 'extractKey'>;
    asExpected: boolean;
  };
  subscriptions?: {
    wanted: number;
    established: number;
    openFailures: string[];
    openSeconds: number;
    /** Measured in this process (the server's), after a forced GC: before opening, with all open, after closing. */
    memory: { before: Memory; open: Memory; afterClose: Memory };
    perSubscription: { heapBytes: number; rssBytes: number; externalBytes: number };
    /**
     * The change report: its answer, and the statements run in its context: its own and those of the
     * background re-fetch it starts (the sweep inherits the request's context). Kysely's times are wall
     * time on the server's event loop: a COMMIT whose answer waits behind the fan-out of the event it
     * published shows the fan-out's time.
     */
    change: { status: number; answerMs: number; flagged: unknown; statements: StatementsSeen };
    received: number;
    /** Milliseconds from sending the change to each subscriber receiving its event. */
    delivery?: { firstMs: number; p50Ms: number; p95Ms: number; lastMs: number };
    errors: string[];
    sample: unknown;
  };
  subscriptionsError?: string;
  /** Issue 32's live fan-out (`dataPointAggregatesChanged`): BENCH_DASHBOARDS_LIVE subscribers, then BENCH_DASHBOARDS_LIVE_RSS. */
  live?: LiveResult;
  liveError?: string;
  /** bench/change-burst.ts's numbers (`npm run bench:dashboards` unless BENCH_DASHBOARDS_BURST=0). */
  burst?: ChangeBurstResult;
  burstError?: string;
  /** Issue 32's datasets: warm new questions beside DuckDB, the same question again, the cold fill (dashboard-scale.ts). */
  scale?: ScaleResult;
  scaleError?: string;
  rows: DashboardRow[];
  targets: Target[];
}

/** The standalone run's JSON file (`npm run bench:dashboards`). */
export interface DashboardsReport extends DashboardsResult, CodeFacts {
  label: string | undefined;
  date: string;
  database: 'pglite' | 'postgres';
  machine: Machine;
  markdown: string;
}

interface Recorded {
  sql: string;
  parameters: unknown[];
  ms: number;
}

function timing(ms: number[]): Timing {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  const r = (n: number) => Math.round(n * 100) / 100;
  return {
    iterations: s.length,
    p50Ms: r(q(0.5)),
    p95Ms: r(q(0.95)),
    meanMs: r(s.reduce((a, b) => a + b, 0) / s.length),
    minMs: r(s[0]!),
    maxMs: r(s.at(-1)!),
  };
}

const f = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? '' : n < 10 ? n.toFixed(2) : n.toFixed(1));
const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;

/** A count of log messages for a note: `storing fetched data points failed ×6, …`. */
const logNote = (log: Record<string, number>) =>
  Object.entries(log)
    .map(([m, n]) => `"${m}" ×${n}`)
    .join(', ');

/** An error's message with its causes (`fetch failed` says little alone). */
function describe(e: unknown): string {
  const parts: string[] = [];
  for (let x: unknown = e; x !== undefined && x !== null && parts.length < 4; x = (x as { cause?: unknown }).cause)
    parts.push(x instanceof Error ? x.message : String(x));
  return parts.join(': ');
}

/** global.gc, exposed at run time when node did not start with --expose-gc. */
function forcedGc(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  v8.setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

function memory(gc: () => void): Memory {
  gc();
  gc();
  const m = process.memoryUsage();
  return { heapUsedBytes: m.heapUsed, rssBytes: m.rss, externalBytes: m.external };
}

/** The subscribers' process (sse-clients.ts), on the load core when pinning; messages in order. */
class Subscribers {
  private readonly child: ChildProcess;
  private readonly inbox: FromClients[] = [];
  private wake: (() => void) | undefined;
  private exit: string | undefined;
  readonly exited: Promise<void>;
  private readonly unregister: () => void;

  constructor(pin: boolean) {
    const node = [process.execPath, '--import', 'tsx', path.join(REPO, 'bench/sse-clients.ts')];
    const [cmd, ...args] = pin ? ['taskset', '-c', String(LOAD_CORE), ...node] : node;
    this.child = spawn(cmd!, args, { cwd: REPO, env: baseEnv(), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child.on('message', (m) => {
      this.inbox.push(m as FromClients);
      this.wake?.();
    });
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        this.exit = String(code ?? signal);
        this.wake?.();
        resolve();
      }),
    );
    this.unregister = onCleanup('dashboards: subscribers', () => this.kill());
  }

  /** Sends `m` and waits for the answer of type `type` (the child's own error fails it). */
  async ask<T extends FromClients['type']>(m: ToClients, type: T, timeoutMs: number): Promise<Extract<FromClients, { type: T }>> {
    this.child.send(m);
    const until = Date.now() + timeoutMs;
    for (;;) {
      const i = this.inbox.findIndex((x) => x.type === type || x.type === 'error');
      if (i >= 0) {
        const got = this.inbox.splice(i, 1)[0]!;
        if (got.type === 'error') throw new Error(`subscribers: ${got.message}`);
        return got as Extract<FromClients, { type: T }>;
      }
      if (this.exit !== undefined) throw new Error(`the subscribers' process exited (${this.exit}) before answering ${m.type}`);
      if (Date.now() > until) throw new Error(`the subscribers did not answer ${m.type} within ${timeoutMs / 1000} s`);
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, 100);
      });
      this.wake = undefined;
    }
  }

  /** Closes every stream and waits for the process to end. */
  async close(): Promise<void> {
    if (this.exit === undefined && this.child.connected) this.child.send({ type: 'close' } satisfies ToClients);
    await Promise.race([this.exited, sleep(10_000)]);
    this.kill();
    this.unregister();
  }

  private kill(): void {
    if (this.exit === undefined) this.child.kill('SIGKILL');
  }
}

/**
 * Runs the scenario: a fresh database seeded with the bench tenant, the app in this process, the three
 * parts; everything it started is stopped and the database removed before it returns.
 */
export async function runDashboards(opts: {
  databaseUrl: string | undefined;
  log: (line: string) => void;
  /** For the provider's and the service's logs (a new temp dir when absent, removed unless BENCH_KEEP). */
  workDir?: string;
}): Promise<DashboardsResult> {
  const { log } = opts;
  const started = performance.now();
  const datasetName = (process.env['BENCH_DASHBOARDS_DATASET'] || '300k').toLowerCase();
  if (datasetName !== 'none' && !(datasetName in DATASETS))
    throw new Error(`BENCH_DASHBOARDS_DATASET must be ${Object.keys(DATASETS).join(', ')} or none, got ${datasetName}`);
  const dataset: Dataset | undefined = DATASETS[datasetName as Dataset['name']];
  // A dataset decides the tenant's subjects (issue 17's part then runs over them too).
  const subjects = dataset?.subjects ?? Math.floor(envNumber('BENCH_DASHBOARDS_SUBJECTS', DEFAULT_AGGREGATE_SUBJECTS));
  if (subjects < 1 || subjects > DEFAULT_AGGREGATE_SUBJECTS)
    throw new Error(
      `BENCH_DASHBOARDS_SUBJECTS must be 1 to ${DEFAULT_AGGREGATE_SUBJECTS} (one aggregate's default bound), got ${subjects}`,
    );
  const iterations = Math.max(1, Math.floor(envNumber('BENCH_DASHBOARDS_ITERATIONS', 30)));
  const coldRuns = Math.max(1, Math.floor(envNumber('BENCH_DASHBOARDS_COLD', 2)));
  const wanted = Math.floor(envNumber('BENCH_DASHBOARDS_SUBSCRIPTIONS', 1000));
  // The live fan-out's rounds: its subscribers, then the open subscriptions whose RSS is measured (0: none).
  const liveCounts = [envNumber('BENCH_DASHBOARDS_LIVE', 1000), envNumber('BENCH_DASHBOARDS_LIVE_RSS', LIVE_RSS_SUBSCRIPTIONS)]
    .map(Math.floor)
    .filter((n) => n > 0);
  const latencyMs = envNumber('BENCH_PROVIDER_LATENCY_MS', 20);
  const pin = process.platform === 'linux' && os.cpus().length >= 2;
  const undo: (() => Promise<void>)[] = [];
  // Cleanups are registered for Ctrl-C and errors, and run here in the normal case (run.ts goes on after this returns).
  const later = (name: string, run: () => Promise<void>) => {
    const unregister = onCleanup(name, run);
    undo.push(async () => {
      unregister();
      await run();
    });
  };
  try {
    // The reference provider in a process of its own (on the load core): generating and sending 70,000
    // points per cold aggregate must not run on the event loop of the service under test.
    const workDir = opts.workDir ?? (await makeWorkDir('ssdi-bench-dashboards-', log));
    const { url: providerUrl, proc: providerProc } = await startBenchProvider('dashboards: reference provider', {
      pin,
      workDir,
      latencyMs,
      pageSize: PROVIDER_PAGE_SIZE,
      anchor: ANCHOR,
    });
    later('dashboards: reference provider', () => providerProc.stop(3000));
    /** The provider's counters (provider-process.ts); `reset` starts a new slowest answer. */
    const providerStats = async (reset = false) =>
      (await (await fetch(`${providerUrl}/bench/stats`, { method: reset ? 'POST' : 'GET' })).json()) as {
        getDataPointsCalls: number;
        abandoned: number;
        repeated: number;
        statuses: Record<string, number>;
        slowestMs: number;
      };
    const bench = await createBenchDatabase(opts.databaseUrl);
    later('dashboards: bench database', () => bench.dispose());
    log(`\ndashboards: ${bench.kind}${bench.databaseUrl ? ` (${new URL(bench.databaseUrl).pathname.slice(1)})` : ` (${bench.dataDir})`}`);

    // Statements are recorded only while `capturing` and only those of requests marked for it (an
    // AsyncLocalStorage set per request): the sweep's, the outbox's or the subscriptions' never mix in.
    const requestTag = new AsyncLocalStorage<boolean>();
    let capturing = false;
    const recorded: Recorded[] = [];
    const handle = await bench.open((text, parameters, ms?: number) => {
      if (capturing && requestTag.getStore() === true) recorded.push({ sql: text, parameters: [...parameters], ms: ms ?? Number.NaN });
    });
    /** Runs `fn` (whose requests carry `x-bench-capture: 1`) and returns the statements those requests ran. */
    const recording = async <T>(fn: () => Promise<T>) => {
      recorded.length = 0;
      capturing = true;
      try {
        const value = await fn();
        await sleep(100); // statements a request leaves running after its answer count too
        return { value, statements: recorded.splice(0) };
      } finally {
        capturing = false;
      }
    };
    later('dashboards: database handle', () => handle.close());

    await migrateToLatest(handle.db);
    const seeded = await seedTenant(handle.db, {
      subjects,
      providerUrl,
      inboundClient: INBOUND_CLIENT,
      progress: (n) => process.stdout.write(`\rseeding: ${n}/${subjects} subjects`),
    });
    const seedSeconds = Math.round(seeded.seconds * 10) / 10;
    process.stdout.write(`\rseeded ${subjects} subjects in ${seedSeconds} s\n`);
    if (pin) await pinSelf(SERVER_CORE);

    // The app in this process, on a loopback port bound first so PUBLIC_URL is its real address.
    const { server, serve } = createAppServer();
    // The harness's own kept-alive connection must not race the server's idle time-out (5 s by default),
    // whose timer can fire late, just as a request is sent, while PGlite holds the event loop.
    server.keepAliveTimeout = 120_000;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const config = loadConfig({
      LOG_LEVEL: 'warn',
      PUBLIC_URL: url,
      DATA_DIR: '/nonexistent',
      NODE_ENV: 'production',
      // One client holds every subscription (default bound 100 per client and instance).
      SUBSCRIPTIONS_PER_CLIENT: String(Math.max(2000, 2 * wanted, ...liveCounts.map((n) => n + 100))),
      // The outbox sender polls on a timer: nothing of it in the measurements.
      MAIL_POLL_MS: '3600000',
      // A year of DAY buckets per child entity is far above today's query cost bound and admission
      // weight (point 4 of issue 32 revisits both): lifted, so the bench measures the aggregate itself.
      GRAPHQL_MAX_COST: '100000000',
      ADMISSION_COST_PER_UNIT: '100000000',
    });
    // The service's warnings and errors go to the work dir, counted by message for the report.
    const serviceLogFile = createWriteStream(path.join(workDir, 'service.log'));
    later('dashboards: service log', () => new Promise<void>((r) => serviceLogFile.end(() => r())));
    const serviceLog: Record<string, number> = {};
    const logger = pino(
      { level: 'warn' },
      {
        write: (line: string) => {
          serviceLogFile.write(line);
          let msg = '?';
          try {
            msg = String((JSON.parse(line) as { msg?: unknown }).msg);
          } catch {
            // not JSON
          }
          serviceLog[msg] = (serviceLog[msg] ?? 0) + 1;
        },
      },
    );
    const logsSince = (before: Record<string, number>) =>
      Object.fromEntries(
        Object.entries(serviceLog)
          .map(([m, n]) => [m, n - (before[m] ?? 0)] as const)
          .filter(([, n]) => n > 0),
      );
    const app = await buildApp({ config, db: handle.db, logger, listen: handle.listen });
    serve(app.app, (req, res) => requestTag.run(req.headers['x-bench-capture'] === '1', () => app.app(req, res)));
    later('dashboards: app', async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await app.close();
    });
    const batch = config.PROVIDER_BATCH_SIZE;
    const expectedCalls = Math.ceil(subjects / batch);
    const pagesPerCall = Math.ceil((Math.min(batch, subjects) * POINTS_PER_SUBJECT) / PROVIDER_PAGE_SIZE);
    if (pagesPerCall > 1) log(`  note: a batch's points need ${pagesPerCall} provider pages: the call count will differ from the batches`);

    const auth = await bearer(url, TENANT_KEY, CLIENT);
    const gql = async (query: string, variables: Record<string, unknown>, headers: Record<string, string> = {}) => {
      const res = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ query, variables }),
      });
      const text = await res.text();
      const body = JSON.parse(text) as { data?: any; errors?: unknown };
      if (res.status !== 200 || body.errors)
        throw new Error(`GraphQL ${res.status}: ${JSON.stringify(body.errors ?? body).slice(0, 1000)}`);
      return { data: body.data, bytes: Buffer.byteLength(text) };
    };
    /** One aggregate, its answer checked: every subject and point counted, every bucket there. */
    const aggregate = async (extractKey: string, headers?: Record<string, string>, extra: Record<string, unknown> = {}) => {
      const r = await gql(AGGREGATE_QUERY, { input: { ...AGGREGATE_INPUT, extractKey, ...extra } }, headers);
      const a = r.data.dataPointAggregates;
      const c = a?.coverage;
      const wrong = [
        c?.subjectCount !== subjects && `coverage.subjectCount ${c?.subjectCount}`,
        a?.aggregates.count !== subjects * POINTS_PER_SUBJECT && `aggregates.count ${a?.aggregates.count}`,
        c?.contributingSubjectCount !== subjects && `contributingSubjectCount ${c?.contributingSubjectCount}`,
        (c?.unavailableSubjectCount || c?.staleSubjectCount) && `unavailable ${c.unavailableSubjectCount}, stale ${c.staleSubjectCount}`,
        a?.buckets.length !== BUCKETS && `${a?.buckets.length} buckets`,
      ].filter(Boolean);
      if (wrong.length > 0)
        throw new Error(
          `${extractKey}: expected ${subjects} subjects × ${POINTS_PER_SUBJECT} points in ${BUCKETS} buckets: ${wrong.join(', ')}`,
        );
      return r;
    };
    const timed = async <T>(fn: () => Promise<T>) => {
      const s0 = await providerStats(true);
      const l0 = { ...serviceLog };
      const t0 = performance.now();
      const value = await fn();
      const ms = performance.now() - t0;
      const s1 = await providerStats();
      return {
        value,
        ms,
        providerCalls: s1.getDataPointsCalls - s0.getDataPointsCalls,
        abandonedCalls: s1.abandoned - s0.abandoned,
        repeatedCalls: s1.repeated - s0.repeated,
        statuses: Object.fromEntries(
          Object.entries(s1.statuses)
            .map(([k, n]) => [k, n - (s0.statuses[k] ?? 0)] as const)
            .filter(([, n]) => n > 0),
        ),
        slowestCallMs: s1.slowestMs,
        serviceLog: logsSince(l0),
      };
    };
    const callsNote = (r: Omit<ColdRun, 'extractKey' | 'ms'>) =>
      `${r.providerCalls} provider calls${r.providerCalls === expectedCalls ? '' : `  MISMATCH (expected ${expectedCalls})`}` +
      `${r.repeatedCalls ? `, ${r.repeatedCalls} asked again` : ''}${r.abandonedCalls ? `, ${r.abandonedCalls} given up by the service before their answer` : ''}` +
      `${Object.keys(r.statuses).some((k) => k !== '200') ? `, answers ${JSON.stringify(r.statuses)}` : ''}, slowest answer ${r.slowestCallMs} ms` +
      `${Object.keys(r.serviceLog).length ? `; the service logged ${logNote(r.serviceLog)}` : ''}`;

    // 2. The cold path first (its extracts' sets fill the in-process cache before the warm one's).
    log(
      `  cold: ${coldRuns} aggregates, each over a new extract; expected ⌈${subjects} / ${batch}⌉ = ${expectedCalls} provider calls each`,
    );
    const runs: DashboardsResult['cold']['runs'] = [];
    for (let i = 1; i <= coldRuns; i++) {
      const extractKey = `cold-${i}`;
      await gql(CREATE_EXTRACT, { input: { key: extractKey, name: `Cold ${i}`, dataSourceKey: 'reference', options: EXTRACT_OPTIONS } });
      const r = await timed(() => aggregate(extractKey));
      const { value: _answer, ...numbers } = r;
      runs.push({ extractKey, ...numbers, ms: Math.round(r.ms * 10) / 10 });
      log(`    ${extractKey}: ${r.ms.toFixed(0)} ms, ${callsNote(r)}`);
    }
    // The warm extract's first aggregate fills its cache (a cold path as well).
    const { value: _primedAnswer, ...primed } = await timed(() => aggregate(EXTRACT_KEY));
    const prime = { ...primed, ms: Math.round(primed.ms * 10) / 10 };
    log(`    ${EXTRACT_KEY} (priming the warm cache): ${primed.ms.toFixed(0)} ms, ${callsNote(primed)}`);
    const asExpected = runs.every((r) => r.providerCalls === expectedCalls) && prime.providerCalls === expectedCalls;
    // The steady state of a cache in use: statistics of the new data_cache_point rows (autovacuum would
    // analyze them within a minute), and the visibility map set.
    await sql`VACUUM ANALYZE`.execute(handle.db);

    // 1. Warm: after the warm-ups, one request with its statements recorded (only that request's), then
    // the series, each request followed by the recorded statements replayed alone.
    let answer: unknown;
    const warmSeries = async (name: string, extraOf: () => Record<string, unknown>): Promise<WarmSeries> => {
      for (let w = 0; w < WARMUPS; w++) await aggregate(EXTRACT_KEY, undefined, extraOf());
      const { statements } = await recording(() => aggregate(EXTRACT_KEY, { 'x-bench-capture': '1' }, extraOf()));
      const captured = describeStatements(statements);
      log(`  ${name}: one request ran ${statements.length} statements (${f(captured.sqlMs)} ms as Kysely timed them): ${captured.summary}`);
      // The aggregate's own statement: the largest one over data_cache_point, with its transaction around it.
      const main = statements.reduce<number>(
        (best, s, i) => (/\bdata_cache_point\b/.test(s.sql) && (best < 0 || s.sql.length > statements[best]!.sql.length) ? i : best),
        -1,
      );
      let aggregateStatements: Recorded[] | undefined;
      if (main >= 0) {
        let from = main;
        let to = main;
        let begin = main - 1;
        while (begin >= 0 && !/^\s*begin\b/i.test(statements[begin]!.sql)) begin--;
        const commit = statements.findIndex((s, i) => i > main && /^\s*(commit|rollback)\b/i.test(s.sql));
        if (begin >= 0 && commit > main && !statements.slice(begin + 1, main).some((s) => /^\s*(commit|rollback)\b/i.test(s.sql))) {
          from = begin;
          to = commit;
        }
        aggregateStatements = statements.slice(from, to + 1);
      }

      // The baseline: the recorded statements alone, in order, with their parameters, on one connection
      // (taken from the pool for each replay: PGlite has one, which the requests need in between).
      const replay = (list: Recorded[]) => {
        const compiled = list.map((s) => CompiledQuery.raw(s.sql, s.parameters));
        return () =>
          handle.db.connection().execute(async (c) => {
            const t0 = performance.now();
            for (const q of compiled) await c.executeQuery(q);
            return performance.now() - t0;
          });
      };
      const replayAll = replay(statements);
      const replayAggregate = aggregateStatements ? replay(aggregateStatements) : undefined;
      for (let w = 0; w < WARMUPS; w++) {
        await replayAll();
        await replayAggregate?.();
      }
      // Request and replays take turns, so that all three see the same state of the machine.
      const warmMs: number[] = [];
      const allMs: number[] = [];
      const aggregateMs: number[] = [];
      const c0 = (await providerStats()).getDataPointsCalls;
      let answerBytes = 0;
      for (let i = 0; i < iterations; i++) {
        const t0 = performance.now();
        const r = await aggregate(EXTRACT_KEY, undefined, extraOf());
        warmMs.push(performance.now() - t0);
        answer = r.data.dataPointAggregates;
        answerBytes = r.bytes;
        allMs.push(await replayAll());
        if (replayAggregate) aggregateMs.push(await replayAggregate());
      }
      const warm = { ...timing(warmMs), providerCalls: (await providerStats()).getDataPointsCalls - c0, answerBytes };
      const all = timing(allMs);
      const aggregateOnly = aggregateStatements ? { ...timing(aggregateMs), statements: aggregateStatements.length } : undefined;
      log(`  ${name}: p50 ${f(warm.p50Ms)} ms, p95 ${f(warm.p95Ms)} ms over ${iterations} requests, ${warm.providerCalls} provider calls`);
      log(
        `  ${name}, baseline: all ${statements.length} statements p50 ${f(all.p50Ms)} ms, p95 ${f(all.p95Ms)} ms` +
          (aggregateOnly
            ? `; the aggregate's ${aggregateOnly.statements} alone p50 ${f(aggregateOnly.p50Ms)} ms, p95 ${f(aggregateOnly.p95Ms)} ms`
            : ''),
      );
      return { ...warm, captured, baseline: { all, ...(aggregateOnly ? { aggregateOnly } : {}) } };
    };
    // `maxGroups` 100, 99, …: each request a question not asked before (the bound is not reached: no groups).
    let asked = 0;
    const newQuestion = await warmSeries('a new question each time', () => ({ maxGroups: 100 - (asked++ % 100) }));
    const warm = await warmSeries('the same question again', () => ({}));

    // Issue 32's dataset. Its failure leaves the other numbers standing.
    let scale: ScaleResult | undefined;
    let scaleError: string | undefined;
    if (dataset) {
      try {
        scale = await runScale({
          dataset,
          db: handle.db,
          tenantId: seeded.tenantId,
          workDir,
          gql: (query, variables) => gql(query, variables),
          providerCalls: async () => (await providerStats()).getDataPointsCalls,
          questionCount: Math.max(1, Math.floor(envNumber('BENCH_DASHBOARDS_QUESTIONS', dataset.days > 100 ? 12 : 24))),
          iterations,
          log,
        });
      } catch (e) {
        scaleError = describe(e);
        log(`  ${dataset.name} dataset failed: ${scaleError}`);
      }
    }

    // 3. Subscriptions. Their failure leaves the aggregates' numbers standing.
    let subscriptions: DashboardsResult['subscriptions'];
    let subscriptionsError: string | undefined;
    if (wanted > 0) {
      try {
        subscriptions = await measureSubscriptions({ url, auth, wanted, pin, log, recording });
      } catch (e) {
        subscriptionsError = describe(e);
        log(`  subscriptions failed: ${subscriptionsError}`);
      }
    }

    // 4. Live aggregates. Their failure leaves the other numbers standing.
    let live: LiveResult | undefined;
    let liveError: string | undefined;
    if (liveCounts.length > 0) {
      try {
        live = await measureLiveAggregates({
          url,
          auth,
          input: { ...AGGREGATE_INPUT, extractKey: EXTRACT_KEY },
          changeAtProvider: async (subject) => {
            const res = await fetch(`${providerUrl}/admin/subjects/${employeeNumber(subject)}/revision`, { method: 'POST' });
            if (!res.ok) throw new Error(`the provider's revision bump answered ${res.status}`);
            await res.body?.cancel();
          },
          counts: liveCounts,
          pin,
          log,
        });
      } catch (e) {
        liveError = describe(e);
        log(`  live aggregates failed: ${liveError}`);
      }
    }

    const result: Omit<DashboardsResult, 'rows' | 'targets'> = {
      subjects,
      pointsPerSubject: POINTS_PER_SUBJECT,
      providerLatencyMs: latencyMs,
      providerPageSize: PROVIDER_PAGE_SIZE,
      providerBatchSize: batch,
      providerTimeoutMs: config.PROVIDER_TIMEOUT_MS,
      iterations,
      seedSeconds,
      runtimeSeconds: 0,
      pinned: pin,
      aggregate: { query: AGGREGATE_QUERY, input: { ...AGGREGATE_INPUT, extractKey: EXTRACT_KEY }, answer },
      warm,
      newQuestion,
      cold: { expectedCalls, runs, prime, asExpected },
      ...(subscriptions ? { subscriptions } : {}),
      ...(subscriptionsError ? { subscriptionsError } : {}),
      ...(live ? { live } : {}),
      ...(liveError ? { liveError } : {}),
      ...(scale ? { scale } : {}),
      ...(scaleError ? { scaleError } : {}),
    };
    result.runtimeSeconds = Math.round((performance.now() - started) / 1000);
    return { ...result, ...tableOf(result, bench.kind) };
  } finally {
    // Newest first: the app before the database it uses.
    for (const u of undo.reverse()) {
      try {
        await u();
      } catch (e) {
        console.error(`dashboards: cleanup failed: ${(e as Error).message}`);
      }
    }
  }
}

/** Opens the subscriptions (after a warm-up round), measures memory, sends one change and times its delivery. */
async function measureSubscriptions(opts: {
  url: string;
  auth: { authorization: string };
  wanted: number;
  pin: boolean;
  log: (line: string) => void;
  recording: <T>(fn: () => Promise<T>) => Promise<{ value: T; statements: Recorded[] }>;
}): Promise<NonNullable<DashboardsResult['subscriptions']>> {
  const { url, auth, wanted, pin, log } = opts;
  const gc = forcedGc();
  const inbound = await bearer(url, TENANT_KEY, INBOUND_CLIENT, 'ServiceDataProviderApi');
  const open = (count: number): ToClients => ({
    type: 'open',
    url,
    headers: auth,
    body: JSON.stringify({ query: SUBSCRIPTION, variables: { extractKey: EXTRACT_KEY } }),
    count,
    concurrency: 50,
  });
  /** A change report for one subject, as the provider's inbound client sends it. */
  const change = async (subject: number) => {
    const t0 = performance.now();
    const res = await fetch(`${url}${CHANGE_PATH}`, {
      method: 'POST',
      headers: { ...inbound, 'content-type': 'application/json', 'x-bench-capture': '1' },
      body: JSON.stringify({
        SubjectIdentifier: employeeNumber(subject),
        DataExtractsOptionsValuesFilter: { metric: EXTRACT_OPTIONS.metric },
        NewOrUpdatedDataPoints: [],
      }),
    });
    const body = (await res.json()) as { FlaggedDataExtractKeys?: string[] };
    const answerMs = performance.now() - t0;
    if (res.status !== 200) throw new Error(`the change report answered ${res.status}: ${JSON.stringify(body).slice(0, 500)}`);
    return { status: res.status, answerMs: Math.round(answerMs * 10) / 10, flagged: body.FlaggedDataExtractKeys };
  };

  // A warm-up round: a few subscriptions hear one change, then close (code paths compiled, pipeline checked).
  const warmups = Math.min(SUBSCRIPTION_WARMUPS, wanted);
  const warmup = new Subscribers(pin);
  try {
    const o = await warmup.ask(open(warmups), 'opened', 60_000);
    if (o.established < warmups) throw new Error(`warm-up: ${o.established}/${warmups} subscriptions opened: ${o.failures.join('; ')}`);
    await change(1);
    const got = await warmup.ask({ type: 'collect', expect: 1, timeoutMs: 10_000 }, 'collected', 20_000);
    if (got.arrivals.length < warmups)
      throw new Error(
        `warm-up: ${got.arrivals.length}/${warmups} subscribers heard the change${got.errors.length ? `: ${got.errors.join('; ')}` : ''}`,
      );
  } finally {
    await warmup.close();
  }
  // The server sees the streams go (their close frees the subscriptions), the sweep re-fetches the flagged subject.
  await sleep(1000);

  const before = memory(gc);
  const subscribers = new Subscribers(pin);
  try {
    const o = await subscribers.ask(open(wanted), 'opened', 300_000);
    log(
      `  subscriptions: ${o.established}/${wanted} open in ${(o.ms / 1000).toFixed(1)} s${o.failures.length ? `; failures: ${o.failures[0]}` : ''}`,
    );
    if (o.established === 0) throw new Error(`no subscription opened: ${o.failures.join('; ')}`);
    await sleep(500);
    const opened = memory(gc);
    const per = (k: keyof Memory) => Math.round((opened[k] - before[k]) / o.established);
    const perSubscription = { heapBytes: per('heapUsedBytes'), rssBytes: per('rssBytes'), externalBytes: per('externalBytes') };
    log(`  memory per open subscription: heap ${kb(perSubscription.heapBytes)}, RSS ${kb(perSubscription.rssBytes)}`);

    const sent = performance.timeOrigin + performance.now();
    const { value: answer, statements } = await opts.recording(() => change(0));
    const { summary, ...seen } = describeStatements(statements);
    const answered = { ...answer, statements: seen };
    const got = await subscribers.ask({ type: 'collect', expect: 1, timeoutMs: 30_000 }, 'collected', 60_000);
    const delays = got.arrivals.map((at) => at - sent).sort((a, b) => a - b);
    const q = (p: number) => Math.round(delays[Math.min(delays.length - 1, Math.floor(p * delays.length))]! * 100) / 100;
    const delivery = delays.length > 0 ? { firstMs: q(0), p50Ms: q(0.5), p95Ms: q(0.95), lastMs: q(1) } : undefined;
    log(
      `  one change: ${got.arrivals.length}/${o.established} received` +
        (delivery ? `, first ${f(delivery.firstMs)} ms, p50 ${f(delivery.p50Ms)} ms, last ${f(delivery.lastMs)} ms` : '') +
        `; the change report answered in ${f(answered.answerMs)} ms${got.errors.length ? `; errors: ${got.errors.join('; ')}` : ''}`,
    );
    log(
      `  the change report (and the re-fetch it started) ran ${statements.length} statements (${f(seen.sqlMs)} ms as Kysely timed them): ${summary}`,
    );
    await subscribers.close();
    await sleep(1000);
    const afterClose = memory(gc);
    return {
      wanted,
      established: o.established,
      openFailures: o.failures,
      openSeconds: Math.round(o.ms / 100) / 10,
      memory: { before, open: opened, afterClose },
      perSubscription,
      change: answered,
      received: got.arrivals.length,
      ...(delivery ? { delivery } : {}),
      errors: got.errors,
      sample: got.sample,
    };
  } finally {
    await subscribers.close();
  }
}

/** Issue 32's live fan-out: a dashboard's question as `dataPointAggregatesChanged`, its answers pushed. */
const LIVE_SUBSCRIPTION = `subscription($input: DataPointAggregatesInput!) {
  dataPointAggregatesChanged(input: $input) {
    aggregates { count subjectCount sum average min max stddevSample percentiles(p: [0.5, 0.9]) }
    buckets { start startsAt aggregates { count subjectCount sum average min max percentiles(p: [0.5, 0.9]) } }
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
  }
}`;
/** After a change, what a burst may still compute: P110's longest wait (1 s) and a computation. */
const LIVE_SETTLE_MS = 2_000;
/** Issue 32's live targets: every subscriber has the new answer this soon after the change post returned… */
export const LIVE_DELIVERY_TARGET_MS = 500;
/** …and this many open aggregate subscriptions stay under LIVE_RSS_TARGET_BYTES of the server's RSS. */
export const LIVE_RSS_SUBSCRIPTIONS = 10_000;
export const LIVE_RSS_TARGET_BYTES = 2 ** 30;

/** `fn`, with this process's CPU profile written to `file` when one is named. */
async function profiled<T>(file: string | undefined, log: (line: string) => void, fn: () => Promise<T>): Promise<T> {
  if (!file) return fn();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await fn();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    await writeFile(file, JSON.stringify(profile));
    session.disconnect();
    log(`  CPU profile: ${file}`);
  }
}

/** One round of the live fan-out: `count` subscribers of one question, one change. */
export interface LiveRound {
  wanted: number;
  established: number;
  openSeconds: number;
  /** Subscribers that had the first answer (the current one) before the change. */
  answered: number;
  /** Whole-process memory of the server (this process) after a forced GC: before opening, all open. */
  memory: { before: Memory; open: Memory };
  perSubscription: { heapBytes: number; rssBytes: number; externalBytes: number };
  /** aggregate_recomputations_total (/metrics): while opening (reason subscribe) and after the change (reason change). */
  recomputations: { subscribe: number; change: number };
  /** The first round's change (the next rounds only open). */
  change?: { status: number; answerMs: number };
  /** Subscribers that had the next answer. */
  received?: number;
  /** Subscribers that had another answer after it (within the burst's settling time). */
  secondPushes?: number;
  /** Milliseconds from the change post's return to each subscriber's next answer. */
  delivery?: { firstMs: number; p50Ms: number; p95Ms: number; lastMs: number };
  errors: string[];
}

export interface LiveResult {
  question: Record<string, unknown>;
  rounds: LiveRound[];
}

/** The instance's live aggregate computations so far, by reason (its /metrics). */
async function recomputations(url: string): Promise<{ subscribe: number; change: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const of = (reason: string) =>
    Number(text.match(new RegExp(`^aggregate_recomputations_total\\{reason="${reason}"\\} (\\S+)$`, 'm'))?.[1] ?? 0);
  return { subscribe: of('subscribe'), change: of('change') };
}

/** A provider's change report for one subject (its client's bearer in `inbound`), timed to its answer. */
async function postChange(url: string, inbound: { authorization: string }, subject: number) {
  const t0 = performance.now();
  const res = await fetch(`${url}${CHANGE_PATH}`, {
    method: 'POST',
    headers: { ...inbound, 'content-type': 'application/json' },
    body: JSON.stringify({
      SubjectIdentifier: employeeNumber(subject),
      DataExtractsOptionsValuesFilter: { metric: EXTRACT_OPTIONS.metric },
    }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`the change report answered ${res.status}: ${text.slice(0, 500)}`);
  return { status: res.status, answerMs: Math.round((performance.now() - t0) * 10) / 10 };
}

/**
 * `counts` rounds: each opens that many `dataPointAggregatesChanged` subscriptions of the dashboard's
 * question (one group), waits for every first answer, measures the server's memory, posts one change
 * report for one subject under the question (whose points the provider changed first) and times each
 * subscriber's next answer from the post's return: the answer computed after the change differs (the
 * subject's new points once re-fetched, or the subject counted stale until then), so it is pushed. A
 * second push (the re-fetched points after a stale answer) is counted apart.
 */
async function measureLiveAggregates(opts: {
  url: string;
  auth: { authorization: string };
  input: Record<string, unknown>;
  /** Changes the subject's points at the provider (its next answer for them differs). */
  changeAtProvider: (subject: number) => Promise<void>;
  counts: number[];
  pin: boolean;
  log: (line: string) => void;
}): Promise<LiveResult> {
  const { url, auth, input, pin, log } = opts;
  const gc = forcedGc();
  const inbound = await bearer(url, TENANT_KEY, INBOUND_CLIENT, 'ServiceDataProviderApi');
  const rounds: LiveRound[] = [];
  // BENCH_LIVE_PROFILE=<prefix>: the server's CPU profiles of each round's opening and of the change's fan-out.
  const profilePrefix = process.env['BENCH_LIVE_PROFILE'] || undefined;
  for (const [i, wanted] of opts.counts.entries()) {
    // The previous change's re-fetch done (its subject fresh again), the last round's streams seen closed.
    await sleep(2000);
    const before = memory(gc);
    const r0 = await recomputations(url);
    const subscribers = new Subscribers(pin);
    try {
      const body = JSON.stringify({ query: LIVE_SUBSCRIPTION, variables: { input } });
      const o = await profiled(profilePrefix && `${profilePrefix}-open-${wanted}.cpuprofile`, log, () =>
        subscribers.ask({ type: 'open', url, headers: auth, body, count: wanted, concurrency: 50 }, 'opened', 1_200_000),
      );
      if (o.established === 0) throw new Error(`no live aggregate subscription opened: ${o.failures.join('; ')}`);
      const first = await subscribers.ask({ type: 'collect', expect: 1, timeoutMs: 60_000 }, 'collected', 120_000);
      await sleep(500);
      const open = memory(gc);
      const per = (k: keyof Memory) => Math.round((open[k] - before[k]) / o.established);
      const perSubscription = { heapBytes: per('heapUsedBytes'), rssBytes: per('rssBytes'), externalBytes: per('externalBytes') };
      const r1 = await recomputations(url);
      log(
        `  live aggregates: ${o.established}/${wanted} open in ${(o.ms / 1000).toFixed(1)} s, ${first.arrivals.length} with the first answer ` +
          `(${r1.subscribe - r0.subscribe} computed); RSS ${(open.rssBytes / 2 ** 20).toFixed(0)} MB, per subscription ` +
          `heap ${kb(perSubscription.heapBytes)}, RSS ${kb(perSubscription.rssBytes)}`,
      );
      const opened = {
        wanted,
        established: o.established,
        openSeconds: Math.round(o.ms / 100) / 10,
        answered: first.arrivals.length,
        memory: { before, open },
        perSubscription,
        errors: first.errors,
      };
      // The first round's subscribers hear a change; the next rounds' (the RSS measurement) only open.
      if (i > 0) {
        rounds.push({ ...opened, recomputations: { subscribe: r1.subscribe - r0.subscribe, change: 0 } });
        continue;
      }
      await opts.changeAtProvider(i);
      const { change, returned, got } = await profiled(profilePrefix && `${profilePrefix}-change-${wanted}.cpuprofile`, log, async () => {
        const change = await postChange(url, inbound, i);
        const returned = performance.timeOrigin + performance.now();
        const got = await subscribers.ask({ type: 'collect', expect: 2, timeoutMs: 30_000 }, 'collected', 60_000);
        return { change, returned, got };
      });
      // Computations a burst may still start (P110's longest wait) counted too.
      await sleep(LIVE_SETTLE_MS);
      const r2 = await recomputations(url);
      const second = await subscribers.ask({ type: 'collect', expect: 3, timeoutMs: 0 }, 'collected', 60_000);
      const delays = got.arrivals.map((at) => at - returned).sort((a, b) => a - b);
      const q = (p: number) => Math.round(delays[Math.min(delays.length - 1, Math.floor(p * delays.length))]! * 10) / 10;
      const delivery = delays.length > 0 ? { firstMs: q(0), p50Ms: q(0.5), p95Ms: q(0.95), lastMs: q(1) } : undefined;
      const errors = [...new Set([...first.errors, ...got.errors])];
      log(
        `  live aggregates: one change (post answered in ${f(change.answerMs)} ms): ${got.arrivals.length}/${o.established} had the new answer` +
          (delivery
            ? `, first ${f(delivery.firstMs)} ms, p50 ${f(delivery.p50Ms)} ms, p95 ${f(delivery.p95Ms)} ms, last ${f(delivery.lastMs)} ms after it returned`
            : '') +
          `; ${r2.change - r1.change} recomputations, ${second.arrivals.length} had a second new answer${errors.length ? `; errors: ${errors.join('; ')}` : ''}`,
      );
      rounds.push({
        ...opened,
        recomputations: { subscribe: r1.subscribe - r0.subscribe, change: r2.change - r1.change },
        secondPushes: second.arrivals.length,
        change,
        received: got.arrivals.length,
        ...(delivery ? { delivery } : {}),
        errors,
      });
    } finally {
      await subscribers.close();
    }
  }
  return { question: input, rounds };
}

/** The table's rows and the targets, from the numbers. */
function tableOf(
  r: Omit<DashboardsResult, 'rows' | 'targets'>,
  database: 'pglite' | 'postgres',
): Pick<DashboardsResult, 'rows' | 'targets'> {
  const onPostgres = database === 'postgres';
  const full = r.subjects === DEFAULT_AGGREGATE_SUBJECTS;
  const warmHolds = onPostgres && full ? r.warm.p50Ms <= WARM_P50_TARGET_MS : undefined;
  const rows: DashboardRow[] = [];
  const seriesRows = (w: WarmSeries, what: string, target: string, holds: boolean | undefined) => {
    const stmts = w.captured.statements.length;
    rows.push({
      scenario: `aggregate, warm cache, ${what} (${r.subjects} subjects × ${r.pointsPerSubject} points, POST /graphql)`,
      p50Ms: w.p50Ms,
      p95Ms: w.p95Ms,
      target,
      ...(holds !== undefined ? { holds } : {}),
      note:
        `${w.iterations} requests; ${w.providerCalls} provider calls; ${stmts} statements, ${f(w.captured.sqlMs)} ms of SQL ` +
        `as Kysely timed them; request ÷ baseline ${(w.p50Ms / w.baseline.all.p50Ms).toFixed(2)}×`,
    });
    rows.push({
      scenario: `baseline: that request's ${stmts} statements alone`,
      p50Ms: w.baseline.all.p50Ms,
      p95Ms: w.baseline.all.p95Ms,
      target: '–',
      note: 'replayed with their parameters on one connection, in order (authentication and transaction included)',
    });
    if (w.baseline.aggregateOnly)
      rows.push({
        scenario: `baseline: the aggregate statement alone (${w.baseline.aggregateOnly.statements} with its transaction)`,
        p50Ms: w.baseline.aggregateOnly.p50Ms,
        p95Ms: w.baseline.aggregateOnly.p95Ms,
        target: '–',
        note: 'the statement over data_cache_point with its BEGIN, settings and COMMIT',
      });
  };
  seriesRows(
    r.warm,
    'the same question again',
    `p50 ≤ ${WARM_P50_TARGET_MS} ms on PostgreSQL${warmHolds === undefined ? (onPostgres ? ' (needs 10000 subjects)' : ' (not this database)') : warmHolds ? ': yes' : ': no'}`,
    warmHolds,
  );
  seriesRows(r.newQuestion, 'a new question each time (maxGroups varied: the answer cache misses)', '–', undefined);

  const everyCold = [...r.cold.runs, { ...r.cold.prime, extractKey: 'prime' }];
  const callsOf = (x: Omit<ColdRun, 'extractKey'>) =>
    `${x.providerCalls}${x.repeatedCalls || x.abandonedCalls ? ` (${[x.repeatedCalls && `${x.repeatedCalls} asked again`, x.abandonedCalls && `${x.abandonedCalls} given up`].filter(Boolean).join(', ')})` : ''}`;
  const callList = r.cold.runs.map(callsOf).join(', ');
  // Each cold aggregate, the warm extract's priming one included: the same path (nothing of the extract cached).
  const cold = timing(everyCold.map((x) => x.ms));
  const logged: Record<string, number> = {};
  for (const x of everyCold) for (const [m, n] of Object.entries(x.serviceLog)) logged[m] = (logged[m] ?? 0) + n;
  rows.push({
    scenario: `aggregate, cold (${everyCold.length} runs: a new extract each, then the warm one's first; provider latency ${r.providerLatencyMs} ms)`,
    p50Ms: cold.p50Ms,
    p95Ms: cold.p95Ms,
    target: `⌈${r.subjects} / PROVIDER_BATCH_SIZE ${r.providerBatchSize}⌉ = ${r.cold.expectedCalls} provider calls: ${r.cold.asExpected ? 'yes' : 'no'}`,
    holds: r.cold.asExpected,
    note:
      `new extracts: ${callList} calls; the warm extract's first: ${callsOf(r.cold.prime)} calls; ` +
      `slowest provider answer ${Math.max(...everyCold.map((x) => x.slowestCallMs))} ms; ` +
      (r.cold.asExpected
        ? 'as expected'
        : `MISMATCH: expected ${r.cold.expectedCalls} each` +
          (everyCold.some((x) => x.abandonedCalls > 0)
            ? ` (calls given up before their answer were retried: PROVIDER_TIMEOUT_MS ${r.providerTimeoutMs} ms)`
            : '')) +
      (Object.keys(logged).length ? `; the service logged ${logNote(logged)}` : ''),
  });
  const s = r.subscriptions;
  if (s) {
    const all = s.received === s.established && s.established === s.wanted;
    rows.push({
      scenario: `${s.wanted} subscriptions: one change until each receives it`,
      ...(s.delivery ? { p50Ms: s.delivery.p50Ms, p95Ms: s.delivery.p95Ms } : {}),
      target: `every subscriber receives it: ${all ? 'yes' : 'no'}`,
      holds: all,
      note:
        (s.delivery ? `first ${f(s.delivery.firstMs)} ms, last ${f(s.delivery.lastMs)} ms; ` : '') +
        `${s.received}/${s.established} received (${s.established}/${s.wanted} open); change report answered in ${f(s.change.answerMs)} ms` +
        (s.errors.length ? `; errors: ${s.errors.join('; ')}` : ''),
    });
    rows.push({
      scenario: 'memory per open subscription',
      target: '–',
      note:
        `heap ${kb(s.perSubscription.heapBytes)}, RSS ${kb(s.perSubscription.rssBytes)}, external ${kb(s.perSubscription.externalBytes)} ` +
        `(the server's process, after a forced GC, ${s.established} open: heap ${(s.memory.before.heapUsedBytes / 2 ** 20).toFixed(0)} → ` +
        `${(s.memory.open.heapUsedBytes / 2 ** 20).toFixed(0)} MB, ${(s.memory.afterClose.heapUsedBytes / 2 ** 20).toFixed(0)} MB after closing); ` +
        `opened in ${s.openSeconds} s`,
    });
  } else if (r.subscriptionsError) {
    rows.push({
      scenario: 'subscriptions',
      target: 'every subscriber receives it: no',
      holds: false,
      note: `failed: ${r.subscriptionsError}`,
    });
  }
  const targets: Target[] = [
    {
      target: `warm aggregate over 10000 subjects × 7 points: p50 ≤ ${WARM_P50_TARGET_MS} ms on PostgreSQL`,
      measured:
        `asked again ${f(r.warm.p50Ms)} ms (its statements alone: ${f(r.warm.baseline.all.p50Ms)} ms); ` +
        `a new question ${f(r.newQuestion.p50Ms)} ms (its statements alone: ${f(r.newQuestion.baseline.all.p50Ms)} ms` +
        `${r.newQuestion.baseline.aggregateOnly ? `, the aggregate statement alone ${f(r.newQuestion.baseline.aggregateOnly.p50Ms)} ms` : ''})`,
      holds: warmHolds,
    },
    {
      target: `cold aggregate: exactly ⌈subjects / PROVIDER_BATCH_SIZE⌉ = ${r.cold.expectedCalls} provider calls`,
      measured: `${callList} (priming: ${r.cold.prime.providerCalls})`,
      holds: r.cold.asExpected,
    },
  ];
  const lived = liveTable(r.live, r.liveError);
  rows.push(...lived.rows);
  targets.push(...lived.targets);
  if (r.scale) targets.push(...scaleTargets(r.scale));
  else if (r.scaleError) targets.push({ target: "issue 32's dataset", measured: `failed: ${r.scaleError}`, holds: false });
  if (s || r.subscriptionsError)
    targets.push({
      target: `${s?.wanted ?? ''} open subscriptions all receive one change`,
      measured: s ? `${s.received}/${s.wanted}${s.delivery ? `, last after ${f(s.delivery.lastMs)} ms` : ''}` : 'failed',
      holds: s ? s.received === s.wanted : false,
    });
  return { rows, targets };
}

/** The live fan-out's rows and targets (issue 32): delivery, recomputations, memory. */
function liveTable(live: LiveResult | undefined, error: string | undefined): Pick<DashboardsResult, 'rows' | 'targets'> {
  if (!live) {
    if (!error) return { rows: [], targets: [] };
    const failed = { target: 'live aggregates', measured: `failed: ${error}`, holds: false };
    return { rows: [{ scenario: 'live aggregates', target: failed.target, holds: false, note: failed.measured }], targets: [failed] };
  }
  const rows: DashboardRow[] = [];
  const targets: Target[] = [];
  const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MB`;
  for (const x of live.rounds) {
    const what = `${x.wanted} \`dataPointAggregatesChanged\` subscribers of one question`;
    if (x.change) {
      const all = x.received === x.wanted && x.established === x.wanted;
      const inTime = all && x.delivery !== undefined && x.delivery.lastMs <= LIVE_DELIVERY_TARGET_MS;
      const once = x.recomputations.change === 1;
      rows.push({
        scenario: `live aggregates: ${what}, one change post until each has the new answer`,
        ...(x.delivery ? { p50Ms: x.delivery.p50Ms, p95Ms: x.delivery.p95Ms } : {}),
        target: `every one ≤ ${LIVE_DELIVERY_TARGET_MS} ms after the post returned: ${inTime ? 'yes' : 'no'}`,
        holds: inTime,
        note:
          (x.delivery ? `first ${f(x.delivery.firstMs)} ms, last ${f(x.delivery.lastMs)} ms; ` : '') +
          `${x.received}/${x.established} had it (${x.established}/${x.wanted} open, ${x.answered} with the first answer); ` +
          `the post answered in ${f(x.change.answerMs)} ms` +
          (x.errors.length ? `; errors: ${x.errors.join('; ')}` : ''),
      });
      rows.push({
        scenario: `live aggregates: recomputations for ${what}`,
        target: `1 per change burst: ${once ? 'yes' : 'no'}`,
        holds: once,
        note:
          `${x.recomputations.change} after the change (aggregate_recomputations_total{reason="change"}; the post's event and the ` +
          `re-fetch's), ${x.recomputations.subscribe} for the ${x.established} first answers; ${x.secondPushes} subscribers had a second new answer`,
      });
      targets.push({
        target: `live: ${x.wanted} subscribers of one question have the new answer ≤ ${LIVE_DELIVERY_TARGET_MS} ms after the change post returns`,
        measured: x.delivery
          ? `${x.received}/${x.wanted}; first ${f(x.delivery.firstMs)}, p50 ${f(x.delivery.p50Ms)}, p95 ${f(x.delivery.p95Ms)}, last ${f(x.delivery.lastMs)} ms`
          : `${x.received}/${x.wanted}`,
        holds: inTime,
      });
      targets.push({
        target: `live: ${x.wanted} subscribers of one question → 1 recomputation per change burst`,
        measured: `${x.recomputations.change}`,
        holds: once,
      });
    }
    const under = x.memory.open.rssBytes < LIVE_RSS_TARGET_BYTES;
    const rssRound = x.wanted >= LIVE_RSS_SUBSCRIPTIONS;
    rows.push({
      scenario: `live aggregates: memory with ${x.established} open`,
      target: rssRound ? `RSS < ${mb(LIVE_RSS_TARGET_BYTES)}: ${under ? 'yes' : 'no'}` : '–',
      ...(rssRound ? { holds: under } : {}),
      note:
        `the server's process after a forced GC: RSS ${mb(x.memory.before.rssBytes)} → ${mb(x.memory.open.rssBytes)}, heap ` +
        `${mb(x.memory.before.heapUsedBytes)} → ${mb(x.memory.open.heapUsedBytes)}; per open subscription heap ${kb(x.perSubscription.heapBytes)}, ` +
        `RSS ${kb(x.perSubscription.rssBytes)}, external ${kb(x.perSubscription.externalBytes)}; opened in ${x.openSeconds} s`,
    });
    if (rssRound)
      targets.push({
        target: `live: ${LIVE_RSS_SUBSCRIPTIONS} open aggregate subscriptions under ${mb(LIVE_RSS_TARGET_BYTES)} RSS`,
        measured: `${x.established} open: RSS ${mb(x.memory.open.rssBytes)} (${kb(x.perSubscription.rssBytes)} per subscription; heap ${kb(x.perSubscription.heapBytes)})`,
        holds: under && x.established >= LIVE_RSS_SUBSCRIPTIONS,
      });
  }
  return { rows, targets };
}

/** Change posts at provider scale (issue 32, build point 3): its rows and targets. */
function burstTable(b: ChangeBurstResult | undefined, error: string | undefined): Pick<DashboardsResult, 'rows' | 'targets'> {
  if (!b) {
    const failed = { target: 'change posts', measured: `failed: ${error ?? '?'}`, holds: false };
    return { rows: [{ scenario: 'change posts', target: failed.target, holds: false, note: failed.measured }], targets: [failed] };
  }
  const refused = b.flagging.statuses[429] ?? 0;
  const fast = b.flagging.postsPerSecond >= 1000;
  const batched = b.refetch.calls === b.refetch.target;
  const what = `${b.posts} change posts, ${b.inFlight} in flight, each flagging one of ${b.subjects} subjects`;
  const rows: DashboardRow[] = [
    {
      scenario: `change posts: ${what}`,
      target: `≥ 1,000 posts/s${b.database === 'postgres' ? '' : ' (on PostgreSQL)'}: ${fast ? 'yes' : 'no'}; no 429: ${refused === 0 ? 'yes' : 'no'}`,
      holds: fast && refused === 0,
      note:
        `${b.flagging.postsPerSecond} posts/s, answers ${JSON.stringify(b.flagging.statuses)}, ${b.flagging.statementsPerPost} statements per post; ` +
        `matching no extract: ${b.flaggingNothing.postsPerSecond} posts/s (bench/change-burst.ts)`,
    },
    {
      scenario: `change posts: the re-fetch of ${b.subjects} subjects flagged one per post`,
      target: `⌈${b.subjects} / ${b.batchSize}⌉ = ${b.refetch.target} provider calls: ${batched ? 'yes' : 'no'}`,
      holds: batched,
      note: `${b.refetch.calls} calls, done ${b.refetch.doneMs} ms after the last post returned; the posts' answers ${JSON.stringify(b.refetch.statuses)}`,
    },
  ];
  const targets: Target[] = [
    {
      target: 'change posts: ≥ 1,000 per second per instance on PostgreSQL',
      measured: `${b.flagging.postsPerSecond} posts/s (${b.database})`,
      holds: fast,
    },
    {
      target: `change posts: a burst of ${b.posts} posts with ${b.inFlight} in flight gets no 429`,
      measured: `${refused} × 429`,
      holds: refused === 0,
    },
    {
      target: `change posts: the re-fetch of n flagged subjects costs ⌈n / 100⌉ provider calls`,
      measured: `${b.refetch.calls} for ${b.subjects} (target ${b.refetch.target})`,
      holds: batched,
    },
  ];
  return { rows, targets };
}

/** The scenario's Markdown table. */
export function dashboardsMarkdown(r: DashboardsResult, database = ''): string {
  const lines = [
    `Dashboards (issue 17): ${r.subjects} subjects × ${r.pointsPerSubject} points; aggregate: DAY buckets of \`${String(r.aggregate.input['timeItemKey'])}\` ` +
      `in ${String(r.aggregate.input['timeZone'])}, ${String(r.aggregate.input['from'])} to ${String(r.aggregate.input['to'])}, over ` +
      `${(r.aggregate.input['structuralEntityKeys'] as string[]).join(' and ')} with their subtrees; ${r.iterations} sequential requests after ${WARMUPS} warm-ups; ` +
      `reference provider: ${r.providerLatencyMs} ms per call, page size ${r.providerPageSize}; PROVIDER_BATCH_SIZE ${r.providerBatchSize}; ` +
      `seeding ${r.seedSeconds} s, scenario ${r.runtimeSeconds} s${r.pinned ? '; server on core 0, subscribers on core 1' : ''}`,
    '',
    '| scenario | p50 ms | p95 ms | target | note |',
    '| --- | ---: | ---: | --- | --- |',
    ...r.rows.map((x) => `| ${x.scenario} | ${f(x.p50Ms)} | ${f(x.p95Ms)} | ${x.target} | ${x.note} |`),
  ];
  if (r.scale) lines.push('', scaleMarkdown(r.scale, database));
  else if (r.scaleError) lines.push('', `Dashboards at scale (issue 32): failed: ${r.scaleError}`);
  return lines.join('\n');
}

/** The default before run: issue 32's dashboards bench on the code as the issue found it, alone on the machine. */
const BEFORE_ISSUE_32 = '2026-11-27-dashboards-before-alone';

/** Every target of this run beside what the run in `beforeFile` measured for it (matched by the target's text). */
function targetsBeforeAfter(before: readonly Target[], after: readonly Target[], beforeFile: string): string {
  const then = new Map(before.map((t) => [t.target, t]));
  const holds = (t: Target | undefined) => (t === undefined || t.holds === undefined ? '' : t.holds ? ' (holds)' : ' (does not hold)');
  return [
    `Every target, before (${path.basename(beforeFile)}) and after (this run):`,
    '',
    '| target | before | after |',
    '| --- | --- | --- |',
    ...after.map((t) => {
      const b = then.get(t.target);
      return `| ${t.target} | ${b ? `${b.measured}${holds(b)}` : 'not measured then'} | ${t.measured}${holds(t)} |`;
    }),
  ].join('\n');
}

/** `npm run bench:dashboards`: the scenario alone, its table printed and written to bench/results. */
async function main() {
  const log = (line: string) => console.log(line);
  const codeFacts = watchCode(log);
  const loadAtStart = os.loadavg()[0]!;
  const databaseUrl = process.env['DATABASE_URL'];
  const result = await runDashboards({ databaseUrl, log });
  // bench/change-burst.ts's run after it (its own database and app, about half a minute), its targets in the table;
  // BENCH_DASHBOARDS_BURST=0 leaves it out.
  if (process.env['BENCH_DASHBOARDS_BURST'] !== '0') {
    try {
      result.burst = await runChangeBurst({ databaseUrl, log });
    } catch (e) {
      result.burstError = describe(e);
      log(`  change burst failed: ${result.burstError}`);
    }
    const burst = burstTable(result.burst, result.burstError);
    result.rows.push(...burst.rows);
    result.targets.push(...burst.targets);
  }
  const head = { label: process.env['BENCH_LABEL'] || undefined, machine: machineFacts(loadAtStart), ...codeFacts() };
  const database: DashboardsReport['database'] = databaseUrl ? 'postgres' : 'pglite';
  let table = `${provenance(head)}\n\n${dashboardsMarkdown(result, database)}`;
  // BENCH_BEFORE=bench/results/<file>.json: a previous run's numbers beside these; by default, for the 300k
  // dataset, the run on the code as issue 32 found it (00631a8) on the same database; BENCH_BEFORE=none: none.
  const beforeSetting =
    process.env['BENCH_BEFORE'] || (result.scale?.dataset.name === '300k' ? `bench/results/${BEFORE_ISSUE_32}-${database}.json` : 'none');
  if (beforeSetting !== 'none' && result.scale) {
    const before = JSON.parse(await readFile(path.resolve(REPO, beforeSetting), 'utf8')) as Partial<DashboardsReport>;
    table += `\n\n${beforeAfterMarkdown(before.scale, result.scale, beforeSetting)}\n\n${targetsBeforeAfter(before.targets ?? [], result.targets, beforeSetting)}`;
  }
  console.log(`\n${table}\n`);
  const report: DashboardsReport = {
    ...head,
    date: new Date().toISOString().slice(0, 10),
    database,
    ...result,
    markdown: table,
  };
  const file = await writeReport(path.join(REPO, 'bench/results'), report, 'dashboards');
  log(`written: ${path.relative(process.cwd(), file)} (${result.runtimeSeconds} s)`);
}

// Run directly (npm run bench:dashboards), not imported by run.ts.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await runMain('dashboards bench', main);
