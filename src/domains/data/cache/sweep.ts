import { bulkhead } from 'cockatiel';
import type { Logger } from 'pino';
import type { Config } from '../../../core/config.js';
import { detached } from '../../../core/tracing.js';
import type { DataCacheRow, Db } from '../../../db/tables.js';
import { errorLogLevel } from '../../../http/errors.js';
import { findSubjectsByIds, loadSubjectConfig } from '../../subject/index.js';
import { type DataPoint, claimFlagged, findExtracts, identifierOf, releaseClaims } from '../model/index.js';
import type { CacheFetcher, Want } from './fetcher.js';
import type { CacheStore } from './store.js';

const CLAIM_BATCH = 200;
const CLAIM_LEASE_SECONDS = 120;
const SWEEP_INTERVAL_MS = 30_000;
const CLOSE_WAIT_MS = 5_000;
/**
 * The coalescing window of invalidations (P105): a sweep starts SWEEP_QUIET_MS after the last of a
 * burst, or SWEEP_MAX_DELAY_MS after its window opened while it goes on, and fetches whole batches of
 * PROVIDER_BATCH_SIZE per extract; what is short of a whole batch waits until no invalidation came for
 * SWEEP_SETTLE_MS, at most SWEEP_REST_MAX_MS after the burst began.
 */
const SWEEP_QUIET_MS = 100;
const SWEEP_SETTLE_MS = 500;
const SWEEP_MAX_DELAY_MS = 5_000;
const SWEEP_REST_MAX_MS = 30_000;

/**
 * The background re-fetch of flagged entries that hold data: after invalidations (`kick`, coalesced as
 * above) and every 30 s. Rows are claimed first (FOR UPDATE SKIP LOCKED, with a lease), so with several
 * instances one of them re-fetches an entry and a crashed instance's claims lapse; at most
 * PROVIDER_REFETCH_CONCURRENCY provider calls run at once.
 */
export class CacheSweep {
  private readonly refetchLimit;
  private readonly batch: number;
  private readonly claimBatch: number;
  /** The sweep scheduled after invalidations; the current burst's last one, and when it ends at the latest. */
  private pending: NodeJS.Timeout | undefined;
  private lastKick = 0;
  /** When the burst began (undefined: none is going on) and when its current window ends. */
  private burstFrom: number | undefined;
  private burstUntil: number | undefined;
  /** Rows short of a whole batch were given back: they are swept once the burst settles. */
  private held = false;
  private sweeping: Promise<void> | undefined;
  /** Asked to sweep during a sweep: sweep again after it. */
  private again = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  /** Subjects claimed and not re-fetched yet (queued behind PROVIDER_REFETCH_CONCURRENCY, or in a call). */
  refetching = 0;

  constructor(
    private readonly db: Db,
    private readonly store: CacheStore,
    private readonly fetcher: CacheFetcher,
    config: Config,
    private readonly log: Logger,
  ) {
    this.refetchLimit = bulkhead(config.PROVIDER_REFETCH_CONCURRENCY, Number.POSITIVE_INFINITY);
    this.batch = config.PROVIDER_BATCH_SIZE;
    // Whole batches per claim: a claim cut short of one would cost an extra provider call.
    this.claimBatch = Math.ceil(CLAIM_BATCH / this.batch) * this.batch;
  }

  /** Starts the periodic sweep, and a first one now (entries a previous run left flagged). */
  start(): void {
    // Not whole during a burst: it is swept as it settles.
    this.timer = setInterval(() => this.run(), SWEEP_INTERVAL_MS);
    this.timer.unref();
    this.run();
  }

