import { randomUUID } from 'node:crypto';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { GraphQLError } from 'graphql';
import { createYoga, maskError } from 'graphql-yoga';
import { useDeferStream } from '@graphql-yoga/plugin-defer-stream';
import type { Logger } from 'pino';
import { pinoHttp } from 'pino-http';
import { acceptForYoga, acceptedGraphqlTypes } from '../http/accept.js';
import { Admission } from '../http/admission.js';
import type { Config } from '../core/config.js';
import { type ContextInit, createContext } from '../graphql/context.js';
import type { Scope } from '../core/permissions.js';
import type { Db } from '../db/tables.js';
import type { Listen } from '../db/notifications.js';
import { TableAnalyzer } from '../db/analyze.js';
import { EventBus } from '../db/event-bus.js';
import { TokenService, authRoutes, requireToken } from '../domains/auth/index.js';
import { AggregateMemory, DataCache, DataChangeFeed, SecretBox, dataContext } from '../domains/data/index.js';
import { OutboxSender } from '../domains/portal/index.js';
import { structureTypesCache } from '../domains/structural-entity/index.js';
import { subjectCaches } from '../domains/subject/index.js';
import { AppError, NotFoundError, ServiceUnavailableError } from '../core/errors.js';
import { ping } from '../db/database.js';
import { expectedErrorOf } from '../db/faults.js';
import { errorLogLevel, graphqlErrorBody, isRefusal, locatedAs, problemAnswer, statusLogLevel } from '../http/errors.js';
import { sendProblem, writeProblem } from '../http/problem.js';
import {
  admissionControl,
  compiledRepeatedDocuments,
  everyErrorCoded,
  graphqlErrorsAnswer200,
  logArgs,
  operationNameIsString,
  queryDataVersion,
  slicedResults,
  staleDataExtension,
} from '../http/graphql-plugins.js';
import { graphiqlOptions } from '../http/graphiql.js';
import { DASHBOARD_PATHS, dashboardRouter } from '../http/dashboard.js';
import { boundedParser, graphqlRequestLimits, queryLimits } from '../http/graphql-limits.js';
import { Metrics, type PoolStats } from '../http/metrics.js';
import { openApiDocument } from '../http/openapi/openapi.js';
import { methodNotAllowed, restRouter } from '../http/rest/router.js';
import { writeDeadline } from '../http/write-deadline.js';
import { routes } from './routes.js';
import { schema } from './schema.js';

