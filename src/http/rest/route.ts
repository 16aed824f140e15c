import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import express, { type NextFunction, type Request, type Response, Router } from 'express';
import { type ExecutionResult, type GraphQLError, type GraphQLSchema, validate } from 'graphql';
import { type CompiledQuery, compileQuery, isCompiledQuery } from 'graphql-jit';
import type { Logger } from 'pino';
import { z } from 'zod';
import { complexityFromQuery } from '@pothos/plugin-complexity';
import type { Admission } from '../admission.js';
import { createContext } from '../../graphql/context.js';
import type { Db } from '../../db/tables.js';
import { type Gate, requireToken } from '../../domains/auth/authenticate.js';
import type { Scope } from '../../core/permissions.js';
import type { TokenService } from '../../domains/auth/tokens.js';
import type { DataCache } from '../../domains/data/data-cache.js';
import { MAX_LIST_ITEMS, boundsProblem, canonicalKeys, defOf, setOwn, textProblem, unwrap } from '../../core/input.js';
import { AppError, type FieldErrors, NotFoundError, ValidationError, problem } from '../../core/errors.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from '../../db/paging.js';

export interface RestRequest<P, Q, B> {
  params: P;
  query: Q;
  body: B;
}

/**
 * One documented REST path translated onto a GraphQL operation (SOFA-style route table): the adapter
 * binds and validates the request with the zod schemas, executes `operation` in-process through the same
 * schema, resolvers, permissions and loaders as /graphql, and shapes the answer with `respond`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a route table holds routes of every shape
export interface RouteDef<TData = any, TVars = any, P = any, Q = any, B = any> {
  method: 'get' | 'put' | 'post' | 'patch' | 'delete';
  /** Express path, e.g. `/api/v1/structuralEntity/:structuralEntityKey`. */
  path: string;
  operationId: string;
  summary: string;
  tag: string;
  /** Token scopes accepted (D4); default ServiceApi. */
  scopes?: Scope[];
  /** The permission(s) the operation demands, for the OpenAPI description. */
  permissions: string;
  /** More about the operation for the OpenAPI description (document only). */
  description?: string;
  params?: z.ZodType<P>;
  query?: z.ZodType<Q>;
  /** The body schema; `example` is a realistic body for the OpenAPI document (document only). */
  body?: { schema: z.ZodType<B>; required: boolean; example?: unknown };
  operation: TypedDocumentNode<TData, TVars>;
  variables: (req: RestRequest<P, Q, B>) => TVars;
  /** Status and body from the operation's data; may throw an AppError (e.g. NotFound for null). */
  respond: (data: TData) => { status: number; body: unknown };
  /**
   * Documented answers: status → description, body schema and a realistic example body (document only).
   * A 4xx entry documents a problem+json answer of the operation (its example, when given, a problem body).
   */
  responses: Record<number, { description: string; schema?: z.ZodType; example?: unknown }>;
  /** Maps a GraphQL-cased error location to the REST one; default: PascalCase every segment. */
  location?: (path: string) => string;
}

/** Declares a route with its types inferred from the schemas and the typed document. */
export function defineRoute<TData, TVars, P = Record<string, never>, Q = Record<string, never>, B = undefined>(def: RouteDef<TData, TVars, P, Q, B>): RouteDef<TData, TVars, P, Q, B> {
  return def;
}

/** `customFieldValues[2].value` → `CustomFieldValues[2].Value` (D5: the contract's casing). */
export function pascalLocation(path: string): string {
  return path.replace(/(^|\.)([a-z])/g, (_m, dot: string, c: string) => dot + c.toUpperCase());
}

