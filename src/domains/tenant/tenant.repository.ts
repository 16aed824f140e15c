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
