import type { UserReference } from '../../custom-fields.js';
import type { Db } from '../../db.js';
import type { ErrorCollector } from '../../errors.js';

/** Reports every UserIdentifier value that names no user of the tenant (D7), in one query. */
export async function reportUnknownUsers(db: Db, tenantId: string, refs: readonly UserReference[], errors: ErrorCollector): Promise<void> {
  if (refs.length === 0) return;
  const rows = await db.selectFrom('app_user').select('id').where('tenant_id', '=', tenantId).where('id', 'in', [...new Set(refs.map((r) => r.userId))]).execute();
  const known = new Set(rows.map((r) => r.id));
  for (const r of refs) if (!known.has(r.userId)) errors.add(r.path, `Unknown user '${r.userId}'.`);
}
