import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, promises as fs } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { createGunzip } from 'node:zlib';
import { extract } from 'tar-stream';

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
 * for `keep`) and a template for this PGlite and schema was built. The template is extracted into the
 * directory as it streams, then opened as an existing database: handed to PGlite whole (`loadDataDir`), its
 * copies (gunzipped, as a Blob, as PGlite's array) stayed in this process's memory long after the start. A
 * template that cannot be read or opened is warned about and the database is initialised as without one.
 * The extraction is marked until the database opened: a load that failed or was stopped half-way leaves no
 * directory taken for a database.
 */
export async function openFromPgliteTemplate<T>(
  dataDir: string,
  open: () => Promise<T>,
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
  let file: string | undefined;
  try {
    const empty = (await fs.readdir(dataDir)).every((f) => opts.keep.includes(f));
    file = empty ? await pgliteTemplatePath(opts.templates) : undefined;
    if (file) {
      await fs.writeFile(mark, '');
      await extractTar(file, dataDir);
    }
  } catch (e) {
    // Not checked before: a concurrent build may remove an old template between the check and the read.
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || (e as NodeJS.ErrnoException).path !== file)
      opts.warn(`The embedded database template cannot be read (${(e as Error).message}); initialising the database instead.`);
    await clear();
    file = undefined;
  }
  if (!file) return open();
  let opened: T;
  try {
    opened = await open();
  } catch (e) {
    opts.warn(`The embedded database template cannot be loaded (${(e as Error).message}); initialising the database instead.`);
    await clear();
    return open();
  }
  await fs.rm(mark, { force: true });
  opts.loaded?.(file);
  return opened;
}

/** Extracts the gzipped tar `file` (directories and regular files, as PGlite dumps them) into `dir`. */
async function extractTar(file: string, dir: string): Promise<void> {
  const entries = extract();
  // A read error (the file gone, a corrupt or cut-off gzip or tar) destroys `entries`: the loop throws it.
  const feeding = pipeline(createReadStream(file), createGunzip(), entries);
  // An archive cut off in a file's data ends `entries` but not that file's stream, which would wait forever.
  let current: { destroy(e: Error): void } | undefined;
  let failed: Error | undefined;
  feeding.catch((e: Error) => {
    failed = e;
    current?.destroy(e);
  });
  for await (const entry of entries) {
    const { name, type, mode } = entry.header;
    const target = path.join(dir, name);
    if (path.relative(dir, target).startsWith('..')) throw new Error(`a tar entry outside the directory: ${name}`);
    if (type === 'directory') {
      await fs.mkdir(target, { recursive: true, mode: mode & 0o777 || 0o700 });
      entry.resume();
    } else if (type === 'file') {
      await fs.mkdir(path.dirname(target), { recursive: true });
      if (failed) throw failed;
      current = entry;
      await pipeline(entry, createWriteStream(target, { mode: mode & 0o777 || 0o600 }));
      current = undefined;
    } else throw new Error(`an unexpected tar entry (${type}): ${name}`);
  }
  await feeding;
}

export const exists = (file: string) =>
  fs.access(file).then(
    () => true,
    () => false,
  );
