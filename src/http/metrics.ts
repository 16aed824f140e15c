import type { IncomingHttpHeaders } from 'node:http';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import type { NextFunction, Request, Response } from 'express';
import { type DocumentNode, Kind, type OperationDefinitionNode } from 'graphql';
import { type Plugin, isAsyncIterable } from 'graphql-yoga';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { streamTransport } from './accept.js';

/** Connections of the database pool, read when scraped. */
export type PoolStats = () => { total: number; idle: number; waiting: number };

/** Data sources' circuit states and the data cache's background re-fetch, read when scraped. */
export interface DataCacheState {
  providerBreakerStates(): { tenantId: string; dataSource: string; state: 'closed' | 'open' | 'half_open' | 'isolated' }[];
  /** Entries flagged for a re-fetch, of every instance (a query). */
  refetchBacklog(): Promise<number>;
  /** Subjects this instance's re-fetch claimed and has not re-fetched yet. */
  readonly refetching: number;
}

/** Admission's units in use and waiting requests per tenant, read when scraped. */
export interface AdmissionState {
  snapshot(): { inFlight: number; tenants: Record<string, { inFlight: number; waiting: number }> };
}

/** Read replicas, read when scraped (src/db/replicas.ts's ReadReplicas). */
export interface ReplicaState {
  readonly replicas: readonly { name: string; up: boolean; lagSeconds: number }[];
  /** Read operations by `target|reason`. */
  readonly readCounts: ReadonlyMap<string, number>;
}

/** Live aggregate subscriptions, read when scraped. */
export interface LiveAggregateState {
  readonly computations: Readonly<Record<'subscribe' | 'change', number>>;
  readonly size: { subscriptions: number; groups: number };
}

const BREAKER_STATES = ['closed', 'half_open', 'open', 'isolated'] as const;

const GC_KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
// Every garbage collection of the process, by kind: runs and seconds paused. prom-client's
// `nodejs_gc_duration_seconds` observes only the first of the entries Node hands its observer together,
// so it misses a collection that comes in the same turn as another (a full one right after a scavenge).
const gcRuns = new Map<string, number>();
const gcSeconds = new Map<string, number>();
let gcObserved = false;
function observeCollections(): void {
  if (gcObserved) return;
  gcObserved = true;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = GC_KINDS[(e as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other';
      gcRuns.set(kind, (gcRuns.get(kind) ?? 0) + 1);
      gcSeconds.set(kind, (gcSeconds.get(kind) ?? 0) + e.duration / 1000);
    }
  }).observe({ entryTypes: ['gc'] });
}

/** Distinct GraphQL operation names kept as label values; clients choose names, so their number is bounded. */
const MAX_OPERATION_NAMES = 200;
/** Distinct data source keys kept as label values (tenant files name them): later ones count as `other`. */
export const MAX_DATA_SOURCE_LABELS = 50;
/** Seconds of a provider call or token request: up to PROVIDER_TIMEOUT_MS's range. */
const PROVIDER_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** How long a scrape waits for the re-fetch backlog's count (a slow database must not stall the scrape). */
const BACKLOG_DEADLINE_MS = 1000;
const TRANSPORTS = ['sse', 'multipart', 'websocket'] as const;
const LOOKUPS = ['memory', 'database', 'miss'] as const;

/**
 * A subscription's transport, from the request that opened it: graphql-ws (an operation without an HTTP
 * request of its own, or with the WebSocket upgrade's), or the HTTP stream its Accept is served
 * (streamTransport); `other` if none says.
 */
function transportOf(context: unknown): string {
  const req = (context as { req?: { headers?: IncomingHttpHeaders } } | undefined)?.req;
  const headers = req?.headers;
  if (req && (!headers || headers.upgrade?.toLowerCase() === 'websocket')) return 'websocket';
  return streamTransport(headers?.accept ?? '') ?? 'other';
}