/** Query string → object with the schema's names: repeated names are lists, list items may be comma-separated (D5). */
function bindQuery(url: string, schema: z.ZodType): { value: Record<string, unknown>; errors: FieldErrors } {
  const shape = defOf(unwrap(schema)).shape ?? {};
  const names = new Map(Object.keys(shape).map((k) => [k.toLowerCase(), k]));
  const raw = url.includes('?') ? url.slice(url.indexOf('?') + 1) : '';
  // URLSearchParams would decode invalid UTF-8 as U+FFFD, silently changing the value: refuse it.
  for (const part of raw.split('&')) {
    try {
      decodeURIComponent(part.replace(/\+/g, ' '));
    } catch {
      return { value: {}, errors: { [part.split('=')[0]!.replace(/%/g, '') || '$']: ['Not valid percent-encoded UTF-8.'] } };
    }
  }
  const params = new URLSearchParams(raw);
  const grouped = new Map<string, string[]>();
  for (const [k, v] of params) {
    const name = names.get(k.toLowerCase()) ?? k;
    grouped.set(name, [...(grouped.get(name) ?? []), v]);
  }
  const value: Record<string, unknown> = {};
  const errors: FieldErrors = {};
  for (const [name, values] of grouped) {
    const field = Object.hasOwn(shape, name) ? shape[name] : undefined;
    if (!field) {
      setOwn(value, name, values.length === 1 ? values[0] : values);
    } else if (defOf(unwrap(field)).type === 'array') {
      const list = values.flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v !== '');
      if (list.length > MAX_LIST_ITEMS) setOwn(errors, name, [`${name} may list at most ${MAX_LIST_ITEMS} items.`]);
      else setOwn(value, name, list);
    } else if (values.length > 1) {
      setOwn(errors, name, [`${name} is given more than once.`]);
    } else {
      setOwn(value, name, values[0]);
    }
  }
  return { value, errors };
}

function zodErrors(error: z.ZodError, prefix: string): FieldErrors {
  const out: FieldErrors = {};
  for (const issue of error.issues) {
    const loc = issue.path.reduce<string>((acc, seg) => (typeof seg === 'number' ? `${acc}[${seg}]` : acc ? `${acc}.${String(seg)}` : String(seg)), prefix);
    (out[loc || '$'] ??= []).push(issue.message);
  }
  return out;
}

const JSON_TYPES = ['application/json', 'application/*+json'];

