import { type SqlBool, sql } from 'kysely';
import { type FieldDef, jsonFieldSortExpr, sqlTypeOf } from '../custom-field/index.js';
import {
  type DataTypeName,
  type Db,
  ENTITY_COLUMNS,
  type NewRow,
  type StructuralEntityRecord,
  type StructuralEntityRow,
  type StructureType,
  type StructureTypeFieldTable,
  type StructureTypeTable,
  qualified,
} from '../../db/tables.js';
import { type Connection, type PageArgs, type SortKey, paginate, countRows } from '../../db/paging.js';
import { matchesTerm } from '../../db/search.js';

export type StructureTypeWithFields = StructureType & { fields: FieldDef[] };

/** The keys of the tenant's structure types (a tenant file may name them without defining them). */
export async function findStructureTypeKeys(db: Db, tenantId: string): Promise<string[]> {
  return (await db.selectFrom('structure_type').select('key').where('tenant_id', '=', tenantId).execute()).map((r) => r.key);
}

/** The keys of the tenant's entities (a tenant file may name them without defining them). */
export async function findEntityKeys(db: Db, tenantId: string): Promise<string[]> {
  return (await db.selectFrom('structural_entity').select('key').where('tenant_id', '=', tenantId).execute()).map((r) => r.key);
}

/** Entities by key, in no particular order (loaders sort). */
export async function findEntitiesByKeys(db: Db, tenantId: string, keys: readonly string[]): Promise<StructuralEntityRow[]> {
  if (keys.length === 0) return [];
  return db
    .selectFrom('structural_entity as e')
    .select(qualified('e', ENTITY_COLUMNS))
    .where('e.tenant_id', '=', tenantId)
    .where('e.key', 'in', keys)
    .execute();
}

/** The entity of this key with its path (an upsert's new parent). */
export async function findEntityRecordByKey(db: Db, tenantId: string, key: string): Promise<StructuralEntityRecord | undefined> {
  return db.selectFrom('structural_entity').selectAll().where('tenant_id', '=', tenantId).where('key', '=', key).executeTakeFirst();
}

/** Structure types with their fields (ordered by position), in one query; `keys` absent: all of them. */
export async function findStructureTypes(db: Db, tenantId: string, keys?: readonly string[]): Promise<StructureTypeWithFields[]> {
  if (keys?.length === 0) return [];
  let q = db
    .selectFrom('structure_type as t')
    .leftJoin('structure_type_field as f', (j) => j.onRef('f.tenant_id', '=', 't.tenant_id').onRef('f.structure_type_key', '=', 't.key'))
    .select([
      't.tenant_id',
      't.key',
      't.name',
      't.subject_assignable',
      'f.key as fkey',
      'f.name as fname',
      'f.data_type',
      'f.type_label',
      'f.required',
    ])
    .where('t.tenant_id', '=', tenantId);
  if (keys) q = q.where('t.key', 'in', keys);
  const rows = await q.orderBy('t.key').orderBy('f.position').execute();
  const byKey = new Map<string, StructureTypeWithFields>();
  for (const r of rows) {
    let t = byKey.get(r.key);
    if (!t)
      byKey.set(r.key, (t = { tenant_id: r.tenant_id, key: r.key, name: r.name, subject_assignable: r.subject_assignable, fields: [] }));
    if (r.fkey !== null) {
      t.fields.push({
        key: r.fkey,
        name: r.fname!,
        dataType: r.data_type!,
        type: r.type_label!,
        required: r.required!,
        isArray: false,
      });
    }
  }
  return [...byKey.values()];
}

/** The data types a custom field key has across the tenant's structure types (for OrderBy). */
export async function structureFieldTypes(db: Db, tenantId: string, fieldKey: string) {
  return db
    .selectFrom('structure_type_field')
    .select('data_type')
    .distinct()
    .where('tenant_id', '=', tenantId)
    .where('key', '=', fieldKey)
    .execute();
}

export interface EntityFilters {
  parentKey?: string | null | undefined;
  depth?: number | null | undefined;
  searchTerm?: string | null | undefined;
  subjectAssignable?: boolean | null | undefined;
  structureTypeKey?: string | null | undefined;
}

/** The filtered list of entities (D8 filters combine with AND); callers page it. */
export function entityListQuery(db: Db, tenantId: string, f: EntityFilters) {
  let q = db.selectFrom('structural_entity as e').select(qualified('e', ENTITY_COLUMNS)).where('e.tenant_id', '=', tenantId);
  if (f.parentKey !== undefined && f.parentKey !== null) q = q.where('e.parent_key', '=', f.parentKey);
  if (f.depth !== undefined && f.depth !== null) q = q.where('e.depth', '=', f.depth);
  if (f.structureTypeKey !== undefined && f.structureTypeKey !== null) q = q.where('e.structure_type_key', '=', f.structureTypeKey);
  if (f.subjectAssignable !== undefined && f.subjectAssignable !== null) {
    const assignable = f.subjectAssignable;
    q = q.where((eb) =>
      eb.exists(
        eb
          .selectFrom('structure_type as t')
          .select(sql`1`.as('one'))
          .whereRef('t.tenant_id', '=', 'e.tenant_id')
          .whereRef('t.key', '=', 'e.structure_type_key')
          .where('t.subject_assignable', '=', assignable),
      ),
    );
  }
  if (f.searchTerm) {
    const term = f.searchTerm;
    q = q.where((eb) => eb.or([matchesTerm(term, eb.ref('e.key')), matchesTerm(term, eb.ref('e.display_name'))]));
  }
  return q;
}

