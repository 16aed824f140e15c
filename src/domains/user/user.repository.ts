import type { Db } from '../../db.js';

/** Which of `ids` name users of the tenant (for UserIdentifier values). */
export async function existingUserIds(db: Db, tenantId: string, ids: readonly string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db.selectFrom('app_user').select('id').where('tenant_id', '=', tenantId).where('id', 'in', [...new Set(ids)]).execute();
  return new Set(rows.map((r) => r.id));
}
