import { sql } from 'kysely';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMigratedDatabase } from '../src/app/runtime.js';
import { ConfigError, loadConfig } from '../src/core/config.js';
import { expectedErrorOf, faultOf } from '../src/db/faults.js';
import { settleRoleSettings, withDirectDatabase } from '../src/db/pooler.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually } from './fake-provider.js';
import { ApiClient, type ApiResponse, type TestApp, openTestDatabase, pool, startServerInstance } from './helpers.js';
import { Subscriber } from './live-updates.js';
import { type PgBouncer, startPgBouncer } from './pgbouncer.js';

// Three instances behind a real PgBouncer in transaction mode with 4 server connections (P148–P150):
// each instance's pool goes through PgBouncer, its LISTEN straight to PostgreSQL (DATABASE_LISTEN_URL).
// PostgreSQL only (vitest.config.ts). The service is checked over HTTP, GraphQL and SSE; PgBouncer's own
// errors also as its clients meet them, against the fault table.

const SERVER_POOL = 4;
const QUERY_WAIT_S = 3;
const TIMEOUT_MS = 20_000;
const UPSERT = '/api/v2/messaging/subject';
const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const POINTS = `query($id: ID!) { subject(id: $id) { dataPoints(extractKey: "steps") { edges { node { items { value } } } } } }`;
const SUBSCRIPTION = `subscription { dataPointsChanged(extractKey: "steps") { extractKey subjectIds kind at } }`;
const SEARCH = `query($term: String!) { subjects(first: 10, searchTerm: $term) { edges { node { externalId } } } }`;
const UPSERT_GQL = `mutation($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { id externalId } } }`;

type Instance = TestApp & { logs: string[] };

let clone: Awaited<ReturnType<typeof openTestDatabase>>;
let bouncer: PgBouncer;
let provider: FakeProvider;
let direct: pg.Client;
let instances: Instance[];
let t: DataTenant;
const subscribers: Subscriber[] = [];

/**
 * An instance as server.ts starts one (openMigratedDatabase), its pool through PgBouncer (`db.pooled`, by
 * default the shared one), its LISTEN on `db.direct`; its warnings kept.
 */
async function startInstance(publicUrl?: string, db?: { pooled: string; direct: string }): Promise<Instance> {
  const logs: string[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void logs.push(line) });
  const env = {
    DATABASE_URL: db?.pooled ?? bouncer.url,
    DATABASE_POOLER: 'transaction',
    DATABASE_LISTEN_URL: db?.direct ?? clone.url!,
    // The default, overruled by the pooler (P148): the server connections hold no named statement.
    DATABASE_PREPARED_STATEMENTS: 'true',
    DATABASE_POOL_SIZE: '4',
    DATABASE_STATEMENT_TIMEOUT_MS: String(TIMEOUT_MS),
    DATABASE_CONNECT_TIMEOUT_MS: '1000',
    PROVIDER_BACKOFF_MS: '1',
  };
  // Instances behind one public URL: tokens of one are valid on the others.
  return { ...(await startServerInstance(env, { logger, publicUrl })), logs };
}

/** PostgreSQL's sessions of the test database, by application_name (PgBouncer's server connections carry their clients' `ssdi`). */
async function sessions(): Promise<{ listeners: number[]; pooled: number }> {
  const { rows } = await direct.query<{ pid: number; application_name: string }>(
    `SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`,
  );
  return {
    listeners: rows
      .filter((r) => r.application_name === 'ssdi-listener')
      .map((r) => r.pid)
      .sort(),
    pooled: rows.filter((r) => r.application_name !== 'ssdi-listener').length,
  };
}

/**
 * `text`'s row on each of PgBouncer's SERVER_POOL server connections: as many clients in a transaction at
 * once as it has server connections, so each holds another one.
 */
