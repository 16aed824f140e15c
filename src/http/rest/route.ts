import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import type { z } from 'zod';
import type { Scope } from '../../core/permissions.js';
import type { Context } from '../../graphql/context.js';

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
   * The 200 answer's JSON text written straight from the service's result, for a route whose answer has a
   * fixed shape (P164): the call `operation`'s resolver makes, without executing the document (its
   * resolvers, the result's objects, `respond`'s copy of them and their serialisation). `variables` are
   * coerced as execution would coerce them. Resolves undefined where it does not apply; an expected 4xx
   * error (AppError) does the same. Then the document is executed, so every error keeps its one mapping.
   * It must answer exactly what executing `operation` and `respond` answer: a test compares the two.
   */
  direct?: (ctx: Context, variables: TVars) => Promise<string | undefined>;
  /**
   * Documented answers: status → description, body schema and a realistic example body (document only).
   * A 4xx entry documents a problem+json answer of the operation (its example, when given, a problem body).
   */
  responses: Record<number, { description: string; schema?: z.ZodType; example?: unknown }>;
  /** Maps a GraphQL-cased error location to the REST one; default: PascalCase every segment. */
  location?: (path: string) => string;
}

/** Declares a route with its types inferred from the schemas and the typed document. */
export function defineRoute<TData, TVars, P = Record<string, never>, Q = Record<string, never>, B = undefined>(
  def: RouteDef<TData, TVars, P, Q, B>,
): RouteDef<TData, TVars, P, Q, B> {
  return def;
}

/** `customFieldValues[2].value` → `CustomFieldValues[2].Value` (D5: the contract's casing). */
export function pascalLocation(path: string): string {
  return path.replace(/(^|\.)([a-z])/g, (_m, dot: string, c: string) => dot + c.toUpperCase());
}
