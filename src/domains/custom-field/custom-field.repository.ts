import { type Expression, sql } from 'kysely';
import type { ErrorCollector } from '../../core/errors.js';
import type { Db } from '../../db/tables.js';
import { type UserReference, sqlTypeOf } from './custom-field.js';
import type { DataTypeName } from '../../db/tables.js';

/** Reports every UserIdentifier value that names no user of the tenant (D7), in one query. */
export async function reportUnknownUsers(db: Db, tenantId: string, refs: readonly UserReference[], errors: ErrorCollector): Promise<void> {
  if (refs.length === 0) return;
  const rows = await db
    .selectFrom('app_user')
    .select('id')
    .where('tenant_id', '=', tenantId)
    .where('id', 'in', [...new Set(refs.map((r) => r.userId))])
    .execute();
  const known = new Set(rows.map((r) => r.id));
  for (const r of refs) if (!known.has(r.userId)) errors.add(r.path, `Unknown user '${r.userId}'.`);
}

/**
 * The typed, orderable value of field `key` inside a jsonb map column; an array field orders by its
 * first element (D6). Text compares in the "C" collation, i.e. by code point.
 */
export function jsonFieldSortExpr(column: Expression<unknown>, key: string, type: DataTypeName, isArray: boolean): Expression<unknown> {
  const text = isArray ? sql`(${column} -> ${key} ->> 0)` : sql`(${column} ->> ${key})`;
  const t = sqlTypeOf(type);
  return t === 'text' ? sql`(${text} COLLATE "C")` : sql`cast(${text} as ${sql.raw(t)})`;
}