/** The OrderBy keys every entity list knows (D6, P14), besides custom field keys. */
export const BUILT_IN_ENTITY_ORDERS = ['Key', 'DisplayName', 'Depth', 'StructureTypeKey'] as const;
export type BuiltInEntityOrder = (typeof BUILT_IN_ENTITY_ORDERS)[number];

const BUILT_IN_COLUMNS: Record<BuiltInEntityOrder, Omit<SortKey, 'name' | 'id' | 'idType'>> = {
  Key: { value: sql.ref('e.key'), type: 'text', nullable: false },
  DisplayName: { value: sql.ref('e.display_name'), type: 'text', nullable: false },
  Depth: { value: sql.ref('e.depth'), type: 'integer', nullable: false },
  StructureTypeKey: { value: sql.ref('e.structure_type_key'), type: 'text', nullable: false },
};

/**
 * How `entityListQuery`'s rows (`e`) order by a built-in key, or by a custom field of `dataType` (a
 * missing value sorts last); ties by key.
 */
export function entitySortKey(order: { builtIn: BuiltInEntityOrder } | { field: string; dataType: DataTypeName }): SortKey {
  const id = { id: sql.ref('e.key'), idType: 'text' as const };
  if ('builtIn' in order) return { name: order.builtIn, ...BUILT_IN_COLUMNS[order.builtIn], ...id };
  const { field, dataType } = order;
  return {
    name: field,
    value: jsonFieldSortExpr(sql.ref('e.custom_values'), field, dataType, false),
    type: sqlTypeOf(dataType),
    nullable: true,
    ...id,
  };
}

/** One page of the filtered entities in `sort` (an `entitySortKey`) order. */
export async function pageEntities(
  db: Db,
  tenantId: string,
  filters: EntityFilters,
  sort: SortKey,
  args: PageArgs,
): Promise<Connection<StructuralEntityRow>> {
  const query = entityListQuery(db, tenantId, filters);
  return paginate<StructuralEntityRow>({ list: 'structuralEntity', query, count: () => countRows(query), sort, args });
}

/** The entity of this key, locked FOR UPDATE for the caller's transaction (an upsert). */
export async function lockEntityByKey(db: Db, tenantId: string, key: string): Promise<StructuralEntityRecord | undefined> {
  return (
    await db.selectFrom('structural_entity').selectAll().where('tenant_id', '=', tenantId).where('key', '=', key).forUpdate().execute()
  )[0];
}

/**
 * The entities of these keys, locked FOR SHARE: a concurrent change of an entity's type (to one subjects
 * cannot be assigned to) waits for the caller's transaction, which assigns subjects to them (D8 409).
 */
export async function shareLockEntitiesByKeys(db: Db, tenantId: string, keys: readonly string[]) {
  return db
    .selectFrom('structural_entity')
    .select(['id', 'key', 'structure_type_key'])
    .where('tenant_id', '=', tenantId)
    .where('key', 'in', keys)
    .forShare()
    .execute();
}

/** The ids of the entities of these keys (keys naming none are left out). */
export async function findEntityIdsByKeys(db: Db, tenantId: string, keys: readonly string[]): Promise<string[]> {
  return (await db.selectFrom('structural_entity').select('id').where('tenant_id', '=', tenantId).where('key', 'in', keys).execute()).map(
    (r) => r.id,
  );
}

/** Whether any subject is located at the entity (D8: its type must stay subject-assignable). */
export async function hasLocatedSubjects(db: Db, tenantId: string, entityId: string): Promise<boolean> {
  const located = await db
    .selectFrom('subject_location')
    .select('subject_id')
    .where('tenant_id', '=', tenantId)
    .where('structural_entity_id', '=', entityId)
    .limit(1)
    .execute();
  return located.length > 0;
}

export interface EntityWrite {
  key: string;
  display_name: string;
  structure_type_key: string;
  custom_values: Record<string, unknown>;
}

