import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failure, openTestDatabase } from './helpers.js';

// Parameters are bound as `pg` binds them on PostgreSQL, on PGlite too: its serializers are pg's own
// prepareValue (pg/lib/utils.js, reachable through pg's exports map but not documented), so a change of
// its behaviour, or PGlite's own serializers in its place, fails here. // P146

describe('parameters of every kind the service binds', () => {
  let handle: Awaited<ReturnType<typeof openTestDatabase>>;
  beforeAll(async () => {
    handle = await openTestDatabase();
  });
  afterAll(() => handle?.dispose());

  it('store a Date, a Buffer, arrays and an object as the same values on both databases', async () => {
    const at = new Date('2026-01-02T03:04:05.678Z');
    const row = {
      at,
      bytes: Buffer.from([0, 1, 0x5c, 0xff]),
      ints: [3, 1, 2],
      texts: ['a', 'b"c', 'd,e', null, ''],
      grid: [
        [1, 2],
        [3, 4],
      ],
      doc: { name: 'x', list: [1, 'two', null, true], nested: { at: '2026' } },
      missing: undefined,
    };
    const stored = await sql<Record<string, unknown>>`
      WITH p (at, bytes, ints, texts, grid, doc, missing) AS (
        SELECT ${row.at}::timestamptz, ${row.bytes}::bytea, ${row.ints}::int[], ${row.texts}::text[], ${row.grid}::int[],
          ${row.doc}::jsonb, ${row.missing}::text
      )
      SELECT extract(epoch FROM at)::text AS epoch, encode(bytes, 'hex') AS hex, ints::text AS ints, texts::text AS texts,
        array_length(texts, 1) AS "textCount", grid::text AS grid, doc::text AS doc, missing IS NULL AS "missingIsNull",
        at, bytes, ints AS "intsRead", texts AS "textsRead", doc AS "docRead"
      FROM p`.execute(handle.db);
    expect(stored.rows[0]).toEqual({
      epoch: '1767323045.678000',
      hex: '00015cff',
      ints: '{3,1,2}',
      texts: '{a,"b\\"c","d,e",NULL,""}',
      textCount: 5,
      grid: '{{1,2},{3,4}}',
      doc: '{"list": [1, "two", null, true], "name": "x", "nested": {"at": "2026"}}',
      missingIsNull: true,
      // Read back as `pg` parses them.
      at,
      bytes: row.bytes,
      intsRead: row.ints,
      textsRead: row.texts,
      docRead: row.doc,
    });
  });

  it("bind an object as JSON and an array as a PostgreSQL array whatever the parameter's type", async () => {
    // PGlite's own serializers follow the parameter's type instead: '[object Object]', '1,x', and '[1, 2]' as jsonb.
    const { rows } = await sql<{ doc: string; list: string }>`SELECT ${{ a: 1 }}::text AS doc, ${[1, 'x']}::text AS list`.execute(
      handle.db,
    );
    expect(rows).toEqual([{ doc: '{"a":1}', list: '{"1","x"}' }]);
    const e = await failure(() => sql`SELECT ${[1, 2]}::jsonb`.execute(handle.db));
    expect((e as { code?: string }).code).toBe('22P02'); // invalid_text_representation: '{"1","2"}' is no JSON
  });
});
