import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransaction } from '../src/db/transaction.js';
import { failure, openTestDatabase, pool } from './helpers.js';

// The service runs many requests at once on one database handle. PGlite has one session: a transaction
// holds it, and every other statement waits its turn (never runs inside another's transaction); PostgreSQL
// gives each its own pooled connection. Either way a transaction's writes stay its own until it commits. // P146

describe('transactions of concurrent requests', () => {
  let handle: Awaited<ReturnType<typeof openTestDatabase>>;
  beforeAll(async () => {
    handle = await openTestDatabase();
    await sql`CREATE TABLE session_probe (id int PRIMARY KEY)`.execute(handle.db);
  });
  afterAll(() => handle?.dispose());

  const ids = async () => (await sql<{ id: number }>`SELECT id FROM session_probe ORDER BY id`.execute(handle.db)).rows.map((r) => r.id);

  it('a statement outside a transaction does not see its writes, and is queued (PGlite) or pooled (PostgreSQL)', async () => {
    let outside: Promise<number[]> | undefined;
    await failure(() =>
      inTransaction(handle.db, async (trx) => {
        await sql`INSERT INTO session_probe VALUES (1)`.execute(trx);
        outside = ids();
        // Turns of the event loop for the outside statement to run if it could.
        for (let i = 0; i < 5; i++) await new Promise(setImmediate);
        const stats = handle.poolStats();
        if (handle.kind === 'pglite') expect(stats).toEqual({ total: 1, idle: 0, waiting: 1 });
        else expect(stats.waiting).toBe(0);
        throw new Error('roll back');
      }),
    );
    expect(await outside).toEqual([]);
    if (handle.kind === 'pglite') expect(handle.poolStats()).toEqual({ total: 1, idle: 1, waiting: 0 });
  });

  it('interleaved transactions keep their own writes: the rolled back ones leave none, the others all', async () => {
    await pool(
      Array.from({ length: 40 }, (_, i) => i + 10),
      20,
      (id) =>
        inTransaction(handle.db, async (trx) => {
          await sql`INSERT INTO session_probe VALUES (${id})`.execute(trx);
          await new Promise(setImmediate);
          await sql`INSERT INTO session_probe VALUES (${id + 100})`.execute(trx);
          if (id % 3 === 0) throw new Error('roll back');
        }).catch(() => undefined),
    );
    const kept = Array.from({ length: 40 }, (_, i) => i + 10).filter((id) => id % 3 !== 0);
    expect(await ids()).toEqual([...kept, ...kept.map((id) => id + 100)]);
  });
});
