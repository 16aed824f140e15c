import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { type App, buildApp } from './app/app.js';
import { ConfigError, loadConfig } from './core/config.js';
import type { Logger } from 'pino';
import type { Db } from './db/tables.js';
import type { DatabaseHandle } from './db/database.js';
import { ServiceUnavailableError } from './core/errors.js';
import { sendProblem } from './http/problem.js';
import { createAppServer } from './http/app-server.js';
import { createSubjects, subjectCaches } from './domains/subject/index.js';
import { clientPrincipal, findClientByTenantKey, verifySecret } from './domains/auth/index.js';
import { SecretBox, findDataPointsUrl } from './domains/data/index.js';
import { hasTenants } from './domains/tenant/index.js';
import { applyTenantFile } from './domains/tenant-apply/index.js';
import { inTransaction } from './db/transaction.js';
import { type RunningProvider, createReferenceProvider } from './provider/reference-provider.js';
import { applyTenantFilePath, createLogger, openMigratedDatabase } from './app/runtime.js';
import { flushTracing, tracingOn, tracingWanted } from './core/tracing.js';

/** How long the shutdown waits for buffered spans to be exported. */
const TRACE_FLUSH_MS = 5_000;
const DEMO_FILE = fileURLToPath(new URL('../config/demo.tenant.json', import.meta.url));
const DEMO_SUBJECTS = fileURLToPath(new URL('../config/demo.subjects.json', import.meta.url));

interface DemoClient {
  tenantKey: string;
  clientId: string;
  clientSecret: string;
}

/** The demo's API client from the bundled file, if the demo tenant holds it with that secret still. */
async function demoClient(db: Db): Promise<DemoClient | undefined> {
  const file = JSON.parse(await readFile(DEMO_FILE, 'utf8')) as {
    tenants: { key: string; clients: { clientId: string; clientSecret: string; scopes: string[] }[] }[];
  };
  const t = file.tenants[0]!;
  const client = t.clients.find((c) => c.scopes.includes('ServiceApi'))!;
  const stored = await findClientByTenantKey(db, t.key, client.clientId);
  if (!stored || !(await verifySecret(client.clientSecret, stored.secretHash))) return undefined;
  return { tenantKey: t.key, clientId: client.clientId, clientSecret: client.clientSecret };
}

/**
 * Creates the demo organisation in one transaction (P133): the tenant file applied as `npm run tenant:apply`
 * applies it, then its subjects created in bulk, checked as the API checks them. A start stopped half-way
 * leaves no demo tenant without its subjects, and the next start creates it whole.
 */
async function createDemo(db: Db, secretsKey: string | undefined): Promise<void> {
  const file = JSON.parse(await readFile(DEMO_FILE, 'utf8')) as {
    tenants: { key: string; clients: { clientId: string; clientSecret: string; scopes: string[] }[] }[];
  };
  const t = file.tenants[0]!;
  const client = t.clients.find((c) => c.scopes.includes('ServiceApi'))!;
  const subjects = JSON.parse(await readFile(DEMO_SUBJECTS, 'utf8')) as {
    CustomFieldValues: { Key: string; Value: unknown }[];
    StructuralEntityKeys: string[];
  }[];
  await inTransaction(db, async (trx) => {
    await applyTenantFile(trx, new SecretBox(trx, secretsKey), file);
    // The demo's API client, as the file just applied stored it (every scope and permission).
    const principal = await clientPrincipal(trx, t.key, client.clientId);
    if (!principal) throw new Error(`The demo tenant has no client '${client.clientId}'.`);
    // Caches of their own: the demo is created before the app is built.
    const ctx = { db: trx, principal, subjects: subjectCaches() };
    await createSubjects(
      ctx,
      subjects.map((s) => ({
        customFieldValues: s.CustomFieldValues.map((v) => ({ key: v.Key, value: v.Value })),
        structuralEntityKeys: s.StructuralEntityKeys,
      })),
    );
  });
}

/**
 * With the demo tenant on the embedded database (outside production), the reference data provider runs
 * in this process at the address the demo's data source names, so its data points show at once (D1).
 */