/** Inserts an entity under `parent` (null = at the top); its path follows from the parent's. */
export async function insertEntity(
  db: Db,
  tenantId: string,
  e: EntityWrite,
  parent: StructuralEntityRecord | null,
): Promise<StructuralEntityRecord> {
  return db
    .insertInto('structural_entity')
    .values({
      tenant_id: tenantId,
      key: e.key,
      display_name: e.display_name,
      structure_type_key: e.structure_type_key,
      parent_key: parent?.key ?? null,
      path: parent ? [...parent.path, parent.id] : [],
      custom_values: e.custom_values, // node-postgres sends a plain object as JSON
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Writes an entity's name, type and custom values (its place in the tree: `moveSubtree`). */
export async function updateEntity(db: Db, tenantId: string, id: string, e: EntityWrite): Promise<void> {
  await db
    .updateTable('structural_entity')
    .set({
      display_name: e.display_name,
      structure_type_key: e.structure_type_key,
      custom_values: e.custom_values, // node-postgres sends a plain object as JSON
      updated_at: sql<Date>`now()`,
    })
    .where('tenant_id', '=', tenantId)
    .where('id', '=', id)
    .execute();
}

/**
 * Moves `entity` under `parent` (null = top) with its whole subtree: each descendant's path keeps the
 * part from the entity down and gets the new prefix, in one UPDATE (depth is derived from the path).
 */
export async function moveSubtree(
  db: Db,
  tenantId: string,
  entity: Pick<StructuralEntityRow, 'id'>,
  parent: StructuralEntityRecord | null,
): Promise<void> {
  const prefix = parent ? [...parent.path, parent.id] : [];
  await db
    .updateTable('structural_entity')
    .set({ parent_key: parent?.key ?? null, path: sql`cast(${prefix} as bigint[])`, updated_at: sql<Date>`now()` })
    .where('tenant_id', '=', tenantId)
    .where('id', '=', entity.id)
    .execute();
  await db
    .updateTable('structural_entity')
    .set({ path: sql`cast(${prefix} as bigint[]) || path[array_position(path, cast(${entity.id} as bigint)):]` })
    .where('tenant_id', '=', tenantId)
    .where(sql<SqlBool>`path @> array[cast(${entity.id} as bigint)]`)
    .execute();
}

/** Serialises tree-shaping writes (creates under a parent, moves) of one tenant: paths stay consistent. */
export async function lockTree(db: Db, tenantId: string): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`tree:${tenantId}`}, 0))`.execute(db);
}

/** The stored custom fields of a structure type, with their data types. */
export async function findStructureTypeFields(db: Db, tenantId: string, structureTypeKey: string) {
  return db
    .selectFrom('structure_type_field')
    .select(['key', 'data_type'])
    .where('tenant_id', '=', tenantId)
    .where('structure_type_key', '=', structureTypeKey)
    .execute();
}

/** Whether some entity of the structure type holds a value of the custom field. */
export async function entitiesHoldCustomValue(db: Db, tenantId: string, structureTypeKey: string, fieldKey: string): Promise<boolean> {
  const held = await db
    .selectFrom('structural_entity')
    .select('id')
    .where('tenant_id', '=', tenantId)
    .where('structure_type_key', '=', structureTypeKey)
    .where(sql<SqlBool>`custom_values ? ${fieldKey}`)
    .limit(1)
    .execute();
  return held.length > 0;
}

/** Inserts or updates a structure type by key. */
export async function upsertStructureType(db: Db, tenantId: string, st: NewRow<StructureTypeTable>): Promise<void> {
  await db
    .insertInto('structure_type')
    .values({ tenant_id: tenantId, ...st })
    .onConflict((oc) =>
      oc
        .columns(['tenant_id', 'key'])
        .doUpdateSet((eb) => ({ name: eb.ref('excluded.name'), subject_assignable: eb.ref('excluded.subject_assignable') })),
    )
    .execute();
}

/** Replaces the custom fields of a structure type by `fields` (one DELETE, one INSERT unless empty). */
export async function replaceStructureTypeFields(
  db: Db,
  tenantId: string,
  structureTypeKey: string,
  fields: readonly Omit<NewRow<StructureTypeFieldTable>, 'structure_type_key'>[],
): Promise<void> {
  await db
    .deleteFrom('structure_type_field')
    .where('tenant_id', '=', tenantId)
    .where('structure_type_key', '=', structureTypeKey)
    .execute();
  if (fields.length > 0) {
    await db
      .insertInto('structure_type_field')
      .values(fields.map((f) => ({ tenant_id: tenantId, structure_type_key: structureTypeKey, ...f })))
      .execute();
  }
}

/** Removes, from every entity of the structure type, the custom values of fields not in `keepKeys`. */
export async function pruneEntityCustomValues(
  db: Db,
  tenantId: string,
  structureTypeKey: string,
  keepKeys: readonly string[],
): Promise<void> {
  await db
    .updateTable('structural_entity')
    .set({
      custom_values: sql`coalesce((SELECT jsonb_object_agg(k, v) FROM jsonb_each(custom_values) AS f(k, v) WHERE k = ANY(${keepKeys}::text[])), '{}'::jsonb)`,
    })
    .where('tenant_id', '=', tenantId)
    .where('structure_type_key', '=', structureTypeKey)
    .execute();
}
