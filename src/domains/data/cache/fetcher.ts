import { isDeepStrictEqual } from 'node:util';
import { bulkhead } from 'cockatiel';
import type { Logger } from 'pino';
import type { Config } from '../../../core/config.js';
import { ProviderUnavailableError } from '../../../core/errors.js';
import { errorLogLevel } from '../../../http/errors.js';
import type { CacheWrite, DataPoint, ExtractWithSource, RejectedPoint, SecretBox } from '../model/index.js';
import { CircuitOpenError, ProviderClient, type ProviderMeter, type ProviderSource } from '../provider/index.js';
import { type CacheStore, type CachedPoints, type Outcome, type SubjectKey, cacheKey } from './store.js';

/** A subject to fetch, with what the cache row said when it was read. */
export interface Want {
  subject: SubjectKey & { identifier: string };
  /** The row version read (null: no row): the answer is stored only if the row is still at it. */
  expectedVersion: string | null;
  removedIds: string[];
  /** Older data to serve, flagged stale, when the provider fails. */
  fallback?: { points: DataPoint[]; fetchedAt: Date } | undefined;
}

type Run = () => Promise<Map<string, Outcome>>;

/** Invalid points named in the log line of one provider call (a whole bad answer is not written out). */
const LOGGED_REJECTS = 20;

/** Runs a provider call when its turn comes (the background re-fetches' bulkhead). */
export type Limit = (fn: Run) => Promise<Map<string, Outcome>>;

/** A queue running at most `n` of one reader's chunks at once. */
function readerQueue(n: number): Limit {
  const b = bulkhead(n, Number.POSITIVE_INFINITY);
  return (run) => b.execute(run);
}

interface InFlight {
  /**
   * What the fetch will store against (row version, extract epoch) and the identifier it asked for: only
   * readers that saw the same may share it, so nothing invalidated since it started is shared as fresh.
   */
  version: string | null;
  epoch: string;
  identifier: string;
  outcome: Promise<Outcome>;
  /** The provider's answer before it is stored (never, when the call fails): for partial answers. */
  arrived: Promise<CachedPoints>;
}

/** A fetch's outcome, and its points as soon as the provider answered, before they are stored (never, when the call fails). */
export interface Flight {
  outcome: Promise<Outcome>;
  arrived: Promise<CachedPoints>;
}

/**
 * Fetches data points from the provider for the cache: in chunks of PROVIDER_BATCH_SIZE identifiers, each
 * subject's fetch shared with concurrent readers that read the same row (single-flight), the answer
 * stored through the CacheStore, and the older data served as stale when the provider fails.
 */
export class CacheFetcher {
  readonly provider: ProviderClient;
  private readonly inflight = new Map<string, InFlight>();

  constructor(
    private readonly store: CacheStore,
    private readonly config: Config,
    private readonly log: Logger,
    private readonly secrets: SecretBox,
    meter?: ProviderMeter,
  ) {
    this.provider = new ProviderClient(
      {
        timeoutMs: config.PROVIDER_TIMEOUT_MS,
        retries: config.PROVIDER_RETRIES,
        backoffMs: config.PROVIDER_BACKOFF_MS,
        maxPages: config.PROVIDER_MAX_PAGES,
        concurrency: config.PROVIDER_CONCURRENCY,
        breakerFailures: config.PROVIDER_BREAKER_FAILURES,
        breakerThreshold: config.PROVIDER_BREAKER_THRESHOLD,
        breakerWindowMs: config.PROVIDER_BREAKER_WINDOW_MS,
        breakerProbeMs: config.PROVIDER_BREAKER_PROBE_MS,
        breakerOpenMs: config.PROVIDER_BREAKER_OPEN_MS,
      },
      log,
      meter,
    );
  }

  /**
   * The outcome of a fetch in flight that a reader who read row version `version` (null: no row) may
   * share: same version, extract epoch and identifier.
   */
  inFlight(tenantId: string, extract: ExtractWithSource, s: SubjectKey, version: string | null): Flight | undefined {
    const flying = this.inflight.get(cacheKey(tenantId, extract.key, s.id));
    return flying && flying.version === version && flying.epoch === extract.cache_epoch && flying.identifier === s.identifier
      ? flying
      : undefined;
  }

