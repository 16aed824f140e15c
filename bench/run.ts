/**
 * `npm run bench`: throughput, latency, SQL statements and peak memory of the service under load, next
 * to two baselines on the same data (see bench/README.md).
 *
 * 1. A fresh database (PGlite in a temp dir, or with DATABASE_URL a new `ssdi_bench_<random>` database)
 *    is seeded in bulk with the bench tenant; the reference data provider runs in this process on
 *    loopback with BENCH_PROVIDER_LATENCY_MS (20) added to each call.
 * 2. Capture: the app built in-process answers each scenario once after a warm-up while its statements
 *    are recorded (statements per request, B1's statements, the real answers).
 * 3. B0 and B1 run as their own processes pinned to core 0, the load generator on core 1; then the peer,
 *    PostGraphile 5 (peer.ts, bench/peers), on PostgreSQL when bench/peers is installed (else one line says why).
 * 4. The service runs as `npm start` runs it (package.json's scripts.start; `npm run build` first, at
 *    the start of the bench, when that runs dist/), pinned to core 0.
 * 5. The noisy-neighbour scenario (noisy-neighbour.ts) on a database of its own, then the dashboards
 *    scenario (dashboards.ts: aggregates warm and cold, 1,000 subscriptions) on another, then on PostgreSQL
 *    the scale-out scenario (scale-out.ts: 3 instances behind PgBouncer beside 1 without and 1 behind it).
 * 6. The tables are printed and the numbers written to bench/results/<date>[-<BENCH_LABEL>]-<db>.json.
 *
 * `--peers` (`npm run bench:peers`): only the list scenarios (LIST_SCENARIOS) for B0, B1, PostGraphile and
 * the service (the targets' lists also at half their maximum rate); no noisy neighbour, no dashboards;
 * bench/results/<date>-peers[-<label>]-<db>.json.
 *
 * Environment: BENCH_SUBJECTS (100000), BENCH_DURATION (8 s), BENCH_WARMUP (1 s), BENCH_LATENCY_DURATION
 * (3 s), BENCH_CONNECTIONS (32), BENCH_LABEL, BENCH_PROVIDER_LATENCY_MS (20), BENCH_EXPLAIN (print the
 * plans of B1's statements after the capture, then stop), BENCH_KEEP (keep the work dir: logs, specs),
 * DATABASE_URL; noisy-neighbour.ts's BENCH_NOISY_* (BENCH_NOISY_SKIP: leave it out); dashboards.ts's
 * BENCH_DASHBOARDS_* (BENCH_DASHBOARDS_SKIP: leave it out); scale-out.ts's BENCH_SCALEOUT_* (BENCH_SCALEOUT_SKIP:
 * leave it out).
 */
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import { migrateToLatest } from '../src/db/migrate.js';
import { createReferenceProvider } from '../src/provider/reference-provider.js';
import type { BaselineSpec } from './baseline-server.js';
import { type CapturedScenario, Recorder, capturePhase } from './capture.js';
import type { DashboardsResult } from './dashboards.js';
import type { ScaleOutResult } from './scale-out.js';
import { type LoadSpec, runLoad } from './load.js';
import { type NoisyNeighbourResult, noisyMarkdown, runNoisyNeighbour } from './noisy-neighbour.js';
import { peerUnavailable, runPeer } from './peer.js';
import {
  drain,
  freePort,
  makeWorkDir,
  onCleanup,
  peakRss,
  pinSelf,
  resetPeakRss,
  runMain,
  spawnPinned,
  stoppingSignal,
  waitForHttp,
  workerNodePid,
} from './processes.js';
import {
  type BenchReport,
  type HalfRate,
  type Measured,
  type PeersReport,
  type ScenarioResult,
  evaluateTargets,
  failures,
  machineFacts,
  markdown,
  writeReport,
} from './report.js';
import { HALF_RATE_LISTS, LIST_SCENARIOS, MISS_CHECKS, type Scenario, missCheckCursors } from './scenarios.js';
import { createBenchDatabase, seedTenant } from './seed.js';
import {
  LOAD_CORE,
  REPO,
  SERVER_CORE,
  baseEnv,
  bearer,
  collections,
  collectionsBetween,
  envNumber as num,
  startCommand,
  startService,
  watchCode,
} from './service.js';
import { CLIENT, TENANT_KEY } from './tenant-data.js';

