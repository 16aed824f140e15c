import type { Db } from '../../db/tables.js';

/** The tables whose rows a tenant file names by key. */
export type KeyedTable = 'subject_field' | 'structure_type' | 'structural_entity' | 'user_group' | 'data_source';

/** Every key the tenant has in `table` (read to check the file's references; each domain writes its own). */
export async function listKeys(db: Db, tenantId: string, table: KeyedTable): Promise<string[]> {
  return (await db.selectFrom(table).select('key').where('tenant_id', '=', tenantId).execute()).map((r) => r.key);
}
