import { type RawBuilder, sql } from 'kysely';
import type {
  DataCacheRow,
  DataExtractItem,
  DataExtractRow,
  DataExtractTable,
  DataSourceRow,
  DataSourceTable,
  Db,
  NewRow,
} from '../../../db/tables.js';
import { inTransaction } from '../../../db/transaction.js';
import { type Connection, type PageArgs, type SortKey, paginate, countRows } from '../../../db/paging.js';
import { type DataPoint, holdsExact, pointItems } from './points.js';
import { ExactDecimal, parseExactJson, stringifyExactJson } from './exact-json.js';

export type ExtractWithSource = DataExtractRow & { source: DataSourceRow };

/** The keys of the tenant's data sources (a tenant file may name them without defining them). */
export async function findDataSourceKeys(db: Db, tenantId: string): Promise<string[]> {
  return (await db.selectFrom('data_source').select('key').where('tenant_id', '=', tenantId).execute()).map((r) => r.key);
}

/** The tenant's extracts as `x`, each with its data source row as `source`. */
function extractsWithSource(db: Db, tenantId: string) {
  return db
    .selectFrom('data_extract as x')
    .innerJoin('data_source as d', (j) => j.onRef('d.tenant_id', '=', 'x.tenant_id').onRef('d.key', '=', 'x.data_source_key'))
    .selectAll('x')
    .select((eb) => eb.fn('to_jsonb', [eb.table('d')]).as('source'))
    .where('x.tenant_id', '=', tenantId);
}

/** Extracts with their data sources, by key (one query). */
export async function findExtracts(db: Db, tenantId: string, keys: readonly string[]): Promise<ExtractWithSource[]> {
  if (keys.length === 0) return [];
  return (await extractsWithSource(db, tenantId).where('x.key', 'in', keys).execute()) as unknown as ExtractWithSource[];
}

/** The tenant's extracts whose data source lists `clientId` as an inbound client (D4, D10). */
export async function findExtractsOfInboundClient(db: Db, tenantId: string, clientId: string): Promise<ExtractWithSource[]> {
  const rows = await extractsWithSource(db, tenantId)
    .where(sql<boolean>`${clientId} = ANY(d.inbound_client_ids)`)
    .orderBy('x.key')
    .execute();
  return rows as unknown as ExtractWithSource[];
}

/** A page query of the tenant's extracts (optionally of one data source) and its count. */
export function extractListQuery(db: Db, tenantId: string, dataSourceKey: string | null | undefined) {
  const q = extractsWithSource(db, tenantId);
  return dataSourceKey ? q.where('x.data_source_key', '=', dataSourceKey) : q;
}

/** The data sources of the tenant that list `clientId` as an inbound client. */
export async function findSourcesOfInboundClient(db: Db, tenantId: string, clientId: string): Promise<DataSourceRow[]> {
  return db
    .selectFrom('data_source')
    .selectAll()
    .where('tenant_id', '=', tenantId)
    .where(sql<boolean>`${clientId} = ANY(inbound_client_ids)`)
    .execute();
}

export async function findDataSource(db: Db, tenantId: string, key: string): Promise<DataSourceRow | undefined> {
  return db.selectFrom('data_source').selectAll().where('tenant_id', '=', tenantId).where('key', '=', key).executeTakeFirst();
}

/** The cache rows of some subjects of one extract; their points parsed as stored (Decimals beyond a double exact, P86). */
export async function readCache(db: Db, tenantId: string, extractKey: string, subjectIds: readonly string[]): Promise<DataCacheRow[]> {
  if (subjectIds.length === 0) return [];
  const rows = await db
    .selectFrom('data_cache')
    .select([
      'tenant_id',
      'extract_key',
      'subject_id',
      'subject_identifier',
      'fetched_at',
      'stale',
      'version',
      'removed_ids',
      'refetch_claimed_until',
      sql<string | null>`points::text`.as('points_text'),
    ])
    .where('tenant_id', '=', tenantId)
    .where('extract_key', '=', extractKey)
    .where(sql<boolean>`subject_id = ANY(cast(${subjectIds} as uuid[]))`)
    .execute();
  return rows.map(({ points_text, ...r }) => ({ ...r, points: points_text === null ? null : (parseExactJson(points_text) as unknown[]) }));
}

