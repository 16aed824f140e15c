import { promises as fs, unlinkSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { createPgConfig } from '@electric-sql/pglite/node-postgres';
import {
  BinaryOperationNode,
  FunctionNode,
  type Generated,
  type GeneratedAlways,
  type Insertable,
  Kysely,
  type KyselyPlugin,
  type LogEvent,
  Migrator,
  OperationNodeTransformer,
  OperatorNode,
  PostgresDialect,
  type PostgresPool,
  type PostgresPoolClient,
  PrimitiveValueListNode,
  type Selectable,
  ValueNode,
} from 'kysely';
import pg from 'pg';
import { migrations } from '../../db/migrations.js';
import { expectedErrorOf, isConnectionLost } from '../core/errors.js';

// int8 (count(*), bigint ids) arrive as strings from both databases; ids stay strings, counts are
// converted where read.

export type DataTypeName = 'Boolean' | 'String' | 'Integer' | 'Decimal' | 'DateTime' | 'Date' | 'Time' | 'UserIdentifier';

export interface SigningKeyTable {
  kid: string;
  alg: string;
  private_jwk: unknown;
  public_jwk: unknown;
  created_at: Generated<Date>;
  retired_at: Date | null;
}

export interface ServiceSecretTable {
  name: string;
  value: string;
}

export interface TenantTable {
  id: Generated<string>;
  key: string;
  name: string;
  matching_field_keys: string[];
  external_id_field_key: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
  data_version: Generated<string>;
  /** Bumped by every tenant apply: the key of cached clients and subject configuration. */
  config_version: Generated<string>;
}

export interface ClientTable {
  tenant_id: string;
  client_id: string;
  secret_hash: string;
  scopes: string[];
  permissions: string[];
}

export interface SubjectFieldTable {
  tenant_id: string;
  key: string;
  name: string;
  data_type: DataTypeName;
  type_label: string;
  required: boolean;
  is_array: boolean;
  position: number;
}

export interface StructureTypeTable {
  tenant_id: string;
  key: string;
  name: string;
  subject_assignable: boolean;
}

export interface StructureTypeFieldTable {
  tenant_id: string;
  structure_type_key: string;
  key: string;
  name: string;
  data_type: DataTypeName;
  type_label: string;
  required: boolean;
  position: number;
}

export interface StructuralEntityTable {
  tenant_id: string;
  id: GeneratedAlways<string>;
  key: string;
  display_name: string;
  structure_type_key: string;
  parent_key: string | null;
  path: string[];
  depth: GeneratedAlways<number>;
  /** field key → canonical typed JSON value (see custom-fields.ts). */
  custom_values: Record<string, unknown>;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

export interface UserGroupTable {
  tenant_id: string;
  key: string;
  name: string;
}

export interface UserGroupStructuralEntityTable {
  tenant_id: string;
  group_key: string;
  structural_entity_id: string;
}

export interface AppUserTable {
  tenant_id: string;
  id: string;
  display_name: string;
  email: string | null;
  active: boolean;
}

export interface AppUserGroupTable {
  tenant_id: string;
  user_id: string;
  group_key: string;
}

export interface PortalConfigTable {
  tenant_id: string;
  self_access_enabled: boolean;
  third_party_access_enabled: boolean;
  email_field_key: string | null;
  display_name_field_key: string | null;
  invitation_field_keys: string[];
  /** D9 invitation mail template (null: the bundled default); see domains/portal/invitation-mail.ts. */
  invitation_subject: string | null;
  invitation_text: string | null;
  invitation_html: string | null;
}

export type InviteMethod = 'SelfAccess' | 'ThirdParty';

export interface PortalUserTable {
  tenant_id: string;
  id: Generated<string>;
  subject_id: string;
  email: string;
  /** lower(email): what identifies (per subject) and orders portal users. */
  email_key: GeneratedAlways<string>;
  display_name: string;
  invite_method: InviteMethod;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

export type MailStatus = 'pending' | 'sent' | 'dead' | 'cancelled';

export interface MailOutboxTable {
  tenant_id: string;
  id: string;
  portal_user_id: string | null;
  recipient: string;
  /** `<id@domain>`, set by the first claim (docs/portal-outbox.md). */
  message_id: string | null;
  subject: string;
  text_body: string;
  html_body: string;
  status: Generated<MailStatus>;
  attempts: Generated<number>;
  next_attempt_at: Generated<Date>;
  claimed_until: Date | null;
  claim_token: string | null;
  last_error: string | null;
  last_attempt_at: Date | null;
  created_at: Generated<Date>;
  sent_at: Date | null;
}

export interface DataSourceTable {
  tenant_id: string;
  key: string;
  name: string;
  get_data_points_url: string;
  token_url: string | null;
  client_id: string | null;
  client_secret_enc: string | null;
  scope: string | null;
  subject_identifier: string;
  inbound_client_ids: string[];
}

export interface DataExtractTable {
  tenant_id: string;
  key: string;
  name: string;
  data_source_key: string;
  options: unknown;
  cache_epoch: Generated<string>;
}

export interface SubjectTable {
  tenant_id: string;
  id: Generated<string>;
  external_id: string | null;
  matching_key: string;
  /** field key → canonical value, or array of them for an array field (see custom-fields.ts). */
  values: Record<string, unknown>;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

export interface SubjectValueTable {
  tenant_id: string;
  subject_id: string;
  field_key: string;
  ordinal: number;
  value_text: string | null;
  sort_key: string | null;
  searchable: Generated<boolean>;
  /** The subject's ExternalId sort key, on each of its rows (migration 0007: filter pages in that order). */
  list_key: string | null;
}

export interface SubjectLocationTable {
  tenant_id: string;
  subject_id: string;
  structural_entity_id: string;
  created_at: Generated<Date>;
}

export interface DataCacheTable {
  tenant_id: string;
  extract_key: string;
  subject_id: string;
  subject_identifier: string | null;
  /** The provider's data points for the subject (see data-points.ts); null: nothing fetched yet. */
  points: unknown[] | null;
  fetched_at: Date | null;
  stale: Generated<boolean>;
  version: Generated<string>;
  removed_ids: Generated<string[]>;
  refetch_claimed_until: Date | null;
}

/** The one Kysely schema of the service. */
export interface Database {
  signing_key: SigningKeyTable;
  service_secret: ServiceSecretTable;
  tenant: TenantTable;
  client: ClientTable;
  subject_field: SubjectFieldTable;
  structure_type: StructureTypeTable;
  structure_type_field: StructureTypeFieldTable;
  structural_entity: StructuralEntityTable;
  user_group: UserGroupTable;
  user_group_structural_entity: UserGroupStructuralEntityTable;
  app_user: AppUserTable;
  app_user_group: AppUserGroupTable;
  portal_config: PortalConfigTable;
  data_source: DataSourceTable;
  data_extract: DataExtractTable;
  subject: SubjectTable;
  subject_value: SubjectValueTable;
  subject_location: SubjectLocationTable;
  data_cache: DataCacheTable;
  portal_user: PortalUserTable;
  mail_outbox: MailOutboxTable;
}

export type StructureType = Selectable<StructureTypeTable>;
export type StructuralEntityRow = Selectable<StructuralEntityTable>;
export type SigningKey = Selectable<SigningKeyTable>;
export type SubjectRow = Selectable<SubjectTable>;
export type NewSubjectValue = Insertable<SubjectValueTable>;
export type AppUserRow = Selectable<AppUserTable>;
export type DataSourceRow = Selectable<DataSourceTable>;
export type DataExtractRow = Selectable<DataExtractTable>;
export type DataCacheRow = Selectable<DataCacheTable>;
export type PortalConfigRow = Selectable<PortalConfigTable>;
export type PortalUserRow = Selectable<PortalUserTable>;
export type MailOutboxRow = Selectable<MailOutboxTable>;

export type Db = Kysely<Database>;

/** What a LISTEN connection reports: each payload, and when it (re)connects or drops. */
export interface NotificationHandlers {
  message(payload: string): void;
  connected(): void;
  disconnected(): void;
}

/** Listens on a channel until closed. */
export type Listen = (channel: string, handlers: NotificationHandlers) => Promise<{ close(): Promise<void> }>;

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
  /** PostgreSQL: how long a checkout waits for a pool connection, or a new connection to open (then 503). */
  connectTimeoutMs?: number | undefined;
  /** A pooled connection failed (server restart, terminated backend), idle or in use; the pool replaces it. */
  onPoolError?: (error: Error) => void;
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
 * thousands of keys, or a large loader batch, must not fail at the protocol (issue 9). Every query of the
 * service passes through here, so no call site can forget it.
 */
class ArrayParameterTransformer extends OperationNodeTransformer {
  protected override transformBinaryOperation(node: BinaryOperationNode): BinaryOperationNode {
    const op = OperatorNode.is(node.operator) ? node.operator.operator : undefined;
    if ((op === 'in' || op === 'not in') && PrimitiveValueListNode.is(node.rightOperand)) {
      return BinaryOperationNode.create(
        this.transformNode(node.leftOperand),
        OperatorNode.create(op === 'in' ? '=' : '<>'),
        FunctionNode.create(op === 'in' ? 'any' : 'all', [ValueNode.create([...node.rightOperand.values])]),
      );
    }
    return super.transformBinaryOperation(node);
  }
}

const arrayParameters: KyselyPlugin = {
  transformQuery: (args) => new ArrayParameterTransformer().transformNode(args.node),
  transformResult: async (args) => args.result,
};


// A statement that only reads: a plain SELECT, not locking rows, not calling functions that write.
const READ_ONLY = /^\s*select\b/i;
const WRITES = /\b(insert|update|delete|merge|for\s+(no\s+key\s+)?update|for\s+(key\s+)?share|nextval|setval|pg_notify|pg_advisory)/i;
const TRANSACTION_START = /^\s*(begin|start\s+transaction)\b/i;
const TRANSACTION_END = /^\s*(commit|rollback|end|abort)\s*$/i;

/**
 * The pool as Kysely sees it (issue 15): driver errors leave as the service's expected errors (an
 * unavailable database is a ServiceUnavailableError, 503; see errors.ts), and a read-only statement
 * outside a transaction whose connection died under it (a terminated backend, a restart) runs once more
 * on a fresh connection. A write, or anything inside a transaction, is never re-run: it may have committed.
 */
function resilient(pool: pg.Pool): PostgresPool {
  // Kysely keys its connections by the client object: one stable wrapper per pg client.
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const fail = (e: unknown): never => {
    throw expectedErrorOf(e) ?? e;
  };
  const wrap = (client: pg.PoolClient): PostgresPoolClient => {
    let inTransaction = false;
    return {
      // Kysely passes a cursor only for streamed queries, which the service does not use.
      query: (async (text: string, parameters: readonly unknown[]) => {
        if (TRANSACTION_START.test(text)) inTransaction = true;
        else if (TRANSACTION_END.test(text)) inTransaction = false;
        try {
          return await client.query(text, parameters as unknown[]);
        } catch (e) {
          if (inTransaction || !isConnectionLost(e) || !READ_ONLY.test(text) || WRITES.test(text)) return fail(e);
          const fresh = await pool.connect().catch(fail);
          try {
            return await fresh.query(text, parameters as unknown[]);
          } catch (again) {
            return fail(again);
          } finally {
            fresh.release();
          }
        }
      }) as unknown as PostgresPoolClient['query'],
      release: () => client.release(),
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
  };
}

/**
 * Opens PostgreSQL when a URL is given, else PGlite in `dataDir` through its node-postgres bridge, so one
 * PostgresDialect (and the same SQL) serves both.
 */
export async function openDatabase(opts: DatabaseOptions): Promise<DatabaseHandle> {
  if (opts.databaseUrl) {
    const timeout = opts.statementTimeoutMs ? ` -c statement_timeout=${Math.floor(opts.statementTimeoutMs)}` : '';
    const pool = new pg.Pool({
      connectionString: opts.databaseUrl,
      // Named, so operators (and the fault tests) can find the service's sessions in pg_stat_activity.
      application_name: 'ssdi',
      max: opts.poolSize ?? 10,
      options: `-c ${SEARCH_THRESHOLD}${timeout}`,
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
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: resilient(pool) }), plugins: [arrayParameters], ...logOption(opts) });
    const url = opts.databaseUrl;
    return { db, kind: 'postgres', listen: (channel, handlers) => listenPostgres(url, channel, handlers), poolStats: () => statsOf(pool), close: () => db.destroy() };
  }
  await fs.mkdir(opts.dataDir, { recursive: true });
  const release = await lockDataDir(opts.dataDir);
  try {
    const pglite = await PGlite.create(opts.dataDir, { extensions: { pg_trgm } });
    const handle = await wrapPglite(pglite, opts);
    return { ...handle, close: () => handle.close().finally(release) };
  } catch (e) {
    await release();
    throw e;
  }
}

/** Raised when another live process holds the embedded database. */
export class DataDirLockedError extends Error {}

/**
 * The embedded database is one process's (PGlite is single-user): a lock file in DATA_DIR holds the
 * owner's PID, taken at open and removed at close or exit. A lock of a process that no longer runs is
 * stale and taken over.
 */
async function lockDataDir(dir: string): Promise<() => Promise<void>> {
  const file = `${dir}/.ssdi.lock`;
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
const SEARCH_THRESHOLD = 'pg_trgm.word_similarity_threshold=0.3';

/** Wraps an open PGlite instance (tests pass clones of a migrated template). */
export async function wrapPglite(pglite: PGlite, opts: Pick<DatabaseOptions, 'onQuery'> = {}): Promise<DatabaseHandle> {
  // One connection for the life of the instance: a session setting holds for every query.
  await pglite.exec(`SET ${SEARCH_THRESHOLD.replace('=', ' = ')}`);
  const pool = new pg.Pool(createPgConfig(pglite) as pg.PoolConfig);
  // The plain pool: one in-process connection cannot be lost, and wrapping the bridge's pool (even with a
  // pass-through) broke its protocol emulation under concurrency ("unexpected parseComplete" in the
  // two-instance outbox test; cause not found). Its errors are mapped where answers are made (expectedErrorOf).
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }), plugins: [arrayParameters], ...logOption(opts) });
  return {
    db,
    kind: 'pglite',
    poolStats: () => statsOf(pool),
    // PGlite delivers NOTIFY (sent through the bridge like any statement) after the commit, in-process.
    listen: async (channel, handlers) => {
      const unlisten = await pglite.listen(channel, (payload) => handlers.message(payload));
      handlers.connected();
      return { close: () => unlisten() };
    },
    close: async () => {
      await db.destroy();
      await pglite.close();
    },
  };
}

