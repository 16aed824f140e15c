import { randomUUID } from 'node:crypto';
import { createComplexityRule } from '@pothos/plugin-complexity';
import express, { type NextFunction, type Request, type Response } from 'express';
import { type DocumentNode, GraphQLError, Kind, type SelectionNode, type ValidationRule, specifiedRules, validate } from 'graphql';
import { type Plugin, createYoga, maskError } from 'graphql-yoga';
import { sql } from 'kysely';
import type { Logger } from 'pino';
import { pinoHttp } from 'pino-http';
import { type JITCache, useGraphQlJit } from '@envelop/graphql-jit';
import { LRUCache } from 'lru-cache';
import { Admission } from '../http/admission.js';
import type { Config } from '../core/config.js';
import { type ContextInit, createContext, dataVersionFor } from '../graphql/context.js';
import type { Scope } from '../core/permissions.js';
import type { Context } from '../graphql/context.js';
import type { Db } from '../db/tables.js';
import type { Listen } from '../db/notifications.js';
import { authRoutes } from '../domains/auth/auth.routes.js';
import { requireToken } from '../domains/auth/authenticate.js';
import { TokenService } from '../domains/auth/tokens.js';
import { DataCache } from '../domains/data/data-cache.js';
import { SecretBox } from '../domains/data/secret-box.js';
import { OutboxSender } from '../domains/portal/outbox.sender.js';
import { AppError, UNAVAILABLE_RETRY_AFTER_SECONDS, expectedErrorOf, problem } from '../core/errors.js';
import { graphiqlOptions } from '../http/graphiql.js';
import { boundedParser, graphqlRequestLimits } from '../graphql/limits.js';
import { Metrics, type PoolStats } from '../http/metrics.js';
import { openApiDocument } from '../http/openapi/openapi.js';
import { methodNotAllowed, restRouter } from '../http/rest/router.js';
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
   */
  drain(): void;
  /** Stops background work (re-fetches, the invalidation listener, the outbox sender); the caller closes the database after. */
  close(): Promise<void>;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * D11: depth, cost and breadth (total selections, e.g. aliased fan-out) limits, checked during validation (before execution) with the request's variables,
 * so `first: $n` costs what `first: 1000` does. The cost model is the builder's `fieldComplexity`.
 *
 * Validation is split (issue 8): the rules that read only the document (graphql-js's and the
 * introspection fan-out) run once per parsed document, remembered by the DocumentNode that Yoga's parse
 * cache hands out for the same text; only the cost rule, which reads the variables, runs per request.
 */
function queryLimits(maxDepth: number, maxCost: number, maxBreadth: number): Plugin {
  const byDocument = new WeakMap<DocumentNode, readonly GraphQLError[]>();
  return {
    onValidate({ context, setValidationFn }) {
      const params = (context as { params?: { variables?: Record<string, unknown>; operationName?: string } }).params;
      setValidationFn((schema, document, rules, typeInfo, options) => {
        let fixed = byDocument.get(document);
        if (!fixed) {
          fixed = validate(schema, document, [...(rules ?? specifiedRules), introspectionFanOut], options, typeInfo);
          byDocument.set(document, fixed);
        }
        if (fixed.length > 0) return fixed;
        const limits = createComplexityRule({
          context,
          variableValues: params?.variables ?? {},
          operationName: params?.operationName ?? null,
          validate: (result, report) => {
            // The operation's cost also weighs it at admission (issue 15).
            (context as { cost?: number }).cost = result.complexity;
            if (result.depth > maxDepth) report(new GraphQLError(`The query depth ${result.depth} exceeds the limit of ${maxDepth}.`));
            if (result.complexity > maxCost) report(new GraphQLError(`The query cost ${result.complexity} exceeds the limit of ${maxCost}.`));
            if (result.breadth > maxBreadth) report(new GraphQLError(`The query selects ${result.breadth} fields, more than the limit of ${maxBreadth} (breadth).`));
          },
        });
        return validate(schema, document, [limits], options);
      });
    },
  };
}

/** Introspection costs 1 to the complexity rule: at most two root `__schema`/`__type` fields. */
const MAX_INTROSPECTION_FIELDS = 2;
const introspectionFanOut: ValidationRule = (context) => ({
  OperationDefinition(operation) {
    let count = 0;
    const seen = new Set<string>();
    const visit = (selections: readonly SelectionNode[]) => {
      for (const s of selections) {
        if (s.kind === Kind.FIELD) count += s.name.value === '__schema' || s.name.value === '__type' ? 1 : 0;
        else if (s.kind === Kind.INLINE_FRAGMENT) visit(s.selectionSet.selections);
        else if (!seen.has(s.name.value)) {
          seen.add(s.name.value);
          const fragment = context.getFragment(s.name.value);
          if (fragment) visit(fragment.selectionSet.selections);
        }
      }
    };
    visit(operation.selectionSet.selections);
    if (count > MAX_INTROSPECTION_FIELDS) {
      context.reportError(new GraphQLError(`The query has ${count} introspection fields, more than the limit of ${MAX_INTROSPECTION_FIELDS} (breadth).`));
    }
  },
});

