import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { AppError, ServiceUnavailableError } from '../../../core/errors.js';
import { type Principal, requirePermission } from '../../../core/permissions.js';
import { detached } from '../../../core/tracing.js';
import type { Db } from '../../../db/tables.js';
import type { Context } from '../../../graphql/context.js';
import { SHARED_EVENT, type SharedEvent } from '../../../graphql/shared-events.js';
import { errorLogLevel } from '../../../http/errors.js';
import { subjectsLocatedIn } from '../../subject/index.js';
import type { StaleNotice } from '../cache/index.js';
import { type DataChangeFeed, type DataPointsChange, endAtTokenExpiry, endWhenClientGoes } from '../live/index.js';
import { type Aggregation, type DataPointAggregatesInput, aggregateDataPoints } from './aggregate.service.js';

declare module '../../../graphql/context.js' {
  interface Context {
    /** The instance's live aggregates (the `dataPointAggregatesChanged` subscription). */
    liveAggregates: LiveAggregates;
  }
}

/**
 * A question's answer is computed again this long after the last change heard under it (a burst of
 * change reports is one computation)…
 */
export const LIVE_AGGREGATE_QUIET_MS = 150;
/** …but at most this long after the first change of the burst, however long it goes on. */
export const LIVE_AGGREGATE_MAX_DELAY_MS = 1_000;
/** A computation refused by admission is tried again this much later. */
const ADMISSION_RETRY_MS = 1_000;
/** A joiner's first answer is the group's latest if it is at most this old; else it is computed again. */
const LIVE_AGGREGATE_REUSE_MS = 60_000;

/** What a subscriber receives: an answer, a computation's error (the stream goes on), or the error that ends it. */
export type AggregateDelivery = { answer: Aggregation } | { error: unknown } | { end: AppError };

/** One computation's outcome, with what identifies it (equal prints: nothing to push); `partial`: an answer while its sets arrive (P131). */
type Outcome =
  | { answer: Aggregation; stale: StaleNotice[]; print: string; partial?: true }
  | { error: unknown; print: string; refused?: true; partial?: undefined };

/** Waits for admission (P52) for work of this D11 cost; resolves with the function giving the units back. */
export type Admit = (who: { tenant: string; client: string }, cost: number) => Promise<() => void>;

/** One distinct question of one tenant, asked with one set of permissions, and its subscribers on this instance. */
interface Group {
  key: string;
  input: DataPointAggregatesInput;
  fractions: number[];
  /** The subscriber that joined last: its principal (the freshest versions) computes the answers. */
  principal: Principal;
  /** The D11 cost of the costliest subscriber's operation: what a computation is admitted for. */
  cost: number;
  /** The entity keys whose subjects (descendants included) hold every subject of the question; undefined: any subject may. */
  entityKeys: string[] | undefined;
  subscribers: Set<AggregateSubscriber>;
  /** The latest computation (a joiner's first answer while it is under way, or succeeded a moment ago). */
  latest: Latest | undefined;
  /** When the first change not yet computed was heard (undefined: none waits). */
  dirtySince: number | undefined;
  timer: NodeJS.Timeout | undefined;
  computing: boolean;
}

/** One computation of a group: its outcome and, while a first answer's sets arrive, its latest partial answer (P131). */
interface Latest {
  outcome: Promise<Outcome>;
  failed: boolean;
  settledAt?: number;
  partial?: Outcome;
  /** Resolves (with nothing) once its first partial answer was pushed. */
  partialHeard: Promise<void>;
  heard: () => void;
}

/**
 * Live aggregates, one per instance (docs/data-cache.md, "Live aggregates"; P109–P111). Subscribers of
 * the same question (tenant, permissions, input, percentiles) form one group, which computes the
 * answer once per burst of changes and pushes it to every subscriber whose last answer differs. It
 * follows the instance's DataChangeFeed (the event bus, so changes taken by any instance): a change of
 * the question's extract, of subjects that may be under it, marks the group; the group computes
 * LIVE_AGGREGATE_QUIET_MS after the last such change, at most LIVE_AGGREGATE_MAX_DELAY_MS after the first.
 */
