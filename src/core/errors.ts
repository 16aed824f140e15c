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
  /** A live subscription ended because its client fell too far behind (P55). */
  | 'SLOW_CONSUMER'
  | 'INTERNAL_SERVER_ERROR';

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
 * connection in time, or a statement cancelled by its time limit): 503 with Retry-After (P50).
 */
export class ServiceUnavailableError extends AppError {
  /** @param cause the driver's error, for logs only (never in an answer). */
  constructor(message = 'The database is unavailable; retry shortly.', cause?: unknown) {
    super(503, 'SERVICE_UNAVAILABLE', message, { headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) } });
    if (cause !== undefined) this.cause = cause;
  }
}

/** Over this tenant's or client's share of the instance (admission control, P52): 429 with Retry-After. */
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
