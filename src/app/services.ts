import type { Request, RequestHandler } from 'express';
import type { Logger } from 'pino';
import type { Config } from '../core/config.js';
import type { Principal, Scope } from '../core/permissions.js';
import { TableAnalyzer } from '../db/analyze.js';
import { EventBus } from '../db/event-bus.js';
import type { Listen } from '../db/notifications.js';
import { ReadFloors, ReadReplicas } from '../db/replicas.js';
import type { Db } from '../db/tables.js';
import { PrincipalCache, TokenService, authenticate, requireToken } from '../domains/auth/index.js';
import { AggregateMemory, DataCache, DataChangeFeed, LiveAggregates, SecretBox, dataContext } from '../domains/data/index.js';
import { OutboxSender } from '../domains/portal/index.js';
import { structureTypesCache } from '../domains/structural-entity/index.js';
import { subjectCaches } from '../domains/subject/index.js';
import { recordReadFloor } from '../domains/tenant/index.js';
import { type ContextInit, createContext } from '../graphql/context.js';
import { Admission } from '../http/admission.js';
import { Metrics, type PoolStats } from '../http/metrics.js';

/** What runs once per instance, shared by its requests (never by two apps in one process). */
export interface Services {
  tokens: TokenService;
  data: DataCache;
  dataChanges: DataChangeFeed;
  /** Delivers queued portal invitations (D9). */
  outbox: OutboxSender;
  metrics: Metrics | undefined;
  admission: Admission;
  /** One authentication for REST routes and /graphql alike. */
  authenticate(scopes: readonly Scope[]): RequestHandler;
  /**
   * The same check for a token that comes outside an HTTP request's headers (a WebSocket's
   * `connectionParams`): the principal, or the AppError the request would have been refused with.
   */
  verify(authorization: string | undefined, scopes: readonly Scope[]): Promise<Principal>;
  /** One context for REST routes and /graphql alike (HTTP or WebSocket), for a request whose principal is set. */
  context(req: Pick<Request, 'principal' | 'id'>): ContextInit;
  /** Stops the background work, in the reverse order of its start. */
  close(): Promise<void>;
}

/** What an app is built over: an open, migrated database and its `listen` (opens the event bus), the pool's stats for /metrics. */
export interface AppInit {
  config: Config;
  db: Db;
  logger: Logger;
  listen?: Listen;
  poolStats?: PoolStats;
}

