import type { Logger } from 'pino';
import { AppError, ServiceUnavailableError, TooManyRequestsError, UnauthenticatedError } from '../../../core/errors.js';
import type { Principal } from '../../../core/permissions.js';
import { atInstant } from '../../../core/timers.js';
import type { EventBus, Unsubscribe } from '../../../db/event-bus.js';
import type { Db } from '../../../db/tables.js';
import { errorLogLevel } from '../../../http/errors.js';
import { subjectsLocatedIn } from '../../subject/index.js';
import { type ChangeKind, DATA_POINTS_CHANGED, type DataPointsChange } from './events.js';

declare module '../../../graphql/context.js' {
  interface Context {
    /** The instance's live data point changes (the `dataPointsChanged` subscription). */
    dataChanges: DataChangeFeed;
  }
}

/** One event as a subscriber receives it. `subjectIds` empty: the whole extract. */
export interface DataPointsChangeOut {
  extractKey: string;
  subjectIds: string[];
  kind: ChangeKind;
  at: string;
}

/** What a subscription yields: a change, or the error that ends it (the last item before it completes). */
export type Delivery = { change: DataPointsChangeOut } | { end: AppError };

/** What a subscriber wants to hear of; each part optional (absent: every extract, subject, entity). */
export interface ChangeFilter {
  extractKey?: string | undefined;
  subjectIds?: ReadonlySet<string> | undefined;
  /** Subjects located at this entity or below it, as located when the event arrives. */
  structuralEntityKey?: string | undefined;
}

/**
 * A subscriber's unread events are coalesced per extract (kinds merged, subject ids united), so what one
 * waiting subscriber holds is bounded by the tenant's extracts whatever the event rate; past
 * MAX_PENDING_SUBJECTS ids widen to "the whole extract". A subscriber is judged by what really waits
 * (P91): the changes of one burst (one report, refresh or re-fetch: one transaction, one event per
 * extract it touched) count once, since they arrive together however fast the reader; one with unread
 * changes of more than MAX_PENDING_BURSTS bursts is not keeping up and is ended (SLOW_CONSUMER).
 */
export const MAX_PENDING_BURSTS = 64;
export const MAX_PENDING_SUBJECTS = 1_000;
/** Events of one tenant waiting for the entity query (per event, shared by its subscribers); past it, ids widen. */
const MAX_ENTITY_BACKLOG = 100;
/**
 * `Retry-After` of a subscription refused past SUBSCRIPTIONS_PER_CLIENT (P92), as admission's concurrency
 * 429: a place frees as soon as the client ends one of its streams and the instance sees it close.
 */
export const SUBSCRIPTION_RETRY_AFTER_SECONDS = 1;

/**
 * A follower of every change the feed hears, in process (the live aggregates): `heard` for each event,
 * `interrupted` when the feed can no longer hear (the bus dropped, an unreadable event, the instance
 * stopping), after which changes may have been missed.
 */
export interface ChangeListener {
  heard(e: DataPointsChange): void;
  interrupted(error: AppError): void;
}

/** What the feed tells the instance's metrics: a subscriber ended for falling behind (SLOW_CONSUMER), with the unread changes it dropped. */
export interface LiveMeter {
  slowConsumer(droppedChanges: number): void;
}

/** Ends a subscription when its token expires: `end` gets UNAUTHENTICATED at `expiresAt` (ms). Returns what cancels it. */
export function endAtTokenExpiry(expiresAt: number, end: (error: AppError) => void): () => void {
  return atInstant(expiresAt, () =>
    end(
      new UnauthenticatedError(
        'The access token expired: the subscription ended. Subscribe again with a new token.',
        'Bearer error="invalid_token", error_description="The access token expired."',
      ),
    ),
  );
}

/**
 * One subscriber's end: an async iterator over its deliveries, its unread events coalesced and bounded.
 * Ends (once) when the client goes, its token expires, it falls too far behind, or the feed stops.
 */
