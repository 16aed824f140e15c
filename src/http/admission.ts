import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { ClientClosedError, ServiceUnavailableError, TooManyRequestsError } from '../core/errors.js';
import { inSpan } from '../db/tracing.js';

/** Who asks: admission shares are per tenant and, within it, per client. */
export interface Requester {
  /** The tenant's key (it also labels the metrics: tenants are the operator's, their number bounded). */
  tenant: string;
  client: string;
}

export interface AdmissionOptions {
  /** Units of database work the instance runs at once. */
  capacity: number;
  /** Shares (0-1] of `capacity` one tenant, and one client, may hold at once. */
  tenantShare: number;
  clientShare: number;
  /** Requests of one tenant that may wait; past that, 429. */
  queueLimit: number;
  /** How long a request may wait for its turn before it is refused. */
  queueTimeoutMs: number;
  /** Query cost (the D11 cost rule's) that weighs one unit. */
  costPerUnit: number;
  /** Optional request-rate limit per client: `requests` per `windowSeconds` (0: off). */
  rateLimit?: { requests: number; windowSeconds: number } | undefined;
}

/** The part of a response admission needs: headers to set, and its end (the units go back then). */
export interface ResponseLike {
  /** True once the response or its connection has closed (Node's ServerResponse). */
  readonly closed: boolean;
  setHeader(name: string, value: string): unknown;
  once(event: 'close', listener: () => void): unknown;
}

/** What happened to a request at admission, by tenant (metrics). */
export type AdmissionOutcome = 'admitted' | 'queued' | 'refused';

interface Waiter {
  client: string;
  weight: number;
  admit(): void;
  timer: NodeJS.Timeout;
}

interface TenantState {
  inFlight: number;
  clients: Map<string, number>;
  queue: Waiter[];
  /** While others are active, this tenant's expensive work waits until then (pacing, see `releaser`). */
  pausedUntil: number;
}

/** A tenant admitted within this long counts as active for pacing. */
const ACTIVE_MS = 1_000;

/**
 * Admission control in front of the database work (P52). A request holds `weight` units (an
 * expensive read, such as a search or a large GraphQL page, holds more) while it runs; the instance runs
 * at most `capacity` units, a tenant at most its share of them, a client at most its share. A request
 * that does not fit waits in its tenant's queue; freed units go to the waiting tenants in turn (round
 * robin), so a tenant flooding the instance waits behind its own requests while another tenant's are
 * served. A tenant whose queue is full, or whose request waited too long, gets 429 (it is over its share);
 * a request of a tenant under its share that found the instance full past the wait gets 503.
 *
 * Per instance and in memory: several instances each hold their own units, which matches the resource
 * they protect (each instance's own pool and event loop).
 */
export class Admission {
  private readonly tenants = new Map<string, TenantState>();
  /** Tenants with waiting requests, in turn order: the next freed units go to the first that fits. */
  private readonly turns: string[] = [];
  private inFlight = 0;
  private readonly tenantMax: number;
  private readonly clientMax: number;
  private readonly limiter: RateLimiterMemory | undefined;
  /** When each recently active tenant was last admitted (pruned as read). */
  private readonly lastAdmitted = new Map<string, number>();
  private wake: { timer: NodeJS.Timeout; at: number } | undefined;

  constructor(
    private readonly opts: AdmissionOptions,
    private readonly observe: (tenant: string, outcome: AdmissionOutcome) => void = () => {},
  ) {
    this.tenantMax = Math.max(1, Math.floor(opts.capacity * opts.tenantShare));
    this.clientMax = Math.max(1, Math.min(this.tenantMax, Math.floor(opts.capacity * opts.clientShare)));
    const rate = opts.rateLimit;
    this.limiter = rate && rate.requests > 0 ? new RateLimiterMemory({ points: rate.requests, duration: rate.windowSeconds }) : undefined;
  }

  /** Units in use and waiting requests now, per tenant (tests, metrics). */
  snapshot(): { inFlight: number; tenants: Record<string, { inFlight: number; waiting: number }> } {
    const tenants: Record<string, { inFlight: number; waiting: number }> = {};
    for (const [id, t] of this.tenants) tenants[id] = { inFlight: t.inFlight, waiting: t.queue.length };
    return { inFlight: this.inFlight, tenants };
  }

  /**
   * The check made as soon as the token is verified, before any database work for the request
   * (P52): the client's rate limit, and a tenant whose queue is already full is refused here, so a flood
   * of refused requests costs no statement. Rejects with a 429 AppError.
   */
  async gate(who: Requester, res: ResponseLike): Promise<void> {
    for (const [k, v] of Object.entries(await this.rate(who))) res.setHeader(k, v);
    const t = this.tenants.get(who.tenant);
    if (t && t.queue.length >= this.opts.queueLimit) {
      this.observe(who.tenant, 'refused');
      throw this.refusal(t, who.client);
    }
  }

