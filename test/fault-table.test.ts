import { messages as pglite } from '@electric-sql/pglite';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError, ServiceUnavailableError } from '../src/core/errors.js';
import { openDatabase } from '../src/db/database.js';
import {
  FAULTS,
  type FaultName,
  TRANSACTION_RUNS,
  expectedErrorOf,
  faultOf,
  isDatabaseUnavailable,
  isFault,
  isUniqueViolation,
  statementRerun,
} from '../src/db/faults.js';
import { inTransaction } from '../src/db/transaction.js';
import { failure, freePort, openTestDatabase } from './helpers.js';

// The fault table (src/db/faults.ts): each class fed the errors `pg` (pg-protocol's DatabaseError), PGlite
// (its own DatabaseError, the same fields), Node's sockets and pg-pool really raise, then real statements
// on this run's database (PGlite or PostgreSQL) checking the engine raises what the table expects.

type Fields = { code: string; message: string; routine?: string; constraint?: string; severity?: string };

/** A PostgreSQL ErrorResponse as `pg` parses it (pg-protocol). */
function pgError(f: Fields): Error {
  return Object.assign(new pg.DatabaseError(f.message, 100, 'error'), { severity: 'ERROR', ...f });
}
/** The same as PGlite raises it (its own DatabaseError, with the same fields). */
function pgliteError(f: Fields): Error {
  return Object.assign(new pglite.DatabaseError(f.message, 100, 'error'), { severity: 'ERROR', ...f });
}
/** A Node socket error. */
function socketError(code: string, syscall = 'connect'): Error {
  return Object.assign(new Error(`${syscall} ${code} 127.0.0.1:5432`), { code, errno: -1, syscall, address: '127.0.0.1', port: 5432 });
}
const both = (f: Fields) => [pgError(f), pgliteError(f)];

