/**
 * The noisy-neighbour scenario (issue 15, fairness): two tenants of BENCH_NOISY_SUBJECTS (5,000)
 * subjects each on one instance. Tenant B's list page is measured at a modest fixed rate
 * (BENCH_NOISY_B_RATE, 50 req/s, over up to BENCH_NOISY_B_CONNECTIONS, 32) alone, then while tenant A
 * keeps BENCH_NOISY_A_CONNECTIONS (50) typo-tolerant searches in flight, then 50 GraphQL pages of 900
 * subjects. See bench/README.md.
 *
 * `npm run bench:noisy` runs it alone and writes bench/results/<date>-noisy[-<BENCH_LABEL>]-<db>.json;
 * `npm run bench` runs it after its other scenarios (runNoisyNeighbour) into its own report.
 *
 * Environment: BENCH_NOISY_SUBJECTS (5000), BENCH_DURATION (8 s), BENCH_WARMUP (1 s),
 * BENCH_NOISY_B_RATE (50), BENCH_NOISY_B_CONNECTIONS (32), BENCH_NOISY_A_CONNECTIONS (50), BENCH_LABEL,
 * BENCH_KEEP, DATABASE_URL.
 */
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { migrateToLatest } from '../src/db/migrate.js';
import { createReferenceProvider } from '../src/provider/reference-provider.js';
import { type LoadResult, type LoadSpec, runLoad } from './load.js';
import { drain, makeWorkDir, onCleanup, peakRss, pinSelf, resetPeakRss, runMain } from './processes.js';
import { type Machine, type Target, machineFacts, ms, provenance, rps, writeReport } from './report.js';
import { SEARCH_TERM, SUBJECT_FIELDS } from './scenarios.js';
import { createBenchDatabase, seedTenant } from './seed.js';
import { type CodeFacts, LOAD_CORE, REPO, baseEnv, bearer, envNumber, startCommand, startService, watchCode } from './service.js';

/** Tenant A makes the load; tenant B is measured. */
export const NOISY_TENANTS = {
  a: { key: 'noisy-a', client: { clientId: 'noisy-a', clientSecret: 'noisy-a-secret' } },
  b: { key: 'noisy-b', client: { clientId: 'noisy-b', clientSecret: 'noisy-b-secret' } },
} as const;

const B_LIST_PATH = '/api/v2/subject?First=20';
const A_SEARCH_PATH = `/api/v2/subject?First=20&SearchTerm=${encodeURIComponent(SEARCH_TERM)}`;
export const GQL_SUBJECTS_900 = `{ subjects(first: 900) { edges { node { ${SUBJECT_FIELDS} } } } }`;
/** B's p99 under A's load may be at most this many times its p99 alone. */
export const P99_FACTOR = 5;
/** Seconds A's load runs before B's generator starts: B's measured run is all under A's load. */
const LEAD_SEC = 1.5;

/** A run's answers by the classes the targets speak of. */
export interface StatusCounts {
  ok: number;
  tooMany: number;
  /** 429 answers with a Retry-After header. */
  tooManyWithRetryAfter: number;
  unavailable: number;
  /** 5xx other than 503. */
  otherServerErrors: number;
  /** Any other status (4xx but 429, 1xx, 3xx). */
  other: number;
  /** Connection errors and timeouts (autocannon counts a timeout as an error too). */
  errors: number;
  /** 200 answers holding GraphQL `errors`. */
  graphqlErrors: number;
}

export interface NoisyPhase {
  id: 'alone' | 'search' | 'graphql-900';
  title: string;
  b: LoadResult;
  bStatus: StatusCounts;
  /** A's load (absent when B runs alone); its measured window starts about with B's and ends 1 s after. */
  a?: { request: string; connections: number; result: LoadResult; status: StatusCounts };
  /** VmHWM of the service during the phase (both loads, warm-ups included). */
  servicePeakRssBytes: number;
}

