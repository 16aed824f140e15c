import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { type KyselyPlugin, sql } from 'kysely';
import { type DestinationStream, type Logger, pino } from 'pino';
import { expect, inject } from 'vitest';
import { type App, buildApp } from '../src/app/app.js';
import { openMigratedDatabase } from '../src/app/runtime.js';
import { type Config, loadConfig } from '../src/core/config.js';
import { type DatabaseHandle, openDatabase, pgliteStartParams, wrapPglite } from '../src/db/database.js';
import type { TokenService } from '../src/domains/auth/index.js';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { createAppServer } from '../src/http/app-server.js';

export interface TestApp {
  url: string;
  config: Config;
  handle: DatabaseHandle & { url?: string };
  tokens: TokenService;
  /** Starts the shutdown drain (App.drain): /readyz 503, `Connection: close`, subscriptions ended. */
  drain?(): void;
  close(): Promise<void>;
}

/** Runs `fn` over `items`, `n` at a time; the results in the items' order. */
export async function pool<T, R>(items: readonly T[], n: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}

/** The error `run` fails with (the test fails if it succeeds). */
export async function failure(run: () => Promise<unknown>): Promise<unknown> {
  return run().then(
    () => expect.fail('expected a failure'),
    (e: unknown) => e,
  );
}

/** A fresh database for this test file: a copy of the migrated template (PGlite dir or PostgreSQL TEMPLATE). */
export async function openTestDatabase(
  opts: { preparedStatements?: boolean } = {},
): Promise<DatabaseHandle & { url?: string; dispose(): Promise<void> }> {
  const pgTemplate = inject('pgTemplate');
  if (pgTemplate) {
    const base = process.env['DATABASE_URL']!;
    const name = `ssdi_t_${randomBytes(6).toString('hex')}`;
    const admin = await openDatabase({ databaseUrl: base, dataDir: '', onPoolError: () => {} });
    await sql`CREATE DATABASE ${sql.id(name)} TEMPLATE ${sql.id(pgTemplate)}`.execute(admin.db);
    const u = new URL(base);
    u.pathname = `/${name}`;
    const handle = await openDatabase({ databaseUrl: u.toString(), dataDir: '', poolSize: 10, onPoolError: () => {}, ...opts });
    return {
      ...handle,
      url: u.toString(),
      dispose: async () => {
        await handle.close();
        await sql`DROP DATABASE IF EXISTS ${sql.id(name)} WITH (FORCE)`.execute(admin.db);
        await admin.close();
      },
    };
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-test-'));
  await cp(inject('pgliteTemplate'), dir, { recursive: true });
  // As the service opens it (P158): the tests run with its bounded buffer pool.
  const handle = await wrapPglite(
    await PGlite.create(dir, { extensions: { pg_trgm }, startParams: pgliteStartParams(PGlite.defaultStartParams) }),
  );
  return {
    ...handle,
    dispose: async () => {
      await handle.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * An HTTP server on an ephemeral loopback port, bound before the app is built so PUBLIC_URL (the token issuer)
 * is the address clients really use. `serve` puts the app on it: the TestApp's close() ends the server, the
 * app, then `closeDb`; `release` frees the port when no app comes.
 */
async function listening() {
  const { server, serve, upgrade } = createAppServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const release = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return {
    url,
    release,
    serve: (built: App, config: Config, handle: TestApp['handle'], closeDb: () => Promise<void>): TestApp => {
      serve(built.app);
      upgrade(built.upgrade);
      return {
        url,
        config,
        handle,
        tokens: built.tokens,
        drain: built.drain,
        close: async () => {
          server.closeAllConnections();
          await release();
          await built.close();
          await closeDb();
        },
      };
    },
  };
}

/**
 * Starts the real HTTP app on an ephemeral loopback port over a fresh database.
 * `logStream` receives the app's log lines (at LOG_LEVEL, silent by default) instead of stdout.
 */
export async function startApp(
  env: Record<string, string> = {},
  opts: { plugins?: KyselyPlugin[]; logStream?: DestinationStream } = {},
): Promise<TestApp> {
  const { url, serve } = await listening();
  const config = loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'silent', PUBLIC_URL: url, DATA_DIR: '/nonexistent', ...env });
  const handle = await openTestDatabase({ preparedStatements: config.DATABASE_PREPARED_STATEMENTS });
  const appDb = (opts.plugins ?? []).reduce((db, p) => db.withPlugin(p), handle.db);
  const logger = opts.logStream ? pino({ level: config.LOG_LEVEL }, opts.logStream) : pino({ level: config.LOG_LEVEL });
  const built = await buildApp({ config, db: appDb, logger, listen: handle.listen, poolStats: handle.poolStats });
  return serve(built, config, handle, () => handle.dispose());
}

/**
 * A second service instance on the same database (D10 scale-out): on PostgreSQL with its own pool and
 * listener connection, on PGlite (one process only) sharing the embedded database.
 */
export async function startPeer(first: TestApp, env: Record<string, string> = {}): Promise<TestApp> {
  const { serve } = await listening();
  // Instances behind one public URL: tokens of one are valid on the other.
  const asEnv = Object.fromEntries(
    Object.entries(first.config)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [k, String(v)]),
  );
  const config = loadConfig({ ...asEnv, ...env });
  const handle = first.handle.url
    ? await openDatabase({
        databaseUrl: first.handle.url,
        dataDir: '',
        poolSize: 10,
        statementTimeoutMs: config.DATABASE_STATEMENT_TIMEOUT_MS,
        preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
        onPoolError: () => {},
      })
    : first.handle;
  const built = await buildApp({
    config,
    db: handle.db,
    logger: pino({ level: config.LOG_LEVEL }),
    listen: handle.listen,
    poolStats: handle.poolStats,
  });
  return serve(built, config, handle, async () => {
    if (handle !== first.handle) await handle.close();
  });
}

/**
 * An instance started as server.ts starts one: openMigratedDatabase over env's DATABASE_URL & co. PUBLIC_URL
 * is `publicUrl` (a peer's, so tokens are shared) or the instance's own address; `logger` gets the app's and
 * the database's lines (at LOG_LEVEL, silent by default). The port is released if the database fails to open.
 */
export async function startServerInstance(
  env: Record<string, string>,
  opts: { logger?: Logger; publicUrl?: string } = {},
): Promise<TestApp> {
  const { url, release, serve } = await listening();
  const config = loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'silent', PUBLIC_URL: opts.publicUrl ?? url, DATA_DIR: '/nonexistent', ...env });
  const logger = opts.logger ?? pino({ level: config.LOG_LEVEL });
  const handle = await openMigratedDatabase(config, logger).catch(async (e: unknown) => {
    await release();
    throw e;
  });
  const built = await buildApp({ config, db: handle.db, logger, listen: handle.listen, poolStats: handle.poolStats });
  return serve(built, config, handle, () => handle.close());
}

