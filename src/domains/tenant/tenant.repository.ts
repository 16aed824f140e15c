import { sql } from 'kysely';
import type { Db } from '../../db/tables.js';

/**
 * Marks a change of the tenant's subject lists: subjects, their locations, or the entity tree (which
 * IncludeDescendants reads). Cached TotalCounts are keyed by this version (see countSubjects).
 */
export async function bumpDataVersion(db: Db, tenantId: string): Promise<void> {
  await db
    .updateTable('tenant')
    .set({ data_version: sql`data_version + 1` })
    .where('id', '=', tenantId)
    .execute();
}

export async function readDataVersion(db: Db, tenantId: string): Promise<string> {
  return (await db.selectFrom('tenant').select('data_version').where('id', '=', tenantId).executeTakeFirstOrThrow()).data_version;
}

/** Whether any tenant exists (the demo is applied only to an empty embedded database, D1). */
export async function hasTenants(db: Db): Promise<boolean> {
  return (await db.selectFrom('tenant').select('id').limit(1).execute()).length > 0;
}

/** The id of the tenant with this key, if it exists. */
export async function findTenantId(db: Db, tenantKey: string): Promise<string | undefined> {
  return (await db.selectFrom('tenant').select('id').where('key', '=', tenantKey).executeTakeFirst())?.id;
}

/** A tenant file's tenant row (D3): a key and name; matching and ExternalId fields kept as stored when absent. */
export interface TenantPart {
  key: string;
  name: string;
  matchingFieldKeys?: string[] | undefined;
  externalIdFieldKey?: string | undefined;
}

/**
 * Inserts or updates the tenant by key and returns its id. An update bumps `config_version` (the key of
 * cached configuration) and leaves the matching and ExternalId fields as stored when they are not given.
 */
export async function applyTenant(db: Db, t: TenantPart): Promise<string> {
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