/**
 * Expected errors carry `extensions.http.status` for the REST mapping, but Yoga would answer a whole
 * GraphQL response with the highest such status. Over GraphQL an expected error belongs to its field and
 * the response is 200 with the other fields' data (D4); the status stays visible as `extensions.status`.
 * Except when the service could not run the operation at all (issue 15): no field has data and every
 * error says the database is unavailable (503) or the client is over its share (429); then the response
 * carries that status and its Retry-After, as the REST answer would.
 */
const graphqlErrorsAnswer200: Plugin = {
  onExecutionResult({ result, setResult }) {
    if (!result || !('errors' in result) || !result.errors?.length) return;
    const whole = wholeOperationRefusal(result);
    setResult({
      ...result,
      ...(whole ? { extensions: { ...result.extensions, http: whole } } : {}),
      errors: result.errors.map((e) => {
        const ext = e.extensions as { http?: { status?: number } } | undefined;
        if (!ext?.http) return e;
        const { http: _http, ...rest } = e.extensions;
        return new GraphQLError(e.message, {
          nodes: e.nodes ?? null,
          source: e.source ?? null,
          positions: e.positions ?? null,
          path: e.path ?? null,
          originalError: e.originalError ?? null,
          extensions: { ...rest, status: ext.http.status },
        });
      }),
    });
  },
};

const REFUSALS = new Set(['SERVICE_UNAVAILABLE', 'TOO_MANY_REQUESTS']);

/** The HTTP status and headers of a result in which nothing ran because the service refused it, if so. */
function wholeOperationRefusal(result: { data?: unknown; errors?: readonly GraphQLError[] }): { status: number; headers: Record<string, string> } | undefined {
  const data = result.data as Record<string, unknown> | null | undefined;
  if (data && Object.values(data).some((v) => v !== null)) return undefined;
  const https = (result.errors ?? []).map((e) => (REFUSALS.has(e.extensions?.['code'] as string) ? (e.extensions['http'] as { status: number; headers?: Record<string, string> }) : undefined));
  if (https.length === 0 || https.some((h) => !h)) return undefined;
  const first = https[0]!;
  return { status: first.status, headers: first.headers ?? {} };
}

/**
 * Every GraphQL error leaves with a code (issue 9): graphql-js's own syntax and validation errors and
 * a relay id that does not decode carry none of their own.
 */
const everyErrorCoded: Plugin = {
  onResultProcess({ result, setResult }) {
    if (Array.isArray(result) || !result || typeof result !== 'object' || !('errors' in result) || !result.errors?.length) return;
    const errors = result.errors as GraphQLError[];
    if (errors.every((e) => e.extensions?.['code'])) return;
    setResult({
      ...result,
      errors: errors.map((e) => {
        if (e.extensions?.['code']) return e;
        const code = e.message.startsWith('Syntax Error') ? 'GRAPHQL_PARSE_FAILED' : e.path ? 'BAD_REQUEST' : 'GRAPHQL_VALIDATION_FAILED';
        return new GraphQLError(e.message, { nodes: e.nodes ?? null, source: e.source ?? null, positions: e.positions ?? null, path: e.path ?? null, extensions: { ...e.extensions, code } });
      }),
    });
  },
};

const ACCEPTABLE = /application\/(?:graphql-response\+)?json|application\/\*|\*\/\*|text\/event-stream/i;

/** Yoga's log arguments for pino: an Error (its original cause if wrapped) as `err`, the rest as `details`. */
function logArgs(args: unknown[]): Record<string, unknown> {
  const error = args.find((a): a is Error => a instanceof Error);
  const cause = error && (error as GraphQLError).originalError ? (error as GraphQLError).originalError : error;
  const details = args.filter((a) => a !== error);
  return { ...(cause ? { err: cause } : {}), ...(details.length ? { details } : {}) };
}

/** D10: stale data served in this response, as `extensions.staleData`. */
const staleDataExtension: Plugin = {
  onExecute({ args }) {
    return {
      onExecuteDone({ result, setResult }) {
        const stale = (args.contextValue as Partial<Context>).staleData;
        if (!stale?.size || !('data' in result || 'errors' in result)) return;
        setResult({ ...result, extensions: { ...result.extensions, staleData: [...stale.values()] } });
      },
    };
  },
};

/** A query looks cached TotalCounts up under the data version read with its principal (Context.dataVersion). */
const queryDataVersion: Plugin = {
  onExecute({ args }) {
    const ctx = args.contextValue as unknown as Context;
    ctx.dataVersion = dataVersionFor(ctx.principal, args.document, args.operationName);
  },
};

