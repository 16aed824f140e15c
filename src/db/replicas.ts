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
  /** The primary (DATABASE_URL): the probe reads its WAL position over a connection of its own. */
  primaryUrl: string;
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
  /**
   * primary, counted per statement, not per operation: a statement failed on a replica (unreachable, hung
   * past its query timeout, a recovery conflict, a write taken for a read) and ran again here.
   */
  | 'replica_failed';

interface Replica {
  /** host:port, for metrics and logs (never the URL's credentials). */
  name: string;
  handle: DatabaseHandle;
  /** The probe's connection ('ssdi-probe'): a replica pool busy with requests does not hold its probe back. */
  probe: DatabaseHandle;
  /** What a read operation is handed: autocommit reads here, the rest on the primary (RoutedConnection). */
  db: Db;
  up: boolean;
  /** The replay position of the last good probe. */
  replayed: bigint;
  lagSeconds: number;
  /** Its last probe found it out of recovery (promoted): warned once. */
  promoted: boolean;
}

/**
 * A replica statement that failed for a reason the primary does not have, so it runs there: 'down' when
 * the replica is unavailable (it is left out until a probe answers), 'rerun' when only the statement was
 * (a recovery conflict, 40001/40P01; a write taken for a read refused as read-only, 25006).
 */
function replicaFailure(e: unknown): 'down' | 'rerun' | undefined {
  const cause = e instanceof ServiceUnavailableError && e.cause !== undefined ? e.cause : e;
  const fault = faultOf(cause);
  if (fault?.answer === 'unavailable') return 'down';
  if (fault?.name === 'transaction-rolled-back' || (cause as { code?: unknown }).code === '25006') return 'rerun';
  return undefined;
}