export class LiveAggregates {
  private readonly groups = new Map<string, Group>();
  private readonly byTenant = new Map<string, Set<Group>>();
  private readonly unfollow: () => void;
  /** Computations made, by why: a subscriber's first answer, or changes heard. */
  readonly computations = { subscribe: 0, change: 0 };

  constructor(
    private readonly db: Db,
    private readonly feed: DataChangeFeed,
    /** A context for computing an answer as `principal` outside any request. */
    private readonly contextFor: (principal: Principal) => Context,
    private readonly admit: Admit,
    private readonly log: Logger,
  ) {
    this.unfollow = feed.follow({ heard: (e) => this.heard(e), interrupted: (error) => this.endAll(error) });
  }

  /** Open subscriptions and distinct questions on this instance. */
  get size(): { subscriptions: number; groups: number } {
    let subscriptions = 0;
    for (const g of this.groups.values()) subscriptions += g.subscribers.size;
    return { subscriptions, groups: this.groups.size };
  }

  /**
   * Opens a subscription to `input` for the request `ctx` (its operation costs `cost` by D11), its first
   * delivery the current answer. Refused as the query would refuse the question (its permissions, its
   * input, admission), and as `dataPointsChanged` is refused (SUBSCRIPTIONS_PER_CLIENT, counted together;
   * an instance that cannot hear changes).
   */
  async open(ctx: Context, input: DataPointAggregatesInput, fractions: readonly number[], cost: number): Promise<AggregateSubscriber> {
    const { principal } = ctx;
    requirePermission(principal, 'View:DataExtract');
    requirePermission(principal, 'List:Subject');
    const free = this.feed.hold(principal);
    const asked = [...new Set(fractions)].sort((a, b) => a - b);
    const key = groupKey(principal, input, asked);
    let group = this.groups.get(key);
    if (!group) {
      group = newGroup(key, input, asked, principal, cost);
      this.groups.set(key, group);
      let tenant = this.byTenant.get(principal.tenantId);
      if (!tenant) this.byTenant.set(principal.tenantId, (tenant = new Set()));
      tenant.add(group);
    }
    const g = group;
    g.principal = principal;
    g.cost = Math.max(g.cost, cost);
    const sub = new AggregateSubscriber(principal, ctx.staleData, () => {
      free();
      this.leave(g, sub);
    });
    g.subscribers.add(sub);
    endWhenClientGoes(ctx, sub);
    // The current answer: the group's, or computed now as the query would (its refusals are the subscription's).
    // An answer older than LIVE_AGGREGATE_REUSE_MS may be past its sets' TTL: computed again (P109).
    const l = g.latest;
    // A first answer whose sets are cold is preceded by partial answers, pushed to the group's subscribers
    // with no full answer yet (P131); a joiner during the fill gets the latest one at once.
    if (!l || l.failed || (l.settledAt !== undefined && Date.now() - l.settledAt > LIVE_AGGREGATE_REUSE_MS)) {
      // Computing as a change's computation is: changes heard meanwhile wait for it, so it stays the latest.
      g.computing = true;
      const started = this.start(g, (s) => this.compute(g, { ...ctx, operation: 'query' }, 'subscribe', (o) => this.partial(g, s, o)));
      void started.outcome.then(() => this.computed(g, false));
    }
    const latest = g.latest!;
    if (latest.partial) sub.push(latest.partial);
    const first = await Promise.race([latest.outcome, latest.partialHeard]);
    if (first === undefined) {
      // Open from the partial answer on; the full one follows as the stream's next event, or the query's
      // refusal of the question (an AppError) ends the stream with it.
      void latest.outcome.then((o) => ('error' in o && o.error instanceof AppError ? sub.refuse(o.error) : sub.push(o, true)));
      return sub;
    }
    if ('error' in first) {
      sub.end(null);
      throw first.error;
    }
    sub.push(first, true);
    return sub;
  }

