import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Issue 30, F9 (docs/decisions.md P85): a DateTime's instant is truncated to milliseconds, in SQL as in the
// service's JS (P17). PostgreSQL reads a timestamptz to microseconds, rounding the rest: .NET's round-trip
// form `2026-03-30T23:59:59.9999999Z` became the next day's midnight here, while JS read 23:59:59.999. Now
// `data_point_items` drops the fraction beyond three digits before it reads the text; otherwise as 0008.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION data_point_items(point jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT coalesce(jsonb_strip_nulls(jsonb_object_agg(i->>'Key',
        CASE WHEN jsonb_typeof(i->'Value'->'Value') = 'string' THEN
          CASE i->'Value'->>'DataType'
            WHEN 'DateTime' THEN jsonb_build_object('t', floor(extract(epoch FROM (
              regexp_replace(i->'Value'->>'Value', '^([^.]*\\.\\d{3})\\d+', '\\1')
                || CASE WHEN i->'Value'->>'Value' ~ '(Z|[+-]\\d\\d:\\d\\d)$' THEN '' ELSE 'Z' END
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
  // Only a fraction of seven or more digits was read differently.
  await rederive(db);
}

/** Derives again the `data_cache_point` rows of the entries holding a time with seven or more fraction digits. */
async function rederive(db: Kysely<any>): Promise<void> {
  await sql`
    UPDATE data_cache_point p SET items = data_point_items(c.points -> (p.ordinal - 1))
    FROM data_cache c
    WHERE c.tenant_id = p.tenant_id AND c.extract_key = p.extract_key AND c.subject_id = p.subject_id
      AND c.points IS NOT NULL AND c.points::text ~ '\\d:\\d\\d\\.\\d{7}'`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION data_point_items(point jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
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
        ORDER BY n DESC)), '{}')
      FROM jsonb_array_elements(point->'DataPointItems') WITH ORDINALITY AS e(i, n)
    $$`.execute(db);
  await rederive(db);
}
