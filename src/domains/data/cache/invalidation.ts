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
  extracts: readonly { key: string; subjectIds: readonly string[] | null }[];
  kind: ChangeKind;
  /** Point ids reported removed (they leave the cached sets at once) and reported created again. */
  removedIds?: readonly string[] | undefined;
  recreatedIds?: readonly string[] | undefined;
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
      await flagSubject(trx, tenantId, [x.key], x.subjectIds, change.removedIds ?? [], change.recreatedIds ?? []);
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
