import { bulkhead } from 'cockatiel';
import type { Logger } from 'pino';
import type { Config } from '../../../core/config.js';
import type { DataCacheRow, Db } from '../../../db/tables.js';
import { findSubjectsByIds, loadSubjectConfig } from '../../subject/index.js';
import { type DataPoint, claimFlagged, findExtracts, identifierOf } from '../model/index.js';
import type { CacheFetcher, Want } from './fetcher.js';
import type { CacheStore } from './store.js';

const CLAIM_BATCH = 200;
const CLAIM_LEASE_SECONDS = 120;
const SWEEP_INTERVAL_MS = 30_000;
const CLOSE_WAIT_MS = 5_000;

/**
 * The background re-fetch of flagged entries that hold data: after an invalidation (`kick`) and every
 * 30 s. Rows are claimed first (FOR UPDATE SKIP LOCKED, with a lease), so with several instances one of
 * them re-fetches an entry and a crashed instance's claims lapse; at most PROVIDER_REFETCH_CONCURRENCY
 * provider calls run at once.
 */
export class CacheSweep {
  private readonly refetchLimit;
  private sweeping: Promise<void> | undefined;
  private sweepAgain = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Db,
    private readonly store: CacheStore,
    private readonly fetcher: CacheFetcher,
    config: Config,
    private readonly log: Logger,
  ) {
    this.refetchLimit = bulkhead(config.PROVIDER_REFETCH_CONCURRENCY, Number.POSITIVE_INFINITY);
  }

  /** Starts the periodic sweep, and a first one now (entries a previous run left flagged). */
  start(): void {
    this.timer = setInterval(() => this.kick(), SWEEP_INTERVAL_MS);
    this.timer.unref();
    this.kick();
  }

  /** Stops sweeping; waits for the sweep in progress, at most CLOSE_WAIT_MS (a provider call in it may take long). */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    await Promise.race([this.sweeping?.catch(() => {}), new Promise((r) => setTimeout(r, CLOSE_WAIT_MS).unref())]);
  }

  /** Schedules a sweep (coalesced: one at a time per instance, one more if kicked during it). */
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

  private async sweep(): Promise<void> {
    for (;;) {
      const rows = await claimFlagged(this.db, CLAIM_BATCH, CLAIM_LEASE_SECONDS);
      if (rows.length === 0 || this.closed) return;
      const groups = new Map<string, DataCacheRow[]>();
      for (const r of rows)
        groups.set(`${r.tenant_id}\u0001${r.extract_key}`, [...(groups.get(`${r.tenant_id}\u0001${r.extract_key}`) ?? []), r]);
      const runs: Promise<unknown>[] = [];
      for (const group of groups.values()) {
        const { tenant_id: tenantId, extract_key: extractKey } = group[0]!;
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
        runs.push(...outcomes.values());
      }
      await Promise.all(runs);
      if (rows.length < CLAIM_BATCH) return;
    }
  }
}