export const FULL_CLIENT = {
  clientId: 'full',
  clientSecret: 'full-client-secret',
  scopes: ['ServiceApi', 'ServiceDataProviderApi'],
  permissions: ['*'],
};

/** A valid tenant file section with a unique key; `overrides` replace top-level properties. */
export function tenantConfig(overrides: Record<string, unknown> = {}) {
  return {
    key: `t-${randomBytes(5).toString('hex')}`,
    name: 'Test tenant',
    clients: [FULL_CLIENT],
    subjectFields: [
      { key: 'employeeNumber', name: 'Employee number', dataType: 'String', type: 'Text', required: true },
      { key: 'fullName', name: 'Full name', dataType: 'String', type: 'Text', required: true },
      { key: 'email', name: 'E-mail', dataType: 'String' },
      { key: 'grade', name: 'Grade', dataType: 'Integer' },
      { key: 'skills', name: 'Skills', dataType: 'String', isArray: true },
    ],
    matchingFieldKeys: ['employeeNumber'],
    externalIdFieldKey: 'employeeNumber',
    structureTypes: [
      { key: 'company', name: 'Company', subjectAssignable: false, customFields: [] },
      {
        key: 'department',
        name: 'Department',
        subjectAssignable: true,
        customFields: [
          { key: 'costCenter', name: 'Cost center', dataType: 'String', type: 'Text' },
          { key: 'headcount', name: 'Headcount', dataType: 'Integer' },
          { key: 'opened', name: 'Opened', dataType: 'Date' },
          { key: 'budget', name: 'Budget', dataType: 'Decimal' },
          { key: 'active', name: 'Active', dataType: 'Boolean' },
          { key: 'manager', name: 'Manager', dataType: 'UserIdentifier' },
        ],
      },
    ],
    structuralEntities: [],
    users: [{ id: 'u-1', displayName: 'Ann Smith', email: 'ann@example.org', active: true }],
    ...overrides,
  };
}

export interface TestTenant {
  key: string;
  /** A token from the real token endpoint for a client of this tenant (default: the full client). */
  token(opts?: { clientId?: string; clientSecret?: string; scope?: string }): Promise<string>;
  /** An API client holding such a token. */
  client(opts?: { clientId?: string; clientSecret?: string; scope?: string }): Promise<ApiClient>;
}