/** What a freshness check needs of some subjects' cache rows of one extract (no points: DataCache.locate). */
export interface CacheRowState {
  subject_id: string;
  subject_identifier: string | null;
  fetched_at: Date | null;
  stale: boolean;
  has_points: boolean;
}

/** The state of the cache rows of some subjects of one extract, without their points. */
export async function readCacheState(
  db: Db,
  tenantId: string,
  extractKey: string,
  subjectIds: readonly string[],
): Promise<CacheRowState[]> {
  if (subjectIds.length === 0) return [];
  return db
    .selectFrom('data_cache')
    .select(['subject_id', 'subject_identifier', 'fetched_at', 'stale', sql<boolean>`points IS NOT NULL`.as('has_points')])
    .where('tenant_id', '=', tenantId)
    .where('extract_key', '=', extractKey)
    .where(sql<boolean>`subject_id = ANY(cast(${subjectIds} as uuid[]))`)
    .execute();
}

export interface CacheWrite {
  subjectId: string;
  identifier: string;
  points: DataPoint[];
  /** The version read before the provider call; null when there was no row. */
  expectedVersion: string | null;
  removedIds: string[];
}

/**
 * Stores fetched sets, each only if its row is still at the version read before the call and the
 * extract at the epoch read before it: an invalidation committed meanwhile (a change notification, a
 * removal, a refresh, new options) moved one of them, and then the answer, possibly older than it, is not
 * stored as fresh. Returns the stored rows.
 */
export async function writeCache(
  db: Db,
  tenantId: string,
  extractKey: string,
  epoch: string,
  writes: readonly CacheWrite[],
): Promise<{ subject_id: string; version: string; fetched_at: Date }[]> {
  if (writes.length === 0) return [];
  return inTransaction(db, async (trx) => {
    // FOR SHARE waits for a refresh or an options change in progress, and keeps one from committing
    // between this check and the write.
    // SKIP LOCKED: while a refresh or a tenant file holds the extract, the answer is served, not stored.
    const extract = await trx
      .selectFrom('data_extract')
      .select('cache_epoch')
      .where('tenant_id', '=', tenantId)
      .where('key', '=', extractKey)
      .forShare()
      .skipLocked()
      .executeTakeFirst();
    if (!extract || extract.cache_epoch !== epoch) return [];
    const stored = await trx
      .insertInto('data_cache')
      .values(
        [...writes]
          .sort((a, b) => (a.subjectId < b.subjectId ? -1 : a.subjectId > b.subjectId ? 1 : 0))
          .map((w) => ({
            tenant_id: tenantId,
            extract_key: extractKey,
            subject_id: w.subjectId,
            subject_identifier: w.identifier,
            // Decimals as the provider wrote them (P86).
            points: sql<unknown[]>`cast(${stringifyExactJson(w.points, holdsExact(w.points))} as jsonb)`,
            fetched_at: sql<Date>`now()`,
            stale: false,
            version: String(w.expectedVersion === null ? 1 : BigInt(w.expectedVersion) + 1n),
            removed_ids: w.removedIds,
            refetch_claimed_until: null,
          })),
      )
      .onConflict((oc) =>
        oc
          .columns(['tenant_id', 'extract_key', 'subject_id'])
          .doUpdateSet((eb) => ({
            subject_identifier: eb.ref('excluded.subject_identifier'),
            points: eb.ref('excluded.points'),
            fetched_at: eb.ref('excluded.fetched_at'),
            stale: false,
            version: eb.ref('excluded.version'),
            removed_ids: eb.ref('excluded.removed_ids'),
            refetch_claimed_until: null,
          }))
          .where(sql<boolean>`data_cache.version = excluded.version - 1`),
      )
      .returning(['subject_id', 'version', 'fetched_at'])
      .execute();
    const kept = new Set(stored.map((r) => r.subject_id));
    await writePointRows(
      trx,
      tenantId,
      extractKey,
      writes.filter((w) => kept.has(w.subjectId)),
    );
    return stored as { subject_id: string; version: string; fetched_at: Date }[];
  });
}

/**
 * Rewrites the `data_cache_point` rows of some entries from their `points` (migration 0008), in the
 * caller's transaction: every statement that changes `data_cache.points` is followed by this one, so an
 * aggregate reads exactly the cached sets (docs/data-cache.md).
 */
