import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceUnavailableError } from '../src/core/errors.js';
import { expectedErrorOf, faultOf } from '../src/db/faults.js';
import { failure, openTestDatabase } from './helpers.js';

// The fault table's classes only a PostgreSQL server raises (test/fault-table.test.ts holds the rest, on both
// databases): a statement timeout (PGlite runs its backend on this thread, no timer interrupts it), a lost or
// changed prepared statement, a serialization failure and a terminated backend. PostgreSQL only: vitest.config.ts
// leaves this file out without DATABASE_URL.

describe('the engine raises what the table expects (PostgreSQL only)', () => {
  let handle: Awaited<ReturnType<typeof openTestDatabase>>;
  beforeAll(async () => {
    handle = await openTestDatabase();
  });
  afterAll(() => handle?.dispose());

  it('a statement past statement_timeout is cancelled (503)', async () => {
    const e = await failure(() =>
      handle.db.transaction().execute(async (trx) => {
        await sql`SET LOCAL statement_timeout = 50`.execute(trx);
        await sql`SELECT pg_sleep(2)`.execute(trx);
      }),
    );
    // The resilient pool answers it as the expected error already.
    const raw = e instanceof ServiceUnavailableError ? e.cause : e;
    expect(faultOf(raw)?.name).toBe('statement-timeout');
    expect(expectedErrorOf(e)?.message).toMatch(/took too long/);
  });

  /** A plain `pg` client on this test's PostgreSQL database (the engine's own errors, before the resilient pool). */
  async function client(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: handle.url });
    c.on('error', () => {});
    await c.connect();
    return c;
  }

  it('a prepared statement the session lost, or whose result type changed', async () => {
    const c = await client();
    try {
      await c.query({ name: 'fault_s1', text: 'SELECT 1 AS a' });
      await c.query('DEALLOCATE fault_s1');
      expect(faultOf(await failure(() => c.query({ name: 'fault_s1', text: 'SELECT 1 AS a' })))?.name).toBe('unusable-prepared');
      await c.query('CREATE TEMP TABLE fault_r (a int)');
      await c.query({ name: 'fault_s2', text: 'SELECT * FROM fault_r' });
      await c.query('ALTER TABLE fault_r ADD COLUMN b int');
      const e = await failure(() => c.query({ name: 'fault_s2', text: 'SELECT * FROM fault_r' }));
      expect(e).toMatchObject({ code: '0A000', routine: 'RevalidateCachedQuery' });
      expect(faultOf(e)?.name).toBe('unusable-prepared');
    } finally {
      await c.end();
    }
  });

  it('a serialization failure, and a terminated backend', async () => {
    const [a, b] = [await client(), await client()];
    try {
      await a.query('CREATE TABLE fault_s (id int PRIMARY KEY, n int)');
      await a.query('INSERT INTO fault_s VALUES (1, 0)');
      await a.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await a.query('SELECT n FROM fault_s WHERE id = 1');
      await b.query('UPDATE fault_s SET n = 1 WHERE id = 1');
      const e = await failure(() => a.query('UPDATE fault_s SET n = 2 WHERE id = 1'));
      expect(faultOf(e)).toMatchObject({ name: 'transaction-rolled-back', retry: 'transaction' });
      await a.query('ROLLBACK');
      const pid = (await a.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      await b.query('SELECT pg_terminate_backend($1)', [pid]);
      expect(faultOf(await failure(() => a.query('SELECT 1')))).toMatchObject({ name: 'connection-lost', retry: 'statement-if-read' });
    } finally {
      await a.end().catch(() => {});
      await b.end();
    }
  });
});
