import { MAX_EVENT_ID_LIST_CHARS, defineTopic, publish } from '../../db/event-bus.js';
import type { Db } from '../../db/tables.js';
import { flagExtract } from './data.repository.js';
import { publishDataPointsChange } from './data-points.events.js';

/**
 * What changed: entries of some subjects (`s`, their ids) of one extract (`x`, its key) of one tenant
 * (`t`, its id), or all of the extract's entries (`s: null`). Short names: it travels in a NOTIFY payload.
 */
export interface Invalidation {
  t: string;
  x: string;
  s: string[] | null;
}

/** An invalidation as published: `m`, when present, lets the sending instance recognise its own. */
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
 * Publishes an invalidation in `trx`'s transaction (every instance drops the entries from its in-process
 * cache once it commits). Returns what was sent: one naming too many subjects is widened to the extract.
 */
export async function publishInvalidation(trx: Db, given: Invalidation, m?: string): Promise<Invalidation> {
  const inv = given.s !== null && JSON.stringify(given.s).length > MAX_EVENT_ID_LIST_CHARS ? { ...given, s: null } : given;
  await publish(trx, CACHE_INVALIDATED, m === undefined ? inv : { ...inv, m });
  return inv;
}

/**
 * Flags every cached entry of an extract stale and invalidates it on every instance, in the caller's
 * transaction (a refresh, changed options or data source: P37). Returns how many entries were flagged.
 */
export async function invalidateExtract(trx: Db, tenantId: string, extractKey: string): Promise<number> {
  const n = await flagExtract(trx, tenantId, extractKey);
  await publishInvalidation(trx, { t: tenantId, x: extractKey, s: null });
  await publishDataPointsChange(trx, { tenantId, extractKey, subjectIds: null, kind: 'REFRESHED' });
  return n;
}
