import { MAX_EVENT_ID_LIST_CHARS, defineTopic, publish } from '../../../db/event-bus.js';
import type { Db } from '../../../db/tables.js';
import { type ChangeKind, newBurst, publishDataPointsChange } from '../live/index.js';
import { flagExtract, flagSubject } from '../model/index.js';

/**
 * What changed: entries of some subjects (`s`, their ids) of one extract (`x`, its key) of one tenant
 * (`t`, its id), or all of the extract's entries (`s: null`). Short names: it travels in a NOTIFY payload.
 */
export interface Invalidation {
  t: string;
  x: string;
  s: string[] | null;
}

/**
 * An invalidation as published: `m` lets the instance answering the change recognise its own (it
 * re-fetches); `r` marks one whose sender has no DataCache (a tenant file): whoever hears it re-fetches.
 */
export interface InvalidationEvent extends Invalidation {
  m?: string;
  r?: true;
}

/** The cache invalidation event of every instance's DataCache (D10). */
export const CACHE_INVALIDATED = defineTopic<InvalidationEvent>('data.cache.invalidated', (d) => {
  const e = d as Partial<InvalidationEvent> | null;
  const ok =
    typeof e === 'object' &&
    e !== null &&
    typeof e.t === 'string' &&
    typeof e.x === 'string' &&
    (e.m === undefined || typeof e.m === 'string') &&
    (e.r === undefined || e.r === true) &&
    (e.s === null || (Array.isArray(e.s) && e.s.every((x) => typeof x === 'string')));
  if (!ok) throw new Error('not a cache invalidation');
  return e as InvalidationEvent;
});

/**
 * What changed in one transaction: some entries of a tenant's extracts (per extract, the subjects; null:
 * every entry, as a refresh, new options or a new data source), and what live subscribers hear of it.
 */
export interface DataChange {
  tenantId: string;
  /** Per extract, the subjects (null: every entry) and the point ids reported created again, by subject id. */
  extracts: readonly { key: string; subjectIds: readonly string[] | null; recreatedIds?: ReadonlyMap<string, readonly string[]> }[];
  kind: ChangeKind;
  /** Point ids reported removed: they leave the cached sets at once. */
  removedIds?: readonly string[] | undefined;
}

/** What `invalidate` did: the number of entries flagged. */
export interface Invalidated {
  flagged: number;
}

/** The DataCache of the instance answering the change (DataCache.answering): it expects the events before the commit. */
export interface Answering {
  /** Registers an invalidation about to be published; returns the `m` that marks it as this instance's. */
  expect(inv: Invalidation): string;
}

/**
 * The one way data is invalidated (a change report, a refresh, new options or data source, a tenant
 * file), in the caller's transaction `trx`: flags the entries (a subject's uncached entry gets a flag-only
 * row, so a fetch in flight cannot store its answer as fresh; an extract's epoch moves), publishes the
 * cache invalidation and the live change, both of which leave on commit. Every instance applies the
 * invalidation when it hears it. The instance answering a request (`answering`, its transaction opened by
 * DataCache.answering) applies it at once, waits for its delivery and re-fetches; without one (a tenant
 * file), every instance that hears it re-fetches.
 */
export async function invalidate(trx: Db, change: DataChange, answering?: Answering): Promise<Invalidated> {
  const { tenantId, kind } = change;
  const burst = newBurst();
  const out: Invalidated = { flagged: 0 };
  for (const x of change.extracts) {
    if (x.subjectIds === null) out.flagged += await flagExtract(trx, tenantId, x.key);
    else {
      await flagSubject(trx, tenantId, [x.key], x.subjectIds, change.removedIds ?? [], x.recreatedIds ?? new Map());
      out.flagged += x.subjectIds.length;
    }
    // Too many subjects for a NOTIFY payload: the whole extract.
    const s = x.subjectIds === null || JSON.stringify(x.subjectIds).length > MAX_EVENT_ID_LIST_CHARS ? null : [...x.subjectIds];
    const inv: Invalidation = { t: tenantId, x: x.key, s };
    await publish(trx, CACHE_INVALIDATED, answering ? { ...inv, m: answering.expect(inv) } : { ...inv, r: true });
    await publishDataPointsChange(trx, { tenantId, extractKey: x.key, subjectIds: x.subjectIds, kind }, burst);
  }
  return out;
}

