import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { Config } from '../../../core/config.js';
import type { EventBus, Unsubscribe } from '../../../db/event-bus.js';
import type { DataCacheRow, Db } from '../../../db/tables.js';
import { inTransaction } from '../../../db/transaction.js';
import { newBurst, publishDataPointsChange } from '../live/index.js';
import { type CacheRowState, type CacheWrite, type DataPoint, readCache, readCacheState, writeCache } from '../model/index.js';
import { type Answering, CACHE_INVALIDATED, type Invalidation, type InvalidationEvent } from './invalidation.js';

/** A subject as the cache sees it: its id and the provider's identifier of it (null: it has none). */
export interface SubjectKey {
  id: string;
  identifier: string | null;
}

/** One subject's data points for one extract, and whether they are stale (served because the provider failed). */
export interface CachedPoints {
  points: DataPoint[];
  fetchedAt: Date | null;
  stale: boolean;
  /** Stored in the rows by the fetch that got it (a partial answer reads it there). */
  stored?: true;
}

export type Outcome = CachedPoints | Error;

interface L1Entry {
  identifier: string;
  points: DataPoint[];
  fetchedAt: Date;
}

const DELIVERY_WAIT_MS = 2_000;

/** The key of one subject's entry of one extract, in the LRU and among fetches in flight. */
export function cacheKey(tenantId: string, extractKey: string, subjectId: string): string {
  return `${tenantId}\u0001${extractKey}\u0001${subjectId}`;
}

/**
 * Where data points are kept, and how the two levels stay coherent (D10, docs/data-cache.md).
 *
 * Level 2 is `data_cache` in PostgreSQL (shared, survives restarts); level 1 an in-process LRU bounded by
 * the entries' JSON length, holding only fresh entries. Every invalidation bumps the row's version and is
 * published on the event bus in the writing transaction; each instance drops the named entries from its
 * LRU when the event arrives, and the writer answers only once its own subscription has received it
 * (PostgreSQL has then delivered it to every listening connection). While the bus is disconnected the
 * LRU is empty and unused, since events could be missed.
 */
export class CacheStore {
  private readonly lru: LRUCache<string, L1Entry> | undefined;
  /** Invalidations seen per (tenant, extract): an LRU fill is skipped when one arrived since its read. */
  private readonly generations = new Map<string, number>();
  /** Invalidations this instance published, by `m`, until its subscription hears them. */
  private readonly waiters = new Map<string, () => void>();
  /** Told of every invalidation heard that its sender left to whoever hears it (`r`: a tenant file's). */
  private onUnanswered: () => void = () => {};
  private subscription: Unsubscribe | undefined;
  /** Whether the LRU may be trusted: every invalidation since it was filled has been heard. */
  private coherent = false;
  /** Times the instance may have missed invalidations (the listener lost, its own event not heard). */
  private losses = 0;

  constructor(
    private readonly db: Db,
    private readonly config: Config,
    private readonly log: Logger,
  ) {
    this.lru =
      config.CACHE_MAX_BYTES > 0
        ? new LRUCache<string, L1Entry>({
            maxSize: config.CACHE_MAX_BYTES,
            sizeCalculation: (e) => Math.max(1, JSON.stringify(e.points).length),
            ttl: config.CACHE_TTL_SECONDS * 1000,
          })
        : undefined;
  }

  /**
   * Follows every instance's invalidations on `bus` (absent: this process is the only one, local
   * invalidation suffices); `onUnanswered` hears those no instance answers (to re-fetch).
   */
  follow(bus: EventBus | undefined, onUnanswered: () => void): void {
    this.onUnanswered = onUnanswered;
    if (!bus) {
      this.coherent = true;
      return;
    }
    this.subscription = bus.subscribe(CACHE_INVALIDATED, (e) => this.received(e), {
      connected: () => {
        this.coherent = true;
      },
      disconnected: () => {
        this.coherent = false;
        this.losses++;
        this.lru?.clear();
        this.log.warn('cache invalidation listener lost; in-process cache off until it reconnects');
      },
      unreadable: () => {
        // Not understood (another version of the service?): forget everything rather than guess.
        this.lru?.clear();
        this.losses++;
        this.log.warn('cache invalidation of unknown shape: in-process cache cleared');
      },
    });
  }

