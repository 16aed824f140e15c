import { readFile } from 'node:fs/promises';
import { pino, type Logger, stdSerializers } from 'pino';
import type { Config } from '../core/config.js';
import { traceLogFields, tracingOn } from '../core/tracing.js';
import { type DatabaseHandle, openDatabase } from '../db/database.js';
import { migrateToLatest } from '../db/migrate.js';
import { checkSameDatabase, settleRoleSettings, withDirectDatabase } from '../db/pooler.js';
import { isDatabaseUnavailable } from '../db/faults.js';
import { SecretBox } from '../domains/data/index.js';
import { applyTenantFile } from '../domains/tenant-apply/index.js';
import { recordReadFloor } from '../domains/tenant/index.js';
import { type LogOutput, logFormat, prettyDestination } from './pretty-logs.js';

// What a driver error carries of a statement's values: PGlite's parameters and query options (`params`,
// `queryOptions`), and PostgreSQL's `detail` (a unique violation's key, a check violation's whole row).
const VALUE_FIELDS = ['params', 'queryOptions', 'detail'];

/**
 * pino's error serializer without the fields that hold values (an e-mail address, a token): for the
 * process logger and the access log. An error already serialized (pino-http serializes first) is scrubbed
 * as it is; the errors nested in it too.
 */
export function errSerializer(err: unknown): unknown {
  const out = err instanceof Error ? stdSerializers.err(err) : err;
  scrub(out);
  return out;
}

function scrub(o: unknown): void {
  if (typeof o !== 'object' || o === null) return;
  for (const key of VALUE_FIELDS) delete (o as Record<string, unknown>)[key];
  for (const v of Object.values(o)) if (typeof v === 'object' && v !== null && ('stack' in v || Array.isArray(v))) scrub(v);
}

/** The process logger: JSON lines (pino) to `out`, or pretty lines for a person (P145, `logFormat`). */
export function createLogger(config: Pick<Config, 'LOG_LEVEL' | 'LOG_FORMAT' | 'NODE_ENV'>, out: LogOutput = process.stdout): Logger {
  const options = {
    level: config.LOG_LEVEL,
    redact: ['req.headers.authorization', 'req.headers.cookie'],
    serializers: { err: errSerializer },
    // Traced (P140): every line logged within a span carries its trace and span ids.
    ...(tracingOn() ? { mixin: traceLogFields } : {}),
  };
  if (logFormat(config, out) === 'pretty') return pino(options, prettyDestination(out));
  // Standard output through pino's own destination (sonic-boom), which writes it faster than process.stdout.
  return out === process.stdout ? pino(options) : pino(options, out);
}

/**
 * Opens the configured database and brings it to the latest migration. A PostgreSQL server that is not
 * reachable yet (starting, failing over) is waited for (P51): attempts with backoff, one log line
 * each, until STARTUP_TIMEOUT_MS; a failing migration is not retried.
 */
export async function openMigratedDatabase(
  config: Config,
  logger?: Logger,
  opts: { stopping?: () => boolean } = {},
): Promise<DatabaseHandle> {
  const handle = await openDatabase({
    databaseUrl: config.DATABASE_URL,
    dataDir: config.DATA_DIR,
    poolSize: config.DATABASE_POOL_SIZE,
    statementTimeoutMs: config.DATABASE_STATEMENT_TIMEOUT_MS,
    connectTimeoutMs: config.DATABASE_CONNECT_TIMEOUT_MS,
    preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
    pooler: config.DATABASE_POOLER,
    listenUrl: config.DATABASE_LISTEN_URL,
    onPoolError: (err) => logger?.warn({ err: err.message }, 'database connection failed; the pool replaces it'),
    onWarning: (message) => logger?.warn(message),
    onTemplateLoaded: (file) => logger?.info({ template: file }, 'embedded database started from its template'),
  });
  const deadline = Date.now() + config.STARTUP_TIMEOUT_MS;
  for (let attempt = 1, delay = 250; ; attempt++, delay = Math.min(delay * 2, 5_000)) {
    try {
      if (config.DATABASE_POOLER === 'transaction') {
        await withDirectDatabase(config.DATABASE_LISTEN_URL!, config.DATABASE_CONNECT_TIMEOUT_MS, async (direct) => {
          const connectTimeoutMs = config.DATABASE_CONNECT_TIMEOUT_MS;
          await checkSameDatabase({ direct, pooledUrl: config.DATABASE_URL!, connectTimeoutMs });
          // Kysely's migrator holds a session advisory lock across its statements: not through the pooler (P150).
          await migrateToLatest(direct);
          // Before the pool's first statement: PgBouncer's server connections open with the role's settings (P148).
          const settled = await settleRoleSettings({ direct, pooled: handle.db, statementTimeoutMs: config.DATABASE_STATEMENT_TIMEOUT_MS });
          if (!settled.ok) logger?.warn(settled.warning);
          else if (settled.altered)
            logger?.info('session settings set as the role defaults in this database (DATABASE_POOLER=transaction)');
        });
      } else await migrateToLatest(handle.db);
      if (attempt > 1) logger?.info({ attempt }, 'database reachable');
      return handle;
    } catch (e) {
      const waitable = handle.kind === 'postgres' && isDatabaseUnavailable((e as Error).cause);
      const wait = Math.min(delay, deadline - Date.now());
      if (!waitable || wait <= 0 || opts.stopping?.()) {
        await handle.close().catch(() => {});
        if (!waitable) throw e;
        throw new Error(
          `The database was not reachable within STARTUP_TIMEOUT_MS (${config.STARTUP_TIMEOUT_MS} ms): ${(e as Error).message}`,
          { cause: e },
        );
      }
      logger?.warn({ attempt, retryInMs: wait, err: errorText((e as Error).cause) }, 'database not reachable yet; waiting for it');
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

/** The innermost cause's message, or its code when the message is empty (Node's AggregateError of ECONNREFUSED). */
function errorText(e: unknown): string {
  let err = e as { message?: string; code?: string; cause?: unknown };
  while (err?.cause) err = err.cause as typeof err;
  return err?.message || err?.code || String(err);
}

/** Reads and applies a tenant configuration file (D3). */
export async function applyTenantFilePath(handle: DatabaseHandle, config: Config, path: string) {
  let doc: unknown;
  try {
    doc = JSON.parse(await readFile(path, 'utf8'));
  } catch (e) {
    throw new Error(`Cannot read tenant configuration ${path}: ${(e as Error).message}`, { cause: e });
  }
  // Running instances forget the changed principals before this returns (P8).
  const applied = await applyTenantFile(handle.db, new SecretBox(handle.db, config.SECRETS_KEY), doc, { listen: handle.listen });
  // Read replicas serve no request of these tenants before they have replayed the file (P153).
  if (handle.kind === 'postgres') await recordReadFloor(handle.db, { keys: applied.tenantKeys });
  return applied;
}
