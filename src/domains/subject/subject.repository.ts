import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { type Expression, type SqlBool, sql } from 'kysely';
import type { FieldDef } from '../custom-field/index.js';
import {
  type Db,
  ENTITY_COLUMNS,
  type NewRow,
  type NewSubjectValue,
  SUBJECT_COLUMNS,
  type StructuralEntityRow,
  type SubjectFieldTable,
  type SubjectRow,
  qualified,
} from '../../db/tables.js';
import { type Connection, type PageArgs, type PageParts, type PageTemplates, type SortKey, paginate } from '../../db/paging.js';
import { matchScore, matchesTerm } from '../../db/search.js';
import { preparedQuery, preparedShapes } from '../../db/prepared.js';
import { readDataVersion } from '../tenant/index.js';
import { valueRows } from './subject-values.js';

/** A tenant's subject configuration: fields in order, matching fields, and the ExternalId field. */
export interface SubjectConfig {
  fields: FieldDef[];
  byKey: Map<string, FieldDef>;
  matchingKeys: string[];
  externalIdKey: string | undefined;
}

/** Reads the tenant's subject configuration (two queries); requests use the instance's `SubjectCaches.config`. */
export async function loadSubjectConfig(db: Db, tenantId: string): Promise<SubjectConfig> {
  const [fields, tenant] = await Promise.all([
    db.selectFrom('subject_field').selectAll().where('tenant_id', '=', tenantId).orderBy('position').execute(),
    db.selectFrom('tenant').select(['matching_field_keys', 'external_id_field_key']).where('id', '=', tenantId).executeTakeFirstOrThrow(),
  ]);
  const defs = fields.map((f) => ({
    key: f.key,
    name: f.name,
    dataType: f.data_type,
    type: f.type_label,
    required: f.required,
    isArray: f.is_array,
  }));
  return {
    fields: defs,
    byKey: new Map(defs.map((f) => [f.key, f])),
    matchingKeys: tenant.matching_field_keys,
    externalIdKey: tenant.external_id_field_key ?? tenant.matching_field_keys[0],
  };
}

