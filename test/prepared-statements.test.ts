import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type TestApp, createTenant, startApp } from './helpers.js';

// P71: on PostgreSQL, authentication, subject writes and the unfiltered first page of subjects (P167) run
// as named, prepared statements. PostgreSQL only (vitest.config.ts leaves this file out without
// DATABASE_URL): PGlite's pool is not wrapped, and pg_prepared_statements shows only what a session
// prepared itself.

const UPSERT = '/api/v2/messaging/subject';
const sv = (key: string, type: string, value: unknown) => ({ Key: key, Value: { [type]: { Value: value } } });
const person = (no: string, name: string) => [sv('employeeNumber', 'String', no), sv('fullName', 'String', name)];

let app: TestApp;
let api: ApiClient;
beforeAll(async () => {
  app = await startApp();
  api = await (
    await createTenant(app, { structuralEntities: [{ key: 'dept', displayName: 'Dept', structureTypeKey: 'department' }] })
  ).client();
});
afterAll(() => app?.close());

/** Upserts subjects `from`..`from + n - 1`, `n` at once (spread over the pool's connections); the statuses. */
async function upsertMany(from: number, n: number, name = 'P'): Promise<number[]> {
  const all = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      api.post(UPSERT, { CustomFieldValues: person(`E-${from + i}`, `${name} ${i}`), StructuralEntityKeys: ['dept'] }),
    ),
  );
  return all.map((r) => r.status);
}

/** Runs `read` on every connection of `app`'s pool at once (each holds one while the others are taken). */
async function onEveryConnection<T>(target: TestApp, read: (c: Kysely<any>) => Promise<T>): Promise<T[]> {
  const size = 10;
  let waiting = size;
  let allHeld!: () => void;
  const held = new Promise<void>((resolve) => (allHeld = resolve));
  return Promise.all(
    Array.from({ length: size }, () =>
      target.handle.db.connection().execute(async (c) => {
        const r = await read(c);
        if (--waiting === 0) allHeld();
        await held;
        return r;
      }),
    ),
  );
}