const SUBJECTS = Math.floor(num('BENCH_SUBJECTS', 100_000));
const DURATION = num('BENCH_DURATION', 8);
const WARMUP = num('BENCH_WARMUP', 1);
const LATENCY_DURATION = num('BENCH_LATENCY_DURATION', 3);
const CONNECTIONS = Math.floor(num('BENCH_CONNECTIONS', 32));
const PROVIDER_LATENCY_MS = num('BENCH_PROVIDER_LATENCY_MS', 20);
const LABEL = process.env['BENCH_LABEL'] || undefined;
const EXPLAIN = Boolean(process.env['BENCH_EXPLAIN']);
const NOISY_SKIP = Boolean(process.env['BENCH_NOISY_SKIP']);
const DASHBOARDS_SKIP = Boolean(process.env['BENCH_DASHBOARDS_SKIP']);
const SCALEOUT_SKIP = Boolean(process.env['BENCH_SCALEOUT_SKIP']);
/** `npm run bench:peers`: the list scenarios only, for B0, B1, the service and PostGraphile. */
const PEERS_ONLY = process.argv.includes('--peers');

const log = (line: string) => console.log(line);

/** Deep equality of two JSON answers, cursors aside (B1 encodes its own). */
function sameData(a: string, b: string): boolean {
  const strip = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(strip);
    if (v && typeof v === 'object') {
      return Object.fromEntries(
        Object.entries(v)
          .filter(([k]) => !/^(cursor|startcursor|endcursor)$/i.test(k))
          .map(([k, x]) => [k, strip(x)]),
      );
    }
    return v;
  };
  try {
    return isDeepStrictEqual(strip(JSON.parse(a)), strip(JSON.parse(b)));
  } catch {
    return false;
  }
}

/** Resolves once `count` has not moved for a second (at most a minute): what a cut-off load left has ended. */
async function settled(count: () => number): Promise<void> {
  const deadline = Date.now() + 60_000;
  let last = count();
  while (Date.now() < deadline) {
    await sleep(1000);
    const now = count();
    if (now === last) return;
    last = now;
  }
}