/**
 * Change reports (D10) of one instance flagged together (group commit): the first report flushes at once;
 * those arriving while a flush runs wait for the next, which flags them all in one transaction on one
 * connection, reports without removals merged into one statement and one pair of events per tenant and
 * extract. Each report is answered once the transaction holding its flags has committed and its
 * invalidations have reached every instance (`answering`, DataCache.answering), as if it ran alone. A flush
 * that fails runs each of its reports alone, so a report's failure stays its own.
 */
export class ReportBatch {
  private queue: { change: DataChange; done: () => void; failed: (e: unknown) => void }[] = [];
  private flushing = false;

  constructor(private readonly answering: <T>(fn: (trx: Db, answering: Answering) => Promise<T>) => Promise<T>) {}

  /** Flags a change report's entries with the next flush; resolves when its invalidations were delivered. */
  report(change: DataChange): Promise<void> {
    const reported = new Promise<void>((done, failed) => this.queue.push({ change, done, failed }));
    if (!this.flushing) void this.flush();
    return reported;
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      await this.flushAll();
    } finally {
      // Whatever went wrong, the next report starts a flush again.
      this.flushing = false;
    }
  }

  private async flushAll(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, MAX_REPORTS_PER_FLUSH);
      try {
        await this.answering(async (trx, answering) => {
          for (const change of merged(batch.map((q) => q.change))) await invalidate(trx, change, answering);
        });
        for (const q of batch) q.done();
      } catch (e) {
        if (batch.length === 1) batch[0]!.failed(e);
        else
          await Promise.all(
            batch.map((q) => this.answering((trx, answering) => invalidate(trx, q.change, answering)).then(q.done, q.failed)),
          );
      }
    }
  }
}

/** Reports one flush takes at most: their subjects' ids still fit an event (MAX_EVENT_ID_LIST_CHARS, ~150 uuids). */
const MAX_REPORTS_PER_FLUSH = 100;

/**
 * The changes of a flush: the reports without removals (kind CHANGED) merged into one change per tenant,
 * each extract's subjects the union of theirs, each subject's recreated ids the union of its reports'
 * (concurrent reports have no order among them, so any is theirs); a report with removals stays its own
 * (its removed ids apply to its subjects only).
 */
function merged(changes: readonly DataChange[]): DataChange[] {
  const alone: DataChange[] = [];
  const byTenant = new Map<string, Map<string, Map<string, Set<string>>>>();
  for (const c of changes) {
    if (c.kind !== 'CHANGED' || (c.removedIds ?? []).length > 0 || c.extracts.some((x) => x.subjectIds === null)) {
      alone.push(c);
      continue;
    }
    let extracts = byTenant.get(c.tenantId);
    if (!extracts) byTenant.set(c.tenantId, (extracts = new Map()));
    for (const x of c.extracts) {
      let subjects = extracts.get(x.key);
      if (!subjects) extracts.set(x.key, (subjects = new Map()));
      for (const id of x.subjectIds!) {
        let ids = subjects.get(id);
        if (!ids) subjects.set(id, (ids = new Set()));
        for (const r of x.recreatedIds?.get(id) ?? []) ids.add(r);
      }
    }
  }
  const together = [...byTenant].map(([tenantId, extracts]): DataChange => ({
    tenantId,
    kind: 'CHANGED',
    extracts: [...extracts].map(([key, subjects]) => ({
      key,
      subjectIds: [...subjects.keys()],
      recreatedIds: new Map([...subjects].map(([id, ids]) => [id, [...ids]])),
    })),
  }));
  return [...together, ...alone];
}