/**
 * LISTEN on a connection of its own (a pooled one would be handed to other queries). After a drop it
 * reconnects with backoff; `disconnected` tells the caller that notifications may have been missed.
 */
async function listenPostgres(url: string, channel: string, h: NotificationHandlers): Promise<{ close(): Promise<void> }> {
  let current: pg.Client | undefined;
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  const connect = async () => {
    // keepAlive and a periodic query detect a connection that died silently (an idle timeout on the
    // way): an unnoticed dead listener would leave the in-process cache on without invalidations.
    const client = new pg.Client({ connectionString: url, application_name: 'ssdi-listener', keepAlive: true, query_timeout: LISTENER_PROBE_TIMEOUT_MS });
    client.on('notification', (n) => {
      if (n.channel === channel) h.message(n.payload ?? '');
    });
    const failed = () => {
      client.removeAllListeners();
      client.on('error', () => {});
      client.end().catch(() => {});
    };
    try {
      await client.connect();
      await client.query(`LISTEN ${client.escapeIdentifier(channel)}`);
    } catch (e) {
      failed();
      throw e;
    }
    if (closed) return void client.end().catch(() => {});
    // Handlers for a drop only once connected, so a failed attempt schedules exactly one retry.
    let probe: NodeJS.Timeout | undefined;
    const drop = () => {
      if (current !== client) return;
      current = undefined;
      clearInterval(probe);
      failed();
      h.disconnected();
      if (!closed) retry(250);
    };
    client.on('error', drop);
    client.on('end', drop);
    probe = setInterval(() => void client.query('SELECT 1').catch(drop), LISTENER_PROBE_MS);
    probe.unref();
    current = client;
    h.connected();
  };
  const retry = (delay: number) => {
    timer = setTimeout(() => connect().catch(() => !closed && retry(Math.min(delay * 2, 5000))), delay);
    timer.unref();
  };
  // A database that is away now (it may have dropped right after start-up's migrations) is waited for
  // like a dropped connection: the caller works without notifications until `connected`.
  await connect().catch(() => retry(250));
  return {
    close: async () => {
      closed = true;
      clearTimeout(timer);
      const c = current;
      current = undefined;
      if (c) {
        c.removeAllListeners();
        c.on('error', () => {});
        await c.end().catch(() => {});
      }
    },
  };
}

const LISTENER_PROBE_MS = 15_000;
const LISTENER_PROBE_TIMEOUT_MS = 5_000;

function statsOf(pool: pg.Pool) {
  return { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount };
}

/** Runs pending migrations; throws naming the failing migration, with the driver's error as `cause`. */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error) {
    const why = error instanceof Error ? error.message : String(error);
    // No failed migration: the migrator could not start (no connection, the migration lock).
    throw new Error(failed ? `Migration ${failed.migrationName} failed: ${why}` : `Migrating the database failed before any migration ran: ${why}`, { cause: error });
  }
  return (results ?? []).map((r) => r.migrationName);
}

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
