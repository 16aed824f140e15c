import type { NextFunction, Request, Response } from 'express';
import { type DocumentNode, Kind, type OperationDefinitionNode } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Connections of the database pool, read when scraped. */
export type PoolStats = () => { total: number; idle: number; waiting: number };

/** Distinct GraphQL operation names kept as label values; clients choose names, so their number is bounded. */
const MAX_OPERATION_NAMES = 200;

/**
 * The service's Prometheus metrics (issue 10): HTTP requests by route template and status, GraphQL
 * operations by name and outcome, database pool use, and the process defaults. One registry per app, so
 * several apps in one process (tests) do not collide. No tenant or client labels: their number is
 * unbounded.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'method' | 'route' | 'status'>;
  private readonly duration: Histogram<'method' | 'route' | 'status'>;
  private readonly operations: Counter<'operation' | 'outcome'>;
  private readonly names = new Set<string>();

  constructor(poolStats?: PoolStats) {
    collectDefaultMetrics({ register: this.registry });
    const registers = [this.registry];
    this.requests = new Counter({ name: 'http_requests_total', help: 'HTTP requests by route template and status.', labelNames: ['method', 'route', 'status'], registers });
    this.duration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency by route template and status.',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.operations = new Counter({ name: 'graphql_operations_total', help: 'GraphQL operations by name and outcome (ok, error).', labelNames: ['operation', 'outcome'], registers });
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
          (d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION && (!args.operationName || d.name?.value === args.operationName),
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
