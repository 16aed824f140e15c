import { type Span, SpanStatusCode, trace } from '@opentelemetry/api';
import { type DocumentNode, getOperationAST } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { tracer } from '../core/tracing.js';
import { expectedErrorOf } from '../db/faults.js';

// The spans of the HTTP layer's own work (P141): a GraphQL operation, a REST route, the admission wait.
// The request's server span is the HTTP instrumentation's (src/tracing.ts).

/**
 * Names the error that ended a span (its class, not its message: that may hold SQL or a secret), and marks
 * the span failed unless the error is the client's (a 4xx, as OpenTelemetry's HTTP conventions judge one).
 */
function failSpan(span: Span, error: unknown): void {
  if ((expectedErrorOf(error)?.status ?? 500) >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  span.setAttribute('error.type', (error as Error)?.constructor?.name ?? 'Error');
}

/** Runs `fn` in a span of its own, ended (failed, if it throws) when its promise settles. */
export function inSpan<T>(name: string, attributes: Record<string, string | number>, fn: (span: Span) => Promise<T>): Promise<T> {
  return tracer.startActiveSpan(name, { attributes }, (span) =>
    fn(span).then(
      (v) => {
        span.end();
        return v;
      },
      (e: unknown) => {
        failSpan(span, e);
        span.end();
        throw e;
      },
    ),
  );
}

/**
 * A REST route's span, named by its method and path template (`GET /api/v2/subject`) as OpenTelemetry's
 * HTTP conventions name a server's route, around its whole work: admission, execution, the answer. The
 * request's server span gets the route too (`http.route`).
 */
export function routeSpan<T>(method: string, path: string, fn: () => Promise<T>): Promise<T> {
  trace.getActiveSpan()?.setAttribute('http.route', path);
  return inSpan(`${method.toUpperCase()} ${path}`, { 'http.route': path }, fn);
}

function nameOperation(document: DocumentNode, operationName: string | null | undefined): void {
  const span = trace.getActiveSpan();
  const op = getOperationAST(document, operationName);
  if (!span || !op) return;
  span.updateName(op.name ? `${op.operation} ${op.name.value}` : op.operation);
  span.setAttribute('graphql.operation.type', op.operation);
  if (op.name) span.setAttribute('graphql.operation.name', op.name.value);
}

/**
 * A span per GraphQL operation, around its execution (a subscription's: until its stream is set up),
 * admission included, in which its statements and provider calls nest; named as OpenTelemetry's GraphQL
 * conventions say (`query ListSubjects`). Envelop's execute and subscribe phases, so an operation over
 * HTTP and one over a WebSocket alike. An operation with errors is marked failed.
 */
export const operationSpans: Plugin = {
  instrumentation: {
    execute: (_payload, wrapped) => inSpan('graphql', {}, async () => wrapped()),
    subscribe: (_payload, wrapped) => inSpan('graphql', {}, async () => wrapped()),
  },
  onExecute: ({ args }) => nameOperation(args.document, args.operationName),
  onSubscribe: ({ args }) => nameOperation(args.document, args.operationName),
  onExecutionResult({ result }) {
    const errors = !Array.isArray(result) && result && 'errors' in result ? result.errors : undefined;
    if (errors?.length) trace.getActiveSpan()?.setStatus({ code: SpanStatusCode.ERROR });
  },
};