/** Builds the Express router for a route table. */
export function restRouter(deps: { db: Db; tokens: TokenService; schema: GraphQLSchema; data: DataCache; admission: Admission; maxBodyBytes: number }, routes: readonly RouteDef[]): Router {
  const router = Router();
  const executors = new Map<RouteDef, CompiledQuery>();
  const json = express.json({ limit: deps.maxBodyBytes, strict: false, type: JSON_TYPES });
  const gate: Gate = (holder, res) => deps.admission.gate(holder, res);
  for (const route of routes) {
    const problems = validate(deps.schema, route.operation);
    if (problems.length > 0) throw new Error(`Route ${route.operationId}: ${problems.map((p) => p.message).join('; ')}`);
    // A route's document is fixed: compiled once into a function (graphql-jit), it skips the generic
    // executor's per-field work (issue 8: argument coercion and execution were a sixth of a list's CPU).
    const compiled = compileQuery(deps.schema, route.operation);
    if (!isCompiledQuery(compiled)) throw new Error(`Route ${route.operationId}: ${(compiled as ExecutionResult).errors?.map((e) => e.message).join('; ')}`);
    executors.set(route, compiled);

    const readBody = (req: Request, res: Response, next: NextFunction) => {
      if (!route.body) return next();
      const hasBody = Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
      if (!hasBody) return next();
      if (!req.is(JSON_TYPES)) {
        return next(new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', 'The request body must be application/json.'));
      }
      json(req, res, next);
    };

    router[route.method](route.path, requireToken(deps.db, deps.tokens, route.scopes ?? ['ServiceApi'], gate), readBody, (req, res, next) => {
      handle(route, req, res).catch(next);
    });
  }

  async function handle(route: RouteDef, req: Request, res: Response) {
    const location = route.location ?? pascalLocation;
    const errors: FieldErrors = {};
    const parse = <T>(schema: z.ZodType<T> | undefined, raw: unknown, prefix: string): T => {
      if (!schema) return undefined as T;
      const r = schema.safeParse(raw);
      if (r.success) return r.data;
      Object.assign(errors, zodErrors(r.error, prefix));
      return undefined as T;
    };
    // A path key holding U+0000 names nothing that can exist: 404, as an unknown key (D2).
    if (textPaths(req.params, '').length > 0) throw new NotFoundError('No resource has this key.');
    const params = parse(route.params, req.params, '');
    let query: unknown;
    if (route.query) {
      const bound = bindQuery(req.originalUrl, route.query);
      Object.assign(errors, bound.errors);
      query = parse(route.query, bound.value, '');
      addTextErrors(errors, bound.value);
    }
    let body: unknown;
    if (route.body) {
      const raw = (req as { body?: unknown }).body;
      if (raw === undefined && route.body.required) errors['$'] = ['A request body is required.'];
      else {
        // Walks below recurse: a body nested thousands of levels, or holding lists and texts beyond any
        // use, is refused first (issue 9).
        const bounds = boundsProblem(raw);
        if (bounds) throw ValidationError.at(pascalLocation(bounds.at), bounds.message);
        // Keys canonicalised once, so text problems are named in the contract's casing.
        const canonical = raw === undefined ? undefined : canonicalKeys(raw, route.body.schema);
        body = parse(route.body.schema, canonical, '');
        addTextErrors(errors, canonical);
      }
    }
    if (Object.keys(errors).length > 0) throw new ValidationError(errors);

    const principal = req.principal!;
    const variables = route.variables({ params, query, body }) as Record<string, unknown>;
    // Weighed as the same operation sent to /graphql would be (issue 15): one cost model, one admission.
    await deps.admission.admit({ tenant: principal.tenantKey, client: principal.clientId }, costOf(route, variables), res);
    const result: ExecutionResult = await executors.get(route)!.query(
      undefined,
      createContext({ db: deps.db, principal, requestId: String(req.id), log: req.log as Logger, data: deps.data }, route.operation),
      variables,
    );
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
    // Written directly: Express's res.json adds a freshness check and header juggling that cost a few
    // percent of a list request (issue 8). Node leaves the body out of a HEAD answer itself.
    res.statusCode = status;
    if (out === undefined) return void res.end();
    const text = JSON.stringify(out);
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.setHeader('Content-Length', Buffer.byteLength(text));
    res.end(text);
  }
  /** The D11 cost of a route's operation with these variables; 1 when they do not coerce (execution reports that). */
  function costOf(route: RouteDef, variables: Record<string, unknown>): number {
    try {
      return complexityFromQuery(route.operation, { schema: deps.schema, variables }).complexity;
    } catch {
      return 1;
    }
  }
  return router;
}

// Text PostgreSQL cannot store as sent is bad input: 400 naming each location (contract casing, as
// bound) before anything reaches the database, instead of a failed statement or a silently altered value.
function textPaths(value: unknown, at: string): [string, string][] {
  if (typeof value === 'string') {
    const p = textProblem(value);
    return p ? [[at || '$', p]] : [];
  }
  if (Array.isArray(value)) return value.flatMap((v, i) => textPaths(v, `${at}[${i}]`));
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).flatMap(([k, v]) => {
      const p = textProblem(k);
      return p ? [[at || '$', p] as [string, string]] : textPaths(v, at ? `${at}.${k}` : k);
    });
  }
  return [];
}

function addTextErrors(errors: FieldErrors, value: unknown): void {
  for (const [p, message] of textPaths(value, '')) {
    if (!Object.hasOwn(errors, p)) setOwn(errors, p, []);
    errors[p]!.push(message);
  }
}