const CASES: { name: FaultName; status?: number; errors: unknown[] }[] = [
  {
    name: 'connection-lost',
    status: 503,
    errors: [
      ...both({
        code: '57P01',
        severity: 'FATAL',
        message: 'terminating connection due to administrator command',
        routine: 'ProcessInterrupts',
      }),
      pgError({ code: '57P02', severity: 'FATAL', message: 'terminating connection because of crash of another server process' }),
      socketError('ECONNRESET', 'read'),
      socketError('EPIPE', 'write'),
      new Error('Connection terminated unexpectedly'),
      new Error('Connection terminated'),
      new Error('Client has encountered a connection error and is not queryable'),
      // PgBouncer 1.18: the server connection died under the client's transaction; a RELOAD that changed or
      // removed the database closed its clients; a transaction was left idle past idle_transaction_timeout.
      ...['server conn crashed?', 'database configuration changed', 'database removed', 'idle transaction timeout'].map((message) =>
        pgError({ code: '08P01', severity: 'FATAL', message }),
      ),
    ],
  },
  {
    name: 'unavailable',
    status: 503,
    errors: [
      pgError({ code: '57P03', severity: 'FATAL', message: 'the database system is starting up' }),
      pgError({ code: '53300', severity: 'FATAL', message: 'sorry, too many clients already' }),
      ...['08000', '08001', '08003', '08004', '08006', '08007'].map((code) => pgError({ code, message: 'connection exception' })),
      ...['ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED'].map((c) => socketError(c)),
      ...['ENOTFOUND', 'EAI_AGAIN'].map((c) => socketError(c, 'getaddrinfo')),
      new Error('timeout exceeded when trying to connect'),
      new Error('Cannot use a pool after calling end on the pool'),
      new Error('Client was closed and is not queryable'),
      new Error('Query read timeout'),
      // Statements racing the close at shutdown: Kysely's, then PGlite's.
      new Error('driver has already been destroyed'),
      new Error('PGlite instance is already closed.'),
      new Error('PGlite is closing'),
      new Error('PGlite is closed'),
      // PgBouncer 1.18's refusals, as it sends them (test/pgbouncer.test.ts meets them on a real one).
      ...[
        'query_wait_timeout',
        'no more connections allowed (max_client_conn)',
        'server login has been failing, try again later (server_login_retry)',
        'client_login_timeout (server down)',
        // Older PgBouncers' fast fail (not in 1.18's binary).
        'pgbouncer cannot connect to server',
        // PostgreSQL's refusal of PgBouncer's login, passed on under 08P01.
        'the database system is shutting down',
        'sorry, too many clients already',
      ].map((message) => pgError({ code: '08P01', severity: 'FATAL', message })),
      // `localhost` refused on both of its addresses.
      new AggregateError([socketError('ECONNREFUSED'), socketError('ECONNREFUSED')]),
    ],
  },
  {
    name: 'statement-timeout',
    status: 503,
    errors: [
      ...both({ code: '57014', message: 'canceling statement due to statement timeout', routine: 'ProcessInterrupts' }),
      // PgBouncer's own query_timeout: it closes the client's connection.
      pgError({ code: '08P01', severity: 'FATAL', message: 'query_timeout' }),
    ],
  },
  {
    name: 'unstorable-text',
    status: 400,
    errors: [
      ...both({ code: '22021', message: 'invalid byte sequence for encoding "UTF8": 0x00', routine: 'report_invalid_encoding' }),
      ...both({ code: '22P05', message: 'unsupported Unicode escape sequence', routine: 'report_invalid_encoding' }),
    ],
  },
  {
    name: 'unusable-prepared',
    errors: [
      pgError({ code: '26000', message: 'prepared statement "s1" does not exist', routine: 'FetchPreparedStatement' }),
      pgError({ code: '0A000', message: 'cached plan must not change result type', routine: 'RevalidateCachedQuery' }),
      // A server that translates its messages: the routine tells.
      pgError({
        code: '0A000',
        message: 'le plan mis en cache ne doit pas modifier le type de résultat',
        routine: 'RevalidateCachedQuery',
      }),
    ],
  },
  {
    name: 'transaction-rolled-back',
    errors: [
      ...both({ code: '40P01', message: 'deadlock detected', routine: 'DeadLockReport' }),
      ...both({ code: '40001', message: 'could not serialize access due to concurrent update' }),
    ],
  },
  {
    name: 'unique-violation',
    errors: both({ code: '23505', message: 'duplicate key value violates unique constraint "t_pkey"', constraint: 't_pkey' }),
  },
  {
    name: 'foreign-key-violation',
    errors: both({
      code: '23503',
      message: 'insert or update on table "c" violates foreign key constraint "c_p_fk"',
      constraint: 'c_p_fk',
    }),
  },
  {
    name: 'numeric-overflow',
    errors: [
      ...both({ code: '22003', message: 'value out of range: overflow', routine: 'float_overflow_error' }),
      pgError({ code: '22003', message: 'integer out of range', routine: 'int4pl' }),
    ],
  },
];

