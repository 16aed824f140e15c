import type { Span } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { Config } from '../../../core/config.js';
import type { EventBus } from '../../../db/event-bus.js';
import { inSpan } from '../../../db/tracing.js';
import type { Db } from '../../../db/tables.js';
import { type DataPoint, type ExtractWithSource, type SecretBox, countFlagged } from '../model/index.js';
import { type Answering, type DataChange, ReportBatch } from './invalidation.js';
import { CacheFetcher, type Flight, type Want } from './fetcher.js';
import { type CachedPoints, CacheStore, type Outcome, type SubjectKey } from './store.js';
import { CacheSweep } from './sweep.js';
import type { DataMeter } from './meter.js';
import type { BreakerState, ProviderClient } from '../provider/index.js';

export type { CachedPoints, Outcome, SubjectKey } from './store.js';

/**
 * Where a subject's set of one extract is, as fresh as a read would serve it (DataCache.locate): in the
 * cache's rows (`data_cache` and its `data_cache_point` rows), or in memory (fetched for this request,
 * served stale after a provider failure, or none for a subject without identifier). An Error: the
 * provider failed and nothing is cached.
 */
export type Located =
  { at: 'rows'; fetchedAt: Date } | { at: 'memory'; points: DataPoint[]; fetchedAt: Date | null; stale: boolean } | Error;

/** D10: data served from the cache because its provider failed, reported in `extensions.staleData`. */
export interface StaleNotice {
  extractKey: string;
  subjectIdentifier: string;
  fetchedAt: string;
}

declare module '../../../graphql/context.js' {
  interface Context {
    /** The instance's data point cache (shared by requests; its per-request loaders live in the schema). */
    data: DataCache;
    /** Stale data served in this request, by extract and subject identifier (a new map per request). */
    staleData: Map<string, StaleNotice>;
  }
}

/**
 * The two-level data point cache of D10, one per service instance (docs/data-cache.md): the in-process LRU
 * and `data_cache` in PostgreSQL, kept coherent over the event bus (CacheStore); provider calls shared by
 * concurrent readers and made in chunks (CacheFetcher); flagged entries re-fetched in the background
 * (CacheSweep). Fetches store their answer only if the row is still at the version they read (see
 * writeCache), so an answer older than an invalidation is never fresh.
 */
export class DataCache {
  private readonly store: CacheStore;
  private readonly fetcher: CacheFetcher;
  private readonly sweep: CacheSweep;
  private readonly reports = new ReportBatch((fn) => this.answering(fn));

  constructor(
    private readonly db: Db,
    private readonly config: Config,
    log: Logger,
    secrets: SecretBox,
    /** The instance's metrics: lookups, stale sets served, provider calls and tokens. */
    private readonly meter?: DataMeter,
  ) {
    this.store = new CacheStore(db, config, log);
    this.fetcher = new CacheFetcher(this.store, config, log, secrets, meter);
    this.sweep = new CacheSweep(db, this.store, this.fetcher, config, log);
  }

  get provider(): ProviderClient {
    return this.fetcher.provider;
  }

  /** See CacheStore.invalidationMark: what a remembered answer over fresh rows is valid under (P126). */
  invalidationMark(tenantId: string, extractKey: string): string | undefined {
    return this.store.invalidationMark(tenantId, extractKey);
  }

  /** Subjects per provider call (PROVIDER_BATCH_SIZE). */
  get batchSize(): number {
    return this.config.PROVIDER_BATCH_SIZE;
  }

  /** When data fetched at `fetchedAt` stops being fresh (epoch ms). */
  freshUntil(fetchedAt: Date): number {
    return fetchedAt.getTime() + this.config.CACHE_TTL_SECONDS * 1000;
  }

  /**
   * Follows every instance's invalidations on `bus` (absent: this process is the only one, so local
   * invalidation suffices) and starts the periodic sweep for flagged entries whose re-fetch lapsed.
   */
  start(bus?: EventBus): Promise<void> {
    // An invalidation no instance answers (a tenant file's) is re-fetched by every instance that hears it;
    // the sweeps claim rows with SKIP LOCKED, so each row is still fetched once.
    this.store.follow(bus, () => this.sweep.kick());
    this.sweep.start();
    return Promise.resolve();
  }

  /** Stops the sweep (waiting a bounded time for the one in progress) and following invalidations; the bus is its owner's to close. */
  async close(): Promise<void> {
    await this.sweep.close();
    this.store.unfollow();
  }

  /** The circuit state of each data source called since start (for a gauge). */
  providerBreakerStates(): BreakerState[] {
    return this.fetcher.provider.breakerStates();
  }

  /** Entries flagged and waiting for a background re-fetch, of every instance (counted in the database, for a gauge). */
  refetchBacklog(): Promise<number> {
    return countFlagged(this.db);
  }