async function onEveryServerConnection<R extends pg.QueryResultRow>(text: string): Promise<R[]> {
  const clients = await Promise.all(
    Array.from({ length: SERVER_POOL }, async () => {
      const c = new pg.Client(bouncer.url);
      c.on('error', () => {});
      await c.connect();
      await c.query('BEGIN');
      return c;
    }),
  );
  return Promise.all(
    clients.map(async (c) => {
      const { rows } = await c.query<R>(text);
      await c.query('COMMIT');
      await c.end();
      return rows[0]!;
    }),
  );
}

async function subscribe(on: Instance): Promise<Subscriber> {
  const s = new Subscriber(on.url, await t.tenant.token(), SUBSCRIPTION);
  subscribers.push(s);
  await s.ready;
  expect(s.ended).toBeUndefined();
  return s;
}

const stepsVia = async (api: ApiClient, id: string) => {
  const r = await api.gql(POINTS, { id });
  expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
  return { first: r.body.data.subject.dataPoints.edges[0]?.node.items[0].value, stale: r.body.extensions?.staleData };
};

beforeAll(async () => {
  clone = await openTestDatabase();
  direct = new pg.Client({ connectionString: clone.url, application_name: 'pgbouncer-test' });
  direct.on('error', () => {});
  await direct.connect();
  bouncer = await startPgBouncer(clone.url!, { poolSize: SERVER_POOL, settings: { query_wait_timeout: String(QUERY_WAIT_S) } });
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  const first = await startInstance();
  instances = [first, await startInstance(first.url), await startInstance(first.url)];
  t = await createDataTenant(first, provider, 3);
});
afterAll(async () => {
  for (const s of subscribers) s.close();
  for (const i of instances ?? []) await i.close();
  await provider?.close();
  await bouncer?.stop();
  await direct?.end();
  // The role's settings in the clone go with it.
  await clone?.dispose();
});

const on = (i: number) => new ApiClient(instances[i]!.url, t.api.token);

describe('configuration', () => {
  it('refuses DATABASE_POOLER=transaction without DATABASE_LISTEN_URL, or without DATABASE_URL', () => {
    const url = 'postgres://app@127.0.0.1:6432/app';
    expect(() => loadConfig({ DATABASE_URL: url, DATABASE_POOLER: 'transaction' })).toThrow(ConfigError);
    expect(() => loadConfig({ DATABASE_URL: url, DATABASE_POOLER: 'transaction' })).toThrow(
      /^Invalid environment variable DATABASE_LISTEN_URL: required with DATABASE_POOLER=transaction/,
    );
    expect(() => loadConfig({ DATABASE_POOLER: 'transaction', DATABASE_LISTEN_URL: url })).toThrow(
      /^Invalid environment variable DATABASE_POOLER: transaction needs DATABASE_URL/,
    );
    expect(() => loadConfig({ DATABASE_POOLER: 'session' })).toThrow(/DATABASE_POOLER/);
    expect(loadConfig({ DATABASE_URL: url }).DATABASE_POOLER).toBe('none');
    // LISTEN on a URL of its own is also possible without a pooler.
    expect(loadConfig({ DATABASE_URL: url, DATABASE_LISTEN_URL: url }).DATABASE_LISTEN_URL).toBe(url);
  });
});

