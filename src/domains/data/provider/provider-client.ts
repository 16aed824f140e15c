import {
  BrokenCircuitError,
  type CircuitBreakerPolicy,
  CircuitState,
  DelegateBackoff,
  ExponentialBackoff,
  type IBackoff,
  type IBackoffFactory,
  type IBreaker,
  type IHalfOpenAfterBackoffContext,
  TaskCancelledError,
  TimeoutStrategy,
  circuitBreaker,
  handleAll,
  handleWhen,
  noJitterGenerator,
  retry,
  timeout,
} from 'cockatiel';
import { setTimeout as sleep } from 'node:timers/promises';
import * as oauth from 'oauth4webapi';
import type { Logger } from 'pino';
import { canonicalKeys } from '../../../core/input.js';
import { type DataPoint, ProviderPageSchema, type RejectedPoint, parseExactJson, readProviderPage } from '../model/index.js';
import type { ProviderFault, ProviderMeter, TokenOutcome } from './meter.js';

/** A data source as the client calls it (the secret already opened). */
export interface ProviderSource {
  tenantId: string;
  key: string;
  getDataPointsUrl: string;
  tokenUrl: string | null;
  clientId: string | null;
  /** Opened lazily: only a token request needs it. */
  clientSecret: () => Promise<string | null>;
  scope: string | null;
}

export interface ProviderPolicy {
  timeoutMs: number;
  retries: number;
  backoffMs: number;
  maxPages: number;
  /** Attempts in flight at once per data source (every reader and background re-fetch of the instance). */
  concurrency: number;
  /** A circuit opens when, within `breakerWindowMs`, at least `breakerFailures` calls were made and `breakerThreshold` of them failed. */
  breakerFailures: number;
  breakerThreshold: number;
  breakerWindowMs: number;
  /** The first probe after opening; the delay doubles while probes fail, up to `breakerOpenMs`. */
  breakerProbeMs: number;
  breakerOpenMs: number;
}

export interface BreakerState {
  tenantId: string;
  dataSource: string;
  state: 'closed' | 'open' | 'half_open' | 'isolated';
}

const STATE_NAMES = {
  [CircuitState.Closed]: 'closed',
  [CircuitState.Open]: 'open',
  [CircuitState.HalfOpen]: 'half_open',
  [CircuitState.Isolated]: 'isolated',
} as const satisfies Record<CircuitState, BreakerState['state']>;

/** A failed provider call: `retryable` for network errors, time-outs, 429 and 5xx (D10). */
export class ProviderError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly fault: ProviderFault,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

/** A call refused without reaching the provider: its circuit is open. */
export class CircuitOpenError extends ProviderError {
  constructor() {
    super('The provider circuit is open: too many of its recent calls failed.', false, 'refused');
  }
}

interface Bucket {
  slot: number;
  calls: number;
  failures: number;
}

const BUCKETS = 10;

/**
 * Opens when, within the last `windowMs` (in buckets of a tenth of it, so 90–100 % of it), at least
 * `minimumCalls` calls were made and at least `threshold` of them failed.
 *
 * Not cockatiel's SamplingBreaker: it moves its window on by one bucket per call rather than by the time
 * elapsed, so under sparse traffic outcomes older than the window keep counting (five failures a minute
 * apart open a 10 s window that asks for at least 5 calls); and it takes thresholds below 1 only, compared
 * as "more than".
 */
class RateBreaker implements IBreaker {
  private buckets: Bucket[] = [];
  private readonly bucketMs: number;

  constructor(private readonly opts: { threshold: number; windowMs: number; minimumCalls: number }) {
    this.bucketMs = Math.max(1, Math.ceil(opts.windowMs / BUCKETS));
  }

  get state(): unknown {
    return this.buckets;
  }

  set state(value: unknown) {
    this.buckets = value as Bucket[];
  }

  success(state: CircuitState): void {
    // A successful probe closes the circuit: the failures that opened it are history.
    if (state === CircuitState.HalfOpen) this.buckets = [];
    this.record(false);
  }

  failure(state: CircuitState): boolean {
    this.record(true);
    if (state !== CircuitState.Closed) return true;
    let calls = 0;
    let failures = 0;
    for (const b of this.buckets) {
      calls += b.calls;
      failures += b.failures;
    }
    return calls >= this.opts.minimumCalls && failures / calls >= this.opts.threshold;
  }

