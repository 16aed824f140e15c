/**
 * Change posts at provider scale (issue 32, build point 3): a provider's client sends
 * BENCH_BURST_POSTS (1,000) change posts, BENCH_BURST_IN_FLIGHT (50) at a time, over
 * BENCH_BURST_SUBJECTS (250) subjects whose `steps` sets are cached; printed: one post alone with its
 * statements (and their times), then per burst posts/s, the answers by status, the statements per post
 * (the background re-fetches' included) and this process's CPU per post, for posts that flag one subject
 * each and for the same posts matching no extract (the request's path without the flagging); then the
 * provider calls the background re-fetch of one round's flagged subjects cost (one post per subject,
 * target ⌈subjects / PROVIDER_BATCH_SIZE⌉) with the time until it was done. BENCH_BURST_PROFILE=<file>
 * writes a V8 CPU profile of the flagging burst.
 *
 * In this process: the app (buildApp over a fresh bench database: PGlite in a temp dir, or with
 * DATABASE_URL a new `ssdi_bench_<random>` database, dropped at the end) and the fake provider of the
 * tests on loopback. `npm run bench:change-burst`; see bench/README.md, "Change bursts". `runChangeBurst` is
 * the same run for `npm run bench:dashboards` (unless BENCH_DASHBOARDS_BURST=0), its numbers returned.
 */
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { buildApp } from '../src/app/app.js';
import { loadConfig } from '../src/core/config.js';
import { migrateToLatest } from '../src/db/migrate.js';
import { createAppServer } from '../src/http/app-server.js';
import { FakeProvider, createDataTenant } from '../test/fake-provider.js';
import { type TestApp, pool } from '../test/helpers.js';
import { onCleanup, runMain } from './processes.js';
import { createBenchDatabase } from './seed.js';
import { envNumber } from './service.js';

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const POSTS = envNumber('BENCH_BURST_POSTS', 1000);
const IN_FLIGHT = envNumber('BENCH_BURST_IN_FLIGHT', 50);
const SUBJECTS = envNumber('BENCH_BURST_SUBJECTS', 250);
const BATCH = 100;
const PROFILE = process.env['BENCH_BURST_PROFILE'];

/** A burst's numbers: posts per second, the answers by status, statements per post (re-fetches included). */
export interface Burst {
  postsPerSecond: number;
  statuses: Record<number, number>;
  statementsPerPost: number;
}

export interface ChangeBurstResult {
  database: 'pglite' | 'postgres';
  posts: number;
  inFlight: number;
  subjects: number;
  batchSize: number;
  /** Posts flagging one subject each. */
  flagging: Burst;
  /** The same posts matching no extract (the request's path without the flagging). */
  flaggingNothing: Burst;
  /** The re-fetch of `subjects` subjects flagged one per post. */
  refetch: { calls: number; target: number; statuses: Record<number, number>; doneMs: number };
}

/** The whole run: a database and an app of its own, both gone when it returns. */
export async function runChangeBurst(opts: { databaseUrl: string | undefined; log: (line: string) => void }): Promise<ChangeBurstResult> {
  const undo: (() => Promise<void> | void)[] = [];
  const later = (name: string, run: () => Promise<void> | void) => {
    const unregister = onCleanup(name, run);
    undo.push(async () => {
      unregister();
      await run();
    });
  };
  try {
    return await changeBurst(opts.databaseUrl, opts.log, later);
  } finally {
    for (const u of undo.reverse()) await u();
  }
}