// D5: a query value that passed the route's zod schema but that GraphQL cannot coerce (an Int
// beyond 32 bits, e.g. `First=3000000000`) is bad input naming the parameter, not an unexpected error.
// Only variable coercion can fail before execution here: the route operations are validated at start-up.
function variableCoercionError(errors: readonly GraphQLError[], location: (path: string) => string): Error {
  const mapped: FieldErrors = {};
  for (const e of errors) {
    const name = /^Variable "\$(\w+)"/.exec(e.message)?.[1];
    if (!name) return e.originalError ?? e; // not a variable problem: left to the 500 handler
    const why = e.message.includes('; ') ? e.message.slice(e.message.indexOf('; ') + 2) : 'invalid value';
    (mapped[location(name)] ??= []).push(`${location(name)} is not valid: ${why}`);
  }
  return new ValidationError(mapped);
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
      res.status(405).type('application/problem+json').json(problem(405, String(req.id), `${req.method} is not allowed on ${req.path}; allowed: ${allowed.join(', ')}.`));
    });
  }
  return router;
}

const PageInfoSchema = z
  .object({
    HasNextPage: z.boolean(),
    HasPreviousPage: z.boolean(),
    StartCursor: z.string().nullable().meta({ description: 'Cursor of the first node of the page; null for an empty page.' }),
    EndCursor: z.string().nullable().meta({ description: 'Cursor of the last node of the page; null for an empty page.' }),
    TotalCount: z.int().meta({ description: 'Nodes in the whole list (every page).' }),
  })
  .meta({ id: 'PageInfo', description: 'Where the page lies in the list (D6).' });

/** The PascalCase paged envelope schema around a node schema, named `<name>Page` (OpenAPI). */
export function pageSchema(node: z.ZodType, name: string) {
  return z
    .object({
      PageInfo: PageInfoSchema,
      Edges: z.array(z.object({ Node: node, Cursor: z.string().meta({ description: 'Opaque cursor of this node, for After or Before.' }) }).meta({ id: `${name}Edge` })),
    })
    .meta({ id: `${name}Page` });
}

/** A sent custom field value (D7/D8): checked by the shared validator, so the schema only documents it. */
export const SentValueSchema = z
  .object({
    Key: z.string().meta({ description: 'The custom field key.' }),
    Value: z.unknown().meta({
      description:
        'An object with one property named after the data type, e.g. {"Integer": {"Value": 5}}; an array of them for an array field; null clears the field.',
    }),
  })
  .meta({ id: 'CustomFieldValueInput', description: 'A custom field value as sent (property names are matched case-insensitively).' });

/** Sent custom field values in the GraphQL input shape. */
export function sentValues(items: readonly { Key: string; Value?: unknown }[]) {
  return items.map((v) => ({ key: v.Key, value: v.Value ?? null }));
}

/** The contract's PascalCase paged envelope (D5/D6) around mapped nodes. */
export function restPage<N, R>(
  conn: { totalCount: number; pageInfo: { hasNextPage: boolean; hasPreviousPage: boolean; startCursor?: string | null; endCursor?: string | null }; edges: { cursor: string; node: N }[] },
  map: (n: N) => R,
) {
  return {
    PageInfo: {
      HasNextPage: conn.pageInfo.hasNextPage,
      HasPreviousPage: conn.pageInfo.hasPreviousPage,
      StartCursor: conn.pageInfo.startCursor ?? null,
      EndCursor: conn.pageInfo.endCursor ?? null,
      TotalCount: conn.totalCount,
    },
    Edges: conn.edges.map((e) => ({ Node: map(e.node), Cursor: e.cursor })),
  };
}

/** The lower-camel-case paged envelope (D5: the portal-users list) around mapped nodes. */
export function restCamelPage<N, R>(conn: Parameters<typeof restPage<N, R>>[0], map: (n: N) => R) {
  return {
    pageInfo: {
      hasNextPage: conn.pageInfo.hasNextPage,
      hasPreviousPage: conn.pageInfo.hasPreviousPage,
      startCursor: conn.pageInfo.startCursor ?? null,
      endCursor: conn.pageInfo.endCursor ?? null,
      totalCount: conn.totalCount,
    },
    edges: conn.edges.map((e) => ({ cursor: e.cursor, node: map(e.node) })),
  };
}

