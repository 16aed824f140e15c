import {
  CompiledQuery,
  type DatabaseConnection,
  type Driver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  type QueryResult,
  type TransactionSettings,
  sql,
} from 'kysely';
import type { Logger } from 'pino';
import { ServiceUnavailableError } from '../core/errors.js';
import { type DatabaseHandle, type DatabaseOptions, ServiceQueryCompiler, openDatabase } from './database.js';
import { faultOf, onlyReads } from './faults.js';
import type { Database, Db } from './tables.js';

export interface ReplicaOptions extends Omit<DatabaseOptions, 'databaseUrl' | 'dataDir'> {
  /** Streaming replicas (hot standbys) of the primary. */
  urls: readonly string[];
  /** A replica further behind is left out. */
  maxLagMs: number;
  /** How often the positions are read. */
  probeMs: number;
}

/** Where a read operation went, and why (db_reads_total). */
export type ReadReason =
  /** replica: it has replayed the tenant's read floor, within the lag bound. */
  | 'replayed'
  /** primary: every replica up and within the bound has not replayed the tenant's read floor yet. */
  | 'behind'
  /** primary: every replica up is further behind than the bound. */
  | 'lagging'
  /** primary: no replica is up. */
  | 'down'
  /** primary: a statement failed on a replica (unreachable, shutting down, a recovery conflict) and ran here. */
  | 'replica_failed';

interface Replica {
  /** host:port, for metrics and logs (never the URL's credentials). */
  name: string;
  handle: DatabaseHandle;
  /** What a read operation is handed: autocommit reads here, the rest on the primary (RoutedConnection). */
  db: Db;
  up: boolean;
  /** The replay position of the last good probe. */
  replayed: bigint;
  lagSeconds: number;
  probing: boolean;
}

/** A replica statement that failed for what the replica is, not for what the statement asked: it runs on the primary. */
function replicaFailed(e: unknown): boolean {
  const cause = e instanceof ServiceUnavailableError && e.cause !== undefined ? e.cause : e;
  const fault = faultOf(cause);
  // 40001/40P01: cancelled by a conflict with recovery; 25006: the statement wrote (read-only transaction).
  return fault?.answer === 'unavailable' || fault?.name === 'transaction-rolled-back' || (cause as { code?: unknown }).code === '25006';
}