/** The statements every connection of the pool has prepared. */
const preparedOnEveryConnection = (target = app) =>
  onEveryConnection(target, async (c) =>
    (await sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements WHERE name LIKE 'ssdi\_%'`.execute(c)).rows.map(
      (x) => x.statement,
    ),
  );

/** The server processes behind the pool's connections (a replaced connection has a new one). */
const backends = async () =>
  new Set(await onEveryConnection(app, async (c) => (await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(c)).rows[0]!.pid));

describe('prepared statements (P71)', () => {
  // P75: statements built once per shape keep P71's prepared texts.
  it('a connection that authenticated and wrote a subject holds those statements prepared, and only fixed ones', async () => {
    expect(await upsertMany(0, 20)).toEqual(Array(20).fill(201));
    const perConnection = await preparedOnEveryConnection();
    const all = perConnection.flat();
    // The principal's lookup, the upsert's read and its write statement.
    expect(all.some((s) => /from "client"/i.test(s) && /"tenant"\."data_version"/i.test(s))).toBe(true);
    expect(all.some((s) => /jsonb_build_object\('id', id, 'values', values, 'version', xmin::text\)/.test(s))).toBe(true);
    expect(all.some((s) => /^\s*WITH subj AS \(insert into "subject"/i.test(s))).toBe(true);
    // Per connection, a handful: the fixed statements of the code, not one per request.
    for (const statements of perConnection) expect(statements.length).toBeLessThanOrEqual(8);
  });

  // P167, P168
  it("a page of subjects in a field's order, unfiltered or filtered by one value, is prepared with its page size in its text, behind a cursor too; by id, filtered otherwise or searched it is not", async () => {
    const first = await api.get('/api/v2/subject?First=5');
    expect(first.status).toBe(200);
    expect((await api.get(`/api/v2/subject?First=5&After=${first.body.PageInfo.EndCursor}`)).status).toBe(200);
    const filter = 'customFieldValueFilter.values[fullName]';
    // P169: one value of a single-value field, in ExternalId order.
    expect((await api.get(`/api/v2/subject?First=5&${filter}=P%201`)).status).toBe(200);
    // Two values, a location with the value, a search: planned for their values.
    expect((await api.get(`/api/v2/subject?First=5&${filter}=P%201&${filter}=P%202&customFieldValueFilter.match=ExactAny`)).status).toBe(
      200,
    );
    expect((await api.get(`/api/v2/subject?First=5&${filter}=P%201&StructuralEntityKeys=dept`)).status).toBe(200);
    expect((await api.get('/api/v2/subject?First=5&SearchTerm=P')).status).toBe(200);
    expect((await api.get('/api/v2/subject?First=5&OrderBy=Id')).status).toBe(200);
    const pages = [...new Set((await preparedOnEveryConnection()).flat().filter((s) => /"s"\."values"/.test(s)))];
    expect(pages).toHaveLength(3);
    for (const page of pages) {
      expect(page).toMatch(/limit 6$/);
      expect(page).not.toMatch(/any\(|subject_location|similarity|order by "s"\."id"/i);
    }
    expect(pages.filter((p) => /"o"\."ordinal" = 0 /.test(p))).toHaveLength(2);
    expect(pages.filter((p) => /md5\(o\.value_text\) = \$\d+ .*order by "o"\."list_key" ASC/.test(p))).toHaveLength(1);
    // Behind the cursor: the page starts beyond it, and the probe for anything behind it is a range, not its negation.
    const behind = pages.find((p) => /"__edge"/.test(p))!;
    expect(behind).toMatch(/\("o"\."sort_key", "o"\."subject_id"\) > \(cast\(\$\d+ as text\), cast\(\$\d+ as uuid\)\)/);
    expect(behind).toMatch(
      /\("o"\."sort_key", "o"\."subject_id"\) <= \(cast\(\$\d+ as text\), cast\(\$\d+ as uuid\)\)\) order by "o"\."sort_key" ASC, "o"\."subject_id" ASC limit 1\) IS NOT NULL/,
    );
    expect(behind).not.toMatch(/\bnot \(/i);
  });

  // P167, P168: prepared, it runs one generic plan for every tenant; that plan must be the ordered index read.
  it("a prepared page's generic plan reads the order's index, with no scan of the table and no sort, before and behind a cursor", async () => {
    const asc = await api.get('/api/v2/subject?First=20&OrderBy=fullName');
    const desc = await api.get('/api/v2/subject?First=20&OrderBy=fullName&OrderDirection=Descending');
    expect([asc.status, desc.status]).toEqual([200, 200]);
    const [a, d] = [asc.body.Edges[3].Cursor, desc.body.Edges[3].Cursor];
    // Every cursor shape: forward and back, from either end, in either direction, and a window bounded on both sides.
    const first = asc.body.Edges[0].Cursor;
    const filter = 'customFieldValueFilter.values[fullName]=P%201';
    const filtered = await api.get(`/api/v2/subject?First=20&${filter}`);
    expect(filtered.status).toBe(200);
    expect((await api.get(`/api/v2/subject?First=20&${filter}&After=${filtered.body.PageInfo.EndCursor}`)).status).toBe(200);
    for (const q of [
      `First=20&After=${a}`,
      `First=20&Before=${a}`,
      `Last=20&Before=${a}`,
      `Last=20&After=${a}`,
      `First=20&After=${first}&Before=${a}`,
      `Last=20&After=${first}&Before=${a}`,
      `First=20&OrderDirection=Descending&After=${d}`,
      `Last=20&OrderDirection=Descending&Before=${d}`,
    ])
      expect((await api.get(`/api/v2/subject?OrderBy=fullName&${q}`)).status).toBe(200);
    // By id the generic plan would follow the statistics (an index read and a sort for small tenants): unnamed.
    expect((await api.get('/api/v2/subject?First=20&OrderBy=Id')).status).toBe(200);
    const pages = [...new Set((await preparedOnEveryConnection()).flat().filter((s) => /"s"\."values"/.test(s) && /limit 21$/.test(s)))];
    // Twelve pages, ten texts: descending behind a cursor reads as ascending paged back from it, and the reverse.
    expect(pages).toHaveLength(10);
    expect(pages.every((p) => /"o"\."(sort_key|list_key)" (ASC|DESC)/.test(p))).toBe(true);
    const tenantId = (await sql<{ id: string }>`SELECT id FROM tenant LIMIT 1`.execute(app.handle.db)).rows[0]!.id;
    // The statistics of a database holding one large tenant, under which the negated probe behind a cursor
    // was planned as a scan of every row (P168). Written directly: 30,000 subjects through the API take minutes.
    const { key } = await createTenant(app);
    const bigId = (await sql<{ id: string }>`SELECT id FROM tenant WHERE key = ${key}`.execute(app.handle.db)).rows[0]!.id;
    await sql`WITH s AS (
        INSERT INTO subject (tenant_id, matching_key) SELECT ${bigId}, 'p168-' || g FROM generate_series(1, 30000) g
        RETURNING tenant_id, id, matching_key)
      INSERT INTO subject_value (tenant_id, subject_id, field_key, ordinal, value_text, sort_key, list_key)
      SELECT tenant_id, id, f, 0, v, v, matching_key
      FROM s, LATERAL (VALUES ('fullName', matching_key), ('grade', (length(matching_key) % 7)::text)) AS x(f, v)`.execute(app.handle.db);
    await sql`ANALYZE subject, subject_value`.execute(app.handle.db);
    await app.handle.db.connection().execute(async (c) => {
      await sql`SET plan_cache_mode = force_generic_plan`.execute(c);
      try {
        for (const [i, page] of pages.entries()) {
          await sql.raw(`PREPARE p167_${i} AS ${page}`).execute(c);
          const types = (
            await sql<{ t: string[] }>`SELECT parameter_types::text[] AS t FROM pg_prepared_statements WHERE name = ${`p167_${i}`}`.execute(
              c,
            )
          ).rows[0]!.t;
          // A generic plan does not depend on the values: any of the right type.
          const args = types.map((t) => (t === 'uuid' ? `'${tenantId}'` : `'fullName'`)).join(', ');
          const plan = JSON.stringify(
            (await sql.raw<Record<string, unknown>>(`EXPLAIN (FORMAT JSON) EXECUTE p167_${i}(${args})`).execute(c)).rows,
          );
          expect(plan).toMatch(/Index (Only )?Scan/);
          expect(plan).not.toMatch(/Seq Scan|"Sort"|Gather/);
          await sql.raw(`DEALLOCATE p167_${i}`).execute(c);
        }
      } finally {
        await sql`RESET plan_cache_mode`.execute(c);
      }
    });
  });

  // P170: after the test above, whose large tenant's statistics stand. Under small tenants' statistics the
  // locations' generic plan read all of a tenant's locations when the ids were `= any($2)`.
  it("the locations of a page's subjects are prepared, and their generic plan reads each subject's locations by key", async () => {
    const page = await api.get('/api/v2/subject?First=3');
    const one = await api.get(`/api/v2/subject/${page.body.Edges[0].Node.Id}`);
    expect(one.status).toBe(200);
    expect(one.body.StructuralEntities.map((e: any) => e.Key)).toEqual(['dept']);
    const gql = await api.post('/graphql', {
      query: '{ subjects(first: 3) { edges { node { structuralEntities { edges { node { key parent { key } } } } } } } }',
    });
    expect(gql.status).toBe(200);
    expect(gql.body.data.subjects.edges.map((e: any) => e.node.structuralEntities.edges[0].node.key)).toEqual(['dept', 'dept', 'dept']);
    const located = [...new Set((await preparedOnEveryConnection()).flat().filter((s) => /FROM subject_location l WHERE/.test(s)))];
    expect(located).toHaveLength(1);
    const tenantId = (await sql<{ id: string }>`SELECT id FROM tenant LIMIT 1`.execute(app.handle.db)).rows[0]!.id;
    await app.handle.db.connection().execute(async (c) => {
      await sql`SET plan_cache_mode = force_generic_plan`.execute(c);
      try {
        await sql.raw(`PREPARE p170 AS ${located[0]}`).execute(c);
        const types = (
          await sql<{ t: string[] }>`SELECT parameter_types::text[] AS t FROM pg_prepared_statements WHERE name = 'p170'`.execute(c)
        ).rows[0]!.t;
        const args = types.map((t) => (t === 'uuid[]' ? `ARRAY['${tenantId}']::uuid[]` : `'${tenantId}'`)).join(', ');
        const plan = (await sql.raw<{ 'QUERY PLAN': any[] }>(`EXPLAIN (FORMAT JSON) EXECUTE p170(${args})`).execute(c)).rows[0]![
          'QUERY PLAN'
        ][0].Plan;
        const reads: string[] = [];
        const walk = (n: any) => {
          if (n['Relation Name'] === 'subject_location')
            reads.push(`${n['Node Type']}: ${n['Index Cond'] ?? n['Recheck Cond'] ?? n.Filter}`);
          for (const child of n.Plans ?? []) walk(child);
        };
        walk(plan);
        // One read of the location key per subject id, never of the tenant's locations.
        expect(reads).toHaveLength(1);
        expect(reads[0]).toMatch(/^Index (Only )?Scan: \(\(tenant_id = \$\d\) AND \(subject_id = ids\.id\)\)$/);
        await sql`DEALLOCATE p170`.execute(c);
      } finally {
        await sql`RESET plan_cache_mode`.execute(c);
      }
    });
  });

  it('a column added to subject while statements are prepared (a rolling deploy) fails no write and replaces no connection', async () => {
    expect(await upsertMany(100, 10)).toEqual(Array(10).fill(201));
    const before = await backends();
    await sql`ALTER TABLE subject ADD COLUMN p71_added integer`.execute(app.handle.db);
    try {
      // New subjects (insert) and the same ones again (update): both shapes ran before the column came.
      expect(await upsertMany(200, 10)).toEqual(Array(10).fill(201));
      expect(await upsertMany(100, 10, 'Renamed')).toEqual(Array(10).fill(200));
      const r = await api.get('/api/v2/subject?First=1000');
      expect(r.status).toBe(200);
      expect(r.body.PageInfo.TotalCount).toBe(40);
      expect(r.body.Edges.filter((e: any) => /^Renamed /.test(e.Node.CustomFieldValues[1].Value.ValueText))).toHaveLength(10);
      // The write lists its columns: its prepared result type did not change, no connection was replaced.
      expect(await backends()).toEqual(before);
    } finally {
      await sql`ALTER TABLE subject DROP COLUMN p71_added`.execute(app.handle.db);
    }
  });

  it('a column whose type changes under a prepared statement fails no write or page: it runs unnamed once, and the connection is replaced', async () => {
    expect(await upsertMany(300, 10)).toEqual(Array(10).fill(201));
    const firstPage = async () => (await api.get('/api/v2/subject?First=7')).status;
    expect(await Promise.all(Array.from({ length: 10 }, firstPage))).toEqual(Array(10).fill(200));
    // The statement's result type changes (text → varchar): PostgreSQL refuses the prepared one (0A000).
    const before = await backends();
    await sql`ALTER TABLE subject ALTER COLUMN external_id TYPE varchar(2000)`.execute(app.handle.db);
    try {
      for (let round = 0; round < 3; round++) {
        expect(await upsertMany(400 + round * 10, 10)).toEqual(Array(10).fill(201));
        expect(await upsertMany(300, 10, `Round ${round}`)).toEqual(Array(10).fill(200));
        // The page selects external_id too: its prepared form is refused and it runs again unnamed (P167).
        expect(await Promise.all(Array.from({ length: 10 }, firstPage))).toEqual(Array(10).fill(200));
      }
      // The connections that held the refused statement were replaced, and the new ones prepared it afresh.
      const after = await backends();
      expect([...after].filter((pid) => !before.has(pid)).length).toBeGreaterThan(0);
      expect((await preparedOnEveryConnection()).flat().some((t) => /^\s*WITH subj AS \(insert into "subject"/i.test(t))).toBe(true);
    } finally {
      await sql`ALTER TABLE subject ALTER COLUMN external_id TYPE text`.execute(app.handle.db);
    }
  });

  it('DATABASE_PREPARED_STATEMENTS=false: nothing is prepared', async () => {
    const plain = await startApp({ DATABASE_PREPARED_STATEMENTS: 'false' });
    try {
      const client = await (await createTenant(plain)).client();
      const statuses = await Promise.all(
        Array.from({ length: 10 }, (_, i) => client.post(UPSERT, { CustomFieldValues: person(`F-${i}`, `Flag ${i}`) })),
      );
      expect(statuses.map((r) => r.status)).toEqual(Array(10).fill(201));
      expect((await preparedOnEveryConnection(plain)).flat()).toEqual([]);
    } finally {
      await plain.close();
    }
  });

  // P167: page sizes are the client's choice; the pages they name leave room for P71's fixed statements.
  // Last: it spends this instance's names for pages.
  it('pages of 40 sizes name at most 24 statements, and a subject write after them still runs prepared', async () => {
    const own = await (await createTenant(app)).client();
    const sizes = Array.from({ length: 40 }, (_, i) => i + 30);
    for (const n of sizes) expect((await own.get(`/api/v2/subject?First=${n}`)).status).toBe(200);
    const pages = new Set((await preparedOnEveryConnection()).flat().filter((s) => /"s"\."values"/.test(s)));
    expect([...pages].filter((s) => / limit (3[1-9]|[4-6]\d|70)$/.test(s)).length).toBeLessThanOrEqual(24);
    expect((await own.post(UPSERT, { CustomFieldValues: person('W-1', 'After pages') })).status).toBe(201);
    expect((await preparedOnEveryConnection()).flat().some((s) => /^\s*WITH subj AS \(insert into "subject"/i.test(s))).toBe(true);
  });
});
