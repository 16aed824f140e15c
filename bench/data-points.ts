/**
 * `npm run bench:data`: latency of reading data points for 50 subjects through GraphQL over real HTTP, on
 * PGlite (default, a fresh temp dir) or PostgreSQL (DATABASE_URL; a fresh database is created in it and
 * dropped afterwards), against the reference provider on loopback (latency BENCH_PROVIDER_LATENCY_MS,
 * default 20; page size 1000, so one page per call).
 *
 * One GraphQL request reads the 50 subjects with their 7 data points each (extract options
 * `{ metric: 'steps', period: { days: 7 } }`); every answer is checked (no errors, 50 subjects, 7 points
 * each). Scenarios, each BENCH_ITERATIONS times (default 50) sequentially after 3 warm-up requests:
 *  - miss: before each request (outside the timed section) `createDataExtract` makes a new extract with
 *    the same options, which nothing has cached, so the request calls the provider;
 *  - LRU hit: the same request repeated on the same instance (in-process cache);
 *  - PostgreSQL hit: a second instance on the same database with CACHE_MAX_BYTES=0 (no in-process cache);
 *  - provider round trip: ProviderClient.fetchAll for the same 50 identifiers, no service involved (its
 *    token cached after the first call).
 * Provider calls per request are the deltas of the provider's get-data-points counter. Latencies are
 * measured with performance.now() around each request; percentiles by sorting. The Markdown table is
 * printed and the same written to bench/results/<yyyy-mm-dd>-data-points-<pglite|postgres>.json.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import { pino } from 'pino';
import { createAppServer } from '../src/http/app-server.js';
import { type App, buildApp } from '../src/app/app.js';
import { type Config, loadConfig } from '../src/core/config.js';
import { type DatabaseHandle, openDatabase } from '../src/db/database.js';
import { migrateToLatest } from '../src/db/migrate.js';
import { ProviderClient, type ProviderSource } from '../src/domains/data/index.js';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { createReferenceProvider } from '../src/provider/reference-provider.js';

const SUBJECTS = 50;
const POINTS_PER_SUBJECT = 7;
const WARMUP = 3;
const ITERATIONS = Number(process.env['BENCH_ITERATIONS'] ?? 50);
const LATENCY_MS = Number(process.env['BENCH_PROVIDER_LATENCY_MS'] ?? 20);
const TENANT = 'bench-data';
const CLIENT = { clientId: 'bench', clientSecret: 'bench-secret' };
const EXTRACT = 'steps';
const OPTIONS = { metric: 'steps', period: { days: POINTS_PER_SUBJECT } };

const QUERY = `query($key: String!) { subjects(first: ${SUBJECTS}) { edges { node { externalId
  dataPoints(extractKey: $key, first: 100) { totalCount edges { node { id items { key value } } } } } } } }`;
const CREATE_EXTRACT = `mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key } } }`;
const UPSERT_SUBJECT = `mutation($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { subjectId } } }`;

async function openBenchDatabase(): Promise<{
  handle: DatabaseHandle;
  url: string | undefined;
  dispose: () => Promise<void>;
  kind: 'pglite' | 'postgres';
}> {
  const url = process.env['DATABASE_URL'];
  if (url) {
    const name = `ssdi_bench_${randomBytes(4).toString('hex')}`;
    const admin = await openDatabase({ databaseUrl: url, dataDir: '' });
    await sql`CREATE DATABASE ${sql.id(name)}`.execute(admin.db);
    const u = new URL(url);
    u.pathname = `/${name}`;
    const handle = await openDatabase({ databaseUrl: u.toString(), dataDir: '' });
    return {
      handle,
      url: u.toString(),
      kind: 'postgres',
      dispose: async () => {
        await handle.close();
        await sql`DROP DATABASE ${sql.id(name)} WITH (FORCE)`.execute(admin.db);
        await admin.close();
      },
    };
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-bench-'));
  const handle = await openDatabase({ dataDir: dir });
  return {
    handle,
    url: undefined,
    kind: 'pglite',
    dispose: async () => (await handle.close(), await rm(dir, { recursive: true, force: true })),
  };
}

interface Running {
  url: string;
  close(): Promise<void>;
}

/** The app on an ephemeral loopback port; the port is bound first so PUBLIC_URL can be the real address. */
async function startInstance(
  handle: DatabaseHandle,
  env: (url: string) => Record<string, string>,
): Promise<Running & { config: Config; app: App }> {
  const { server, serve } = createAppServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const config = loadConfig(env(url));
  const app = await buildApp({ config, db: handle.db, logger: pino({ level: 'silent' }), listen: handle.listen });
  serve(app.app);
  return {
    url,
    config,
    app,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await app.close();
    },
  };
}

function summarize(ms: number[]) {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  return { p50: q(0.5), p95: q(0.95), mean: s.reduce((a, b) => a + b, 0) / s.length };
}

