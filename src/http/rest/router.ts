import express, { type NextFunction, type Request, type RequestHandler, type Response, Router } from 'express';
import {
  type ExecutionResult,
  type GraphQLSchema,
  Kind,
  type OperationDefinitionNode,
  type VariableDefinitionNode,
  getVariableValues,
  validate,
} from 'graphql';
import { type CompiledQuery, compileQuery, isCompiledQuery } from 'graphql-jit';
import { complexityFromQuery } from '@pothos/plugin-complexity';
import { AppError, type FieldErrors, ValidationError } from '../../core/errors.js';
import { sendProblem } from '../problem.js';
import { slicedJson } from '../sliced-json.js';
import { perVariables } from '../graphql-limits.js';
import type { Scope } from '../../core/permissions.js';
import { type ContextInit, createContext, operationDone } from '../../graphql/context.js';
import type { Admission } from '../admission.js';
import { bindRequest, variableCoercionError } from './binding.js';
import { type RouteDef, pascalLocation } from './route.js';
import { routeSpan } from '../tracing.js';

const JSON_TYPES = ['application/json', 'application/*+json'];

/** What the REST adapter needs from the application: the schema, admission, and how to authenticate and build a context. */
export interface RestDeps {
  schema: GraphQLSchema;
  admission: Admission;
  maxBodyBytes: number;
  /** Middleware setting `req.principal` for a token holding one of `scopes`, or passing on its 401/403. */
  authenticate: (scopes: readonly Scope[]) => RequestHandler;
  /** The context of a request whose principal is set. */
  context: (req: Request) => ContextInit;
}

/** Builds the Express router for a route table. */
export function restRouter(deps: RestDeps, routes: readonly RouteDef[]): Router {
  const router = Router();
  const executors = new Map<RouteDef, CompiledQuery>();
  /** The variables each route's operation declares, for a direct answer's coercion (P164). */
  const variableDefinitions = new Map<RouteDef, readonly VariableDefinitionNode[]>();
  const json = express.json({ limit: deps.maxBodyBytes, strict: false, type: JSON_TYPES });
  for (const route of routes) {
    const problems = validate(deps.schema, route.operation);
    if (problems.length > 0) throw new Error(`Route ${route.operationId}: ${problems.map((p) => p.message).join('; ')}`);
    // A route's document is fixed: compiled once into a function (graphql-jit), it skips the generic
    // executor's per-field work (P48: argument coercion and execution were a sixth of a list's CPU).
    const compiled = compileQuery(deps.schema, route.operation);
    if (!isCompiledQuery(compiled))
      throw new Error(`Route ${route.operationId}: ${(compiled as ExecutionResult).errors?.map((e) => e.message).join('; ')}`);
    executors.set(route, compiled);
    const definition = route.operation.definitions.find((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION);
    variableDefinitions.set(route, definition?.variableDefinitions ?? []);

    const readBody = (req: Request, res: Response, next: NextFunction) => {
      if (!route.body) return next();
      const hasBody = Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
      if (!hasBody) return next();
      if (!req.is(JSON_TYPES)) {
        return next(new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', 'The request body must be application/json.'));
      }
      json(req, res, next);
    };

    router[route.method](route.path, deps.authenticate(route.scopes ?? ['ServiceApi']), readBody, (req, res, next) => {
      routeSpan(route.method, route.path, () => handle(route, req, res)).catch(next);
    });
  }

  const costs = perVariables<number>();
  async function handle(route: RouteDef, req: Request, res: Response) {
    const location = route.location ?? pascalLocation;
    const { params, query, body } = bindRequest(route, req);
    const principal = req.principal!;
    const variables = route.variables({ params, query, body }) as Record<string, unknown>;
    // Weighed as the same operation sent to /graphql would be (P52): one cost model, one admission.
    const release = await deps.admission.admit({ tenant: principal.tenantKey, client: principal.clientId }, costOf(route, variables), res);
    const ctx = createContext(deps.context(req), route.operation);
    let direct: string | undefined;
    let result: ExecutionResult | undefined;
    try {
      direct = route.direct ? await directAnswer(route, ctx, variables) : undefined;
      if (direct === undefined) result = await executors.get(route)!.query(undefined, ctx, variables);
    } finally {
      // The database work is done: the units go back whatever the client's reading speed (P77).
      release();
    }
    // Before the answer: a read that follows a write sees it (P152).
    await operationDone(ctx);
    if (direct !== undefined) return writeJson(res, 200, direct);
    if (!result) throw new Error(`Route ${route.operationId}: no result`);
    if (result.errors?.length) {
      // Variables the operation could not coerce (no execution happened): bad input, 400 (D5).
      if (!('data' in result)) throw variableCoercionError(result.errors, location);
      const appError = result.errors.map((e) => e.originalError ?? e).find((e): e is AppError => e instanceof AppError);
      if (appError) {
        if (appError.fieldErrors) {
          const mapped: FieldErrors = {};
          for (const [k, v] of Object.entries(appError.fieldErrors)) mapped[location(k)] = v;
          throw new ValidationError(mapped, appError.message);
        }
        throw appError;
      }
      throw result.errors[0]!.originalError ?? result.errors[0]!;
    }
    const { status, body: out } = route.respond(result.data as never);
    if (out === undefined) {
      res.statusCode = status;
      return void res.end();
    }
    // A large page is serialised over several turns of the event loop, as it was executed (P65).
    writeJson(res, status, ctx.slices.sliced ? await slicedJson(out) : JSON.stringify(out));
  }
  /** The route's direct answer (P164) with its variables coerced; undefined where the document answers. */
  async function directAnswer(route: RouteDef, ctx: ReturnType<typeof createContext>, variables: Record<string, unknown>) {
    const coerced = getVariableValues(deps.schema, variableDefinitions.get(route)!, variables);
    if (coerced.errors) return undefined;
    try {
      return await route.direct!(ctx, coerced.coerced);
    } catch (e) {
      if (e instanceof AppError && e.status < 500) return undefined;
      throw e;
    }
  }
  /** The D11 cost of a route's operation with these variables; 1 when they do not coerce (execution reports that). */
  function costOf(route: RouteDef, variables: Record<string, unknown>): number {
    return costs(route.operation, null, variables, () => {
      try {
        return complexityFromQuery(route.operation, { schema: deps.schema, variables }).complexity;
      } catch {
        return 1;
      }
    });
  }
  return router;
}

/**
 * Written directly: Express's res.json adds a freshness check and header juggling that cost a few percent
 * of a list request (P48). Node leaves the body out of a HEAD answer itself.
 */
function writeJson(res: Response, status: number, text: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}

/**
 * A known path asked with a method it does not have: 405 with `Allow` (as ASP.NET answers), and OPTIONS
 * answered with the methods. Mounted after every route, so only the unmatched methods reach it.
 */
export function methodNotAllowed(paths: ReadonlyMap<string, readonly string[]>): Router {
  const router = Router();
  for (const [path, methods] of paths) {
    const allowed = [...new Set(methods.map((m) => m.toUpperCase()).flatMap((m) => (m === 'GET' ? ['GET', 'HEAD'] : [m])))].sort();
    const allow = [...allowed, 'OPTIONS'].join(', ');
    router.all(path, (req, res) => {
      res.setHeader('Allow', allow);
      if (req.method === 'OPTIONS') return void res.status(204).end();
      sendProblem(
        res,
        new AppError(405, 'METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${req.path}; allowed: ${allowed.join(', ')}.`),
        String(req.id),
      );
    });
  }
  return router;
}
