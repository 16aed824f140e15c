import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { SEARCH_SIMILARITY } from './database.js';
import type { Database, Db } from './tables.js';

/**
 * `fn` over one direct connection to PostgreSQL (not through the pooler), closed after it: start-up's
 * session work behind a pooler in transaction mode, which must not be spread over server connections.
 */
export async function withDirectDatabase<T>(url: string, connectTimeoutMs: number, fn: (db: Db) => Promise<T>): Promise<T> {
  const pool = new pg.Pool({ connectionString: url, application_name: 'ssdi-setup', max: 1, connectionTimeoutMillis: connectTimeoutMs });
  // As the service's pool (database.ts): a checked-out client's error event must not end the process.
  pool.on('connect', (client) => client.on('error', () => {}));
  pool.on('error', () => {});
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  try {
    return await fn(db);
  } finally {
    await db.destroy();
  }
}

/**
 * Refuses a DATABASE_LISTEN_URL that reaches another database than DATABASE_URL's pool: migrations and the
 * role's settings would go to the one, the service's statements to the other. Compared: the database's name
 * and oid, and the server's start time (a standby or another server differs). Through the pooler in a
 * transaction left open: PgBouncer closes a server connection its client left inside a transaction
 * ("unclean server"), so the one opened here, before the role's settings, is not handed to the pool (P148).
 * Throws (the driver's error as `cause`) when either cannot be reached.
 */
export async function checkSameDatabase(opts: { direct: Db; pooledUrl: string; connectTimeoutMs: number }): Promise<void> {
  const identity = `SELECT current_database() AS name, (SELECT oid::text FROM pg_database WHERE datname = current_database()) AS oid,
    pg_postmaster_start_time()::text AS started`;
  type Identity = { name: string; oid: string; started: string };
  const direct = (await sql<Identity>`${sql.raw(identity)}`.execute(opts.direct).catch(wrap('over DATABASE_LISTEN_URL'))).rows[0]!;
  const client = new pg.Client({
    connectionString: opts.pooledUrl,
    application_name: 'ssdi-setup',
    connectionTimeoutMillis: opts.connectTimeoutMs,
  });
  client.on('error', () => {});
  let pooled: Identity;
  try {
    await client.connect();
    await client.query('BEGIN');
    pooled = (await client.query<Identity>(identity)).rows[0]!;
  } catch (e) {
    return wrap('through DATABASE_URL')(e);
  } finally {
    await client.end().catch(() => {});
  }
  if (pooled.name !== direct.name || pooled.oid !== direct.oid || pooled.started !== direct.started)
    throw new Error(
      `DATABASE_LISTEN_URL reaches database ${direct.name} (oid ${direct.oid}) of a server started at ${direct.started}, ` +
        `DATABASE_URL reaches ${pooled.name} (oid ${pooled.oid}) of a server started at ${pooled.started}: ` +
        `both must reach the same database of the primary (DATABASE_POOLER=transaction).`,
    );
}

function wrap(how: string) {
  return (e: unknown): never => {
    throw new Error(`Checking the database ${how} failed: ${(e as Error).message}`, { cause: e });
  };
}

/** pg_advisory_xact_lock's key for settleRoleSettings: one instance at a time sets the role's settings. */
const ROLE_SETTINGS_LOCK = 0x55d1_0148;

class Refused extends Error {}

/** The outcome of settleRoleSettings: what the operator must still do, if anything. */
export type RoleSettingsOutcome = { ok: true; altered: boolean } | { ok: false; warning: string };

/**
 * Behind a pooler in transaction mode (P148) a server connection is the next client's after each
 * transaction, and PgBouncer refuses startup options: the two session settings every statement needs
 * (D7's search threshold, the statement time limit) become the role's defaults in this database
 * (`ALTER ROLE CURRENT_USER IN DATABASE … SET`), which PostgreSQL applies to every session it opens
 * for the role afterwards, PgBouncer's included. Set over `direct` (not through the pooler) once it is
 * migrated (pg_trgm), only when they differ and under a transaction advisory lock, so instances starting
 * together write the catalog once; then a statement through the pool checks what a server connection sees. A server connection PgBouncer opened before the settings
 * keeps its old ones until it is closed (server_lifetime), and a role that may not alter itself cannot
 * set them: both are warnings naming what the operator must do, not start-up failures.
 * Throws (the driver's error as `cause`) when the database cannot be reached.
 */