interface Row {
  scenario: string;
  iterations: number;
  p50Ms: number;
  p95Ms: number;
  meanMs: number;
  providerCallsPerRequest: number;
}

async function main() {
  const { handle, url: dbUrl, dispose, kind } = await openBenchDatabase();
  const provider = createReferenceProvider({ latencyMs: LATENCY_MS, pageSize: 1000 });
  const providerServer = await provider.listen(0);
  const opened: Running[] = [];
  let peerHandle: DatabaseHandle | undefined;
  try {
    await migrateToLatest(handle.db);
    await applyTenantFile(handle.db, new SecretBox(handle.db, undefined), {
      tenants: [
        {
          key: TENANT,
          name: 'Bench data',
          clients: [{ ...CLIENT, scopes: ['ServiceApi'], permissions: ['*'] }],
          subjectFields: [
            { key: 'employeeNumber', name: 'Employee number', dataType: 'String', required: true },
            { key: 'fullName', name: 'Full name', dataType: 'String' },
          ],
          matchingFieldKeys: ['employeeNumber'],
          externalIdFieldKey: 'employeeNumber',
          dataSources: [
            {
              key: 'reference',
              name: 'Reference provider',
              getDataPointsUrl: `${providerServer.url}/get-data-points`,
              tokenUrl: `${providerServer.url}/connect/token`,
              clientId: 'service',
              clientSecret: 'provider-secret',
              scope: 'DataProviderApi',
              subjectIdentifier: 'ExternalId',
            },
          ],
          dataExtracts: [
            { key: EXTRACT, name: 'Steps per day', dataSourceKey: 'reference', options: OPTIONS },
            { key: 'hr', name: 'Heart rate', dataSourceKey: 'reference', options: { metric: 'heartRate', period: { days: 7 } } },
          ],
        },
      ],
    });

    const baseEnv = (url: string): Record<string, string> => ({
      LOG_LEVEL: 'silent',
      PUBLIC_URL: url,
      DATA_DIR: '/nonexistent',
      NODE_ENV: 'production',
    });
    const first = await startInstance(handle, baseEnv);
    opened.push(first);

    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: TENANT,
      client_id: CLIENT.clientId,
      client_secret: CLIENT.clientSecret,
      scope: 'ServiceApi',
    });
    const tokenRes = await fetch(`${first.url}/connect/token`, { method: 'POST', body: form });
    const tokenBody = (await tokenRes.json()) as { access_token?: string };
    if (tokenRes.status !== 200 || !tokenBody.access_token)
      throw new Error(`token request failed: ${tokenRes.status} ${JSON.stringify(tokenBody)}`);
    const authorization = `Bearer ${tokenBody.access_token}`;

    const gql = async (base: string, query: string, variables: Record<string, unknown>): Promise<any> => {
      const res = await fetch(`${base}/graphql`, {
        method: 'POST',
        headers: { authorization, 'content-type': 'application/json' },
        body: JSON.stringify({ query, variables }),
      });
      const body = (await res.json()) as { data?: any; errors?: unknown };
      if (res.status !== 200 || body.errors) throw new Error(`GraphQL ${res.status}: ${JSON.stringify(body.errors ?? body)}`);
      return body.data;
    };

    const identifiers = Array.from({ length: SUBJECTS }, (_, i) => `E${String(i + 1).padStart(4, '0')}`);
    for (const [i, id] of identifiers.entries()) {
      const data = await gql(first.url, UPSERT_SUBJECT, {
        input: {
          customFieldValues: [
            { key: 'employeeNumber', value: { String: { value: id } } },
            { key: 'fullName', value: { String: { value: `Person ${i + 1}` } } },
          ],
        },
      });
      if (data.upsertSubject?.created !== true) throw new Error(`subject ${id} not created: ${JSON.stringify(data)}`);
    }

    const read = async (base: string, key = EXTRACT) => {
      const data = await gql(base, QUERY, { key });
      const edges = data.subjects.edges as { node: { externalId: string; dataPoints: { totalCount: number; edges: unknown[] } | null } }[];
      if (edges.length !== SUBJECTS) throw new Error(`expected ${SUBJECTS} subjects, got ${edges.length}`);
      for (const { node } of edges) {
        if (node.dataPoints?.totalCount !== POINTS_PER_SUBJECT || node.dataPoints.edges.length !== POINTS_PER_SUBJECT) {
          throw new Error(
            `subject ${node.externalId}: expected ${POINTS_PER_SUBJECT} points, got ${JSON.stringify(node.dataPoints && { totalCount: node.dataPoints.totalCount, edges: node.dataPoints.edges.length })}`,
          );
        }
      }
    };

    const rows: Row[] = [];
    /** Warm-up then timed iterations; `before` runs outside the timed section. */
    const measure = async (scenario: string, run: () => Promise<void>, before?: (iteration: number) => Promise<void>) => {
      for (let w = 1; w <= WARMUP; w++) {
        await before?.(-w);
        await run();
      }
      const ms: number[] = [];
      let calls = 0;
      for (let i = 1; i <= ITERATIONS; i++) {
        await before?.(i);
        const c0 = provider.stats().getDataPointsCalls;
        const t0 = performance.now();
        await run();
        ms.push(performance.now() - t0);
        calls += provider.stats().getDataPointsCalls - c0;
      }
      const s = summarize(ms);
      rows.push({
        scenario,
        iterations: ITERATIONS,
        p50Ms: s.p50,
        p95Ms: s.p95,
        meanMs: s.mean,
        providerCallsPerRequest: calls / ITERATIONS,
      });
      process.stderr.write(`done: ${scenario}\n`);
    };

    // (1) Cache miss: each request reads a new extract (same options), so nothing is cached on any
    // level and no background re-fetch runs beside it.
    let missKey = '';
    await measure(
      'cache miss (service → provider)',
      () => read(first.url, missKey),
      async (iteration) => {
        missKey = `miss-${iteration < 0 ? `w${-iteration}` : iteration}`;
        await gql(first.url, CREATE_EXTRACT, {
          input: { key: missKey, name: 'Steps (miss)', dataSourceKey: 'reference', options: OPTIONS },
        });
      },
    );
    // (2) In-process LRU hit on the same instance.
    await measure('LRU hit', () => read(first.url));
    // (3) PostgreSQL cache hit: a second instance without an in-process cache, on the same database.
    peerHandle = dbUrl ? await openDatabase({ databaseUrl: dbUrl, dataDir: '' }) : handle;
    const peerDb = peerHandle;
    const peer = await startInstance(peerDb, () => ({ ...baseEnv(first.url), CACHE_MAX_BYTES: '0' }));
    opened.push(peer);
    await measure('PostgreSQL cache hit (CACHE_MAX_BYTES=0)', () => read(peer.url));
    // (4) The bare provider round trip for the same identifiers.
    const client = new ProviderClient(
      {
        timeoutMs: 10_000,
        retries: 0,
        backoffMs: 1,
        maxPages: 100,
        concurrency: 8,
        breakerFailures: 1000,
        breakerThreshold: 0.5,
        breakerWindowMs: 10_000,
        breakerProbeMs: 1000,
        breakerOpenMs: 1000,
      },
      pino({ level: 'silent' }),
    );
    const source: ProviderSource = {
      tenantId: 'bench',
      key: 'reference',
      getDataPointsUrl: `${providerServer.url}/get-data-points`,
      tokenUrl: `${providerServer.url}/connect/token`,
      clientId: 'service',
      clientSecret: async () => 'provider-secret',
      scope: 'DataProviderApi',
    };
    await measure('provider round trip (ProviderClient.fetchAll)', async () => {
      const answer: unknown = await client.fetchAll(source, { key: EXTRACT, options: OPTIONS }, identifiers);
      // An array before issue 30 (F6): the points and the rejected nodes since.
      const points = Array.isArray(answer) ? answer : (answer as { points: unknown[] }).points;
      if (points.length !== SUBJECTS * POINTS_PER_SUBJECT)
        throw new Error(`expected ${SUBJECTS * POINTS_PER_SUBJECT} points, got ${points.length}`);
    });

    const f = (n: number) => n.toFixed(2);
    const table = [
      `${SUBJECTS} subjects × ${POINTS_PER_SUBJECT} points, ${kind}, provider latency ${LATENCY_MS} ms, ${ITERATIONS} sequential requests each after ${WARMUP} warm-ups`,
      '',
      '| scenario | iterations | p50 ms | p95 ms | mean ms | provider calls per request |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map(
        (r) =>
          `| ${r.scenario} | ${r.iterations} | ${f(r.p50Ms)} | ${f(r.p95Ms)} | ${f(r.meanMs)} | ${r.providerCallsPerRequest.toFixed(2)} |`,
      ),
    ].join('\n');
    console.log(`\n${table}\n`);

    const date = new Date().toISOString().slice(0, 10);
    const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results');
    await mkdir(dir, { recursive: true });
    const file = path.join(dir, `${date}-data-points-${kind}.json`);
    const round = (n: number) => Math.round(n * 100) / 100;
    const result = {
      date,
      database: kind,
      subjects: SUBJECTS,
      pointsPerSubject: POINTS_PER_SUBJECT,
      providerLatencyMs: LATENCY_MS,
      warmup: WARMUP,
      node: process.version,
      rows: rows.map((r) => ({ ...r, p50Ms: round(r.p50Ms), p95Ms: round(r.p95Ms), meanMs: round(r.meanMs) })),
      markdown: table,
    };
    await writeFile(file, `${JSON.stringify(result, null, 2)}\n`);
    console.log(`written: ${path.relative(process.cwd(), file)}`);
  } finally {
    for (const r of opened.reverse()) await r.close();
    if (peerHandle && peerHandle !== handle) await peerHandle.close();
    await providerServer.close();
    await dispose();
  }
}

await main();