describe('the fault table', () => {
  // P97: every fault class the service tells apart is one FAULTS entry, with a case here.
  it('has a case for every class', () => {
    expect(CASES.map((c) => c.name).sort()).toEqual(Object.keys(FAULTS).sort());
  });

  for (const { name, status, errors } of CASES) {
    it(`${name}: ${FAULTS[name].answer}, retry ${FAULTS[name].retry}`, () => {
      const { answer, retry } = FAULTS[name];
      for (const e of errors) {
        expect(faultOf(e), String(e)).toEqual({ name, answer, retry });
        expect(isFault(e, name)).toBe(true);
        expect(isDatabaseUnavailable(e)).toBe(answer === 'unavailable');
        const expected = expectedErrorOf(e);
        expect(expected?.status).toBe(status);
        if (answer === 'unavailable' || answer === 'cancelled') expect(expected).toBeInstanceOf(ServiceUnavailableError);
        if (expected) expect(expected.cause ?? e).toBe(e);
      }
    });
  }

  it('knows nothing else: a plain error, another SQLSTATE, feature_not_supported of another routine', () => {
    const others = [
      new Error('boom'),
      new TypeError('x is undefined'),
      ...both({ code: 'XX000', message: 'internal error' }),
      ...both({ code: '42P01', message: 'relation "x" does not exist' }),
      pgError({ code: '0A000', message: 'cannot use subquery in index predicate', routine: 'transformSubLink' }),
      // A protocol violation of PostgreSQL's own is a bug, not an unavailable pooler; nor is a login PgBouncer passes on for a missing database.
      pgError({ code: '08P01', message: 'bind message supplies 1 parameters, but prepared statement "" requires 2' }),
      pgError({ code: '08P01', severity: 'FATAL', message: 'database "nosuchdb" does not exist' }),
      new AggregateError([socketError('ECONNREFUSED'), new Error('boom')]),
      new AggregateError([]),
      null,
      'a string',
    ];
    for (const e of others) {
      expect(faultOf(e), String(e)).toBeUndefined();
      expect(expectedErrorOf(e)).toBeUndefined();
      expect(isDatabaseUnavailable(e)).toBe(false);
    }
  });

  it('answers an expected error as itself, and a ServiceUnavailableError as unavailable', () => {
    const e = new AppError(409, 'CONFLICT', 'taken');
    expect(expectedErrorOf(e)).toBe(e);
    expect(isDatabaseUnavailable(new ServiceUnavailableError())).toBe(true);
  });

  it('tells a unique violation of one constraint', () => {
    const [e] = both({ code: '23505', message: 'duplicate key', constraint: 'subject_matching_uq' });
    expect(isUniqueViolation(e)).toBe(true);
    expect(isUniqueViolation(e, 'subject_matching_uq')).toBe(true);
    expect(isUniqueViolation(e, 'other_uq')).toBe(false);
    expect(isFault(e, 'foreign-key-violation')).toBe(false);
  });

  it('re-runs a statement only as its retry class allows', () => {
    const lost = pgError({ code: '57P01', message: 'terminating connection due to administrator command' });
    const stale = pgError({ code: '26000', message: 'prepared statement "s1" does not exist' });
    const read = { text: 'select "id" from "subject" where "tenant_id" = $1', named: false, inTransaction: false };
    expect(statementRerun(lost, read)).toBe('fresh-connection');
    expect(statementRerun(lost, { ...read, inTransaction: true })).toBeUndefined();
    for (const text of ['insert into "t" values ($1)', 'select * from "t" for update', "select pg_notify('c', $1)", 'select nextval($1)']) {
      expect(statementRerun(lost, { ...read, text }), text).toBeUndefined();
    }
    expect(statementRerun(stale, { ...read, named: true })).toBe('unnamed');
    expect(statementRerun(stale, { ...read, text: 'update "t" set "a" = $1', named: true })).toBe('unnamed');
    expect(statementRerun(stale, read)).toBeUndefined();
    for (const e of [...CASES.flatMap((c) => (c.name === 'connection-lost' || c.name === 'unusable-prepared' ? [] : c.errors))]) {
      expect(statementRerun(e, { ...read, named: true })).toBeUndefined();
    }
  });
});