/** A pg_lsn's text (`16/B374D848`) as a number. */
export function parseLsn(lsn: string): bigint {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

/**
 * The instance's streaming replicas (P151): a pool each, and a probe every `probeMs` that reads the
 * primary's WAL position and each replica's replay position, over connections of its own with short
 * client-side time limits (a hung node fails its probe, it does not stall the others; a saturated request
 * pool does not stop the probe). A replica's lag is the age of the oldest primary position it has not
 * replayed, from a short history of the primary's positions: 0 once it has replayed the latest one, and
 * unknown (left out) once the last primary position read is older than the bound.
 * `reads(floor)` picks, for one read operation, a replica that is up, within `maxLagMs` and has replayed
 * `floor` (in turn across replicas), else the primary.
 */
export class ReadReplicas {
  readonly #primary: Db;
  #primaryProbe: DatabaseHandle | undefined;
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
    // A probe statement (and a probe's new connection) fails past this: the node is down.
    const limit = Math.max(4 * opts.probeMs, 1000);
    const probe = (url: string, name: string) =>
      openDatabase({
        ...opts,
        databaseUrl: url,
        dataDir: '',
        poolSize: 1,
        applicationName: 'ssdi-probe',
        queryTimeoutMs: limit,
        connectTimeoutMs: limit,
        onPoolError: (e) => logger?.debug({ node: name, err: e.message }, 'probe connection failed; reconnecting at the next probe'),
      });
    self.#primaryProbe = await probe(opts.primaryUrl, 'primary');
    for (const url of opts.urls) {
      const u = new URL(url);
      const name = `${u.hostname}:${u.port || '5432'}`;
      const handle = await openDatabase({
        ...opts,
        databaseUrl: url,
        dataDir: '',
        // statement_timeout is the server's: a hung replica never applies it. Past this the statement
        // fails as unavailable, its connection is discarded and it runs again on the primary.
        queryTimeoutMs: opts.queryTimeoutMs ?? (opts.statementTimeoutMs ? opts.statementTimeoutMs + 1000 : undefined),
        onPoolError: (e) => logger?.warn({ replica: name, err: e.message }, 'replica connection failed; the pool replaces it'),
      });
      const replica: Replica = {
        name,
        handle,
        probe: await probe(url, name),
        db: undefined as unknown as Db,
        up: false,
        replayed: 0n,
        lagSeconds: 0,
        promoted: false,
      };
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

  /** Bounded by the pools' query and connect timeouts, also with a hung replica. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await Promise.all([this.#primaryProbe?.close(), ...this.#replicas.flatMap((r) => [r.handle.close(), r.probe.close()])]);
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

  /**
   * Reads the positions. The primary's failing leaves its last position to age: past the bound every
   * replica's lag is unknown, and they are left out.
   */
  async #probe(): Promise<void> {
    try {
      const primaryAt = parseLsn((await position(this.#primaryProbe!.db, 'pg_current_wal_lsn()::text'))!);
      const now = performance.now();
      this.#history.push({ at: now, lsn: primaryAt });
      // Kept past maxLag: a replica behind every kept position is dated at least that far back.
      const keep = now - this.#opts.maxLagMs - 4 * this.#opts.probeMs;
      while (this.#history.length > 1 && this.#history[0]!.at < keep) this.#history.shift();
    } catch (e) {
      this.#logger?.debug({ err: (e as Error).message }, "read replicas' probe could not read the primary's position");
    }
    await Promise.all(
      this.#replicas.map(async (r) => {
        try {
          // NULL out of recovery: a promoted standby (its replay position stays) is no replica of this primary.
          const lsn = await position(r.probe.db, 'case when pg_is_in_recovery() then pg_last_wal_replay_lsn()::text end');
          if (lsn === null) {
            if (!r.promoted) this.#logger?.warn({ replica: r.name }, 'read replica is not in recovery (promoted?): left out');
            r.promoted = true;
            r.up = false;
            return;
          }
          r.promoted = false;
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
    // The primary's position is not known within the bound: nor is any replica's lag.
    if (h.length === 0 || now - h.at(-1)!.at > this.#opts.maxLagMs) return Infinity;
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
   * the primary (replicaFailure), and an unavailable replica is down until a probe answers: its loss costs
   * no request.
   */
  #routed(r: Replica): Db {
    const primary = this.#primary;
    const onReplica = async <R>(q: CompiledQuery): Promise<QueryResult<R>> => {
      if (!r.up) return primary.executeQuery<R>(q);
      try {
        return await r.handle.db.executeQuery<R>(q);
      } catch (e) {
        const failure = replicaFailure(e);
        if (!failure) throw e;
        if (failure === 'down') this.#down(r, (e as Error).message);
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

async function position(db: Db, expression: string): Promise<string | null> {
  return (await sql<{ lsn: string | null }>`select ${sql.raw(expression)} as lsn`.execute(db)).rows[0]!.lsn;
}

/** How often an instance without replicas of its own checks whether its primary has a standby. */
const STANDBY_CHECK_MS = 5_000;

/**
 * Whether the instance records its tenants' read floors (P152): always with replicas of its own; else
 * while its primary has a standby (pg_stat_replication, visible to any role), checked every few seconds,
 * so an instance without DATABASE_REPLICA_URL (a rolling deploy, a write-only tier) still lets the
 * instances that read from replicas show its writes. With neither, no floor is written.
 */
export class ReadFloors {
  #on = true;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  private constructor(private readonly primary: Db) {}

  static async start(primary: Db, replicas: boolean): Promise<ReadFloors> {
    const self = new ReadFloors(primary);
    if (!replicas) await self.#check();
    return self;
  }

  get on(): boolean {
    return this.#on;
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  async #check(): Promise<void> {
    try {
      const { n } = (await sql<{ n: number }>`select count(*)::int as n from pg_stat_replication`.execute(this.primary)).rows[0]!;
      this.#on = n > 0;
    } catch {
      // Unknown: as it was (recording from the start).
    }
    if (this.#closed) return;
    this.#timer = setTimeout(() => void this.#check(), STANDBY_CHECK_MS);
    this.#timer.unref();
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
