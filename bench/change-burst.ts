/**
 * Change posts at provider scale (issue 32, build point 3): a provider's client sends
 * BENCH_BURST_POSTS (1,000) change posts, BENCH_BURST_IN_FLIGHT (50) at a time, over
 * BENCH_BURST_SUBJECTS (250) subjects whose `steps` sets are cached; printed: posts/s, the answers by
 * status, and the provider calls the background re-fetch of the last round's flagged subjects cost
 * (one post per subject, target ⌈subjects / PROVIDER_BATCH_SIZE⌉) with the time until it was done.
 *
 * In this process: the app (buildApp over a fresh bench database: PGlite in a temp dir, or with
 * DATABASE_URL a new `ssdi_bench_<random>` database, dropped at the end) and the fake provider of the
 * tests on loopback. `npm run bench:change-burst`; see bench/README.md, "Change bursts".
 */
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
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

await runMain('change-burst', async () => {
  const db = await createBenchDatabase(process.env['DATABASE_URL']);
  onCleanup('database', () => db.dispose());
  const handle = await db.open();
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
  const post = async (subjects: readonly string[]) => {
    const started = performance.now();
    const statuses = await pool(subjects, IN_FLIGHT, async (n) => {
      const r = await t.provider.post(CHANGE, { SubjectIdentifier: n, DataExtractsOptionsValuesFilter: { metric: 'steps' } });
      return r.status;
    });
    const ms = performance.now() - started;
    const counts: Record<number, number> = {};
    for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
    return { ms, counts };
  };

  await warm();
  const burst = await post(Array.from({ length: POSTS }, (_, i) => numbers[i % SUBJECTS]!));
  console.log(
    `${db.kind}: ${POSTS} posts, ${IN_FLIGHT} in flight: ${((POSTS * 1000) / burst.ms).toFixed(0)} posts/s, statuses ${JSON.stringify(burst.counts)}`,
  );

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
  console.log(
    `${db.kind}: re-fetch of ${SUBJECTS} subjects flagged one per post (${IN_FLIGHT} in flight, ${JSON.stringify(round.counts)}, ` +
      `${round.ms.toFixed(0)} ms): ${calls} provider calls (target ${Math.ceil(SUBJECTS / BATCH)}), done ${refetchMs.toFixed(0)} ms after the last post returned`,
  );
});
