import { promises as fs, unlinkSync } from 'node:fs';
import type { PGlite } from '@electric-sql/pglite';
import {
  type BinaryOperationNode,
  type DatabaseConnection,
  Kysely,
  type LogEvent,
  OperatorNode,
  PGliteAdapter,
  PGliteDialect,
  type PGliteDialectConfig,
  PGliteDriver,
  PostgresDialect,
  type PostgresPool,
  type PostgresPoolClient,
  PostgresQueryCompiler,
  PrimitiveValueListNode,
  type QueryCompiler,
  sql,
} from 'kysely';
import pg from 'pg';
import { prepareValue } from 'pg/lib/utils.js';
import { expectedErrorOf, isDatabaseUnavailable, statementRerun } from './faults.js';
import { type Listen, listenPostgres } from './notifications.js';
import { openFromPgliteTemplate } from './pglite-template.js';
import { statementName } from './prepared.js';
import { withStatementSpans } from './tracing.js';
import type { Database, Db } from './tables.js';

export interface DatabaseHandle {
  db: Db;
  kind: 'postgres' | 'pglite';
  /** LISTEN on a dedicated connection (PostgreSQL, reconnecting after a drop) or in-process (PGlite). */
  listen: Listen;
  /** Connections of the pool now (metrics). */
  poolStats(): { total: number; idle: number; waiting: number };
  /** Closes the pool (and the embedded database). */
  close(): Promise<void>;
}

export interface DatabaseOptions {
  databaseUrl?: string | undefined;
  dataDir: string;
  poolSize?: number;
  /** PostgreSQL: statements running longer are cancelled (SQLSTATE 57014); 0 or absent: no limit. */
  statementTimeoutMs?: number | undefined;
  /** PostgreSQL: run the statements marked by `namedStatement` as named, prepared ones (P71); default true. */
  preparedStatements?: boolean | undefined;
  /**
   * PostgreSQL: `transaction` when `databaseUrl` is a pooler in transaction mode: no named statements and
   * no startup options (the session settings are the role's: settleRoleSettings in pooler.ts).
   */
  pooler?: 'none' | 'transaction' | undefined;
  /** PostgreSQL: the direct connection LISTEN runs on; default `databaseUrl`. */
  listenUrl?: string | undefined;
  /** PostgreSQL: how long a checkout waits for a pool connection, or a new connection to open (then 503). */
  connectTimeoutMs?: number | undefined;
  /**
   * PostgreSQL: the client's own bound on a statement (pg's query_timeout): past it the statement fails
   * as an unavailable database and its connection is discarded, also when the server answers nothing
   * (statement_timeout is the server's, and a hung server never applies it). Absent: none.
   */
  queryTimeoutMs?: number | undefined;
  /** PostgreSQL: the sessions' application_name (pg_stat_activity); default 'ssdi'. */
  applicationName?: string | undefined;
  /** A pooled connection failed (server restart, terminated backend), idle or in use; the pool replaces it. */
  onPoolError?: (error: Error) => void;
  /** PGlite: the directory of templates a new DATA_DIR starts from (P133); default dist/pglite/. */
  pgliteTemplates?: string | undefined;
  /** Something went wrong that the service works around (an unusable template). */
  onWarning?: (message: string) => void;
  /** PGlite: a new DATA_DIR was started from this template file. */
  onTemplateLoaded?: (file: string) => void;
  /** Called with every executed statement (debugging, EXPLAIN evidence in docs and benches). */
  onQuery?: (sql: string, parameters: readonly unknown[], ms: number) => void;
}

function logOption(opts: Pick<DatabaseOptions, 'onQuery'>) {
  const on = opts.onQuery;
  return on ? { log: (e: LogEvent) => on(e.query.sql, e.query.parameters, e.queryDurationMillis) } : {};
}

/**
 * Binds `x IN (a, b, …)` over a list of values as `x = ANY($1)` with one array parameter (`NOT IN` as
 * `<> ALL`). PostgreSQL's wire protocol caps a statement at 65,535 parameters: a request naming tens of
 * thousands of keys, or a large loader batch, must not fail at the protocol (P47). Every query of the
 * service is compiled here, so no call site can forget it. Done while compiling, not by a plugin: a
 * plugin's transformer copies every query's whole tree first (measured: 3.5% of a list request's CPU).
 */
