import { type Insertable, type SqlBool, sql } from 'kysely';
import type {
  AppUserTable,
  ClientTable,
  Db,
  PortalConfigTable,
  StructureTypeFieldTable,
  StructureTypeTable,
  SubjectFieldTable,
} from '../../db/tables.js';

/** A row of `table` as the apply writes it: every column but the tenant's id, which the function adds. */
type TenantRow<T> = Omit<Insertable<T>, 'tenant_id'>;

/** Whether any tenant exists (the demo is applied only to an empty embedded database, D1). */
export async function hasTenants(db: Db): Promise<boolean> {
  return (await db.selectFrom('tenant').select('id').limit(1).execute()).length > 0;
}

/** The id of the tenant with this key, if it exists. */
export async function findTenantId(db: Db, tenantKey: string): Promise<string | undefined> {
  return (await db.selectFrom('tenant').select('id').where('key', '=', tenantKey).executeTakeFirst())?.id;
}

/** The tables whose rows a tenant file names by key. */
export type KeyedTable = 'subject_field' | 'structure_type' | 'structural_entity' | 'user_group' | 'data_source';

/** Every key the tenant has in `table`. */
export async function listKeys(db: Db, tenantId: string, table: KeyedTable): Promise<string[]> {
  return (await db.selectFrom(table).select('key').where('tenant_id', '=', tenantId).execute()).map((r) => r.key);
}

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

/**
 * Inserts or updates the tenant by key and returns its id. An update bumps `config_version` (the key of
 * cached configuration) and leaves the matching and ExternalId fields as stored when they are not given.
 */
export async function upsertTenant(
  db: Db,
  t: { key: string; name: string; matchingFieldKeys: string[] | undefined; externalIdFieldKey: string | undefined },
): Promise<string> {
  const row = await db
    .insertInto('tenant')
    .values({
      key: t.key,
      name: t.name,
      matching_field_keys: t.matchingFieldKeys ?? [],
      external_id_field_key: t.externalIdFieldKey ?? null,
    })
    .onConflict((oc) =>
      oc.column('key').doUpdateSet((eb) => ({
        name: eb.ref('excluded.name'),
        ...(t.matchingFieldKeys ? { matching_field_keys: eb.ref('excluded.matching_field_keys') } : {}),
        ...(t.externalIdFieldKey ? { external_id_field_key: eb.ref('excluded.external_id_field_key') } : {}),
        updated_at: sql<Date>`now()`,
        config_version: sql<string>`tenant.config_version + 1`,
      })),
    )
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

/** The stored secret hash of a client, if the client exists. */
export async function findClientSecretHash(db: Db, tenantId: string, clientId: string): Promise<string | undefined> {
  return (
    await db
      .selectFrom('client')
      .select('secret_hash')
      .where('tenant_id', '=', tenantId)
      .where('client_id', '=', clientId)
      .executeTakeFirst()
  )?.secret_hash;
}

export async function upsertClient(db: Db, tenantId: string, c: TenantRow<ClientTable>): Promise<void> {
  await db
    .insertInto('client')
    .values({ tenant_id: tenantId, ...c })
    .onConflict((oc) =>
      oc.columns(['tenant_id', 'client_id']).doUpdateSet((eb) => ({
        secret_hash: eb.ref('excluded.secret_hash'),
        scopes: eb.ref('excluded.scopes'),
        permissions: eb.ref('excluded.permissions'),
      })),
    )
    .execute();
}

export async function upsertSubjectField(db: Db, tenantId: string, f: TenantRow<SubjectFieldTable>): Promise<void> {
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

export async function upsertStructureType(db: Db, tenantId: string, st: TenantRow<StructureTypeTable>): Promise<void> {
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
  fields: readonly Omit<TenantRow<StructureTypeFieldTable>, 'structure_type_key'>[],
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

export async function upsertUser(db: Db, tenantId: string, u: TenantRow<AppUserTable>): Promise<void> {
  await db
    .insertInto('app_user')
    .values({ tenant_id: tenantId, ...u })
    .onConflict((oc) =>
      oc.columns(['tenant_id', 'id']).doUpdateSet((eb) => ({
        display_name: eb.ref('excluded.display_name'),
        email: eb.ref('excluded.email'),
        active: eb.ref('excluded.active'),
      })),
    )
    .execute();
}

/** The ids of the tenant's entities with these keys, by key (no query for no keys). */
export async function entityIdsByKey(db: Db, tenantId: string, keys: readonly string[]): Promise<Map<string, string>> {
  if (keys.length === 0) return new Map();
  const rows = await db
    .selectFrom('structural_entity')
    .select(['key', 'id'])
    .where('tenant_id', '=', tenantId)
    .where('key', 'in', keys)
    .execute();
  return new Map(rows.map((r) => [r.key, r.id]));
}

export async function upsertGroup(db: Db, tenantId: string, g: { key: string; name: string }): Promise<void> {
  await db
    .insertInto('user_group')
    .values({ tenant_id: tenantId, key: g.key, name: g.name })
    .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet((eb) => ({ name: eb.ref('excluded.name') })))
    .execute();
}

/** Replaces the entities a group grants by `entityIds` (one DELETE, one INSERT unless empty). */
export async function replaceGroupEntities(db: Db, tenantId: string, groupKey: string, entityIds: readonly string[]): Promise<void> {
  await db.deleteFrom('user_group_structural_entity').where('tenant_id', '=', tenantId).where('group_key', '=', groupKey).execute();
  if (entityIds.length > 0) {
    await db
      .insertInto('user_group_structural_entity')
      .values(entityIds.map((id) => ({ tenant_id: tenantId, group_key: groupKey, structural_entity_id: id })))
      .execute();
  }
}

/** Replaces a user's group memberships by `groupKeys`, distinct (one DELETE, one INSERT unless empty). */
export async function replaceUserGroups(db: Db, tenantId: string, userId: string, groupKeys: readonly string[]): Promise<void> {
  await db.deleteFrom('app_user_group').where('tenant_id', '=', tenantId).where('user_id', '=', userId).execute();
  if (groupKeys.length > 0) {
    await db
      .insertInto('app_user_group')
      .values(groupKeys.map((k) => ({ tenant_id: tenantId, user_id: userId, group_key: k })))
      .execute();
  }
}

/** Inserts or overwrites the tenant's portal configuration. */
export async function upsertPortalConfig(db: Db, tenantId: string, p: TenantRow<PortalConfigTable>): Promise<void> {
  const row = { tenant_id: tenantId, ...p };
  await db
    .insertInto('portal_config')
    .values(row)
    .onConflict((oc) => oc.column('tenant_id').doUpdateSet(row))
    .execute();
}