  /**
   * Admits one request of `cost` (the D11 cost rule's measure of the operation) once its input is
   * validated. Resolves with the function that gives the units back: the caller calls it once the answer
   * is produced (its execution done), so a client reading slowly holds none of them (P77); the
   * response's close gives them back too, if it comes first. A client that goes away while waiting leaves
   * the queue. Rejects with a 429 or 503 AppError. The one entry for REST and GraphQL alike.
   */
  async admit(who: Requester, cost: number, res: ResponseLike): Promise<() => void> {
    // A client that left while the request was read and authenticated fired 'close' already: units
    // taken for it would never be given back.
    if (res.closed) throw new ClientClosedError();
    // Not an AbortController: every response closes, and abort() builds a DOMException and dispatches an
    // event (measured: a REST list request took 1.43–1.57 ms of CPU with it, 1.20–1.32 without).
    let gone = false;
    let leave: (() => void) | undefined;
    let release: (() => void) | undefined;
    res.once('close', () => {
      gone = true;
      leave?.();
      release?.();
    });
    // The wait for units, as a span of the request's trace (P141).
    release = await inSpan('admission', { 'ssdi.admission.cost': cost }, () =>
      this.acquire(who, cost / this.opts.costPerUnit, (l) => (leave = l)),
    );
    if (gone) release();
    return release;
  }

  /**
   * Counts one request against its client's rate limit, when one is configured: the IETF RateLimit
   * headers to send (draft-ietf-httpapi-ratelimit-headers), or a 429 carrying them and Retry-After.
   */
  private async rate(who: Requester): Promise<Record<string, string>> {
    const rate = this.opts.rateLimit;
    if (!this.limiter || !rate) return {};
    const { requests, windowSeconds } = rate;
    const headers = (r: RateLimiterRes) => ({
      'RateLimit-Policy': `"client";q=${requests};w=${windowSeconds}`,
      RateLimit: `"client";r=${Math.max(0, r.remainingPoints)};t=${Math.ceil(r.msBeforeNext / 1000)}`,
    });
    try {
      return headers(await this.limiter.consume(`${who.tenant}\u0001${who.client}`));
    } catch (r) {
      if (!(r instanceof RateLimiterRes)) throw r;
      throw new TooManyRequestsError(`The client made more than ${requests} requests in ${windowSeconds} s; retry later.`, {
        ...headers(r),
        'Retry-After': String(Math.max(1, Math.ceil(r.msBeforeNext / 1000))),
      });
    }
  }

  /**
   * Waits for `weight` units for the requester; resolves with the function that gives them back (call
   * it exactly once, when the request is done), or rejects with a 429 or 503 AppError. A request that
   * waits hands `onGone` the function that takes it out of the queue (its client went away).
   */
  acquire(who: Requester, requestedWeight: number, onGone?: (leave: () => void) => void): Promise<() => void> {
    const weight = Math.max(1, Math.min(Math.ceil(requestedWeight), this.clientMax));
    const t = this.tenant(who.tenant);
    // FIFO within a tenant, except that cheap work passes expensive work held back by pacing.
    const paced = weight === 1 && t.pausedUntil > Date.now();
    if ((t.queue.length === 0 || paced) && this.fits(t, who.client, weight)) {
      this.take(t, who.client, weight, who.tenant);
      this.observe(who.tenant, 'admitted');
      return Promise.resolve(this.releaser(who.tenant, who.client, weight));
    }
    if (t.queue.length >= this.opts.queueLimit) {
      this.observe(who.tenant, 'refused');
      return Promise.reject(this.refusal(t, who.client));
    }
    this.observe(who.tenant, 'queued');
    return new Promise((resolve, reject) => {
      /** Takes the waiter out of its queue (a time-out, a client gone) and fails it, unless it was admitted. */
      const leave = (error: () => Error): void => {
        const i = t.queue.indexOf(waiter);
        if (i < 0) return;
        t.queue.splice(i, 1);
        clearTimeout(waiter.timer);
        this.forget(who.tenant, t);
        reject(error());
        // It may have been what held others of its tenant back (FIFO): look again.
        this.pump();
      };
      const waiter: Waiter = {
        client: who.client,
        weight,
        admit: () => {
          clearTimeout(waiter.timer);
          this.observe(who.tenant, 'admitted');
          resolve(this.releaser(who.tenant, who.client, weight));
        },
        timer: setTimeout(() => {
          this.observe(who.tenant, 'refused');
          leave(() => this.refusal(t, who.client, weight));
        }, this.opts.queueTimeoutMs),
      };
      t.queue.push(waiter);
      if (t.queue.length === 1) this.turns.push(who.tenant);
      // Held back by pacing only: nothing else may free units before the pause ends, so wake up then.
      if (t.pausedUntil > Date.now()) this.wakeAt(t.pausedUntil);
      onGone?.(() => leave(() => new ClientClosedError()));
    });
  }

  private tenant(id: string): TenantState {
    let t = this.tenants.get(id);
    if (!t) this.tenants.set(id, (t = { inFlight: 0, clients: new Map(), queue: [], pausedUntil: 0 }));
    return t;
  }

  private fits(t: TenantState, client: string, weight: number): boolean {
    return (
      this.inFlight + weight <= this.opts.capacity &&
      t.inFlight + weight <= this.tenantMax &&
      (t.clients.get(client) ?? 0) + weight <= this.clientMax &&
      (weight === 1 || t.pausedUntil <= Date.now())
    );
  }

