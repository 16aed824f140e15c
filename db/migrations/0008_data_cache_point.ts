import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Issue 17 (aggregates of data points, docs/data-cache.md "Aggregating"): every cached point also as a row
// of its own, its items by key in a shape PostgreSQL reads without parsing text. `data_cache.points` stays
// the set as the provider sent it (reads page and order it); `data_cache_point` is derived from it and
// written in the same transaction by every write of `points` (data.repository.ts). An aggregate over 10,000
// subjects × 7 points reads 70,000 narrow rows by primary key instead of unnesting 10,000 jsonb arrays
// and searching each point's item array for a key (measured: docs/decisions.md P58).

export async function up(db: Kysely<any>): Promise<void> {
  // One point's items by key: the first item of a key wins (as ordering by an item does), a null value
  // is absent. Numbers (Integer, Decimal) and strings (String) and booleans as sent; the others tagged
  // so that a type can be told from its JSON kind: DateTime {"t": epoch milliseconds} (no offset = UTC,
  // P17), Date {"d": days since 1970-01-01}, Time {"h": "HH:mm:ss"}. Declared IMMUTABLE: every input it
  // parses carries its offset, so the result does not depend on the session's TimeZone.
  await sql`
    CREATE FUNCTION data_point_items(point jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT coalesce(jsonb_strip_nulls(jsonb_object_agg(i->>'Key',
        CASE WHEN jsonb_typeof(i->'Value'->'Value') = 'string' THEN
          CASE i->'Value'->>'DataType'
            WHEN 'DateTime' THEN jsonb_build_object('t', floor(extract(epoch FROM (
              CASE WHEN i->'Value'->>'Value' ~ '(Z|[+-]\\d\\d:\\d\\d)$' THEN i->'Value'->>'Value' ELSE (i->'Value'->>'Value') || 'Z' END
            )::timestamptz) * 1000))
            WHEN 'Date' THEN jsonb_build_object('d', (i->'Value'->>'Value')::date - date '1970-01-01')
            WHEN 'Time' THEN jsonb_build_object('h', i->'Value'->'Value')
            WHEN 'String' THEN i->'Value'->'Value'
          END
        WHEN jsonb_typeof(i->'Value'->'Value') = 'number' AND i->'Value'->>'DataType' IN ('Integer', 'Decimal') THEN i->'Value'->'Value'
        WHEN jsonb_typeof(i->'Value'->'Value') = 'boolean' AND i->'Value'->>'DataType' = 'Boolean' THEN i->'Value'->'Value'
        END
        -- jsonb keeps the last value of a repeated key: the first item of the key is aggregated last.
        ORDER BY n DESC)), '{}')
      FROM jsonb_array_elements(point->'DataPointItems') WITH ORDINALITY AS e(i, n)
    $$`.execute(db);
  await db.schema
    .createTable('data_cache_point')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('extract_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('subject_id', 'uuid', (c) => c.notNull())
    // The point's position in `data_cache.points` (1-based).
    .addColumn('ordinal', 'integer', (c) => c.notNull())
    // data_point_items(point)
    .addColumn('items', 'jsonb', (c) => c.notNull())
    .addPrimaryKeyConstraint('data_cache_point_pk', ['tenant_id', 'extract_key', 'subject_id', 'ordinal'])
    .addForeignKeyConstraint(
      'data_cache_point_cache_fk',
      ['tenant_id', 'extract_key', 'subject_id'],
      'data_cache',
      ['tenant_id', 'extract_key', 'subject_id'],
      (c) => c.onDelete('cascade'),
    )
    .execute();
  await sql`
    INSERT INTO data_cache_point (tenant_id, extract_key, subject_id, ordinal, items)
    SELECT c.tenant_id, c.extract_key, c.subject_id, x.n, data_point_items(x.p)
    FROM data_cache c, jsonb_array_elements(c.points) WITH ORDINALITY AS x(p, n)
    WHERE c.points IS NOT NULL`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('data_cache_point').execute();
  await sql`DROP FUNCTION data_point_items(jsonb)`.execute(db);
}
