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

/**
 * A read floor no replica reaches, set by a tenant apply in its transaction: a request that authenticates
 * between the apply's commit and its recordReadFloor, carrying the new config_version, reads the primary,
 * and fills no configuration cache from a replica that lacks the apply (P153). Without a recordReadFloor
 * (an apply while no replica was configured) the tenant reads the primary until its next write.
 */
const PENDING_FLOOR = 'FFFFFFFF/FFFFFFFF';

/**
 * Records the tenants' read floor: the primary's WAL insert position now, run on the primary after a
 * write operation's transactions committed, so it covers their commit records (the write position may
 * not yet, with synchronous_commit off). A replica that has replayed it shows the tenant its own writes.
 * Only raised (a concurrent write that read an older position never lowers it), save from a tenant
 * apply's pending floor.
 */
export async function recordReadFloor(db: Db, tenant: { id: string } | { keys: readonly string[] }): Promise<void> {
  const now = sql<string>`pg_current_wal_insert_lsn()`;
  await db
    .updateTable('tenant')
    .set({ read_floor: now })
    .where((eb) => ('id' in tenant ? eb('id', '=', tenant.id) : eb('key', 'in', [...tenant.keys])))
    .where((eb) => eb.or([eb('read_floor', 'is', null), eb('read_floor', '<', now), eb('read_floor', '=', PENDING_FLOOR)]))
    .execute();
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
      read_floor: PENDING_FLOOR,
    })
    .onConflict((oc) =>
      oc.column('key').doUpdateSet((eb) => ({
        name: eb.ref('excluded.name'),
        ...(t.matchingFieldKeys ? { matching_field_keys: eb.ref('excluded.matching_field_keys') } : {}),
        ...(t.externalIdFieldKey ? { external_id_field_key: eb.ref('excluded.external_id_field_key') } : {}),
        updated_at: sql<Date>`now()`,
        config_version: sql<string>`tenant.config_version + 1`,
        read_floor: PENDING_FLOOR,
      })),
    )
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}
