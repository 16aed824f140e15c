import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/database.js';
import { migrations } from '../db/migrations.js';
import { buildPgliteTemplate } from '../src/db/pglite-template-build.js';

// P133: a new embedded DATA_DIR starts from the template `npm run build` made, never from another one, and a
// template that cannot be used leaves the start as it was without one. The embedded database whatever the run.
describe('the embedded database template (P133)', () => {
  let root: string;
  let templates: string;
  let template: string;

  beforeAll(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'ssdi-template-'));
    templates = path.join(root, 'templates');
    template = await buildPgliteTemplate(templates);
  }, 120_000);

  afterAll(() => rm(root, { recursive: true, force: true }));

  /** Opens `name` under root with `dir` as the template directory: the migrations it holds, none without a schema. */
  async function migrationsIn(name: string, dir = templates, warnings: string[] = []): Promise<number> {
    const handle = await openDatabase({ dataDir: path.join(root, name), pgliteTemplates: dir, onWarning: (m) => warnings.push(m) });
    try {
      const { rows } = await sql<{ t: string | null }>`SELECT to_regclass('kysely_migration')::text AS t`.execute(handle.db);
      if (rows[0]!.t === null) return 0;
      const { rows: n } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM kysely_migration`.execute(handle.db);
      return n[0]!.n;
    } finally {
      await handle.close();
    }
  }

  it('starts a new data directory migrated, from the template', async () => {
    expect(await migrationsIn('new')).toBe(Object.keys(migrations).length);
  });

  // P158: the buffer pool lives in WASM memory that is never returned, so it is bounded at every open.
  it('opens the embedded database with its bounded buffer pool, from the template, reopened and initialised', async () => {
    const sharedBuffers = async (name: string, dir = templates) => {
      const handle = await openDatabase({ dataDir: path.join(root, name), pgliteTemplates: dir });
      try {
        const { rows } = await sql<{ shared_buffers: string }>`SHOW shared_buffers`.execute(handle.db);
        return rows[0]!.shared_buffers;
      } finally {
        await handle.close();
      }
    };
    expect(await sharedBuffers('bounded')).toBe('16MB');
    expect(await sharedBuffers('bounded')).toBe('16MB');
    expect(await sharedBuffers('bounded-initdb', path.join(root, 'none'))).toBe('16MB');
  });

  it('leaves a data directory that holds a database alone', async () => {
    expect(await migrationsIn('initialised', path.join(root, 'none'))).toBe(0);
    expect(await migrationsIn('initialised')).toBe(0);
  });

  it('does not load a template of other migrations or another PGlite', async () => {
    const other = path.join(root, 'other');
    await mkdir(other);
    // The same database under the name of another migrations' hash.
    await copyFile(template, path.join(other, path.basename(template).replace(/-\w+\.tar\.gz$/, '-0123456789abcdef.tar.gz')));
    expect(await migrationsIn('other', other)).toBe(0);
  });

  it('initialises the database as without a template when the template cannot be read, with a warning', async () => {
    const broken = path.join(root, 'broken');
    await mkdir(broken);
    await writeFile(path.join(broken, path.basename(template)), 'not a gzip');
    const warnings: string[] = [];
    expect(await migrationsIn('from-broken', broken, warnings)).toBe(0);
    expect(warnings.join('\n')).toMatch(/template cannot be read/);
    // A later start finds a database, not a half-extracted template.
    expect(await migrationsIn('from-broken')).toBe(0);
  });

  // P159: the template is extracted as it streams, so a cut-off one is only found out at its end.
  it('initialises the database as without a template when the template is cut off, with a warning', async () => {
    const cut = path.join(root, 'cut');
    await mkdir(cut);
    const tar = gunzipSync(await readFile(template));
    await writeFile(path.join(cut, path.basename(template)), gzipSync(tar.subarray(0, Math.floor(tar.length / 2) + 100)));
    const warnings: string[] = [];
    expect(await migrationsIn('from-cut', cut, warnings)).toBe(0);
    expect(warnings.join('\n')).toMatch(/template cannot be read/);
    expect(await migrationsIn('from-cut')).toBe(0);
  });

  it('takes a data directory a load stopped in half-way for no database, and loads the template again', async () => {
    const dir = path.join(root, 'half');
    await mkdir(dir);
    await writeFile(path.join(dir, '.ssdi-template-loading'), '');
    await writeFile(path.join(dir, 'PG_VERSION'), '17\n');
    expect(await migrationsIn('half')).toBe(Object.keys(migrations).length);
  });
});
