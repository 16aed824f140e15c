import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrations } from '../../db/migrations.js';

/**
 * An embedded database initialised and migrated, made once by `npm run build` (dist/pglite/, by
 * src/cli/pglite-template.ts): a new DATA_DIR starts from it instead of running initdb and every migration,
 * most of a first `npm start` (P133). Named by the installed PGlite's version and a hash of the migrations'
 * code, so no other PGlite or schema ever opens it; absent (run from src/, not built yet), a new DATA_DIR
 * is initialised and migrated at start as before.
 */
export async function pgliteTemplatePath(): Promise<string> {
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  const { version } = JSON.parse(await fs.readFile(path.join(path.dirname(entry), '..', 'package.json'), 'utf8')) as { version: string };
  const schema = createHash('sha256');
  for (const [name, m] of Object.entries(migrations)) schema.update(`${name}\n${String(m.up)}\n`);
  return fileURLToPath(new URL(`../../pglite/${version}-${schema.digest('hex').slice(0, 16)}.tar.gz`, import.meta.url));
}

/** The template for a data directory PGlite has not initialised yet, if one was built. */
export async function pgliteTemplateFor(dataDir: string): Promise<Blob | undefined> {
  if (await exists(path.join(dataDir, 'PG_VERSION'))) return undefined;
  const file = await pgliteTemplatePath();
  return (await exists(file)) ? new Blob([await fs.readFile(file)]) : undefined;
}

export const exists = (file: string) =>
  fs.access(file).then(
    () => true,
    () => false,
  );
