import type { AddressInfo } from 'node:net';
import { stripVTControlCharacters } from 'node:util';
import { createClient } from 'graphql-ws';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { buildApp } from '../src/app/app.js';
import { logFormat } from '../src/app/pretty-logs.js';
import { createLogger } from '../src/app/runtime.js';
import { loadConfig } from '../src/core/config.js';
import { createAppServer } from '../src/http/app-server.js';
import { eventually } from './fake-provider.js';
import { type ApiClient, type TestApp, type TestTenant, createTenant, openTestDatabase } from './helpers.js';

// P145: the process logs JSON lines, except for a person at a terminal outside production (or LOG_FORMAT=pretty):
// one short pino-pretty line per event, a request as `GET /path 200 12ms` (without who called, which other
// lines keep), a logged mail as its recipient, subject and link.

/** A stream taking the logger's output; `isTTY` as standard output on a terminal has it. */
function sink(isTTY?: boolean) {
  const lines: string[] = [];
  return { lines, isTTY, write: (text: string) => void lines.push(...stripVTControlCharacters(text).split('\n').filter(Boolean)) };
}

const isJson = (line: string) => {
  try {
    JSON.parse(line);
    return true;
  } catch {
    return false;
  }
};

describe('the log format (P145)', () => {
  it('is pretty on a terminal outside production and JSON elsewhere; LOG_FORMAT decides when set', () => {
    const format = (env: Record<string, string>, isTTY: boolean) => logFormat(loadConfig(env), { isTTY });
    expect(format({}, true)).toBe('pretty');
    expect(format({ NODE_ENV: 'test' }, true)).toBe('pretty');
    expect(format({}, false)).toBe('json');
    expect(format({ NODE_ENV: 'production' }, true)).toBe('json');
    expect(format({ LOG_FORMAT: 'json' }, true)).toBe('json');
    expect(format({ LOG_FORMAT: 'pretty' }, false)).toBe('pretty');
    expect(format({ LOG_FORMAT: 'pretty', NODE_ENV: 'production' }, false)).toBe('pretty');
    expect(() => loadConfig({ LOG_FORMAT: 'yaml' })).toThrow(/LOG_FORMAT/);
  });

  it('writes JSON lines by default: output that is not a terminal, or production', () => {
    for (const [env, out] of [
      [{}, sink()],
      [{ NODE_ENV: 'production' }, sink(true)],
    ] as const) {
      const logger = createLogger(loadConfig(env), out);
      logger.info({ attempt: 2 }, 'database reachable');
      expect(out.lines).toHaveLength(1);
      expect(JSON.parse(out.lines[0]!)).toMatchObject({ level: 30, msg: 'database reachable', attempt: 2 });
    }
  });

  it('writes one pretty line per event on a terminal, its fields on the same line', () => {
    const out = sink(true);
    const logger = createLogger(loadConfig({}), out);
    logger.info({ attempt: 2 }, 'database reachable');
    logger.warn('OTEL_* variables are set but tracing is off');
    expect(out.lines).toHaveLength(2);
    expect(out.lines.some(isJson)).toBe(false);
    expect(out.lines[0]).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: database reachable \{"attempt":2\}$/);
    expect(out.lines[1]).toMatch(/^\[[\d:.]+\] WARN: OTEL_\* variables are set but tracing is off$/);
  });

  it("leaves who called (tenant, client) out of a finished request's line only", () => {
    const out = sink(true);
    const logger = createLogger(loadConfig({}), out);
    const req = { id: 'r-1', method: 'GET', path: '/api/v1/subject' };
    // pino-http's finished line, and a line logged during the request, as src/app/operations.ts has them.
    logger.info({ req, res: { statusCode: 200 }, responseTime: 3.4, tenant: 't-1', client: 'full' }, 'request completed');
    logger.child({ req }).warn({ tenant: 't-1', client: 'full' }, 'provider slow');
    logger.info({ tenant: 't-1', client: 'full', code: 1000 }, 'graphql-ws connection closed');
    expect(out.lines[0]).toMatch(/^\[[\d:.]+\] INFO: GET \/api\/v1\/subject 200 3ms$/);
    expect(out.lines[1]).toMatch(/^\[[\d:.]+\] WARN: provider slow \(GET \/api\/v1\/subject\) \{"tenant":"t-1","client":"full"\}$/);
    expect(out.lines[2]).toMatch(/^\[[\d:.]+\] INFO: graphql-ws connection closed \{"tenant":"t-1","client":"full","code":1000\}$/);
  });
});