const CamelPageInfoSchema = z
  .object({
    hasNextPage: z.boolean(),
    hasPreviousPage: z.boolean(),
    startCursor: z.string().nullable().meta({ description: 'Cursor of the first node of the page; null for an empty page.' }),
    endCursor: z.string().nullable().meta({ description: 'Cursor of the last node of the page; null for an empty page.' }),
    totalCount: z.int().meta({ description: 'Nodes in the whole list (every page).' }),
  })
  .meta({ id: 'CamelCasePageInfo', description: 'Where the page lies in the list (D6), in lower camel case (D5).' });

/** The lower-camel-case paged envelope schema around a node schema, named `<name>Page` (OpenAPI). */
export function camelPageSchema(node: z.ZodType, name: string) {
  return z
    .object({
      pageInfo: CamelPageInfoSchema,
      edges: z.array(z.object({ cursor: z.string().meta({ description: 'Opaque cursor of this node, for After or Before.' }), node }).meta({ id: `${name}Edge` })),
    })
    .meta({ id: `${name}Page` });
}

/**
 * Document only: the contract's type of a query parameter whose binding schema takes the query text
 * (e.g. `First` is bound from a string, documented as an integer 0-1000). The OpenAPI document shows
 * `documented`; requests are still bound and validated by the binding schema alone.
 */
const documentedTypes = new WeakMap<z.ZodType, z.ZodType>();

/** Registers `documented` as the OpenAPI type of the query parameter bound by `binding`; returns `binding` unchanged. */
export function documentedAs<T extends z.ZodType>(binding: T, documented: z.ZodType): T {
  documentedTypes.set(binding, documented);
  return binding;
}

/** The schema the OpenAPI document shows for a parameter bound by `binding`. */
export function documentedType(binding: z.ZodType): z.ZodType {
  return documentedTypes.get(binding) ?? binding;
}

/** Zod schemas of the paging query parameters shared by every list (D6); names as documented. */
export const pagingQuery = {
  After: z.string().optional().meta({ description: 'Cursor: items after this node.' }),
  Before: z.string().optional().meta({ description: 'Cursor: items before this node.' }),
  First: documentedAs(
    z.string().regex(/^[+-]?\d+$/, 'First must be an integer.').transform(Number).optional(),
    z.int().min(0).max(MAX_PAGE_SIZE).optional().meta({ description: `Number of first items; ${DEFAULT_PAGE_SIZE} when neither First nor Last is given.` }),
  ),
  Last: documentedAs(
    z.string().regex(/^[+-]?\d+$/, 'Last must be an integer.').transform(Number).optional(),
    z.int().min(0).max(MAX_PAGE_SIZE).optional().meta({ description: 'Number of last items.' }),
  ),
  OrderBy: z.string().optional().meta({ description: 'Key of the field to order by.' }),
  OrderDirection: documentedAs(
    z
      .string()
      .regex(/^(ascending|descending)$/i, 'OrderDirection must be Ascending or Descending.')
      .transform((v) => (v.toLowerCase() === 'descending' ? ('DESCENDING' as const) : ('ASCENDING' as const)))
      .optional(),
    z.enum(['Ascending', 'Descending']).optional().meta({ description: 'Sort direction, Ascending when absent (the names are matched case-insensitively).' }),
  ),
};

/** GraphQL paging variables from the bound paging query. */
export function pagingVariables(q: { After?: string | undefined; Before?: string | undefined; First?: number | undefined; Last?: number | undefined; OrderBy?: string | undefined; OrderDirection?: 'ASCENDING' | 'DESCENDING' | undefined }) {
  return { after: q.After, before: q.Before, first: q.First, last: q.Last, orderBy: q.OrderBy, orderDirection: q.OrderDirection };
}