  /** Ends every subscription (SERVICE_UNAVAILABLE) and stops following the feed; new ones are refused by the feed. */
  close(): void {
    this.unfollow();
    this.endAll(new ServiceUnavailableError('The service instance is shutting down: subscribe again.'));
  }

  private leave(g: Group, sub: AggregateSubscriber): void {
    if (!g.subscribers.delete(sub) || g.subscribers.size > 0 || this.groups.get(g.key) !== g) return;
    clearTimeout(g.timer);
    this.groups.delete(g.key);
    const tenant = this.byTenant.get(g.principal.tenantId);
    if (tenant?.delete(g) && tenant.size === 0) this.byTenant.delete(g.principal.tenantId);
  }

  private endAll(error: AppError): void {
    for (const g of [...this.groups.values()]) for (const s of [...g.subscribers]) s.end(error);
  }

  /**
   * A change: the groups of its tenant and extract it may touch are marked. One naming subjects touches a
   * group of entities only if one of them is located there (one query per entity key and event, shared by
   * the groups); a filter by custom field values is not looked at (a computation too many, never a push:
   * an equal answer is not sent).
   */
  private heard(e: DataPointsChange): void {
    const groups = this.byTenant.get(e.t);
    if (!groups) return;
    const located = new Map<string, Promise<boolean>>();
    const locatedIn = (entity: string) => {
      let found = located.get(entity);
      if (!found) {
        found = subjectsLocatedIn(this.db, e.t, entity, e.s).then(
          (ids) => ids.length > 0,
          (err: unknown) => {
            this.log.warn({ err, entity }, 'live aggregates: locating the subjects of a change failed; counted as under the question');
            return true;
          },
        );
        located.set(entity, found);
      }
      return found;
    };
    for (const g of groups) {
      if (g.input.extractKey !== e.x) continue;
      // Marked already or computing: marked (again) without asking where the subjects are, so a stream of
      // changes costs no query per event.
      if (e.s.length === 0 || !g.entityKeys || g.computing || g.dirtySince !== undefined) this.changed(g);
      else
        void Promise.all(g.entityKeys.map(locatedIn))
          .then((hits) => hits.some(Boolean) && this.changed(g))
          .catch((err: unknown) => this.log.warn({ err }, 'live aggregates: a change could not be placed'));
    }
  }

  private changed(g: Group): void {
    if (this.groups.get(g.key) !== g) return;
    const now = Date.now();
    g.dirtySince ??= now;
    // A computation under way is followed by another when it ends.
    if (!g.computing) this.schedule(g, Math.min(LIVE_AGGREGATE_QUIET_MS, g.dirtySince + LIVE_AGGREGATE_MAX_DELAY_MS - now));
  }

  private schedule(g: Group, ms: number): void {
    clearTimeout(g.timer);
    // Not in the trace of a request whose change marked the group.
    g.timer = detached(() =>
      setTimeout(
        () =>
          void this.recompute(g).catch((err: unknown) => this.log[errorLogLevel(err)]({ err }, 'live aggregates: a computation failed')),
        Math.max(0, ms),
      ),
    );
    g.timer.unref();
  }

  /** Computes the group's answer for the changes heard and pushes it to the subscribers it differs for. */
  private async recompute(g: Group): Promise<void> {
    g.timer = undefined;
    // A computation under way (a first answer's too) schedules this one when it ends.
    if (this.groups.get(g.key) !== g || g.computing) return;
    const since = g.dirtySince;
    g.dirtySince = undefined;
    g.computing = true;
    let refused = false;
    try {
      const o = await this.start(g, () => this.compute(g, this.contextFor(g.principal), 'change')).outcome;
      // Not admitted: nothing was computed, the changes still wait.
      if ((refused = 'refused' in o)) g.dirtySince = Math.min(g.dirtySince ?? Infinity, since ?? Date.now());
      else for (const s of g.subscribers) s.push(o);
    } finally {
      this.computed(g, refused);
    }
  }