/** Applies a tenant file with one tenant (see tenantConfig) and returns helpers for it. */
export async function createTenant(app: TestApp, overrides: Record<string, unknown> = {}): Promise<TestTenant> {
  const t = tenantConfig(overrides);
  await applyTenantFile(app.handle.db, new SecretBox(app.handle.db, undefined), { tenants: [t] }, { listen: app.handle.listen });
  const token = async (opts: { clientId?: string; clientSecret?: string; scope?: string } = {}) => {
    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: t.key,
      client_id: opts.clientId ?? FULL_CLIENT.clientId,
      client_secret: opts.clientSecret ?? FULL_CLIENT.clientSecret,
      ...(opts.scope !== undefined ? { scope: opts.scope } : { scope: 'ServiceApi' }),
    });
    const res = await fetch(`${app.url}/connect/token`, { method: 'POST', body: form });
    const body = (await res.json()) as { access_token?: string };
    if (res.status !== 200 || !body.access_token) throw new Error(`token request failed: ${res.status} ${JSON.stringify(body)}`);
    return body.access_token;
  };
  return { key: t.key, token, client: async (opts) => new ApiClient(app.url, await token(opts)) };
}

export interface ApiResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

/** Minimal HTTP client for tests: JSON in, JSON (or text) out. */
export class ApiClient {
  constructor(
    readonly url: string,
    readonly token: string | undefined,
  ) {}

  async request<T = any>(
    method: string,
    path: string,
    opts: { body?: unknown; raw?: string | Uint8Array; headers?: Record<string, string> } = {},
  ): Promise<ApiResponse<T>> {
    const headers: Record<string, string> = { ...(this.token ? { authorization: `Bearer ${this.token}` } : {}) };
    let body: string | Uint8Array | undefined;
    if (opts.raw !== undefined) body = opts.raw;
    else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
    }
    const res = await fetch(`${this.url}${path}`, { method, headers: { ...headers, ...opts.headers }, body: body as BodyInit | undefined });
    const text = await res.text();
    let parsed: unknown = text;
    if (/json/.test(res.headers.get('content-type') ?? '') && text !== '') parsed = JSON.parse(text);
    return { status: res.status, headers: res.headers, body: parsed as T };
  }

  get<T = any>(path: string, headers?: Record<string, string>) {
    return this.request<T>('GET', path, headers ? { headers } : {});
  }
  put<T = any>(path: string, body?: unknown) {
    return this.request<T>('PUT', path, { body });
  }
  post<T = any>(path: string, body?: unknown) {
    return this.request<T>('POST', path, { body });
  }
  patch<T = any>(path: string, body?: unknown) {
    return this.request<T>('PATCH', path, { body });
  }
  delete<T = any>(path: string) {
    return this.request<T>('DELETE', path);
  }

  /** POST /graphql; returns the HTTP status and the GraphQL response body. */
  gql<T = any>(query: string, variables?: Record<string, unknown>) {
    // Errors typed loosely: tests index into them after asserting they exist.
    return this.request<{ data?: T; errors?: any; extensions?: Record<string, any> }>('POST', '/graphql', {
      body: { query, variables },
    });
  }
}

/**
 * A Kysely plugin counting the statements the app executes (for "a fixed number of queries" tests).
 * transformResult runs once per executed statement (transformQuery also runs for subquery nodes).
 */
export class StatementCounter implements KyselyPlugin {
  count = 0;
  /** Statements Kysely compiled (a statement compiled once and run again is not counted again). */
  compiled = 0;
  transformQuery(args: Parameters<KyselyPlugin['transformQuery']>[0]) {
    this.compiled++;
    return args.node;
  }
  async transformResult(args: Parameters<KyselyPlugin['transformResult']>[0]) {
    this.count++;
    return args.result;
  }
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  traceId: string;
  errors?: Record<string, string[]>;
}

/** D5: an RFC 9457 problem+json with this status; traceId is the request id echoed in X-Request-Id. */
export function expectProblem(res: ApiResponse, status: number): ProblemBody {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json\b/);
  const body = res.body as ProblemBody;
  expect(body).toMatchObject({ type: expect.any(String), title: expect.any(String), status, detail: expect.any(String) });
  expect(body.type).not.toBe('');
  expect(body.title).not.toBe('');
  expect(body.detail).not.toBe('');
  expect(res.headers.get('x-request-id')).toBeTruthy();
  expect(body.traceId).toBe(res.headers.get('x-request-id'));
  return body;
}

/** D5: a 400 problem+json whose `errors` names each location exactly as the contract spells it. */
export function expectValidation(res: ApiResponse, ...locations: string[]): ProblemBody {
  const body = expectProblem(res, 400);
  for (const loc of locations) {
    expect(Object.keys(body.errors ?? {}), JSON.stringify(body)).toContain(loc);
    expect(body.errors![loc]!.length).toBeGreaterThan(0);
  }
  return body;
}

/** A loopback port free now (for a child process to listen on). */
export async function freePort(): Promise<number> {
  const srv = createNetServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}