describe('the engine raises what the table expects', () => {
  let handle: Awaited<ReturnType<typeof openTestDatabase>>;
  beforeAll(async () => {
    handle = await openTestDatabase();
  });
  afterAll(() => handle?.dispose());

  it('a unique violation and a foreign key violation, with their constraints', async () => {
    const e = await failure(() =>
      inTransaction(handle.db, async (trx) => {
        await sql`CREATE TEMP TABLE fault_p (id int CONSTRAINT fault_p_pk PRIMARY KEY) ON COMMIT DROP`.execute(trx);
        await sql`INSERT INTO fault_p VALUES (1), (1)`.execute(trx);
      }),
    );
    expect(faultOf(e)?.name).toBe('unique-violation');
    expect(isUniqueViolation(e, 'fault_p_pk')).toBe(true);
    expect(expectedErrorOf(e)).toBeUndefined();
    const fk = await failure(() =>
      inTransaction(handle.db, async (trx) => {
        await sql`CREATE TEMP TABLE fault_p (id int PRIMARY KEY) ON COMMIT DROP`.execute(trx);
        await sql`CREATE TEMP TABLE fault_c (p int CONSTRAINT fault_c_p_fk REFERENCES fault_p) ON COMMIT DROP`.execute(trx);
        await sql`INSERT INTO fault_c VALUES (1)`.execute(trx);
      }),
    );
    expect(isFault(fk, 'foreign-key-violation', 'fault_c_p_fk')).toBe(true);
  });

  it('a numeric overflow, float8 and integer', async () => {
    expect(faultOf(await failure(() => sql`SELECT 1e308::float8 * 10`.execute(handle.db)))?.name).toBe('numeric-overflow');
    expect(faultOf(await failure(() => sql`SELECT 2147483647::int4 + 1`.execute(handle.db)))?.name).toBe('numeric-overflow');
  });

  it('U+0000 in a text argument is a client error (400)', async () => {
    const e = await failure(() => sql`SELECT ${'a\u0000b'}::text`.execute(handle.db));
    // PostgreSQL's pool answers it as the expected error already (it is the table's only 400); PGlite's
    // driver leaves the engine's error to the renderings.
    if (handle.kind === 'postgres') expect(e).toBeInstanceOf(AppError);
    else expect(faultOf(e)?.name).toBe('unstorable-text');
    expect(expectedErrorOf(e)?.status).toBe(400);
  });

  it(`a rolled-back transaction runs again, at most ${TRANSACTION_RUNS} times; other faults never`, async () => {
    const [deadlock] = both({ code: '40P01', message: 'deadlock detected' });
    let runs = 0;
    const result = await inTransaction(handle.db, async (trx) => {
      await sql`SELECT 1`.execute(trx);
      if (++runs < TRANSACTION_RUNS) throw deadlock;
      return 'done';
    });
    expect([result, runs]).toEqual(['done', TRANSACTION_RUNS]);
    runs = 0;
    expect(
      await failure(() =>
        inTransaction(handle.db, async () => {
          runs++;
          throw deadlock;
        }),
      ),
    ).toBe(deadlock);
    expect(runs).toBe(TRANSACTION_RUNS);
    runs = 0;
    const [unique] = both({ code: '23505', message: 'duplicate key' });
    await failure(() =>
      inTransaction(handle.db, async () => {
        runs++;
        throw unique;
      }),
    );
    expect(runs).toBe(1);
  });

  it('statements racing the close at shutdown, or after it, are an unavailable database (503)', async () => {
    const closing = await openTestDatabase();
    let release!: () => void, begun!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const holding = new Promise<void>((resolve) => (begun = resolve));
    // A transaction holds a connection (PGlite's only one: statements queue behind it) as the close starts.
    const tx = inTransaction(closing.db, async (trx) => {
      await sql`SELECT 1`.execute(trx);
      begun();
      await held;
    });
    await holding;
    const racing = Array.from({ length: 3 }, () => sql`SELECT 1`.execute(closing.db));
    const closed = closing.dispose();
    const during = sql`SELECT 1`.execute(closing.db);
    release();
    const outcomes = await Promise.allSettled([...racing, during]);
    await Promise.allSettled([tx, closed]);
    const after = await failure(() => sql`SELECT 1`.execute(closing.db));
    const failed = [...outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : [])), after];
    expect(outcomes.at(-1)?.status).toBe('rejected');
    for (const e of failed) expect(expectedErrorOf(e)).toBeInstanceOf(ServiceUnavailableError);
  });

  it('a refused connection is an unavailable database (503)', async () => {
    const refused = await openDatabase({
      databaseUrl: `postgres://nobody@127.0.0.1:${await freePort()}/none`,
      dataDir: '',
      connectTimeoutMs: 2_000,
      onPoolError: () => {},
    });
    try {
      const e = await failure(() => sql`SELECT 1`.execute(refused.db));
      expect(e).toBeInstanceOf(ServiceUnavailableError);
      expect(faultOf((e as Error).cause)?.name).toBe('unavailable');
    } finally {
      await refused.close();
    }
  });
});