class Subscription implements AsyncIterableIterator<Delivery> {
  /** Unread changes by extract (made when the first one waits: most subscribers keep up), each with the burst that queued it. */
  private pending: Map<string, { change: DataPointsChangeOut; burst: string }> | undefined;
  /** The bursts that queued the unread changes, with how many of those each queued. */
  private readonly bursts = new Map<string, number>();
  /** Names the bursts of events that carry none (each its own). */
  private unnamed = 0;
  private pendingSubjects = 0;
  private waiter: ((r: IteratorResult<Delivery>) => void) | undefined;
  /** undefined: open; null: ended quietly; an error: ended with it (delivered once, then done). */
  private ending: AppError | null | undefined;
  private readonly cancelExpiry: (() => void) | undefined;

  constructor(
    readonly principal: Principal,
    readonly filter: ChangeFilter,
    /** Called once as it ends. */
    private readonly release: (sub: Subscription) => void,
    private readonly meter?: LiveMeter,
  ) {
    if (principal.expiresAt !== undefined) this.cancelExpiry = endAtTokenExpiry(principal.expiresAt, (e) => this.end(e));
  }

  get open(): boolean {
    return this.ending === undefined;
  }

  /** The subject ids of `e` this subscriber may hear of before its entity filter: undefined if none. */
  match(e: DataPointsChange): string[] | undefined {
    const f = this.filter;
    if (f.extractKey !== undefined && f.extractKey !== e.x) return undefined;
    if (e.s.length === 0 || !f.subjectIds) return e.s;
    const ids = e.s.filter((id) => f.subjectIds!.has(id));
    return ids.length > 0 ? ids : undefined;
  }

  /** `burst`: the event's `b` (absent: a burst of its own). */
  push(change: DataPointsChangeOut, burst: string = `#${++this.unnamed}`): void {
    if (this.ending !== undefined) return;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w({ value: { change }, done: false });
      return;
    }
    const pending = (this.pending ??= new Map());
    const entry = pending.get(change.extractKey);
    if (!entry && !this.bursts.has(burst) && this.bursts.size >= MAX_PENDING_BURSTS) {
      this.meter?.slowConsumer(pending.size + 1);
      this.end(
        new AppError(
          503,
          'SLOW_CONSUMER',
          `The subscriber fell behind by the changes of more than ${MAX_PENDING_BURSTS} reports, refreshes or re-fetches; subscribe again and reload.`,
        ),
      );
      return;
    }
    const queued = entry?.change;
    let merged = change;
    if (queued) {
      this.pendingSubjects -= queued.subjectIds.length;
      const whole = queued.subjectIds.length === 0 || change.subjectIds.length === 0;
      merged = {
        extractKey: change.extractKey,
        subjectIds: whole ? [] : [...new Set([...queued.subjectIds, ...change.subjectIds])],
        kind: queued.kind === change.kind ? change.kind : 'CHANGED',
        at: change.at > queued.at ? change.at : queued.at,
      };
      // Re-inserted: a merged change leaves after the others that waited.
      pending.delete(change.extractKey);
    }
    if (this.pendingSubjects + merged.subjectIds.length > MAX_PENDING_SUBJECTS) merged = { ...merged, subjectIds: [] };
    this.pendingSubjects += merged.subjectIds.length;
    // A change merged into one already waiting adds nothing to wait for: it stays with the burst that queued it.
    if (!entry) this.bursts.set(burst, (this.bursts.get(burst) ?? 0) + 1);
    pending.set(change.extractKey, { change: merged, burst: entry?.burst ?? burst });
  }

  /** Ends the subscription: quietly (null) or with an error delivered as its last item. Unread events are dropped. */
  end(error: AppError | null): void {
    if (this.ending !== undefined) return;
    this.ending = error;
    this.pending = undefined;
    this.bursts.clear();
    this.pendingSubjects = 0;
    this.cancelExpiry?.();
    this.release(this);
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w(this.finish());
    }
  }

  next(): Promise<IteratorResult<Delivery>> {
    if (this.ending !== undefined) return Promise.resolve(this.finish());
    const first = this.pending?.values().next();
    if (first && !first.done) {
      const { change, burst } = first.value;
      this.pending!.delete(change.extractKey);
      this.pendingSubjects -= change.subjectIds.length;
      const left = this.bursts.get(burst)! - 1;
      if (left > 0) this.bursts.set(burst, left);
      else this.bursts.delete(burst);
      return Promise.resolve({ value: { change }, done: false });
    }
    return new Promise((resolve) => (this.waiter = resolve));
  }

  /** The consumer stopped reading (the client went away, or the stream was cancelled). */
  return(): Promise<IteratorResult<Delivery>> {
    this.end(null);
    this.ending = null;
    return Promise.resolve({ value: undefined, done: true });
  }

  throw(): Promise<IteratorResult<Delivery>> {
    return this.return();
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  private finish(): IteratorResult<Delivery> {
    const error = this.ending;
    if (!error) return { value: undefined, done: true };
    // The error once, then done.
    this.ending = null;
    return { value: { end: error }, done: false };
  }
}

