import { type Span, SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import type { LogEvent } from 'kysely';
import { tracer, tracingOn } from '../core/tracing.js';
import { expectedErrorOf } from './faults.js';

/**
 * Names the error that ended a span (its class, not its message: that may hold SQL or a secret), and marks
 * the span failed unless the error is the client's (a 4xx, as OpenTelemetry's HTTP conventions judge one;
 * the status is expectedErrorOf's, next to which this lives).
 */
export function failSpan(span: Span, error: unknown): void {
  if ((expectedErrorOf(error)?.status ?? 500) >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  span.setAttribute('error.type', (error as Error)?.constructor?.name ?? 'Error');
}

/** Runs `fn` in a span of its own, ended (failed, if it throws or rejects) when it settles. */
export function inSpan<T>(name: string, attributes: Record<string, string | number>, fn: (span: Span) => Promise<T>): Promise<T> {
  return tracer.startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (e) {
      failSpan(span, e);
      throw e;
    } finally {
      span.end();
    }
  });
}

type LogOption = { log?: (event: LogEvent) => void };

/**
 * Kysely's options for the embedded database, with a span per statement when the process traces (P141):
 * PostgreSQL's statements are the pg instrumentation's, PGlite's are made here from Kysely's log, which
 * hears each statement's end, its error and its duration, in the caller's context. The span ends now and
 * started that long ago, named by the statement's first word, as the pg instrumentation's spans are.
 */
export function withStatementSpans(options: LogOption): LogOption {
  if (!tracingOn()) return options;
  const inner = options.log;
  return {
    log: (event) => {
      inner?.(event);
      // Only within a request's (or another operation's) trace, as the pg instrumentation is configured.
      if (!trace.getSpan(context.active())) return;
      const end = performance.timeOrigin + performance.now();
      const text = event.query.sql;
      const operation = /^\s*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? 'QUERY';
      const span = tracer.startSpan(operation, {
        kind: SpanKind.CLIENT,
        startTime: end - event.queryDurationMillis,
        attributes: { 'db.system.name': 'postgresql', 'db.operation.name': operation, 'db.query.text': text },
      });
      if (event.level === 'error') {
        span.setStatus({ code: SpanStatusCode.ERROR });
        // The SQLSTATE, as PGlite raises it.
        const code = (event.error as { code?: unknown } | null)?.code;
        span.setAttribute('error.type', typeof code === 'string' ? code : 'Error');
        if (typeof code === 'string') span.setAttribute('db.response.status_code', code);
      }
      span.end(end);
    },
  };
}
