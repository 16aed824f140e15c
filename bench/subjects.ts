/**
 * `npm run bench`: latency of subject list pages at scale, over real HTTP, on PGlite (default, a fresh
 * temp dir) or PostgreSQL (DATABASE_URL; a fresh database is created in it and dropped afterwards).
 * BENCH_SUBJECTS (default 100000) subjects are seeded in bulk, then each scenario is requested
 * BENCH_ITERATIONS times (default 200) sequentially after a warm-up; p50/p95/mean are printed.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { pino } from 'pino';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { type DatabaseHandle, migrateToLatest, openDatabase } from '../src/db.js';
import { SecretBox } from '../src/domains/data/secret-box.js';
import { matchingKeyOf, valueRows } from '../src/domains/subject/subject-values.js';
import { loadSubjectConfig } from '../src/domains/subject/subject.repository.js';
import { applyTenantFile } from '../src/domains/tenant/tenant.service.js';

const N = Number(process.env['BENCH_SUBJECTS'] ?? 100_000);
const ITERATIONS = Number(process.env['BENCH_ITERATIONS'] ?? 200);
const FIRST = ['John', 'Mary', 'Ahmed', 'Li', 'Olga', 'Pedro', 'Aiko', 'Fatima', 'Lars', 'Noor'];
const LAST = ['Carpenter', 'Smith', 'Okafor', 'Nguyen', 'Ivanova', 'Garcia', 'Tanaka', 'Haddad', 'Berg', 'Khan'];

// BENCH_EXPLAIN=1: print EXPLAIN ANALYZE of each scenario's statements instead of timing them.
const captured: { sql: string; parameters: readonly unknown[] }[] = [];
function capture(sqlText: string, parameters: readonly unknown[]) {
  captured.push({ sql: sqlText, parameters });
}

async function openBenchDatabase(): Promise<{ handle: DatabaseHandle; dispose: () => Promise<void>; kind: string }> {
  const url = process.env['DATABASE_URL'];
  if (url) {
    const name = `ssdi_bench_${randomBytes(4).toString('hex')}`;
    const admin = await openDatabase({ databaseUrl: url, dataDir: '' });
    await sql`CREATE DATABASE ${sql.id(name)}`.execute(admin.db);
    const u = new URL(url);
    u.pathname = `/${name}`;
    const handle = await openDatabase({ databaseUrl: u.toString(), dataDir: '', ...(process.env['BENCH_EXPLAIN'] ? { onQuery: capture } : {}) });
    return {
      handle,
      kind: 'postgres',
      dispose: async () => {
        await handle.close();
        await sql`DROP DATABASE ${sql.id(name)} WITH (FORCE)`.execute(admin.db);
        await admin.close();
      },
    };
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-bench-'));
  const handle = await openDatabase({ dataDir: dir, ...(process.env['BENCH_EXPLAIN'] ? { onQuery: capture } : {}) });
  return { handle, kind: 'pglite', dispose: async () => (await handle.close(), await rm(dir, { recursive: true, force: true })) };
}

async function seed(handle: DatabaseHandle): Promise<string> {
  const db = handle.db;
  await applyTenantFile(db, new SecretBox(db, undefined), {
    tenants: [
      {
        key: 'bench',
        name: 'Bench',
        clients: [{ clientId: 'bench', clientSecret: 'bench-secret', scopes: ['ServiceApi'], permissions: ['*'] }],
        subjectFields: [
          { key: 'employeeNumber', name: 'Employee number', dataType: 'String', required: true },
          { key: 'fullName', name: 'Full name', dataType: 'String', required: true },
          { key: 'grade', name: 'Grade', dataType: 'Integer' },
          { key: 'hired', name: 'Hired', dataType: 'Date' },
          { key: 'skills', name: 'Skills', dataType: 'String', isArray: true },
        ],
        matchingFieldKeys: ['employeeNumber'],
        structureTypes: [{ key: 'dept', name: 'Department', subjectAssignable: true }],
        structuralEntities: Array.from({ length: 50 }, (_, i) => ({ key: `d${i}`, displayName: `Department ${i}`, structureTypeKey: 'dept' })),
      },
    ],
  });
  const tenant = await db.selectFrom('tenant').select('id').where('key', '=', 'bench').executeTakeFirstOrThrow();
  const config = await loadSubjectConfig(db, tenant.id);
  const entities = await db.selectFrom('structural_entity').select('id').where('tenant_id', '=', tenant.id).execute();
  const BATCH = 1000;
  for (let start = 0; start < N; start += BATCH) {
    const subjects = Array.from({ length: Math.min(BATCH, N - start) }, (_, j) => {
      const i = start + j;
      const employeeNumber = `E${String(i).padStart(7, '0')}`;
      const values: Record<string, unknown> = {
        employeeNumber,
        fullName: `${FIRST[i % 10]} ${LAST[Math.floor(i / 10) % 10]} ${i}`,
        ...(i % 7 !== 0 ? { grade: i % 100 } : {}),
        hired: `20${String(10 + (i % 15)).padStart(2, '0')}-0${1 + (i % 9)}-1${i % 9}`,
        skills: [`skill-${i % 13}`, `skill-${i % 17}`],
      };
      return { tenant_id: tenant.id, external_id: employeeNumber, matching_key: matchingKeyOf(config.matchingKeys, values), values };
    });
    await db.transaction().execute(async (trx) => {
      const inserted = await trx.insertInto('subject').values(subjects).returning(['id', 'values']).execute();
      const rows = inserted.flatMap((s) => valueRows(tenant.id, s.id, config.fields, s.values, (f) => f.dataType === 'String'));
      for (let k = 0; k < rows.length; k += 5000) await trx.insertInto('subject_value').values(rows.slice(k, k + 5000)).execute();
      await trx
        .insertInto('subject_location')
        .values(inserted.map((s, j) => ({ tenant_id: tenant.id, subject_id: s.id, structural_entity_id: entities[(start + j) % entities.length]!.id })))
        .execute();
    });
    if ((start / BATCH) % 20 === 0) process.stdout.write(`\rseeded ${start + subjects.length}/${N}`);
  }
  await sql`ANALYZE`.execute(db);
  process.stdout.write(`\rseeded ${N} subjects\n`);
  return tenant.id;
}

/** Inlines parameters for EXPLAIN output only (bench code, literals quoted by PostgreSQL rules). */
function inline(text: string, params: readonly unknown[]): string {
  return text.replace(/\$(\d+)/g, (_m, n: string) => {
    const v = params[Number(n) - 1];
    if (v === null || v === undefined) return 'NULL';
    if (Array.isArray(v)) return `ARRAY[${v.map((x) => `'${String(x).replace(/'/g, "''")}'`).join(',')}]`;
    return `'${String(v).replace(/'/g, "''")}'`;
  });
}

