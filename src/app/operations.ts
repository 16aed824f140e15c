import { randomUUID } from 'node:crypto';
import type express from 'express';
import type { Request, RequestHandler, Response } from 'express';
import type { Logger } from 'pino';
import { pinoHttp } from 'pino-http';
import type { Config } from '../core/config.js';
import { AppError, ServiceUnavailableError } from '../core/errors.js';
import { ping } from '../db/database.js';
import type { Db } from '../db/tables.js';
import { statusLogLevel } from '../http/errors.js';
import type { Metrics } from '../http/metrics.js';
import { openApiDocument } from '../http/openapi/openapi.js';
import { sendProblem } from '../http/problem.js';
import { writeDeadline } from '../http/write-deadline.js';
import { routes } from './routes.js';
import { errSerializer } from './runtime.js';

// The process's own concerns, in front of every route: the drain, the write deadline, request ids, the
// access log, metrics, liveness and readiness.

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

export interface Operations {
  /** From now on /readyz answers 503 and every response carries `Connection: close`. */
  drain(): void;
  /** GET /openapi.json. */
  openapi: RequestHandler;
}

/** Mounts the process concerns on `app`, first of all its middleware, in their order. */
export function mountOperations(
  app: express.Express,
  { config, db, logger, metrics }: { config: Config; db: Db; logger: Logger; metrics: Metrics | undefined },
): Operations {
  let draining = false;
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
  // No ETag: hashing every body cost more than conditional requests save on pages that change (P48).
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
          err: errSerializer,
        },
        // `error` means the service is wrong (P94): a client's mistake is info, an unavailable database
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
    // access log, and the request's child logger is made only when something logs (P48: pino-http's
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
    // Scraped without a token (P103).
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

  const openapi = openApiDocument(routes, config.publicUrl);
  return {
    drain: () => {
      draining = true;
    },
    openapi: (_req, res) => {
      res.json(openapi);
    },
  };
}
