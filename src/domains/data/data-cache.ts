import { randomUUID } from 'node:crypto';
import { bulkhead } from 'cockatiel';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { Config } from '../../core/config.js';
import type { Db } from '../../db/tables.js';
import type { Listen } from '../../db/notifications.js';
import { inTransaction } from '../../db/transaction.js';
import { ProviderUnavailableError } from '../../core/errors.js';
import { findSubjectsByIds, loadSubjectConfig } from '../subject/subject.repository.js';
import type { DataPoint } from './data-points.js';
import {
  CACHE_CHANNEL,
  type CacheWrite,
  type ExtractWithSource,
  claimFlagged,
  findExtracts,
  notifyInvalidation,
  readCache,
  writeCache,
} from './data.repository.js';
import { type BreakerState, CircuitOpenError, ProviderClient, type ProviderSource } from './provider-client.js';
import type { SecretBox } from './secret-box.js';
import { identifierOf } from './subject-identifier.js';

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
}

export type Outcome = CachedPoints | Error;

/** What changed: entries of some subjects of one extract, or all of the extract's entries (`s: null`). */
export interface Invalidation {
  t: string;
  x: string;
  s: string[] | null;
}

interface L1Entry {
  identifier: string;
  points: DataPoint[];
  fetchedAt: Date;
}

interface Want {
  subject: SubjectKey & { identifier: string };
  expectedVersion: string | null;
  removedIds: string[];
  /** Older data to serve, flagged stale, when the provider fails. */
  fallback?: { points: DataPoint[]; fetchedAt: Date } | undefined;
}

interface InFlight {
  /**
   * What the fetch will store against (row version, extract epoch) and the identifier it asked for: only
   * readers that saw the same may share it, so nothing invalidated since it started is shared as fresh.
   */
  version: string | null;
  epoch: string;
  identifier: string;
  outcome: Promise<Outcome>;
}

const CLAIM_BATCH = 200;
const CLAIM_LEASE_SECONDS = 120;
const SWEEP_INTERVAL_MS = 30_000;
const DELIVERY_WAIT_MS = 2_000;
const MAX_SUBJECTS_PAYLOAD = 6_000;
const CLOSE_WAIT_MS = 5_000;

declare module '../../graphql/context.js' {
  interface Context {
    /** The instance's data point cache (shared by requests; its per-request loaders live in the schema). */
    data: DataCache;
  }
}

/**
 * The two-level data point cache of D10, one per service instance.
 *
 * Level 2 is `data_cache` in PostgreSQL (shared, survives restarts); level 1 an in-process LRU bounded by
 * the entries' JSON length, holding only fresh entries. Coherence: every invalidation bumps the row's
 * version and NOTIFYs in the writing transaction; each instance drops the named entries from its LRU when
 * the notification arrives, and the writer answers only once its own listener has received it (PostgreSQL
 * has then delivered it to every listening connection). While an instance's listener is down its LRU is
 * empty and unused, since it could miss notifications. Fetches store their answer only if the row is
 * still at the version they read (see writeCache), so an answer older than a notification is never fresh.
 */
export class DataCache {
  readonly provider: ProviderClient;
  private readonly lru: LRUCache<string, L1Entry> | undefined;
  private readonly inflight = new Map<string, InFlight>();
  /** Invalidations seen per (tenant, extract): an LRU fill is skipped when one arrived since its read. */
  private readonly generations = new Map<string, number>();
  private readonly waiters = new Map<string, () => void>();
  private listener: { close(): Promise<void> } | undefined;
  private coherent = false;
  private closed = false;
  private sweeping: Promise<void> | undefined;
  private sweepAgain = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly refetchLimit;