function stats(ms: number[]) {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  return { p50: q(0.5), p95: q(0.95), mean: s.reduce((a, b) => a + b, 0) / s.length };
}

async function main() {
  const { handle, dispose, kind } = await openBenchDatabase();
  try {
    await migrateToLatest(handle.db);
    const t0 = performance.now();
    await seed(handle);
    console.log(`seed: ${((performance.now() - t0) / 1000).toFixed(1)} s (${kind})`);

    const server: Server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const config = loadConfig({ LOG_LEVEL: 'silent', PUBLIC_URL: url, DATA_DIR: '/nonexistent', NODE_ENV: 'production' });
    const { app } = await buildApp({ config, db: handle.db, logger: pino({ level: 'silent' }) });
    server.on('request', app);
    const tokenRes = await fetch(`${url}/connect/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'client_credentials', tenant_key: 'bench', client_id: 'bench', client_secret: 'bench-secret' }),
    });
    const { access_token } = (await tokenRes.json()) as { access_token: string };
    const headers = { authorization: `Bearer ${access_token}` };
    const get = async (p: string) => {
      const r = await fetch(`${url}${p}`, { headers });
      const body = (await r.json()) as any;
      if (r.status !== 200) throw new Error(`${p}: ${r.status} ${JSON.stringify(body)}`);
      return body;
    };
    // A cursor from the middle of the grade ordering: the cost of a deep page.
    const mid = await get(`/api/v2/subject?OrderBy=grade&First=1&customFieldValueFilter.values[grade]=50`);
    const deepCursor = encodeURIComponent(mid.Edges[0].Cursor);

    const scenarios: [string, () => Promise<unknown>][] = [
      ['page 1, default order (ExternalId)', () => get('/api/v2/subject?First=20')],
      ['deep page, OrderBy=grade (Integer), After=mid', () => get(`/api/v2/subject?First=20&OrderBy=grade&After=${deepCursor}`)],
      ['last page, OrderBy=hired Descending', () => get('/api/v2/subject?Last=20&OrderBy=hired&OrderDirection=Descending')],
      ['filter grade=5 (ExactAll)', () => get('/api/v2/subject?First=20&customFieldValueFilter.values[grade]=5')],
      ['filter two fields ExactAny', () => get('/api/v2/subject?First=20&customFieldValueFilter.values[grade]=5&customFieldValueFilter.values[skills]=skill-3&customFieldValueFilter.match=ExactAny')],
      ['StructuralEntityKeys=d7', () => get('/api/v2/subject?First=20&StructuralEntityKeys=d7')],
      ['SearchTerm=Jonh (typo)', () => get('/api/v2/subject?First=20&SearchTerm=Jonh%20Carpentr')],
      ['get by id', async () => get(`/api/v2/subject/${mid.Edges[0].Node.Id}`)],
      ['structural entities page', () => get('/api/v1/structuralEntity?First=20')],
    ];
    console.log(`\n${N} subjects, ${kind}, ${ITERATIONS} sequential requests each (ms)\n`);
    console.log('scenario'.padEnd(52), 'p50'.padStart(8), 'p95'.padStart(8), 'mean'.padStart(8), 'req/s'.padStart(8));
    for (const [name, run] of scenarios) {
      for (let i = 0; i < 5; i++) await run();
      if (process.env['BENCH_EXPLAIN']) {
        captured.length = 0;
        await run();
        console.log(`\n### ${name}`);
        for (const q of captured.filter((c) => /subject|structural_entity/.test(c.sql) && !/^(explain|insert|update|delete)/i.test(c.sql))) {
          const plan = await sql.raw(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${inline(q.sql, q.parameters)}`).execute(handle.db);
          console.log(`${inline(q.sql, q.parameters)}\n${plan.rows.map((r: any) => `  ${r['QUERY PLAN']}`).join('\n')}`);
        }
        continue;
      }
      const ms: number[] = [];
      for (let i = 0; i < ITERATIONS; i++) {
        const t = performance.now();
        await run();
        ms.push(performance.now() - t);
      }
      const s = stats(ms);
      console.log(name.padEnd(52), s.p50.toFixed(2).padStart(8), s.p95.toFixed(2).padStart(8), s.mean.toFixed(2).padStart(8), (1000 / s.mean).toFixed(0).padStart(8));
    }
    // TotalCount: a new filter is counted once, then served from the versioned cache.
    const t1 = performance.now();
    await get('/api/v2/subject?First=20&customFieldValueFilter.values[grade]=77');
    const cold = performance.now() - t1;
    const t2 = performance.now();
    await get('/api/v2/subject?First=20&customFieldValueFilter.values[grade]=77');
    console.log(`\nTotalCount for a new filter: first request ${cold.toFixed(2)} ms, next ${(performance.now() - t2).toFixed(2)} ms`);
    server.closeAllConnections();
    server.close();
  } finally {
    await dispose();
  }
}

await main();
