import { readFile } from 'node:fs/promises';
import { pino, type Logger } from 'pino';
import type { Config } from './config.js';
import { type DatabaseHandle, migrateToLatest, openDatabase } from './db.js';
import { SecretBox } from './domains/data/secret-box.js';
import { applyTenantFile } from './domains/tenant/tenant.service.js';

/** The process logger: JSON lines (pino). */
export function createLogger(config: Pick<Config, 'LOG_LEVEL'>): Logger {
  return pino({ level: config.LOG_LEVEL, redact: ['req.headers.authorization', 'req.headers.cookie'] });
}

/** Opens the configured database and brings it to the latest migration. */
export async function openMigratedDatabase(config: Config, logger?: Logger): Promise<DatabaseHandle> {
  const handle = await openDatabase({
    databaseUrl: config.DATABASE_URL,
    dataDir: config.DATA_DIR,
    poolSize: config.DATABASE_POOL_SIZE,
    statementTimeoutMs: config.DATABASE_STATEMENT_TIMEOUT_MS,
    onPoolError: (err) => logger?.warn({ err: err.message }, 'idle database connection failed; replaced'),
  });
  try {
    await migrateToLatest(handle.db);
  } catch (e) {
    await handle.close();
    throw e;
  }
  return handle;
}

/** Reads and applies a tenant configuration file (D3). */
export async function applyTenantFilePath(handle: DatabaseHandle, config: Config, path: string) {
  let doc: unknown;
  try {
    doc = JSON.parse(await readFile(path, 'utf8'));
  } catch (e) {
    throw new Error(`Cannot read tenant configuration ${path}: ${(e as Error).message}`);
  }
  return applyTenantFile(handle.db, new SecretBox(handle.db, config.SECRETS_KEY), doc);
}