describe('pretty logs of the running service (P145)', () => {
  const out = sink();
  let app: TestApp;
  let tenant: TestTenant;
  let api: ApiClient;

  beforeAll(async () => {
    const db = await openTestDatabase();
    const { server, serve, upgrade } = createAppServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    // SMTP_URL unset: invitation mails are logged, not sent.
    const config = loadConfig({ LOG_LEVEL: 'info', LOG_FORMAT: 'pretty', PUBLIC_URL: url, DATA_DIR: '/nonexistent', MAIL_POLL_MS: '50' });
    const built = await buildApp({ config, db: db.db, logger: createLogger(config, out), listen: db.listen });
    serve(built.app);
    upgrade(built.upgrade);
    app = {
      url,
      config,
      handle: db,
      tokens: built.tokens,
      close: async () => {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await built.close();
        await db.dispose();
      },
    };
    tenant = await createTenant(app, {
      portal: {
        selfAccessEnabled: true,
        thirdPartyAccessEnabled: true,
        emailFieldKey: 'email',
        displayNameFieldKey: 'fullName',
        invitationFieldKeys: ['email'],
        invitationText: 'Hello {displayName},\n\nsee {invitedTo} at https://portal.example.test/sign-in?tenant=x.\n\nRegards',
      },
    });
    api = await tenant.client();
  });
  afterAll(() => app?.close());

  it('logs a request as one line: method, path, status and duration, no request or response object', async () => {
    expect((await api.get('/api/v1/structuralEntity?First=1')).status).toBe(200);
    expect((await api.get('/api/v2/subject/not-a-subject')).status).toBe(404);
    await eventually(() => out.lines.some((l) => l.includes('GET /api/v2/subject/not-a-subject')), 5_000);
    const requests = out.lines.filter((l) => / (GET|POST) \//.test(l));
    expect(requests.find((l) => l.includes('/api/v1/structuralEntity'))).toMatch(
      /^\[[\d:.]+\] INFO: GET \/api\/v1\/structuralEntity 200 \d+ms$/,
    );
    expect(requests.find((l) => l.includes('not-a-subject'))).toMatch(
      /^\[[\d:.]+\] INFO: GET \/api\/v2\/subject\/not-a-subject 404 \d+ms$/,
    );
    // The token request too; never its query string, a token or a header.
    expect(requests.find((l) => l.includes('/connect/token'))).toMatch(/INFO: POST \/connect\/token 200 \d+ms$/);
    expect(out.lines.some(isJson)).toBe(false);
    expect(out.lines.join('\n')).not.toMatch(/First=1|"req"|"res"|statusCode|authorization|request completed/i);
  });

  it('names the tenant and client on other lines than a finished request: a graphql-ws connection closed', async () => {
    expect((await api.get('/api/v1/structuralEntity?First=1')).status).toBe(200);
    const ws = createClient({
      url: `${app.url.replace(/^http/, 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: `Bearer ${await tenant.token()}` },
      lazy: false,
      retryAttempts: 0,
    });
    await new Promise<unknown>((resolve, reject) => {
      ws.on('connected', resolve);
      ws.on('error', reject);
    });
    await ws.dispose();
    await eventually(() => out.lines.some((l) => l.includes('graphql-ws connection closed')), 5_000);
    // A person at the terminal sees who it was (P145).
    expect(out.lines.find((l) => l.includes('graphql-ws connection closed'))).toMatch(
      new RegExp(`^\\[[\\d:.]+\\] INFO: graphql-ws connection closed \\{"tenant":"${tenant.key}","client":"full","code":1000,`),
    );
    // The same tenant's finished requests do not say it.
    const requests = out.lines.filter((l) => l.includes('GET /api/v1/structuralEntity 200'));
    expect(requests.length).toBeGreaterThan(0);
    for (const l of requests) expect(l).not.toMatch(new RegExp(`${tenant.key}|"client"`));
  });

  it('summarises a logged invitation mail: recipient, subject and link on one line', async () => {
    const created = await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'E-1' } } },
        { Key: 'fullName', Value: { String: { Value: 'Ann Pretty' } } },
        { Key: 'email', Value: { String: { Value: 'ann@care.example' } } },
      ],
    });
    expect([200, 201]).toContain(created.status);
    expect((await api.post(`/api/v1/subject/${created.body.internalId}/invite`)).status).toBeLessThan(300);
    await eventually(() => out.lines.some((l) => l.includes('invitation mail (SMTP_URL unset')), 10_000);
    const mail = out.lines.find((l) => l.includes('invitation mail (SMTP_URL unset'));
    expect(mail).toMatch(
      /^\[[\d:.]+\] INFO: invitation mail \(SMTP_URL unset: logged, not sent\): to ann@care\.example, "Your invitation to the .+ portal", https:\/\/portal\.example\.test\/sign-in\?tenant=x$/,
    );
    // Not the mail's text, in that line or any other.
    expect(out.lines.join('\n')).not.toMatch(/Hello Ann|Regards/);
  });
});

describe('a logged database error', () => {
  it("carries no statement's values: PGlite's params and query options, PostgreSQL's detail", async () => {
    const db = await openTestDatabase();
    try {
      await sql`CREATE TABLE log_probe (email text PRIMARY KEY)`.execute(db.db);
      const email = 'ann.smith@example.org';
      await sql`INSERT INTO log_probe VALUES (${email})`.execute(db.db);
      const err = await sql`INSERT INTO log_probe VALUES (${email})`.execute(db.db).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: '23505' });
      const out = sink();
      createLogger(loadConfig({ LOG_FORMAT: 'json' }), out).error({ err }, 'statement failed');
      expect(out.lines).toHaveLength(1);
      const line = JSON.parse(out.lines[0]!) as { err: Record<string, unknown> };
      // What failed stays: its class, message, SQLSTATE and constraint.
      expect(line.err).toMatchObject({ message: expect.stringContaining('duplicate key'), code: '23505', constraint: 'log_probe_pkey' });
      expect(line.err).not.toHaveProperty('params');
      expect(line.err).not.toHaveProperty('queryOptions');
      expect(line.err).not.toHaveProperty('detail');
      expect(out.lines[0]).not.toContain(email);
    } finally {
      await db.dispose();
    }
  });
});
