import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Typed storage for aggregates (docs/data-cache.md "Aggregating", docs/decisions.md P125). An aggregate
// read each point's jsonb items, tested their JSON kinds and parsed numbers and times: over 300,000 points
// that work was most of a new question's time. Now every pair of a numeric item and a time item of a
// cached point is a typed row of its own (`data_cache_measure`), and the kinds of every item of a subject's
// points are kept once per subject and key (`data_cache_kind`), so an aggregate reads typed columns and
// finds a wrongly typed item without looking at any point. Both are derived from `data_cache_point` by the
// statement that writes it (data.repository.ts, rewritePoints), in the same transaction.

/** The data type of an item of `data_point_items`, from its JSON shape (as the aggregate names it). */
const KIND = `CASE jsonb_typeof(i.value)
  WHEN 'string' THEN 'String' WHEN 'number' THEN 'Integer or Decimal' WHEN 'boolean' THEN 'Boolean'
  WHEN 'object' THEN CASE WHEN i.value ? 't' THEN 'DateTime' WHEN i.value ? 'd' THEN 'Date' ELSE 'Time' END END`;

export async function up(db: Kysely<any>): Promise<void> {
  // One point's (numeric item, time item) pairs: the value exact, the time as epoch milliseconds (DateTime)
  // or a day number (Date), as `data_point_items` gives them.
  await sql`
    CREATE FUNCTION data_point_measures(items jsonb)
    RETURNS TABLE (value_key text, time_key text, v numeric, ms int8, day int4)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      -- The casts guarded: a condition on the result may be checked before the WHERE below.
      SELECT n.key, t.key, CASE WHEN jsonb_typeof(n.value) = 'number' THEN n.value::numeric END,
        (t.value -> 't')::int8, (t.value -> 'd')::int4
      FROM jsonb_each(items) n, jsonb_each(items) t
      WHERE jsonb_typeof(n.value) = 'number' AND jsonb_typeof(t.value) = 'object' AND (t.value ? 't' OR t.value ? 'd')
    $$`.execute(db);
  await sql
    .raw(
      `
    CREATE FUNCTION data_point_kinds(items jsonb) RETURNS TABLE (key text, kind text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT i.key, ${KIND} FROM jsonb_each(items) i $$`,
    )
    .execute(db);
  await db.schema
    .createTable('data_cache_measure')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('extract_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('subject_id', 'uuid', (c) => c.notNull())
    .addColumn('value_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('time_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('ordinal', 'integer', (c) => c.notNull())
    .addColumn('v', 'numeric', (c) => c.notNull())
    .addColumn('ms', 'int8')
    .addColumn('day', 'int4')
    // A question reads one pair of items of many subjects: one range of the key. A write replaces a
    // subject's rows: the second index.
    .addPrimaryKeyConstraint('data_cache_measure_pk', ['tenant_id', 'extract_key', 'value_key', 'time_key', 'subject_id', 'ordinal'])
    .addForeignKeyConstraint(
      'data_cache_measure_cache_fk',
      ['tenant_id', 'extract_key', 'subject_id'],
      'data_cache',
      ['tenant_id', 'extract_key', 'subject_id'],
      (c) => c.onDelete('cascade'),
    )
    .execute();
  await db.schema
    .createIndex('data_cache_measure_subject_idx')
    .on('data_cache_measure')
    .columns(['tenant_id', 'extract_key', 'subject_id'])
    .execute();
  await db.schema
    .createTable('data_cache_kind')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('extract_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('subject_id', 'uuid', (c) => c.notNull())
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('data_cache_kind_pk', ['tenant_id', 'extract_key', 'subject_id', 'key', 'kind'])
    .addForeignKeyConstraint(
      'data_cache_kind_cache_fk',
      ['tenant_id', 'extract_key', 'subject_id'],
      'data_cache',
      ['tenant_id', 'extract_key', 'subject_id'],
      (c) => c.onDelete('cascade'),
    )
    .execute();
  await sql`
    INSERT INTO data_cache_measure (tenant_id, extract_key, subject_id, value_key, time_key, ordinal, v, ms, day)
    SELECT p.tenant_id, p.extract_key, p.subject_id, m.value_key, m.time_key, p.ordinal, m.v, m.ms, m.day
    FROM data_cache_point p, data_point_measures(p.items) m`.execute(db);
  await sql`
    INSERT INTO data_cache_kind (tenant_id, extract_key, subject_id, key, kind)
    SELECT DISTINCT p.tenant_id, p.extract_key, p.subject_id, k.key, k.kind
    FROM data_cache_point p, data_point_kinds(p.items) k`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('data_cache_kind').execute();
  await db.schema.dropTable('data_cache_measure').execute();
  await sql`DROP FUNCTION data_point_kinds(jsonb)`.execute(db);
  await sql`DROP FUNCTION data_point_measures(jsonb)`.execute(db);
}