/**
 * The service's Prometheus metrics (P103): HTTP requests by route template and status, GraphQL
 * operations by name and outcome, database pool use, admission per tenant, data sources' circuits, and
 * the process defaults; provider calls and tokens, the data cache and subscriptions (P142). One registry
 * per app, so several apps in one process (tests) do not collide. No client labels (clients choose
 * operation names, and there may be many); tenant labels only where fairness between tenants is the
 * point (admission) and on the circuits' gauge (a circuit is a tenant's data source), their number being
 * the operator's; data source keys capped (P143).
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'method' | 'route' | 'status'>;
  private readonly duration: Histogram<'method' | 'route' | 'status'>;
  private readonly operations: Counter<'operation' | 'outcome'>;
  private readonly names = new Set<string>();

  private readonly admissions: Counter<'tenant' | 'outcome'>;
  private readonly cuts: Counter<'kind'>;
  private readonly sharedExecutions: Counter;
  private readonly sharedDeliveries: Counter;

  private readonly providerCalls: Counter<'data_source' | 'outcome'>;
  private readonly providerSeconds: Histogram<'data_source' | 'outcome'>;
  private readonly tokenRequests: Counter<'data_source' | 'outcome'>;
  private readonly tokenSeconds: Histogram<'data_source'>;
  private readonly sources = new Set<string>();
  private readonly cacheLookups: Counter<'result'>;
  private readonly staleServed: Counter;
  private readonly subscriptionsOpen: Gauge<'transport'>;
  private readonly subscriptionEvents: Counter<'transport'>;
  private readonly slowConsumers: Counter;
  private readonly droppedChanges: Counter;

  constructor(poolStats?: PoolStats) {
    collectDefaultMetrics({ register: this.registry });
    const registers = [this.registry];
    observeCollections();
    for (const [name, help, totals] of [
      ['nodejs_gc_runs_total', 'Garbage collections by kind (major, minor, incremental, weakcb), every one counted.', gcRuns],
      ['nodejs_gc_pause_seconds_total', 'Seconds the process paused for garbage collection, by kind.', gcSeconds],
    ] as const) {
      new Counter({
        name,
        help,
        labelNames: ['kind'],
        registers,
        collect() {
          this.reset();
          for (const [kind, v] of totals) this.inc({ kind }, v);
        },
      });
    }
    this.requests = new Counter({
      name: 'http_requests_total',
      help: 'HTTP requests by route template and status.',
      labelNames: ['method', 'route', 'status'],
      registers,
    });
    this.duration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency by route template and status.',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.operations = new Counter({
      name: 'graphql_operations_total',
      help: 'GraphQL operations by name and outcome (ok, error).',
      labelNames: ['operation', 'outcome'],
      registers,
    });
    this.admissions = new Counter({
      name: 'admission_requests_total',
      help: 'Requests at admission control by tenant and outcome (admitted, queued: had to wait, refused: 429 or 503).',
      labelNames: ['tenant', 'outcome'],
      registers,
    });
    this.cuts = new Counter({
      name: 'http_responses_cut_total',
      help: 'Connections ended because the client did not take a response (answer) or a stream part (stream) within RESPONSE_WRITE_TIMEOUT_MS.',
      labelNames: ['kind'],
      registers,
    });
    this.sharedExecutions = new Counter({
      name: 'graphql_shared_event_executions_total',
      help: "Executions of a subscription's shared events: one per event, document, operation and variables, however many subscribers it reaches.",
      registers,
    });
    this.sharedDeliveries = new Counter({
      name: 'graphql_shared_event_deliveries_total',
      help: "Results of a subscription's shared events handed to subscribers, each counted.",
      registers,
    });
    this.providerCalls = new Counter({
      name: 'provider_calls_total',
      help: `Attempts at providers' get-data-points (each page, retry and probe) by data source key (the first ${MAX_DATA_SOURCE_LABELS}, then other) and outcome: ok, http_error (not 200), invalid_answer, unreachable, timeout, token_error (no token), refused (the circuit is open: no call made).`,
      labelNames: ['data_source', 'outcome'],
      registers,
    });
    this.providerSeconds = new Histogram({
      name: 'provider_call_duration_seconds',
      help: 'Seconds of an attempt at get-data-points (its token included, the wait for a place under PROVIDER_CONCURRENCY not), by data source and outcome; refused attempts are not observed.',
      labelNames: ['data_source', 'outcome'],
      buckets: PROVIDER_BUCKETS,
      registers,
    });
    this.tokenRequests = new Counter({
      name: 'provider_token_requests_total',
      help: "Requests to providers' token endpoints (client credentials) by data source and outcome: ok, http_error (429, 5xx), rejected (the client refused, or no token in the answer), unreachable, timeout.",
      labelNames: ['data_source', 'outcome'],
      registers,
    });
    this.tokenSeconds = new Histogram({
      name: 'provider_token_request_duration_seconds',
      help: "Seconds of a request to a provider's token endpoint, by data source.",
      labelNames: ['data_source'],
      buckets: PROVIDER_BUCKETS,
      registers,
    });
    this.cacheLookups = new Counter({
      name: 'data_cache_lookups_total',
      help: "Subjects' data point sets a read looked up, one per subject and extract, by result: memory (fresh in the instance's LRU), database (fresh in its row), miss (fetched from the provider, or waiting for another read's fetch).",
      labelNames: ['result'],
      registers,
    });
    for (const result of LOOKUPS) this.cacheLookups.inc({ result }, 0);
    this.staleServed = new Counter({
      name: 'data_cache_stale_served_total',
      help: "Subjects' data point sets served stale because their provider failed (D10: extensions.staleData).",
      registers,
    });
    this.subscriptionsOpen = new Gauge({
      name: 'graphql_subscriptions_open',
      help: 'Open GraphQL subscriptions (every field) by transport: sse, multipart, websocket, other.',
      labelNames: ['transport'],
      registers,
    });
    this.subscriptionEvents = new Counter({
      name: 'graphql_subscription_events_total',
      help: 'Results of GraphQL subscriptions handed to their transport (the error that ends a stream included), by transport.',
      labelNames: ['transport'],
      registers,
    });
    for (const transport of TRANSPORTS) {
      this.subscriptionsOpen.set({ transport }, 0);
      this.subscriptionEvents.inc({ transport }, 0);
    }
    this.slowConsumers = new Counter({
      name: 'graphql_subscription_slow_consumers_total',
      help: 'dataPointsChanged subscriptions ended with SLOW_CONSUMER (more bursts of changes unread than MAX_PENDING_BURSTS). A stream cut at its write deadline is in http_responses_cut_total{kind="stream"}.',
      registers,
    });
    this.droppedChanges = new Counter({
      name: 'graphql_subscription_events_dropped_total',
      help: 'Unread dataPointsChanged events (coalesced per extract) dropped when their subscription was ended with SLOW_CONSUMER.',
      registers,
    });
    if (poolStats) {
      new Gauge({
        name: 'db_pool_connections',
        help: 'Database pool connections by state (total, idle, waiting clients).',
        labelNames: ['state'],
        registers,
        collect() {
          const s = poolStats();
          this.set({ state: 'total' }, s.total);
          this.set({ state: 'idle' }, s.idle);
          this.set({ state: 'waiting' }, s.waiting);
        },
      });
    }
  }

  /** What the data cache and its provider client tell (the data domain's DataMeter). */
  dataMeter() {
    return {
      call: (dataSource: string, outcome: string, seconds: number) => {
        const labels = { data_source: this.sourceLabel(dataSource), outcome };
        this.providerCalls.inc(labels);
        if (outcome !== 'refused') this.providerSeconds.observe(labels, seconds);
      },
      token: (dataSource: string, outcome: string, seconds: number) => {
        const data_source = this.sourceLabel(dataSource);
        this.tokenRequests.inc({ data_source, outcome });
        this.tokenSeconds.observe({ data_source }, seconds);
      },
      lookups: (result: string, subjects: number) => {
        if (subjects > 0) this.cacheLookups.inc({ result }, subjects);
      },
      staleServed: (subjects: number) => {
        if (subjects > 0) this.staleServed.inc(subjects);
      },
    };
  }

  /** What the live feed tells (the data domain's LiveMeter). */
  liveMeter() {
    return {
      slowConsumer: (droppedChanges: number) => {
        this.slowConsumers.inc();
        this.droppedChanges.inc(droppedChanges);
      },
    };
  }

  /** Gauges of data sources' circuits and the data cache's re-fetch backlog, read when scraped. */
  observeDataCache(data: DataCacheState): void {
    const registers = [this.registry];
    let counting: Promise<number> | undefined;
    new Gauge({
      name: 'provider_circuit_state',
      help: "Data sources' circuit breakers: 1 for the state each is in (closed, half_open, open, isolated).",
      labelNames: ['tenant_id', 'data_source', 'state'],
      registers,
      collect() {
        this.reset();
        for (const b of data.providerBreakerStates()) {
          for (const state of BREAKER_STATES)
            this.set({ tenant_id: b.tenantId, data_source: b.dataSource, state }, b.state === state ? 1 : 0);
        }
      },
    });
    new Gauge({
      name: 'data_cache_refetch_backlog',
      help: `Cache entries flagged (invalidated) that hold data and wait for a background re-fetch, of every instance: counted in the database when scraped (NaN when the database fails or has not answered within ${BACKLOG_DEADLINE_MS} ms).`,
      registers,
      async collect() {
        // A scrape still answers while the database does not, or is slow (a lock, a full pool). A scrape
        // while a count still runs waits for that one rather than starting another: one connection at most.
        counting ??= data
          .refetchBacklog()
          .catch(() => NaN)
          .finally(() => (counting = undefined));
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<number>((resolve) => (timer = setTimeout(resolve, BACKLOG_DEADLINE_MS, NaN)));
        this.set(await Promise.race([counting, late]).finally(() => clearTimeout(timer)));
      },
    });
    new Gauge({
      name: 'data_cache_refetching',
      help: "Subjects this instance's background re-fetch claimed and has not re-fetched yet: queued behind PROVIDER_REFETCH_CONCURRENCY, or in a provider call.",
      registers,
      collect() {
        this.set(data.refetching);
      },
    });
  }

  /** A data source key as a label value: the first MAX_DATA_SOURCE_LABELS distinct keys, then `other`. */
  private sourceLabel(key: string): string {
    if (this.sources.has(key)) return key;
    if (this.sources.size >= MAX_DATA_SOURCE_LABELS) return 'other';
    this.sources.add(key);
    return key;
  }

  /** Admission's outcome callback, counting per tenant. */
  admission() {
    return (tenant: string, outcome: 'admitted' | 'queued' | 'refused') => this.admissions.inc({ tenant, outcome });
  }

  /** Counts a connection cut at its write deadline. */
  responseCut(kind: 'answer' | 'stream'): void {
    this.cuts.inc({ kind });
  }

  /** The shared subscription results' callback (`sharedSubscriptionResults`). */
  sharedEvents() {
    return { executed: () => this.sharedExecutions.inc(), delivered: () => this.sharedDeliveries.inc() };
  }

  /** Gauges of admission's units in use and waiting requests per tenant, read when scraped. */
  observeAdmission(state: AdmissionState): void {
    const registers = [this.registry];
    new Gauge({
      name: 'admission_in_flight_units',
      help: 'Units of database work admitted and running, by tenant.',
      labelNames: ['tenant'],
      registers,
      collect() {
        this.reset();
        for (const [tenant, t] of Object.entries(state.snapshot().tenants)) this.set({ tenant }, t.inFlight);
      },
    });
    new Gauge({
      name: 'admission_waiting_requests',
      help: 'Requests waiting for admission, by tenant.',
      labelNames: ['tenant'],
      registers,
      collect() {
        this.reset();
        for (const [tenant, t] of Object.entries(state.snapshot().tenants)) this.set({ tenant }, t.waiting);
      },
    });
  }

  /** Read replicas (P151): up, lag, and where read operations went; read when scraped. */
  observeReplicas(state: ReplicaState): void {
    const registers = [this.registry];
    new Gauge({
      name: 'db_replica_up',
      help: 'Read replicas: 1 when up (its last probe answered and it is a standby), else 0; reads go to the primary meanwhile.',
      labelNames: ['replica'],
      registers,
      collect() {
        for (const r of state.replicas) this.set({ replica: r.name }, r.up ? 1 : 0);
      },
    });
    new Gauge({
      name: 'db_replica_lag_seconds',
      help: "Read replicas: seconds since the primary wrote the oldest WAL position the replica has not replayed (0: replayed the primary's latest), as of its last probe.",
      labelNames: ['replica'],
      registers,
      collect() {
        for (const r of state.replicas) this.set({ replica: r.name }, r.lagSeconds);
      },
    });
    new Counter({
      name: 'db_reads_total',
      help: "Reads by where they ran (target: replica, primary) and why. Per read operation: replayed (the replica has the tenant's writes), behind, lagging, down (no replica fit). Per statement: replica_failed (a replica statement failed and ran again on the primary; its operation was counted as replayed).",
      labelNames: ['target', 'reason'],
      registers,
      collect() {
        this.reset();
        for (const [key, n] of state.readCounts) {
          const [target, reason] = key.split('|');
          this.inc({ target: target!, reason: reason! }, n);
        }
      },
    });
  }

  /** The live aggregates' computations (by why) and open subscriptions and questions, read when scraped. */
  observeLiveAggregates(state: LiveAggregateState): void {
    const registers = [this.registry];
    new Counter({
      name: 'aggregate_recomputations_total',
      help: 'Answers the live aggregates computed, by reason: subscribe (a first answer no subscriber of the question had), change (changes heard under it).',
      labelNames: ['reason'],
      registers,
      collect() {
        this.reset();
        for (const [reason, n] of Object.entries(state.computations)) this.inc({ reason }, n);
      },
    });
    new Gauge({
      name: 'aggregate_subscriptions',
      help: 'Open live aggregate subscriptions (subscriptions), and the distinct questions they ask (questions).',
      labelNames: ['kind'],
      registers,
      collect() {
        const { subscriptions, groups } = state.size;
        this.set({ kind: 'subscriptions' }, subscriptions);
        this.set({ kind: 'questions' }, groups);
      },
    });
  }

  /** Express middleware timing every request; the route is the matched template, never the raw path. */
  http() {
    return (req: Request, res: Response, next: NextFunction) => {
      const end = this.duration.startTimer();
      res.on('finish', () => {
        const template = (req.route as { path?: string } | undefined)?.path;
        const route = typeof template === 'string' ? `${req.baseUrl}${template}` : req.baseUrl || 'unmatched';
        const labels = { method: req.method, route, status: String(res.statusCode) };
        this.requests.inc(labels);
        end(labels);
      });
      next();
    };
  }

  /**
   * Yoga plugin counting operations by name (bounded) and outcome, and subscriptions open and their
   * results by transport, whichever transport serves them (the plugin sees every subscribe).
   */
  graphql(): Plugin {
    return {
      onSubscribe: ({ args }) => ({
        onSubscribeResult: ({ result }) => {
          if (!isAsyncIterable(result)) return;
          const labels = { transport: transportOf(args.contextValue) };
          this.subscriptionsOpen.inc(labels);
          let open = true;
          return {
            onNext: () => this.subscriptionEvents.inc(labels),
            onEnd: () => {
              if (open) this.subscriptionsOpen.dec(labels);
              open = false;
            },
          };
        },
      }),
      onExecute: ({ args }) => {
        const op = (args.document as DocumentNode).definitions.find(
          (d): d is OperationDefinitionNode =>
            d.kind === Kind.OPERATION_DEFINITION && (!args.operationName || d.name?.value === args.operationName),
        );
        const given = op?.name?.value;
        let name = given ?? 'anonymous';
        if (given && !this.names.has(given)) {
          if (this.names.size < MAX_OPERATION_NAMES) this.names.add(given);
          else name = 'other';
        }
        return {
          onExecuteDone: ({ result }) => {
            const failed = 'errors' in result && Array.isArray(result.errors) && result.errors.length > 0;
            this.operations.inc({ operation: name, outcome: failed ? 'error' : 'ok' });
          },
        };
      },
    };
  }
}