async function startDemoProvider(db: Db, logger: Logger): Promise<RunningProvider | undefined> {
  const url = await findDataPointsUrl(db, 'demo', 'wearables');
  if (!url) return undefined;
  const at = new URL(url);
  if (!['127.0.0.1', 'localhost'].includes(at.hostname)) return undefined;
  try {
    // Its largest page: the demo's year of daily points is 37 pages per batch of 100 subjects (PROVIDER_MAX_PAGES: 100).
    const running = await createReferenceProvider({ pageSize: 1000 }).listen(Number(at.port || 80), at.hostname);
    logger.info({ url: running.url }, 'reference data provider started for the demo tenant');
    return running;
  } catch (e) {
    logger.warn(
      { err: (e as Error).message },
      `reference data provider not started: ${at.host} is taken (the demo's data points come from whatever listens there)`,
    );
    return undefined;
  }
}

/** Answers while the database is awaited at start-up: alive (/healthz), not ready, nothing else yet (P51). */
function startingHandler(req: IncomingMessage, res: ServerResponse): void {
  const path = (req.url ?? '/').split('?')[0];
  if (path === '/healthz') {
    res.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8' }).end(JSON.stringify({ status: 'ok' }));
    return;
  }
  const id = randomUUID();
  res.setHeader('X-Request-Id', id);
  sendProblem(res, new ServiceUnavailableError('The service is starting: it is waiting for its database.'), id);
}

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(e.message);
      process.exit(1);
    }
    throw e;
  }
  const logger = createLogger(config);
  if (tracingWanted() && !tracingOn())
    logger.warn('OTEL_* variables are set but tracing is off: start with `node --import ./dist/src/tracing.js` (npm start does)');
  // Read by V8 at every full collection, so it applies from here on (P66: off by default).
  if (config.HEAP_GROWING_PERCENT > 0) setFlagsFromString(`--heap-growing-percent=${config.HEAP_GROWING_PERCENT}`);

  // Listening before the database is reached: an orchestrator sees a live process that is not ready yet
  // (instead of a crash loop while PostgreSQL starts or fails over), then the app takes over.
  const { server, serve, upgrade } = createAppServer(startingHandler);
  // Node's default is 5 s: a client or proxy sending on a connection idle that long races the close
  // and gets ECONNRESET (seen in the bench's paced run). Shutdown closes idle connections itself.
  server.keepAliveTimeout = config.HTTP_KEEP_ALIVE_TIMEOUT_MS;
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
    server.listen(config.PORT, config.HOST);
  });

  let built: App | undefined;
  let handle: DatabaseHandle | undefined;
  let demoProvider: RunningProvider | undefined;
  let stopping = false;
  /**
   * The one way out (P53): readiness off and `Connection: close` for SHUTDOWN_DRAIN_MS (a SIGTERM
   * only; Ctrl-C in a terminal stops at once), then no new connections, in-flight requests finished
   * within SHUTDOWN_TIMEOUT_MS, background work and the database closed.
   */
  const stop = async (reason: string, code: number): Promise<never> => {
    if (stopping) return new Promise<never>(() => {});
    stopping = true;
    const drainMs = reason === 'SIGTERM' && built ? config.SHUTDOWN_DRAIN_MS : 0;
    logger.info({ reason, drainMs }, 'shutting down: draining, then finishing in-flight requests');
    built?.drain();
    if (drainMs > 0) await new Promise((r) => setTimeout(r, drainMs));
    const force = setTimeout(() => server.closeAllConnections(), config.SHUTDOWN_TIMEOUT_MS);
    force.unref();
    const closed = new Promise<void>((r) => server.close(() => r()));
    server.closeIdleConnections();
    await closed;
    try {
      await built?.close();
      await demoProvider?.close();
      await handle?.close();
      logger.info('stopped');
    } catch (e) {
      logger.error({ err: e }, 'error while stopping');
      code ||= 1;
    }
    // The last spans, the shutdown's requests among them, reach the collector (P139).
    await flushTracing(TRACE_FLUSH_MS);
    process.exit(code);
  };
  process.on('SIGTERM', () => void stop('SIGTERM', 0));
  process.on('SIGINT', () => void stop('SIGINT', 0));
  // Nothing the database or a provider does may end the process by an unhandled event: a stray rejection
  // is logged; an exception that escaped every handler leaves the state unknown, so the process stops,
  // through the same graceful path.
  process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled promise rejection'));
  process.on('uncaughtException', (err) => {
    logger.fatal({ err }, 'uncaught exception: stopping');
    void stop('uncaughtException', 1);
  });

  // Stopped while waiting for the database: `stop` exits (0), not the failed wait.
  const opened = await openMigratedDatabase(config, logger, { stopping: () => stopping }).catch((e: unknown): Promise<DatabaseHandle> => {
    if (stopping) return new Promise(() => {});
    throw e;
  });
  handle = opened;
  const db = opened.db;

  let created = false;
  if (config.TENANT_CONFIG) {
    const { tenantKeys } = await applyTenantFilePath(handle, config, config.TENANT_CONFIG);
    logger.info({ tenants: tenantKeys }, 'tenant configuration applied');
  } else if (handle.kind === 'pglite' && !(await hasTenants(db))) {
    // D1: only an empty embedded database gets the demo tenant and its subjects.
    await createDemo(db, config.SECRETS_KEY);
    created = true;
  }
  // Printed on every start while the demo exists, so credentials are never lost to a failed first start.
  const demo = handle.kind === 'pglite' && config.NODE_ENV !== 'production' ? await demoClient(db) : undefined;

  demoProvider = handle.kind === 'pglite' && config.NODE_ENV !== 'production' ? await startDemoProvider(db, logger) : undefined;
  built = await buildApp({ config, db, logger, listen: handle.listen, poolStats: handle.poolStats });
  if (stopping) return;
  serve(built.app);
  upgrade(built.upgrade);
  logger.info({ url: config.publicUrl, database: handle.kind }, 'listening');
  if (demo) printDemo(config.publicUrl, demo, created, config.DASHBOARD ?? true);
}