export interface NoisyNeighbourResult {
  subjectsPerTenant: number;
  bRequest: string;
  /** B's fixed request rate (open loop: each latency counts from when the request was due). */
  bRate: number;
  /** At most this many of B's requests in flight (sockets). */
  bConnections: number;
  aConnections: number;
  durationSec: number;
  warmupSec: number;
  seedSeconds: number;
  runtimeSeconds: number;
  /** One request of each kind on the idle service before the phases: status and milliseconds. */
  preflight: { request: string; status: number; ms: number }[];
  phases: NoisyPhase[];
  targets: Target[];
}

/** The standalone run's JSON file (`npm run bench:noisy`). */
export interface NoisyNeighbourReport extends NoisyNeighbourResult, CodeFacts {
  label: string | undefined;
  date: string;
  database: 'pglite' | 'postgres';
  machine: Machine;
  startCommand: string;
  markdown: string;
}

/** Counts a run's answers by status class. */
export function statusCounts(r: LoadResult): StatusCounts {
  const c: StatusCounts = {
    ok: 0,
    tooMany: 0,
    tooManyWithRetryAfter: r.retryAfter429 ?? 0,
    unavailable: 0,
    otherServerErrors: 0,
    other: 0,
    errors: r.errors,
    graphqlErrors: r.graphqlErrors,
  };
  for (const [code, n] of Object.entries(r.statusCodes)) {
    const s = Number(code);
    if (s >= 200 && s < 300) c.ok += n;
    else if (s === 429) c.tooMany += n;
    else if (s === 503) c.unavailable += n;
    else if (s >= 500) c.otherServerErrors += n;
    else c.other += n;
  }
  return c;
}

/** The scenario's targets: B's p99 under each load against alone, A never 5xx, B never 429/5xx/errors. */
export function noisyTargets(phases: NoisyPhase[]): Target[] {
  const alone = phases.find((p) => p.id === 'alone');
  const base = alone?.b.p99;
  const out: Target[] = [];
  for (const p of phases.filter((x) => x.a)) {
    const v = p.b.p99;
    // NaN arrives as null through JSON: no answer in the run.
    const hasBase = base !== undefined && Number.isFinite(base) && base > 0;
    const ok = hasBase && Number.isFinite(v);
    out.push({
      target: `B's p99 while A runs ${p.title} ≤ ${P99_FACTOR}× B's p99 alone`,
      measured: ok ? `${ms(v)} / ${ms(base)} ms = ${(v / base).toFixed(1)}×` : hasBase ? 'B got no answer' : 'n/a',
      holds: ok ? v <= P99_FACTOR * base : hasBase ? false : undefined,
    });
  }
  const loaded = phases.filter((p) => p.a);
  const a5xx = loaded.map((p) => p.a!.status.unavailable + p.a!.status.otherServerErrors);
  out.push({
    target: 'A never answered 5xx (429 or waiting is fine)',
    measured: loaded.map((p, i) => `${p.id}: ${a5xx[i]}`).join(', '),
    holds: loaded.length > 0 ? a5xx.every((n) => n === 0) : undefined,
  });
  const bBad = phases.map((p) => p.bStatus.tooMany + p.bStatus.unavailable + p.bStatus.otherServerErrors + p.bStatus.errors);
  out.push({
    target: 'B never answered 429 or 5xx, no connection errors',
    measured: phases.map((p, i) => `${p.id}: ${bBad[i]}`).join(', '),
    holds: phases.length > 0 ? bBad.every((n) => n === 0) : undefined,
  });
  return out;
}