  constructor(
    private readonly db: Db,
    private readonly config: Config,
    private readonly log: Logger,
    private readonly secrets: SecretBox,
  ) {
    this.provider = new ProviderClient(
      {
        timeoutMs: config.PROVIDER_TIMEOUT_MS,
        retries: config.PROVIDER_RETRIES,
        backoffMs: config.PROVIDER_BACKOFF_MS,
        maxPages: config.PROVIDER_MAX_PAGES,
        breakerFailures: config.PROVIDER_BREAKER_FAILURES,
        breakerThreshold: config.PROVIDER_BREAKER_THRESHOLD,
        breakerWindowMs: config.PROVIDER_BREAKER_WINDOW_MS,
        breakerProbeMs: config.PROVIDER_BREAKER_PROBE_MS,
        breakerOpenMs: config.PROVIDER_BREAKER_OPEN_MS,
      },
      log,
    );
    this.lru =
      config.CACHE_MAX_BYTES > 0
        ? new LRUCache<string, L1Entry>({
            maxSize: config.CACHE_MAX_BYTES,
            sizeCalculation: (e) => Math.max(1, JSON.stringify(e.points).length),
            ttl: config.CACHE_TTL_SECONDS * 1000,
          })
        : undefined;
    this.refetchLimit = bulkhead(config.PROVIDER_REFETCH_CONCURRENCY, Number.POSITIVE_INFINITY);
  }

  /**
   * Starts listening for other instances' invalidations (`listen` absent: this process is the only one,
   * so local invalidation suffices) and the periodic sweep for flagged entries whose re-fetch lapsed.
   */
  async start(listen?: Listen): Promise<void> {
    if (listen) {
      this.listener = await listen(CACHE_CHANNEL, {
        message: (payload) => this.onMessage(payload),
        connected: () => {
          this.coherent = true;
        },
        disconnected: () => {
          this.coherent = false;
          this.lru?.clear();
          this.log.warn('cache invalidation listener lost; in-process cache off until it reconnects');
        },
      });
    } else {
      this.coherent = true;
    }
    this.timer = setInterval(() => this.kick(), SWEEP_INTERVAL_MS);
    this.timer.unref();
    this.kick();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    // The sweep stops at its next step; a provider call in it may take long, so waiting is bounded.
    await Promise.race([this.sweeping?.catch(() => {}), new Promise((r) => setTimeout(r, CLOSE_WAIT_MS).unref())]);
    await this.listener?.close();
  }

  /** The circuit state of each data source called since start (for a gauge). */
  providerBreakerStates(): BreakerState[] {
    return this.provider.breakerStates();
  }

  /** The data points of some subjects of one extract: from the LRU, then PostgreSQL, then the provider. */
  async load(tenantId: string, extract: ExtractWithSource, subjects: readonly SubjectKey[]): Promise<Map<string, Outcome>> {
    const out = new Map<string, Outcome>();
    const pending: Want['subject'][] = [];
    for (const s of subjects) {
      if (s.identifier === null) out.set(s.id, { points: [], fetchedAt: null, stale: false });
      else {
        const hit = this.l1Get(tenantId, extract.key, s);
        if (hit) out.set(s.id, hit);
        else pending.push(s as Want['subject']);
      }
    }
    if (pending.length === 0) return out;

    const gen = this.generation(tenantId, extract.key);
    const rows = new Map((await readCache(this.db, tenantId, extract.key, pending.map((s) => s.id))).map((r) => [r.subject_id, r]));
    const wants: Want[] = [];
    const shared: [string, Promise<Outcome>][] = [];
    for (const s of pending) {
      const row = rows.get(s.id);
      const usable = row?.points != null && row.fetched_at !== null && row.subject_identifier === s.identifier;
      if (usable && !row.stale && this.fresh(row.fetched_at!)) {
        const points = row.points as DataPoint[];
        out.set(s.id, { points, fetchedAt: row.fetched_at, stale: false });
        this.l1Set(tenantId, extract.key, s, points, row.fetched_at!, gen);
        continue;
      }
      // Another request may have fetched since this one looked (single-flight): the LRU, then in-flight
      // fetches that will store against the version this request read.
      const hit = this.l1Get(tenantId, extract.key, s);
      if (hit) {
        out.set(s.id, hit);
        continue;
      }
      const flying = this.inflight.get(cacheKey(tenantId, extract.key, s.id));
      if (flying && flying.version === (row?.version ?? null) && flying.epoch === extract.cache_epoch && flying.identifier === s.identifier) {
        shared.push([s.id, flying.outcome]);
        continue;
      }
      wants.push({
        subject: s,
        expectedVersion: row?.version ?? null,
        removedIds: row?.removed_ids ?? [],
        fallback: usable ? { points: row.points as DataPoint[], fetchedAt: row.fetched_at! } : undefined,
      });
    }
    for (const [id, p] of this.fetch(tenantId, extract, wants, gen)) shared.push([id, p]);
    for (const [id, p] of shared) out.set(id, await p);
    return out;
  }

