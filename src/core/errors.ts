import { GraphQLError } from 'graphql';

/** Field path (as sent) → messages, as in ASP.NET's ValidationProblemDetails. */
export type FieldErrors = Record<string, string[]>;

export type ErrorCode =
  | 'BAD_REQUEST'
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'CONFLICT'
  | 'METHOD_NOT_ALLOWED'
  | 'NOT_ACCEPTABLE'
  | 'PAYLOAD_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'PROVIDER_UNAVAILABLE'
  | 'TOO_MANY_REQUESTS'
  | 'SERVICE_UNAVAILABLE'
  | 'CLIENT_CLOSED_REQUEST'
  /** A live subscription ended because its client fell too far behind (issue 17). */
  | 'SLOW_CONSUMER'
  | 'INTERNAL_SERVER_ERROR';

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

/**
 * An expected error. It is a GraphQLError so Yoga passes it through unmasked, carrying
 * `extensions.code` and `extensions.http.status`; the REST adapter maps the same fields to problem+json.
 */
export class AppError extends GraphQLError {
  readonly status: number;
  readonly code: ErrorCode;
  readonly fieldErrors: FieldErrors | undefined;
  readonly headers: Record<string, string> | undefined;

  constructor(status: number, code: ErrorCode, message: string, opts: { errors?: FieldErrors; headers?: Record<string, string> } = {}) {
    super(message, {
      extensions: {
        code,
        http: { status, ...(opts.headers ? { headers: opts.headers } : {}) },
        ...(opts.errors ? { errors: opts.errors } : {}),
      },
    });
    this.status = status;
    this.code = code;
    this.fieldErrors = opts.errors;
    this.headers = opts.headers;
  }
}

/** 400 with the offending locations. `errors` keys are GraphQL-style camel-case paths. */
export class ValidationError extends AppError {
  constructor(errors: FieldErrors, message = 'One or more validation errors occurred.') {
    super(400, 'BAD_REQUEST', message, { errors });
  }
  /** One problem at one location. */
  static at(path: string, message: string): ValidationError {
    return new ValidationError({ [path]: [message] }, message);
  }
}

export class NotFoundError extends AppError {
  constructor(message: string) {
    super(404, 'NOT_FOUND', message);
  }
}

export class ConflictError extends AppError {
  constructor(message: string) {
    super(409, 'CONFLICT', message);
  }
}

export class ForbiddenError extends AppError {
  constructor(message: string, headers?: Record<string, string>) {
    super(403, 'FORBIDDEN', message, headers ? { headers } : {});
  }
}

export class UnauthenticatedError extends AppError {
  constructor(message: string, wwwAuthenticate: string) {
    super(401, 'UNAUTHENTICATED', message, { headers: { 'WWW-Authenticate': wwwAuthenticate } });
  }
}

/** D10: a data provider failed and nothing is cached to serve instead. */
export class ProviderUnavailableError extends AppError {
  constructor(message: string) {
    super(502, 'PROVIDER_UNAVAILABLE', message);
  }
}

/** Seconds a client is told to wait (`Retry-After`) when the database is unavailable. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 1;

/**
 * The database cannot serve the request now (refused, dropped, starting up, shutting down, no pool
 * connection in time, or a statement cancelled by its time limit): 503 with Retry-After (issue 15).
 */
export class ServiceUnavailableError extends AppError {
  /** @param cause the driver's error, for logs only (never in an answer). */
  constructor(message = 'The database is unavailable; retry shortly.', cause?: unknown) {
    super(503, 'SERVICE_UNAVAILABLE', message, { headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) } });
    if (cause !== undefined) this.cause = cause;
  }
}

/** Over this tenant's or client's share of the instance (admission control, issue 15): 429 with Retry-After. */
export class TooManyRequestsError extends AppError {
  constructor(message: string, headers: Record<string, string>) {
    super(429, 'TOO_MANY_REQUESTS', message, { headers });
  }
}

/** The client went away before its request was served (no one reads the answer; nginx's 499 in logs and metrics). */
export class ClientClosedError extends AppError {
  constructor() {
    super(499, 'CLIENT_CLOSED_REQUEST', 'The client closed the connection before the request was served.');
  }
}