/** The scenario's Markdown tables: one row per phase, then its targets. */
export function noisyMarkdown(r: NoisyNeighbourResult): string {
  const lines = [
    `Noisy neighbour: 2 tenants × ${r.subjectsPerTenant} subjects; B: \`GET ${r.bRequest}\` at ${r.bRate} req/s over up to ${r.bConnections} connections ` +
      `(latency from when each request was due); A: ${r.aConnections} connections; ` +
      `${r.durationSec} s per run after a ${r.warmupSec} s warm-up; seeding ${r.seedSeconds} s, scenario ${r.runtimeSeconds} s`,
    '',
    '| A runs | B req/s | B p50 ms | B p99 ms | B 2xx | B 429 | B 503 | B other 5xx | B errors | A req/s | A 2xx | A 429 (with Retry-After) | A 5xx | A errors | service peak RSS MB |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const p of r.phases) {
    const b = p.bStatus;
    const a = p.a?.status;
    const aCells = a
      ? [
          rps(p.a!.result),
          String(a.ok),
          `${a.tooMany} (${a.tooManyWithRetryAfter})`,
          String(a.unavailable + a.otherServerErrors),
          `${a.errors}${a.graphqlErrors ? ` + ${a.graphqlErrors} GraphQL errors` : ''}${a.other ? ` + ${a.other} other status` : ''}`,
        ]
      : ['', '', '', '', ''];
    const bErrors = `${b.errors}${b.other ? ` + ${b.other} other status` : ''}`;
    lines.push(
      `| ${p.title} | ${rps(p.b)} | ${ms(p.b.p50)} | ${ms(p.b.p99)} | ${b.ok} | ${b.tooMany} | ${b.unavailable} | ${b.otherServerErrors} | ${bErrors} | ${aCells.join(' | ')} | ${(p.servicePeakRssBytes / 2 ** 20).toFixed(0)} |`,
    );
  }
  lines.push('', '| target | measured | holds |', '| --- | --- | :---: |');
  for (const t of r.targets) lines.push(`| ${t.target} | ${t.measured} | ${t.holds === undefined ? '–' : t.holds ? 'yes' : 'no'} |`);
  return lines.join('\n');
}

/**
 * Runs the scenario: a fresh database (PGlite in a temp dir, or a new PostgreSQL database next to
 * `databaseUrl`'s) with both tenants, the service started with `start` pinned to core 0, the three
 * phases; everything it started is stopped and the database removed before it returns.
 */