  unfollow(): void {
    this.subscription?.();
  }

  /**
   * The invalidations of an extract seen so far, and the times any may have been missed (a listener lost,
   * an own event not heard, an event not understood): read before a fetch, passed to `remember`, which
   * fills the LRU only while it stands. A loss counts for every extract, known yet or not.
   */
  generation(tenantId: string, extractKey: string): number {
    return this.losses * 2 ** 32 + (this.generations.get(`${tenantId}\u0001${extractKey}`) ?? 0);
  }

  /**
   * A mark that moves with every invalidation of the extract this instance hears, and whenever it may have
   * missed one; undefined while it may be missing them. What was fresh in the rows when a mark was read is
   * fresh still while the mark stands (until its TTL).
   */
  invalidationMark(tenantId: string, extractKey: string): string | undefined {
    return this.coherent ? String(this.generation(tenantId, extractKey)) : undefined;
  }

  /** Whether data fetched then is still within the TTL. */
  fresh(fetchedAt: Date): boolean {
    return Date.now() - fetchedAt.getTime() < this.config.CACHE_TTL_SECONDS * 1000;
  }

  /** A fresh LRU entry for the subject under its current identifier. */
  recall(tenantId: string, extractKey: string, s: SubjectKey): CachedPoints | undefined {
    if (!this.lru || !this.coherent) return undefined;
    const e = this.lru.get(cacheKey(tenantId, extractKey, s.id));
    if (!e || e.identifier !== s.identifier || !this.fresh(e.fetchedAt)) return undefined;
    return { points: e.points, fetchedAt: e.fetchedAt, stale: false };
  }

  /** Fills the LRU, unless an invalidation of the extract arrived (or may have been missed) since generation `gen` was read. */
  remember(tenantId: string, extractKey: string, s: SubjectKey, points: DataPoint[], fetchedAt: Date, gen: number): void {
    if (!this.lru || !this.coherent || s.identifier === null) return;
    // The data was read before that invalidation, or before a loss: it may be older than a change.
    if (this.generation(tenantId, extractKey) !== gen) return;
    this.lru.set(cacheKey(tenantId, extractKey, s.id), { identifier: s.identifier, points, fetchedAt });
  }

  /** The PostgreSQL rows of some subjects of one extract, by subject id. */
  async read(tenantId: string, extractKey: string, subjectIds: readonly string[]): Promise<Map<string, DataCacheRow>> {
    return new Map((await readCache(this.db, tenantId, extractKey, subjectIds)).map((r) => [r.subject_id, r]));
  }

  /**
   * Whether the PostgreSQL rows of some subjects of one extract hold a fresh set under their current
   * identifier (the rows' points are not read): the ids of those that do, with their fetch times.
   */
  async freshRows(tenantId: string, extractKey: string, subjects: readonly SubjectKey[]): Promise<Map<string, Date>> {
    const rows = new Map<string, CacheRowState>(
      (
        await readCacheState(
          this.db,
          tenantId,
          extractKey,
          subjects.map((s) => s.id),
        )
      ).map((r) => [r.subject_id, r]),
    );
    const fresh = new Map<string, Date>();
    for (const s of subjects) {
      const r = rows.get(s.id);
      if (r?.has_points && r.fetched_at && !r.stale && r.subject_identifier === s.identifier && this.fresh(r.fetched_at))
        fresh.set(s.id, r.fetched_at);
    }
    return fresh;
  }

