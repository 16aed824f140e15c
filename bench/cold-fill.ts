/**
 * Cold fills (issue 32, build point 2): a `dataPointAggregates` over BENCH_COLD_SUBJECTS (5,000)
 * subjects whose sets nothing has cached yet, each set BENCH_COLD_DAYS (60) daily points, the reference
 * provider answering each call after BENCH_PROVIDER_LATENCY_MS (20). BENCH_COLD_RUNS (2) times a new
 * extract (the same options) and one aggregate over it (daily buckets in UTC over the whole series, both
 * companies' subtrees); printed per run: seconds to the full answer, provider calls (pages included),
 * this process's CPU time (the service's, and on PGlite the database's: a measure that load from other
 * work on the machine does not inflate as much as wall time), and the SQL statements by kind (count and
 * wall time, as Kysely measured it: waits for the event loop included).
 *
 * The app is built in this process (buildApp) on a fresh database (PGlite in a temp dir, or with
 * DATABASE_URL a new `ssdi_bench_<random>` database, dropped at the end) seeded by seed.ts; the
 * reference provider runs as a process of its own (provider-process.ts) on loopback. On Linux with 2
 * cores this process is pinned to core 0, the provider to core 1. BENCH_COLD_PROFILE=<file> writes a V8
 * CPU profile of the last run (open it in Chrome's DevTools) and prints its heaviest functions.
 *
 * `npm run bench:cold-fill`; see bench/README.md, "Cold fills".
 */
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { pino } from 'pino';
import { buildApp } from '../src/app/app.js';
import { loadConfig } from '../src/core/config.js';
import { migrateToLatest } from '../src/db/migrate.js';
import { createAppServer } from '../src/http/app-server.js';
import { followLive } from './dashboard-scale.js';
import { makeWorkDir, onCleanup, pinSelf, runMain } from './processes.js';
import { createBenchDatabase, seedTenant } from './seed.js';
import { SERVER_CORE, bearer, envNumber, startBenchProvider } from './service.js';
import { CLIENT, LEVELS, TENANT_KEY, entityKey } from './tenant-data.js';

const SUBJECTS = envNumber('BENCH_COLD_SUBJECTS', 5000);
const DAYS = envNumber('BENCH_COLD_DAYS', 60);
const RUNS = Math.max(1, envNumber('BENCH_COLD_RUNS', 2));
const LATENCY_MS = envNumber('BENCH_PROVIDER_LATENCY_MS', 20);
const PROFILE = process.env['BENCH_COLD_PROFILE'];
/** BENCH_COLD_LIVE=1: the last run's question is also followed through dataPointAggregatesChanged (its partial answers, P131). */
const LIVE = process.env['BENCH_COLD_LIVE'] === '1';
/** The provider's last day of every series (fixed, so runs on different days aggregate the same points). */
const ANCHOR = '2026-11-20';
const PAGE_SIZE = 1000;
const TARGET_S = 5;

const day = (offset: number) => new Date(Date.parse(`${ANCHOR}T00:00:00Z`) + offset * 86_400_000).toISOString().slice(0, 10);
const AGGREGATE = `query($input: DataPointAggregatesInput!) {
  dataPointAggregates(input: $input) {
    aggregates { count sum }
    buckets { start }
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
  }
}`;
const CREATE_EXTRACT = `mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key } } }`;

