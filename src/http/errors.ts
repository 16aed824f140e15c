import { GraphQLError } from 'graphql';
import { AppError, type FieldErrors } from '../core/errors.js';
import { expectedErrorOf } from '../db/faults.js';
import { activeTraceId } from '../core/tracing.js';

// How the service renders an error: problem+json (D5), the GraphQL error (D4), the level it is logged
// at. The errors themselves are core/errors.ts's; which driver error stands for which, db/faults.ts's.

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail?: string;
  traceId: string;
  /** The OpenTelemetry trace id of the request, when the service traces (P140). */
  otelTraceId?: string;
  errors?: FieldErrors;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  406: 'Not Acceptable',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
};

const RFC9110: Record<number, string> = {
  400: '15.5.1',
  401: '15.5.2',
  403: '15.5.4',
  404: '15.5.5',
  405: '15.5.6',
  406: '15.5.7',
  409: '15.5.10',
  413: '15.5.14',
  415: '15.5.16',
  500: '15.6.1',
  502: '15.6.3',
  503: '15.6.4',
};

/** RFC 9457 body for a status. Only an AppError's own message reaches `detail`, never an unexpected one's. */
export function problem(status: number, traceId: string, detail?: string, errors?: FieldErrors): Problem {
  const otelTraceId = activeTraceId();
  return {
    // 429 is defined by RFC 6585, not RFC 9110.
    type:
      status === 429
        ? 'https://www.rfc-editor.org/rfc/rfc6585#section-4'
        : `https://tools.ietf.org/html/rfc9110#section-${RFC9110[status] ?? '15'}`,
    title: TITLES[status] ?? 'Error',
    status,
    ...(detail !== undefined ? { detail } : {}),
    traceId,
    ...(otelTraceId ? { otelTraceId } : {}),
    ...(errors ? { errors } : {}),
  };
}

/** The answer to an error as problem+json (D5): status, headers and body; `unexpected` when it must be logged. */
export interface ProblemAnswer {
  status: number;
  headers: Record<string, string>;
  body: Problem;
  unexpected: boolean;
}

/**
 * The problem+json rendering of any error: an expected one (or a driver error standing for one) with its
 * message, the body parser's and the path decoder's refusals as the 4xx they are, anything else as a 500
 * whose detail says nothing about the cause. Every problem response of the service is made here.
 */
export function problemAnswer(err: unknown, traceId: string): ProblemAnswer {
  const expected = expectedErrorOf(err) ?? requestErrorOf(err);
  const status = expected?.status ?? 500;
  const detail = expected?.message ?? 'An unexpected error occurred.';
  // A 400 names where the problem is (D5): the body, or the path, when nothing narrower is known.
  const errors = expected?.fieldErrors ?? (status === 400 ? { [err instanceof URIError ? 'path' : '$']: [detail] } : undefined);
  return { status, headers: expected?.headers ?? {}, body: problem(status, traceId, detail, errors), unexpected: !expected };
}

/** Refusals of the HTTP layer before a request is read (body parser, path decoding) as expected errors. */
function requestErrorOf(err: unknown): AppError | undefined {
  const e = err as { type?: string; status?: number; expose?: boolean; limit?: number } | null;
  if (!e || typeof e !== 'object') return undefined;
  if (e.type === 'entity.too.large') return new AppError(413, 'PAYLOAD_TOO_LARGE', `The request body is larger than ${e.limit} bytes.`);
  if (e.type === 'entity.parse.failed') return new AppError(400, 'BAD_REQUEST', 'The request body is not valid JSON.');
  // A path parameter that is not valid percent-encoding (`%zz`, an encoded lone surrogate).
  if (err instanceof URIError) return new AppError(400, 'BAD_REQUEST', 'The request path is not valid percent-encoded UTF-8.');
  if (e.status === 415 || e.type === 'encoding.unsupported' || e.type === 'charset.unsupported') {
    return new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', 'The request body encoding or charset is not supported.');
  }
  if (typeof e.status === 'number' && e.status >= 400 && e.status < 500 && e.expose)
    return new AppError(e.status, 'BAD_REQUEST', 'The request could not be read.');
  return undefined;
}

/** Codes of an operation the service refused as a whole (P50, P52): it answers with their status and Retry-After. */
export function isRefusal(code: unknown): boolean {
  return code === 'SERVICE_UNAVAILABLE' || code === 'TOO_MANY_REQUESTS';
}

/**
 * The GraphQL rendering of an error (D4): `extensions.code`, and the status as `extensions.status`. An
 * expected error carries `extensions.http` for Yoga, which would answer the whole response with it;
 * over GraphQL the error belongs to its field, so `http` is dropped here. Location and path are kept.
 */
export function graphqlRendering(e: GraphQLError): GraphQLError {
  const http = (e.extensions as { http?: { status?: number } } | undefined)?.http;
  if (!http) return e;
  const { http: _http, ...rest } = e.extensions;
  return withExtensions(e, { ...rest, status: http.status });
}

/** An unexpected error as a client sees it, masked as Yoga masks it (whoever masks it logs it). */
export function maskedError(): GraphQLError {
  return new GraphQLError('Unexpected error.', { extensions: { code: 'INTERNAL_SERVER_ERROR' } });
}

/** A failure as a client of a transport Yoga does not serialise (graphql-ws, multipart) sees it. */
export function expectedOrMasked(e: unknown): GraphQLError {
  return expectedErrorOf(e) ?? maskedError();
}

/** The same error (message, placement, path, original error) with other extensions. */
export function withExtensions(e: GraphQLError, extensions: GraphQLError['extensions']): GraphQLError {
  return new GraphQLError(e.message, {
    nodes: e.nodes ?? null,
    source: e.source ?? null,
    positions: e.positions ?? null,
    path: e.path ?? null,
    originalError: e.originalError ?? null,
    extensions,
  });
}

/** An expected error standing for a driver error, placed where the driver error was (location, path). */
export function locatedAs(expected: AppError, at: GraphQLError): GraphQLError {
  return new GraphQLError(expected.message, {
    nodes: at.nodes ?? null,
    source: at.source ?? null,
    positions: at.positions ?? null,
    path: at.path ?? null,
    originalError: expected,
    extensions: expected.extensions,
  });
}

/** A GraphQL response body of one error, for a request refused before execution. */
export function graphqlErrorBody(e: AppError): { errors: GraphQLError[] } {
  return { errors: [graphqlRendering(e)] };
}

/** A pino level: what a failure is logged at. */
export type FailureLogLevel = 'info' | 'warn' | 'error';

/**
 * The level a response of this status is logged at (P94): `error` only when the service itself is
 * wrong (500); an unavailable database or provider (502, 503, 504) `warn`; a client's mistake `info`.
 */
export function statusLogLevel(status: number): FailureLogLevel {
  if (status < 500) return 'info';
  return status === 502 || status === 503 || status === 504 ? 'warn' : 'error';
}

/** The level an error is logged at: an expected one's (or one standing for it) by its status, anything else `error`. */
export function errorLogLevel(err: unknown): FailureLogLevel {
  const expected = expectedErrorOf(err) ?? requestErrorOf(err);
  return expected ? statusLogLevel(expected.status) : 'error';
}