export async function runNoisyNeighbour(opts: {
  start: string;
  workDir: string;
  databaseUrl: string | undefined;
  log: (line: string) => void;
}): Promise<NoisyNeighbourResult> {
  const { log } = opts;
  const started = performance.now();
  const subjects = Math.floor(envNumber('BENCH_NOISY_SUBJECTS', 5000));
  const durationSec = envNumber('BENCH_DURATION', 8);
  const warmupSec = envNumber('BENCH_WARMUP', 1);
  const bRate = Math.max(1, envNumber('BENCH_NOISY_B_RATE', 50));
  // Enough sockets that B's latency is the server's wait, not a queue for B's own sockets (4 would cap
  // B at 40 req/s once a request takes 100 ms), and at most the admission queue's default length of 32.
  const bConnections = Math.max(1, Math.floor(envNumber('BENCH_NOISY_B_CONNECTIONS', 32)));
  const aConnections = Math.max(1, Math.floor(envNumber('BENCH_NOISY_A_CONNECTIONS', 50)));
  const undo: (() => Promise<void>)[] = [];
  // Cleanups are registered for Ctrl-C and errors, and run here in the normal case, because run.ts
  // goes on after this returns.
  const later = (name: string, run: () => Promise<void>) => {
    const unregister = onCleanup(name, run);
    undo.push(async () => {
      unregister();
      await run();
    });
  };
  try {
    // The tenants' data source needs a live URL; the scenario reads no data points.
    const provider = createReferenceProvider({ pageSize: 1000 });
    const providerServer = await provider.listen(0, '127.0.0.1');
    later('noisy: reference provider', () => providerServer.close());
    const db = await createBenchDatabase(opts.databaseUrl);
    later('noisy: bench database', () => db.dispose());
    log(`\nnoisy neighbour: ${db.kind}${db.databaseUrl ? ` (${new URL(db.databaseUrl).pathname.slice(1)})` : ` (${db.dataDir})`}`);

    const t0 = performance.now();
    const handle = await db.open();
    try {
      await migrateToLatest(handle.db);
      for (const t of [NOISY_TENANTS.a, NOISY_TENANTS.b]) {
        await seedTenant(handle.db, {
          subjects,
          providerUrl: providerServer.url,
          tenantKey: t.key,
          client: t.client,
          progress: (n) => process.stdout.write(`\rseeding ${t.key}: ${n}/${subjects} subjects`),
        });
      }
    } finally {
      await handle.close(); // PGlite: the service opens the directory next
    }
    const seedSeconds = Math.round((performance.now() - t0) / 100) / 10;
    process.stdout.write(`\rseeded 2 tenants × ${subjects} subjects in ${seedSeconds} s\n`);

    await pinSelf(LOAD_CORE);
    const service = await startService(opts.start, db, { name: 'noisy: service', logFile: path.join(opts.workDir, 'noisy-service.log') });
    // What A's generator cut off at the end is of no use: 3 s to stop, not the service's drain.
    later('noisy: service', () => service.proc.stop(3000));
    const { url } = service;
    const authA = await bearer(url, NOISY_TENANTS.a.key, NOISY_TENANTS.a.client);
    const authB = await bearer(url, NOISY_TENANTS.b.key, NOISY_TENANTS.b.client);

    // B at a fixed rate, open loop (the paced generator): a request waiting on the server (or for one of
    // B's sockets) counts from when it was due, and the answers still on their way at the end belong to
    // the run, so a starved B shows as long waits, never as requests it did not send.
    const bSpec: LoadSpec = {
      url,
      method: 'GET',
      path: B_LIST_PATH,
      headers: authB,
      connections: bConnections,
      overallRate: bRate,
      durationSec,
      warmupSec,
      checkGraphqlErrors: false,
      countRetryAfter: true,
    };
    // Under A's load B gets no warm-up (its phase alone warmed the server): a warm-up's backlog would be
    // waited for and push B's measured run past the end of A's. A's measured window starts about with
    // B's (both generators start in about the same time) and ends 1 s after it.
    const bLoaded: LoadSpec = { ...bSpec, warmupSec: 0 };
    const aBase = {
      url,
      headers: authA,
      connections: aConnections,
      durationSec: durationSec + 1,
      warmupSec: LEAD_SEC,
      countRetryAfter: true,
    };
    const loads: { id: NoisyPhase['id']; title: string; request: string; spec?: LoadSpec }[] = [
      { id: 'alone', title: 'nothing (B alone)', request: '' },
      {
        id: 'search',
        title: `${aConnections} searches "${SEARCH_TERM}"`,
        request: `GET ${A_SEARCH_PATH}`,
        spec: { ...aBase, method: 'GET', path: A_SEARCH_PATH, checkGraphqlErrors: false },
      },
      {
        id: 'graphql-900',
        title: `${aConnections} GraphQL pages of 900 subjects`,
        request: `POST /graphql ${GQL_SUBJECTS_900}`,
        spec: {
          ...aBase,
          method: 'POST',
          path: '/graphql',
          headers: { ...authA, 'content-type': 'application/json' },
          body: JSON.stringify({ query: GQL_SUBJECTS_900 }),
          checkGraphqlErrors: true,
        },
      },
    ];

    // One request of each kind on the idle service: a request that fails alone would make its phase meaningless.
    const preflight: NoisyNeighbourResult['preflight'] = [];
    for (const spec of [bSpec, ...loads.flatMap((l) => (l.spec ? [l.spec] : []))]) {
      const t = performance.now();
      const res = await fetch(`${url}${spec.path}`, {
        method: spec.method,
        headers: spec.headers,
        ...(spec.body !== undefined ? { body: spec.body } : {}),
      });
      const body = await res.text();
      const took = Math.round((performance.now() - t) * 10) / 10;
      const request = `${spec.method} ${spec.path}${spec.path === '/graphql' ? ' (900 subjects)' : ''}`;
      preflight.push({ request, status: res.status, ms: took });
      log(`  preflight ${request.padEnd(60)} ${res.status} ${took} ms, ${Buffer.byteLength(body)} bytes`);
      if (res.status !== 200 || body.includes('"errors":'))
        throw new Error(`preflight: ${request} answered ${res.status}: ${body.slice(0, 500)}`);
    }

    const env = baseEnv();
    const run = (spec: LoadSpec) => runLoad(spec, { core: LOAD_CORE, repoRoot: REPO, workDir: opts.workDir, env });
    const phases: NoisyPhase[] = [];
    for (const l of loads) {
      resetPeakRss(service.pid);
      // Two load-generator processes on the load core: each stays the bench's unchanged load worker,
      // and neither measures while waiting on the other's event loop.
      const aRun = l.spec ? run(l.spec) : undefined;
      if (aRun) await sleep(LEAD_SEC * 1000);
      const [b, a] = await Promise.all([run(aRun ? bLoaded : bSpec), aRun]);
      const servicePeakRssBytes = peakRss(service.pid);
      // The next phase must not measure what A's generator cut off (the last one stops the service).
      if (l !== loads.at(-1)) await drain(url);
      const phase: NoisyPhase = {
        id: l.id,
        title: l.title,
        b,
        bStatus: statusCounts(b),
        ...(a && l.spec ? { a: { request: l.request, connections: l.spec.connections, result: a, status: statusCounts(a) } } : {}),
        servicePeakRssBytes,
      };
      phases.push(phase);
      const s = (c: StatusCounts) =>
        `2xx ${c.ok}, 429 ${c.tooMany} (Retry-After ${c.tooManyWithRetryAfter}), 503 ${c.unavailable}, 5xx ${c.otherServerErrors}, errors ${c.errors}`;
      log(
        `  A: ${l.title.padEnd(36)} B ${rps(b).padStart(5)} req/s  p50 ${ms(b.p50)} ms  p99 ${ms(b.p99)} ms  [${s(phase.bStatus)}]` +
          (phase.a
            ? `\n  ${''.padEnd(39)} A ${rps(phase.a.result).padStart(5)} req/s  p50 ${ms(phase.a.result.p50)} ms  [${s(phase.a.status)}${phase.a.status.graphqlErrors ? `, GraphQL errors ${phase.a.status.graphqlErrors}` : ''}]`
            : ''),
      );
    }
    return {
      subjectsPerTenant: subjects,
      bRequest: B_LIST_PATH,
      bRate,
      bConnections,
      aConnections,
      durationSec,
      warmupSec,
      seedSeconds,
      runtimeSeconds: Math.round((performance.now() - started) / 1000),
      preflight,
      phases,
      targets: noisyTargets(phases),
    };
  } finally {
    // Newest first: the service before the database it uses.
    for (const u of undo.reverse()) {
      try {
        await u();
      } catch (e) {
        console.error(`noisy neighbour: cleanup failed: ${(e as Error).message}`);
      }
    }
  }
}

