import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/db/tables.js';
import { openTestDatabase } from './helpers.js';

// P155, P156: docs/scaling.md's Citus plan (its `table | Citus | key | why` table) against the migrated
// schema. Citus refuses a primary key or unique index of a distributed table without its distribution
// column, a foreign key between distributed tables that does not pair their distribution columns, and a
// foreign key from a reference table to a distributed one. A break the plan has a way around is accepted
// only where its row names the constraint (in backticks), so a new one fails until the plan says what changes.

const root = path.resolve(import.meta.dirname, '..');
/** Kysely's own bookkeeping: kept on the coordinator, outside the plan. */
const KYSELY_TABLES = ['kysely_migration', 'kysely_migration_lock'];

interface PlanRow {
  table: string;
  citus: string;
  key: string | undefined;
  why: string;
}

/** The plan's rows: the markdown table whose header is `table | Citus | key | why`. */
async function readPlan(): Promise<PlanRow[]> {
  const lines = (await readFile(path.join(root, 'docs/scaling.md'), 'utf8')).split('\n');
  const cells = (line: string) =>
    line
      .trim()
      .replace(/^\||\|$/g, '')
      .split('|')
      .map((c) => c.trim());
  const header = lines.findIndex((l) => l.trim().startsWith('|') && cells(l).join(' ') === 'table Citus key why');
  if (header < 0) throw new Error('docs/scaling.md has no table with the header `| table | Citus | key | why |`');
  const rows: PlanRow[] = [];
  for (const line of lines.slice(header + 2)) {
    if (!line.trim().startsWith('|')) break;
    const [table = '', citus = '', key = '', why = ''] = cells(line);
    const bare = (s: string) => s.replace(/`/g, '');
    rows.push({ table: bare(table), citus, key: bare(key) === '—' ? undefined : bare(key), why });
  }
  return rows;
}

interface Schema {
  tables: Set<string>;
  columns: Map<string, Map<string, string>>;
  /** Primary keys, unique constraints and unique indexes; an expression's column is null. */
  uniques: { table: string; name: string; columns: (string | null)[] }[];
  foreignKeys: { table: string; name: string; columns: string[]; references: string; referenced: string[] }[];
}

async function readSchema(db: Db): Promise<Schema> {
  const tables = await sql<{ name: string }>`
    SELECT table_name AS name FROM information_schema.tables
    WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`.execute(db);
  const columns = await sql<{ table: string; column: string; type: string }>`
    SELECT table_name AS table, column_name AS column, data_type AS type FROM information_schema.columns
    WHERE table_schema = current_schema()`.execute(db);
  const uniques = await sql<{ table: string; name: string; columns: (string | null)[] }>`
    SELECT t.relname AS table, i.relname AS name,
      array(SELECT a.attname::text FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(n, o)
        LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n ORDER BY k.o) AS columns
    FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
    WHERE x.indisunique AND t.relnamespace = current_schema()::regnamespace`.execute(db);
  const foreignKeys = await sql<{ table: string; name: string; columns: string[]; references: string; referenced: string[] }>`
    SELECT t.relname AS table, c.conname AS name, r.relname AS references,
      array(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(n, o)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.o) AS columns,
      array(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY AS k(n, o)
        JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.o) AS referenced
    FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_class r ON r.oid = c.confrelid
    WHERE c.contype = 'f' AND c.connamespace = current_schema()::regnamespace`.execute(db);
  // The driver's arrays, not their text (a string's includes() would match parts of names).
  if (![...uniques.rows, ...foreignKeys.rows].every((c) => Array.isArray(c.columns)))
    throw new Error('constraint columns not read as arrays');
  const byTable = new Map<string, Map<string, string>>();
  for (const c of columns.rows) {
    if (!byTable.has(c.table)) byTable.set(c.table, new Map());
    byTable.get(c.table)!.set(c.column, c.type);
  }
  return {
    tables: new Set(tables.rows.map((t) => t.name).filter((t) => !KYSELY_TABLES.includes(t))),
    columns: byTable,
    uniques: uniques.rows,
    foreignKeys: foreignKeys.rows,
  };
}

let dispose: () => Promise<void>;
let plan: PlanRow[];
let schema: Schema;
const row = (table: string) => plan.find((r) => r.table === table);
/** Whether the plan's row for `table` names `constraint` as a known break with its way around. */
const named = (table: string, constraint: string) => row(table)?.why.includes(`\`${constraint}\``) ?? false;
const distributed = (table: string) => row(table)?.citus === 'distributed';

beforeAll(async () => {
  const handle = await openTestDatabase();
  dispose = handle.dispose;
  [plan, schema] = await Promise.all([readPlan(), readSchema(handle.db)]);
});
afterAll(() => dispose?.());

describe('the Citus plan of docs/scaling.md', () => {
  // P156: a migration that adds a table fails here until the plan places it.
  it('lists every table of the schema once, and only tables that exist', () => {
    const problems: string[] = [];
    for (const t of schema.tables) if (!row(t)) problems.push(`${t}: in the schema, not in the plan`);
    for (const r of plan) if (!schema.tables.has(r.table)) problems.push(`${r.table}: in the plan, not in the schema`);
    const tables = plan.map((r) => r.table);
    for (const t of new Set(tables.filter((t, i) => tables.indexOf(t) !== i))) problems.push(`${t}: listed more than once`);
    expect(problems).toEqual([]);
    expect(plan.length).toBeGreaterThan(0);
  });

  // P155: every distributed table is co-located with `tenant` (Citus co-locates by the key's type).
  it('places each table as distributed by a uuid column it has, or as a reference table without a key', () => {
    const problems: string[] = [];
    for (const r of plan) {
      const columns = schema.columns.get(r.table);
      if (r.citus === 'distributed') {
        if (!r.key) problems.push(`${r.table}: distributed without a key`);
        else if (!columns?.has(r.key)) problems.push(`${r.table}: has no column ${r.key}, its distribution column`);
        else if (columns.get(r.key) !== 'uuid') problems.push(`${r.table}: ${r.key} is ${columns.get(r.key)}, not uuid as tenant.id`);
      } else if (r.citus === 'reference') {
        if (r.key) problems.push(`${r.table}: a reference table has no distribution column (key: —)`);
        // A tenant's rows copied to every node need a reason.
        if (columns?.has('tenant_id') && !r.why.includes('`tenant_id`'))
          problems.push(`${r.table}: a reference table with tenant_id, and the plan does not say why`);
      } else problems.push(`${r.table}: Citus is "${r.citus}", not distributed or reference`);
    }
    expect(problems).toEqual([]);
  });

  // P155: Citus checks uniqueness within a shard only, so it refuses a unique index without the distribution column.
  it('has the distribution column in every primary key and unique index of a distributed table', () => {
    const problems: string[] = [];
    for (const u of schema.uniques) {
      const r = row(u.table);
      if (!r || !distributed(u.table) || !r.key) continue;
      if (!u.columns.includes(r.key) && !named(u.table, u.name))
        problems.push(`${u.table}: unique ${u.name} (${u.columns.map((c) => c ?? '(expression)').join(', ')}) lacks ${r.key}`);
    }
    expect(problems).toEqual([]);
  });

  // P155: co-location: a foreign key between distributed tables pairs their distribution columns, and no
  // reference table points at a distributed one.
  it('pairs the distribution columns in every foreign key between distributed tables', () => {
    const problems: string[] = [];
    for (const f of schema.foreignKeys) {
      const from = row(f.table);
      const to = row(f.references);
      if (!from || !to || named(f.table, f.name)) continue;
      if (from.citus === 'distributed' && to.citus === 'distributed') {
        const i = f.columns.indexOf(from.key!);
        if (i < 0 || f.referenced[i] !== to.key)
          problems.push(
            `${f.table}: foreign key ${f.name} (${f.columns.join(', ')}) → ${f.references} does not pair ${from.key} with ${to.key}`,
          );
      } else if (from.citus === 'reference' && to.citus === 'distributed')
        problems.push(`${f.table}: foreign key ${f.name} from a reference table to the distributed ${f.references}`);
    }
    expect(problems).toEqual([]);
  });

  // P155: the breaks the plan names are the schema's today; one that no longer breaks a rule leaves the text.
  it('names as breaks only constraints that break a rule today', () => {
    const breaking = new Set<string>();
    for (const u of schema.uniques) {
      const r = row(u.table);
      if (r?.citus === 'distributed' && r.key && !u.columns.includes(r.key)) breaking.add(`${u.table}.${u.name}`);
    }
    for (const f of schema.foreignKeys) {
      const [from, to] = [row(f.table), row(f.references)];
      if (from?.citus !== 'distributed' || to?.citus !== 'distributed') continue;
      const i = f.columns.indexOf(from.key!);
      if (i < 0 || f.referenced[i] !== to.key) breaking.add(`${f.table}.${f.name}`);
    }
    const constraints = new Set([...schema.uniques, ...schema.foreignKeys].map((c) => `${c.table}.${c.name}`));
    const stale = plan.flatMap((r) =>
      [...r.why.matchAll(/`([a-z0-9_]+)`/g)]
        .map((m) => `${r.table}.${m[1]}`)
        .filter((c) => constraints.has(c) && !breaking.has(c))
        .map((c) => `${c}: named in the plan, breaks no rule`),
    );
    expect(stale).toEqual([]);
  });
});
