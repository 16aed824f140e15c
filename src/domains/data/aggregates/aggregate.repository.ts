import { type RawBuilder, sql } from 'kysely';
import { isFault } from '../../../db/faults.js';
import type { Db } from '../../../db/tables.js';
import { inTransaction } from '../../../db/transaction.js';
import { type SubjectFilters, matchingSubjectsQuery } from '../../subject/index.js';
import { type DataPoint, holdsExact, stringifyExactJson } from '../model/index.js';

/** A subject an aggregate reads: what its provider identifier is derived from (subject-identifier.ts). */
export interface AggregateSubject {
  id: string;
  external_id: string | null;
  values: Record<string, unknown>;
}

/**
 * The subjects matching the filters (D7), at most `limit`, by ExternalId then id; `values` only when asked
 * for. `dataVersion`: the tenant's data version in the same snapshot (null without subjects), the version
 * the list is exact for.
 */
export async function findAggregateSubjects(
  db: Db,
  tenantId: string,
  filters: SubjectFilters,
  limit: number,
  withValues: boolean,
): Promise<{ subjects: AggregateSubject[]; dataVersion: string | null }> {
  const rows = await matchingSubjectsQuery(db, tenantId, filters)
    .select(sql<string>`(SELECT data_version FROM tenant WHERE id = ${tenantId})`.as('data_version'))
    .$if(withValues, (q) => q.select('s.values'))
    .orderBy(sql`s.external_id COLLATE "C"`)
    .orderBy('s.id')
    .limit(limit)
    .execute();
  return {
    subjects: rows.map(({ data_version: _, ...r }) => ({ values: {}, ...r }) as AggregateSubject),
    dataVersion: rows[0]?.data_version ?? null,
  };
}

/** The keys of an entity's children, in code-point order. */
export async function findChildKeys(db: Db, tenantId: string, parentKey: string): Promise<string[]> {
  const rows = await db
    .selectFrom('structural_entity')
    .select('key')
    .where('tenant_id', '=', tenantId)
    .where('parent_key', '=', parentKey)
    .orderBy(sql`key COLLATE "C"`)
    .execute();
  return rows.map((r) => r.key);
}

/** How an aggregate's points are grouped besides by bucket. */
export type AggregateGrouping = { by: 'none' } | { by: 'item'; key: string } | { by: 'child'; parentKey: string };

export interface AggregateQuery {
  tenantId: string;
  extractKey: string;
  /** Subjects whose sets are read from `data_cache_point`. */
  rowSubjectIds: readonly string[];
  /** Subjects whose sets this request holds in memory (fetched now, or served stale). */
  memorySets: readonly { subjectId: string; points: readonly DataPoint[] }[];
  valueKey: string;
  timeKey: string;
  /**
   * The buckets' N + 1 boundaries, `[from, start of bucket 2, …, start of bucket N, to)`: as instants
   * (epoch ms, for DateTime items) and as day numbers (days since 1970-01-01, for Date items).
   */
  instantBounds: readonly number[];
  dayBounds: readonly number[];
  /** percentile_cont fractions to compute (none: no percentiles). */
  percentiles: readonly number[];
  grouping: AggregateGrouping;
}

/** One row of the answer: one bucket (1 … N) or the whole range (bucket null), of one group or of all. */
export interface AggregateRow {
  group: string | null;
  /** Whether this row is of one group (false: of every point, whatever its group). */
  grouped: boolean;
  bucket: number | null;
  count: number;
  subjectCount: number;
  /** The exact sum (numeric text, trailing zeros trimmed), null without values. */
  sum: string | null;
  average: number | null;
  min: number | null;
  max: number | null;
  stddevSample: number | null;
  percentiles: (number | null)[] | null;
}

/** The data types found where the query wanted other ones (null: none), over every point read. */
export interface TypeProblems {
  value: string | null;
  time: string | null;
  group: string | null;
}

const num = (n: unknown) => Number(n);
// A Float measure beyond the double range (percentile_cont between -1e308 and 1e308) is no Float: null (P83).
const numOrNull = (n: unknown) => (n === null || n === undefined || !Number.isFinite(Number(n)) ? null : Number(n));
/** A numeric as float8, null beyond the double range (the cast would fail). */
const toFloat = (n: RawBuilder<unknown>) => sql`CASE WHEN abs(${n}) <= 1.7976931348623157e308 THEN (${n})::float8 END`;
/**
 * The aggregates of one numeric item over the points of some subjects, per bucket of a time item and
 * over the whole range, optionally per group (docs/data-cache.md, "Aggregating"): one statement over the
 * points' rows, the arithmetic in PostgreSQL (exact numeric sums, float8 for the rest, percentile_cont).
 * A point counts when its value item is a number and its time item falls into [from, to); its bucket is
 * found by `width_bucket` among the boundaries, so no time zone is converted per point.
 */