  /** A computation of the group ended: the changes heard meanwhile are computed next (later if it was not admitted). */
  private computed(g: Group, refused: boolean): void {
    g.computing = false;
    const waiting = g.dirtySince;
    if (waiting !== undefined && this.groups.get(g.key) === g)
      this.schedule(
        g,
        refused ? ADMISSION_RETRY_MS : Math.min(LIVE_AGGREGATE_QUIET_MS, waiting + LIVE_AGGREGATE_MAX_DELAY_MS - Date.now()),
      );
  }

  /** Makes `run`'s computation the group's latest; `run` is handed that Latest (its partial answers are kept there). */
  private start(g: Group, run: (latest: Latest) => Promise<Outcome>): Latest {
    let settle!: (o: Promise<Outcome>) => void;
    let heard!: () => void;
    const outcome = new Promise<Outcome>((r) => (settle = r));
    const partialHeard = new Promise<void>((r) => (heard = r));
    const latest: Latest = { outcome, failed: false, partialHeard, heard };
    g.latest = latest;
    settle(run(latest));
    void outcome.then(
      (o) => {
        latest.failed = 'error' in o;
        latest.settledAt = Date.now();
        latest.partial = undefined;
      },
      () => (latest.failed = true),
    );
    return latest;
  }

  /** A partial answer of `latest`'s computation: the latest for joiners, pushed to the subscribers with no full answer. */
  private partial(g: Group, latest: Latest, o: Outcome): void {
    latest.partial = o;
    latest.heard();
    for (const s of g.subscribers) s.push(o);
  }

  /** One computation of the group's question in `ctx`, admitted for its cost (P52) under `ctx`'s client; `onPartial` hears partial answers. */
  private async compute(g: Group, ctx: Context, why: 'subscribe' | 'change', onPartial?: (o: Outcome) => void): Promise<Outcome> {
    let release: () => void;
    try {
      release = await this.admit({ tenant: ctx.principal.tenantKey, client: ctx.principal.clientId }, g.cost);
    } catch (error) {
      return { error, print: errorPrint(error), refused: true };
    }
    this.computations[why]++;
    const staleData = new Map<string, StaleNotice>();
    try {
      const answer = await aggregateDataPoints(
        { ...ctx, staleData },
        g.input,
        g.fractions,
        onPartial && {
          answer: (a) => onPartial({ answer: a, stale: [...staleData.values()], print: answerPrint(a), partial: true }),
          failed: (err) => this.log.debug({ err, key: g.key }, 'live aggregates: a partial answer failed (the full answer reports it)'),
        },
      );
      return { answer, stale: [...staleData.values()], print: answerPrint(answer) };
    } catch (error) {
      // Sent to the subscribers; only what is not the question's own refusal is logged.
      if (!(error instanceof AppError)) this.log[errorLogLevel(error)]({ err: error, key: g.key }, 'live aggregates: a computation failed');
      return { error, print: errorPrint(error) };
    } finally {
      release();
    }
  }
}

function newGroup(key: string, input: DataPointAggregatesInput, fractions: number[], principal: Principal, cost: number): Group {
  const entityKeys = input.structuralEntityKey
    ? [input.structuralEntityKey]
    : input.structuralEntityKeys
      ? [...input.structuralEntityKeys]
      : undefined;
  return {
    key,
    input,
    fractions,
    principal,
    cost,
    entityKeys,
    subscribers: new Set(),
    latest: undefined,
    dirtySince: undefined,
    timer: undefined,
    computing: false,
  };
}

/**
 * What subscribers share an answer by, as the answer memory keys it (aggregate.service.ts) by the
 * question and who may see it: the tenant, the client's permissions (two clients share only if they
 * may see the same), the input as coerced (absent and null alike) and the percentiles asked.
 */
function groupKey(principal: Principal, input: DataPointAggregatesInput, fractions: readonly number[]): string {
  const question = JSON.stringify(input, (_k, v: unknown) => (v === null ? undefined : v));
  return createHash('sha256')
    .update(JSON.stringify([principal.tenantId, [...principal.permissions].sort(), question, fractions]))
    .digest('base64url');
}