async function main() {
  const started = performance.now();
  const codeFacts = watchCode(log);
  const loadAtStart = os.loadavg()[0]!;
  // The service runs as `npm start` does (built now when that runs the build output).
  const start = startCommand(log);
  const workDir = await makeWorkDir('ssdi-bench-run-', log);

  // The reference provider in this process, on loopback; the tenant's data source points at it.
  // Page size 1000: one call answers 50 subjects × 7 points (the provider's default page is 50 points).
  const provider = createReferenceProvider({ latencyMs: PROVIDER_LATENCY_MS, pageSize: 1000 });
  const providerServer = await provider.listen(0, '127.0.0.1');
  onCleanup('reference provider', () => providerServer.close());

  const bench = await createBenchDatabase(process.env['DATABASE_URL']);
  onCleanup('bench database', () => bench.dispose());
  log(`database: ${bench.kind}${bench.databaseUrl ? ` (${new URL(bench.databaseUrl).pathname.slice(1)})` : ` (${bench.dataDir})`}`);
  // Said now, not only in the report: the run goes on without the peer.
  const peersSkipped = peerUnavailable(bench);
  if (peersSkipped) log(`PostGraphile: skipped: ${peersSkipped}`);

  // 1. Seed, 2. capture, on one handle; closed before any other process opens the database.
  const recorder = new Recorder();
  const handle = await bench.open(recorder.record);
  let seedSeconds: number;
  let tenantId: string;
  let capture: Awaited<ReturnType<typeof capturePhase>>;
  try {
    await migrateToLatest(handle.db);
    const seeded = await seedTenant(handle.db, {
      subjects: SUBJECTS,
      providerUrl: providerServer.url,
      progress: (n) => process.stdout.write(`\rseeding: ${n}/${SUBJECTS} subjects`),
    });
    seedSeconds = seeded.seconds;
    tenantId = seeded.tenantId;
    process.stdout.write(
      `\rseeded ${seeded.subjects} subjects, ${seeded.entities} entities, ${seeded.users} users in ${seeded.groups} groups in ${seeded.seconds.toFixed(1)} s\n`,
    );
    log('capture (app in-process, one request per scenario after a warm-up):');
    capture = await capturePhase(handle, recorder, {
      subjects: SUBJECTS,
      providerCalls: () => provider.stats().getDataPointsCalls,
      explain: EXPLAIN,
      log,
      ...(PEERS_ONLY ? { only: LIST_SCENARIOS } : {}),
    });
  } finally {
    await handle.close();
  }
  if (EXPLAIN) return;
  const { scenarios, captured } = capture;
  const bad = [...captured.values()].filter((c) => c.status >= 300);
  if (bad.length > 0) log(`warning: in the capture these answered an error: ${bad.map((c) => `${c.id} (${c.status})`).join(', ')}`);

  // From here on this process only serves the provider and waits: off the server's core.
  await pinSelf(LOAD_CORE);

  const results = new Map<string, ScenarioResult>();
  for (const sc of scenarios) {
    const c = captured.get(sc.id)!;
    results.set(sc.id, {
      id: sc.id,
      title: sc.title,
      connections: sc.connections ?? CONNECTIONS,
      reference: sc.reference,
      service: undefined as unknown as Measured,
      statementsPerRequest: c.statements.length,
      statements: c.statements.map((s) => ({ kind: s.kind, tables: s.tables, sql: s.sql })),
      ...(sc.shape ? { b1Replays: c.kept.map((s) => s.tables.join('+')) } : {}),
      answerBytes: Buffer.byteLength(c.body),
      failures: 0,
    });
  }

  const loadEnv = baseEnv();
  // Each run ends with the server drained, so no run measures the previous one's leftovers.
  const load = async (spec: LoadSpec) => {
    const result = await runLoad(spec, { core: LOAD_CORE, repoRoot: REPO, workDir, env: loadEnv });
    await drain(spec.url);
    return result;
  };
  const specFor = (sc: Scenario, url: string, p: string, headers: Record<string, string>, extra: Partial<LoadSpec> = {}): LoadSpec => ({
    url,
    method: sc.method,
    path: p,
    headers: { ...headers, ...(sc.method === 'POST' ? { 'content-type': 'application/json' } : {}) },
    // A variant's body is set per request by the load generator; baselines get its first one.
    ...(sc.body !== undefined
      ? { body: sc.body }
      : sc.variant?.kind === 'pages'
        ? { body: JSON.stringify({ query: sc.variant.query, variables: { after: sc.variant.cursors[0] } }) }
        : {}),
    connections: sc.connections ?? CONNECTIONS,
    durationSec: DURATION,
    warmupSec: WARMUP,
    checkGraphqlErrors: sc.graphql,
    ...extra,
  });

  // 3. Baselines: B0 (fixed answers) then B1 (same data statements), each its own process on core 0.
  const baselineSpec: BaselineSpec = {
    tenantId,
    scenarios: Object.fromEntries(
      scenarios
        .filter((sc) => sc.b0)
        .map((sc) => {
          const c = captured.get(sc.id)!;
          return [
            sc.id,
            {
              body: c.body,
              ...(sc.shape
                ? {
                    shape: sc.shape,
                    pageSize: sc.pageSize ?? 20,
                    statements: c.kept.map((s) => ({ sql: s.sql, parameters: [...s.parameters], named: s.named })),
                  }
                : {}),
              expected: expectedOf(c),
            },
          ];
        }),
    ),
  };
  const baselineFile = path.join(workDir, 'baseline.json');
  await writeFile(baselineFile, JSON.stringify(baselineSpec));
  for (const mode of ['b0', 'b1'] as const) {
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...baseEnv(),
      PORT: String(port),
      ...(bench.databaseUrl ? { DATABASE_URL: bench.databaseUrl } : { DATA_DIR: bench.dataDir }),
    };
    log(
      `\n${mode.toUpperCase()}: node:http${mode === 'b1' ? ` + ${bench.kind}, replaying the data statements` : ', fixed answers'} on core ${SERVER_CORE}`,
    );
    const proc = spawnPinned(
      mode,
      SERVER_CORE,
      [process.execPath, '--import', 'tsx', path.join(REPO, 'bench/baseline-server.ts'), mode, baselineFile],
      {
        cwd: REPO,
        env,
        logFile: path.join(workDir, `${mode}.log`),
      },
    );
    const url = `http://127.0.0.1:${port}`;
    await waitForHttp(`${url}/readyz`, proc);
    const pid = workerNodePid(proc.pid);
    for (const sc of scenarios) {
      if (!sc.b0 || (mode === 'b1' && !sc.shape)) continue;
      const r = results.get(sc.id)!;
      if (mode === 'b1') {
        const answer = await (await fetch(`${url}/${sc.id}`, { method: sc.method, ...(sc.body ? { body: sc.body } : {}) })).text();
        r.b1AnswerBytes = Buffer.byteLength(answer);
        r.b1SameData = sameData(answer, captured.get(sc.id)!.body);
        if (!r.b1SameData) {
          // Both answers stay in the work dir for a look (BENCH_KEEP=1).
          await writeFile(path.join(workDir, `${sc.id}.b1.json`), answer);
          await writeFile(path.join(workDir, `${sc.id}.service.json`), captured.get(sc.id)!.body);
          log(`  note: B1's answer for ${sc.id} differs from the service's (${r.b1AnswerBytes} vs ${r.answerBytes} bytes)`);
        }
      }
      resetPeakRss(pid);
      const m: Measured = await load(specFor(sc, url, `/${sc.id}`, {}));
      m.peakRssBytes = peakRss(pid);
      r[mode] = m;
      log(
        `  ${sc.id.padEnd(18)} ${m.rps.toFixed(0).padStart(7)} req/s  p50 ${m.p50} ms  p99 ${m.p99} ms${failures(m) ? `  FAILED ${failures(m)}` : ''}`,
      );
    }
    await proc.stop();
  }

  // 3b. The peer, on the same database and core, with the same load as the service's lists. Its failure
  // is reported (and makes the exit code 1) but leaves the rest of the run standing.
  let peers: PeersReport | undefined;
  let peersError: string | undefined;
  if (!peersSkipped) {
    try {
      peers = await runPeer({
        db: bench,
        tenantId,
        subjects: SUBJECTS,
        logFile: path.join(workDir, 'postgraphile.log'),
        measure: (spec) => load({ ...spec, connections: CONNECTIONS, durationSec: DURATION, warmupSec: WARMUP }),
        log,
        ...(captured.has('gql-20-same') ? { sameInformationAnswer: captured.get('gql-20-same')!.body } : {}),
      });
    } catch (e) {
      if (stoppingSignal()) throw e;
      peersError = e instanceof Error ? e.message : String(e);
      log(`PostGraphile FAILED: ${peersError}`);
    }
  }

  // 4. The service, as `npm start` runs it.
  log(`\nservice: ${start} (taskset -c ${SERVER_CORE}, NODE_ENV=production, LOG_LEVEL=warn)`);
  const {
    proc: service,
    url,
    pid: servicePid,
  } = await startService(start, bench, { name: 'service', logFile: path.join(workDir, 'service.log') });
  const auth = await bearer(url, TENANT_KEY, CLIENT);

  const halfRates: Record<string, HalfRate> = {};
  for (const sc of scenarios) {
    const r = results.get(sc.id)!;
    const pages = sc.variant?.kind === 'pages' ? sc.variant.cursors.length : undefined;
    // A cache miss gets no warm-up: it would spend pages (the hit scenario before it warmed the rest).
    const extra: Partial<LoadSpec> = pages !== undefined ? { maxRequests: pages, warmupSec: 0 } : {};
    if (sc.variant) extra.variant = sc.variant;
    const calls0 = provider.stats().getDataPointsCalls;
    resetPeakRss(servicePid);
    const m: Measured = await load(specFor(sc, url, sc.path, auth, extra));
    m.peakRssBytes = peakRss(servicePid);
    const calls = provider.stats().getDataPointsCalls - calls0;
    r.service = m;
    r.failures = failures(m);
    if (sc.countProviderCalls) {
      r.providerCallsDuringLoad = calls;
      // Under load a request cut off at the end may or may not have called the provider: the exact
      // count comes from sequential requests, each reading pages nothing has read before.
      if (sc.variant?.kind === 'pages') {
        // The requests the load cut off go on, and their provider calls would count here: wait for them.
        await settled(() => provider.stats().getDataPointsCalls);
        const c0 = provider.stats().getDataPointsCalls;
        for (const after of missCheckCursors(capture.ctx.pageCursors)) {
          const res = await fetch(`${url}${sc.path}`, {
            method: 'POST',
            headers: { ...auth, 'content-type': 'application/json' },
            body: JSON.stringify({ query: sc.variant.query, variables: { after } }),
          });
          const body = await res.text();
          if (res.status !== 200 || body.includes('"errors":')) r.failures++;
        }
        r.providerCallsPerRequest = (provider.stats().getDataPointsCalls - c0) / MISS_CHECKS;
      } else {
        r.providerCallsPerRequest = calls / Math.max(1, m.requests);
      }
    }
    log(
      `  ${sc.id.padEnd(18)} ${m.rps.toFixed(0).padStart(7)} req/s  p50 ${m.p50} ms  p99 ${m.p99} ms  RSS ${(m.peakRssBytes / 2 ** 20).toFixed(0)} MB` +
        (sc.countProviderCalls
          ? `  provider calls ${calls}${r.providerCallsPerRequest !== undefined ? ` (${r.providerCallsPerRequest.toFixed(2)} per request)` : ''}`
          : '') +
        (failures(m) ? `  FAILED ${failures(m)} (${JSON.stringify(m.statusCodes)})` : '') +
        (m.exhausted ? '  (inputs ran out)' : ''),
    );
    if (sc.latencyRun) {
      const one = await load(
        specFor(sc, url, sc.path, auth, { connections: 1, durationSec: LATENCY_DURATION, warmupSec: Math.min(WARMUP, 0.5) }),
      );
      r.oneConnection = one;
      log(`  ${''.padEnd(18)} 1 connection: p50 ${one.p50} ms  p99 ${one.p99} ms`);
    }
    if (HALF_RATE_LISTS.includes(sc.id)) {
      // The same list at a fixed rate of half the measured maximum: the latency spread below saturation.
      const rate = Math.max(1, Math.floor(m.rps / 2));
      resetPeakRss(servicePid);
      const gc0 = await collections(url);
      const h: Measured = await load(specFor(sc, url, sc.path, auth, { overallRate: rate }));
      h.peakRssBytes = peakRss(servicePid);
      // Whether a full collection fell in the run (or its 1 s warm-up) decides its p99 (P76): reported beside it.
      const gc = collectionsBetween(gc0, await collections(url));
      halfRates[sc.id] = { rate, result: h, ...(gc ? { collections: gc } : {}) };
      log(
        `  ${''.padEnd(18)} at half (${rate} req/s): ${h.rps.toFixed(0).padStart(7)} req/s  p50 ${h.p50} ms  p99 ${h.p99} ms` +
          (gc
            ? `  full collections ${gc.major} (paused ${gc.majorMs.toFixed(0)} ms), scavenges ${gc.minor} (${gc.minorMs.toFixed(0)} ms)`
            : ''),
      );
    }
    const reference = sc.reference === 'B1' ? r.b1 : sc.reference === 'B0' ? r.b0 : undefined;
    if (reference && reference.rps > 0) r.ratio = m.rps / reference.rps;
  }
  await service.stop();
  // The noisy-neighbour scenario seeds a database of its own: this one is done with.
  await bench.dispose();

  // 5. Noisy neighbour. Its failure leaves the rest of the report standing.
  let noisyNeighbour: NoisyNeighbourResult | undefined;
  let noisyNeighbourError: string | undefined;
  if (!NOISY_SKIP && !PEERS_ONLY) {
    try {
      noisyNeighbour = await runNoisyNeighbour({ start, workDir, databaseUrl: process.env['DATABASE_URL'], log });
    } catch (e) {
      if (stoppingSignal()) throw e;
      noisyNeighbourError = e instanceof Error ? e.message : String(e);
      log(`noisy neighbour failed: ${noisyNeighbourError}`);
    }
  }
  // Dashboards (issue 17): the app in this process on a database of its own. Its failure leaves the rest
  // standing. Imported here, not above: it uses issue 17's modules, which an older checkout lacks.
  let dashboards: DashboardsResult | undefined;
  let dashboardsMarkdown: ((r: DashboardsResult) => string) | undefined;
  let dashboardsError: string | undefined;
  if (!DASHBOARDS_SKIP && !PEERS_ONLY) {
    try {
      const scenario = await import('./dashboards.js');
      dashboardsMarkdown = scenario.dashboardsMarkdown;
      dashboards = await scenario.runDashboards({ databaseUrl: process.env['DATABASE_URL'], log, workDir });
    } catch (e) {
      if (stoppingSignal()) throw e;
      dashboardsError = e instanceof Error ? e.message : String(e);
      log(`dashboards failed: ${dashboardsError}`);
    }
  }
  // Scale-out (issue 34): PostgreSQL only; its failure leaves the rest standing. Imported here as dashboards.
  let scaleOut: ScaleOutResult | undefined;
  let scaleOutMarkdown: ((r: ScaleOutResult) => string) | undefined;
  let scaleOutSkipped: string | undefined;
  let scaleOutError: string | undefined;
  if (!SCALEOUT_SKIP && !PEERS_ONLY) {
    try {
      const scenario = await import('./scale-out.js');
      scaleOutMarkdown = scenario.scaleOutMarkdown;
      const databaseUrl = process.env['DATABASE_URL'];
      scaleOutSkipped = await scenario.scaleOutUnavailable(databaseUrl);
      if (scaleOutSkipped) log(`\nscale-out: skipped: ${scaleOutSkipped}`);
      else scaleOut = await scenario.runScaleOut({ start, workDir, databaseUrl: databaseUrl!, log });
    } catch (e) {
      if (stoppingSignal()) throw e;
      scaleOutError = e instanceof Error ? e.message : String(e);
      log(`scale-out failed: ${scaleOutError}`);
    }
  }

  // 6. Report.
  const list = [...results.values()];
  // bench:peers runs only the lists: the targets of the scenarios it did not run are left out.
  const peerArg = { ...(peers ? { peers } : {}), missing: peersSkipped ?? (peersError ? `failed: ${peersError}` : undefined) };
  const targets = evaluateTargets(list, halfRates, SUBJECTS, peerArg).filter((t) => !PEERS_ONLY || !t.measured.startsWith('n/a'));
  const base: Omit<BenchReport, 'markdown'> = {
    label: LABEL,
    date: new Date().toISOString().slice(0, 10),
    database: bench.kind,
    machine: machineFacts(loadAtStart),
    ...codeFacts(),
    startCommand: start,
    subjects: SUBJECTS,
    connections: CONNECTIONS,
    durationSec: DURATION,
    warmupSec: WARMUP,
    latencyDurationSec: LATENCY_DURATION,
    providerLatencyMs: PROVIDER_LATENCY_MS,
    seedSeconds: Math.round(seedSeconds * 10) / 10,
    runtimeSeconds: 0,
    scenarios: list,
    ...(halfRates['rest-list'] ? { halfRate: halfRates['rest-list'] } : {}),
    halfRates,
    targets,
    ...(noisyNeighbour ? { noisyNeighbour } : {}),
    ...(noisyNeighbourError ? { noisyNeighbourError } : {}),
    ...(dashboards ? { dashboards } : {}),
    ...(dashboardsError ? { dashboardsError } : {}),
    ...(scaleOut ? { scaleOut } : {}),
    ...(scaleOutSkipped ? { scaleOutSkipped } : {}),
    ...(scaleOutError ? { scaleOutError } : {}),
    ...(peers ? { peers } : {}),
    ...(peersSkipped ? { peersSkipped } : {}),
    ...(peersError ? { peersError } : {}),
  };
  base.runtimeSeconds = Math.round((performance.now() - started) / 1000);
  const table =
    markdown(base) +
    (noisyNeighbour
      ? `\n\n${noisyMarkdown(noisyNeighbour)}`
      : noisyNeighbourError
        ? `\n\nNoisy neighbour: failed: ${noisyNeighbourError}`
        : '') +
    (dashboards && dashboardsMarkdown
      ? `\n\n${dashboardsMarkdown(dashboards)}`
      : dashboardsError
        ? `\n\nDashboards: failed: ${dashboardsError}`
        : '') +
    (scaleOut && scaleOutMarkdown
      ? `\n\n${scaleOutMarkdown(scaleOut)}`
      : scaleOutError
        ? `\n\nScale-out: failed: ${scaleOutError}`
        : scaleOutSkipped
          ? `\n\nScale-out: skipped: ${scaleOutSkipped}`
          : '');
  console.log(`\n${table}\n`);
  const file = await writeReport(path.join(REPO, 'bench/results'), { ...base, markdown: table }, PEERS_ONLY ? 'peers' : undefined);
  log(`written: ${path.relative(process.cwd(), file)} (${base.runtimeSeconds} s)`);
  if (peersError) process.exitCode = 1;
}

/** What the service answered that B1 takes as given (a cached TotalCount, HasPreviousPage). */
function expectedOf(c: CapturedScenario) {
  try {
    const body = JSON.parse(c.body) as {
      PageInfo?: { TotalCount?: number; HasPreviousPage?: boolean };
      data?: { subjects?: { totalCount?: number } };
    };
    const total = body.PageInfo?.TotalCount ?? body.data?.subjects?.totalCount;
    const previous = body.PageInfo?.HasPreviousPage;
    return { ...(total !== undefined ? { totalCount: total } : {}), ...(previous !== undefined ? { hasPreviousPage: previous } : {}) };
  } catch {
    return {};
  }
}

await runMain('bench', main);