  /** Whether a tenant other than `id` was admitted within ACTIVE_MS, or runs something now. */
  private othersActive(id: string): boolean {
    const now = Date.now();
    for (const [other, at] of this.lastAdmitted) {
      if (now - at > ACTIVE_MS && !this.tenants.get(other)?.inFlight) this.lastAdmitted.delete(other);
      else if (other !== id) return true;
    }
    return false;
  }

  private take(t: TenantState, client: string, weight: number, tenant: string): void {
    this.lastAdmitted.set(tenant, Date.now());
    this.inFlight += weight;
    t.inFlight += weight;
    t.clients.set(client, (t.clients.get(client) ?? 0) + weight);
  }

  /**
   * 429 when the tenant's own load is the cause: it or the client holds too much of its share for a
   * request of `weight`, its queue is full, it is paused (pacing, see `releaser`), or the instance has
   * room now (the request waited behind its tenant's own, or its pause ended a moment ago); 503 only
   * when the instance being full held the request back.
   */
  private refusal(t: TenantState, client: string, weight = 1): Error {
    const atShare =
      t.inFlight + weight > this.tenantMax ||
      (t.clients.get(client) ?? 0) + weight > this.clientMax ||
      t.queue.length >= this.opts.queueLimit ||
      (weight > 1 && t.pausedUntil > Date.now());
    // A second: units free as fast as requests finish, and a full queue drains in about a request's time.
    if (atShare || this.inFlight + weight <= this.opts.capacity)
      return new TooManyRequestsError('Too many concurrent requests for this tenant or client; retry later.', { 'Retry-After': '1' });
    return new ServiceUnavailableError('The service is at capacity; retry shortly.');
  }

  /**
   * Gives the units back. Pacing (P52): an expensive request (more than one unit) that ran for d ms
   * while other tenants were active, its tenant having more requests waiting, makes the tenant's next
   * expensive request wait d·(1 − share)/share ms,
   * so a tenant with a backlog of heavy work holds the instance at most its share of the time and the
   * others' cheap requests find it free in between, rather than queued behind one heavy request after
   * another (CPU-bound work cannot be interrupted). A tenant alone, or one without a backlog (a client
   * sending one request after another), is never paced.
   */
  private releaser(tenantId: string, client: string, weight: number): () => void {
    let done = false;
    const started = Date.now();
    return () => {
      if (done) return;
      done = true;
      const t = this.tenant(tenantId);
      if (weight > 1 && t.queue.length > 0 && this.othersActive(tenantId)) {
        const now = Date.now();
        t.pausedUntil = now + ((now - started) * (1 - this.opts.tenantShare)) / this.opts.tenantShare;
        this.wakeAt(t.pausedUntil);
      }
      this.inFlight -= weight;
      t.inFlight -= weight;
      const left = (t.clients.get(client) ?? 0) - weight;
      if (left > 0) t.clients.set(client, left);
      else t.clients.delete(client);
      this.forget(tenantId, t);
      this.pump();
    };
  }

  /** Runs `pump` at `at`, unless it runs earlier already: a paused tenant's waiters get their turn then. */
  private wakeAt(at: number): void {
    if (this.wake && this.wake.at <= at) return;
    if (this.wake) clearTimeout(this.wake.timer);
    // A millisecond late: a timer may fire a little before Date.now() reaches `at`.
    const timer = setTimeout(
      () => {
        this.wake = undefined;
        this.pump();
      },
      Math.max(0, at - Date.now()) + 1,
    );
    timer.unref();
    this.wake = { timer, at };
  }

  /** Drops an idle tenant's state, so the map holds only tenants with work. */
  private forget(id: string, t: TenantState): void {
    if (t.inFlight === 0 && t.queue.length === 0 && t.pausedUntil <= Date.now()) this.tenants.delete(id);
    if (t.queue.length === 0) {
      const i = this.turns.indexOf(id);
      if (i >= 0) this.turns.splice(i, 1);
    }
  }

  /**
   * Hands freed units out: tenants take turns, each turn admitting the first request of that tenant
   * whose client fits (FIFO per client); a tenant that was served goes to the back of the line.
   */
  private pump(): void {
    let progress = true;
    while (progress && this.turns.length > 0 && this.inFlight < this.opts.capacity) {
      progress = false;
      for (let i = 0; i < this.turns.length; i++) {
        const id = this.turns[i]!;
        const t = this.tenants.get(id)!;
        const at = t.queue.findIndex((w) => this.fits(t, w.client, w.weight));
        if (at < 0) continue;
        const [w] = t.queue.splice(at, 1);
        this.take(t, w!.client, w!.weight, id);
        this.turns.splice(i, 1);
        if (t.queue.length > 0) this.turns.push(id);
        w!.admit();
        progress = true;
        break;
      }
    }
    for (const id of this.turns) {
      const t = this.tenants.get(id)!;
      if (t.pausedUntil > Date.now()) this.wakeAt(t.pausedUntil);
    }
  }
}
