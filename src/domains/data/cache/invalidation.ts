import { randomUUID } from 'node:crypto';
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

/** An invalidation as published: `m` lets the sending instance recognise its own. */
export interface InvalidationEvent extends Invalidation {
  m?: string;
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

/** What `invalidate` did: entries flagged, and the events the sending instance waits for (DataCache.delivered). */
export interface Invalidated {
  flagged: number;
  sent: InvalidationEvent[];
}

/**
 * The one way data is invalidated (a change report, a refresh, new options or data source, a tenant
 * file), in the caller's transaction `trx`: flags the entries (a subject's uncached entry gets a flag-only
 * row, so a fetch in flight cannot store its answer as fresh; an extract's epoch moves), publishes the
 * cache invalidation and the live change, both of which leave on commit. Every instance applies the
 * invalidation when it hears it and starts re-fetching; the instance answering a request applies it at
 * once and waits for its delivery too, by passing the result to `DataCache.delivered` after the commit.
 */
export async function invalidate(trx: Db, change: DataChange): Promise<Invalidated> {
  const { tenantId, kind } = change;
  const burst = newBurst();
  const out: Invalidated = { flagged: 0, sent: [] };
  for (const x of change.extracts) {
    if (x.subjectIds === null) out.flagged += await flagExtract(trx, tenantId, x.key);
    else {
      await flagSubject(trx, tenantId, [x.key], x.subjectIds, change.removedIds ?? [], change.recreatedIds ?? []);
      out.flagged += x.subjectIds.length;
    }
    // Too many subjects for a NOTIFY payload: the whole extract.
    const s = x.subjectIds === null || JSON.stringify(x.subjectIds).length > MAX_EVENT_ID_LIST_CHARS ? null : [...x.subjectIds];
    const event: InvalidationEvent = { t: tenantId, x: x.key, s, m: randomUUID() };
    await publish(trx, CACHE_INVALIDATED, event);
    out.sent.push(event);
    await publishDataPointsChange(trx, { tenantId, extractKey: x.key, subjectIds: x.subjectIds, kind }, burst);
  }
  return out;
}