export async function startServices({ config, db, logger, listen, poolStats }: AppInit): Promise<Services> {
  const tokens = new TokenService(db, config);
  await tokens.ensureSigningKey();
  // One LISTEN connection per instance carries every topic (the cache's invalidations; later subscriptions).
  const bus = listen ? await EventBus.open(listen, logger) : undefined;
  const metrics = config.METRICS ? new Metrics(poolStats) : undefined;
  const data = new DataCache(db, config, logger, new SecretBox(db, config.SECRETS_KEY), metrics?.dataMeter());
  metrics?.observeDataCache(data);
  await data.start(bus);
  // Live updates (dataPointsChanged): one bus subscription fanned out to every open subscription.
  const dataChanges = new DataChangeFeed(db, { perClient: config.SUBSCRIPTIONS_PER_CLIENT }, logger, metrics?.liveMeter());
  dataChanges.start(bus);
  const outbox = new OutboxSender(db, config, logger);
  outbox.start(bus);
  // Fresh planner statistics after bulk writes (P89), not only when autovacuum comes by.
  const analyzer = new TableAnalyzer(db, { rows: config.ANALYZE_AFTER_ROWS, intervalMs: 1000 }, logger);
  await analyzer.start();

  const admission = new Admission(
    {
      capacity: config.ADMISSION_CAPACITY ?? config.DATABASE_POOL_SIZE,
      tenantShare: config.ADMISSION_TENANT_SHARE,
      clientShare: config.ADMISSION_CLIENT_SHARE,
      queueLimit: config.ADMISSION_QUEUE_LIMIT,
      queueTimeoutMs: config.ADMISSION_QUEUE_TIMEOUT_MS,
      costPerUnit: config.ADMISSION_COST_PER_UNIT,
      rateLimit: { requests: config.RATE_LIMIT_REQUESTS, windowSeconds: config.RATE_LIMIT_WINDOW_SECONDS },
    },
    metrics?.admission(),
  );
  metrics?.observeAdmission(admission);

  // Reads on streaming replicas (P151): a query of a tenant reads from one that has replayed its writes.
  const replicas = config.DATABASE_REPLICA_URL?.length
    ? await ReadReplicas.open(
        db,
        {
          primaryUrl: config.DATABASE_URL!,
          urls: config.DATABASE_REPLICA_URL,
          maxLagMs: config.DATABASE_REPLICA_MAX_LAG_MS,
          probeMs: config.DATABASE_REPLICA_PROBE_MS,
          poolSize: config.DATABASE_REPLICA_POOL_SIZE ?? config.DATABASE_POOL_SIZE,
          statementTimeoutMs: config.DATABASE_STATEMENT_TIMEOUT_MS,
          connectTimeoutMs: config.DATABASE_CONNECT_TIMEOUT_MS,
          preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
          // Replicas behind PgBouncer too: the primary's session settings are the role's, which replicate.
          pooler: config.DATABASE_POOLER,
        },
        logger,
      )
    : undefined;
  if (replicas) metrics?.observeReplicas(replicas);
  // Principals read once per instance, invalidated through the bus (issue 35, P8); not where reads go to
  // replicas, which need the tenant's read floor with every request.
  const principals = new PrincipalCache(replicas === undefined);
  principals.start(bus);
  // P152: on PostgreSQL floors are recorded whenever a replica may serve reads, its own or another instance's.
  const floors = config.DATABASE_URL ? await ReadFloors.start(db, replicas !== undefined) : undefined;

  const aggregates = new AggregateMemory();
  // The instance's configuration and count caches.
  const structureTypes = structureTypesCache();
  const subjects = subjectCaches();
  const contextInit = (principal: Principal, requestId: string): ContextInit => ({
    db,
    principal,
    requestId,
    // P152: the data cache, live aggregates and subscriptions keep the primary.
    replicas: floors && {
      reads: () => replicas?.reads(principal.readFloor) ?? db,
      // The write committed and its answer stands: a failed floor is logged, the tenant's reads may lag (P152).
      wrote: async () => {
        if (floors.on)
          await recordReadFloor(db, { id: principal.tenantId }).catch((e: unknown) =>
            logger.warn(
              { err: e, tenant: principal.tenantKey, requestId },
              'read floor not recorded after a write: reads from replicas may miss it',
            ),
          );
      },
    },
    ...dataContext(data, aggregates),
    dataChanges,
    liveAggregates,
    structureTypes,
    subjects,
  });
  // Admitted as the query would be (P52), outside any request.
  const liveAggregates = new LiveAggregates(
    db,
    dataChanges,
    (principal) => createContext(contextInit(principal, 'live-aggregates')),
    (who, cost) => admission.acquire(who, cost / config.ADMISSION_COST_PER_UNIT),
    logger,
  );
  metrics?.observeLiveAggregates(liveAggregates);
  return {
    tokens,
    data,
    dataChanges,
    outbox,
    metrics,
    admission,
    authenticate: (scopes) => requireToken(db, tokens, principals, scopes, (holder, res) => admission.gate(holder, res)),
    // No response to carry the rate limit's headers: a refusal still carries them in its error.
    verify: (authorization, scopes) =>
      authenticate(db, tokens, principals, authorization, scopes, (holder) =>
        admission.gate(holder, { closed: false, setHeader: () => undefined, once: () => undefined }),
      ),
    context: (req) => contextInit(req.principal!, String(req.id)),
    close: async () => {
      dataChanges.close();
      liveAggregates.close();
      await analyzer.close();
      await outbox.close();
      await data.close();
      principals.close();
      await bus?.close();
      floors?.close();
      await replicas?.close();
    },
  };
}