/** `npm run bench:noisy`: the scenario alone, its tables printed and written to bench/results. */
async function main() {
  const log = (line: string) => console.log(line);
  const codeFacts = watchCode(log);
  const loadAtStart = os.loadavg()[0]!;
  const start = startCommand(log);
  const workDir = await makeWorkDir('ssdi-bench-noisy-', log);
  const result = await runNoisyNeighbour({ start, workDir, databaseUrl: process.env['DATABASE_URL'], log });
  const head = { label: process.env['BENCH_LABEL'] || undefined, machine: machineFacts(loadAtStart), ...codeFacts() };
  const table = `${provenance(head)}\n\n${noisyMarkdown(result)}`;
  console.log(`\n${table}\n`);
  const report: NoisyNeighbourReport = {
    ...head,
    date: new Date().toISOString().slice(0, 10),
    database: process.env['DATABASE_URL'] ? 'postgres' : 'pglite',
    startCommand: start,
    ...result,
    markdown: table,
  };
  const file = await writeReport(path.join(REPO, 'bench/results'), report, 'noisy');
  log(`written: ${path.relative(process.cwd(), file)} (${result.runtimeSeconds} s)`);
}

// Run directly (npm run bench:noisy), not imported by run.ts.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await runMain('noisy-neighbour bench', main);