  private record(failed: boolean): void {
    const slot = Math.floor(Date.now() / this.bucketMs);
    while (this.buckets.length > 0 && this.buckets[0]!.slot <= slot - BUCKETS) this.buckets.shift();
    let last = this.buckets.at(-1);
    if (last?.slot !== slot) {
      last = { slot, calls: 0, failures: 0 };
      this.buckets.push(last);
    }
    last.calls++;
    if (failed) last.failures++;
  }
}

type ProbeBackoff = IBackoff<IHalfOpenAfterBackoffContext>;

/**
 * An open circuit's wait before its probe, as `inner` says, but none while `now()` holds: a read with
 * nothing to serve becomes the probe at once (P88).
 */
function probeDelay(
  inner: IBackoffFactory<IHalfOpenAfterBackoffContext>,
  now: () => boolean,
): IBackoffFactory<IHalfOpenAfterBackoffContext> {
  const wrapped = (b: ProbeBackoff): ProbeBackoff => ({
    get duration() {
      return now() ? 0 : b.duration;
    },
    next: (ctx) => wrapped(b.next(ctx)),
  });
  return { next: (ctx) => wrapped(inner.next(ctx)) };
}

/** `Retry-After` as milliseconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3). */
function retryAfter(header: string | null): number | undefined {
  if (!header) return undefined;
  if (/^\d+$/.test(header.trim())) return Number(header.trim()) * 1000;
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** A data source's attempts in flight, those waiting for a place (FIFO), and a Retry-After pause. */
interface Gate {
  active: number;
  waiting: (() => void)[];
  /** No attempt starts before this instant (epoch ms): the provider's last Retry-After. */
  pausedUntil: number;
}

interface CachedToken {
  value: string;
  /** Renewed from this moment on: shortly before the provider's expires_in runs out. */
  renewAt: number;
}

/**
 * Calls providers' get-data-points (D10): a client-credentials token per data source (cached, fetched
 * once for concurrent callers, renewed on a 401), a time limit per attempt, 1 + PROVIDER_RETRIES attempts
 * with exponential backoff and jitter (Retry-After wins), a circuit breaker per data source, and a
 * validated answer. One instance per service instance: the caches and breakers are shared by requests.
 */
export class ProviderClient {
  private readonly tokens = new Map<string, Promise<CachedToken>>();
  private readonly gates = new Map<string, Gate>();
  private readonly breakers = new Map<
    string,
    { tenantId: string; dataSource: string; policy: CircuitBreakerPolicy; probeNow: { on: boolean } }
  >();

  constructor(
    private readonly policy: ProviderPolicy,
    private readonly log: Logger,
    private readonly meter?: ProviderMeter,
  ) {}

  /** The circuit state of each data source called since start. */
  breakerStates(): BreakerState[] {
    return [...this.breakers.values()].map(({ tenantId, dataSource, policy }) => ({
      tenantId,
      dataSource,
      state: STATE_NAMES[policy.state],
    }));
  }

  /**
   * Every data point of `subjectIdentifiers` for one extract: the first page, then each `EndCursor` until
   * `HasNextPage` is false (at most PROVIDER_MAX_PAGES pages: more is a failure, not a partial set). The
   * nodes that are not valid data points come back as `rejected`: dropped by the caller, not failing the call (P90).
   * `mustReach` (some subject has nothing to serve if this fails): an open circuit does not refuse the
   * call, it makes it its probe, or waits for the probe in flight and goes on as it went (P88).
   */
  async fetchAll(
    source: ProviderSource,
    extract: { key: string; options: unknown },
    subjectIdentifiers: readonly string[],
    mustReach = false,
  ): Promise<{ points: DataPoint[]; rejected: RejectedPoint[] }> {
    const points: DataPoint[] = [];
    const rejected: RejectedPoint[] = [];
    let after: string | null = null;
    for (let page = 1; ; page++) {
      if (page > this.policy.maxPages)
        throw new ProviderError(`The provider answered more than ${this.policy.maxPages} pages.`, false, 'invalid_answer');
      // The contract's request exactly: every property present, nulls explicit.
      const body = {
        SubjectIdentifiers: subjectIdentifiers,
        PagingRequest: { After: after, Before: null, First: null, Last: null, OrderBy: null, OrderDirection: null },
        DataExtract: { Key: extract.key, Options: extract.options ?? {} },
      };
      const answer = await this.call(source, body, mustReach);
      points.push(...answer.points);
      rejected.push(...answer.rejected);
      if (!answer.pageInfo.HasNextPage) return { points, rejected };
      const next = answer.pageInfo.EndCursor ?? null;
      if (next === null || next === after)
        throw new ProviderError('The provider said HasNextPage without a new EndCursor.', false, 'invalid_answer');
      after = next;
    }
  }

  private breaker(source: ProviderSource): { policy: CircuitBreakerPolicy; probeNow: { on: boolean } } {
    const id = `${source.tenantId}\u0001${source.key}`;
    const known = this.breakers.get(id);
    if (known) return known;
    const p = this.policy;
    const probeNow = { on: false };
    const b = circuitBreaker(handleAll, {
      halfOpenAfter: probeDelay(
        new ExponentialBackoff({ initialDelay: p.breakerProbeMs, maxDelay: p.breakerOpenMs, generator: noJitterGenerator }),
        () => probeNow.on,
      ),
      breaker: new RateBreaker({ threshold: p.breakerThreshold, windowMs: p.breakerWindowMs, minimumCalls: p.breakerFailures }),
    });
    const at = { tenantId: source.tenantId, dataSource: source.key };
    // Opens since the last close: the backoff's delay is probeMs · 2^(opens − 1), capped (noJitterGenerator).
    let opens = 0;
    b.onBreak((reason) => {
      opens++;
      const probeInMs = Math.min(p.breakerOpenMs, p.breakerProbeMs * 2 ** (opens - 1));
      // handleAll: only errors open it (or isolate(), which nothing calls).
      this.log.warn({ ...at, reason: 'error' in reason ? reason.error.message : 'isolated', probeInMs }, 'data provider circuit opened');
    });
    b.onHalfOpen(() => this.log.info(at, 'data provider circuit half-open: probing'));
    b.onReset(() => {
      opens = 0;
      this.log.info(at, 'data provider circuit closed');
    });
    const entry = { ...at, policy: b, probeNow };
    this.breakers.set(id, entry);
    return entry;
  }

  /**
   * One attempt through the data source's circuit. Open: refused (the caller serves its older data),
   * unless `mustReach`: then it is the probe now (cockatiel's half-open state: concurrent calls wait for
   * it and go on as it went). A call that has something to serve does not wait for a probe either.
   */
  private throughBreaker<T>(
    source: ProviderSource,
    mustReach: boolean,
    signal: AbortSignal,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const { policy, probeNow } = this.breaker(source);
    if (!mustReach && policy.state === CircuitState.HalfOpen) return Promise.reject(new BrokenCircuitError());
    // execute() reads the probe delay synchronously, before its first await.
    probeNow.on = mustReach;
    try {
      return policy.execute(({ signal: inner }) => fn(inner), signal);
    } finally {
      probeNow.on = false;
    }
  }

  private async call(source: ProviderSource, body: unknown, mustReach: boolean) {
    const { timeoutMs, retries, backoffMs } = this.policy;
    const retryPolicy = retry(
      // An attempt cut off by the time limit is a time-out: retried like a network error.
      handleWhen((e) => (e instanceof ProviderError && e.retryable) || e instanceof TaskCancelledError),
      {
        maxAttempts: retries,
        backoff: new DelegateBackoff((ctx: { attempt: number; result: { error?: unknown } | { value: unknown } }) => {
          const err = 'error' in ctx.result ? ctx.result.error : undefined;
          // A Retry-After is followed up to one attempt's time limit: a longer one would hold the caller (and the
          // data source's places) without a deadline; the breaker judges a provider that keeps refusing.
          if (err instanceof ProviderError && err.retryAfterMs !== undefined) return Math.min(err.retryAfterMs, timeoutMs);
          // Exponential with "equal jitter": half fixed, half random, so retries of many callers spread out.
          const base = backoffMs * 2 ** (ctx.attempt - 1);
          return base / 2 + Math.random() * (base / 2);
        }),
      },
    );
    const attemptTimeout = timeout(timeoutMs, TimeoutStrategy.Aggressive);
    try {
      return await retryPolicy.execute(({ signal }) =>
        this.gated(source, () =>
          this.metered(source, () =>
            this.throughBreaker(source, mustReach, signal, (inner) =>
              attemptTimeout.execute(({ signal: attemptSignal }) => this.attempt(source, body, attemptSignal), inner),
            ),
          ),
        ),
      );
    } catch (e) {
      if (e instanceof BrokenCircuitError) throw new CircuitOpenError();
      if (e instanceof TaskCancelledError) throw new ProviderError(`The provider did not answer within ${timeoutMs} ms.`, true, 'timeout');
      throw e;
    }
  }

  /** One attempt, told to the meter with its outcome and seconds (the wait for a place before it not counted). */
  private async metered<T>(source: ProviderSource, fn: () => Promise<T>): Promise<T> {
    if (!this.meter) return fn();
    const started = performance.now();
    try {
      const value = await fn();
      this.meter.call(source.key, 'ok', (performance.now() - started) / 1000);
      return value;
    } catch (e) {
      const fault: ProviderFault =
        e instanceof BrokenCircuitError
          ? 'refused'
          : e instanceof TaskCancelledError
            ? 'timeout'
            : e instanceof ProviderError
              ? e.fault
              : 'unreachable';
      this.meter.call(source.key, fault, (performance.now() - started) / 1000);
      throw e;
    }
  }

  /**
   * Runs one attempt once the data source has a place for it (at most `concurrency` in flight: P112) and
   * no Retry-After pause is running. A retryable answer with Retry-After pauses every attempt of the data
   * source for that long, not only this call's retry: its other calls would be refused alike. The wait
   * for a place counts toward no time-out, and the breaker decides after it.
   */
  private async gated<T>(source: ProviderSource, fn: () => Promise<T>): Promise<T> {
    const id = `${source.tenantId}\u0001${source.key}`;
    let gate = this.gates.get(id);
    if (!gate) this.gates.set(id, (gate = { active: 0, waiting: [], pausedUntil: 0 }));
    // A place freed is handed to the first waiter (FIFO), so a newcomer never overtakes it.
    if (gate.active < this.policy.concurrency) gate.active++;
    else await new Promise<void>((resolve) => gate.waiting.push(resolve));
    try {
      for (let wait = gate.pausedUntil - Date.now(); wait > 0; wait = gate.pausedUntil - Date.now()) await sleep(wait);
      return await fn();
    } catch (e) {
      if (e instanceof ProviderError && e.retryable && e.retryAfterMs !== undefined)
        gate.pausedUntil = Math.max(gate.pausedUntil, Date.now() + Math.min(e.retryAfterMs, this.policy.timeoutMs));
      throw e;
    } finally {
      const next = gate.waiting.shift();
      if (next) next();
      else gate.active--;
    }
  }

  private async attempt(source: ProviderSource, body: unknown, signal: AbortSignal) {
    try {
      let token = await this.token(source);
      let res = await this.post(source, body, token, signal);
      if (res.status === 401 && token !== undefined) {
        // The provider no longer accepts the cached token (rotated, revoked): a new one, once.
        await discard(res);
        await this.dropToken(source, token);
        token = await this.token(source);
        res = await this.post(source, body, token, signal);
      }
      if (res.status === 429 || res.status >= 500) {
        await discard(res);
        throw this.transient(`The provider answered ${res.status}.`, res);
      }
      if (res.status !== 200) {
        await discard(res);
        throw new ProviderError(`The provider answered ${res.status}.`, false, 'http_error');
      }
      let json: unknown;
      try {
        // Decimals a double does not hold are kept as written (P86).
        json = parseExactJson(await res.text());
      } catch {
        throw new ProviderError('The provider answered malformed JSON.', false, 'invalid_answer');
      }
      const page = readProviderPage(canonicalKeys(json, ProviderPageSchema));
      if (!page.ok) throw new ProviderError(`The provider's answer has the wrong shape at ${page.problem}`, false, 'invalid_answer');
      return page;
    } catch (e) {
      if (e instanceof ProviderError || signal.aborted) throw e;
      // fetch's TypeError: connection refused or reset, DNS, TLS.
      throw new ProviderError(`The provider could not be reached: ${(e as Error).message}`, true, 'unreachable');
    }
  }

  private post(source: ProviderSource, body: unknown, token: string | undefined, signal: AbortSignal) {
    return fetch(source.getDataPointsUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
      signal,
      redirect: 'error',
    });
  }

  /** A retryable failure, unless its Retry-After is longer than one attempt may take (then it fails now, P35). */
  private transient(message: string, res: Response, fault: ProviderFault = 'http_error'): ProviderError {
    const wait = retryAfter(res.headers.get('retry-after'));
    return new ProviderError(message, wait === undefined || wait <= this.policy.timeoutMs, fault, wait);
  }

  /** Forgets a token the provider refused, unless a newer one replaced it already. */
  private async dropToken(source: ProviderSource, refused: string): Promise<void> {
    const key = tokenKey(source);
    const pending = this.tokens.get(key);
    const cached = await pending?.catch(() => undefined);
    if (this.tokens.get(key) === pending && (!cached || cached.value === refused)) this.tokens.delete(key);
  }

  /**
   * The data source's access token; concurrent callers share one token request, which has its own time
   * limit (one caller's attempt running out of time must not fail the others').
   */
  private async token(source: ProviderSource): Promise<string | undefined> {
    if (!source.tokenUrl || !source.clientId) return undefined;
    const key = tokenKey(source);
    let pending = this.tokens.get(key);
    if (pending) {
      const cached = await pending.catch(() => undefined);
      if (cached && cached.renewAt > Date.now()) return cached.value;
      if (this.tokens.get(key) === pending) this.tokens.delete(key);
      pending = this.tokens.get(key);
    }
    if (!pending) {
      pending = this.requestToken(source, source.tokenUrl, source.clientId, AbortSignal.timeout(this.policy.timeoutMs));
      this.tokens.set(key, pending);
      // A failed request is not cached: the next call asks again.
      pending.catch(() => this.tokens.get(key) === pending && this.tokens.delete(key));
    }
    return (await pending).value;
  }

  private async requestToken(source: ProviderSource, tokenUrl: string, clientId: string, signal: AbortSignal): Promise<CachedToken> {
    const as: oauth.AuthorizationServer = { issuer: new URL(tokenUrl).origin, token_endpoint: tokenUrl };
    const client: oauth.Client = { client_id: clientId };
    const secret = (await source.clientSecret()) ?? '';
    const started = performance.now();
    const told = (outcome: TokenOutcome) => this.meter?.token(source.key, outcome, (performance.now() - started) / 1000);
    let res: Response;
    try {
      res = await oauth.clientCredentialsGrantRequest(
        as,
        client,
        oauth.ClientSecretPost(secret),
        source.scope ? { scope: source.scope } : {},
        {
          signal,
          // Loopback and private providers over plain HTTP are the tenant's choice (its tokenUrl).
          [oauth.allowInsecureRequests]: tokenUrl.startsWith('http:'),
        },
      );
    } catch (e) {
      told(signal.aborted ? 'timeout' : 'unreachable');
      throw new ProviderError(`The provider's token endpoint could not be reached: ${(e as Error).message}`, true, 'token_error');
    }
    if (res.status === 429 || res.status >= 500) {
      told('http_error');
      await discard(res);
      throw this.transient(`The provider's token endpoint answered ${res.status}.`, res, 'token_error');
    }
    try {
      const t = await oauth.processClientCredentialsResponse(as, client, res);
      told('ok');
      const ttl = (t.expires_in ?? 3600) * 1000;
      // Renewed a little early (a tenth of its life, at most a minute) so no call carries an expiring token.
      return { value: t.access_token, renewAt: Date.now() + ttl - Math.min(ttl / 10, 60_000) };
    } catch (e) {
      told('rejected');
      throw new ProviderError(`The provider's token endpoint refused the client: ${(e as Error).message}`, false, 'token_error');
    }
  }
}

/** Releases an unread body, so its connection returns to the pool now rather than at garbage collection. */
async function discard(res: Response): Promise<void> {
  await res.body?.cancel().catch(() => {});
}

function tokenKey(s: ProviderSource): string {
  return JSON.stringify([s.tenantId, s.key, s.tokenUrl, s.clientId, s.scope]);
}