export class ServiceQueryCompiler extends PostgresQueryCompiler {
  protected override visitBinaryOperation(node: BinaryOperationNode): void {
    const op = OperatorNode.is(node.operator) ? node.operator.operator : undefined;
    if ((op === 'in' || op === 'not in') && PrimitiveValueListNode.is(node.rightOperand)) {
      this.visitNode(node.leftOperand);
      this.append(op === 'in' ? ' = any(' : ' <> all(');
      this.appendValue([...node.rightOperand.values]);
      this.append(')');
      return;
    }
    super.visitBinaryOperation(node);
  }
}

/** PostgreSQL with the service's compiler. */
class ServiceDialect extends PostgresDialect {
  override createQueryCompiler(): QueryCompiler {
    return new ServiceQueryCompiler();
  }
}

/** Kysely does not export the PGlite driver's connection class. */
type PGliteConnection = Parameters<PGliteDriver['beginTransaction']>[0];

/**
 * PGlite's one connection, to one statement or transaction at a time in arrival order. Kysely's own lock
 * for a single-connection dialect is off (ServicePGliteDialect): it counts no waiters, which the pool
 * metrics report, and wakes every waiter at each release.
 *
 * PGlite executes a statement synchronously on this thread, and the connection passes to the next
 * waiting statement in a microtask; a response's end admits the tenant's next request in a microtask too.
 * So a backlog of one tenant's searches ran back to back in one turn of the event loop (300 ms under 50
 * concurrent searches), and a request that arrived meanwhile was not even read until it was done
 * (P67). Once the statements that ended in this turn have held it TURN_BUDGET_MS, counted from when the
 * first of them got the connection, the event loop turns before the connection passes on (and, inside
 * a transaction, before its next statement: turnBetweenStatements): requests are read, and queue their
 * statements, in between. Cheap statements in a row (a request's principal, then its page) stay in one
 * turn: a turn after each one let the other tenant's work in between them, and doubled B's p99 under
 * 900-subject pages (P67). Time the loop spent idle, or in turns without a statement, does not count.
 */
class ServicePGliteDriver extends PGliteDriver {
  busy = false;
  readonly waiting: (() => void)[] = [];
  /** When the statement (or transaction) holding the connection got it. */
  #acquiredAt = 0;
  /** Set while statements end in this turn; cleared at its end (the check phase, after any I/O callbacks). */
  #turnStarted: number | undefined;
  /** A transaction holds the connection: its statements turn the loop between them (turnBetweenStatements). */
  #inTransaction = false;
  #turning = false;

  override async acquireConnection() {
    if (this.busy) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.busy = true;
    this.#acquiredAt = performance.now();
    return super.acquireConnection();
  }

  override async releaseConnection() {
    await this.turnIfDue();
    const next = this.waiting.shift();
    if (next) next();
    else this.busy = false;
  }

  override async beginTransaction(connection: PGliteConnection) {
    this.#turnBetweenStatements(connection);
    await super.beginTransaction(connection);
    this.#inTransaction = true;
  }

  override async commitTransaction(connection: PGliteConnection) {
    this.#inTransaction = false;
    await super.commitTransaction(connection);
  }

  override async rollbackTransaction(connection: PGliteConnection) {
    this.#inTransaction = false;
    await super.rollbackTransaction(connection);
  }

