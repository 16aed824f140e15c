import { randomBytes } from 'node:crypto';
import { MAX_EVENT_ID_LIST_CHARS, defineTopic, publish } from '../../../db/event-bus.js';
import type { Db } from '../../../db/tables.js';

/** What happened to the data points (the subscription's `DataPointsChangeKind`). */
export const CHANGE_KINDS = ['CHANGED', 'REMOVED', 'REFRESHED'] as const;
export type ChangeKind = (typeof CHANGE_KINDS)[number];

/**
 * Data points of some subjects (`s`, their ids; empty: the whole extract) of one extract (`x`, its key) of
 * one tenant (`t`, its id) changed (`k`) at `a` (ISO 8601). Short names: it travels in a NOTIFY payload.
 * Not an invalidation: the cache has its own event (cache/invalidation.ts); this one is what live
 * subscribers (`dataPointsChanged`, feed.ts) hear, published in the same transaction.
 * `b` names the transaction that published it: the changes of one report (one refresh, one re-fetch), one
 * per extract, are one burst, which a subscriber's backlog counts once (P91). Absent (an instance before
 * it): the event is a burst of its own.
 */
export interface DataPointsChange {
  t: string;
  x: string;
  s: string[];
  k: ChangeKind;
  a: string;
  b?: string;
}

export const DATA_POINTS_CHANGED = defineTopic<DataPointsChange>('data.points.changed', (d) => {
  const e = d as Partial<DataPointsChange> | null;
  const ok =
    typeof e === 'object' &&
    e !== null &&
    typeof e.t === 'string' &&
    typeof e.x === 'string' &&
    typeof e.a === 'string' &&
    CHANGE_KINDS.includes(e.k as ChangeKind) &&
    Array.isArray(e.s) &&
    e.s.every((x) => typeof x === 'string') &&
    (e.b === undefined || typeof e.b === 'string');
  if (!ok) throw new Error('not a data points change');
  return e as DataPointsChange;
});

/** A new burst id (`b`): one per transaction, shared by the changes it publishes. */
export function newBurst(): string {
  return randomBytes(6).toString('base64url');
}

/**
 * Publishes a change of an extract's data points in `trx`'s transaction (heard by every instance's live
 * subscribers once it commits). `subjectIds` null or too many to send: the whole extract.
 */
export async function publishDataPointsChange(
  trx: Db,
  change: { tenantId: string; extractKey: string; subjectIds: readonly string[] | null; kind: ChangeKind },
  burst: string,
): Promise<void> {
  const ids = change.subjectIds ?? [];
  const s = JSON.stringify(ids).length > MAX_EVENT_ID_LIST_CHARS ? [] : [...ids];
  const event: DataPointsChange = { t: change.tenantId, x: change.extractKey, s, k: change.kind, a: new Date().toISOString(), b: burst };
  await publish(trx, DATA_POINTS_CHANGED, event);
}