/**
 * Live data point changes for the `dataPointsChanged` subscription, one per instance (docs/data-cache.md,
 * "Live updates"). It follows DATA_POINTS_CHANGED on the instance's event bus (one subscription, whatever
 * the number of subscribers) and fans each event out in process to the subscribers of its tenant whose
 * filter it passes. A filter by structural entity is resolved per event with one query per entity key
 * (shared by every subscriber of that entity), so it follows subjects moved after subscribing.
 */
export class DataChangeFeed {
  private readonly byTenant = new Map<string, Set<Subscription>>();
  private readonly perClient = new Map<string, number>();
  /** Per tenant, the entity-filtered deliveries in event order, and how many events wait in it. */
  private readonly entityQueues = new Map<string, { tail: Promise<void>; waiting: number }>();
  private readonly listeners = new Set<ChangeListener>();
  private unsubscribe: Unsubscribe | undefined;
  private listening = false;
  private closed = false;

  constructor(
    private readonly db: Db,
    private readonly limits: { perClient: number },
    private readonly log: Logger,
    private readonly meter?: LiveMeter,
  ) {}

  /** Follows every instance's changes on `bus` (absent: subscriptions are refused, nothing could be heard). */
  start(bus?: EventBus): void {
    if (!bus) return;
    const interrupted = () =>
      this.endAll(
        new ServiceUnavailableError('Live updates were interrupted and changes may have been missed: subscribe again and reload.'),
      );
    this.unsubscribe = bus.subscribe(DATA_POINTS_CHANGED, (e) => this.received(e), {
      connected: () => {
        this.listening = true;
      },
      disconnected: () => {
        this.listening = false;
        interrupted();
      },
      unreadable: interrupted,
    });
  }

  /** Ends every subscription (SERVICE_UNAVAILABLE: the instance is stopping), refuses new ones, and stops following the bus. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    this.endAll(new ServiceUnavailableError('The service instance is shutting down: subscribe again.'));
  }

  /** Open subscriptions on this instance. */
  get size(): number {
    let n = 0;
    for (const subs of this.byTenant.values()) n += subs.size;
    return n;
  }

  /**
   * Opens a subscription for `principal` (its tenant only; ends when its token expires). Refused while
   * the instance cannot hear changes (SERVICE_UNAVAILABLE) and past SUBSCRIPTIONS_PER_CLIENT open ones of
   * the same client on this instance (TOO_MANY_REQUESTS).
   */
  open(principal: Principal, filter: ChangeFilter): AsyncIterableIterator<Delivery> {
    const free = this.hold(principal);
    const sub = new Subscription(
      principal,
      filter,
      (ended) => {
        const subs = this.byTenant.get(ended.principal.tenantId);
        if (subs?.delete(ended) && subs.size === 0) this.byTenant.delete(ended.principal.tenantId);
        free();
      },
      this.meter,
    );
    let subs = this.byTenant.get(principal.tenantId);
    if (!subs) this.byTenant.set(principal.tenantId, (subs = new Set()));
    subs.add(sub);
    return sub;
  }