  /**
   * A transaction holds the connection for all its statements, so the loop turns after each one, before
   * it returns: only the holder runs executeQuery. Done at the first transaction, when Kysely has wrapped
   * executeQuery with its logging: the wait is not counted in a statement's duration or span.
   */
  #turnBetweenStatements(connection: DatabaseConnection) {
    if (this.#turning) return;
    this.#turning = true;
    const execute = connection.executeQuery.bind(connection);
    connection.executeQuery = async <R>(...args: Parameters<DatabaseConnection['executeQuery']>) => {
      const result = await execute<R>(...args);
      if (this.#inTransaction) await this.turnIfDue();
      return result;
    };
  }

  /** Called as a statement ends, the connection still held: turns the event loop when the turn's budget is spent. */
  async turnIfDue(): Promise<void> {
    if (performance.now() - (this.#turnStarted ?? this.#startTurn(this.#acquiredAt)) >= TURN_BUDGET_MS) {
      await new Promise(setImmediate);
      // Resumed in a turn of its own: what runs from here on, the next statement included, counts.
      this.#startTurn(performance.now());
    }
  }

  #startTurn(at: number): number {
    setImmediate(() => {
      this.#turnStarted = undefined;
    });
    return (this.#turnStarted = at);
  }
}

/** PGlite with the service's compiler, its connection handed out by ServicePGliteDriver. */
class ServicePGliteDialect extends PGliteDialect {
  readonly driver: ServicePGliteDriver;

  constructor(config: PGliteDialectConfig) {
    super(config);
    this.driver = new ServicePGliteDriver(config);
  }

  override createDriver() {
    return this.driver;
  }

  override createAdapter() {
    return new (class extends PGliteAdapter {
      // Not true, but the only thing Kysely reads it for is its lock, which the driver's queue replaces.
      override get supportsMultipleConnections() {
        return true;
      }
    })();
  }

  override createQueryCompiler(): QueryCompiler {
    return new ServiceQueryCompiler();
  }
}

const TRANSACTION_START = /^\s*(begin|start\s+transaction)\b/i;
const TRANSACTION_END = /^\s*(commit|rollback|end|abort)\s*$/i;

/**
 * The pool as Kysely sees it (P50): driver errors leave as the service's expected errors (an
 * unavailable database is a ServiceUnavailableError, 503), and a failed statement runs again as its
 * fault's retry class says (faults.ts): a read-only statement outside a transaction whose connection died
 * under it (a terminated backend, a restart) once more on a fresh connection; a write, or anything inside
 * a transaction, never, as it may have committed. Outside a transaction the statements marked by
 * `namedStatement` run named (P71); one whose prepared form PostgreSQL refused before it ran runs once
 * more, unnamed, write or not, and its connection is replaced at its release.
 */
function resilient(pool: pg.Pool, prepared: boolean): PostgresPool {
  // Kysely keys its connections by the client object: one stable wrapper per pg client.
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const fail = (e: unknown): never => {
    throw expectedErrorOf(e) ?? e;
  };
  const wrap = (client: pg.PoolClient): PostgresPoolClient => {
    let inTransaction = false;
    // Why the connection is closed at its release: it holds a prepared statement that can no longer run,
    // or it failed (a pooler's refusal ends it a moment later: it must not go to the next waiter first).
    let discard: Error | undefined;
    return {
      // Kysely passes a cursor only for streamed queries, which the service does not use.
      query: (async (text: string, parameters: readonly unknown[]) => {
        if (TRANSACTION_START.test(text)) inTransaction = true;
        else if (TRANSACTION_END.test(text)) inTransaction = false;
        const values = parameters as unknown[];
        const name = prepared && !inTransaction ? statementName(text) : undefined;
        try {
          return await (name ? client.query({ name, text, values }) : client.query(text, values));
        } catch (e) {
          if (isDatabaseUnavailable(e)) discard = e as Error;
          const rerun = statementRerun(e, { text, named: Boolean(name), inTransaction });
          if (rerun === 'unnamed') {
            discard = new Error('a prepared statement of this connection is outdated');
            return await client.query(text, values).catch(fail);
          }
          if (rerun !== 'fresh-connection') return fail(e);
          const fresh = await pool.connect().catch(fail);
          let failed: Error | undefined;
          try {
            return await fresh.query(text, values);
          } catch (again) {
            if (isDatabaseUnavailable(again)) failed = again as Error;
            return fail(again);
          } finally {
            fresh.release(failed);
          }
        }
      }) as unknown as PostgresPoolClient['query'],
      release: () => client.release(discard),
    };
  };
  return {
    async connect() {
      const client = await pool.connect().catch(fail);
      let w = wrappers.get(client);
      if (!w) wrappers.set(client, (w = wrap(client)));
      return w;
    },
    end: () => pool.end(),
    options: pool.options,
  };
}

/**
 * Opens PostgreSQL when a URL is given, else PGlite in `dataDir`: one query compiler (and the same SQL)
 * serves both.
 */
export async function openDatabase(opts: DatabaseOptions): Promise<DatabaseHandle> {
  if (opts.databaseUrl) {
    const timeout = opts.statementTimeoutMs ? ` -c statement_timeout=${Math.floor(opts.statementTimeoutMs)}` : '';
    // PgBouncer refuses startup options, and a session's prepared statements are not the next transaction's.
    const pooled = opts.pooler === 'transaction';
    const pool = new pg.Pool({
      connectionString: opts.databaseUrl,
      // Named, so operators (and the fault tests) can find the service's sessions in pg_stat_activity.
      application_name: opts.applicationName ?? 'ssdi',
      max: opts.poolSize ?? 10,
      ...(opts.queryTimeoutMs ? { query_timeout: opts.queryTimeoutMs } : {}),
      ...(pooled ? {} : { options: `-c ${SEARCH_THRESHOLD}${timeout}` }),
      // Without a bound, a checkout waits forever for a pool that cannot connect: the request must fail (503).
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 5_000,
      keepAlive: true,
    });
    // pg-pool listens for errors on idle clients only and removes its listener while a client is checked
    // out (brianc/node-postgres#2762): a backend terminated under a request would be an unhandled 'error'
    // event that ends the process. Every client gets a listener of its own for its whole life; the query
    // in flight fails on its own, and pg-pool drops the dead client when it is released.
    pool.on('connect', (client) => client.on('error', () => {}));
    pool.on('error', (e) => opts.onPoolError?.(e));
    const db = new Kysely<Database>({
      dialect: new ServiceDialect({ pool: resilient(pool, !pooled && (opts.preparedStatements ?? true)) }),
      ...logOption(opts),
    });
    const url = opts.listenUrl ?? opts.databaseUrl;
    return {
      db,
      kind: 'postgres',
      listen: (channel, handlers) => listenPostgres(url, channel, handlers),
      poolStats: () => statsOf(pool),
      close: () => db.destroy(),
    };
  }
  await fs.mkdir(opts.dataDir, { recursive: true });
  const release = await lockDataDir(opts.dataDir);
  try {
    // Imported only here: an instance on PostgreSQL does not carry the embedded database's code (P66).
    const [{ PGlite }, { pg_trgm }] = await Promise.all([import('@electric-sql/pglite'), import('@electric-sql/pglite/contrib/pg_trgm')]);
    const pglite = await openFromPgliteTemplate(
      opts.dataDir,
      () => PGlite.create(opts.dataDir, { extensions: { pg_trgm }, startParams: pgliteStartParams(PGlite.defaultStartParams) }),
      {
        templates: opts.pgliteTemplates,
        keep: [LOCK],
        warn: opts.onWarning ?? ((m) => process.emitWarning(m)),
        loaded: opts.onTemplateLoaded,
      },
    );
    const handle = await wrapPglite(pglite, opts);
    return { ...handle, close: () => handle.close().finally(release) };
  } catch (e) {
    await release();
    throw e;
  }
}

const LOCK = '.ssdi.lock';

/**
 * PGlite's PostgreSQL allocates its shared memory inside the WASM linear memory and touches all of it at
 * start, and that memory is never returned to the system: the default 128MB of shared_buffers alone is
 * most of an idle instance's resident memory. The data files are read through the operating system's
 * page cache, which does the caching a server's buffer pool would (P158).
 */
const PGLITE_SETTINGS = ['shared_buffers=16MB'];

/** PGlite's start parameters (`defaults`: PGlite.defaultStartParams) with the service's settings. */
export const pgliteStartParams = (defaults: readonly string[]) => [...defaults, ...PGLITE_SETTINGS.flatMap((s) => ['-c', s])];

/** Raised when another live process holds the embedded database. */
export class DataDirLockedError extends Error {}

/**
 * The embedded database is one process's (PGlite is single-user): a lock file in DATA_DIR holds the
 * owner's PID, taken at open and removed at close or exit. A lock of a process that no longer runs is
 * stale and taken over.
 */
async function lockDataDir(dir: string): Promise<() => Promise<void>> {
  const file = `${dir}/${LOCK}`;
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await fs.writeFile(file, `${process.pid}\n`, { flag: 'wx' });
      const onExit = () => {
        try {
          unlinkSync(file);
        } catch {
          // already gone
        }
      };
      process.once('exit', onExit);
      return async () => {
        process.removeListener('exit', onExit);
        await fs.rm(file, { force: true });
      };
    } catch (e) {
      if ((e as { code?: string }).code !== 'EEXIST') throw e;
      const pid = Number((await fs.readFile(file, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && isRunning(pid)) {
        throw new DataDirLockedError(
          `The embedded database in ${dir} is in use by process ${pid}: stop it, use another DATA_DIR, or use PostgreSQL (DATABASE_URL) for several processes.`,
        );
      }
      await fs.rm(file, { force: true }); // stale: its process is gone
    }
  }
  throw new DataDirLockedError(`Cannot take the lock ${file}.`);
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === 'EPERM';
  }
}

// D7 search: `term <% text` (word_similarity >= this) is what the trigram GIN index can answer.
export const SEARCH_SIMILARITY = 0.3;
const SEARCH_THRESHOLD = `pg_trgm.word_similarity_threshold=${SEARCH_SIMILARITY}`;

/** How long the embedded database's statements may hold one turn of the event loop (P67). */
export const TURN_BUDGET_MS = 4;

/** Wraps an open PGlite instance (tests pass clones of a migrated template). */
export async function wrapPglite(pglite: PGlite, opts: Pick<DatabaseOptions, 'onQuery'> = {}): Promise<DatabaseHandle> {
  // One connection for the life of the instance: a session setting holds for every query.
  await pglite.exec(`SET ${SEARCH_THRESHOLD.replace('=', ' = ')}`);
  // Rows and parameters as `pg` reads and binds them on PostgreSQL (int8 and numeric as strings, a
  // timestamp as a Date, a JS array as a PostgreSQL array, an object as JSON): the code sees one behaviour.
  const oids = [...Object.values(pg.types.builtins), ...Object.keys(pglite.parsers).map(Number).filter(Number.isInteger)];
  for (const oid of oids) {
    pglite.parsers[oid] = pg.types.getTypeParser(oid, 'text');
    // A Buffer (bytea) goes as bytes, as `pg` sends it: PGlite's bind takes one too.
    pglite.serializers[oid] = prepareValue as (value: unknown) => string;
  }
  // Kysely's PGlite dialect runs every statement through PGlite's own locks (a transaction holds the
  // instance), as pglite.listen's statements do: node-postgres's bridge sent each protocol message on its
  // own, outside them. One in-process connection cannot be lost: its errors are mapped where answers are
  // made (expectedErrorOf).
  const dialect = new ServicePGliteDialect({ pglite });
  const db = new Kysely<Database>({
    dialect,
    ...withStatementSpans(logOption(opts)),
  });
  return {
    db,
    kind: 'pglite',
    poolStats: () => ({ total: 1, idle: dialect.driver.busy ? 0 : 1, waiting: dialect.driver.waiting.length }),
    // PGlite delivers NOTIFY (sent like any statement) after the commit, in-process.
    listen: async (channel, handlers) => {
      const unlisten = await pglite.listen(channel, (payload) => handlers.message(payload));
      handlers.connected();
      return { close: () => unlisten() };
    },
    close: async () => {
      // Kysely closes the instance only if it ran a statement.
      await db.destroy();
      if (!pglite.closed) await pglite.close();
    },
  };
}

function statsOf(pool: pg.Pool) {
  return { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount };
}

/** One round trip to the database (readiness). */
export async function ping(db: Db): Promise<void> {
  await sql`select 1`.execute(db);
}
