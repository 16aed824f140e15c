/**
 * Issue 17: what an aggregate of data points costs, and why the cache keeps every point as a row
 * (`data_cache_point`, migration 0008; docs/data-cache.md "Aggregating", docs/decisions.md P58).
 *
 *   DATABASE_URL=postgres://… npx tsx bench/aggregate-storage.ts     # BENCH_SUBJECTS (10000), BENCH_ITERATIONS (30)
 *
 * Creates a database `ssdi_aggbench_<random>` (dropped at the end), a tenant with BENCH_SUBJECTS subjects
 * under ten teams and the reference provider on loopback (steps, 7 days each), and fills the cache with one
 * aggregate (cold). Then, sequentially after 3 warm-up requests each:
 *  - the same aggregate statement over the cache as `data_cache.points` stores it (unnesting each subject's
 *    jsonb array, finding the items with jsonb_path_query_first, parsing the DateTime, AT TIME ZONE) and
 *    over `data_cache_point` (the statement the service runs): wall time and the backend's CPU time
 *    (/proc/<pid>/stat, so Linux and a local server only);
 *  - dataPointAggregates over HTTP, warm: DAY buckets in Europe/Berlin with percentiles; WEEK by child
 *    entity (10 groups); and on a second instance without an in-process cache (freshness read from
 *    PostgreSQL).
 * Prints p50/p95 in ms (BENCH_EXPLAIN=1: also the plan of the service's statement). Nothing is asserted:
 * numbers depend on the machine (see the calibration line).
 */
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { CompiledQuery, sql } from 'kysely';
import { pino } from 'pino';
import { createAppServer } from '../src/http/app-server.js';
import { buildApp } from '../src/app/app.js';
import { loadConfig } from '../src/core/config.js';
import { type DatabaseHandle, openDatabase } from '../src/db/database.js';
import { migrateToLatest } from '../src/db/migrate.js';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { createReferenceProvider } from '../src/provider/reference-provider.js';
import { cpuMs } from './processes.js';

const SUBJECTS = Number(process.env['BENCH_SUBJECTS'] ?? 10_000);
const ITERATIONS = Number(process.env['BENCH_ITERATIONS'] ?? 30);
const url = process.env['DATABASE_URL'];
if (!url) throw new Error('DATABASE_URL is required (PostgreSQL).');

function summary(ms: number[]): string {
  const s = [...ms].sort((a, b) => a - b);
  return `p50 ${s[s.length >> 1]!.toFixed(1)} ms  p95 ${s[Math.floor(s.length * 0.95)]!.toFixed(1)} ms`;
}

