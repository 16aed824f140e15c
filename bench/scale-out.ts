/**
 * The scale-out scenario (issue 34): BENCH_SCALEOUT_INSTANCES (3) service instances behind PgBouncer in
 * transaction mode (test/pgbouncer.ts, default_pool_size BENCH_SCALEOUT_POOL, 10) on one PostgreSQL,
 * beside one instance without a pooler and one behind PgBouncer, in the same run. Each setup, one after
 * the other with nothing else running: the REST list of 20 (TotalCount, as the main bench's `rest-list`)
 * over BENCH_CONNECTIONS (32) connections, then new-subject upserts over 20, the connections going to the
 * instances in turn; PostgreSQL's connections (pg_stat_activity) and the instances' pool connections
 * (their /metrics) sampled meanwhile. With several instances: BENCH_SCALEOUT_CHANGES (20) change reports
 * posted to instance 1, each timed until the `dataPointsChanged` subscriber (SSE) on every instance has
 * it, under the write load and then idle. See bench/README.md, "Scale-out".
 *
 * PostgreSQL only (PgBouncer stands in front of a server), and PgBouncer installed (/usr/sbin/pgbouncer).
 * `npm run bench:scale-out` runs it alone and writes bench/results/<date>-scale-out[-<BENCH_LABEL>]-postgres.json;
 * `npm run bench` runs it last (runScaleOut) unless BENCH_SCALEOUT_SKIP is set.
 *
 * Environment: DATABASE_URL, BENCH_SCALEOUT_SUBJECTS (10,000, or BENCH_SUBJECTS when smaller),
 * BENCH_SCALEOUT_INSTANCES (3), BENCH_SCALEOUT_POOL (10), BENCH_SCALEOUT_CHANGES (20), BENCH_DURATION (8 s),
 * BENCH_WARMUP (1 s), BENCH_CONNECTIONS (32), BENCH_LABEL, BENCH_KEEP.
 */
import { access } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { loadConfig } from '../src/core/config.js';
import { migrateToLatest } from '../src/db/migrate.js';
import { createReferenceProvider } from '../src/provider/reference-provider.js';
import { type LoadResult, type LoadSpec, runLoad } from './load.js';
import { type StatusCounts, statusCounts } from './noisy-neighbour.js';
import { drain, makeWorkDir, onCleanup, pinSelf, runMain } from './processes.js';
import { type Machine, type Target, machineFacts, ms, provenance, rps, writeReport } from './report.js';
import { upsertBody } from './scenarios.js';
import { createBenchDatabase, seedTenant } from './seed.js';
import {
  type CodeFacts,
  LOAD_CORE,
  REPO,
  type RunningService,
  baseEnv,
  bearer,
  envNumber,
  startCommand,
  startService,
  watchCode,
} from './service.js';
import { CLIENT, EXTRACT_KEY, EXTRACT_OPTIONS, LEVELS, TENANT_KEY, entityKey, sentSubjectValues } from './tenant-data.js';

const PGBOUNCER = '/usr/sbin/pgbouncer';
const LIST_PATH = '/api/v2/subject?First=20';
const UPSERT_PATH = '/api/v2/messaging/subject';
const CHANGE_PATH = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
/** The client a provider reports changes with (an inbound client of the bench's data source). */
const INBOUND_CLIENT = { clientId: 'bench-provider', clientSecret: 'bench-provider-secret' };
const SUBSCRIPTION = `subscription($extractKey: String) { dataPointsChanged(extractKey: $extractKey) { subjectIds kind } }`;
/** The main bench's upsert-20. */
const WRITERS = 20;
const SAMPLE_MS = 250;
/** The instances' PUBLIC_URL (never fetched). */
const PUBLIC_URL = 'http://ssdi.bench.invalid';
/** The issue's acceptance: a change reaches the other instances' subscribers within this. */
export const COHERENCE_TARGET_MS = 1000;
/** A change not heard this long after its post counts as missed. */
const MISSED_AFTER_MS = 5000;

export type SetupId = 'direct-1' | 'pooled-1' | 'pooled-n';