  /**
   * Stores fetched sets in PostgreSQL, each only if nothing invalidated it since it was read (see
   * writeCache), and the stored ones in the LRU. Returns the stored ones' fetch times by subject id.
   * The stored ones among `changed` (a background re-fetch that got other data) are announced to live
   * subscribers in the same transaction (data-points.events.ts).
   */
  async write(
    tenantId: string,
    extractKey: string,
    epoch: string,
    writes: readonly CacheWrite[],
    gen: number,
    changed: ReadonlySet<string> = new Set(),
  ): Promise<Map<string, Date>> {
    const rows = await inTransaction(this.db, async (trx) => {
      const stored = await writeCache(trx, tenantId, extractKey, epoch, writes);
      const announced = stored.filter((r) => changed.has(r.subject_id)).map((r) => r.subject_id);
      if (announced.length > 0)
        await publishDataPointsChange(trx, { tenantId, extractKey, subjectIds: announced, kind: 'CHANGED' }, newBurst());
      return stored;
    });
    const stored = new Map(rows.map((r) => [r.subject_id, r.fetched_at]));
    for (const w of writes) {
      const fetchedAt = stored.get(w.subjectId);
      if (fetchedAt) this.remember(tenantId, extractKey, { id: w.subjectId, identifier: w.identifier }, w.points, fetchedAt, gen);
    }
    return stored;
  }

  /**
   * Runs `fn` in a transaction of its own on the pool (in a caller's, the events would leave only at that
   * one's commit, after this waited for them); the invalidations it publishes through `answering` reach
   * this instance's LRU at once and every other instance's before this resolves (D10: before the change
   * request is answered). Returns `fn`'s result and how many invalidations were published.
   */
  async answering<T>(fn: (trx: Db, answering: Answering) => Promise<T>): Promise<{ result: T; published: number }> {
    let sent: { m: string; inv: Invalidation; delivered: Promise<void> }[] = [];
    const forget = () => {
      for (const e of sent) this.waiters.delete(e.m);
    };
    try {
      const result = await inTransaction(this.db, (trx) => {
        // A deadlock retry runs again: the rolled-back attempt's events never come.
        forget();
        sent = [];
        return fn(trx, {
          expect: (inv) => {
            // Registered before the commit, which is when the event leaves: it may arrive before the commit's answer does.
            const m = randomUUID();
            const delivered = new Promise<void>((resolve) => this.waiters.set(m, resolve));
            sent.push({ m, inv, delivered });
            return m;
          },
        });
      });
      for (const e of sent) this.apply(e.inv);
      if (this.subscription && this.coherent) {
        await Promise.all(
          sent.map((e) =>
            Promise.race([e.delivered, new Promise<void>((r) => setTimeout(r, DELIVERY_WAIT_MS).unref())]).then(() => {
              if (!this.waiters.has(e.m)) return;
              // The subscription did not hear its own event: it may be hearing nothing. Off with the
              // in-process cache until an event arrives again.
              this.coherent = false;
              this.losses++;
              this.lru?.clear();
              this.log.warn(
                { extract: e.inv.x },
                'own cache invalidation not received in time; in-process cache off until the listener hears again',
              );
            }),
          ),
        );
      }
      return { result, published: sent.length };
    } finally {
      forget();
    }
  }

  private received(e: InvalidationEvent): void {
    this.apply(e);
    // Hearing proves the connection works again (after an own event that did not arrive in time).
    if (this.subscription) this.coherent = true;
    const waiter = e.m ? this.waiters.get(e.m) : undefined;
    if (waiter) {
      this.waiters.delete(e.m!);
      waiter();
    }
    // Another instance's answered change is re-fetched by that instance (and by every sweep).
    if (e.r) this.onUnanswered();
  }

  private apply(inv: Invalidation): void {
    const g = `${inv.t}\u0001${inv.x}`;
    this.generations.set(g, (this.generations.get(g) ?? 0) + 1);
    if (!this.lru) return;
    if (inv.s === null) {
      const prefix = `${g}\u0001`;
      for (const k of [...this.lru.keys()]) if (k.startsWith(prefix)) this.lru.delete(k);
    } else {
      for (const s of inv.s) this.lru.delete(cacheKey(inv.t, inv.x, s));
    }
  }
}