/** A pg_lsn's text (`16/B374D848`) as a number. */
export function parseLsn(lsn: string): bigint {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

/**
 * The instance's streaming replicas (P151): a pool each, and a probe every `probeMs` that reads the
 * primary's WAL position and each replica's replay position (short time limits: a hung replica is down,
 * it does not stall the others). A replica's lag is the age of the oldest primary position it has not
 * replayed, from a short history of the primary's positions: 0 once it has replayed the latest one.
 * `reads(floor)` picks, for one read operation, a replica that is up, within `maxLagMs` and has replayed
 * `floor` (in turn across replicas), else the primary.
 */
export class ReadReplicas {
  readonly #primary: Db;
  readonly #opts: ReplicaOptions;
  readonly #logger: Logger | undefined;
  readonly #replicas: Replica[] = [];
  /** The primary's positions of the last probes, oldest first: enough to date a lag past maxLagMs. */
  readonly #history: { at: number; lsn: bigint }[] = [];
  readonly #reads = new Map<string, number>();
  #next = 0;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  private constructor(primary: Db, opts: ReplicaOptions, logger: Logger | undefined) {
    this.#primary = primary;
    this.#opts = opts;
    this.#logger = logger;
  }

  /** Opens a pool per replica and probes them once, so reads can go to them from the first request. */
  static async open(primary: Db, opts: ReplicaOptions, logger?: Logger): Promise<ReadReplicas> {
    const self = new ReadReplicas(primary, opts, logger);
    for (const url of opts.urls) {
      const u = new URL(url);
      const name = `${u.hostname}:${u.port || '5432'}`;
      const handle = await openDatabase({
        ...opts,
        databaseUrl: url,
        dataDir: '',
        onPoolError: (e) => logger?.warn({ replica: name, err: e.message }, 'replica connection failed; the pool replaces it'),
      });
      const replica: Replica = { name, handle, db: undefined as unknown as Db, up: false, replayed: 0n, lagSeconds: 0, probing: false };
      replica.db = self.#routed(replica);
      self.#replicas.push(replica);
    }
    await self.#probe();
    self.#schedule();
    return self;
  }

  get replicas() {
    return this.#replicas.map((r) => ({ name: r.name, up: r.up, lagSeconds: r.lagSeconds }));
  }

  get readCounts(): ReadonlyMap<string, number> {
    return this.#reads;
  }

  /** The database one read operation of a tenant whose read floor is `floor` reads from. */
  reads(floor: string | null | undefined): Db {
    const need = floor ? parseLsn(floor) : 0n;
    const n = this.#replicas.length;
    let reason: ReadReason = 'down';
    for (let i = 0; i < n; i++) {
      const r = this.#replicas[(this.#next + i) % n]!;
      if (!r.up) continue;
      if (r.lagSeconds * 1000 > this.#opts.maxLagMs) {
        if (reason === 'down') reason = 'lagging';
        continue;
      }
      if (r.replayed < need) {
        reason = 'behind';
        continue;
      }
      this.#next = (this.#next + i + 1) % n;
      this.#count('replica', 'replayed');
      return r.db;
    }
    this.#count('primary', reason);
    return this.#primary;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await Promise.all(this.#replicas.map((r) => r.handle.close()));
  }

  #count(target: 'primary' | 'replica', reason: ReadReason): void {
    const key = `${target}|${reason}`;
    this.#reads.set(key, (this.#reads.get(key) ?? 0) + 1);
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      void this.#probe().finally(() => this.#schedule());
    }, this.#opts.probeMs);
    this.#timer.unref();
  }

  /** Reads the positions. A failure of the primary's read keeps the replicas' last state. */
  async #probe(): Promise<void> {
    const limit = Math.max(4 * this.#opts.probeMs, 1000);
    let primaryAt: bigint;
    try {
      primaryAt = parseLsn((await within(position(this.#primary, 'pg_current_wal_lsn()'), limit))!);
    } catch {
      return;
    }
    const now = performance.now();
    this.#history.push({ at: now, lsn: primaryAt });
    // Kept past maxLag: a replica behind every kept position is dated at least that far back.
    const keep = now - this.#opts.maxLagMs - 4 * this.#opts.probeMs;
    while (this.#history.length > 1 && this.#history[0]!.at < keep) this.#history.shift();
    await Promise.all(
      this.#replicas.map(async (r) => {
        // One probe at a time: a statement still waiting on a hung replica keeps it down.
        if (r.probing) return this.#down(r, 'its probe has not answered');
        r.probing = true;
        const probe = position(r.handle.db, 'pg_last_wal_replay_lsn()');
        void probe.catch(() => {}).finally(() => (r.probing = false));
        try {
          const lsn = await within(probe, limit);
          // NULL: not in recovery (a promoted standby, or not a standby at all): not a replica of this primary.
          if (lsn === null) return this.#down(r, 'it is not a standby');
          r.replayed = parseLsn(lsn);
          r.lagSeconds = this.#lag(r.replayed, performance.now());
          if (!r.up) this.#logger?.info({ replica: r.name, lagSeconds: r.lagSeconds }, 'read replica up');
          r.up = true;
        } catch (e) {
          this.#down(r, (e as Error).message);
        }
      }),
    );
  }

  #lag(replayed: bigint, now: number): number {
    const h = this.#history;
    const i = h.findIndex((s) => s.lsn > replayed);
    if (i === -1) return 0;
    if (i > 0) return (now - h[i]!.at) / 1000;
    // Behind every kept position: at least as old as the history, and undatable while it is shorter than
    // the bound (just started): not served from until a probe dates it.
    const age = now - h[0]!.at;
    return age >= this.#opts.maxLagMs ? age / 1000 : Infinity;
  }

  #down(r: Replica, why: string): void {
    if (r.up) this.#logger?.warn({ replica: r.name, why }, 'read replica down: reads go to the primary until it answers a probe');
    r.up = false;
  }

  /**
   * The Kysely a read operation gets for replica `r`: it sends a statement that only reads, outside a
   * transaction, to the replica; a transaction or a statement that may write to the primary (the data
   * cache's fills, a mutation's work). A replica statement that fails because of the replica runs again on
   * the primary, and the replica is down until a probe answers: its loss costs no request.
   */
  #routed(r: Replica): Db {
    const primary = this.#primary;
    const onReplica = async <R>(q: CompiledQuery): Promise<QueryResult<R>> => {
      if (!r.up) return primary.executeQuery<R>(q);
      try {
        return await r.handle.db.executeQuery<R>(q);
      } catch (e) {
        if (!replicaFailed(e)) throw e;
        this.#down(r, (e as Error).message);
        this.#count('primary', 'replica_failed');
        return primary.executeQuery<R>(q);
      }
    };
    const driver: Driver = {
      init: async () => {},
      acquireConnection: async () => new RoutedConnection(primary, onReplica),
      beginTransaction: (c, settings) => (c as RoutedConnection).begin(settings),
      commitTransaction: (c) => (c as RoutedConnection).end('commit'),
      rollbackTransaction: (c) => (c as RoutedConnection).end('rollback'),
      releaseConnection: async (c) => (c as RoutedConnection).release(),
      destroy: async () => {},
    };
    return new Kysely<Database>({
      dialect: {
        createAdapter: () => new PostgresAdapter(),
        createDriver: () => driver,
        createIntrospector: (db) => new PostgresIntrospector(db),
        createQueryCompiler: () => new ServiceQueryCompiler(),
      },
    });
  }
}