/** PostgreSQL's side of a run: the bench database's client backends (the sampler's own aside), sampled. */
export interface ServerConnections {
  /** Most client backends at once. */
  max: number;
  /** Most at once not idle (running a statement, or inside a transaction). */
  busyMax: number;
  /** Most LISTEN sessions (`ssdi-listener`) at once: one per instance, direct in every setup. */
  listenMax: number;
  /** Most connections the instances' own pools held at once (`db_pool_connections{state="total"}` summed). */
  instancePoolsMax: number;
  samples: number;
}

export interface ScaleOutRun {
  setup: SetupId;
  title: string;
  instances: number;
  pooled: boolean;
  load: 'read' | 'write';
  request: string;
  connections: number;
  result: LoadResult;
  status: StatusCounts;
  connectionsHeld: ServerConnections;
}

/** Milliseconds: nearest-rank percentiles of the heard changes. */
export interface Delays {
  n: number;
  p50: number;
  p99: number;
  max: number;
}

export interface CoherenceRun {
  when: 'under-writes' | 'idle';
  /** Change reports posted to instance 1. */
  changes: number;
  /** How long the change post took to answer. */
  post: Delays;
  /** From the post's start until instance 1's own subscriber had the change. */
  local: Delays;
  /** From the post's start until the subscriber on each other instance had it (one value per instance and change). */
  remote: Delays;
  /** Changes a subscriber had not heard MISSED_AFTER_MS after the post (local and remote). */
  missed: { local: number; remote: number };
}

export interface ScaleOutResult {
  subjects: number;
  instances: number;
  /** PgBouncer's default_pool_size (server connections per database and user). */
  pgbouncerPoolSize: number;
  /** Each instance's DATABASE_POOL_SIZE (the service's default). */
  instancePoolSize: number;
  readConnections: number;
  writeConnections: number;
  durationSec: number;
  warmupSec: number;
  seedSeconds: number;
  runtimeSeconds: number;
  runs: ScaleOutRun[];
  coherence: CoherenceRun[];
  targets: Target[];
}

/** The standalone run's JSON file (`npm run bench:scale-out`). */
export interface ScaleOutReport extends ScaleOutResult, CodeFacts {
  label: string | undefined;
  date: string;
  database: 'postgres';
  machine: Machine;
  startCommand: string;
  markdown: string;
}

/** Why the scenario cannot run here (undefined: it can). */
export async function scaleOutUnavailable(databaseUrl: string | undefined): Promise<string | undefined> {
  if (!databaseUrl) return 'the scenario needs DATABASE_URL (PostgreSQL: PgBouncer stands in front of a server)';
  try {
    await access(PGBOUNCER);
    return undefined;
  } catch {
    return `PgBouncer is not installed (${PGBOUNCER}; apt-get install pgbouncer)`;
  }
}

const delays = (values: number[]): Delays => {
  const s = [...values].sort((a, b) => a - b);
  const at = (p: number) => (s.length === 0 ? Number.NaN : Math.round(s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]! * 10) / 10);
  return { n: s.length, p50: at(0.5), p99: at(0.99), max: at(1) };
};

/** One `dataPointsChanged` subscription over SSE, each event kept with its arrival (performance.now()). */
interface Subscriber {
  events: { at: number; subjectIds: string[] }[];
  errors: string[];
  /** Resolves when an event arrives, or after `ms`. */
  next(ms: number): Promise<void>;
  close(): void;
}