// Prints the access token, or stops the shell line with the token endpoint's own reason.
const TOKEN_PARSE = `node -e 'const r = JSON.parse(require("fs").readFileSync(0)); if (!r.access_token) { console.error("token request failed: " + (r.error_description || r.error)); process.exit(1) } console.log(r.access_token)'`;

function printDemo(url: string, d: DemoClient, created: boolean, dashboard: boolean) {
  const token = `curl -s ${url}/connect/token -d grant_type=client_credentials -d tenant_key=${d.tenantKey} -d client_id=${d.clientId} -d client_secret=${d.clientSecret} -d scope=ServiceApi`;
  console.log(
    [
      '',
      created ? 'Demo tenant created (embedded database, first start).' : 'Demo tenant (embedded database).',
      `  Base URL:      ${url}`,
      `  Tenant key:    ${d.tenantKey}`,
      `  Client id:     ${d.clientId}`,
      `  Client secret: ${d.clientSecret}`,
      `  GraphiQL:      ${url}/graphql    OpenAPI: ${url}/openapi.json`,
      ...(dashboard
        ? [`  Dashboard:     ${url}/dashboard (live when npm run provider:notify -- --subject E-1001 --bump posts a change)`]
        : []),
      '',
      'Get a token and list subjects:',
      `  TOKEN=$(${token} | ${TOKEN_PARSE}) && curl -s -H "Authorization: Bearer $TOKEN" ${url}/api/v2/subject`,
      'Then, with the same token, the structural entities:',
      `  curl -s -H "Authorization: Bearer $TOKEN" ${url}/api/v1/structuralEntity`,
      'And data points of the reference provider through GraphQL:',
      `  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' ${url}/graphql -d '{"query":"{ subjects(first: 3) { edges { node { externalId dataPoints(extractKey: \\"steps-week\\", first: 7) { edges { node { id items { key value } } } } } } } }"}'`,
      '',
    ].join('\n'),
  );
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