async function position(db: Db, fn: 'pg_current_wal_lsn()' | 'pg_last_wal_replay_lsn()'): Promise<string | null> {
  return (await sql<{ lsn: string | null }>`select ${sql.raw(fn)}::text as lsn`.execute(db)).rows[0]!.lsn;
}

/** `p`, or a failure once `limitMs` passed. */
async function within<T>(p: Promise<T>, limitMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${limitMs} ms`)), limitMs);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A connection of a replica's Kysely: nothing is held until a statement needs it. A transaction holds a
 * primary connection from its BEGIN to its end.
 */
class RoutedConnection implements DatabaseConnection {
  #held: { connection: DatabaseConnection; release: () => void } | undefined;

  constructor(
    private readonly primary: Db,
    private readonly onReplica: <R>(q: CompiledQuery) => Promise<QueryResult<R>>,
  ) {}

  executeQuery<R>(q: CompiledQuery): Promise<QueryResult<R>> {
    if (this.#held) return this.#held.connection.executeQuery<R>(q);
    return onlyReads(q.sql) ? this.onReplica<R>(q) : this.primary.executeQuery<R>(q);
  }

  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('The service streams no query.');
  }

  async begin(settings: TransactionSettings): Promise<void> {
    this.#held = await new Promise((resolve, reject) => {
      let release!: () => void;
      const done = new Promise<void>((r) => (release = r));
      this.primary
        .getExecutor()
        .provideConnection(async (connection) => {
          resolve({ connection, release });
          await done;
        })
        .catch(reject);
    });
    const { isolationLevel, accessMode } = settings;
    const text =
      isolationLevel || accessMode
        ? `start transaction${isolationLevel ? ` isolation level ${isolationLevel}` : ''}${accessMode ? ` ${accessMode}` : ''}`
        : 'begin';
    await this.#held!.connection.executeQuery(CompiledQuery.raw(text));
  }

  async end(command: 'commit' | 'rollback'): Promise<void> {
    await this.#held!.connection.executeQuery(CompiledQuery.raw(command));
  }

  release(): void {
    this.#held?.release();
    this.#held = undefined;
  }
}
