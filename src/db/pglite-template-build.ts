import { promises as fs } from 'node:fs';
import path from 'node:path';
import { wrapPglite } from './database.js';
import { migrateToLatest } from './migrate.js';
import { PGLITE_TEMPLATES, exists, pgliteTemplatePath } from './pglite-template.js';

// Apart from pglite-template.ts, which database.ts opens DATA_DIR with: this one needs database.ts.
/** Builds the template in `dir` unless it is there already. Written aside, then renamed: builds may run at once. */
export async function buildPgliteTemplate(dir = PGLITE_TEMPLATES): Promise<string> {
  const file = await pgliteTemplatePath(dir);
  if (await exists(file)) return file;
  const [{ PGlite }, { pg_trgm }] = await Promise.all([import('@electric-sql/pglite'), import('@electric-sql/pglite/contrib/pg_trgm')]);
  const pglite = await PGlite.create({ extensions: { pg_trgm } });
  const handle = await wrapPglite(pglite);
  await migrateToLatest(handle.db);
  await pglite.exec('CHECKPOINT');
  const tar = await pglite.dumpDataDir('gzip');
  await handle.close();
  await fs.mkdir(dir, { recursive: true });
  // Templates of another PGlite or schema are never opened again.
  for (const old of await fs.readdir(dir))
    if (old.endsWith('.tar.gz') && old !== path.basename(file)) await fs.rm(path.join(dir, old), { force: true });
  const aside = `${file}.${process.pid}`;
  await fs.writeFile(aside, Buffer.from(await tar.arrayBuffer()));
  await fs.rename(aside, file);
  return file;
}
