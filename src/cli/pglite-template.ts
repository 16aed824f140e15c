import { promises as fs } from 'node:fs';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { wrapPglite } from '../db/database.js';
import { migrateToLatest } from '../db/migrate.js';
import { exists, pgliteTemplatePath } from '../db/pglite-template.js';

// The last step of `npm run build`: the initialised, migrated embedded database a new DATA_DIR starts from
// (P133), unless it is there already. Written aside, then renamed: builds may run at once.
const file = await pgliteTemplatePath();
if (!(await exists(file))) {
  const pglite = await PGlite.create({ extensions: { pg_trgm } });
  const handle = await wrapPglite(pglite);
  await migrateToLatest(handle.db);
  await pglite.exec('CHECKPOINT');
  const tar = await pglite.dumpDataDir('gzip');
  await handle.close();
  await fs.mkdir(path.dirname(file), { recursive: true });
  // Templates of another PGlite or schema are never opened again.
  for (const old of await fs.readdir(path.dirname(file)))
    if (old.endsWith('.tar.gz') && old !== path.basename(file)) await fs.rm(path.join(path.dirname(file), old), { force: true });
  const aside = `${file}.${process.pid}`;
  await fs.writeFile(aside, Buffer.from(await tar.arrayBuffer()));
  await fs.rename(aside, file);
  console.log(`embedded database template: ${path.relative(process.cwd(), file)}`);
}
