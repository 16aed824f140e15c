import { GraphQLError } from 'graphql';

/** Field path (as sent) → messages, as in ASP.NET's ValidationProblemDetails. */
export type FieldErrors = Record<string, string[]>;

export type ErrorCode =
  | 'BAD_REQUEST'
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'CONFLICT'
  | 'PAYLOAD_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'PROVIDER_UNAVAILABLE'
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
  400: '15.5.1', 401: '15.5.2', 403: '15.5.4', 404: '15.5.5', 405: '15.5.6', 406: '15.5.7', 409: '15.5.10', 413: '15.5.14', 415: '15.5.16',
  500: '15.6.1', 502: '15.6.3', 503: '15.6.4',
};

/** RFC 9457 body for a status. Only an AppError's own message reaches `detail`, never an unexpected one's. */
export function problem(status: number, traceId: string, detail?: string, errors?: FieldErrors): Problem {
  return {
    type: `https://tools.ietf.org/html/rfc9110#section-${RFC9110[status] ?? '15'}`,
    title: TITLES[status] ?? 'Error',
    status,
    ...(detail !== undefined ? { detail } : {}),
    traceId,
    ...(errors ? { errors } : {}),
  };
}
