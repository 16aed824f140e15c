import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type { TestProject } from 'vitest/node';
import { migrateToLatest } from '../src/db/migrate.js';
import { openDatabase } from '../src/db/database.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** PGlite: a migrated data directory that each test file copies. */
    pgliteTemplate: string;
    /** PostgreSQL: a migrated database each test file clones with CREATE DATABASE ... TEMPLATE. */
    pgTemplate: string;
  }
}

/**
 * Builds what `npm start` and the operational scripts run (dist/, incremental), so the tests that start
 * them run the current code; then migrates once: test files clone the result instead of migrating
 * (PGlite creation costs seconds).
 */
export default async function setup(project: TestProject) {
  execFileSync('npm', ['run', '--silent', 'build'], { stdio: 'inherit' });
  const url = process.env['DATABASE_URL'];
  if (url) {
    const name = `ssdi_tpl_${randomBytes(4).toString('hex')}`;
    const admin = await openDatabase({ databaseUrl: url, dataDir: '' });
    await sql`CREATE DATABASE ${sql.id(name)}`.execute(admin.db);
    const u = new URL(url);
    u.pathname = `/${name}`;
    const tpl = await openDatabase({ databaseUrl: u.toString(), dataDir: '' });
    await migrateToLatest(tpl.db);
    await tpl.close();
    project.provide('pgTemplate', name);
    project.provide('pgliteTemplate', '');
    return async () => {
      const dbs = await sql<{
        datname: string;
      }>`SELECT datname FROM pg_database WHERE datname LIKE 'ssdi_t_%' OR datname = ${name}`.execute(admin.db);
      for (const { datname } of dbs.rows) await sql`DROP DATABASE IF EXISTS ${sql.id(datname)} WITH (FORCE)`.execute(admin.db);
      await admin.close();
    };
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-tpl-'));
  const handle = await openDatabase({ dataDir: dir });
  await migrateToLatest(handle.db);
  await handle.close();
  project.provide('pgliteTemplate', dir);
  project.provide('pgTemplate', '');
  return () => rm(dir, { recursive: true, force: true });
}