/**
 * An operation runs once admitted (issue 15): weighed by its cost from the D11 rule (queryLimits), in
 * the tenant's and client's share of the instance. Refused, the whole operation answers 429 or 503 with
 * Retry-After (graphqlErrorsAnswer200). Subscriptions do not pass here: they hold no database work.
 */
function admissionControl(admission: Admission): Plugin {
  return {
    onExecute({ args, setResultAndStopExecution }) {
      const ctx = args.contextValue as unknown as Context & { cost?: number; res?: Response };
      if (!ctx.res || !ctx.principal) return;
      return admission.admit({ tenant: ctx.principal.tenantKey, client: ctx.principal.clientId }, ctx.cost ?? 1, ctx.res).catch((e: AppError) => {
        setResultAndStopExecution({ errors: [e] });
      });
    },
  };
}

/**
 * graphql-jit for the documents a client repeats (a dashboard sends the same few): a document is compiled
 * on its second execution, so a stream of one-off documents costs no compilation; both the counts and the
 * compiled functions are bounded LRUs. Yoga's parser cache hands out one DocumentNode per query text.
 */
function compiledRepeatedDocuments(): Plugin {
  const seen = new LRUCache<DocumentNode, true>({ max: 1000 });
  const compiled = new LRUCache<string, Parameters<JITCache['set']>[1]>({ max: 500 });
  return useGraphQlJit(
    {},
    {
      enableIf: ({ document }) => {
        if (seen.has(document)) return true;
        seen.set(document, true);
        return false;
      },
      cache: compiled,
    },
  ) as Plugin;
}

/**
 * Builds the HTTP application over an open, migrated database; `listen()` is the caller's (server.ts,
 * tests). `listen` (the database handle's) carries cache invalidations between instances (D10).
 */