async function rewritePoints(db: Db, tenantId: string, extractKeys: readonly string[], subjectIds: readonly string[]): Promise<void> {
  if (extractKeys.length === 0 || subjectIds.length === 0) return;
  const entries = (q: string) =>
    sql<boolean>`${sql.ref(`${q}.tenant_id`)} = ${tenantId} AND ${sql.ref(`${q}.extract_key`)} = ANY(cast(${extractKeys} as text[]))
      AND ${sql.ref(`${q}.subject_id`)} = ANY(cast(${subjectIds} as uuid[]))`;
  await deletePointRows(db, entries);
  await insertPointRows(
    db,
    sql`SELECT c.tenant_id, c.extract_key, c.subject_id, x.n, data_point_items(x.p)
    FROM data_cache c, jsonb_array_elements(c.points) WITH ORDINALITY AS x(p, n)
    WHERE ${entries('c')} AND c.points IS NOT NULL`,
  );
}

/** Deletes some entries' point rows and the rows aggregates derive from them (migration 0010). */
async function deletePointRows(db: Db, entries: (alias: string) => RawBuilder<boolean>): Promise<void> {
  await sql`WITH m AS (DELETE FROM data_cache_measure m WHERE ${entries('m')}), k AS (DELETE FROM data_cache_kind k WHERE ${entries('k')})
    DELETE FROM data_cache_point p WHERE ${entries('p')}`.execute(db);
}

/**
 * Inserts point rows (`rows` selects tenant_id, extract_key, subject_id, ordinal, items) and, in the same
 * statement, what aggregates read of them: every (numeric item, time item) pair typed, and the data types
 * each subject's items hold (migration 0010).
 */
async function insertPointRows(db: Db, rows: RawBuilder<unknown>): Promise<void> {
  await sql`
    WITH p AS (INSERT INTO data_cache_point (tenant_id, extract_key, subject_id, ordinal, items) ${rows} RETURNING *),
    m AS (
      INSERT INTO data_cache_measure (tenant_id, extract_key, subject_id, value_key, time_key, ordinal, v, ms, day)
      SELECT p.tenant_id, p.extract_key, p.subject_id, d.value_key, d.time_key, p.ordinal, d.v, d.ms, d.day
      FROM p, data_point_measures(p.items) d
    )
    INSERT INTO data_cache_kind (tenant_id, extract_key, subject_id, key, kind)
    SELECT DISTINCT p.tenant_id, p.extract_key, p.subject_id, k.key, k.kind FROM p, data_point_kinds(p.items) k`.execute(db);
}

/**
 * rewritePoints for sets written from JS: the rows' items derived here (pointItems, as `data_point_items`
 * derives them) and sent as one JSON text, instead of a function call per point in the database (P113).
 */
async function writePointRows(db: Db, tenantId: string, extractKey: string, writes: readonly CacheWrite[]): Promise<void> {
  if (writes.length === 0) return;
  const subjectIds = writes.map((w) => w.subjectId);
  await deletePointRows(
    db,
    (q) => sql<boolean>`${sql.ref(`${q}.tenant_id`)} = ${tenantId} AND ${sql.ref(`${q}.extract_key`)} = ${extractKey}
      AND ${sql.ref(`${q}.subject_id`)} = ANY(cast(${subjectIds} as uuid[]))`,
  );
  // The measure and kind rows derived here too (as data_point_measures and data_point_kinds derive them):
  // per point in SQL they were most of a chunk's write on PGlite (P125).
  const rows = writes.map((w) => derivedRows(w.subjectId, w.points.map(pointItems)));
  await sql`
    WITH j AS (SELECT cast(${stringifyExactJson(
      rows,
      writes.some((w) => holdsExact(w.points)),
    )} as jsonb) AS j),
    p AS (
      INSERT INTO data_cache_point (tenant_id, extract_key, subject_id, ordinal, items)
      SELECT ${tenantId}, ${extractKey}, (m->>'s')::uuid, x.n, x.i
      FROM j, jsonb_array_elements(j.j) AS m, jsonb_array_elements(m->'p') WITH ORDINALITY AS x(i, n)
    ),
    d AS (
      INSERT INTO data_cache_measure (tenant_id, extract_key, subject_id, value_key, time_key, ordinal, v, ms, day)
      SELECT ${tenantId}, ${extractKey}, (m->>'s')::uuid, e->>0, e->>1, (e->>2)::int, (e->>3)::numeric, (e->>4)::int8, (e->>5)::int4
      FROM j, jsonb_array_elements(j.j) AS m, jsonb_array_elements(m->'m') AS e
    )
    INSERT INTO data_cache_kind (tenant_id, extract_key, subject_id, key, kind)
    SELECT ${tenantId}, ${extractKey}, (m->>'s')::uuid, e->>0, e->>1
    FROM j, jsonb_array_elements(j.j) AS m, jsonb_array_elements(m->'k') AS e`.execute(db);
}