  /**
   * Counts one open subscription of `principal`'s client, of any live field (this feed's and the live
   * aggregates'), refused as `open` says; the function returned frees its place (once, however often called).
   */
  hold(principal: Principal): () => void {
    if (this.closed) throw new ServiceUnavailableError('This service instance is shutting down: subscribe again.');
    if (!this.listening) throw new ServiceUnavailableError('Live updates are unavailable on this instance now; retry shortly.');
    const client = clientKey(principal);
    const count = this.perClient.get(client) ?? 0;
    if (count >= this.limits.perClient) {
      throw new TooManyRequestsError(
        `The client has ${count} open subscriptions, the most one client may hold on an instance (SUBSCRIPTIONS_PER_CLIENT = ${this.limits.perClient}); end one first.`,
        { 'Retry-After': String(SUBSCRIPTION_RETRY_AFTER_SECONDS) },
      );
    }
    this.perClient.set(client, count + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = (this.perClient.get(client) ?? 1) - 1;
      if (left > 0) this.perClient.set(client, left);
      else this.perClient.delete(client);
    };
  }

  /** Hands `listener` every event the feed hears, of every tenant, until the function returned is called. */
  follow(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private endAll(error: AppError): void {
    for (const l of [...this.listeners]) l.interrupted(error);
    for (const subs of [...this.byTenant.values()]) for (const sub of [...subs]) sub.end(error);
  }

  private received(e: DataPointsChange): void {
    for (const l of this.listeners) l.heard(e);
    const subs = this.byTenant.get(e.t);
    if (!subs) return;
    const byEntity = new Map<string, [Subscription, string[]][]>();
    for (const sub of subs) {
      const ids = sub.match(e);
      if (!ids) continue;
      const entity = sub.filter.structuralEntityKey;
      if (entity === undefined) sub.push({ extractKey: e.x, subjectIds: ids, kind: e.k, at: e.a }, e.b);
      else byEntity.set(entity, [...(byEntity.get(entity) ?? []), [sub, ids]]);
    }
    if (byEntity.size > 0) this.deliverByEntity(e, byEntity);
  }

  /**
   * Delivers an event to entity-filtered subscribers once one query per entity key says which of its
   * subjects are located there; in event order per tenant. An event naming the whole extract needs no
   * query; so does one arriving while too many wait (or whose query fails): it is delivered as naming
   * the whole extract, which tells a subscriber to reload rather than miss a change.
   */
  private deliverByEntity(e: DataPointsChange, byEntity: Map<string, [Subscription, string[]][]>): void {
    const queue = this.entityQueues.get(e.t) ?? { tail: Promise.resolve(), waiting: 0 };
    this.entityQueues.set(e.t, queue);
    const widen = e.s.length === 0 || queue.waiting >= MAX_ENTITY_BACKLOG;
    queue.waiting++;
    const located = new Map<string, Promise<ReadonlySet<string> | undefined>>();
    if (!widen) {
      // Started at once (the queries of successive events overlap); only the deliveries wait their turn.
      for (const entity of byEntity.keys()) {
        located.set(
          entity,
          subjectsLocatedIn(this.db, e.t, entity, e.s).then(
            (ids) => new Set(ids),
            (err: unknown) => {
              this.log.warn({ err, entity }, 'live updates: locating the subjects of a change failed; sent as the whole extract');
              return undefined;
            },
          ),
        );
      }
    }
    queue.tail = queue.tail.then(async () => {
      for (const [entity, targets] of byEntity) {
        const inEntity = widen ? undefined : await located.get(entity);
        for (const [sub, ids] of targets) {
          if (!sub.open) continue;
          const subjectIds = inEntity === undefined ? [] : ids.filter((id) => inEntity.has(id));
          if (inEntity !== undefined && subjectIds.length === 0) continue;
          sub.push({ extractKey: e.x, subjectIds, kind: e.k, at: e.a }, e.b);
        }
      }
    });
    queue.tail = queue.tail
      .catch((err: unknown) => this.log[errorLogLevel(err)]({ err }, 'live updates: a delivery failed'))
      .finally(() => {
        if (--queue.waiting === 0 && this.entityQueues.get(e.t) === queue) this.entityQueues.delete(e.t);
      });
  }
}

function clientKey(p: Principal): string {
  return `${p.tenantId}\u0001${p.clientId}`;
}
