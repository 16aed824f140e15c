import { TRANSACTION_RUNS, faultOf } from './faults.js';
import type { Db } from './tables.js';

/**
 * Runs `fn` in a transaction, or inside the caller's when `db` already is one. A top-level transaction
 * that PostgreSQL rolled back (a deadlock victim, a serialization failure: retry class 'transaction' in
 * faults.ts) runs again: writes lock rows in different orders (a tenant apply, a subject write).
 */
export async function inTransaction<T>(db: Db, fn: (trx: Db) => Promise<T>): Promise<T> {
  if (db.isTransaction) return fn(db);
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute(fn);
    } catch (e) {
      if (attempt >= TRANSACTION_RUNS || faultOf(e)?.retry !== 'transaction') throw e;
    }
  }
}
