import type { ErrorRequestHandler, RequestHandler, Router } from 'express';
import type { Config } from '../core/config.js';
import { NotFoundError } from '../core/errors.js';
import { DASHBOARD_PATHS } from '../http/dashboard.js';
import { problemAnswer } from '../http/errors.js';
import { writeProblem } from '../http/problem.js';
import { methodNotAllowed, restRouter } from '../http/rest/router.js';
import { routes } from './routes.js';
import { schema } from './schema.js';
import type { Services } from './services.js';

/** The REST contract's routes, executed over the GraphQL schema. */
export function restAdapter(config: Config, { admission, authenticate, context }: Services): Router {
  return restRouter({ schema, admission, maxBodyBytes: config.MAX_BODY_BYTES, authenticate, context }, routes);
}

/** After every route: 405 for a known path's other methods, 404, and every error as problem+json (D5). */
export function restFallbacks({ metrics, dashboard }: { metrics: boolean; dashboard: boolean }): (RequestHandler | ErrorRequestHandler)[] {
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
  const notFound: RequestHandler = (req, _res, next) => {
    next(new NotFoundError(`No resource at ${req.method} ${req.path}.`));
  };
  // Only expected errors carry their message.
  const problem: ErrorRequestHandler = (err, req, res, _next) => {
    const answer = problemAnswer(err, String(req.id));
    if (answer.unexpected) req.log.error({ err }, 'unhandled error');
    if (!res.headersSent) writeProblem(res, answer);
  };
  return [methodNotAllowed(known), notFound, problem];
}