async function changeBurst(
  databaseUrl: string | undefined,
  log: (line: string) => void,
  onCleanup: (name: string, run: () => Promise<void> | void) => void,
): Promise<ChangeBurstResult> {
  const db = await createBenchDatabase(databaseUrl);
  onCleanup('database', () => db.dispose());
  // Every statement the app runs, counted (and during one traced post, kept) for statements per post.
  let statements = 0;
  let trace: string[] | undefined;
  const handle = await db.open((text, _, ms) => {
    statements++;
    trace?.push(`${ms.toFixed(1).padStart(5)} ms ${text.replace(/\s+/g, ' ').slice(0, 100)}`);
  });
  onCleanup('handle', () => handle.close());
  await migrateToLatest(handle.db);
  const provider = await new FakeProvider().start();
  onCleanup('provider', () => provider.close());
  provider.pageSize = 1000;

  const { server, serve } = createAppServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const config = loadConfig({
    NODE_ENV: 'production',
    LOG_LEVEL: 'silent',
    PUBLIC_URL: url,
    DATA_DIR: '/nonexistent',
    PROVIDER_BATCH_SIZE: String(BATCH),
    // Admission as the environment sets it (ADMISSION_*; by default a client holds half of the pool's 10 units).
    ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('ADMISSION_'))),
  });
  const built = await buildApp({
    config,
    db: handle.db,
    logger: pino({ level: 'silent' }),
    listen: handle.listen,
    poolStats: handle.poolStats,
  });
  serve(built.app);
  onCleanup('app', async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    await built.close();
  });
  const app = { url, config, handle, tokens: built.tokens, drain: built.drain, close: async () => {} } as unknown as TestApp;

  const t = await createDataTenant(app, provider, 0);
  const numbers = Array.from({ length: SUBJECTS }, (_, i) => `N-${String(i).padStart(5, '0')}`);
  await pool(numbers, 16, async (n) => {
    const r = await t.api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: n } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${n}` } } },
      ],
    });
    if (r.status !== 201) throw new Error(`upsert ${n}: ${r.status}`);
    t.subjects.set(n, r.body.internalId);
  });
  const warm = () =>
    pool(numbers, 8, (n) =>
      t.api.gql(`query($id: ID!) { subject(id: $id) { dataPoints(extractKey: "steps") { totalCount } } }`, { id: t.subjects.get(n) }),
    );
  const settle = async () => {
    for (let n = -1; n !== provider.calls.length;) {
      n = provider.calls.length;
      await sleep(500);
    }
  };
  const post = async (subjects: readonly string[], metric = 'steps') => {
    const started = performance.now();
    const statuses = await pool(subjects, IN_FLIGHT, async (n) => {
      const r = await t.provider.post(CHANGE, { SubjectIdentifier: n, DataExtractsOptionsValuesFilter: { metric } });
      return r.status;
    });
    const ms = performance.now() - started;
    const counts: Record<number, number> = {};
    for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
    return { ms, counts };
  };

  await warm();
  await settle();
  trace = [];
  const one = await post([numbers[0]!]);
  const traced = trace;
  trace = undefined;
  log(`${db.kind}: one post alone: ${one.ms.toFixed(1)} ms, ${traced.length} statements:\n  ${traced.join('\n  ')}`);
  /** A burst of POSTS posts, IN_FLIGHT at a time, over the subjects; printed with its statements and CPU per post. */
  const measure = async (label: string, metric: string, profileTo?: string): Promise<Burst> => {
    await settle();
    const counted = statements;
    const profile = profileTo ? new Session() : undefined;
    if (profile) {
      profile.connect();
      await profile.post('Profiler.enable');
      await profile.post('Profiler.start');
    }
    const cpu = process.cpuUsage();
    const burst = await post(
      Array.from({ length: POSTS }, (_, i) => numbers[i % SUBJECTS]!),
      metric,
    );
    const { user, system } = process.cpuUsage(cpu);
    if (profile) {
      const { profile: p } = await profile.post('Profiler.stop');
      await writeFile(profileTo!, JSON.stringify(p));
      profile.disconnect();
    }
    const postsPerSecond = Math.round((POSTS * 1000) / burst.ms);
    const statementsPerPost = Math.round(((statements - counted) / POSTS) * 100) / 100;
    log(
      `${db.kind}: ${POSTS} posts ${label}, ${IN_FLIGHT} in flight: ${postsPerSecond} posts/s, ` +
        `statuses ${JSON.stringify(burst.counts)}, ${((statements - counted) / POSTS).toFixed(2)} statements per post (re-fetches included), ` +
        `CPU per post in this process (the app, its client and the provider): ${(user / 1000 / POSTS).toFixed(2)} ms user + ${(system / 1000 / POSTS).toFixed(2)} ms system`,
    );
    return { postsPerSecond, statuses: burst.counts, statementsPerPost };
  };
  const flagging = await measure('flagging one subject each', 'steps', PROFILE);
  // The same posts matching no extract: the request's path without the flagging (its floor).
  const flaggingNothing = await measure('flagging nothing (filter matching no extract)', 'none');

  await settle();
  await warm();
  await settle();
  const before = provider.fetches('steps').length;
  provider.version++;
  const round = await post(numbers);
  const posted = performance.now();
  const done = () =>
    new Set(
      provider
        .fetches('steps')
        .slice(before)
        .flatMap((c) => c.body.SubjectIdentifiers as string[]),
    ).size === SUBJECTS;
  while (!done()) await sleep(10);
  const refetchMs = performance.now() - posted;
  await settle();
  const calls = provider.fetches('steps').length - before;
  log(
    `${db.kind}: re-fetch of ${SUBJECTS} subjects flagged one per post (${IN_FLIGHT} in flight, ${JSON.stringify(round.counts)}, ` +
      `${round.ms.toFixed(0)} ms): ${calls} provider calls (target ${Math.ceil(SUBJECTS / BATCH)}), done ${refetchMs.toFixed(0)} ms after the last post returned`,
  );
  return {
    database: db.kind,
    posts: POSTS,
    inFlight: IN_FLIGHT,
    subjects: SUBJECTS,
    batchSize: BATCH,
    flagging,
    flaggingNothing,
    refetch: { calls, target: Math.ceil(SUBJECTS / BATCH), statuses: round.counts, doneMs: Math.round(refetchMs) },
  };
}

// Run directly (npm run bench:change-burst), not imported by dashboards.ts.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href)
  await runMain('change-burst', async () => {
    await runChangeBurst({ databaseUrl: process.env['DATABASE_URL'], log: (line) => console.log(line) });
  });