// SQLSTATEs of a database that is away or going (class 08 connection exceptions, 57P01 admin shutdown
// or a terminated backend, 57P02 crash shutdown, 57P03 starting up, 53300 too many connections).
const UNAVAILABLE_SQLSTATES = new Set(['08000', '08001', '08003', '08004', '08006', '08007', '57P01', '57P02', '57P03', '53300']);
// Socket errors of the driver, and pg / pg-pool messages that carry no code.
const UNAVAILABLE_ERRNOS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ECONNABORTED',
]);
const UNAVAILABLE_MESSAGES = [
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Client has encountered a connection error and is not queryable',
  'Cannot use a pool after calling end on the pool',
  'Client was closed and is not queryable',
  'Query read timeout',
];

/** PostgreSQL's query_canceled: a statement ran past DATABASE_STATEMENT_TIMEOUT_MS. */
export const STATEMENT_TIMEOUT = '57014';

/**
 * Whether an error means the database is unavailable rather than that the request was wrong or the
 * service is broken (issue 15): the one list of such errors, read by the driver wrapper and the maps.
 */
export function isDatabaseUnavailable(e: unknown): boolean {
  if (e instanceof ServiceUnavailableError) return true;
  const err = e as { code?: unknown; message?: unknown; errors?: unknown } | null;
  if (!err || typeof err !== 'object') return false;
  if (typeof err.code === 'string' && (UNAVAILABLE_SQLSTATES.has(err.code) || UNAVAILABLE_ERRNOS.has(err.code))) return true;
  if (typeof err.message === 'string' && UNAVAILABLE_MESSAGES.some((m) => (err.message as string).startsWith(m))) return true;
  // Node reports a refused connection to a name with several addresses as an AggregateError.
  return Array.isArray(err.errors) && err.errors.length > 0 && err.errors.every(isDatabaseUnavailable);
}

/** Whether the connection a statement ran on died under it (the statement may be retried elsewhere if it only read). */
export function isConnectionLost(e: unknown): boolean {
  const err = e as { code?: unknown; message?: unknown } | null;
  if (!err || typeof err !== 'object') return false;
  if (err.code === '57P01' || err.code === '57P02' || err.code === 'ECONNRESET' || err.code === 'EPIPE') return true;
  return (
    typeof err.message === 'string' &&
    (err.message.startsWith('Connection terminated') || err.message.startsWith('Client has encountered a connection error'))
  );
}

/**
 * The expected error an unexpected one stands for, if any: an unavailable database or a statement time
 * limit (503), text PostgreSQL cannot store (400). The one map from driver errors to answers.
 */
export function expectedErrorOf(e: unknown): AppError | undefined {
  if (e instanceof AppError) return e;
  const code = (e as { code?: unknown } | null)?.code;
  if (code === STATEMENT_TIMEOUT)
    return new ServiceUnavailableError('The request took too long and was cancelled; narrow it (filters, page size) and retry.', e);
  // PostgreSQL cannot store U+0000 in text: such an argument is bad input, not a server error (P3).
  if (code === '22021' || code === '22P05')
    return new AppError(400, 'BAD_REQUEST', 'An argument holds a character that cannot be stored (U+0000).');
  if (isDatabaseUnavailable(e)) return new ServiceUnavailableError(undefined, e);
  return undefined;
}

/**
 * PostgreSQL refused a named statement before running it (P71): its result type changed since it was
 * prepared (a migration; told by the routine, which unlike the message is never translated), or the
 * session no longer holds it (a pooler that does not keep statements per client).
 */
export function isUnusablePrepared(e: unknown): boolean {
  const err = e as { code?: unknown; routine?: unknown; message?: unknown } | null;
  if (err?.code === '26000') return true;
  return (
    err?.code === '0A000' &&
    (err.routine === 'RevalidateCachedQuery' ||
      (typeof err.message === 'string' && err.message.includes('cached plan must not change result type')))
  );
}

/** Collects field errors so a request reports every problem at once, then throws them together. */
export class ErrorCollector {
  readonly errors: FieldErrors = {};
  add(path: string, message: string): void {
    (this.errors[path] ??= []).push(message);
  }
  get empty(): boolean {
    return Object.keys(this.errors).length === 0;
  }
  throwIfAny(): void {
    if (!this.empty) throw new ValidationError(this.errors);
  }
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail?: string;
  traceId: string;
  errors?: FieldErrors;
}

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

/** Codes of an operation the service refused as a whole (issue 15): it answers with their status and Retry-After. */
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
 * The level a response of this status is logged at (issue 30): `error` only when the service itself is
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