export async function buildApp({ config, db, logger, listen, poolStats }: { config: Config; db: Db; logger: Logger; listen?: Listen; poolStats?: PoolStats }): Promise<App> {
  const tokens = new TokenService(db, config);
  await tokens.ensureSigningKey();
  const data = new DataCache(db, config, logger, new SecretBox(db, config.SECRETS_KEY));
  await data.start(listen);
  const outbox = new OutboxSender(db, config, logger);
  await outbox.start(listen);

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
  const reqFields = (req: { id: unknown; method: string; url: string }) => ({ id: req.id, method: req.method, path: req.url.split('?')[0] });
  if (logger.isLevelEnabled('info')) {
    app.use(
      pinoHttp({
        logger,
        genReqId: (req, res) => requestId(req as Request, res as Response),
        serializers: {
          req: reqFields,
          res: (res: { statusCode: number }) => ({ statusCode: res.statusCode }),
        },
        customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'error' : 'info'),
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
    // per-request loggers cost about 5% of a list request).
    app.use((req, res, next) => {
      req.id = requestId(req, res);
      let log: Logger | undefined;
      Object.defineProperty(req, 'log', { configurable: true, get: () => (log ??= logger.child({ req: reqFields(req) })) });
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
    if (draining) return void res.status(503).type('application/problem+json').json(problem(503, String(_req.id), 'The service is shutting down.'));
    sql`select 1`.execute(db).then(
      () => res.json({ status: 'ok' }),
      () => res.status(503).set('Retry-After', String(UNAVAILABLE_RETRY_AFTER_SECONDS)).type('application/problem+json').json(problem(503, String(_req.id), 'The database is not reachable.')),
    );
  });

  app.use(authRoutes(db, tokens, config.MAX_BODY_BYTES));

  const openapi = openApiDocument(routes, config.publicUrl);
  app.get('/openapi.json', (_req, res) => {
    res.json(openapi);
  });

  const graphiql = config.GRAPHIQL ?? config.NODE_ENV !== 'production';
  // One authentication and one context for REST routes and /graphql alike.
  const authenticateFor = (scopes: readonly Scope[]) => requireToken(db, tokens, scopes, (holder, res) => admission.gate(holder, res));
  const contextOf = (req: Request): ContextInit => ({ db, principal: req.principal!, requestId: String(req.id), log: req.log, data });
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
        if (expected) {
          return new GraphQLError(expected.message, { nodes: e.nodes ?? null, source: e.source ?? null, positions: e.positions ?? null, path: e.path ?? null, originalError: expected, extensions: expected.extensions });
        }
        return maskError(error, message, isDev);
      },
    },
    // Errors logged with their class, message and stack (the answer stays generic, issue 9).
    logging: {
      debug: (...a) => logger.debug(logArgs(a)),
      info: (...a) => logger.info(logArgs(a)),
      warn: (...a) => logger.warn(logArgs(a)),
      error: (...a) => logger.error(logArgs(a), 'graphql error'),
    },
    context: ({ req }) => createContext(contextOf(req)),
    plugins: [
      graphqlErrorsAnswer200,
      everyErrorCoded,
      boundedParser,
      ...(metrics ? [metrics.graphql()] : []),
      staleDataExtension,
      queryDataVersion,
      compiledRepeatedDocuments(),
      admissionControl(admission),
      queryLimits(config.GRAPHQL_MAX_DEPTH, config.GRAPHQL_MAX_COST, config.GRAPHQL_MAX_BREADTH),
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
        res.status(404).type('application/problem+json').json(problem(404, String(req.id), `No resource at ${req.method} ${req.originalUrl.split('?')[0]}.`));
        return;
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
        if (!expected || !REFUSALS.has(expected.code)) return next(err);
        const type = /application\/graphql-response\+json/i.test(req.headers.accept ?? '') ? 'application/graphql-response+json' : 'application/json';
        res.status(expected.status).set(expected.headers).type(type).json({ errors: [{ message: expected.message, extensions: { code: expected.code } }] });
      });
    },
    graphqlRequestLimits(config.MAX_BODY_BYTES),
    (req, res, next) => {
      // What Yoga would refuse with an empty body gets a problem+json one: an Accept GraphQL cannot answer
      // (the GraphiQL page aside), a POST body that is not JSON.
      const accept = req.headers.accept;
      const page = graphiql && req.method === 'GET' && (accept ?? '').includes('text/html');
      if (accept && !page && !ACCEPTABLE.test(accept)) {
        res.status(406).type('application/problem+json').json(problem(406, String(req.id), 'GraphQL answers application/json or application/graphql-response+json.'));
        return;
      }
      if (req.method === 'POST' && !req.is('application/json')) {
        res.status(415).type('application/problem+json').json(problem(415, String(req.id), 'A GraphQL request body must be application/json.'));
        return;
      }
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

  app.use(restRouter({ schema, admission, maxBodyBytes: config.MAX_BODY_BYTES, authenticate: authenticateFor, context: contextOf }, routes));

  // Every known path with its methods: the route table's and the service's own.
  const known = new Map<string, string[]>([
    ['/healthz', ['get']],
    ['/readyz', ['get']],
    ['/openapi.json', ['get']],
    ...(metrics ? [['/metrics', ['get']] as [string, string[]]] : []),
    ['/connect/token', ['post']],
    ['/.well-known/jwks.json', ['get']],
    ['/.well-known/openid-configuration', ['get']],
  ]);
  for (const r of routes) known.set(r.path, [...(known.get(r.path) ?? []), r.method]);
  app.use(methodNotAllowed(known));

  app.use((req, res) => {
    res.status(404).type('application/problem+json').json(problem(404, String(req.id), `No resource at ${req.method} ${req.path}.`));
  });

  // Every error leaves as problem+json (D5); only expected errors carry their message.
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    let status = 500;
    let detail = 'An unexpected error occurred.';
    let errors;
    const expected = expectedErrorOf(err);
    if (expected) {
      status = expected.status;
      detail = expected.message;
      errors = expected.fieldErrors;
      for (const [k, v] of Object.entries(expected.headers ?? {})) res.setHeader(k, v);
    } else {
      const e = err as { type?: string; status?: number; expose?: boolean; code?: string };
      if (e.type === 'entity.too.large') {
        status = 413;
        detail = `The request body is larger than ${config.MAX_BODY_BYTES} bytes.`;
      } else if (e.type === 'entity.parse.failed') {
        status = 400;
        detail = 'The request body is not valid JSON.';
      } else if (err instanceof URIError) {
        // A path parameter that is not valid percent-encoding (`%zz`, an encoded lone surrogate).
        status = 400;
        detail = 'The request path is not valid percent-encoded UTF-8.';
      } else if (e.status === 415 || e.type === 'encoding.unsupported' || e.type === 'charset.unsupported') {
        status = 415;
        detail = 'The request body encoding or charset is not supported.';
      } else if (typeof e.status === 'number' && e.status >= 400 && e.status < 500 && e.expose) {
        status = e.status;
        detail = 'The request could not be read.';
      } else {
        req.log.error({ err }, 'unhandled error');
      }
    }
    if (res.headersSent) return;
    // A 400 names where the problem is (D5): the body, or the path, when nothing narrower is known.
    if (status === 400 && !errors) errors = { [err instanceof URIError ? 'path' : '$']: [detail] };
    res.status(status).type('application/problem+json').json(problem(status, String(req.id), detail, errors));
  });

  return {
    app,
    tokens,
    data,
    outbox,
    drain: () => {
      draining = true;
    },
    close: async () => {
      await outbox.close();
      await data.close();
    },
  };
}