  /** Subjects this instance's background re-fetch claimed and has not re-fetched yet (for a gauge). */
  get refetching(): number {
    return this.sweep.refetching;
  }

  /**
   * The data points of some subjects of one extract: from the LRU, then PostgreSQL, then the provider;
   * `onOutcome` hears each subject served from the LRU or a fresh row (`cached`: what its row holds), each
   * fetched subject's points as soon as the provider answered (`arrived`, not stored yet), then its
   * outcome once its chunk's answer is stored (`fetched`). Traced (P141): a `data cache` span whose
   * attributes count the subjects found fresh (hits), fetched or waited for (misses) and served stale; the
   * provider calls it makes nest in it.
   */
  load(
    tenantId: string,
    extract: ExtractWithSource,
    subjects: readonly SubjectKey[],
    onOutcome?: (subjectId: string, outcome: Outcome, how: 'cached' | 'arrived' | 'fetched') => void,
  ): Promise<Map<string, Outcome>> {
    const attributes = { 'ssdi.data.extract': extract.key, 'ssdi.cache.hits': 0, 'ssdi.cache.misses': 0, 'ssdi.cache.stale': 0 };
    return inSpan('data cache', attributes, (span) => this.lookUp(span, tenantId, extract, subjects, onOutcome));
  }

  private async lookUp(
    span: Span,
    tenantId: string,
    extract: ExtractWithSource,
    subjects: readonly SubjectKey[],
    onOutcome?: (subjectId: string, outcome: Outcome, how: 'cached' | 'arrived' | 'fetched') => void,
  ): Promise<Map<string, Outcome>> {
    const out = new Map<string, Outcome>();
    const cached = (id: string, o: CachedPoints) => {
      out.set(id, o);
      onOutcome?.(id, o, 'cached');
    };
    const pending: Want['subject'][] = [];
    let inMemory = 0;
    for (const s of subjects) {
      if (s.identifier === null) cached(s.id, { points: [], fetchedAt: null, stale: false });
      else {
        const hit = this.store.recall(tenantId, extract.key, s);
        if (hit) {
          inMemory++;
          cached(s.id, hit);
        } else pending.push(s as Want['subject']);
      }
    }
    this.meter?.lookups('memory', inMemory);
    if (pending.length === 0) {
      span.setAttribute('ssdi.cache.hits', subjects.length);
      return out;
    }

    const gen = this.store.generation(tenantId, extract.key);
    const rows = await this.store.read(
      tenantId,
      extract.key,
      pending.map((s) => s.id),
    );
    const wants: Want[] = [];
    const shared: [string, Flight][] = [];
    // Counted, then reported once per result: not one labelled increment per subject of a large read.
    let inRows = 0;
    let lateInMemory = 0;
    for (const s of pending) {
      const row = rows.get(s.id);
      const usable = row?.points != null && row.fetched_at !== null && row.subject_identifier === s.identifier;
      if (usable && !row.stale && this.store.fresh(row.fetched_at!)) {
        const points = row.points as DataPoint[];
        inRows++;
        cached(s.id, { points, fetchedAt: row.fetched_at, stale: false });
        this.store.remember(tenantId, extract.key, s, points, row.fetched_at!, gen);
        continue;
      }
      // Another request may have fetched since this one looked (single-flight): the LRU, then in-flight
      // fetches that will store against the version this request read.
      const hit = this.store.recall(tenantId, extract.key, s);
      if (hit) {
        lateInMemory++;
        cached(s.id, hit);
        continue;
      }
      const flying = this.fetcher.inFlight(tenantId, extract, s, row?.version ?? null);
      if (flying) {
        shared.push([s.id, flying]);
        continue;
      }
      wants.push({
        subject: s,
        expectedVersion: row?.version ?? null,
        removedIds: row?.removed_ids ?? [],
        fallback: usable ? { points: row.points as DataPoint[], fetchedAt: row.fetched_at! } : undefined,
      });
    }
    const misses = shared.length + wants.length;
    this.meter?.lookups('memory', lateInMemory);
    this.meter?.lookups('database', inRows);
    this.meter?.lookups('miss', misses);
    span.setAttributes({ 'ssdi.cache.hits': subjects.length - misses, 'ssdi.cache.misses': misses });
    for (const [id, p] of this.fetcher.fetch(tenantId, extract, wants, gen)) shared.push([id, p]);
    await Promise.all(
      shared.map(([id, f]) => {
        if (onOutcome) void f.arrived.then((o) => out.has(id) || onOutcome(id, o, 'arrived'));
        return f.outcome.then((o) => {
          out.set(id, o);
          onOutcome?.(id, o, 'fetched');
        });
      }),
    );
    const stale = shared.filter(([id]) => {
      const o = out.get(id);
      return o !== undefined && !(o instanceof Error) && o.stale;
    }).length;
    this.meter?.staleServed(stale);
    span.setAttribute('ssdi.cache.stale', stale);
    return out;
  }