/** The data type of an item of `pointItems`, named as `data_point_kinds` names it (migration 0010). */
function kindOf(v: unknown): string {
  if (typeof v === 'string') return 'String';
  if (typeof v === 'boolean') return 'Boolean';
  if (typeof v === 'object' && v !== null && !(v instanceof ExactDecimal)) return 't' in v ? 'DateTime' : 'd' in v ? 'Date' : 'Time';
  return 'Integer or Decimal';
}

/**
 * One subject's point rows (`p`: items by key), their (numeric item, time item) pairs (`m`: value key,
 * time key, ordinal, value, epoch ms, day) and its items' data types (`k`), as migration 0010's functions
 * derive them.
 */
function derivedRows(subjectId: string, points: readonly Record<string, unknown>[]) {
  const m: unknown[][] = [];
  const k = new Map<string, [string, string]>();
  points.forEach((items, i) => {
    const entries = Object.entries(items);
    for (const [key, v] of entries) {
      const kind = kindOf(v);
      k.set(`${key}\u0001${kind}`, [key, kind]);
      if (kind !== 'Integer or Decimal') continue;
      for (const [time, t] of entries) {
        const at = kindOf(t);
        if (at === 'DateTime') m.push([key, time, i + 1, v, (t as { t: number }).t, null]);
        else if (at === 'Date') m.push([key, time, i + 1, v, null, (t as { d: number }).d]);
      }
    }
  });
  return { s: subjectId, p: points, m, k: [...k.values()] };
}

/** Moves an extract's cache epoch (refresh, new options): fetches that read the old one store nothing. */
export async function bumpExtractEpoch(db: Db, tenantId: string, extractKey: string): Promise<void> {
  await db
    .updateTable('data_extract')
    .set({ cache_epoch: sql`cache_epoch + 1` })
    .where('tenant_id', '=', tenantId)
    .where('key', '=', extractKey)
    .execute();
}

/**
 * Flags one subject's entries of some extracts stale (a change notification, D10), creating a flag-only
 * row where nothing is cached yet so that a fetch already in flight cannot store its answer as fresh.
 * `removedIds` leave the cached sets at once and are remembered; `recreatedIds` (by subject id: several
 * reports flagged together name their own) are forgotten as removed.
 */
export async function flagSubject(
  db: Db,
  tenantId: string,
  extractKeys: readonly string[],
  subjectIds: readonly string[],
  removedIds: readonly string[],
  recreatedIds: ReadonlyMap<string, readonly string[]>,
): Promise<void> {
  if (extractKeys.length === 0 || subjectIds.length === 0) return;
  // Rows in key order, as writeCache writes them: concurrent writers lock in one order.
  const keys = [...extractKeys].sort().flatMap((k) => [...subjectIds].sort().map((id) => [k, id] as const));
  const recreated = JSON.stringify(Object.fromEntries(recreatedIds));
  await db
    .insertInto('data_cache')
    .values(
      keys.map(([k, subjectId]) => ({
        tenant_id: tenantId,
        extract_key: k,
        subject_id: subjectId,
        subject_identifier: null,
        points: null,
        fetched_at: null,
        stale: true,
        removed_ids: [...removedIds],
        refetch_claimed_until: null,
      })),
    )
    .onConflict((oc) =>
      oc.columns(['tenant_id', 'extract_key', 'subject_id']).doUpdateSet({
        stale: true,
        version: sql`data_cache.version + 1`,
        refetch_claimed_until: null,
        points: sql`CASE WHEN data_cache.points IS NULL OR cardinality(${removedIds}::text[]) = 0 THEN data_cache.points ELSE (
          SELECT coalesce(jsonb_agg(p.value ORDER BY p.ordinality), '[]'::jsonb)
          FROM jsonb_array_elements(data_cache.points) WITH ORDINALITY AS p
          WHERE NOT (p.value->>'Id' = ANY(${removedIds}::text[]))) END`,
        removed_ids: sql`array(SELECT DISTINCT r FROM unnest(data_cache.removed_ids || ${removedIds}::text[]) AS r WHERE NOT (r = ANY(ARRAY(SELECT jsonb_array_elements_text(${recreated}::jsonb -> data_cache.subject_id::text)))) ORDER BY r)`,
      }),
    )
    .execute();
  // The removed points leave the aggregates' rows too.
  if (removedIds.length > 0) await rewritePoints(db, tenantId, extractKeys, subjectIds);
}

