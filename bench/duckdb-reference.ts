/**
 * DuckDB as the reference for "how fast can one core aggregate these points" (issue 32, build point 7;
 * decision P123): an in-memory DuckDB with `SET threads = 1`, loaded with the rows the service holds
 * (exported from its cache's `data_cache.points`, the sets as the provider sent them, after the warm fill),
 * running each question's aggregate: count, exact DECIMAL sum, avg, min, max, stddev_samp, quantile_cont,
 * count(DISTINCT subject), per local-calendar bucket in the question's zone, over the whole range, and per
 * group. It is no store of the service: it answers nothing the service serves.
 */
import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { sql } from 'kysely';
import type { Db } from '../src/db/tables.js';
import { CHILD_PARENT, type Dataset, GROUP_ITEM, type Question, timeOf } from './dashboard-questions.js';

/** One row of an answer: the whole range (bucket null) or one bucket, of every point (group null) or of one group. */
export interface ReferenceRow {
  grouped: boolean;
  group: string | null;
  /** The bucket's first local date (yyyy-MM-dd). */
  bucket: string | null;
  count: number;
  subjects: number;
  /** Exact, trailing zeros trimmed. */
  sum: string | null;
}

export interface Reference {
  rows: number;
  loadSeconds: number;
  /** Runs the question `runs` times after one unmeasured run; its times and the rows of the last. */
  ask(q: Question, d: Dataset, runs: number): Promise<{ ms: number[]; rows: ReferenceRow[] }>;
  close(): void;
}

/** `1234.500` → `1234.5`, `12.000` → `12` (the service's trim_scale). */
export const trimDecimal = (s: string | null) => (s === null ? null : s.includes('.') ? s.replace(/0+$/, '').replace(/\.$/, '') : s);

const item = (key: string) => sql.raw(`jsonb_path_query_first(x.p, '$.DataPointItems[*] ? (@.Key == "${key}").Value.Value') #>> '{}'`);

/**
 * Writes the points of one extract as the service holds them to a CSV file: subject id, the time item as
 * epoch ms, the value as text, the ITEM group's value, and the subject's child of CHILD_PARENT (empty
 * when it is not below it). Read in chunks of subjects.
 */
