import { AppError, ServiceUnavailableError } from '../core/errors.js';

/**
 * The database's faults: each PostgreSQL SQLSTATE (PGlite raises the same ones) and driver or network
 * error the service tells apart, with what it is answered as and what may be run again after it. The
 * resilient pool (database.ts), inTransaction (transaction.ts), the repositories' conflict tests and the
 * error renderings (http/errors.ts) all read this table; adding a fault class is an entry here.
 */

/** What a fault stands for, when no caller handles it. */
export type FaultAnswer =
  /** The database is away or going (P50): 503 with Retry-After; start-up waits for it. */
  | 'unavailable'
  /** A statement ran past DATABASE_STATEMENT_TIMEOUT_MS and was cancelled: 503. */
  | 'cancelled'
  /** The request was wrong: the 4xx AppError `expected` makes. */
  | 'client-error'
  /** A constraint held against a concurrent or repeated write: the domain answers it (409 in its words). */
  | 'conflict'
  /** Nothing the client can act on: 500 unless a caller handles it. */
  | 'internal';

/** What may be run again after the fault. */
export type RetryClass =
  /** The statement, once, on a fresh connection, when it only reads and runs outside a transaction: a write may have committed. */
  | 'statement-if-read'
  /** The statement, once, unnamed: PostgreSQL refused its prepared form before running it, so even a write may re-run. */
  | 'statement-unnamed'
  /** The whole top-level transaction, up to TRANSACTION_RUNS runs: PostgreSQL rolled it back. */
  | 'transaction'
  | 'never';

/** The fields of a `pg` DatabaseError (pg-protocol; PGlite's has the same), a Node socket error or a pg-pool Error. */
interface DriverError {
  code?: unknown;
  message?: unknown;
  routine?: unknown;
  constraint?: unknown;
  errors?: unknown;
}

interface FaultClass {
  answer: FaultAnswer;
  retry: RetryClass;
  /** SQLSTATEs or Node error codes. */
  codes?: readonly string[];
  /** Message prefixes of pg / pg-pool errors that carry no code, or one no entry claims (PgBouncer's 08P01). */
  messages?: readonly string[];
  /** A narrower test once a code matched. */
  when?: (e: DriverError) => boolean;
  /** The expected error answered for it (answers 'unavailable', 'cancelled', 'client-error'). */
  expected?: (e: unknown) => AppError;
}

const unavailable = (e: unknown) => new ServiceUnavailableError(undefined, e);

