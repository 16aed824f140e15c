import type { Db } from './tables.js';

/**
 * Runs `fn` in a transaction, or inside the caller's when `db` already is one. A top-level transaction
 * that PostgreSQL aborted as a deadlock victim or a serialization failure is retried (at most 3 runs):
 * writes lock rows in different orders (a tenant apply, a subject write), and the loser may rerun.
 */
export async function inTransaction<T>(db: Db, fn: (trx: Db) => Promise<T>): Promise<T> {
  if (db.isTransaction) return fn(db);
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute(fn);
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (attempt >= 3 || (code !== '40P01' && code !== '40001')) throw e;
    }
  }
}

/** A PostgreSQL unique violation (SQLSTATE 23505), optionally of one constraint. */
export function isUniqueViolation(e: unknown, constraint?: string): boolean {
  const err = e as { code?: string; constraint?: string };
  return err?.code === '23505' && (constraint === undefined || err.constraint === constraint);
}