// P149: the fault table's PgBouncer entries hold the words a real PgBouncer 1.18 sends.
describe("PgBouncer's own errors", () => {
  it('max_client_conn, query_wait_timeout, a server connection lost in a transaction, PostgreSQL unreachable: unavailable (503)', async () => {
    const small = await startPgBouncer(clone.url!, { poolSize: 1, maxClientConn: 2, settings: { query_wait_timeout: '1' } });
    const away = await startPgBouncer('postgres://app@127.0.0.1:1/app', { settings: { query_wait_timeout: '1', server_login_retry: '5' } });
    const open: pg.Client[] = [];
    const client = async (url: string) => {
      const c = new pg.Client(url);
      const events: unknown[] = [];
      c.on('error', (e) => events.push(e));
      open.push(c);
      await c.connect();
      return Object.assign(c, { events });
    };
    const failure = (p: Promise<unknown>) =>
      p.then(
        () => expect.fail('expected a failure'),
        (e: unknown) => e,
      );
    try {
      const errors: unknown[] = [];
      const holder = await client(small.url);
      await holder.query('BEGIN');
      await holder.query('SELECT 1');
      const waiting = await client(small.url);
      errors.push(await failure(waiting.query('SELECT 1')));
      errors.push(await failure(client(small.url).then(() => client(small.url))));
      // Its server connection terminated under a transaction: PgBouncer tells the client after PostgreSQL's 57P01.
      await direct.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
      );
      await eventually(() => holder.events.length >= 2);
      errors.push(holder.events[1]);
      // PostgreSQL unreachable: a client waits for a login that fails (query_wait_timeout), or is refused at once
      // while logins have been failing (server_login_retry), depending on where PgBouncer's retries stand.
      for (let i = 0; i < 2; i++) {
        const e = await failure(client(away.url).then((c) => c.query('SELECT 1')));
        expect(`${(e as pg.DatabaseError).code} ${(e as Error).message}`).toMatch(
          /^08P01 (query_wait_timeout|server login has been failing|pgbouncer cannot connect to server)/,
        );
        errors.push(e);
      }
      expect(errors.slice(0, 3).map((e) => `${(e as pg.DatabaseError).code} ${(e as Error).message}`)).toEqual([
        '08P01 query_wait_timeout',
        '08P01 no more connections allowed (max_client_conn)',
        '08P01 server conn crashed?',
      ]);
      for (const e of errors) {
        expect(faultOf(e)?.answer, String(e)).toBe('unavailable');
        expect(expectedErrorOf(e)?.status).toBe(503);
      }
    } finally {
      for (const c of open) await c.end().catch(() => {});
      await small.stop();
      await away.stop();
    }
  });
});