export async function exportPoints(db: Db, tenantId: string, extractKey: string, file: string): Promise<number> {
  const children = await sql<{ sid: string; child: string }>`
    SELECT DISTINCT l.subject_id::text AS sid, d.key AS child
    FROM subject_location l
    JOIN structural_entity e ON e.tenant_id = l.tenant_id AND e.id = l.structural_entity_id
    JOIN structural_entity d ON d.tenant_id = l.tenant_id AND d.parent_key = ${CHILD_PARENT} AND (d.id = e.id OR d.id = ANY(e.path))
    WHERE l.tenant_id = ${tenantId}`.execute(db);
  const childOf = new Map(children.rows.map((r) => [r.sid, r.child]));
  const ids = (
    await sql<{ sid: string }>`SELECT subject_id::text AS sid FROM data_cache
      WHERE tenant_id = ${tenantId} AND extract_key = ${extractKey} AND points IS NOT NULL ORDER BY subject_id`.execute(db)
  ).rows.map((r) => r.sid);
  const out = createWriteStream(file);
  let rows = 0;
  for (let i = 0; i < ids.length; i += 250) {
    const chunk = ids.slice(i, i + 250);
    const r = await sql<{ sid: string; ms: string | null; v: string | null; g: string | null }>`
      SELECT c.subject_id::text AS sid,
        floor(extract(epoch FROM (${item('recordedAt')})::timestamptz) * 1000)::int8::text AS ms,
        ${item('value')} AS v, ${item(GROUP_ITEM)} AS g
      FROM data_cache c, jsonb_array_elements(c.points) x(p)
      WHERE c.tenant_id = ${tenantId} AND c.extract_key = ${extractKey} AND c.subject_id = ANY(cast(${chunk} as uuid[]))`.execute(db);
    let text = '';
    for (const p of r.rows) {
      if (p.ms === null || p.v === null) continue;
      text += `${p.sid},${p.ms},${p.v},${p.g === null ? '' : JSON.stringify(p.g)},${childOf.get(p.sid) ?? ''}\n`;
      rows++;
    }
    if (!out.write(text)) await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
  return rows;
}

/** An in-memory DuckDB on one thread with the CSV's rows in table `pts`. */
export async function openReference(file: string): Promise<Reference> {
  const t0 = performance.now();
  const instance = await DuckDBInstance.create(':memory:', { threads: '1' });
  const c: DuckDBConnection = await instance.connect();
  await c.run(`SET threads = 1`);
  await c.run(
    `CREATE TABLE pts AS SELECT * FROM read_csv('${file.replace(/'/g, "''")}', header = false, nullstr = '',
      columns = {'sid': 'UUID', 'ms': 'BIGINT', 'v': 'DECIMAL(18,3)', 'g': 'VARCHAR', 'c': 'VARCHAR'})`,
  );
  const rows = Number((await c.runAndReadAll('SELECT count(*) AS n FROM pts')).getRowObjectsJson()[0]!['n']);
  const loadSeconds = Math.round((performance.now() - t0) / 100) / 10;
  return {
    rows,
    loadSeconds,
    async ask(q, d, runs) {
      const statement = questionSql(q, d);
      await c.runAndReadAll(statement);
      const ms: number[] = [];
      let last: Record<string, unknown>[] = [];
      for (let i = 0; i < runs; i++) {
        const t = performance.now();
        const r = await c.runAndReadAll(statement);
        ms.push(performance.now() - t);
        last = r.getRowObjectsJson() as Record<string, unknown>[];
      }
      return {
        ms,
        rows: last.map((r) => ({
          grouped: r['grouped'] === true,
          group: (r['grp'] as string | null) ?? null,
          bucket: (r['bucket'] as string | null) ?? null,
          count: Number(r['n']),
          subjects: Number(r['subjects']),
          sum: trimDecimal((r['total'] as string | null) ?? null),
        })),
      };
    },
    close: () => {
      c.closeSync();
      instance.closeSync();
    },
  };
}

/** The question's aggregate in DuckDB's SQL: local days from the zone's offsets, buckets by local calendar. */
function questionSql(q: Question, d: Dataset): string {
  const t = timeOf(q, d);
  const offset =
    t.changes.length === 0
      ? String(t.offsets[0])
      : `CASE ${t.changes.map((at, i) => `WHEN ms < ${at} THEN ${t.offsets[i]}`).join(' ')} ELSE ${t.offsets.at(-1)} END`;
  const bucket =
    q.interval === 'DAY' ? 'day' : q.interval === 'WEEK' ? 'day - (day - 4) % 7' : `date_trunc('month', DATE '1970-01-01' + day)`;
  const bucketText =
    q.interval === 'MONTH' ? 'CAST(CAST(b AS DATE) AS VARCHAR)' : "CAST(DATE '1970-01-01' + CAST(b AS INTEGER) AS VARCHAR)";
  const percentiles = q.percentiles.length ? `quantile_cont(f, [${q.percentiles.join(', ')}])` : 'NULL';
  const measures = `count(v) AS n, count(DISTINCT sid) AS subjects, CAST(sum(v) AS VARCHAR) AS total, avg(v) AS average,
    min(f) AS mn, max(f) AS mx, stddev_samp(f) AS sd, ${percentiles} AS pct`;
  const group = q.grouping === 'CHILD_ENTITY' ? 'c' : q.grouping === 'ITEM' ? 'g' : undefined;
  return `WITH p AS (
      SELECT sid, v, g, c, CAST((ms + ${offset}) // 86400000 AS INTEGER) AS day FROM pts ${q.grouping === 'CHILD_ENTITY' ? 'WHERE c IS NOT NULL' : ''}
    ), r AS (
      SELECT sid, v, CAST(v AS DOUBLE) AS f, g, c, ${bucket} AS b FROM p WHERE day >= ${t.fromDay} AND day < ${t.toDay}
    ), a AS (
      SELECT false AS grouped, CAST(NULL AS VARCHAR) AS grp, GROUPING(b) AS rolled, b, ${measures} FROM r GROUP BY GROUPING SETS ((b), ())
      ${group ? `UNION ALL SELECT true, ${group}, GROUPING(b), b, ${measures} FROM r WHERE ${group} IS NOT NULL GROUP BY GROUPING SETS ((${group}, b), (${group}))` : ''}
    )
    SELECT grouped, grp, CASE WHEN rolled = 1 THEN NULL ELSE ${bucketText} END AS bucket, n, subjects, total, average, mn, mx, sd, pct FROM a`;
}

interface ServiceAggregates {
  count: number;
  subjectCount: number;
  sumText: string | null;
}
interface ServiceBucket {
  start: string;
  aggregates: ServiceAggregates;
}
export interface ServiceAnswer {
  aggregates: ServiceAggregates;
  buckets: ServiceBucket[];
  groupedAggregates?: { key: string; aggregates: ServiceAggregates; buckets: ServiceBucket[] }[];
}

/**
 * Where the service's answer and the reference's differ in count, subjects or exact sum (whole range,
 * each non-empty bucket, each group): a list of differences, empty when they agree.
 */
export function differences(answer: ServiceAnswer, rows: readonly ReferenceRow[]): string[] {
  const wrong: string[] = [];
  const check = (where: string, s: ServiceAggregates | undefined, r: ReferenceRow) => {
    if (!s) wrong.push(`${where}: missing in the service's answer`);
    else if (s.count !== r.count || s.subjectCount !== r.subjects || trimDecimal(s.sumText) !== r.sum)
      wrong.push(`${where}: service ${s.count}/${s.subjectCount}/${s.sumText}, DuckDB ${r.count}/${r.subjects}/${r.sum}`);
  };
  for (const r of rows) {
    const scope = r.grouped ? answer.groupedAggregates?.find((g) => g.key === r.group) : answer;
    const where = `${r.grouped ? `group ${r.group} ` : ''}${r.bucket ?? 'whole range'}`;
    if (!scope) wrong.push(`${where}: group missing in the service's answer`);
    else check(where, r.bucket === null ? scope.aggregates : scope.buckets.find((b) => b.start === r.bucket)?.aggregates, r);
  }
  return wrong;
}