function subscribe(url: string, auth: { authorization: string }): Promise<Subscriber> {
  const body = JSON.stringify({ query: SUBSCRIPTION, variables: { extractKey: EXTRACT_KEY } });
  const events: Subscriber['events'] = [];
  const errors: string[] = [];
  const wakers = new Set<() => void>();
  return new Promise((resolve, reject) => {
    const req = http.request(
      new URL('/graphql', url),
      {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json', accept: 'text/event-stream', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          reject(new Error(`subscription on ${url} answered ${res.statusCode}`));
          return;
        }
        let buffer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const at = performance.now();
          buffer += chunk;
          let cut: number;
          while ((cut = buffer.indexOf('\n\n')) >= 0) {
            const lines = buffer.slice(0, cut).split('\n');
            buffer = buffer.slice(cut + 2);
            if (!lines.some((l) => l.startsWith('event: next') || l.startsWith('event:next'))) continue;
            const data = lines
              .filter((l) => l.startsWith('data:'))
              .map((l) => l.slice(5))
              .join('\n');
            const result = JSON.parse(data) as { data?: { dataPointsChanged?: { subjectIds: string[] } }; errors?: { message: string }[] };
            if (result.errors?.length) errors.push(...result.errors.map((e) => e.message));
            if (result.data?.dataPointsChanged) events.push({ at, subjectIds: result.data.dataPointsChanged.subjectIds });
          }
          for (const w of wakers) w();
        });
        res.on('end', () => errors.push('the stream ended'));
        // Yoga writes a comment once the subscription is registered: from then on it hears changes.
        res.once('data', () =>
          resolve({
            events,
            errors,
            next: (wait) =>
              new Promise<void>((done) => {
                const wake = () => {
                  wakers.delete(wake);
                  clearTimeout(timer);
                  done();
                };
                const timer = setTimeout(wake, wait);
                wakers.add(wake);
              }),
            close: () => req.destroy(),
          }),
        );
      },
    );
    req.on('error', (e) => {
      errors.push(e.message);
      reject(e);
    });
    req.end(body);
  });
}

/**
 * Change reports for `subjects` (one post each, to instance 1, one after the other while `more()`), each
 * timed from its post's start until every subscriber had an event naming the subject.
 */
async function changeRounds(opts: {
  url: string;
  inbound: { authorization: string };
  subscribers: Subscriber[];
  subjects: { id: string; externalId: string }[];
  when: CoherenceRun['when'];
  more: () => boolean;
}): Promise<CoherenceRun> {
  const post: number[] = [];
  const local: number[] = [];
  const remote: number[] = [];
  const missed = { local: 0, remote: 0 };
  for (const subject of opts.subjects) {
    if (!opts.more()) break;
    const t0 = performance.now();
    const res = await fetch(`${opts.url}${CHANGE_PATH}`, {
      method: 'POST',
      headers: { ...opts.inbound, 'content-type': 'application/json' },
      body: JSON.stringify({ SubjectIdentifier: subject.externalId, DataExtractsOptionsValuesFilter: { metric: EXTRACT_OPTIONS.metric } }),
    });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`the change report answered ${res.status}: ${text.slice(0, 300)}`);
    post.push(performance.now() - t0);
    await Promise.all(
      opts.subscribers.map(async (s, i) => {
        const heard = () => s.events.find((e) => e.at >= t0 && e.subjectIds.includes(subject.id));
        const deadline = t0 + MISSED_AFTER_MS;
        let e = heard();
        while (!e && performance.now() < deadline) {
          await s.next(deadline - performance.now());
          e = heard();
        }
        if (e) (i === 0 ? local : remote).push(e.at - t0);
        else missed[i === 0 ? 'local' : 'remote']++;
      }),
    );
  }
  return { when: opts.when, changes: post.length, post: delays(post), local: delays(local), remote: delays(remote), missed };
}