describe('three instances behind PgBouncer in transaction mode', () => {
  // P148: the session settings are the role's in this database, so every server connection has them.
  it("sets the session settings as the role's defaults, seen by every server connection PgBouncer opens", async () => {
    const { rows } = await direct.query<{ settings: string[] }>(
      `SELECT setconfig AS settings FROM pg_db_role_setting WHERE setrole = (SELECT oid FROM pg_roles WHERE rolname = current_user)
         AND setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    expect(rows[0]?.settings.sort()).toEqual([`pg_trgm.word_similarity_threshold=0.3`, `statement_timeout=${TIMEOUT_MS}`]);
    const seen = await onEveryServerConnection<{ pid: number; timeout: string; threshold: string }>(
      `SELECT pg_backend_pid() AS pid, current_setting('statement_timeout') AS timeout, current_setting('pg_trgm.word_similarity_threshold', true) AS threshold`,
    );
    expect(new Set(seen.map((s) => s.pid)).size).toBe(SERVER_POOL);
    expect(seen.map(({ timeout, threshold }) => ({ timeout, threshold }))).toEqual(
      Array(SERVER_POOL).fill({ timeout: `${TIMEOUT_MS / 1000}s`, threshold: '0.3' }),
    );
    for (const i of instances) expect(i.logs.filter((l) => l.includes('DATABASE_POOLER'))).toEqual([]);
    // P150: start-up migrated over the direct connection: no session advisory lock is left on a server connection.
    const locks = await direct.query(
      `SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()`,
    );
    expect(locks.rowCount).toBe(0);
  });

  it('writes and reads through every instance, REST and GraphQL; a search matching at word_similarity 0.4 finds its subject (D7)', async () => {
    const [a, b, c] = [on(0), on(1), on(2)];
    const created = await a.post(UPSERT, {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'PB-1' } } },
        { Key: 'fullName', Value: { String: { Value: 'John Carpenter' } } },
      ],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const viaGql = await b.gql(UPSERT_GQL, {
      input: {
        customFieldValues: [
          { key: 'employeeNumber', value: { String: { value: 'PB-2' } } },
          { key: 'fullName', value: { String: { value: 'Mary Jonhson' } } },
        ],
      },
    });
    expect(viaGql.body.errors, JSON.stringify(viaGql.body.errors)).toBeUndefined();
    expect(viaGql.body.data.upsertSubject.created).toBe(true);
    const read = await c.get(`/api/v2/subject/${created.body.internalId}`);
    expect(read.status).toBe(200);
    expect(read.body.ExternalId).toBe('PB-1');
    // D7: `Jonh` is in no name; its word_similarity to `John Carpenter` is 0.4, below pg_trgm's default 0.6.
    const listed = await b.get('/api/v2/subject?SearchTerm=Jonh');
    expect(listed.status).toBe(200);
    expect(listed.body.Edges.map((e: any) => e.Node.ExternalId)).toEqual(['PB-2', 'PB-1']);
    const searched = await a.gql(SEARCH, { term: 'Jonh' });
    expect(searched.body.errors).toBeUndefined();
    expect(searched.body.data.subjects.edges.map((e: any) => e.node.externalId)).toEqual(['PB-2', 'PB-1']);
  });

  // Acceptance: a change posted to one instance reaches the subscribers and caches of the others within 1 s.
  it("a change posted to one instance reaches the others' subscribers and caches within 1 s, its own cache before it is answered", async () => {
    const id = t.subjects.get('E-01')!;
    const [a, b, c] = [on(0), on(1), on(2)];
    for (const api of [a, b, c]) expect((await stepsVia(api, id)).first).toBe(5);
    const heard = [await subscribe(instances[1]!), await subscribe(instances[2]!)];
    provider.version = 1;
    // The change reports go to instance 0 (the provider's client was made there).
    const posted = await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: {} });
    expect(posted.status).toBe(200);
    // D10: the writer's instance heard its own notification before answering; the others' deliveries are
    // not acknowledged, PostgreSQL wakes each listener on its own (docs/data-cache.md).
    expect(await stepsVia(a, id)).toEqual({ first: 6, stale: undefined });
    await eventually(async () => (await stepsVia(b, id)).first === 6 && (await stepsVia(c, id)).first === 6, 1000);
    expect(await stepsVia(b, id)).toEqual({ first: 6, stale: undefined });
    expect(await stepsVia(c, id)).toEqual({ first: 6, stale: undefined });
    await eventually(() => heard.every((s) => s.changes.some((ch) => ch.subjectIds.includes(id))), 1000);
    for (const s of heard) expect(s.errors).toEqual([]);
  });

  it("keeps PostgreSQL's connections within PgBouncer's pool under load from three instances", async () => {
    const before = await sessions();
    // One LISTEN connection per instance, straight to PostgreSQL.
    expect(before.listeners).toHaveLength(3);
    let loading = true;
    let most = 0;
    let mostOnServer = 0;
    const sampling = (async () => {
      while (loading) {
        most = Math.max(most, await bouncer.serverConnections());
        mostOnServer = Math.max(mostOnServer, (await sessions()).pooled);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const answers = await pool(
      Array.from({ length: 90 }, (_, n) => n),
      15,
      async (n) => {
        const api = on(n % 3);
        const r = n % 2 ? await api.get('/api/v2/subject?SearchTerm=Person') : await api.gql(POINTS, { id: t.subjects.get('E-02')! });
        return r.status === 200 && !(r.body as { errors?: unknown }).errors;
      },
    );
    loading = false;
    await sampling;
    expect(answers.every(Boolean)).toBe(true);
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(SERVER_POOL);
    expect(mostOnServer).toBeLessThanOrEqual(SERVER_POOL);
    // P148: no named statement reached a server connection, though DATABASE_PREPARED_STATEMENTS is on. Every
    // server connection PgBouncer holds lists its session's statements.
    const prepared = await onEveryServerConnection<{ pid: number; names: string[] }>(
      'SELECT pg_backend_pid() AS pid, ARRAY(SELECT name FROM pg_prepared_statements) AS names',
    );
    expect(new Set(prepared.map((p) => p.pid)).size).toBe(SERVER_POOL);
    expect(prepared.flatMap((p) => p.names)).toEqual([]);
  });

  // P149: PgBouncer's own refusal (08P01 query_wait_timeout) is an unavailable database (P50).
  it('answers 503 with Retry-After when no server connection frees up within query_wait_timeout, 200 once one does', async () => {
    const holders = await Promise.all(
      Array.from({ length: SERVER_POOL }, async () => {
        const c = new pg.Client(bouncer.url);
        c.on('error', () => {});
        await c.connect();
        await c.query('BEGIN');
        await c.query('SELECT 1');
        return c;
      }),
    );
    try {
      const r = await on(0).get('/api/v2/subject?SearchTerm=Person');
      expect(r.status, JSON.stringify(r.body)).toBe(503);
      expect(r.headers.get('retry-after')).not.toBeNull();
      const g = await on(1).gql(POINTS, { id: t.subjects.get('E-02')! });
      expect(g.status).toBe(503);
      expect(g.body.errors.map((e: any) => e.extensions.code)).toEqual(['SERVICE_UNAVAILABLE']);
    } finally {
      for (const c of holders) await c.end();
    }
    expect((await on(0).get('/api/v2/subject?SearchTerm=Person')).status).toBe(200);
  });

  // P149: PgBouncer's own errors and its connections cut are an unavailable database (P50): 503 + Retry-After.
  it('answers 503 with Retry-After while PgBouncer restarts under load, never 500, recovers by itself; LISTEN is not affected', async () => {
    const listenersBefore = (await sessions()).listeners;
    const id = t.subjects.get('E-03')!;
    const outcomes: { kind: string; res?: ApiResponse; error?: string }[] = [];
    let loading = true;
    const worker = async (n: number) => {
      const api = on(n % 3);
      while (loading) {
        const kind = ['list', 'graphql', 'write'][n % 3]!;
        const call =
          kind === 'list'
            ? api.get('/api/v2/subject?SearchTerm=Person')
            : kind === 'graphql'
              ? api.gql(POINTS, { id })
              : api.post(UPSERT, {
                  CustomFieldValues: [
                    { Key: 'employeeNumber', Value: { String: { Value: `PB-W${n}` } } },
                    { Key: 'fullName', Value: { String: { Value: `Writer ${Date.now()}` } } },
                  ],
                });
        outcomes.push(
          await call.then(
            (res) => ({ kind, res }),
            (e: unknown) => ({ kind, error: String(e) }),
          ),
        );
      }
    };
    const load = Promise.all(Array.from({ length: 9 }, (_, n) => worker(n)));
    await new Promise((r) => setTimeout(r, 300));
    await bouncer.restart(1000);
    await new Promise((r) => setTimeout(r, 300));
    loading = false;
    await load;

    const misanswered = outcomes.filter(({ kind, res }) => {
      if (!res) return true;
      const errors: { extensions?: { code?: string } }[] = (res.body as { errors?: [] }).errors ?? [];
      if (res.status === 503) {
        if (res.headers.get('retry-after') === null) return true;
        return kind === 'graphql' ? errors.length === 0 || errors.some((e) => e.extensions?.code !== 'SERVICE_UNAVAILABLE') : false;
      }
      return (
        !(res.status === 200 || (kind === 'write' && res.status === 201)) ||
        errors.some((e) => e.extensions?.code !== 'SERVICE_UNAVAILABLE')
      );
    });
    expect(misanswered.map((o) => `${o.kind} ${o.res?.status ?? o.error} ${JSON.stringify(o.res?.body).slice(0, 300)}`)).toEqual([]);
    expect(outcomes.filter((o) => o.res?.status === 503).length).toBeGreaterThan(0);

    // Recovered by itself: every instance answers reads and writes again.
    for (const [n] of instances.entries()) {
      await eventually(async () => (await on(n).get('/api/v2/subject?SearchTerm=Person')).status === 200);
      const w = await on(n).post(UPSERT, {
        CustomFieldValues: [
          { Key: 'employeeNumber', Value: { String: { Value: `PB-W${n}` } } },
          { Key: 'fullName', Value: { String: { Value: 'After the restart' } } },
        ],
      });
      expect([200, 201]).toContain(w.status);
    }
    // The LISTEN connections are PostgreSQL's own, untouched, and still deliver.
    expect((await sessions()).listeners).toEqual(listenersBefore);
    const heard = await subscribe(instances[2]!);
    provider.version = 2;
    expect((await t.provider.post(CHANGE, { SubjectIdentifier: 'E-03', DataExtractsOptionsValuesFilter: {} })).status).toBe(200);
    expect(await stepsVia(on(0), id)).toEqual({ first: 7, stale: undefined });
    await eventually(async () => (await stepsVia(on(1), id)).first === 7, 1000);
    await eventually(() => heard.changes.some((ch) => ch.subjectIds.includes(id)), 1000);
  });
});

// P148: the role's defaults reach the server connections PgBouncer opens after they were set; one it held
// from before keeps its old settings until it is closed (server_lifetime, RECONNECT), and start-up says so.
describe('a PgBouncer holding server connections from before the settings', () => {
  it('warns naming RECONNECT, and is quiet once PgBouncer reconnected', async () => {
    const db = await openTestDatabase();
    const small = await startPgBouncer(db.url!, { poolSize: 2 });
    const start = async () => {
      const logs: string[] = [];
      const config = loadConfig({
        DATABASE_URL: small.url,
        DATABASE_POOLER: 'transaction',
        DATABASE_LISTEN_URL: db.url!,
        DATABASE_STATEMENT_TIMEOUT_MS: String(TIMEOUT_MS),
      });
      const handle = await openMigratedDatabase(config, pino({ level: 'warn' }, { write: (line: string) => void logs.push(line) }));
      await handle.close();
      return logs.map((l) => JSON.parse(l).msg as string);
    };
    try {
      // Two server connections opened now, without the settings, stay in PgBouncer's pool; start-up's check of
      // the database (checkSameDatabase) leaves one in a transaction, which PgBouncer closes: one is left.
      const early = await Promise.all(
        [0, 1].map(async () => {
          const c = new pg.Client(small.url);
          await c.connect();
          await c.query('BEGIN');
          return c;
        }),
      );
      for (const c of early) await c.query('COMMIT');
      for (const c of early) await c.end();
      expect(await small.serverConnections()).toBe(2);
      const warned = await start();
      expect(warned).toHaveLength(1);
      expect(warned[0]).toMatch(/^DATABASE_POOLER=transaction: a pooled server connection runs with statement_timeout = 0 ms .*RECONNECT/);
      const console = new pg.Client(Object.assign(new URL(small.url), { pathname: '/pgbouncer' }).toString());
      await console.connect();
      await console.query('RECONNECT');
      await console.end();
      expect(await start()).toEqual([]);
    } finally {
      await small.stop();
      await db.dispose();
    }
  });
});

// P148: instances starting together on a database without the role's settings each find them missing; one at
// a time (a transaction advisory lock) each reads what the one before set, and no two insert the same row.
describe("instances starting together on a migrated database without the role's settings", () => {
  it('settle the settings once, each without a warning, and start', async () => {
    const db = await openTestDatabase();
    const shared = await startPgBouncer(db.url!, { poolSize: SERVER_POOL });
    const started: Instance[] = [];
    try {
      // Start-up's step alone, several at once, each on a connection already open: the window between reading
      // the settings and setting them.
      const N = 6;
      let connected = 0;
      let allConnected!: () => void;
      const together = new Promise<void>((resolve) => (allConnected = resolve));
      const settled = await withDirectDatabase(shared.url, 1000, (pooled) =>
        Promise.all(
          Array.from({ length: N }, () =>
            withDirectDatabase(db.url!, 1000, async (direct) => {
              await sql`SELECT 1`.execute(direct);
              if (++connected === N) allConnected();
              await together;
              return settleRoleSettings({ direct, pooled, statementTimeoutMs: TIMEOUT_MS });
            }),
          ),
        ),
      );
      expect(settled.filter((s) => s.ok && s.altered)).toHaveLength(1);
      expect(settled.every((s) => s.ok)).toBe(true);
      const results = await Promise.allSettled(
        Array.from({ length: 3 }, () => startInstance('http://together.test', { pooled: shared.url, direct: db.url! })),
      );
      for (const r of results) if (r.status === 'fulfilled') started.push(r.value);
      expect(results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'started'))).toEqual(Array(3).fill('started'));
      for (const i of started) expect(i.logs).toEqual([]);
    } finally {
      for (const i of started) await i.close();
      await shared.stop();
      await db.dispose();
    }
  });
});

// P148, P150: on a database never migrated, instances starting together each migrate over DATABASE_LISTEN_URL
// (Kysely's lock), then set the role's settings one at a time (a transaction advisory lock): pg_trgm exists
// before the threshold is set, and no two insert the same row of pg_db_role_setting.
describe('instances starting together behind PgBouncer on a database never migrated', () => {
  it('all start and serve; a DATABASE_LISTEN_URL naming another database is refused before migrating it', async () => {
    const name = `pgbouncer_fresh_${process.pid}_${Date.now()}`;
    await direct.query(`CREATE DATABASE ${name}`);
    const freshUrl = Object.assign(new URL(clone.url!), { pathname: `/${name}` }).toString();
    const fresh = await startPgBouncer(freshUrl, { poolSize: SERVER_POOL });
    const started: Instance[] = [];
    const inFresh = new pg.Client(freshUrl);
    try {
      await inFresh.connect();
      const tables = async () =>
        (await inFresh.query(`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'`)).rows[0].n as number;
      // The pool reaches the test database, the direct URL this empty one: nothing is migrated or set in either.
      await expect(startInstance(undefined, { pooled: bouncer.url, direct: freshUrl })).rejects.toThrow(
        new RegExp(`^DATABASE_LISTEN_URL reaches database ${name} .* DATABASE_URL reaches ${clone.url!.split('/').pop()} `),
      );
      expect(await tables()).toBe(0);

      const results = await Promise.allSettled(
        [0, 1, 2].map(() => startInstance('http://fresh.test', { pooled: fresh.url, direct: freshUrl })),
      );
      for (const r of results) if (r.status === 'fulfilled') started.push(r.value);
      expect(results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'started'))).toEqual(['started', 'started', 'started']);
      for (const i of started) expect(i.logs).toEqual([]);
      const { rows } = await inFresh.query<{ settings: string[] }>(
        `SELECT setconfig AS settings FROM pg_db_role_setting WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      );
      expect(rows.map((r) => r.settings.sort())).toEqual([[`pg_trgm.word_similarity_threshold=0.3`, `statement_timeout=${TIMEOUT_MS}`]]);
      const tenant = await createDataTenant(started[0]!, provider, 2);
      for (const i of started) {
        const r = await new ApiClient(i.url, tenant.api.token).get('/api/v2/subject?SearchTerm=Person');
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        expect(r.body.Edges).toHaveLength(2);
      }
    } finally {
      for (const i of started) await i.close();
      await inFresh.end().catch(() => {});
      await fresh.stop();
      await direct.query(`DROP DATABASE ${name} WITH (FORCE)`);
    }
  });
});
