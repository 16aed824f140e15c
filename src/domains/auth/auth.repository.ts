import { sql } from 'kysely';
import type { ClientTable, Db, NewRow, SigningKey } from '../../db/tables.js';
import { preparedQuery } from '../../db/prepared.js';

// Every authenticated request runs it: compiled once and prepared (P71).
const clientByTenantKey = preparedQuery(
  (db: Db, tenantKey: string, clientId: string) =>
    db
      .selectFrom('client')
      .innerJoin('tenant', 'tenant.id', 'client.tenant_id')
      .select([
        'tenant.id as tenantId',
        'tenant.key as tenantKey',
        'tenant.config_version as configVersion',
        'tenant.data_version as dataVersion',
        'tenant.read_floor as readFloor',
        'client.client_id as clientId',
        'client.secret_hash as secretHash',
        'client.scopes',
        'client.permissions',
      ])
      .where('tenant.key', '=', tenantKey)
      .where('client.client_id', '=', clientId),
  // One row by a unique key: one plan fits every tenant (P71).
  { named: true },
);

/**
 * The client of a tenant, by the tenant's key (token endpoint, every authenticated request), with the
 * tenant's versions: one indexed row, the only statement authentication costs.
 */
export async function findClientByTenantKey(db: Db, tenantKey: string, clientId: string) {
  return (await clientByTenantKey(db, tenantKey, clientId))[0];
}

/** Signing keys to publish and verify with: the active one and those retired less than `graceSeconds` ago. */
export async function listPublishedKeys(db: Db, graceSeconds: number): Promise<SigningKey[]> {
  return db
    .selectFrom('signing_key')
    .selectAll()
    .where((eb) => eb.or([eb('retired_at', 'is', null), eb('retired_at', '>', sql<Date>`now() - make_interval(secs => ${graceSeconds})`)]))
    .orderBy('created_at', 'desc')
    .execute();
}

export async function findActiveKey(db: Db): Promise<SigningKey | undefined> {
  return db.selectFrom('signing_key').selectAll().where('retired_at', 'is', null).executeTakeFirst();
}

/** Inserts a key as the active one; `false` when another instance won the race (unique partial index). */
export async function insertActiveKey(
  db: Db,
  key: { kid: string; alg: string; private_jwk: unknown; public_jwk: unknown },
): Promise<boolean> {
  const r = await db
    .insertInto('signing_key')
    .values({ ...key, retired_at: null })
    .onConflict((oc) =>
      oc
        .expression(sql`(true)`)
        .where('retired_at', 'is', null)
        .doNothing(),
    )
    .executeTakeFirst();
  return Number(r.numInsertedOrUpdatedRows ?? 0) > 0;
}

export async function retireActiveKey(db: Db): Promise<void> {
  await db
    .updateTable('signing_key')
    .set({ retired_at: sql<Date>`now()` })
    .where('retired_at', 'is', null)
    .execute();
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

/** Inserts or updates a client of the tenant by its client id. */
export async function upsertClient(db: Db, tenantId: string, c: NewRow<ClientTable>): Promise<void> {
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