/** Flags every cached entry of an extract stale (refresh, D10); returns how many. */
export async function flagExtract(db: Db, tenantId: string, extractKey: string): Promise<number> {
  await bumpExtractEpoch(db, tenantId, extractKey);
  const r = await db
    .updateTable('data_cache')
    .set({ stale: true, version: sql`version + 1`, refetch_claimed_until: null })
    .where('tenant_id', '=', tenantId)
    .where('extract_key', '=', extractKey)
    .where('points', 'is not', null)
    .executeTakeFirst();
  return Number(r.numUpdatedRows);
}

/**
 * Claims up to `limit` flagged entries that hold data for a background re-fetch, skipping rows another
 * instance is claiming at this moment; a claim lapses after `leaseSeconds` (an instance that died).
 */
export async function claimFlagged(db: Db, limit: number, leaseSeconds: number): Promise<DataCacheRow[]> {
  return db
    .updateTable('data_cache as c')
    .set({ refetch_claimed_until: sql<Date>`now() + make_interval(secs => ${leaseSeconds})` })
    .where(({ eb, refTuple, selectFrom }) =>
      eb(
        refTuple('c.tenant_id', 'c.extract_key', 'c.subject_id'),
        'in',
        selectFrom('data_cache as f')
          .select(['f.tenant_id', 'f.extract_key', 'f.subject_id'])
          .where('f.stale', '=', true)
          .where('f.points', 'is not', null)
          .where(sql<boolean>`coalesce(f.refetch_claimed_until, '-infinity') < now()`)
          .limit(limit)
          .forUpdate()
          .skipLocked() as never,
      ),
    )
    .returningAll()
    .execute();
}

/** Entries flagged and holding data, claimed or not: what the background re-fetch has left to do (data_cache_flagged_idx). */
export async function countFlagged(db: Db): Promise<number> {
  const { n } = await db
    .selectFrom('data_cache')
    .select(sql<number>`count(*)::int`.as('n'))
    .where('stale', '=', true)
    .where('points', 'is not', null)
    .executeTakeFirstOrThrow();
  return n;
}

/** Gives claimed rows of one extract back to the next sweep (their lease ends now). */
export async function releaseClaims(db: Db, tenantId: string, extractKey: string, subjectIds: readonly string[]): Promise<void> {
  if (subjectIds.length === 0) return;
  await db
    .updateTable('data_cache')
    .set({ refetch_claimed_until: null })
    .where('tenant_id', '=', tenantId)
    .where('extract_key', '=', extractKey)
    .where('subject_id', 'in', subjectIds)
    .execute();
}

/** The extract of this key, locked FOR UPDATE for the caller's transaction (which creates or changes it). */
export async function lockExtract(db: Db, tenantId: string, key: string): Promise<DataExtractRow | undefined> {
  const [existing] = await db
    .selectFrom('data_extract')
    .selectAll()
    .where('tenant_id', '=', tenantId)
    .where('key', '=', key)
    .forUpdate()
    .execute();
  return existing;
}