/** Samples pg_stat_activity and the instances' pools every SAMPLE_MS until stopped; the maxima. */
function sampleConnections(databaseUrl: string, instances: RunningService[]): { stop(): Promise<ServerConnections> } {
  const m: ServerConnections = { max: 0, busyMax: 0, listenMax: 0, instancePoolsMax: 0, samples: 0 };
  let running = true;
  const loop = (async () => {
    const client = new pg.Client({ connectionString: databaseUrl, application_name: 'bench-sampler' });
    client.on('error', () => {});
    await client.connect();
    try {
      while (running) {
        const [{ rows }, pools] = await Promise.all([
          client.query<{ total: number; busy: number; listen: number }>(
            `select count(*)::int as total,
                    (count(*) filter (where state is distinct from 'idle'))::int as busy,
                    (count(*) filter (where application_name = 'ssdi-listener'))::int as listen
               from pg_stat_activity
              where datname = current_database() and backend_type = 'client backend' and pid <> pg_backend_pid()`,
          ),
          Promise.all(instances.map((s) => poolConnections(s.url))),
        ]);
        const r = rows[0]!;
        m.max = Math.max(m.max, r.total);
        m.busyMax = Math.max(m.busyMax, r.busy);
        m.listenMax = Math.max(m.listenMax, r.listen);
        m.instancePoolsMax = Math.max(
          m.instancePoolsMax,
          pools.reduce((a, b) => a + b, 0),
        );
        m.samples++;
        await sleep(SAMPLE_MS);
      }
    } finally {
      await client.end().catch(() => {});
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return m;
    },
  };
}

/** An instance's pool connections now (its /metrics), 0 when it does not answer in time. */
async function poolConnections(url: string): Promise<number> {
  try {
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
    return Number(/^db_pool_connections\{state="total"\} (\S+)$/m.exec(text)?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** The scenario's targets: coherence within 1 s, no failed answer, PostgreSQL's connections bounded by the pooler. */
export function scaleOutTargets(r: Pick<ScaleOutResult, 'runs' | 'coherence' | 'instances' | 'pgbouncerPoolSize'>): Target[] {
  const out: Target[] = [];
  for (const c of r.coherence) {
    const ok = c.changes > 0 && c.missed.remote === 0 && c.remote.max <= COHERENCE_TARGET_MS;
    out.push({
      target: `a change posted to instance 1 reached the subscribers on instances 2–${r.instances} within ${COHERENCE_TARGET_MS / 1000} s (${c.when === 'idle' ? 'idle' : 'under the write load'})`,
      measured: `${c.remote.n} of ${c.remote.n + c.missed.remote} heard, max ${ms(c.remote.max)} ms`,
      holds: c.changes > 0 ? ok : undefined,
    });
  }
  const failed = (x: ScaleOutRun) => x.result.non2xx + x.result.errors + x.result.timeouts;
  out.push({
    target: 'no failed answer (non-2xx, connection errors, timeouts) in any setup',
    measured: r.runs.map((x) => `${x.setup} ${x.load}: ${failed(x)}`).join(', '),
    holds: r.runs.length > 0 ? r.runs.every((x) => failed(x) === 0) : undefined,
  });
  const bound = r.pgbouncerPoolSize + r.instances;
  const pooled = r.runs.filter((x) => x.setup === 'pooled-n');
  out.push({
    target: `${r.instances} instances behind PgBouncer: PostgreSQL holds ≤ ${bound} connections (pool ${r.pgbouncerPoolSize} + one LISTEN session per instance)`,
    measured: pooled.map((x) => `${x.load}: ${x.connectionsHeld.max}`).join(', '),
    holds: pooled.length > 0 ? pooled.every((x) => x.connectionsHeld.max <= bound) : undefined,
  });
  return out;
}

/** The scenario's Markdown tables: the loads by setup, the coherence delays, the targets. */
export function scaleOutMarkdown(r: ScaleOutResult): string {
  const direct = (load: string) => r.runs.find((x) => x.setup === 'direct-1' && x.load === load);
  const lines = [
    `Scale-out: ${r.instances} instances behind PgBouncer (transaction mode, default_pool_size ${r.pgbouncerPoolSize}) on one PostgreSQL, ` +
      `beside 1 instance without a pooler and 1 behind PgBouncer; ${r.subjects} subjects; each instance's pool ${r.instancePoolSize}; ` +
      `reads ${r.readConnections} connections, writes ${r.writeConnections}, spread over the instances in turn; ` +
      `${r.durationSec} s per run after a ${r.warmupSec} s warm-up; seeding ${r.seedSeconds} s, scenario ${r.runtimeSeconds} s.`,
    '',
    `Every service process is pinned to core 0 (the ${r.instances} instances share the one core the single instance has), the load ` +
      'generator to core 1; PgBouncer and PostgreSQL are not pinned. **On this 2-core machine the ratios are not a scaling claim**: ' +
      'they show what the pooler and the split into processes cost on the same CPU, not what more machines would give. ' +
      'What the table is for: errors, the connections PostgreSQL holds, and the coherence delay between instances.',
    '',
    '| setup | load | conns | req/s | ÷ 1 direct | p50 ms | p99 ms | 2xx | non-2xx | errors | PostgreSQL conns max (busy) | of which LISTEN | instances’ pools max + LISTEN (PostgreSQL conns without a pooler) |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const x of r.runs) {
    const d = direct(x.load);
    const ratio = d && d.result.rps > 0 ? `${(x.result.rps / d.result.rps).toFixed(2)}×` : '';
    const c = x.connectionsHeld;
    const errors = x.result.errors + x.result.timeouts;
    lines.push(
      `| ${x.title} | ${x.load === 'read' ? 'REST list of 20' : 'REST upsert'} | ${x.connections} | ${rps(x.result)} | ${ratio} | ${ms(x.result.p50)} | ${ms(x.result.p99)} | ` +
        `${x.status.ok} | ${x.result.non2xx} | ${errors} | ${c.max} (${c.busyMax}) | ${c.listenMax} | ${c.instancePoolsMax + c.listenMax} |`,
    );
  }
  lines.push(
    '',
    `Coherence: change reports posted to instance 1 one after the other, each timed from the post's start until the \`dataPointsChanged\` ` +
      `subscriber (SSE) on each instance had it (target ≤ ${COHERENCE_TARGET_MS} ms on the other instances).`,
    '',
    '| when | changes | post answered p50 / max ms | instance 1 (its own) p50 / p99 / max ms | instances 2–' +
      `${r.instances} p50 / p99 / max ms | missed (instance 1, others) |`,
    '| --- | ---: | ---: | ---: | ---: | ---: |',
  );
  const three = (d: Delays) => `${ms(d.p50)} / ${ms(d.p99)} / ${ms(d.max)}`;
  for (const c of r.coherence) {
    lines.push(
      `| ${c.when === 'idle' ? 'idle' : 'under the write load'} | ${c.changes} | ${ms(c.post.p50)} / ${ms(c.post.max)} | ${three(c.local)} | ${three(c.remote)} | ${c.missed.local}, ${c.missed.remote} |`,
    );
  }
  lines.push('', '| target | measured | holds |', '| --- | --- | :---: |');
  for (const t of r.targets) lines.push(`| ${t.target} | ${t.measured} | ${t.holds === undefined ? '–' : t.holds ? 'yes' : 'no'} |`);
  return lines.join('\n');
}

/**
 * Runs the scenario on a new database next to `databaseUrl`'s (created, seeded, dropped at the end); every
 * process it started is stopped before it returns. Check `scaleOutUnavailable` first.
 */
export async function runScaleOut(opts: {
  start: string;
  workDir: string;
  databaseUrl: string;
  log: (line: string) => void;
}): Promise<ScaleOutResult> {
  const { log } = opts;
  const started = performance.now();
  const subjects = Math.floor(envNumber('BENCH_SCALEOUT_SUBJECTS', Math.min(10_000, envNumber('BENCH_SUBJECTS', 100_000))));
  const instances = Math.max(2, Math.floor(envNumber('BENCH_SCALEOUT_INSTANCES', 3)));
  const pgbouncerPoolSize = Math.max(1, Math.floor(envNumber('BENCH_SCALEOUT_POOL', 10)));
  // Each change has a subject of its own, read (with its data points) in one page of 2 × changes.
  const changes = Math.min(100, Math.floor(envNumber('BENCH_SCALEOUT_CHANGES', 20)));
  const durationSec = envNumber('BENCH_DURATION', 8);
  const warmupSec = envNumber('BENCH_WARMUP', 1);
  const readConnections = Math.max(1, Math.floor(envNumber('BENCH_CONNECTIONS', 32)));
  const allCores = `0-${os.cpus().length - 1}`;
  // Imported here: test/pgbouncer.ts is issue 34's, and the bench's other files run in older checkouts.
  const { startPgBouncer } = await import('../test/pgbouncer.js');

  const undo: (() => Promise<void>)[] = [];
  // Cleanups are registered for Ctrl-C and errors, and run here in the normal case (run.ts goes on).
  /** Registers `run` for the end (and Ctrl-C); returns the function that runs it now instead. */
  const later = (name: string, run: () => Promise<void>) => {
    const unregister = onCleanup(name, run);
    const entry = async () => {
      unregister();
      await run();
    };
    undo.push(entry);
    return async () => {
      const i = undo.indexOf(entry);
      if (i < 0) return;
      undo.splice(i, 1);
      await entry();
    };
  };
  try {
    // Unpinned while seeding, and while PgBouncer starts (it inherits the harness's cores, as PostgreSQL has all).
    await pinSelf(allCores);
    const provider = createReferenceProvider({ pageSize: 1000 });
    const providerServer = await provider.listen(0, '127.0.0.1');
    later('scale-out: reference provider', () => providerServer.close());
    const db = await createBenchDatabase(opts.databaseUrl);
    later('scale-out: bench database', () => db.dispose());
    const databaseUrl = db.databaseUrl!;
    log(`\nscale-out: postgres (${new URL(databaseUrl).pathname.slice(1)})`);

    const t0 = performance.now();
    const handle = await db.open();
    try {
      await migrateToLatest(handle.db);
      await seedTenant(handle.db, {
        subjects,
        providerUrl: providerServer.url,
        inboundClient: INBOUND_CLIENT,
        progress: (n) => process.stdout.write(`\rseeding: ${n}/${subjects} subjects`),
      });
    } finally {
      await handle.close();
    }
    const seedSeconds = Math.round((performance.now() - t0) / 100) / 10;
    process.stdout.write(`\rseeded ${subjects} subjects in ${seedSeconds} s\n`);

    const env = baseEnv();
    const setups: { id: SetupId; title: string; instances: number; pooled: boolean }[] = [
      { id: 'direct-1', title: '1 instance, no pooler', instances: 1, pooled: false },
      { id: 'pooled-1', title: '1 instance behind PgBouncer', instances: 1, pooled: true },
      { id: 'pooled-n', title: `${instances} instances behind PgBouncer`, instances, pooled: true },
    ];
    const runs: ScaleOutRun[] = [];
    const coherence: CoherenceRun[] = [];
    for (const [k, setup] of setups.entries()) {
      const stops: (() => Promise<void>)[] = [];
      // One public URL for every instance, as behind a load balancer: it is the tokens' issuer and audience.
      let serviceEnv: NodeJS.ProcessEnv = { PUBLIC_URL };
      if (setup.pooled) {
        await pinSelf(allCores);
        const bouncer = await startPgBouncer(databaseUrl, { poolSize: pgbouncerPoolSize });
        await pinSelf(LOAD_CORE);
        stops.push(later(`scale-out: PgBouncer (${setup.id})`, () => bouncer.stop()));
        serviceEnv = { ...serviceEnv, DATABASE_URL: bouncer.url, DATABASE_POOLER: 'transaction', DATABASE_LISTEN_URL: databaseUrl };
      } else await pinSelf(LOAD_CORE);
      // Together, as a deployment scales out: behind the pooler each migrates over DATABASE_LISTEN_URL (Kysely's
      // session lock on a connection of its own) and sets the role's settings one at a time (P148, P150).
      const started = await Promise.allSettled(
        Array.from({ length: setup.instances }, (_, i) =>
          startService(opts.start, db, {
            name: `scale-out: ${setup.id} ${i + 1}`,
            logFile: path.join(opts.workDir, `scale-out-${setup.id}-${i + 1}.log`),
            env: serviceEnv,
          }),
        ),
      );
      const services: RunningService[] = [];
      for (const r of started) {
        if (r.status !== 'fulfilled') continue;
        const s = r.value;
        services.push(s);
        stops.unshift(later(`scale-out: ${setup.id} service`, () => s.proc.stop()));
      }
      const failed = started.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
      const urls = services.map((s) => s.url);
      const auth = await bearer(urls[0]!, TENANT_KEY, CLIENT);
      log(`  ${setup.title}: ${urls.join(', ')}${setup.pooled ? ' (DATABASE_POOLER=transaction)' : ''}`);

      // One list and one upsert on each instance, idle: a request that fails alone would make the runs meaningless.
      for (const [i, url] of urls.entries()) {
        const list = await fetch(`${url}${LIST_PATH}`, { headers: auth });
        const listBody = await list.text();
        if (list.status !== 200 || !listBody.includes('TotalCount'))
          throw new Error(`preflight: ${setup.id} instance ${i + 1}: GET ${LIST_PATH} answered ${list.status}: ${listBody.slice(0, 300)}`);
        const upsert = await fetch(`${url}${UPSERT_PATH}`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: upsertBody(subjects + 900_000 + k * 100 + i, sentSubjectValues, teamOf),
        });
        const upsertText = await upsert.text();
        if (upsert.status !== 201)
          throw new Error(
            `preflight: ${setup.id} instance ${i + 1}: POST ${UPSERT_PATH} answered ${upsert.status}: ${upsertText.slice(0, 300)}`,
          );
      }

      // Several instances: a subscriber on each, and the subjects whose changes are timed, their data points read (cached).
      let subscribers: Subscriber[] = [];
      let changeSubjects: { id: string; externalId: string }[] = [];
      let inbound: { authorization: string } | undefined;
      if (setup.instances > 1 && changes > 0) {
        inbound = await bearer(urls[0]!, TENANT_KEY, INBOUND_CLIENT, 'ServiceDataProviderApi');
        changeSubjects = await readSubjects(urls[0]!, auth, 2 * changes);
        subscribers = await Promise.all(urls.map((u) => subscribe(u, auth)));
        stops.unshift(async () => subscribers.forEach((s) => s.close()));
      }

      for (const load of ['read', 'write'] as const) {
        const spec: LoadSpec = {
          url: urls[0]!,
          ...(urls.length > 1 ? { urls } : {}),
          ...(load === 'read'
            ? { method: 'GET', path: LIST_PATH, headers: auth, connections: readConnections }
            : {
                method: 'POST',
                path: UPSERT_PATH,
                headers: { ...auth, 'content-type': 'application/json' },
                connections: WRITERS,
                // New subjects only, each setup in a range of its own.
                variant: { kind: 'upsert', start: subjects + 1_000_000 * (k + 1) },
              }),
          durationSec,
          warmupSec,
          checkGraphqlErrors: false,
        } as LoadSpec;
        const sampler = sampleConnections(databaseUrl, services);
        let loading = true;
        const running = runLoad(spec, { core: LOAD_CORE, repoRoot: REPO, workDir: opts.workDir, env }).finally(() => (loading = false));
        // Under the write load, the change reports of the first half of the subjects (after the warm-up).
        const underLoad =
          load === 'write' && inbound
            ? sleep(warmupSec * 1000).then(() =>
                changeRounds({
                  url: urls[0]!,
                  inbound: inbound!,
                  subscribers,
                  subjects: changeSubjects.slice(changes),
                  when: 'under-writes',
                  more: () => loading,
                }),
              )
            : undefined;
        const [result, rounds] = await Promise.all([running, underLoad]);
        const connectionsHeld = await sampler.stop();
        for (const url of urls) await drain(url);
        const run: ScaleOutRun = {
          setup: setup.id,
          title: setup.title,
          instances: setup.instances,
          pooled: setup.pooled,
          load,
          request: `${spec.method} ${spec.path}`,
          connections: spec.connections,
          result,
          status: statusCounts(result),
          connectionsHeld,
        };
        runs.push(run);
        if (rounds) coherence.push(rounds);
        log(
          `    ${load.padEnd(5)} ${rps(result).padStart(6)} req/s  p50 ${ms(result.p50)} ms  p99 ${ms(result.p99)} ms  ` +
            `non-2xx ${result.non2xx}, errors ${result.errors + result.timeouts}  PostgreSQL conns max ${connectionsHeld.max} ` +
            `(busy ${connectionsHeld.busyMax}, LISTEN ${connectionsHeld.listenMax}), instances' pools max ${connectionsHeld.instancePoolsMax}` +
            (rounds ? `\n    ${rounds.changes} changes under the write load: others heard them ${describe(rounds)}` : ''),
        );
      }
      if (inbound) {
        const idle = await changeRounds({
          url: urls[0]!,
          inbound,
          subscribers,
          subjects: changeSubjects.slice(0, changes),
          when: 'idle',
          more: () => true,
        });
        coherence.push(idle);
        log(`    ${idle.changes} changes, idle: others heard them ${describe(idle)}`);
        const streamErrors = [...new Set(subscribers.flatMap((s) => s.errors))];
        if (streamErrors.length > 0) log(`    subscriber errors: ${streamErrors.join('; ')}`);
      }
      for (const stop of stops) await stop();
    }
    const partial = { runs, coherence, instances, pgbouncerPoolSize };
    return {
      subjects,
      instances,
      pgbouncerPoolSize,
      // The instances get no DATABASE_POOL_SIZE: the default.
      instancePoolSize: loadConfig({}).DATABASE_POOL_SIZE,
      readConnections,
      writeConnections: WRITERS,
      durationSec,
      warmupSec,
      seedSeconds,
      runtimeSeconds: Math.round((performance.now() - started) / 1000),
      runs,
      coherence,
      targets: scaleOutTargets(partial),
    };
  } finally {
    // Newest first: the services before PgBouncer, both before the database.
    for (const u of undo.reverse()) {
      try {
        await u();
      } catch (e) {
        console.error(`scale-out: cleanup failed: ${(e as Error).message}`);
      }
    }
  }
}

const teamOf = (i: number) => entityKey(4, i % LEVELS[3].count);

const describe = (c: CoherenceRun) =>
  `p50 ${ms(c.remote.p50)} ms, p99 ${ms(c.remote.p99)} ms, max ${ms(c.remote.max)} ms (instance 1's own: p50 ${ms(c.local.p50)} ms)` +
  (c.missed.local + c.missed.remote > 0 ? `; missed ${c.missed.local} on instance 1, ${c.missed.remote} on the others` : '');

/** The first `n` subjects (ExternalId order) with their ids, their data points read so that a change report flags cached entries. */
async function readSubjects(url: string, auth: { authorization: string }, n: number): Promise<{ id: string; externalId: string }[]> {
  const query = `{ subjects(first: ${n}) { edges { node { subjectId externalId dataPoints(extractKey: "${EXTRACT_KEY}", first: 10) { totalCount } } } } }`;
  const res = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ query }),
  });
  const body = (await res.json()) as {
    data?: { subjects: { edges: { node: { subjectId: string; externalId: string } }[] } };
    errors?: { message: string }[];
  };
  if (res.status !== 200 || !body.data || body.errors?.length)
    throw new Error(`reading the subjects of the change reports answered ${res.status}: ${JSON.stringify(body).slice(0, 300)}`);
  return body.data.subjects.edges.map((e) => ({ id: e.node.subjectId, externalId: e.node.externalId }));
}