/** The table, matched in order (a connection lost is also an unavailable database: the first entry wins). */
export const FAULTS = {
  /**
   * The connection a statement ran on died under it: a terminated backend (57P01), a crash (57P02), a cut
   * socket (a pooler stopped), PgBouncer's server connection lost under a client's transaction, or
   * PgBouncer closing its clients (a RELOAD that changed or removed the database, a transaction left idle
   * past idle_transaction_timeout).
   */
  'connection-lost': {
    answer: 'unavailable',
    retry: 'statement-if-read',
    codes: ['57P01', '57P02', 'ECONNRESET', 'EPIPE'],
    messages: [
      'Connection terminated',
      'Client has encountered a connection error and is not queryable',
      'server conn crashed?',
      'database configuration changed',
      'database removed',
      'idle transaction timeout',
    ],
    expected: unavailable,
  },
  /**
   * The database is away: class 08 connection exceptions, starting up (57P03), too many connections
   * (53300), socket errors, no pool connection in time, a pool or client already closed, a statement
   * racing the database's close at shutdown (Kysely's driver destroyed, PGlite closing or closed), and
   * PgBouncer's own refusals (all 08P01, told by their words, as a real protocol violation is a bug): no
   * server connection free within query_wait_timeout, max_client_conn reached, PostgreSQL not reachable
   * (server_login_retry; before 1.18 "cannot connect"; client_login_timeout while the server is down), or
   * PostgreSQL refusing PgBouncer's login while it starts or stops.
   */
  unavailable: {
    answer: 'unavailable',
    retry: 'never',
    codes: [
      ...['08000', '08001', '08003', '08004', '08006', '08007', '57P03', '53300'],
      ...['ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'ECONNABORTED'],
    ],
    messages: [
      'timeout exceeded when trying to connect',
      'Cannot use a pool after calling end on the pool',
      'Client was closed and is not queryable',
      'Query read timeout',
      'driver has already been destroyed',
      'PGlite instance is already closed',
      'PGlite is closing',
      'PGlite is closed',
      'query_wait_timeout',
      'no more connections allowed',
      'server login has been failing',
      'pgbouncer cannot connect to server',
      'client_login_timeout (server down)',
      'the database system is ',
      'sorry, too many clients already',
    ],
    expected: unavailable,
  },
  /** query_canceled: the statement ran past its time limit; or past PgBouncer's query_timeout, which closes the connection. */
  'statement-timeout': {
    answer: 'cancelled',
    retry: 'never',
    codes: ['57014'],
    messages: ['query_timeout'],
    expected: (e) =>
      new ServiceUnavailableError('The request took too long and was cancelled; narrow it (filters, page size) and retry.', e),
  },
  /** PostgreSQL cannot store U+0000 in text (22021 character_not_in_repertoire, 22P05 untranslatable_character): bad input (P3). */
  'unstorable-text': {
    answer: 'client-error',
    retry: 'never',
    codes: ['22021', '22P05'],
    expected: () => new AppError(400, 'BAD_REQUEST', 'An argument holds a character that cannot be stored (U+0000).'),
  },
  /**
   * A named statement PostgreSQL refused before running it (P71): the session no longer holds it (26000, a
   * pooler that does not keep statements per client), or its result type changed since it was prepared
   * (0A000 from RevalidateCachedQuery: a migration; told by the routine, which unlike the message is never
   * translated).
   */
  'unusable-prepared': {
    answer: 'internal',
    retry: 'statement-unnamed',
    codes: ['26000', '0A000'],
    when: (e) =>
      e.code === '26000' ||
      e.routine === 'RevalidateCachedQuery' ||
      (typeof e.message === 'string' && e.message.includes('cached plan must not change result type')),
  },
  /** A deadlock victim (40P01) or a serialization failure (40001): writes lock rows in different orders. */
  'transaction-rolled-back': { answer: 'internal', retry: 'transaction', codes: ['40P01', '40001'] },
  /** unique_violation: the repository names the constraint and the 409 (isUniqueViolation). */
  'unique-violation': { answer: 'conflict', retry: 'never', codes: ['23505'] },
  /** foreign_key_violation: a referenced row was deleted meanwhile. */
  'foreign-key-violation': { answer: 'conflict', retry: 'never', codes: ['23503'] },
  /** numeric_value_out_of_range: float8 or integer arithmetic overflowed (the aggregates recompute in numeric, P83). */
  'numeric-overflow': { answer: 'internal', retry: 'never', codes: ['22003'] },
} satisfies Record<string, FaultClass>;

export type FaultName = keyof typeof FAULTS;

const ENTRIES = Object.entries(FAULTS) as [FaultName, FaultClass][];

/** A top-level transaction runs at most this often when its fault's retry class is 'transaction'. */
export const TRANSACTION_RUNS = 3;

/** The fault class of an error, or undefined for one the table does not know (a 500, unless a caller handles it). */
export function faultOf(e: unknown): { name: FaultName; answer: FaultAnswer; retry: RetryClass } | undefined {
  if (!e || typeof e !== 'object') return undefined;
  const err = e as DriverError;
  const found =
    (typeof err.code === 'string' && ENTRIES.find(([, f]) => f.codes?.includes(err.code as string) && (!f.when || f.when(err)))) ||
    (typeof err.message === 'string' && ENTRIES.find(([, f]) => f.messages?.some((m) => (err.message as string).startsWith(m))));
  if (found) return { name: found[0], answer: found[1].answer, retry: found[1].retry };
  // Node reports a refused connection to a name with several addresses as an AggregateError.
  if (Array.isArray(err.errors) && err.errors.length > 0 && err.errors.every(isDatabaseUnavailable)) {
    return { name: 'unavailable', answer: 'unavailable', retry: 'never' };
  }
  return undefined;
}

/** Whether an error is of one fault class, optionally of one constraint. */
export function isFault(e: unknown, name: FaultName, constraint?: string): boolean {
  return faultOf(e)?.name === name && (constraint === undefined || (e as DriverError).constraint === constraint);
}

/** A unique violation, optionally of one constraint. */
export function isUniqueViolation(e: unknown, constraint?: string): boolean {
  return isFault(e, 'unique-violation', constraint);
}

/** Whether an error means the database is unavailable rather than that the request was wrong or the service is broken (P50). */
export function isDatabaseUnavailable(e: unknown): boolean {
  return e instanceof ServiceUnavailableError || faultOf(e)?.answer === 'unavailable';
}

/**
 * The expected error an unexpected one stands for, if any: an unavailable database or a statement time
 * limit (503), text PostgreSQL cannot store (400). The one map from driver errors to answers.
 */
export function expectedErrorOf(e: unknown): AppError | undefined {
  if (e instanceof AppError) return e;
  const fault = faultOf(e);
  const expected = fault && (FAULTS[fault.name] as FaultClass).expected;
  return expected?.(e);
}

// A statement that only reads: a plain SELECT (or one with CTEs), not locking rows, not calling functions
// that write. The words as words: a column named `updated_at` writes nothing.
const READ_ONLY = /^\s*(select|with)\b/i;
const WRITES =
  /\b(insert|update|delete|merge)\b|\bfor\s+(no\s+key\s+)?update\b|\bfor\s+(key\s+)?share\b|\b(nextval|setval|pg_notify|pg_advisory\w*)\s*\(/i;

/**
 * Whether a statement outside a transaction only reads, as far as its text tells: it may run again on a
 * fresh connection, or on a read replica (one that writes through a function fails there with 25006, and
 * runs on the primary).
 */
export function onlyReads(text: string): boolean {
  return READ_ONLY.test(text) && !WRITES.test(text);
}

/**
 * How the resilient pool may run a failed statement again: 'unnamed' (its prepared form was refused
 * before it ran), 'fresh-connection' (its connection died under a read outside a transaction), or not
 * (undefined): a write, or anything inside a transaction, may have committed.
 */
export function statementRerun(
  e: unknown,
  statement: { text: string; named: boolean; inTransaction: boolean },
): 'unnamed' | 'fresh-connection' | undefined {
  const retry = faultOf(e)?.retry;
  if (retry === 'statement-unnamed') return statement.named ? 'unnamed' : undefined;
  if (retry !== 'statement-if-read' || statement.inTransaction) return undefined;
  return onlyReads(statement.text) ? 'fresh-connection' : undefined;
}