/** The keys of the tenant's subject fields (a tenant file may name them without defining them). */
export async function findSubjectFieldKeys(db: Db, tenantId: string): Promise<string[]> {
  return (await db.selectFrom('subject_field').select('key').where('tenant_id', '=', tenantId).execute()).map((r) => r.key);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/**
 * A field's first value, the one the sort index holds (`WHERE ordinal = 0`), written into the text: a
 * prepared statement's generic plan can use that partial index only for a constant (P167).
 */
const FIRST = sql.lit(0);
/** Whether `s` is a UUID: anything else names no subject (and would fail a uuid comparison). */
export const isUuid = (s: string) => UUID.test(s);

/** Subjects by id, in no particular order (loaders sort); ids that are not UUIDs name none. */
export async function findSubjectsByIds(db: Db, tenantId: string, ids: readonly string[]): Promise<SubjectRow[]> {
  const valid = ids.filter(isUuid);
  if (valid.length === 0) return [];
  return db
    .selectFrom('subject')
    .select(qualified('subject', SUBJECT_COLUMNS))
    .where('tenant_id', '=', tenantId)
    .where('id', 'in', valid)
    .execute();
}

/** The subject of this id, locked FOR UPDATE for the caller's transaction. */
export async function lockSubjectById(db: Db, tenantId: string, id: string): Promise<SubjectRow | undefined> {
  if (!isUuid(id)) return undefined;
  return db.selectFrom('subject').selectAll().where('tenant_id', '=', tenantId).where('id', '=', id).forUpdate().executeTakeFirst();
}

/** The id of the tenant's subject with this UUID (compared in lower case), if there is one. */
export async function findSubjectId(db: Db, tenantId: string, id: string): Promise<string | undefined> {
  if (!isUuid(id)) return undefined;
  return (
    await db.selectFrom('subject').select('id').where('tenant_id', '=', tenantId).where('id', '=', id.toLowerCase()).executeTakeFirst()
  )?.id;
}

/** The subjects whose first value of the field is `text` (usually one; a non-unique field may give more). */
export async function findSubjectIdsByFirstValue(db: Db, tenantId: string, fieldKey: string, text: string): Promise<string[]> {
  // md5 first so the filter index answers.
  const rows = await db
    .selectFrom('subject_value')
    .select('subject_id')
    .where('tenant_id', '=', tenantId)
    .where('field_key', '=', fieldKey)
    .where(sql<boolean>`md5(value_text) = md5(${text})`)
    .where('value_text', '=', text)
    .where('ordinal', '=', 0)
    .execute();
  return rows.map((r) => r.subject_id);
}

export interface SubjectWrite {
  external_id: string | null;
  matching_key: string;
  values: Record<string, unknown>;
}

/** Writes a subject's values and the identity derived from them. */
export async function updateSubjectRow(db: Db, tenantId: string, id: string, s: SubjectWrite): Promise<SubjectRow> {
  return db
    .updateTable('subject')
    .set({ external_id: s.external_id, matching_key: s.matching_key, values: s.values, updated_at: sql<Date>`now()` })
    .where('tenant_id', '=', tenantId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Rewrites the index rows of subjects from their canonical values (one DELETE, batched INSERTs). */
export async function writeSubjectValues(
  db: Db,
  tenantId: string,
  config: SubjectConfig,
  subjects: readonly Pick<SubjectRow, 'id' | 'values'>[],
): Promise<void> {
  if (subjects.length === 0) return;
  await db
    .deleteFrom('subject_value')
    .where('tenant_id', '=', tenantId)
    .where(
      'subject_id',
      'in',
      subjects.map((s) => s.id),
    )
    .execute();
  const rows = subjects.flatMap((s) => subjectValueRows(tenantId, config, s));
  for (let i = 0; i < rows.length; i += 5000)
    await db
      .insertInto('subject_value')
      .values(rows.slice(i, i + 5000))
      .execute();
}

/** A subject as a write reads it: its values, and its row version (`xmin`) for the write's condition. */
export interface SubjectSeen {
  id: string;
  values: Record<string, unknown>;
  version: string;
}

// Two shapes: locked or not.
const upsertTarget = preparedShapes(
  (db: Db, shape: 'lock' | 'read', tenantId: string, matchingKey: string, entityKeys: readonly string[]) =>
    db.selectNoFrom((eb) => [
      eb
        .selectFrom('subject')
        .select(sql<SubjectSeen>`jsonb_build_object('id', id, 'values', values, 'version', xmin::text)`.as('s'))
        .where('tenant_id', '=', tenantId)
        .where('matching_key', '=', matchingKey)
        .$if(shape === 'lock', (q) => q.forUpdate())
        .as('subject'),
      eb
        .selectFrom('structural_entity')
        .select(
          sql<
            { id: string; key: string; structure_type_key: string }[]
          >`coalesce(jsonb_agg(jsonb_build_object('id', id::text, 'key', key, 'structure_type_key', structure_type_key)), '[]')`.as('e'),
        )
        .where('tenant_id', '=', tenantId)
        .where('key', '=', sql<string>`ANY(cast(${entityKeys} as text[]))`)
        .as('entities'),
    ]),
  { named: true },
);

/**
 * What an upsert reads, in one statement (P64): the subject with these matching values, if any (locked
 * FOR UPDATE with `lock`), and the entities of `entityKeys` that exist.
 */
export async function findUpsertTarget(
  db: Db,
  tenantId: string,
  matchingKey: string,
  entityKeys: readonly string[],
  lock: boolean,
): Promise<{ subject: SubjectSeen | undefined; entities: { id: string; key: string; structure_type_key: string }[] }> {
  const row = (await upsertTarget(db, lock ? 'lock' : 'read', tenantId, matchingKey, entityKeys))[0]!;
  return { subject: row.subject ?? undefined, entities: row.entities ?? [] };
}

/** The subject with this id as a write reads it (P64), locked FOR UPDATE with `lock`. */
export async function findSubjectSeen(db: Db, tenantId: string, id: string, lock: boolean): Promise<SubjectSeen | undefined> {
  if (!isUuid(id)) return undefined;
  return db
    .selectFrom('subject')
    .select(['id', 'values', sql<string>`xmin::text`.as('version')])
    .where('tenant_id', '=', tenantId)
    .where('id', '=', id)
    .$if(lock, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** The index rows a subject's values give (valueRows), with the configuration's searchable fields. */
export function subjectValueRows(tenantId: string, config: SubjectConfig, subject: Pick<SubjectRow, 'id' | 'values'>): NewSubjectValue[] {
  const searchable = (f: FieldDef) => f.dataType === 'String' || f.key === config.externalIdKey;
  return valueRows(tenantId, subject.id, config.fields, subject.values, searchable, config.externalIdKey);
}

// Four shapes: an insert or an update (of the row still at `version`), with or without its locations.
type SaveShape = 'insert' | 'insert located' | 'update' | 'update located';
const saveStatement = preparedShapes(
  (
    db: Db,
    shape: SaveShape,
    tenantId: string,
    id: string,
    version: string | undefined,
    externalId: string | null,
    matchingKey: string,
    values: Record<string, unknown>,
    rows: string,
    entityIds: readonly string[] | undefined,
  ) => {
    const locations = !shape.endsWith('located')
      ? sql``
      : sql`, unlocated AS (
          DELETE FROM subject_location l USING subj
          WHERE l.tenant_id = subj.tenant_id AND l.subject_id = subj.id AND NOT (l.structural_entity_id = ANY(cast(${entityIds} as int8[])))
        ), located AS (
          INSERT INTO subject_location (tenant_id, subject_id, structural_entity_id)
          SELECT subj.tenant_id, subj.id, e FROM subj, unnest(cast(${entityIds} as int8[])) AS e
          ON CONFLICT DO NOTHING
        )`;
    const subj = shape.startsWith('insert')
      ? db
          .insertInto('subject')
          .values({ tenant_id: tenantId, id, external_id: externalId, matching_key: matchingKey, values })
          .onConflict((oc) => oc.columns(['tenant_id', 'matching_key']).doNothing())
          .returning(qualified('subject', SUBJECT_COLUMNS))
      : db
          .updateTable('subject')
          .set({ external_id: externalId, matching_key: matchingKey, values, updated_at: sql<Date>`now()` })
          .where('tenant_id', '=', tenantId)
          .where('id', '=', id)
          .where(sql<SqlBool>`xmin = cast(${version} as xid)`)
          .returning(qualified('subject', SUBJECT_COLUMNS));
    // The parts touch disjoint rows (deleted: keys not written; upserted: keys written), so the order in
    // which PostgreSQL runs a statement's data-modifying CTEs does not matter.
    const statement = sql<SubjectRow>`
    WITH subj AS (${subj}), r AS (
      SELECT * FROM jsonb_to_recordset(cast(${rows} as jsonb)) AS r(f text, o int, t text, k text, s boolean, l text)
    ), unvalued AS (
      DELETE FROM subject_value v USING subj
      WHERE v.tenant_id = subj.tenant_id AND v.subject_id = subj.id
        AND NOT EXISTS (SELECT 1 FROM r WHERE r.f = v.field_key AND r.o = v.ordinal)
    ), valued AS (
      INSERT INTO subject_value AS v (tenant_id, subject_id, field_key, ordinal, value_text, sort_key, searchable, list_key)
      SELECT subj.tenant_id, subj.id, r.f, r.o, r.t, r.k, r.s, r.l FROM subj, r
      ON CONFLICT (tenant_id, subject_id, field_key, ordinal) DO UPDATE
        SET value_text = excluded.value_text, sort_key = excluded.sort_key, searchable = excluded.searchable, list_key = excluded.list_key
        WHERE (v.value_text, v.sort_key, v.searchable, v.list_key) IS DISTINCT FROM (excluded.value_text, excluded.sort_key, excluded.searchable, excluded.list_key)
    )${locations}, bumped AS (
      UPDATE tenant SET data_version = data_version + 1 WHERE id = ${tenantId} AND EXISTS (SELECT 1 FROM subj)
    )
    SELECT * FROM subj`;
    return { compile: () => statement.compile(db) };
  },
  // Named (P71): PostgreSQL plans this statement once per connection, not on every write. Its columns
  // are listed, not `*`, so a column added by a later migration does not change a prepared result type.
  { named: true },
);

/**
 * One subject write as one statement (P64): the row (inserted under `id`, or updated), its index
 * rows (those no longer there deleted, the others upserted, unchanged ones left alone), its locations
 * made exactly `entityIds` when given (kept ones keep their creation time), and the tenant's data
 * version bumped. Every part reads the row the first one wrote, so an insert that met a concurrent one
 * (the same matching values: ON CONFLICT DO NOTHING), or an update of a row another write changed since
 * it was read (its `xmin` moved on), writes nothing at all and returns undefined: read again and retry.
 */
export async function saveSubject(
  db: Db,
  tenantId: string,
  s: {
    id: string;
    /** Insert (no version), or update the row still at this version (`xmin` as read). */
    version: string | null;
    write: SubjectWrite;
    values: readonly NewSubjectValue[];
    entityIds?: readonly string[] | undefined;
  },
): Promise<SubjectRow | undefined> {
  const rows = JSON.stringify(
    s.values.map((v) => ({
      f: v.field_key,
      o: v.ordinal,
      t: v.value_text,
      k: v.sort_key,
      s: v.searchable ?? false,
      l: v.list_key ?? null,
    })),
  );
  const shape: SaveShape = `${s.version === null ? 'insert' : 'update'}${s.entityIds === undefined ? '' : ' located'}`;
  return (
    await saveStatement(
      db,
      shape,
      tenantId,
      s.id,
      s.version ?? undefined,
      s.write.external_id,
      s.write.matching_key,
      s.write.values,
      rows,
      s.entityIds,
    )
  )[0];
}

/**
 * Inserts new subjects with their index rows and locations: a few multi-row statements, not one per subject.
 * Matching values another subject holds fail on subject_matching_uq.
 */
export async function insertSubjects(
  db: Db,
  tenantId: string,
  subjects: readonly { id: string; write: SubjectWrite; values: readonly NewSubjectValue[]; entityIds: readonly string[] }[],
): Promise<void> {
  const chunks = <T>(rows: readonly T[], n: number) =>
    Array.from({ length: Math.ceil(rows.length / n) }, (_, i) => rows.slice(i * n, i * n + n));
  for (const part of chunks(subjects, 1000))
    await db
      .insertInto('subject')
      .values(part.map((s) => ({ tenant_id: tenantId, id: s.id, ...s.write })))
      .execute();
  for (const part of chunks(
    subjects.flatMap((s) => s.values),
    5000,
  ))
    await db.insertInto('subject_value').values(part).execute();
  const located = subjects.flatMap((s) =>
    [...new Set(s.entityIds)].map((e) => ({ tenant_id: tenantId, subject_id: s.id, structural_entity_id: e })),
  );
  for (const part of chunks(located, 5000)) await db.insertInto('subject_location').values(part).execute();
}

/** A page of the tenant's subjects in id order after `afterId` (for batch jobs). */
export async function subjectsAfter(
  db: Db,
  tenantId: string,
  afterId: string | null,
  limit: number,
): Promise<(SubjectRow & { matching_key: string })[]> {
  let q = db
    .selectFrom('subject')
    .select([...qualified('subject', SUBJECT_COLUMNS), 'matching_key'])
    .where('tenant_id', '=', tenantId);
  if (afterId) q = q.where('id', '>', afterId);
  return q.orderBy('id').limit(limit).execute();
}

// Prepared (P71, P170): each id drives one read of the location key, so the generic plan cannot read all of
// a tenant's locations, as it did with `subject_id = any(…)` planned from small tenants' statistics.
// OFFSET 0 keeps the lateral subquery from being flattened into a join the planner may reorder.
const locationsOf = preparedQuery(
  (db: Db, tenantId: string, subjectIds: readonly string[]) => {
    const columns = sql.join(ENTITY_COLUMNS.map((c) => sql.ref(`e.${c}`)));
    const statement = sql<StructuralEntityRow & { subject_id: string | null }>`
      WITH located AS MATERIALIZED (
        SELECT ${columns}, l.subject_id
        FROM unnest(${subjectIds}::uuid[]) AS ids(id)
        CROSS JOIN LATERAL (
          SELECT l.tenant_id, l.subject_id, l.structural_entity_id
          FROM subject_location l WHERE l.tenant_id = ${tenantId} AND l.subject_id = ids.id OFFSET 0
        ) l
        JOIN structural_entity e ON e.tenant_id = l.tenant_id AND e.id = l.structural_entity_id
      )
      SELECT * FROM located
      UNION ALL
      SELECT ${columns}, null::uuid
      FROM structural_entity e
      WHERE e.tenant_id = ${tenantId} AND e.key IN (SELECT parent_key FROM located WHERE parent_key IS NOT NULL)`;
    return { compile: () => statement.compile(db) };
  },
  { named: true },
);

/**
 * The locations of some subjects, and in the same statement the parents of those entities (rows with a
 * null `subject_id`): a page of subjects with `parent { ... }` costs no further query (P48).
 */
export async function findLocations(
  db: Db,
  tenantId: string,
  subjectIds: readonly string[],
): Promise<(StructuralEntityRow & { subject_id: string | null })[]> {
  if (subjectIds.length === 0) return [];
  return locationsOf(db, tenantId, subjectIds);
}

/** Locates a subject at these entities; locations it has already are kept. */
export async function addLocations(db: Db, tenantId: string, subjectId: string, entityIds: readonly string[]): Promise<void> {
  if (entityIds.length === 0) return;
  await db
    .insertInto('subject_location')
    .values(entityIds.map((id) => ({ tenant_id: tenantId, subject_id: subjectId, structural_entity_id: id })))
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/** Removes a subject's locations at these entities, or all of them. */
export async function removeLocations(db: Db, tenantId: string, subjectId: string, entityIds: readonly string[] | 'all'): Promise<void> {
  let q = db.deleteFrom('subject_location').where('tenant_id', '=', tenantId).where('subject_id', '=', subjectId);
  if (entityIds !== 'all') {
    if (entityIds.length === 0) return;
    q = q.where('structural_entity_id', 'in', entityIds);
  }
  await q.execute();
}

export interface SubjectFilters {
  /** Located directly at any of these entities (or anywhere below them with `descendants`). */
  entityKeys?: readonly string[] | undefined;
  descendants?: boolean | undefined;
  /** field key → canonical ValueTexts; `any` = ExactAny. */
  values?: { key: string; texts: string[] }[] | undefined;
  match?: 'EXACT_ALL' | 'EXACT_ANY' | undefined;
  searchTerm?: string | undefined;
}

/** What the filter index holds of a value (`md5(value_text)`: a value can be longer than a btree entry may be). */
export const md5Hex = (text: string) => createHash('md5').update(text).digest('hex');

/** The subjects matching the filters, as `s`; the caller orders and pages. */
export function subjectListQuery(db: Db, tenantId: string, f: SubjectFilters) {
  let q = db.selectFrom('subject as s').where('s.tenant_id', '=', tenantId);
  if (f.entityKeys) {
    const keys = f.entityKeys;
    // One subquery, whatever the subtree's size: locations at the entities, or below them via `path`.
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the builder of a query whose joins vary by filter
    const at = (eb: any): Expression<SqlBool> =>
      f.descendants
        ? eb.or([
            eb('e.key', 'in', keys),
            sql<SqlBool>`e.path && array(SELECT r.id FROM structural_entity r WHERE r.tenant_id = ${tenantId} AND r.key = ANY(${keys}))`,
          ])
        : eb('e.key', 'in', keys);
    q = q.where((eb) =>
      keys.length === 0
        ? sql<SqlBool>`false`
        : eb.exists(
            eb
              .selectFrom('subject_location as l')
              .innerJoin('structural_entity as e', (j) =>
                j.onRef('e.tenant_id', '=', 'l.tenant_id').onRef('e.id', '=', 'l.structural_entity_id'),
              )
              .select(sql`1`.as('one'))
              .whereRef('l.tenant_id', '=', 's.tenant_id')
              .whereRef('l.subject_id', '=', 's.id')
              .where(at),
          ),
    );
  }
  if (f.values && f.values.length > 0) {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the builder of a query whose joins vary by filter
    const conds = (eb: any): Expression<SqlBool>[] =>
      f.values!.map(({ key, texts }) =>
        eb.exists(
          eb
            .selectFrom('subject_value as v')
            .select(sql`1`.as('one'))
            .whereRef('v.tenant_id', '=', 's.tenant_id')
            .whereRef('v.subject_id', '=', 's.id')
            .where('v.field_key', '=', key)
            .where(sql<SqlBool>`md5(v.value_text) = ANY(${texts.map(md5Hex)})`)
            .where('v.value_text', 'in', texts),
        ),
      );
    q = q.where((eb) => (f.match === 'EXACT_ANY' ? eb.or(conds(eb)) : eb.and(conds(eb))));
  }
  if (f.searchTerm) {
    const term = f.searchTerm;
    q = q.where((eb) =>
      eb.exists(
        eb
          .selectFrom('subject_value as v')
          .select(sql`1`.as('one'))
          .whereRef('v.tenant_id', '=', 's.tenant_id')
          .whereRef('v.subject_id', '=', 's.id')
          .where('v.searchable', '=', true)
          .where(matchesTerm(term, sql.ref('v.value_text'))),
      ),
    );
  }
  return q;
}

/**
 * The ids and ExternalIds of the subjects matching the filters (D7), as `s`: for another domain's query
 * to select more of `s` from, order and limit (the aggregates' subject list).
 */
export const matchingSubjectsQuery = (db: Db, tenantId: string, f: SubjectFilters) =>
  subjectListQuery(db, tenantId, f).select(['s.id', 's.external_id']);

/** Which of `subjectIds` are located at the entity `entityKey` or anywhere below it (live updates filtered by entity). */
export async function subjectsLocatedIn(db: Db, tenantId: string, entityKey: string, subjectIds: readonly string[]): Promise<string[]> {
  if (subjectIds.length === 0) return [];
  const rows = await subjectListQuery(db, tenantId, { entityKeys: [entityKey], descendants: true })
    .where(sql<SqlBool>`s.id = ANY(cast(${subjectIds} as uuid[]))`)
    .select('s.id')
    .execute();
  return rows.map((r) => r.id);
}

/**
 * The subjects matching a term with their relevance (D7: best match first), scoring each candidate the
 * trigram index finds once: `subject_id`, `score` (the best of its searchable values).
 */
export function searchMatches(db: Db, tenantId: string, term: string) {
  return db
    .selectFrom('subject_value as v')
    .select(['v.subject_id', sql<number>`max(${matchScore(term, sql.ref('v.value_text'))})`.as('score')])
    .where('v.tenant_id', '=', tenantId)
    .where('v.searchable', '=', true)
    .where(matchesTerm(term, sql.ref('v.value_text')))
    .groupBy('v.subject_id');
}

/**
 * How a subject list is ordered (D6): best match first (a search term and no OrderBy), by id, or by a
 * field's first value (ExternalId or a field key; `name` is the OrderBy as the cursor carries it).
 */
export type SubjectOrder = { by: 'relevance' } | { by: 'id' } | { by: 'field'; name: string; fieldKey: string };

/**
 * One page of the subjects matching `filters` in `order`; its TotalCount is cached in `caches.counts`. The
 * query takes the cheapest path the filters and order allow (P48); every path has the same sort
 * values and ids, so a cursor fits whichever path the next page takes.
 */
export async function pageSubjects(
  db: Db,
  tenantId: string,
  config: SubjectConfig,
  filters: SubjectFilters,
  order: SubjectOrder,
  args: PageArgs,
  caches: { counts: SubjectCounts; pages: PageTemplates },
): Promise<Connection<SubjectRow>> {
  const id = { id: sql.ref('s.id'), idType: 'uuid' as const };
  const relevance = order.by === 'relevance';
  const orderField = order.by === 'field' ? order.fieldKey : undefined;
  // Ordered through the joined index rows `o`: the tie-breaker is o.subject_id (= s.id) so that the
  // keyset row comparison (o.sort_key, o.subject_id) > (...) is a range condition on one index.
  const sort: SortKey =
    order.by === 'relevance'
      ? // Best first as an ascending order: the negated score.
        { name: '~relevance', value: sql`(0 - m.score)`, type: 'double precision', nullable: false, ...id }
      : order.by === 'id'
        ? { name: 'Id', value: sql.ref('s.id'), type: 'uuid', nullable: false, ...id }
        : { name: order.name, value: sql.ref('o.sort_key'), type: 'text', nullable: false, id: sql.ref('o.subject_id'), idType: 'uuid' };
  // One value of a single-value field, in ExternalId order: the value's index rows carry the subject's
  // ExternalId sort key (migration 0007), so the page is the first rows of one index range, however
  // many subjects match (P48). Same sort values and ids as the `o` join: cursors fit either path.
  const values = filters.values ?? [];
  const only = values.length === 1 && values[0]!.texts.length === 1 ? values[0]! : undefined;
  const byListKey = only && !config.byKey.get(only.key)!.isArray && orderField !== undefined && orderField === config.externalIdKey;
  // Unfiltered and ordered by a field, the list is exactly the field's ordinal-0 rows (every subject has
  // one per field, written with it): the probes behind a cursor need not join the subjects.
  const unfiltered = !filters.entityKeys && !filters.values && !filters.searchTerm;
  // The statements, over the tenant and the order's field as given in `v` (placeholders, when templated).
  const build = (v: Record<string, unknown>): PageParts<SubjectRow> => {
    const tenant = v['tenant'] as string;
    const field = v['field'] as string | undefined;
    let query = subjectListQuery(
      db,
      tenant,
      relevance ? { ...filters, searchTerm: undefined } : byListKey ? { ...filters, values: undefined, match: undefined } : filters,
    ).select(qualified('s', SUBJECT_COLUMNS));
    if (relevance) {
      query = query.innerJoin(searchMatches(db, tenant, filters.searchTerm!).as('m'), (j) =>
        j.onRef('m.subject_id', '=', 's.id'),
      ) as unknown as typeof query;
    }
    if (byListKey) {
      query = query
        .innerJoin('subject_value as o', (j) =>
          j
            .onRef('o.tenant_id', '=', 's.tenant_id')
            .onRef('o.subject_id', '=', 's.id')
            .on('o.field_key', '=', v['valueKey'] as string),
        )
        .where(sql<SqlBool>`md5(o.value_text) = ${v['valueMd5']}`)
        .where('o.value_text', '=', v['valueText'] as string) as unknown as typeof query;
    } else if (field !== undefined) {
      query = query.innerJoin('subject_value as o', (j) =>
        j
          .onRef('o.tenant_id', '=', 's.tenant_id')
          .onRef('o.subject_id', '=', 's.id')
          .on('o.field_key', '=', field)
          .on('o.ordinal', '=', FIRST),
      ) as unknown as typeof query;
    }
    const probeQuery =
      unfiltered && field !== undefined
        ? db
            .selectFrom('subject_value as o')
            .where('o.tenant_id', '=', tenant)
            .where('o.field_key', '=', field)
            .where('o.ordinal', '=', FIRST)
        : undefined;
    return {
      query,
      ...(probeQuery ? { probeQuery } : {}),
      // The tenant's data version in the page's own snapshot: a cached count is found without a statement.
      version: db.selectFrom('tenant').select('data_version').where('id', '=', tenant),
    };
  };
  // A relevance cursor fits only the term that produced it.
  // Bound to the term by a digest: a cursor stays small whatever the term's length (P22).
  const list = relevance ? `subject~${createHash('sha256').update(filters.searchTerm!).digest('base64url').slice(0, 16)}` : 'subject';
  const pageSort = byListKey ? { ...sort, value: sql.ref('o.list_key') } : sort;
  const common = {
    list,
    count: (pageVersion: string | undefined) => countSubjects(db, caches.counts, tenantId, filters, pageVersion),
    sort: pageSort,
    args,
  };
  const v = {
    tenant: tenantId,
    field: orderField,
    ...(byListKey ? { valueKey: only!.key, valueText: only!.texts[0]!, valueMd5: md5Hex(only!.texts[0]!) } : {}),
  };
  // Unfiltered, the statement's text depends only on the order: built and compiled once per shape
  // (issue 35). Ordered by a field, a page reads the sort index alone, in order, whatever the
  // tenant's size: prepared (P167, P168). By id, a generic plan made for a small average tenant sorts a large
  // one's rows. One value of a single-value field in ExternalId order reads the filter index in order
  // (P169): prepared too. Other filters bind lists of any length, and are planned for their values: built each time.
  const listKeyOnly = byListKey && !filters.entityKeys && !filters.searchTerm;
  return unfiltered || listKeyOnly
    ? paginate<SubjectRow>({
        ...common,
        template: {
          db,
          shape: listKeyOnly ? 'subject:listKey' : `subject:${order.by}`,
          values: v,
          build,
          prepared: listKeyOnly || order.by === 'field',
        },
        templates: caches.pages,
      })
    : paginate<SubjectRow>({ ...common, ...build(v) });
}

/**
 * Counts per (tenant, data version, filters), one cache per instance (built by the app). The version is
 * bumped in the same transaction as every write that can change a subject list, and a count is stored
 * under the version read in the same statement (one snapshot), so a cached count is always the exact
 * count of that version.
 */
export type SubjectCounts = LRUCache<string, number>;
export const subjectCounts = (): SubjectCounts => new LRUCache<string, number>({ max: 20_000 });

/**
 * TotalCount of a filtered subject list, counted once per data version (D6 exact, P48: cheap at scale).
 * `dataVersion`: the version read in the page's own statement (P162); otherwise it is read here.
 */
export async function countSubjects(
  db: Db,
  counts: SubjectCounts,
  tenantId: string,
  filters: SubjectFilters,
  dataVersion?: string,
): Promise<number> {
  // A digest when the filters are long (terms, many values): the cache's keys must not be. Short ones (an
  // unfiltered list's `{}`) are their own key, without hashing on every request; a digest (base64url) has
  // no `{`, so the two never meet.
  const filterText = JSON.stringify(filters);
  const filterKey = filterText.length <= 40 ? filterText : createHash('sha256').update(filterText).digest('base64url');
  const cached = counts.get(`${tenantId}|${dataVersion ?? (await readDataVersion(db, tenantId))}|${filterKey}`);
  if (cached !== undefined) return cached;
  const counted = subjectListQuery(db, tenantId, filters).select((eb) => eb.fn.countAll<string>().as('n'));
  const row = await db
    .selectFrom('tenant')
    .select(['data_version', counted.as('n')])
    .where('id', '=', tenantId)
    .executeTakeFirstOrThrow();
  const n = Number(row.n);
  counts.set(`${tenantId}|${row.data_version}|${filterKey}`, n);
  return n;
}

/** A subject field as the tenant apply writes it. */
export type SubjectFieldWrite = NewRow<SubjectFieldTable>;

/** What subject indexing reads of a tenant: its fields (by key) and its matching and ExternalId fields. */
export async function readSubjectIndexConfig(db: Db, tenantId: string) {
  const fields = await db
    .selectFrom('subject_field')
    .select(['key', 'data_type', 'is_array'])
    .where('tenant_id', '=', tenantId)
    .orderBy('key')
    .execute();
  const tenant = await db
    .selectFrom('tenant')
    .select(['matching_field_keys', 'external_id_field_key'])
    .where('id', '=', tenantId)
    .executeTakeFirstOrThrow();
  return { fields, tenant };
}

/** Whether some subject holds a (non-null) value of the field. */
export async function subjectFieldHasValues(db: Db, tenantId: string, fieldKey: string): Promise<boolean> {
  const r = await db
    .selectFrom('subject_value')
    .select('ordinal')
    .where('tenant_id', '=', tenantId)
    .where('field_key', '=', fieldKey)
    .where('value_text', 'is not', null)
    .limit(1)
    .execute();
  return r.length > 0;
}

/** Inserts or updates a subject field by key. */
export async function upsertSubjectField(db: Db, tenantId: string, f: SubjectFieldWrite): Promise<void> {
  await db
    .insertInto('subject_field')
    .values({ tenant_id: tenantId, ...f })
    .onConflict((oc) =>
      oc.columns(['tenant_id', 'key']).doUpdateSet((eb) => ({
        name: eb.ref('excluded.name'),
        data_type: eb.ref('excluded.data_type'),
        type_label: eb.ref('excluded.type_label'),
        required: eb.ref('excluded.required'),
        is_array: eb.ref('excluded.is_array'),
        position: eb.ref('excluded.position'),
      })),
    )
    .execute();
}