/** `npm run bench:scale-out`: the scenario alone, its tables printed and written to bench/results. */
async function main() {
  const log = (line: string) => console.log(line);
  const databaseUrl = process.env['DATABASE_URL'];
  const unavailable = await scaleOutUnavailable(databaseUrl);
  if (unavailable) {
    log(`scale-out: skipped: ${unavailable}`);
    process.exitCode = 1;
    return;
  }
  const codeFacts = watchCode(log);
  const loadAtStart = os.loadavg()[0]!;
  const start = startCommand(log);
  const workDir = await makeWorkDir('ssdi-bench-scale-out-', log);
  const result = await runScaleOut({ start, workDir, databaseUrl: databaseUrl!, log });
  const head = { label: process.env['BENCH_LABEL'] || undefined, machine: machineFacts(loadAtStart), ...codeFacts() };
  const table = `${provenance(head)}\n\n${scaleOutMarkdown(result)}`;
  console.log(`\n${table}\n`);
  const report: ScaleOutReport = {
    ...head,
    date: new Date().toISOString().slice(0, 10),
    database: 'postgres',
    startCommand: start,
    ...result,
    markdown: table,
  };
  const file = await writeReport(path.join(REPO, 'bench/results'), report, 'scale-out');
  log(`written: ${path.relative(process.cwd(), file)} (${result.runtimeSeconds} s)`);
}

// Run directly (npm run bench:scale-out), not imported by run.ts.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await runMain('scale-out bench', main);