/** What an answer says (percentiles are a Map): equal answers, equal prints. */
function answerPrint(a: Aggregation): string {
  return createHash('sha256')
    .update(JSON.stringify(a, (_k, v: unknown) => (v instanceof Map ? [...v] : v)))
    .digest('base64url');
}

function errorPrint(e: unknown): string {
  return e instanceof AppError ? `error\u0001${e.code}\u0001${e.message}` : 'error';
}

/**
 * One subscriber: an async iterator over its deliveries holding only the latest answer it has not read
 * (latest wins, so a reader of any speed holds at most one answer, shared with its group). Ends (once)
 * when the client goes, its token expires, or the instance can no longer hear changes.
 */
export class AggregateSubscriber implements AsyncIterableIterator<AggregateDelivery> {
  /** The print of the outcome last handed to it. */
  private print: string | undefined;
  /** Whether it was handed a full outcome: then no partial answer (P131) and no first answer any more. */
  private full = false;
  private unread: Outcome | undefined;
  private waiter: ((r: IteratorResult<AggregateDelivery>) => void) | undefined;
  /** undefined: open; null: ended quietly; an error: ended with it (delivered once, then done). */
  private ending: AppError | null | undefined;
  private readonly cancelExpiry: (() => void) | undefined;

  constructor(
    principal: Principal,
    /** The request's stale data record: what an answer served stale is reported in (D10). */
    private readonly staleData: Map<string, StaleNotice>,
    private readonly release: () => void,
  ) {
    if (principal.expiresAt !== undefined) this.cancelExpiry = endAtTokenExpiry(principal.expiresAt, (e) => this.end(e));
  }

  /**
   * Hands it `o` unless it has that answer already; `first` (a first answer) and a partial answer only if it
   * has no full answer yet (a group's push came first).
   */
  push(o: Outcome, first = false): void {
    if (this.ending !== undefined || o.print === this.print || ((first || o.partial) && this.full)) return;
    this.print = o.print;
    if (!o.partial) this.full = true;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w({ value: this.delivery(o), done: false });
    } else this.unread = o;
  }

  /** Ends it with the query's refusal of its first answer, unless it had a full answer already. */
  refuse(error: AppError): void {
    if (!this.full) this.end(error);
  }

  end(error: AppError | null): void {
    if (this.ending !== undefined) return;
    this.ending = error;
    this.unread = undefined;
    this.cancelExpiry?.();
    this.release();
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w(this.finish());
    }
  }

  next(): Promise<IteratorResult<AggregateDelivery>> {
    if (this.ending !== undefined) return Promise.resolve(this.finish());
    const o = this.unread;
    if (o) {
      this.unread = undefined;
      return Promise.resolve({ value: this.delivery(o), done: false });
    }
    return new Promise((resolve) => (this.waiter = resolve));
  }

  return(): Promise<IteratorResult<AggregateDelivery>> {
    this.end(null);
    this.ending = null;
    return Promise.resolve({ value: undefined, done: true });
  }

  throw(): Promise<IteratorResult<AggregateDelivery>> {
    return this.return();
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  private delivery(o: Outcome): AggregateDelivery {
    if ('answer' in o) for (const n of o.stale) this.staleData.set(`${n.extractKey}\u0001${n.subjectIdentifier}`, n);
    // One event per outcome: the group's subscribers (one tenant, one permission set) share its execution (P129).
    const shared = o as Outcome & { event?: AggregateDelivery & SharedEvent };
    return (shared.event ??= { ...('error' in o ? { error: o.error } : { answer: o.answer }), [SHARED_EVENT]: true });
  }

  private finish(): IteratorResult<AggregateDelivery> {
    const error = this.ending;
    if (!error) return { value: undefined, done: true };
    this.ending = null;
    return { value: { end: error }, done: false };
  }
}