  /**
   * Fetches in chunks of PROVIDER_BATCH_SIZE identifiers; `gen` is the store's generation of the extract
   * read before the cache rows were. Without `limit` (a reader's fetch) each subject's outcome is
   * registered as in flight so that concurrent readers share the call, and at most PROVIDER_CONCURRENCY
   * of its chunks are started at once (the provider client bounds the data source's calls across readers);
   * each chunk's answer is stored as it arrives. With `limit` (a background re-fetch, which waits in a
   * queue) nothing is registered, so readers never wait behind that queue.
   */
  fetch(tenantId: string, extract: ExtractWithSource, wants: readonly Want[], gen: number, limit?: Limit): Map<string, Flight> {
    const outcomes = new Map<string, Flight>();
    const size = this.config.PROVIDER_BATCH_SIZE;
    // Chunks by distinct identifiers: subjects sharing one go together.
    const byIdentifier = new Map<string, Want[]>();
    for (const w of wants) byIdentifier.set(w.subject.identifier, [...(byIdentifier.get(w.subject.identifier) ?? []), w]);
    const groups = [...byIdentifier.values()];
    // One reader's many chunks (an aggregate over thousands of subjects) go out a few at a time: the
    // provider is not flooded, and each answer is stored before the time-outs of the later calls run.
    const queue = limit ?? (groups.length > size ? readerQueue(this.config.PROVIDER_CONCURRENCY) : (run: Run) => run());
    // Once one chunk's call failed, the later ones no longer probe an open circuit (P88): an aggregate
    // over many chunks costs a failing provider one probe, not one per chunk in turn.
    const calls = { failed: false };
    for (let i = 0; i < groups.length; i += size) {
      const chunk = groups.slice(i, i + size).flat();
      let answered!: (m: Map<string, CachedPoints>) => void;
      const arrivedAll = new Promise<Map<string, CachedPoints>>((r) => (answered = r));
      const result = queue(() => this.fetchChunk(tenantId, extract, chunk, gen, limit !== undefined, calls, answered));
      for (const w of chunk) {
        const arrived = arrivedAll.then((m) => m.get(w.subject.id)!);
        const key = cacheKey(tenantId, extract.key, w.subject.id);
        const outcome = result.then(
          (m) => m.get(w.subject.id)!,
          (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
        );
        if (!limit) {
          const entry = { version: w.expectedVersion, epoch: extract.cache_epoch, identifier: w.subject.identifier, outcome, arrived };
          this.inflight.set(key, entry);
          void outcome.finally(() => this.inflight.get(key) === entry && this.inflight.delete(key));
        }
        outcomes.set(w.subject.id, { outcome, arrived });
      }
    }
    return outcomes;
  }

  private async fetchChunk(
    tenantId: string,
    extract: ExtractWithSource,
    wants: readonly Want[],
    gen: number,
    background: boolean,
    calls: { failed: boolean },
    answered: (points: Map<string, CachedPoints>) => void,
  ): Promise<Map<string, Outcome>> {
    const identifiers = [...new Set(wants.map((w) => w.subject.identifier))];
    let points: DataPoint[];
    let rejected: RejectedPoint[];
    // D10: a subject with nothing cached goes to the provider, open circuit or not (P88).
    const mustReach = !calls.failed && wants.some((w) => !w.fallback);
    try {
      ({ points, rejected } = await this.provider.fetchAll(
        this.sourceOf(tenantId, extract),
        { key: extract.key, options: extract.options },
        identifiers,
        mustReach,
      ));
    } catch (e) {
      // An open circuit refusing a call with older data to serve says nothing of the provider now: the
      // later chunks with nothing cached still probe. Refused after a probe (mustReach), it failed.
      if (!(e instanceof CircuitOpenError) || mustReach) calls.failed = true;
      // While a circuit is open, reads with older data to serve are refused: its state changes are logged (by the client), not each refusal.
      const level = e instanceof CircuitOpenError ? 'debug' : 'warn';
      this.log[level](
        { extract: extract.key, dataSource: extract.source.key, subjects: identifiers.length, err: (e as Error).message },
        'data provider call failed',
      );
      return new Map(wants.map((w) => [w.subject.id, failedOutcome(w, extract, (e as Error).message)]));
    }
    // A node that is not a valid data point is dropped, and the subject's valid points stored as usual:
    // a bad point costs no re-fetch on every read, nor the breaker anything (P90). One naming no subject
    // asked for is ignored, like any point of another subject.
    if (rejected.length > 0) {
      const asked = new Set(identifiers);
      const dropped = rejected.filter((r) => r.subjectIdentifier !== undefined && asked.has(r.subjectIdentifier)).length;
      // The provider's fault, not the service's: a warning per call, naming each point (the first few).
      this.log.warn(
        {
          extract: extract.key,
          dataSource: extract.source.key,
          droppedPoints: dropped,
          ignoredPoints: rejected.length - dropped,
          points: rejected.slice(0, LOGGED_REJECTS).map((r) => ({
            subjectIdentifier: r.subjectIdentifier ?? null,
            subjectIds: wants.filter((w) => w.subject.identifier === r.subjectIdentifier).map((w) => w.subject.id),
            pointId: r.pointId ?? null,
            reason: r.reason,
          })),
        },
        'data provider answered invalid data points',
      );
    }
    const bySubject = new Map<string, DataPoint[]>();
    for (const p of points) bySubject.set(p.SubjectIdentifier, [...(bySubject.get(p.SubjectIdentifier) ?? []), p]);
    const writes: CacheWrite[] = wants.map((w) => {
      const mine = bySubject.get(w.subject.identifier) ?? [];
      const removed = new Set(w.removedIds);
      return {
        subjectId: w.subject.id,
        identifier: w.subject.identifier,
        points: mine.filter((p) => !removed.has(p.Id)),
        expectedVersion: w.expectedVersion,
        // A removed id stays remembered while the provider still returns it (a lagging replica).
        removedIds: w.removedIds.filter((id) => mine.some((p) => p.Id === id)),
      };
    });
    answered(new Map(writes.map((w) => [w.subjectId, { points: w.points, fetchedAt: new Date(), stale: false }])));
    // A background re-fetch that got other data than the row held tells live subscribers (a reader's
    // fetch follows an invalidation they heard of already, or answers the reader who asked).
    const changed = new Set(
      background ? writes.filter((w, i) => !samePoints(wants[i]!.fallback?.points, w.points)).map((w) => w.subjectId) : [],
    );
    let stored: Map<string, Date>;
    try {
      stored = await this.store.write(tenantId, extract.key, extract.cache_epoch, writes, gen, changed);
    } catch (e) {
      this.log[errorLogLevel(e)]({ err: e, extract: extract.key }, 'storing fetched data points failed');
      stored = new Map();
    }
    // What was not stored (invalidated meanwhile) is still this request's answer, just not cached.
    return new Map(
      writes.map((w) => {
        const at = stored.get(w.subjectId);
        return [
          w.subjectId,
          at ? { points: w.points, fetchedAt: at, stale: false, stored: true } : { points: w.points, fetchedAt: new Date(), stale: false },
        ];
      }),
    );
  }

  private sourceOf(tenantId: string, extract: ExtractWithSource): ProviderSource {
    const s = extract.source;
    return {
      tenantId,
      key: s.key,
      getDataPointsUrl: s.get_data_points_url,
      tokenUrl: s.token_url,
      clientId: s.client_id,
      scope: s.scope,
      clientSecret: async () => (s.client_secret_enc ? this.secrets.open(s.client_secret_enc) : null),
    };
  }
}

/** A subject whose fetch failed: its older set served stale, or PROVIDER_UNAVAILABLE with nothing cached (D10). */
function failedOutcome(w: Want, extract: ExtractWithSource, why: string): Outcome {
  return w.fallback
    ? { points: w.fallback.points, fetchedAt: w.fallback.fetchedAt, stale: true }
    : new ProviderUnavailableError(`The data provider of extract '${extract.key}' is unavailable and nothing is cached: ${why}`);
}

/** Whether two sets of points are the same as stored (compared as JSON: absent and undefined properties alike). */
function samePoints(before: readonly DataPoint[] | undefined, after: readonly DataPoint[]): boolean {
  return before !== undefined && isDeepStrictEqual(JSON.parse(JSON.stringify(before)), JSON.parse(JSON.stringify(after)));
}