export interface App {
  app: express.Express;
  tokens: TokenService;
  data: DataCache;
  /** Delivers queued portal invitations (D9). */
  outbox: OutboxSender;
  /**
   * Starts the shutdown drain (issue 15): /readyz answers 503 from now on, so a load balancer stops
   * sending, and every response carries `Connection: close`, so kept-alive clients reconnect elsewhere.
   * Live subscriptions end at once (SERVICE_UNAVAILABLE: subscribe again) and new ones are refused: a
   * stream would hold its connection until the shutdown time-out cut it.
   */
  drain(): void;
  /** Stops background work (re-fetches, the invalidation listener, the outbox sender); the caller closes the database after. */
  close(): Promise<void>;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * Builds the HTTP application over an open, migrated database; `listen()` is the caller's (server.ts,
 * tests). `listen` (the database handle's) opens the instance's event bus, which carries cache
 * invalidations between instances (D10).
 */
export async function buildApp({
  config,
  db,
  logger,
  listen,
  poolStats,
}: {
  config: Config;
  db: Db;
  logger: Logger;
  listen?: Listen;
  poolStats?: PoolStats;
}): Promise<App> {
  const tokens = new TokenService(db, config);
  await tokens.ensureSigningKey();
  // One LISTEN connection per instance carries every topic (the cache's invalidations; later subscriptions).
  const bus = listen ? await EventBus.open(listen, logger) : undefined;
  const data = new DataCache(db, config, logger, new SecretBox(db, config.SECRETS_KEY));
  await data.start(bus);
  // Live updates (dataPointsChanged): one bus subscription fanned out to every open subscription.
  const dataChanges = new DataChangeFeed(db, { perClient: config.SUBSCRIPTIONS_PER_CLIENT }, logger);
  dataChanges.start(bus);
  const outbox = new OutboxSender(db, config, logger);
  outbox.start(bus);
  // Fresh planner statistics after bulk writes (P89), not only when autovacuum comes by.
  const analyzer = new TableAnalyzer(db, { rows: config.ANALYZE_AFTER_ROWS, intervalMs: 1000 }, logger);
  await analyzer.start();

  const metrics = config.METRICS ? new Metrics(poolStats, data) : undefined;
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
  let draining = false;
  const app = express();
  app.use((_req, res, next) => {
    if (draining) res.setHeader('Connection', 'close');
    next();
  });
  writeDeadline(app.response, config.RESPONSE_WRITE_TIMEOUT_MS, (res, kind) => {
    metrics?.responseCut(kind);
    // The client's doing, not the service's: info.
    logger.info(
      { reqId: (res.req as Request).id, kind, deadlineMs: config.RESPONSE_WRITE_TIMEOUT_MS },
      'response not taken by the client in time: connection cut',
    );
  });
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  app.set('query parser', 'simple');
  // No ETag: hashing every body cost more than conditional requests save on pages that change (issue 8).
  app.set('etag', false);

  const requestId = (req: Request, res: Response) => {
    const incoming = req.headers['x-request-id'];
    const id = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    res.setHeader('X-Request-Id', id);
    return id;
  };
  // Never a token, a secret or a body: only the method, path and the request id.
  const reqFields = (req: { id: unknown; method: string; url: string }) => ({
    id: req.id,
    method: req.method,
    path: req.url.split('?')[0],
  });
  if (logger.isLevelEnabled('info')) {
    app.use(
      pinoHttp({
        logger,
        genReqId: (req, res) => requestId(req as Request, res as Response),
        serializers: {
          req: reqFields,
          res: (res: { statusCode: number }) => ({ statusCode: res.statusCode }),
        },
        // `error` means the service is wrong (issue 30): a client's mistake is info, an unavailable database
        // or provider warn, and the drain's 503s (/readyz, refused subscriptions) are the drain working.
        customLogLevel: (_req, res, err) => {
          if (draining && res.statusCode === 503) return 'info';
          const level = statusLogLevel(res.statusCode);
          return err && level === 'info' ? 'warn' : level;
        },
        // Who called (known once the token is verified): the tenant and client keys, never the token.
        customProps: (req) => {
          const p = (req as Request).principal;
          return p ? { tenant: p.tenantKey, client: p.clientId } : {};
        },
      }),
    );
  } else {
    // Below info only errors are logged, where they are handled (the error handler, Yoga's logger): no
    // access log, and the request's child logger is made only when something logs (issue 8: pino-http's
    // per-request loggers cost about 5% of a list request). The getter is the request prototype's, defined
    // once: defined on each request, it gave each its own hidden class, which kept the request and all it
    // referenced alive through scavenges (P74).
    const logs = new WeakMap<Request, Logger>();
    Object.defineProperty(app.request, 'log', {
      configurable: true,
      get(this: Request) {
        let log = logs.get(this);
        if (!log) logs.set(this, (log = logger.child({ req: reqFields(this) })));
        return log;
      },
    });
    app.use((req, res, next) => {
      req.id = requestId(req, res);
      next();
    });
  }

  if (metrics) {
    app.use(metrics.http());
    // Scraped without a token (issue 10): it holds no tenant, client or request data.
    app.get('/metrics', (_req, res, next) => {
      metrics.registry.metrics().then((text) => res.type(metrics.registry.contentType).send(text), next);
    });
  }

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', (_req, res) => {
    if (draining) return void sendProblem(res, new AppError(503, 'SERVICE_UNAVAILABLE', 'The service is shutting down.'), String(_req.id));
    ping(db).then(
      () => res.json({ status: 'ok' }),
      () => sendProblem(res, new ServiceUnavailableError('The database is not reachable.'), String(_req.id)),
    );
  });

  app.use(
    authRoutes(db, tokens, config.MAX_BODY_BYTES, {
      concurrency: config.TOKEN_VERIFY_CONCURRENCY,
      queueLimit: config.TOKEN_VERIFY_QUEUE_LIMIT,
      failureLimit: config.TOKEN_FAILURE_LIMIT,
      addressFailureLimit: config.TOKEN_ADDRESS_FAILURE_LIMIT,
    }),
  );

  const openapi = openApiDocument(routes, config.publicUrl);
  app.get('/openapi.json', (_req, res) => {
    res.json(openapi);
  });

  const graphiql = config.GRAPHIQL ?? config.NODE_ENV !== 'production';
  // The demo dashboard (issue 17): a page over the public GraphQL API, outside production like GraphiQL.
  const dashboard = config.DASHBOARD ?? config.NODE_ENV !== 'production';
  if (dashboard) app.use(dashboardRouter({ demoDefaults: config.NODE_ENV !== 'production' }));
  // One authentication and one context for REST routes and /graphql alike.
  const authenticateFor = (scopes: readonly Scope[]) => requireToken(db, tokens, scopes, (holder, res) => admission.gate(holder, res));
  const aggregates = new AggregateMemory();
  // The instance's configuration and count caches, shared by its requests (never by two apps).
  const structureTypes = structureTypesCache();
  const subjects = subjectCaches();
  const contextOf = (req: Request): ContextInit => ({
    db,
    principal: req.principal!,
    requestId: String(req.id),
    ...dataContext(data, aggregates),
    dataChanges,
    structureTypes,
    subjects,
  });
  const yoga = createYoga<{ req: Request; res: Response }>({
    schema,
    graphqlEndpoint: '/graphql',
    ...graphiqlOptions({ enabled: graphiql, demoDefaults: config.NODE_ENV !== 'production' }),
    landingPage: false,
    maskedErrors: {
      // A driver error that stands for an expected one (an unavailable database, a statement time limit,
      // text PostgreSQL cannot store) is answered as that; anything else stays masked.
      maskError: (error, message, isDev) => {
        const e = error as GraphQLError;
        const expected = e.originalError instanceof AppError ? undefined : expectedErrorOf(e.originalError);
        return expected ? locatedAs(expected, e) : maskError(error, message, isDev);
      },
    },
    // Errors logged with their class, message and stack (the answer stays generic, issue 9).
    logging: {
      debug: (...a) => logger.debug(logArgs(a)),
      info: (...a) => logger.info(logArgs(a)),
      warn: (...a) => logger.warn(logArgs(a)),
      // Yoga logs every error it masks or replaces: one standing for a client's mistake (U+0000 in an
      // argument) or an unavailable database is logged at its own level.
      error: (...a) => {
        const args = logArgs(a);
        logger[errorLogLevel(args['err'])](args, 'graphql error');
      },
    },
    context: ({ req }) => createContext(contextOf(req)),
    plugins: [
      // @defer and @stream (issue 17): incremental results over multipart/mixed or text/event-stream.
      useDeferStream(),
      graphqlErrorsAnswer200,
      everyErrorCoded,
      operationNameIsString,
      boundedParser,
      ...(metrics ? [metrics.graphql()] : []),
      staleDataExtension,
      queryDataVersion,
      compiledRepeatedDocuments(),
      admissionControl(admission),
      queryLimits(config.GRAPHQL_MAX_DEPTH, config.GRAPHQL_MAX_COST, config.GRAPHQL_MAX_BREADTH),
      // Last: it serialises the final result (P65).
      slicedResults,
    ],
    // The limits depend on the variables (first: $n): queryLimits caches what it can itself.
    parserAndValidationCache: { validationCache: false },
  });
  const graphqlAuth = authenticateFor(['ServiceApi']);
  app.use(
    yoga.graphqlEndpoint,
    (req, res, next) => {
      // Only /graphql itself: a path below it is an unknown resource (404 problem+json), not Yoga's.
      if (req.path !== '/') {
        return next(new NotFoundError(`No resource at ${req.method} ${req.originalUrl.split('?')[0]}.`));
      }
      // The GraphiQL page itself needs no token (D4); every operation does.
      // Exactly Yoga's own test for rendering GraphiQL instead of executing (an Accept of text/* would
      // make Express prefer HTML while Yoga executes the query).
      if (graphiql && req.method === 'GET' && (req.headers.accept ?? '').includes('text/html')) return next();
      // A database that fails the token check, or admission refusing the request before it, is answered
      // as GraphQL clients read errors (issue 15): SERVICE_UNAVAILABLE or TOO_MANY_REQUESTS with the
      // status and Retry-After; authentication's own refusals (401, 403) stay problem+json.
      graphqlAuth(req, res, (err?: unknown) => {
        const expected = err === undefined ? undefined : expectedErrorOf(err);
        if (!expected || !isRefusal(expected.code)) return next(err);
        const accept = req.headers.accept ?? 'application/graphql-response+json';
        const type =
          /application\/graphql-response\+json/i.test(accept) && acceptedGraphqlTypes(accept).includes('application/graphql-response+json')
            ? 'application/graphql-response+json'
            : 'application/json';
        res.status(expected.status).set(expected.headers).type(type).json(graphqlErrorBody(expected));
      });
    },
    graphqlRequestLimits(config.MAX_BODY_BYTES),
    (req, res, next) => {
      // What Yoga would refuse with an empty body gets a problem+json one: an Accept GraphQL cannot answer
      // (the GraphiQL page aside), a POST body that is not JSON.
      const accept = req.headers.accept;
      const page = graphiql && req.method === 'GET' && (accept ?? '').includes('text/html');
      const accepted = accept && !page ? acceptedGraphqlTypes(accept) : undefined;
      if (accepted?.length === 0) {
        return next(
          new AppError(
            406,
            'NOT_ACCEPTABLE',
            'GraphQL answers application/json or application/graphql-response+json (text/event-stream or multipart/mixed for subscriptions and @defer/@stream).',
          ),
        );
      }
      if (req.method === 'POST' && !req.is('application/json')) {
        return next(new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', 'A GraphQL request body must be application/json.'));
      }
      // GraphQL over HTTP (P62): a request without an Accept header is treated as accepting
      // application/graphql-response+json (the spec's default since 2025-01-01), so a request error answers 4xx.
      if (!accept) req.headers.accept = 'application/graphql-response+json';
      else if (accepted) req.headers.accept = acceptForYoga(accept, accepted);
      // Media types are case-insensitive (RFC 9110 §8.3.1) but Yoga compares them as written, and would
      // refuse `APPLICATION/JSON` with an empty 415.
      const type = req.headers['content-type'];
      if (type) req.headers['content-type'] = type.toLowerCase();
      next();
    },
    (req, res) => {
      void yoga.handle(req, res, { req, res });
    },
  );

  app.use(
    restRouter({ schema, admission, maxBodyBytes: config.MAX_BODY_BYTES, authenticate: authenticateFor, context: contextOf }, routes),
  );

  // Every known path with its methods: the route table's and the service's own.
  const known = new Map<string, string[]>([
    ['/healthz', ['get']],
    ['/readyz', ['get']],
    ['/openapi.json', ['get']],
    ...(metrics ? [['/metrics', ['get']] as [string, string[]]] : []),
    ['/connect/token', ['post']],
    ['/.well-known/jwks.json', ['get']],
    ['/.well-known/openid-configuration', ['get']],
    ['/.well-known/oauth-authorization-server', ['get']],
    ...(dashboard ? DASHBOARD_PATHS.map((p): [string, string[]] => [p, ['get']]) : []),
  ]);
  for (const r of routes) known.set(r.path, [...(known.get(r.path) ?? []), r.method]);
  app.use(methodNotAllowed(known));

  app.use((req, _res, next) => {
    next(new NotFoundError(`No resource at ${req.method} ${req.path}.`));
  });

  // Every error leaves as problem+json (D5); only expected errors carry their message.
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const answer = problemAnswer(err, String(req.id));
    if (answer.unexpected) req.log.error({ err }, 'unhandled error');
    if (!res.headersSent) writeProblem(res, answer);
  });

  return {
    app,
    tokens,
    data,
    outbox,
    drain: () => {
      draining = true;
      dataChanges.close();
    },
    close: async () => {
      dataChanges.close();
      await analyzer.close();
      await outbox.close();
      await data.close();
      await bus?.close();
    },
  };
}