await runMain('cold-fill', async () => {
  const pin = process.platform === 'linux' && os.cpus().length >= 2;
  const workDir = await makeWorkDir('ssdi-bench-cold-', console.log);
  const { url: providerUrl, proc: provider } = await startBenchProvider('cold-fill: reference provider', {
    pin,
    workDir,
    latencyMs: LATENCY_MS,
    pageSize: PAGE_SIZE,
    anchor: ANCHOR,
  });
  const providerCalls = async () =>
    ((await (await fetch(`${providerUrl}/bench/stats`)).json()) as { getDataPointsCalls: number }).getDataPointsCalls;

  const db = await createBenchDatabase(process.env['DATABASE_URL']);
  onCleanup('cold-fill: database', () => db.dispose());
  // Statements by kind (their first words and table), counted while a run is measured.
  const statements = new Map<string, { n: number; ms: number }>();
  let counting = false;
  const handle = await db.open((text, _params, ms?: number) => {
    if (!counting) return;
    const kind = text.replace(/\s+/g, ' ').trim().slice(0, 60);
    const s = statements.get(kind) ?? { n: 0, ms: 0 };
    s.n++;
    s.ms += ms ?? 0;
    statements.set(kind, s);
  });
  onCleanup('cold-fill: database handle', () => handle.close());
  await migrateToLatest(handle.db);
  const seeded = await seedTenant(handle.db, { subjects: SUBJECTS, providerUrl });
  console.log(`${db.kind}: seeded ${SUBJECTS} subjects in ${seeded.seconds.toFixed(1)} s`);
  if (pin) await pinSelf(SERVER_CORE);

  const { server, serve } = createAppServer();
  server.keepAliveTimeout = 120_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const config = loadConfig({
    NODE_ENV: 'production',
    LOG_LEVEL: 'warn',
    PUBLIC_URL: url,
    DATA_DIR: '/nonexistent',
    MAIL_POLL_MS: '3600000',
  });
  const app = await buildApp({ config, db: handle.db, logger: pino({ level: 'warn' }), listen: handle.listen });
  serve(app.app);
  onCleanup('cold-fill: app', async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    await app.close();
  });
  const auth = await bearer(url, TENANT_KEY, CLIENT);
  const gql = async (query: string, variables: Record<string, unknown>) => {
    const res = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ query, variables }),
    });
    const body = (await res.json()) as { data?: any; errors?: unknown };
    if (res.status !== 200 || body.errors) throw new Error(`GraphQL ${res.status}: ${JSON.stringify(body.errors ?? body).slice(0, 1000)}`);
    return body.data;
  };
  console.log(
    `${db.kind}: ${RUNS} cold aggregates over ${SUBJECTS} subjects × ${DAYS} daily points, provider latency ${LATENCY_MS} ms, ` +
      `page size ${PAGE_SIZE}, PROVIDER_BATCH_SIZE ${config.PROVIDER_BATCH_SIZE}`,
  );

  const results: number[] = [];
  for (let run = 1; run <= RUNS; run++) {
    const extractKey = `cold-fill-${run}`;
    await gql(CREATE_EXTRACT, {
      input: {
        key: extractKey,
        name: `Cold fill ${run}`,
        dataSourceKey: 'reference',
        options: { metric: 'steps', period: { days: DAYS } },
      },
    });
    const profile = PROFILE && run === RUNS ? new Session() : undefined;
    if (profile) {
      profile.connect();
      await profile.post('Profiler.enable');
      await profile.post('Profiler.start');
    }
    statements.clear();
    const calls0 = await providerCalls();
    counting = true;
    const cpu0 = process.cpuUsage();
    const input = {
      extractKey,
      valueItemKey: 'value',
      timeItemKey: 'recordedAt',
      interval: 'DAY',
      from: day(-DAYS),
      to: day(2),
      timeZone: 'UTC',
      structuralEntityKeys: Array.from({ length: LEVELS[0].count }, (_, j) => entityKey(1, j)),
    };
    const t0 = performance.now();
    // Followed live, the question is asked through the subscription alone (the query would wait for admission
    // beside it), then once more through the query, answered from memory, for its answer.
    const live = LIVE && run === RUNS ? await followLive({ url: `${url}/graphql`, headers: auth }, input) : undefined;
    const data = await gql(AGGREGATE, { input });
    const ms = live ? live.fullMs : performance.now() - t0;
    if (live)
      console.log(
        `  ${extractKey}, through dataPointAggregatesChanged: first partial answer ${live.firstPartialMs ?? '–'} ms ` +
          `(${live.firstPartialSubjects ?? 0} subjects), ${live.partials} partial answers, the full answer ${live.fullMs} ms`,
      );
    const cpu = process.cpuUsage(cpu0);
    counting = false;
    const calls = (await providerCalls()) - calls0;
    const a = data.dataPointAggregates;
    const c = a.coverage;
    const complete = a.aggregates.count === SUBJECTS * DAYS && c.contributingSubjectCount === SUBJECTS;
    results.push(ms);
    console.log(
      `  ${extractKey}: ${(ms / 1000).toFixed(2)} s, ${calls} provider calls, ${a.aggregates.count} points, ` +
        `${((cpu.user + cpu.system) / 1e6).toFixed(2)} s of this process's CPU (the service${db.kind === 'pglite' ? ' and PGlite' : ''})` +
        `${complete ? '' : `  INCOMPLETE: ${JSON.stringify(c)}`}`,
    );
    const top = [...statements.entries()].sort((x, y) => y[1].ms - x[1].ms).slice(0, 8);
    for (const [kind, s] of top) console.log(`      ${String(s.n).padStart(5)} × ${(s.ms / 1000).toFixed(2).padStart(6)} s  ${kind}`);
    if (profile) {
      const { profile: p } = await profile.post('Profiler.stop');
      await writeFile(PROFILE!, JSON.stringify(p));
      profile.disconnect();
      console.log(`  CPU profile of ${extractKey}: ${PROFILE}; heaviest functions (self time):`);
      for (const line of heaviest(p)) console.log(`      ${line}`);
    }
  }
  const best = Math.min(...results) / 1000;
  console.log(
    `${db.kind}: best ${best.toFixed(2)} s to the full answer (target ≤ ${TARGET_S} s: ${best <= TARGET_S ? 'holds' : 'does not hold'})`,
  );
  await provider.stop();
});

/** The functions of a V8 CPU profile with the most self time, as `12.3 %  name  file:line`. */
function heaviest(p: {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples?: number[];
}): string[] {
  const counts = new Map<number, number>();
  for (const id of p.samples ?? []) counts.set(id, (counts.get(id) ?? 0) + 1);
  const byFn = new Map<string, number>();
  for (const n of p.nodes) {
    const f = n.callFrame;
    const name = `${f.functionName || '(anonymous)'}  ${f.url.replace(/^.*\/(node_modules|src)\//, '$1/')}:${f.lineNumber + 1}`;
    byFn.set(name, (byFn.get(name) ?? 0) + (counts.get(n.id) ?? 0));
  }
  const total = p.samples?.length ?? 1;
  return [...byFn.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 15)
    .map(([name, n]) => `${((100 * n) / total).toFixed(1).padStart(5)} %  ${name}`);
}
