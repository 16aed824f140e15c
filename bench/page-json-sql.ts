/**
 * What building the REST subject page's JSON in the database would cost it (P166): the page statement as
 * the service runs it, against the same statement returning each subject's `CustomFieldValues` already
 * written as the contract's JSON (the field descriptors and value prefixes passed once as arrays, the
 * values' texts escaped by `to_json`), in two formulations. One connection, statements sent unnamed as
 * the service sends them, alternating blocks; the median time per statement as the client sees it.
 *
 *   npm run bench:page-sql                              # PGlite (in the process: all of it is CPU here)
 *   DATABASE_URL=postgres://… npm run bench:page-sql    # a new database in that server, dropped after
 */
import os from 'node:os';
import { type RawBuilder, sql } from 'kysely';
import { migrateToLatest } from '../src/db/migrate.js';
import { machineFacts, writeReport } from './report.js';
import { onCleanup, runMain } from './processes.js';
import { createBenchDatabase, seedTenant } from './seed.js';
import { envNumber } from './service.js';
import { TENANT_KEY } from './tenant-data.js';

const SUBJECTS = Math.floor(envNumber('BENCH_SUBJECTS', 20_000));
const BLOCK = Math.floor(envNumber('BENCH_BLOCK', 200));
const ROUNDS = Math.floor(envNumber('BENCH_ROUNDS', 5));
const PAGE = 20;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

await runMain('page-json-sql', async () => {
  const loadAtStart = os.loadavg()[0]!;
  const bench = await createBenchDatabase(process.env['DATABASE_URL']);
  onCleanup('bench database', () => bench.dispose());
  const handle = await bench.open();
  onCleanup('database handle', () => handle.close());
  const { db } = handle;
  await migrateToLatest(db);
  const { tenantId } = await seedTenant(db, { subjects: SUBJECTS, providerUrl: 'http://127.0.0.1:9' });
  const fields = await db.selectFrom('subject_field').selectAll().where('tenant_id', '=', tenantId).orderBy('position').execute();
  // What the writer serialises once per request (writeSubjectPage): each field's opening and value prefix.
  const keys = fields.map((f) => f.key);
  const opens = fields.map(
    (f) => `{"Field":${JSON.stringify({ Key: f.key, Name: f.name, Type: f.type_label, Required: f.required, IsArray: f.is_array })}`,
  );
  const arrays = fields.map((f) => f.is_array);
  const heads = fields.map((f) => `{"DataType":${JSON.stringify(f.data_type)},"ValueText":`);
  const types = fields.map((f) => f.data_type);
  const config = sql`unnest(${keys}::text[], ${opens}::text[], ${arrays}::bool[], ${heads}::text[], ${types}::text[]) with ordinality f(key, open, is_array, vhead, type, n)`;
  // One value's text as D7's valueText: a Boolean as true/false, any other scalar as its JSON text unquoted.
  const entry = (v: string) =>
    sql.raw(`f.open || case
      when f.is_array then ',"Value":[' || (select coalesce(string_agg(f.vhead || to_json(e.x #>> '{}')::text || '}', ',' order by e.n), '')
        from jsonb_array_elements(${v}) with ordinality e(x, n)) || ']}'
      else ',"Value":' || f.vhead || to_json(case when f.type = 'Boolean' then ${v}::text else ${v} #>> '{}' end)::text || '}}'
    end`);
  const page = (values: RawBuilder<unknown>) => sql`
    select s.tenant_id, s.id, s.external_id, ${values}, cast(o.sort_key as text) as __sv, cast(o.subject_id as text) as __id,
      (select data_version from tenant where id = ${tenantId}) as __v
    from subject as s join subject_value as o on o.tenant_id = s.tenant_id and o.subject_id = s.id
      and o.field_key = ${'employeeNumber'} and o.ordinal = ${0}
    where s.tenant_id = ${tenantId} order by o.sort_key, o.subject_id limit ${PAGE + 1}`;
  const statements: Record<string, RawBuilder<unknown>> = {
    'the page statement (rows, values as jsonb)': page(sql`s.values`),
    'each field of the configuration, its value looked up': page(
      sql`(select coalesce(string_agg(${entry('x.v')}, ',' order by f.n), '') from ${config}
        cross join lateral (select s.values -> f.key as v) x where x.v is not null and jsonb_typeof(x.v) <> 'null') as cfv`,
    ),
    'each stored value, its field joined': page(
      sql`(select coalesce(string_agg(${entry('x.value')}, ',' order by f.n), '') from jsonb_each(s.values) x
        join ${config} on f.key = x.key where jsonb_typeof(x.value) <> 'null') as cfv`,
    ),
  };
  const times = new Map<string, number[]>(Object.keys(statements).map((k) => [k, []]));
  for (const st of Object.values(statements)) for (let i = 0; i < 50; i++) await st.execute(db); // warm-up
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, st] of Object.entries(statements)) {
      const t0 = performance.now();
      for (let i = 0; i < BLOCK; i++) await st.execute(db);
      times.get(name)!.push((performance.now() - t0) / BLOCK);
    }
  }
  const rows = [...times].map(([statement, ms]) => ({ statement, msPerStatement: median(ms), blocks: ms }));
  const base = rows[0]!.msPerStatement;
  console.log(`\n${bench.kind}, ${SUBJECTS} subjects of tenant ${TENANT_KEY}, a page of ${PAGE}, ${ROUNDS} blocks of ${BLOCK}:\n`);
  console.log('| statement | ms per statement (median block) | more than the page statement |');
  console.log('| --- | --: | --: |');
  for (const r of rows) console.log(`| ${r.statement} | ${r.msPerStatement.toFixed(3)} | +${(r.msPerStatement - base).toFixed(3)} ms |`);
  const file = await writeReport(
    'bench/results',
    {
      date: new Date().toISOString().slice(0, 10),
      label: process.env['BENCH_LABEL'] || undefined,
      database: bench.kind,
      machine: machineFacts(loadAtStart),
      rows,
    },
    'page-json-sql',
  );
  console.log(`\nwritten: ${file}`);
});