const name = `ssdi_aggbench_${randomBytes(4).toString('hex')}`;
const admin = await openDatabase({ databaseUrl: url, dataDir: '' });
await sql`CREATE DATABASE ${sql.id(name)}`.execute(admin.db);
const u = new URL(url);
u.pathname = `/${name}`;
let captured: { sql: string; parameters: readonly unknown[] } | undefined;
const handle: DatabaseHandle = await openDatabase({
  databaseUrl: u.toString(),
  dataDir: '',
  onQuery: (q, parameters) => {
    if (q.includes('WITH src AS')) captured = { sql: q, parameters };
  },
});
const provider = createReferenceProvider({ pageSize: 1000, anchorDate: '2026-11-20' });
const running = await provider.listen(0);
const closers: (() => Promise<void>)[] = [];
try {
  await migrateToLatest(handle.db);
  await applyTenantFile(handle.db, new SecretBox(handle.db, undefined), {
    tenants: [
      {
        key: 'aggbench',
        name: 'Aggregate bench',
        clients: [{ clientId: 'bench', clientSecret: 'bench-secret', scopes: ['ServiceApi'], permissions: ['*'] }],
        subjectFields: [{ key: 'employeeNumber', name: 'Employee number', dataType: 'String', required: true }],
        matchingFieldKeys: ['employeeNumber'],
        externalIdFieldKey: 'employeeNumber',
        structureTypes: [{ key: 'unit', name: 'Unit', subjectAssignable: true, customFields: [] }],
        structuralEntities: [
          { key: 'org', displayName: 'Org', structureTypeKey: 'unit' },
          ...Array.from({ length: 10 }, (_, i) => ({
            key: `team-${i}`,
            displayName: `Team ${i}`,
            structureTypeKey: 'unit',
            parentKey: 'org',
          })),
        ],
        dataSources: [
          {
            key: 'reference',
            name: 'Reference',
            getDataPointsUrl: `${running.url}/get-data-points`,
            tokenUrl: `${running.url}/connect/token`,
            clientId: 'service',
            clientSecret: 'provider-secret',
            scope: 'DataProviderApi',
            subjectIdentifier: 'ExternalId',
          },
        ],
        dataExtracts: [{ key: 'steps', name: 'Steps', dataSourceKey: 'reference', options: { metric: 'steps', period: { days: 7 } } }],
      },
    ],
  });
  const tenant = (await handle.db.selectFrom('tenant').select('id').where('key', '=', 'aggbench').executeTakeFirstOrThrow()).id;
  // Subjects straight into the tables: an aggregate selects them by location, not by their index rows.
  await sql`INSERT INTO subject (tenant_id, external_id, matching_key, values)
    SELECT ${tenant}::uuid, 'E' || lpad(i::text, 5, '0'), md5(i::text), jsonb_build_object('employeeNumber', 'E' || lpad(i::text, 5, '0'))
    FROM generate_series(1, ${SUBJECTS}) i`.execute(handle.db);
  await sql`INSERT INTO subject_location (tenant_id, subject_id, structural_entity_id)
    SELECT s.tenant_id, s.id, e.id FROM subject s
    JOIN structural_entity e ON e.tenant_id = s.tenant_id AND e.key = 'team-' || (substr(s.external_id, 2)::int % 10)
    WHERE s.tenant_id = ${tenant}::uuid`.execute(handle.db);

  const start = async (env: Record<string, string>) => {
    const { server, serve } = createAppServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const config = loadConfig({ LOG_LEVEL: 'silent', PUBLIC_URL: base, DATA_DIR: '/nonexistent', NODE_ENV: 'production', ...env });
    const app = await buildApp({ config, db: handle.db, logger: pino({ level: 'silent' }), listen: handle.listen });
    serve(app.app);
    closers.push(async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await app.close();
    });
    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: 'aggbench',
      client_id: 'bench',
      client_secret: 'bench-secret',
    });
    const token = ((await (await fetch(`${base}/connect/token`, { method: 'POST', body: form })).json()) as { access_token: string })
      .access_token;
    return async (input: Record<string, unknown>) => {
      const res = await fetch(`${base}/graphql`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ query: QUERY, variables: { input } }),
      });
      const body = (await res.json()) as { data?: { dataPointAggregates: any }; errors?: unknown };
      if (body.errors || !body.data) throw new Error(JSON.stringify(body.errors));
      return body.data.dataPointAggregates;
    };
  };
  const QUERY = `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
    aggregates { count subjectCount sum average min max stddevSample percentiles(p: [0.5, 0.9]) }
    buckets { start startsAt aggregates { count subjectCount sum average percentiles(p: [0.5]) } }
    groupedAggregates { key aggregates { count sum } }
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount } } }`;
  const input = {
    extractKey: 'steps',
    valueItemKey: 'value',
    timeItemKey: 'recordedAt',
    interval: 'DAY',
    from: '2026-11-14',
    to: '2026-11-21',
    timeZone: 'Europe/Berlin',
    structuralEntityKey: 'org',
  };
  const aggregate = await start({ GRAPHQL_MAX_COST: '1000000' });
  const withoutLru = await start({ GRAPHQL_MAX_COST: '1000000', CACHE_MAX_BYTES: '0' });
  let t = performance.now();
  const cold = await aggregate(input);
  console.log(`cold (${SUBJECTS} subjects from the provider): ${(performance.now() - t).toFixed(0)} ms, ${cold.aggregates.count} points`);
  await sql`ANALYZE`.execute(handle.db);
  await aggregate(input); // warm: the statement captured reads the rows

  const measure = async (label: string, run: () => Promise<unknown>) => {
    for (let i = 0; i < 3; i++) await run();
    const ms: number[] = [];
    for (let i = 0; i < ITERATIONS; i++) {
      t = performance.now();
      await run();
      ms.push(performance.now() - t);
    }
    console.log(`${label.padEnd(64)} ${summary(ms)}`);
  };

  // The two storage shapes, one statement each, on one connection whose backend CPU time is read.
  await handle.db.connection().execute(async (c) => {
    const pid = (await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(c)).rows[0]!.pid;
    await sql`SELECT set_config('jit', 'off', false), set_config('work_mem', '32MB', false)`.execute(c);
    const ids = (await sql<{ id: string }>`SELECT id FROM subject`.execute(c)).rows.map((r) => r.id);
    const measures = `count(v), count(DISTINCT sid), sum(v), avg(v), min(v::float8), max(v::float8), stddev_samp(v::float8),
      percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY v::float8)`;
    const stored = CompiledQuery.raw(
      `SELECT b, ${measures} FROM (
        SELECT c.subject_id AS sid, (jsonb_path_query_first(p, '$.DataPointItems[*] ? (@.Key == "value").Value.Value'))::numeric AS v,
          ((jsonb_path_query_first(p, '$.DataPointItems[*] ? (@.Key == "recordedAt").Value.Value') #>> '{}')::timestamptz AT TIME ZONE 'Europe/Berlin')::date AS b
        FROM data_cache c, jsonb_array_elements(c.points) AS p
        WHERE c.tenant_id = $1 AND c.extract_key = 'steps' AND c.subject_id = ANY($2::uuid[]) OFFSET 0) x
      WHERE b >= '2026-11-14' AND b < '2026-11-21' GROUP BY GROUPING SETS ((b), ())`,
      [tenant, ids],
    );
    const chosen = CompiledQuery.raw(captured!.sql, [...captured!.parameters]);
    if (process.env['BENCH_EXPLAIN']) {
      const plan = await c.executeQuery(CompiledQuery.raw(`EXPLAIN (ANALYZE) ${captured!.sql}`, [...captured!.parameters]));
      for (const r of plan.rows as Record<string, string>[]) console.log(r['QUERY PLAN']!.slice(0, 160));
    }
    for (const [label, q] of [
      ['statement over data_cache.points (as stored)', stored],
      ['statement over data_cache_point (the service)', chosen],
      [
        'calibration: SELECT count(*) FROM generate_series(1, 1000000)',
        CompiledQuery.raw('SELECT count(*) FROM generate_series(1, 1000000)'),
      ],
    ] as const) {
      const c0 = cpuMs(pid);
      await measure(label, () => c.executeQuery(q));
      console.log(`${''.padEnd(64)} backend CPU ${((cpuMs(pid) - c0) / (ITERATIONS + 3)).toFixed(1)} ms a statement`);
    }
  });
  await measure('dataPointAggregates, warm (DAY, Europe/Berlin, percentiles)', () => aggregate(input));
  await measure('dataPointAggregates, warm, WEEK by child entity (10 groups)', () =>
    aggregate({ ...input, interval: 'WEEK', groupBy: 'CHILD_ENTITY', maxGroups: 10 }),
  );
  await measure('dataPointAggregates, warm, no in-process cache (freshness read)', () => withoutLru(input));
} finally {
  for (const close of closers) await close();
  await running.close();
  await handle.close();
  await sql`DROP DATABASE IF EXISTS ${sql.id(name)} WITH (FORCE)`.execute(admin.db);
  await admin.close();
}