export async function settleRoleSettings(opts: { direct: Db; pooled: Db; statementTimeoutMs: number }): Promise<RoleSettingsOutcome> {
  const { direct } = opts;
  const wanted = { statement_timeout: Math.floor(opts.statementTimeoutMs), 'pg_trgm.word_similarity_threshold': SEARCH_SIMILARITY };
  let altered = false;
  let refused: string | undefined;
  try {
    await direct.transaction().execute(async (trx) => {
      // Instances starting together would each find the settings missing and insert the same row of
      // pg_db_role_setting (23505, or XX000 "tuple concurrently updated"): one at a time, each reading what
      // the one before it set.
      await sql`SELECT pg_advisory_xact_lock(${ROLE_SETTINGS_LOCK})`.execute(trx);
      const { rows } = await sql<{ database: string; settings: string[] | null }>`
        SELECT current_database() AS database,
          (SELECT setconfig FROM pg_db_role_setting
            WHERE setrole = (SELECT oid FROM pg_roles WHERE rolname = current_user)
              AND setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())) AS settings`.execute(trx);
      const { database, settings } = rows[0]!;
      const missing = Object.entries(wanted).filter(([name, value]) => !settings?.includes(`${name}=${value}`));
      if (missing.length === 0) return;
      try {
        // Loaded first (pg_trgm is migrated), so the threshold is a known setting, checked as any other, not a placeholder.
        await sql`SELECT word_similarity('', '')`.execute(trx);
        for (const [name, value] of missing) {
          await sql`ALTER ROLE CURRENT_USER IN DATABASE ${sql.id(database)} SET ${sql.id(...name.split('.'))} = ${sql.lit(value)}`.execute(
            trx,
          );
        }
        altered = true;
      } catch (e) {
        if ((e as { code?: string }).code !== '42501') throw e;
        // Set some other way (an administrator's ALTER ROLE, PgBouncer's connect_query) is as good: the check below tells.
        const set = missing.map(([name, value]) => `${name} = ${value}`).join(', ');
        refused =
          `this role may not set its own defaults (${(e as Error).message}): have an administrator run ` +
          `ALTER ROLE <role> IN DATABASE ${database} SET … for ${set}, or set them in PgBouncer's connect_query`;
        // The transaction is aborted: rolled back, not committed.
        throw new Refused();
      }
    });
  } catch (e) {
    if (!(e instanceof Refused)) throw new Error(`Setting the role's session defaults failed: ${(e as Error).message}`, { cause: e });
  }
  const seen = await sql<{ timeout: string; threshold: string | null }>`
    SELECT (SELECT setting FROM pg_settings WHERE name = 'statement_timeout') AS timeout,
      current_setting('pg_trgm.word_similarity_threshold', true) AS threshold`
    .execute(opts.pooled)
    .catch((e: unknown) => {
      throw new Error(`Checking the session settings through the pooler failed: ${(e as Error).message}`, { cause: e });
    });
  const { timeout, threshold } = seen.rows[0]!;
  if (Number(timeout) !== wanted.statement_timeout || Number(threshold) !== SEARCH_SIMILARITY) {
    return {
      ok: false,
      warning:
        `DATABASE_POOLER=transaction: a pooled server connection runs with statement_timeout = ${timeout} ms and ` +
        `pg_trgm.word_similarity_threshold = ${threshold ?? 'unset'}, not ${wanted.statement_timeout} and ${SEARCH_SIMILARITY}` +
        (refused
          ? `: ${refused}`
          : `: it was opened before the role's defaults were set; run RECONNECT on PgBouncer's console (or wait server_lifetime)`) +
        `. Until then searches miss matches (D7) and statements are not time-limited as configured.`,
    };
  }
  return { ok: true, altered };
}
