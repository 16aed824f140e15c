import { type Span, SpanStatusCode, trace } from '@opentelemetry/api';
import { type DocumentNode, type ExecutionResult, GraphQLError, getOperationAST } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { expectedErrorOf } from '../db/faults.js';
import { inSpan } from '../db/tracing.js';

// The spans of the HTTP layer's own work (P141): a GraphQL operation, a REST route, the admission wait.
// The request's server span is the HTTP instrumentation's (src/tracing.ts).

/**
 * A REST route's span, named by its method and path template (`GET /api/v2/subject`) as OpenTelemetry's
 * HTTP conventions name a server's route, around its whole work: admission, execution, the answer. The
 * request's server span gets the route too (`http.route`).
 */
export function routeSpan<T>(method: string, path: string, fn: () => Promise<T>): Promise<T> {
  trace.getActiveSpan()?.setAttribute('http.route', path);
  return inSpan(`${method.toUpperCase()} ${path}`, { 'http.route': path }, fn);
}

/** Names the operation's span (the active one: its execute or subscribe phase runs in it); returns it. */
function nameOperation(document: DocumentNode, operationName: string | null | undefined): Span | undefined {
  const span = trace.getActiveSpan();
  const op = getOperationAST(document, operationName);
  if (!span || !op) return span;
  span.updateName(op.name ? `${op.operation} ${op.name.value}` : op.operation);
  span.setAttribute('graphql.operation.type', op.operation);
  if (op.name) span.setAttribute('graphql.operation.name', op.name.value);
  return span;
}

/**
 * The HTTP status a result's error stands for: an expected error's (expectedErrorOf, its `extensions.http`
 * once located), 500 for an unexpected (masked) one, 400 for graphql-js's own (variable coercion).
 */
function statusOf(e: GraphQLError): number {
  const expected = expectedErrorOf(e.originalError ?? e);
  if (expected) return expected.status;
  if (e.extensions['unexpected'] || (e.originalError && !(e.originalError instanceof GraphQLError))) return 500;
  return (e.extensions['http'] as { status?: number } | undefined)?.status ?? 400;
}

/** Marks the operation's span failed when an error of its (single) result is the service's (a 5xx). */
function judge(span: Span | undefined, result: unknown): void {
  const errors = (result as ExecutionResult | undefined)?.errors;
  if (span && errors?.some((e) => statusOf(e) >= 500)) span.setStatus({ code: SpanStatusCode.ERROR });
}

/**
 * A span per GraphQL operation, around its execution (a subscription's: until its stream is set up),
 * admission included, in which its statements and provider calls nest; named as OpenTelemetry's GraphQL
 * conventions say (`query ListSubjects`). Envelop's execute and subscribe phases, so an operation over
 * HTTP and one over a WebSocket alike. The result is judged in the phase, while its span is the active
 * one: failed for a service's error (a 5xx), not for a client's (P141). A request error (parse,
 * validation) has no operation span and leaves the server span alone.
 */
export const operationSpans: Plugin = {
  instrumentation: {
    execute: (_payload, wrapped) => inSpan('graphql', {}, async () => wrapped()),
    subscribe: (_payload, wrapped) => inSpan('graphql', {}, async () => wrapped()),
  },
  onExecute: ({ args }) => {
    const span = nameOperation(args.document, args.operationName);
    return { onExecuteDone: ({ result }) => judge(span, result) };
  },
  onSubscribe: ({ args }) => {
    const span = nameOperation(args.document, args.operationName);
    return { onSubscribeResult: ({ result }) => judge(span, result) };
  },
};