  /** Stops sweeping; waits for the sweep in progress, at most CLOSE_WAIT_MS (a provider call in it may take long). */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    clearTimeout(this.pending);
    await Promise.race([this.sweeping?.catch(() => {}), new Promise((r) => setTimeout(r, CLOSE_WAIT_MS).unref())]);
  }

  /** Schedules a sweep after an invalidation (coalesced, see SWEEP_QUIET_MS). */
  kick(): void {
    if (this.closed) return;
    const now = Date.now();
    if (this.burstFrom === undefined || now - this.lastKick >= SWEEP_SETTLE_MS) {
      this.burstFrom = now;
      this.burstUntil = now + SWEEP_MAX_DELAY_MS;
    }
    this.lastKick = now;
    this.schedule(SWEEP_QUIET_MS);
  }

  /** The burst's sweep in `ms`, or at its latest end. */
  private schedule(ms: number): void {
    clearTimeout(this.pending);
    // Not in the trace of the request whose invalidation kicked it.
    this.pending = detached(() =>
      setTimeout(
        () => {
          this.pending = undefined;
          this.run();
        },
        Math.max(0, Math.min(ms, (this.burstUntil ?? 0) - Date.now())),
      ),
    );
    this.pending.unref();
  }

  /** Sweeps now (one at a time per instance, one more if asked during it). */
  private run(): void {
    if (this.closed) return;
    if (this.sweeping) {
      this.again = true;
      return;
    }
    const now = Date.now();
    // No burst, or it settled or went on past SWEEP_REST_MAX_MS: every flagged row; invalidations from now
    // on start another burst. A burst still going on: its whole batches, and another window for the next.
    const whole = this.burstFrom === undefined || now - this.lastKick >= SWEEP_SETTLE_MS || now - this.burstFrom >= SWEEP_REST_MAX_MS;
    if (whole) this.burstFrom = this.burstUntil = undefined;
    else if (now >= this.burstUntil!) this.burstUntil = now + SWEEP_MAX_DELAY_MS;
    this.sweeping = this.sweep(whole)
      // An unavailable database is warn, not error (errorLogLevel): the next sweep tries again.
      .catch((e: unknown) => this.log[errorLogLevel(e)]({ err: e }, 'background re-fetch failed'))
      .finally(() => {
        this.sweeping = undefined;
        const { again, held } = this;
        this.again = false;
        this.held = false;
        if (again && !this.closed) this.run();
        else if (held && !this.pending && !this.closed) this.schedule(this.lastKick + SWEEP_SETTLE_MS - Date.now());
      });
  }

  /**
   * Claims and re-fetches flagged rows until none are left. Not `whole` (a burst not settled yet): an
   * extract's rows short of a whole batch are given back, for the sweep once it settles.
   */
  private async sweep(whole: boolean): Promise<void> {
    for (;;) {
      const rows = await claimFlagged(this.db, this.claimBatch, CLAIM_LEASE_SECONDS);
      if (rows.length === 0 || this.closed) return;
      const groups = new Map<string, DataCacheRow[]>();
      for (const r of rows) {
        const key = `${r.tenant_id}\u0001${r.extract_key}`;
        const group = groups.get(key);
        if (group) group.push(r);
        else groups.set(key, [r]);
      }
      const runs: Promise<unknown>[] = [];
      let kept = 0;
      for (const claimed of groups.values()) {
        const { tenant_id: tenantId, extract_key: extractKey } = claimed[0]!;
        const keep = whole ? claimed.length : claimed.length - (claimed.length % this.batch);
        if (keep < claimed.length) this.held = true;
        const group = claimed.slice(0, keep);
        await releaseClaims(
          this.db,
          tenantId,
          extractKey,
          claimed.slice(keep).map((r) => r.subject_id),
        );
        kept += group.length;
        if (group.length === 0) continue;
        const gen = this.store.generation(tenantId, extractKey);
        const [extract] = await findExtracts(this.db, tenantId, [extractKey]);
        if (!extract) continue;
        const [subjects, config] = await Promise.all([
          findSubjectsByIds(
            this.db,
            tenantId,
            group.map((r) => r.subject_id),
          ),
          loadSubjectConfig(this.db, tenantId),
        ]);
        const byId = new Map(subjects.map((s) => [s.id, s]));
        const wants: Want[] = [];
        for (const r of group) {
          const subject = byId.get(r.subject_id);
          const identifier = subject ? identifierOf(extract.source.subject_identifier, subject, config) : null;
          if (identifier === null) continue;
          const fallback =
            r.points && r.fetched_at && r.subject_identifier === identifier
              ? { points: r.points as DataPoint[], fetchedAt: r.fetched_at }
              : undefined;
          wants.push({ subject: { id: r.subject_id, identifier }, expectedVersion: r.version, removedIds: r.removed_ids, fallback });
        }
        const outcomes = this.fetcher.fetch(tenantId, extract, wants, gen, (fn) => this.refetchLimit.execute(fn));
        this.refetching += outcomes.size;
        for (const f of outcomes.values()) runs.push(f.outcome.finally(() => this.refetching--));
      }
      await Promise.all(runs);
      // Nothing fetched: what was claimed waits for the sweep scheduled after the invalidations to come.
      if (rows.length < this.claimBatch || kept === 0) return;
    }
  }
}
