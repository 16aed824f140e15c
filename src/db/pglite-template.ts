import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gunzip as gunzipCallback } from 'node:zlib';

/**
 * An embedded database initialised and migrated, made once by `npm run build` (in dist/pglite/, by
 * buildPgliteTemplate): a new
 * DATA_DIR starts from it instead of running initdb and every migration, most of a first `npm start` (P133).
 * Named by the installed PGlite's version and a hash of the migration files next to the running code, so no
 * other PGlite or schema ever opens it; absent or unreadable, a new DATA_DIR is initialised and migrated at
 * start as before.
 */
export const PGLITE_TEMPLATES = fileURLToPath(new URL('../../pglite/', import.meta.url));

/** Present in DATA_DIR while a template is being extracted into it: what is there is not a database yet. */
const LOADING = '.ssdi-template-loading';

export async function pgliteTemplatePath(dir = PGLITE_TEMPLATES): Promise<string> {
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  const { version } = JSON.parse(await fs.readFile(path.join(path.dirname(entry), '..', 'package.json'), 'utf8')) as { version: string };
  // The files' text, not the `up` functions: module-level constants and helpers are part of a migration.
  const ext = path.extname(fileURLToPath(import.meta.url));
  const migrations = fileURLToPath(new URL('../../db/migrations/', import.meta.url));
  const files = [
    `${migrations.replace(/\/$/, '')}${ext}`,
    ...(await fs.readdir(migrations))
      .filter((f) => f.endsWith(ext))
      .sort()
      .map((f) => path.join(migrations, f)),
  ];
  const schema = createHash('sha256');
  for (const file of files) schema.update(`${path.basename(file)}\n${await fs.readFile(file, 'utf8')}\n`);
  return path.join(dir, `${version}-${schema.digest('hex').slice(0, 16)}.tar.gz`);
}

/**
 * Opens the embedded database in `dataDir` by `open`, from the template when the directory is empty (but
 * for `keep`) and a template for this PGlite and schema was built. A template that cannot be read or loaded
 * is warned about and the database is initialised as without one. The extraction is marked until it
 * succeeded: a load that failed or was stopped half-way leaves no directory taken for a database.
 */
export async function openFromPgliteTemplate<T>(
  dataDir: string,
  open: (loadDataDir?: Blob) => Promise<T>,
  opts: {
    templates?: string | undefined;
    keep: readonly string[];
    warn: (message: string) => void;
    loaded?: ((file: string) => void) | undefined;
  },
): Promise<T> {
  const mark = path.join(dataDir, LOADING);
  const clear = async () => {
    for (const f of await fs.readdir(dataDir))
      if (!opts.keep.includes(f)) await fs.rm(path.join(dataDir, f), { recursive: true, force: true });
  };
  if (await exists(mark)) await clear();
  let template: Blob | undefined;
  let file: string | undefined;
  try {
    const empty = (await fs.readdir(dataDir)).every((f) => opts.keep.includes(f));
    file = empty ? await pgliteTemplatePath(opts.templates) : undefined;
    // Read at once, not after a check: a concurrent build may remove an old template between the two.
    const bytes = file
      ? await fs.readFile(file).catch((e: NodeJS.ErrnoException) => (e.code === 'ENOENT' ? undefined : Promise.reject(e)))
      : undefined;
    // Unpacked here, not by PGlite: its gunzip leaves a corrupt file's error unhandled (the process would end).
    template = bytes && new Blob([await gunzip(bytes)]);
  } catch (e) {
    opts.warn(`The embedded database template cannot be read (${(e as Error).message}); initialising the database instead.`);
  }
  if (!template) return open();
  await fs.writeFile(mark, '');
  let opened: T;
  try {
    opened = await open(template);
  } catch (e) {
    opts.warn(`The embedded database template cannot be loaded (${(e as Error).message}); initialising the database instead.`);
    await clear();
    return open();
  }
  await fs.rm(mark, { force: true });
  opts.loaded?.(file!);
  return opened;
}

const gunzip = promisify(gunzipCallback);

export const exists = (file: string) =>
  fs.access(file).then(
    () => true,
    () => false,
  );