/** Inserts an extract; a unique violation (the key exists) is the caller's to report. */
export async function insertExtract(
  db: Db,
  tenantId: string,
  x: { key: string; name: string; data_source_key: string; options: object; items: DataExtractItem[] },
): Promise<DataExtractRow> {
  return db
    .insertInto('data_extract')
    .values({ tenant_id: tenantId, ...x, items: JSON.stringify(x.items) })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Sets an extract's name, data source, options and items. */
export async function updateExtract(
  db: Db,
  tenantId: string,
  key: string,
  set: { name: string; data_source_key: string; options: object; items: DataExtractItem[] },
): Promise<DataExtractRow> {
  return db
    .updateTable('data_extract')
    .set({ ...set, items: JSON.stringify(set.items) })
    .where('tenant_id', '=', tenantId)
    .where('key', '=', key)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** The orderings of the extracts list: by key, or by name (by code point); ties by key. */
export type ExtractOrder = 'Key' | 'Name';

/** One page of the tenant's extracts (of one data source, when given). */
export async function pageExtracts(
  db: Db,
  tenantId: string,
  dataSourceKey: string | null | undefined,
  order: ExtractOrder,
  args: PageArgs,
): Promise<Connection<ExtractWithSource>> {
  const query = extractListQuery(db, tenantId, dataSourceKey);
  const count = () => countRows(query);
  const key = { id: sql.ref('x.key'), idType: 'text' as const, type: 'text' as const, nullable: false };
  const sort: SortKey =
    order === 'Key' ? { name: 'Key', value: sql.ref('x.key'), ...key } : { name: 'Name', value: sql`x.name COLLATE "C"`, ...key };
  return paginate<ExtractWithSource>({ list: 'dataExtract', query: query as never, count, sort, args });
}

/**
 * The service-wide secret stored under `name`, `candidate` when the first caller stores it: instances
 * starting together all read the one that was stored.
 */
export async function findOrCreateServiceSecret(db: Db, name: string, candidate: string): Promise<string> {
  await db
    .insertInto('service_secret')
    .values({ name, value: candidate })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute();
  return (await db.selectFrom('service_secret').select('value').where('name', '=', name).executeTakeFirstOrThrow()).value;
}

/** The get-data-points URL of a data source, by its tenant's key (the demo's provider, at start-up). */
export async function findDataPointsUrl(db: Db, tenantKey: string, sourceKey: string): Promise<string | undefined> {
  const source = await db
    .selectFrom('data_source')
    .innerJoin('tenant', 'tenant.id', 'data_source.tenant_id')
    .select('data_source.get_data_points_url as url')
    .where('tenant.key', '=', tenantKey)
    .where('data_source.key', '=', sourceKey)
    .executeTakeFirst();
  return source?.url;
}

/** How a data source reaches its provider (what, when changed, makes its cached data stale), if it exists. */
export async function findDataSourceConnection(db: Db, tenantId: string, sourceKey: string) {
  return db
    .selectFrom('data_source')
    .select(['get_data_points_url', 'token_url', 'client_id', 'scope', 'subject_identifier'])
    .where('tenant_id', '=', tenantId)
    .where('key', '=', sourceKey)
    .executeTakeFirst();
}

/** The stored sealed client secret of a data source (`null`: none; `undefined`: no such source). */
export async function findSealedClientSecret(db: Db, tenantId: string, sourceKey: string): Promise<string | null | undefined> {
  return (
    await db
      .selectFrom('data_source')
      .select('client_secret_enc')
      .where('tenant_id', '=', tenantId)
      .where('key', '=', sourceKey)
      .executeTakeFirst()
  )?.client_secret_enc;
}

/** Inserts or overwrites a data source. */
export async function upsertDataSource(db: Db, tenantId: string, d: NewRow<DataSourceTable>): Promise<void> {
  const row = { tenant_id: tenantId, ...d };
  await db
    .insertInto('data_source')
    .values(row)
    .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet(row))
    .execute();
}

/** What a data extract asks its source, if it exists. */
export async function findDataExtract(db: Db, tenantId: string, extractKey: string) {
  return db
    .selectFrom('data_extract')
    .select(['data_source_key', 'options'])
    .where('tenant_id', '=', tenantId)
    .where('key', '=', extractKey)
    .executeTakeFirst();
}

/** Inserts or overwrites a data extract (its cache epoch is kept). */
export async function upsertDataExtract(
  db: Db,
  tenantId: string,
  x: Omit<NewRow<DataExtractTable>, 'cache_epoch' | 'items'> & { items: readonly DataExtractItem[] },
): Promise<void> {
  const row = { tenant_id: tenantId, ...x, items: JSON.stringify(x.items) };
  await db
    .insertInto('data_extract')
    .values(row)
    .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet(row))
    .execute();
}