  /**
   * Makes sure some subjects' sets of one extract are as fresh as `load` would serve them, without
   * reading the sets that are fresh in PostgreSQL already (aggregates read them there): fresh in the LRU
   * or in their row, they are located in the rows; the others go through `load` (fetched in chunks,
   * single-flight with concurrent readers, the older set served stale when the provider fails) and are
   * located in the rows once stored, in memory otherwise (served stale, or not stored because an
   * invalidation came first).
   *
   * `onProgress` (for partial answers) hears what is located so far (what was fresh already included) as
   * each chunk's answer arrives from the provider (its subjects in memory) and once it is stored (then in
   * the rows, unless an invalidation came first): never before the provider's first answer, so never when
   * nothing is fetched.
   */
  async locate(
    tenantId: string,
    extract: ExtractWithSource,
    subjects: readonly SubjectKey[],
    onProgress?: (located: ReadonlyMap<string, Located>) => void,
  ): Promise<Map<string, Located>> {
    const out = new Map<string, Located>();
    const unknown: SubjectKey[] = [];
    let inMemory = 0;
    for (const s of subjects) {
      if (s.identifier === null) {
        out.set(s.id, { at: 'memory', points: [], fetchedAt: null, stale: false });
        continue;
      }
      // The LRU holds only sets that are what the row holds, dropped when the row is invalidated.
      const hit = this.store.recall(tenantId, extract.key, s);
      if (hit) {
        inMemory++;
        out.set(s.id, { at: 'rows', fetchedAt: hit.fetchedAt! });
      } else unknown.push(s);
    }
    this.meter?.lookups('memory', inMemory);
    const fresh = await this.store.freshRows(tenantId, extract.key, unknown);
    this.meter?.lookups('database', fresh.size);
    const rest = unknown.filter((s) => {
      const fetchedAt = fresh.get(s.id);
      if (fetchedAt) out.set(s.id, { at: 'rows', fetchedAt });
      return !fetchedAt;
    });
    const loaded = await this.load(tenantId, extract, rest, onProgress && this.progress(out, onProgress));
    // What this request fetched is in the rows now, unless an invalidation came first (then it is served
    // from memory, as a read serves it): the rows are read far faster than points sent along.
    const stored = await this.store.freshRows(
      tenantId,
      extract.key,
      rest.filter((s) => {
        const o = loaded.get(s.id);
        return o !== undefined && !(o instanceof Error) && !o.stale;
      }),
    );
    for (const [id, o] of loaded) {
      const fetchedAt = stored.get(id);
      out.set(id, fetchedAt ? { at: 'rows', fetchedAt } : o instanceof Error ? o : { at: 'memory', ...o });
    }
    return out;
  }

  /**
   * Adds each outcome heard to what `located` holds, telling `onProgress` once per chunk's answer from the
   * provider (the outcomes of one answer resolve together, before the next macrotask); what was cached
   * is told with the next answer.
   */
  private progress(
    located: ReadonlyMap<string, Located>,
    onProgress: (located: ReadonlyMap<string, Located>) => void,
  ): (subjectId: string, outcome: Outcome, how: 'cached' | 'arrived' | 'fetched') => void {
    const partial = new Map(located);
    let told = false;
    const tell = () => {
      told = false;
      onProgress(partial);
    };
    return (id, o, how) => {
      if (how === 'arrived' && partial.has(id)) return;
      const inRows = !(o instanceof Error) && (o.stored || how === 'cached') && o.fetchedAt !== null;
      partial.set(id, o instanceof Error ? o : inRows ? { at: 'rows', fetchedAt: o.fetchedAt! } : { at: 'memory', ...o });
      if (how === 'cached') return;
      if (!told) setImmediate(tell);
      told = true;
    };
  }

  /**
   * Flags a provider's change report (D10), together with the reports of concurrent requests (ReportBatch):
   * resolves once its invalidations reached every instance, as `answering` would.
   */
  report(change: DataChange): Promise<void> {
    return this.reports.report(change);
  }

  /**
   * Runs `fn` in a transaction of its own, for a change this instance answers: the invalidations it makes
   * with `invalidate(trx, change, answering)` reach every instance before this resolves (D10: before the
   * change request is answered), and their flagged entries are re-fetched here in the background.
   */
  async answering<T>(fn: (trx: Db, answering: Answering) => Promise<T>): Promise<T> {
    const { result, published } = await this.store.answering(fn);
    if (published > 0) this.sweep.kick();
    return result;
  }
}