export async function aggregatePoints(db: Db, q: AggregateQuery): Promise<{ rows: AggregateRow[]; problems: TypeProblems }> {
  // In a caller's transaction the overflow would abort it, and the retry fail (25P02): the first attempt
  // runs in a savepoint then. No caller passes a transaction today (aggregates are reads on the pool),
  // so no HTTP test reaches this branch.
  const savepoint = db.isTransaction;
  try {
    if (savepoint) await sql`SAVEPOINT aggregate_float8`.execute(db);
    const result = await aggregateOnce(db, q, false);
    if (savepoint) await sql`RELEASE SAVEPOINT aggregate_float8`.execute(db);
    return result;
  } catch (e) {
    // A float8 standard deviation squares its values: beyond about 1e154 it overflows. Rare enough to
    // compute it in numeric only then (P83): numeric costs about twice float8's time.
    if (!isFault(e, 'numeric-overflow')) throw e;
    if (savepoint) {
      await sql`ROLLBACK TO SAVEPOINT aggregate_float8`.execute(db);
      await sql`RELEASE SAVEPOINT aggregate_float8`.execute(db);
    }
    return aggregateOnce(db, q, true);
  }
}

async function aggregateOnce(db: Db, q: AggregateQuery, numericStddev: boolean): Promise<{ rows: AggregateRow[]; problems: TypeProblems }> {
  const n = q.instantBounds.length - 1;
  const memory = stringifyExactJson(
    q.memorySets.map((m) => ({ s: m.subjectId, p: m.points })),
    q.memorySets.some((m) => holdsExact(m.points)),
  );
  const groupKey = q.grouping.by === 'item' ? q.grouping.key : null;
  const percentiles =
    q.percentiles.length > 0 ? sql`percentile_cont(cast(${q.percentiles} as float8[])) WITHIN GROUP (ORDER BY f)` : sql`NULL::float8[]`;
  const stddev = numericStddev ? toFloat(sql`stddev_samp(v)`) : sql`stddev_samp(f)`;
  // avg(v) is sum(v) / count(v) in numeric (the same division): one exact accumulator instead of two.
  const measures = sql`count(v) AS n, count(DISTINCT pts.sid) AS subjects, trim_scale(sum(v))::text AS sum,
    ${toFloat(sql`sum(v) / nullif(count(v), 0)`)} AS average, min(f) AS min, max(f) AS max, ${stddev} AS stddev, ${percentiles} AS percentiles`;
  const byGroup = q.grouping.by === 'child' ? { from: sql`pts JOIN member ON member.sid = pts.sid`, g: sql.ref('member.g') } : undefined;
  const member =
    q.grouping.by === 'child'
      ? sql`, parent AS (
          SELECT id, depth FROM structural_entity WHERE tenant_id = ${q.tenantId} AND key = ${q.grouping.parentKey}
        ), member AS (
          -- The child of the parent on each location's path: the location itself one level below it.
          SELECT DISTINCT l.subject_id AS sid, c.key AS g
          FROM subject_location l
          JOIN structural_entity e ON e.tenant_id = l.tenant_id AND e.id = l.structural_entity_id
          JOIN parent ON e.depth > parent.depth AND e.path[parent.depth] = parent.id
          JOIN structural_entity c ON c.tenant_id = l.tenant_id
            AND c.id = CASE WHEN e.depth = parent.depth + 1 THEN e.id ELSE e.path[parent.depth + 1] END
          WHERE l.tenant_id = ${q.tenantId}
            AND l.subject_id = ANY(cast(${[...q.rowSubjectIds, ...q.memorySets.map((m) => m.subjectId)]} as uuid[]))
        )`
      : sql``;
  const [fromMs, toMs] = [q.instantBounds[0]!, q.instantBounds[n]!];
  const [fromDay, toDay] = [q.dayBounds[0]!, q.dayBounds[n]!];
  // The typed pairs of the rows (migration 0010) within [from, to), and those of the sets in memory. By
  // an item, the points' items are read instead: the group item is in them, and joining each typed pair
  // to its point for it cost more than reading the items (bench:dashboards: 1.3× on PostgreSQL, 2× on PGlite).
  const rowsSource =
    groupKey === null
      ? sql`SELECT m.subject_id AS sid, m.v, m.ms, m.day FROM data_cache_measure m
        WHERE m.tenant_id = ${q.tenantId} AND m.extract_key = ${q.extractKey} AND m.subject_id = ANY(cast(${q.rowSubjectIds} as uuid[]))
          AND m.value_key = ${q.valueKey} AND m.time_key = ${q.timeKey}
          AND (m.ms >= ${fromMs} AND m.ms < ${toMs} OR m.day >= ${fromDay} AND m.day < ${toDay})`
      : sql`SELECT sid, CASE WHEN jsonb_typeof(vv) = 'number' THEN vv::numeric END AS v, (tv -> 't')::int8 AS ms, (tv -> 'd')::int4 AS day, gv FROM (
          -- Each item looked up once per point (OFFSET 0: the planner would inline the lookups into every use).
          SELECT p.subject_id AS sid, p.items -> ${q.valueKey} AS vv, p.items -> ${q.timeKey} AS tv, p.items -> ${groupKey} AS gv
          FROM data_cache_point p
          WHERE p.tenant_id = ${q.tenantId} AND p.extract_key = ${q.extractKey} AND p.subject_id = ANY(cast(${q.rowSubjectIds} as uuid[]))
          OFFSET 0
        ) y`;
  const statement = sql<Record<string, unknown>>`
    WITH src AS (
      ${rowsSource}
      UNION ALL
      SELECT (s->>'s')::uuid, d.v, d.ms, d.day ${groupKey !== null ? sql`, i -> ${groupKey}` : sql``}
      FROM jsonb_array_elements(cast(${memory} as jsonb)) s, jsonb_array_elements(s->'p') AS x(p),
        data_point_items(x.p) AS i, data_point_measures(i) AS d
      WHERE d.value_key = ${q.valueKey} AND d.time_key = ${q.timeKey}
    ), pts AS (
      SELECT sid, v, f, b ${groupKey !== null ? sql`, g` : sql``} FROM (
        SELECT sid, v, v::float8 AS f,
          coalesce(width_bucket(ms, cast(${q.instantBounds} as int8[])), width_bucket(day, cast(${q.dayBounds} as int8[]))) AS b
          ${groupKey !== null ? sql`, CASE WHEN jsonb_typeof(gv) = 'string' THEN gv #>> '{}' END AS g` : sql``}
        FROM src
      ) w WHERE v IS NOT NULL AND b BETWEEN 1 AND ${n}
    ) ${member}
    ${
      // A point has one item value or none: the range, the buckets and the groups in one pass over the
      // points (the points of no group form a group of NULL, left out below). A subject may be below two
      // children of the parent: the groups by child then take a second pass over the points joined to them
      // (materialised: inlined twice, PGlite planned the join to re-read the points per member).
      q.grouping.by === 'item'
        ? sql`SELECT GROUPING(g) = 0 AS grouped, g, GROUPING(b) AS rolled, b, ${measures}
            FROM pts GROUP BY GROUPING SETS ((b), (), (g, b), (g))`
        : sql`SELECT false AS grouped, NULL::text AS g, GROUPING(b) AS rolled, b, ${measures}
            FROM pts GROUP BY GROUPING SETS ((b), ())`
    }
    ${
      byGroup
        ? sql`UNION ALL SELECT true, ${byGroup.g}, GROUPING(b), b, ${measures} FROM ${byGroup.from}
            GROUP BY GROUPING SETS ((${byGroup.g}, b), (${byGroup.g}))`
        : sql``
    }`;
  // The data types the items asked for hold anywhere in the subjects' points.
  const keys = [q.valueKey, q.timeKey, ...(groupKey !== null ? [groupKey] : [])];
  const kinds = sql<{ key: string; kind: string }>`
    SELECT key, kind FROM data_cache_kind
    WHERE tenant_id = ${q.tenantId} AND extract_key = ${q.extractKey} AND subject_id = ANY(cast(${q.rowSubjectIds} as uuid[]))
      AND key = ANY(cast(${keys} as text[]))
    UNION
    SELECT k.key, k.kind FROM jsonb_array_elements(cast(${memory} as jsonb)) s, jsonb_array_elements(s->'p') AS x(p),
      data_point_kinds(data_point_items(x.p)) AS k
    WHERE k.key = ANY(cast(${keys} as text[]))`;
  const [result, found] = await inTransaction(db, async (trx) => {
    // The values and the data types from one snapshot: a write between two statements could otherwise
    // show a type problem the values did not hold, or hide one they did.
    // (A caller's transaction keeps its own level: it must be set before any statement.)
    if (!db.isTransaction) await sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`.execute(trx);
    // One statement over tens of thousands of rows: compiling it (JIT) costs more than running it, and
    // its sorts fit in memory with a little more than the default work_mem.
    await sql`SELECT set_config('jit', 'off', true), set_config('work_mem', '32MB', true)`.execute(trx);
    return [await statement.execute(trx), await kinds.execute(trx)] as const;
  });
  const problem = (key: string, fits: readonly string[]) =>
    found.rows
      .filter((r) => r.key === key && !fits.includes(r.kind))
      .map((r) => r.kind)
      .sort()[0] ?? null;
  const problems: TypeProblems = {
    value: problem(q.valueKey, ['Integer or Decimal']),
    time: problem(q.timeKey, ['DateTime', 'Date']),
    group: groupKey !== null ? problem(groupKey, ['String']) : null,
  };
  const rows: AggregateRow[] = [];
  for (const r of result.rows) {
    if (r['grouped'] === true && r['g'] === null) continue;
    rows.push({
      group: (r['g'] as string | null) ?? null,
      grouped: r['grouped'] === true,
      bucket: num(r['rolled']) === 1 ? null : num(r['b']),
      count: num(r['n']),
      subjectCount: num(r['subjects']),
      sum: (r['sum'] as string | null) ?? null,
      average: numOrNull(r['average']),
      min: numOrNull(r['min']),
      max: numOrNull(r['max']),
      stddevSample: numOrNull(r['stddev']),
      percentiles: r['percentiles'] === null || r['percentiles'] === undefined ? null : (r['percentiles'] as unknown[]).map(numOrNull),
    });
  }
  return { rows, problems };
}