  /**
   * Fetches in chunks of PROVIDER_BATCH_SIZE identifiers, registering each subject's outcome as in flight
   * so that concurrent readers share the call.
   */
  private fetch(tenantId: string, extract: ExtractWithSource, wants: readonly Want[], gen: number, limit?: (fn: () => Promise<Map<string, Outcome>>) => Promise<Map<string, Outcome>>) {
    const outcomes = new Map<string, Promise<Outcome>>();
    const size = this.config.PROVIDER_BATCH_SIZE;
    // Chunks by distinct identifiers: subjects sharing one go together.
    const byIdentifier = new Map<string, Want[]>();
    for (const w of wants) byIdentifier.set(w.subject.identifier, [...(byIdentifier.get(w.subject.identifier) ?? []), w]);
    const groups = [...byIdentifier.values()];
    for (let i = 0; i < groups.length; i += size) {
      const chunk = groups.slice(i, i + size).flat();
      const run = () => this.fetchChunk(tenantId, extract, chunk, gen);
      const result = limit ? limit(run) : run();
      for (const w of chunk) {
        const key = cacheKey(tenantId, extract.key, w.subject.id);
        const outcome = result.then(
          (m) => m.get(w.subject.id)!,
          (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
        );
        // Background re-fetches wait in a queue (the bulkhead): readers do not wait behind them.
        if (!limit) {
          const entry = { version: w.expectedVersion, epoch: extract.cache_epoch, identifier: w.subject.identifier, outcome };
          this.inflight.set(key, entry);
          void outcome.finally(() => this.inflight.get(key) === entry && this.inflight.delete(key));
        }
        outcomes.set(w.subject.id, outcome);
      }
    }
    return outcomes;
  }

  private async fetchChunk(tenantId: string, extract: ExtractWithSource, wants: readonly Want[], gen: number): Promise<Map<string, Outcome>> {
    const identifiers = [...new Set(wants.map((w) => w.subject.identifier))];
    let points: DataPoint[];
    try {
      points = await this.provider.fetchAll(this.sourceOf(tenantId, extract), { key: extract.key, options: extract.options }, identifiers);
    } catch (e) {
      // While a circuit is open every read is refused: its state changes are logged (by the client), not each refusal.
      const level = e instanceof CircuitOpenError ? 'debug' : 'warn';
      this.log[level]({ extract: extract.key, dataSource: extract.source.key, subjects: identifiers.length, err: (e as Error).message }, 'data provider call failed');
      return new Map(
        wants.map((w) => [
          w.subject.id,
          w.fallback
            ? { points: w.fallback.points, fetchedAt: w.fallback.fetchedAt, stale: true }
            : new ProviderUnavailableError(`The data provider of extract '${extract.key}' is unavailable and nothing is cached: ${(e as Error).message}`),
        ]),
      );
    }
    const bySubject = new Map<string, DataPoint[]>();
    for (const p of points) bySubject.set(p.SubjectIdentifier, [...(bySubject.get(p.SubjectIdentifier) ?? []), p]);
    const writes: CacheWrite[] = wants.map((w) => {
      const mine = bySubject.get(w.subject.identifier) ?? [];
      const removed = new Set(w.removedIds);
      return {
        subjectId: w.subject.id,
        identifier: w.subject.identifier,
        points: mine.filter((p) => !removed.has(p.Id)),
        expectedVersion: w.expectedVersion,
        // A removed id stays remembered while the provider still returns it (a lagging replica).
        removedIds: w.removedIds.filter((id) => mine.some((p) => p.Id === id)),
      };
    });
    let stored: Map<string, Date>;
    try {
      stored = new Map((await writeCache(this.db, tenantId, extract.key, extract.cache_epoch, writes)).map((r) => [r.subject_id, r.fetched_at]));
    } catch (e) {
      this.log.error({ err: e, extract: extract.key }, 'storing fetched data points failed');
      stored = new Map();
    }
    const out = new Map<string, Outcome>();
    for (const w of writes) {
      const fetchedAt = stored.get(w.subjectId);
      out.set(w.subjectId, { points: w.points, fetchedAt: fetchedAt ?? new Date(), stale: false });
      if (fetchedAt) this.l1Set(tenantId, extract.key, { id: w.subjectId, identifier: w.identifier }, w.points, fetchedAt, gen);
    }
    return out;
  }

  private sourceOf(tenantId: string, extract: ExtractWithSource): ProviderSource {
    const s = extract.source;
    return {
      tenantId,
      key: s.key,
      getDataPointsUrl: s.get_data_points_url,
      tokenUrl: s.token_url,
      clientId: s.client_id,
      scope: s.scope,
      clientSecret: async () => (s.client_secret_enc ? this.secrets.open(s.client_secret_enc) : null),
    };
  }

  /**
   * Runs `fn` in one transaction; the invalidations it publishes reach every instance's LRU before this
   * resolves (D10: before the change request is answered). Flagged entries are then re-fetched in the
   * background.
   */
  async withInvalidation<T>(fn: (trx: Db, publish: (inv: Invalidation) => Promise<void>) => Promise<T>): Promise<T> {
    let sent: { m: string; inv: Invalidation; delivered: Promise<void> }[] = [];
    try {
      const result = await inTransaction(this.db, async (trx) => {
        // A deadlock retry runs again: the rolled-back attempt's notifications never come.
        for (const s of sent) this.waiters.delete(s.m);
        sent = [];
        return fn(trx, async (given) => {
          const m = randomUUID();
          // NOTIFY payloads are limited to 8000 bytes: many subjects become "the whole extract".
          const inv = given.s !== null && JSON.stringify(given.s).length > MAX_SUBJECTS_PAYLOAD ? { ...given, s: null } : given;
          // Registered before the commit: the notification may arrive before the commit's answer does.
          const delivered = new Promise<void>((resolve) => this.waiters.set(m, resolve));
          sent.push({ m, inv, delivered });
          await notifyInvalidation(trx, JSON.stringify({ m, ...inv }));
        });
      });
      for (const s of sent) this.apply(s.inv);
      if (this.listener && this.coherent) {
        await Promise.all(
          sent.map((s) =>
            Promise.race([s.delivered, new Promise<void>((r) => setTimeout(r, DELIVERY_WAIT_MS).unref())]).then(() => {
              if (!this.waiters.has(s.m)) return;
              // The listener did not hear its own notification: it may be hearing nothing. Off with the
              // in-process cache until a notification arrives again.
              this.coherent = false;
              this.lru?.clear();
              this.log.warn({ extract: s.inv.x }, 'own cache invalidation not received in time; in-process cache off until the listener hears again');
            }),
          ),
        );
      }
      if (sent.length > 0) this.kick();
      return result;
    } finally {
      for (const s of sent) this.waiters.delete(s.m);
    }
  }

  private onMessage(payload: string): void {
    let msg: Invalidation & { m?: string };
    try {
      msg = JSON.parse(payload) as Invalidation & { m?: string };
      const ok = typeof msg === 'object' && msg !== null && typeof msg.t === 'string' && typeof msg.x === 'string' &&
        (msg.s === null || (Array.isArray(msg.s) && msg.s.every((x) => typeof x === 'string')));
      if (!ok) throw new Error('unexpected shape');
    } catch {
      // Not understood (another version of the service?): forget everything rather than guess.
      this.lru?.clear();
      for (const k of this.generations.keys()) this.generations.set(k, (this.generations.get(k) ?? 0) + 1);
      this.log.warn('cache invalidation of unknown shape: in-process cache cleared');
      return;
    }
    this.apply(msg);
    if (this.listener) this.coherent = true;
    const waiter = msg.m ? this.waiters.get(msg.m) : undefined;
    if (waiter) {
      this.waiters.delete(msg.m!);
      waiter();
    }
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

  private generation(tenantId: string, extractKey: string): number {
    return this.generations.get(`${tenantId}\u0001${extractKey}`) ?? 0;
  }

  private fresh(fetchedAt: Date): boolean {
    return Date.now() - fetchedAt.getTime() < this.config.CACHE_TTL_SECONDS * 1000;
  }

  private l1Get(tenantId: string, extractKey: string, s: SubjectKey): CachedPoints | undefined {
    if (!this.lru || !this.coherent) return undefined;
    const e = this.lru.get(cacheKey(tenantId, extractKey, s.id));
    if (!e || e.identifier !== s.identifier || !this.fresh(e.fetchedAt)) return undefined;
    return { points: e.points, fetchedAt: e.fetchedAt, stale: false };
  }

  private l1Set(tenantId: string, extractKey: string, s: SubjectKey, points: DataPoint[], fetchedAt: Date, gen: number): void {
    if (!this.lru || !this.coherent || s.identifier === null) return;
    // An invalidation of this extract arrived since the data was read: it may be older than that.
    if (this.generation(tenantId, extractKey) !== gen) return;
    this.lru.set(cacheKey(tenantId, extractKey, s.id), { identifier: s.identifier, points, fetchedAt });
  }

  /** Schedules a background re-fetch of flagged entries (coalesced: one sweep at a time per instance). */
  kick(): void {
    if (this.closed) return;
    if (this.sweeping) {
      this.sweepAgain = true;
      return;
    }
    this.sweeping = this.sweep()
      .catch((e: unknown) => this.log.error({ err: e }, 'background re-fetch failed'))
      .finally(() => {
        this.sweeping = undefined;
        if (this.sweepAgain && !this.closed) {
          this.sweepAgain = false;
          this.kick();
        }
      });
  }

  /**
   * Re-fetches flagged entries that hold data. Rows are claimed first (FOR UPDATE SKIP LOCKED, with a
   * lease), so with several instances one of them re-fetches an entry; at most
   * PROVIDER_REFETCH_CONCURRENCY provider calls run at once.
   */
  private async sweep(): Promise<void> {
    for (;;) {
      const rows = await claimFlagged(this.db, CLAIM_BATCH, CLAIM_LEASE_SECONDS);
      if (rows.length === 0 || this.closed) return;
      const groups = new Map<string, typeof rows>();
      for (const r of rows) groups.set(`${r.tenant_id}\u0001${r.extract_key}`, [...(groups.get(`${r.tenant_id}\u0001${r.extract_key}`) ?? []), r]);
      const runs: Promise<unknown>[] = [];
      for (const group of groups.values()) {
        const { tenant_id: tenantId, extract_key: extractKey } = group[0]!;
        const gen = this.generation(tenantId, extractKey);
        const [extract] = await findExtracts(this.db, tenantId, [extractKey]);
        if (!extract) continue;
        const [subjects, config] = await Promise.all([findSubjectsByIds(this.db, tenantId, group.map((r) => r.subject_id)), loadSubjectConfig(this.db, tenantId)]);
        const byId = new Map(subjects.map((s) => [s.id, s]));
        const wants: Want[] = [];
        for (const r of group) {
          const subject = byId.get(r.subject_id);
          const identifier = subject ? identifierOf(extract.source.subject_identifier, subject, config) : null;
          if (identifier === null) continue;
          // Readers of the same version share this fetch: they get the older data, as stale, if it fails.
          const fallback = r.points && r.fetched_at && r.subject_identifier === identifier ? { points: r.points as DataPoint[], fetchedAt: r.fetched_at } : undefined;
          wants.push({ subject: { id: r.subject_id, identifier }, expectedVersion: r.version, removedIds: r.removed_ids, fallback });
        }
        const outcomes = this.fetch(tenantId, extract, wants, gen, (fn) => this.refetchLimit.execute(fn));
        runs.push(...outcomes.values());
      }
      await Promise.all(runs);
      if (rows.length < CLAIM_BATCH) return;
    }
  }
}

function cacheKey(tenantId: string, extractKey: string, subjectId: string): string {
  return `${tenantId}\u0001${extractKey}\u0001${subjectId}`;
}
