import { PerformanceObserver, constants } from 'node:perf_hooks';
import type { NextFunction, Request, Response } from 'express';
import { type DocumentNode, Kind, type OperationDefinitionNode } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Connections of the database pool, read when scraped. */
export type PoolStats = () => { total: number; idle: number; waiting: number };

/** Data sources' circuit states, read when scraped. */
export interface BreakerStates {
  providerBreakerStates(): { tenantId: string; dataSource: string; state: 'closed' | 'open' | 'half_open' | 'isolated' }[];
}

/** Admission's units in use and waiting requests per tenant, read when scraped. */
export interface AdmissionState {
  snapshot(): { inFlight: number; tenants: Record<string, { inFlight: number; waiting: number }> };
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

/**
 * The service's Prometheus metrics (P103): HTTP requests by route template and status, GraphQL
 * operations by name and outcome, database pool use, admission per tenant, data sources' circuits, and
 * the process defaults. One registry per app, so several apps in one process (tests) do not collide. No
 * client labels (clients choose operation names, and there may be many); tenant labels only where
 * fairness between tenants is the point (admission), their number being the operator's.
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

  constructor(poolStats?: PoolStats, breakers?: BreakerStates) {
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
    if (breakers) {
      new Gauge({
        name: 'provider_circuit_state',
        help: "Data sources' circuit breakers: 1 for the state each is in (closed, half_open, open, isolated).",
        labelNames: ['tenant_id', 'data_source', 'state'],
        registers,
        collect() {
          this.reset();
          for (const b of breakers.providerBreakerStates()) {
            for (const state of BREAKER_STATES)
              this.set({ tenant_id: b.tenantId, data_source: b.dataSource, state }, b.state === state ? 1 : 0);
          }
        },
      });
    }
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

  /** Yoga plugin counting operations by name (bounded) and outcome. */
  graphql(): Plugin {
    return {
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
