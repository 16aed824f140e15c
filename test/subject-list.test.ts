import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { print } from 'graphql';
import { sql } from 'kysely';
import { migrations } from '../db/migrations.js';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { subjectRoutes } from '../src/domains/subject/index.js';
import { type ApiClient, type ApiResponse, type TestApp, createTenant, expectValidation, startApp, tenantConfig } from './helpers.js';

// The subject list through HTTP only: GET /api/v2/subject and GraphQL subjects(...).
// D7 (filters, SearchTerm), D6 (ordering, keyset paging, exact page flags and TotalCount), D5 (errors,
// parameter names), D11 (the same filter through GraphQL). Writes and single subjects: subjects.test.ts.

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

const LIST = '/api/v2/subject';
const UPSERT = '/api/v2/messaging/subject';

const sv = (key: string, type: string, value: unknown) => ({ Key: key, Value: { [type]: { Value: value } } });

interface Seed {
  no: string;
  name?: string;
  values?: unknown[];
  keys?: string[];
}

/** Creates subjects in parallel chunks; returns ExternalId → id. */
async function seed(api: ApiClient, subjects: Seed[]): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (let i = 0; i < subjects.length; i += 10) {
    const chunk = subjects.slice(i, i + 10);
    const answers = await Promise.all(
      chunk.map((s) =>
        api.post(UPSERT, {
          CustomFieldValues: [
            sv('employeeNumber', 'String', s.no),
            sv('fullName', 'String', s.name ?? `Person ${s.no}`),
            ...(s.values ?? []),
          ],
          ...(s.keys ? { StructuralEntityKeys: s.keys } : {}),
        }),
      ),
    );
    answers.forEach((r, j) => {
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      ids.set(chunk[j]!.no, r.body.internalId);
    });
  }
  return ids;
}

const list = (api: ApiClient, query = '') => api.get(`${LIST}${query ? `?${query}` : ''}`);
const ext = (r: ApiResponse): string[] => (r.body.Edges as any[]).map((e) => e.Node.ExternalId);

/** A 200 list answer: its ExternalIds, asserting TotalCount equals their number (one page). */
async function listed(api: ApiClient, query: string): Promise<string[]> {
  const r = await list(api, query);
  expect(r.status, `${query} → ${JSON.stringify(r.body)}`).toBe(200);
  expect(r.body.PageInfo.TotalCount, query).toBe(r.body.Edges.length);
  return ext(r);
}
const sorted = (xs: string[]) => [...xs].sort();

const FIELDS = [
  { key: 'employeeNumber', name: 'Employee number', dataType: 'String', type: 'Text', required: true },
  { key: 'fullName', name: 'Full name', dataType: 'String', type: 'Text', required: true },
  { key: 'email', name: 'E-mail', dataType: 'String' },
  { key: 'grade', name: 'Grade', dataType: 'Integer' },
  { key: 'skills', name: 'Skills', dataType: 'String', isArray: true },
  { key: 'salary', name: 'Salary', dataType: 'Decimal' },
  { key: 'active', name: 'Active', dataType: 'Boolean' },
  { key: 'birthDate', name: 'Birth date', dataType: 'Date' },
  { key: 'lastSeen', name: 'Last seen', dataType: 'DateTime' },
  { key: 'shiftStart', name: 'Shift start', dataType: 'Time' },
];

// acme (company, not assignable) > sales > north > north-1; ops at the top.
const ENTITIES = [
  { key: 'acme', displayName: 'Acme', structureTypeKey: 'company' },
  { key: 'sales', displayName: 'Sales', structureTypeKey: 'department', parentKey: 'acme' },
  { key: 'north', displayName: 'Sales North', structureTypeKey: 'department', parentKey: 'sales' },
  { key: 'north-1', displayName: 'Sales North 1', structureTypeKey: 'department', parentKey: 'north' },
  { key: 'ops', displayName: 'Operations', structureTypeKey: 'department' },
];

const skills = (...xs: string[]) => ({ Key: 'skills', Value: xs.map((x) => ({ String: { Value: x } })) });
const FILTER_SUBJECTS: Seed[] = [
  {
    no: 'F-01',
    keys: ['sales'],
    values: [
      sv('grade', 'Integer', 5),
      skills('java', 'sql'),
      sv('salary', 'Decimal', 2.5),
      sv('active', 'Boolean', true),
      sv('birthDate', 'Date', '1990-01-01'),
    ],
  },
  {
    no: 'F-02',
    keys: ['north'],
    values: [
      sv('grade', 'Integer', 7),
      skills('go'),
      sv('salary', 'Decimal', 3),
      sv('active', 'Boolean', false),
      sv('birthDate', 'Date', '1985-06-15'),
      sv('lastSeen', 'DateTime', '2024-05-01T10:00:00Z'),
    ],
  },
  {
    no: 'F-03',
    keys: ['north-1'],
    values: [
      sv('grade', 'Integer', 5),
      skills('go', 'java'),
      sv('salary', 'Decimal', 2.25),
      sv('active', 'Boolean', false),
      sv('birthDate', 'Date', '1990-01-01'),
    ],
  },
  {
    no: 'F-04',
    keys: ['ops'],
    values: [sv('grade', 'Integer', 9), sv('salary', 'Decimal', 10), sv('active', 'Boolean', true), sv('shiftStart', 'Time', '08:30:00')],
  },
  { no: 'F-05', keys: ['sales', 'ops'], values: [skills('java')] },
  { no: 'F-06', values: [sv('grade', 'Integer', 10), skills('rust'), sv('active', 'Boolean', true)] },
  { no: 'F-07', keys: ['ops'], values: [sv('grade', 'Integer', 5), skills('sql'), sv('salary', 'Decimal', 2.5)] },
];

describe('list filters: locations (D7)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app, { subjectFields: FIELDS, structuralEntities: ENTITIES })).client();
    await seed(api, FILTER_SUBJECTS);
  });

  it('no filter: every subject, ordered by ExternalId (D6 default)', async () => {
    expect(await listed(api, '')).toEqual(['F-01', 'F-02', 'F-03', 'F-04', 'F-05', 'F-06', 'F-07']);
  });

  it('StructuralEntityKeys and structuralEntityKey: subjects located directly at any of them', async () => {
    expect(await listed(api, 'StructuralEntityKeys=sales')).toEqual(['F-01', 'F-05']);
    expect(await listed(api, 'structuralEntityKey=sales')).toEqual(['F-01', 'F-05']);
    expect(await listed(api, 'structuralentitykeys=north')).toEqual(['F-02']); // D5: names case-insensitive
    const both = ['F-01', 'F-04', 'F-05', 'F-07'];
    expect(await listed(api, 'StructuralEntityKeys=sales&StructuralEntityKeys=ops')).toEqual(both);
    expect(await listed(api, 'StructuralEntityKeys=sales,ops')).toEqual(both);
    expect(await listed(api, 'structuralEntityKey=sales&structuralEntityKey=ops')).toEqual(both);
    expect(await listed(api, 'structuralEntityKey=sales,ops')).toEqual(both);
    expect(await listed(api, 'structuralEntityKey=sales&StructuralEntityKeys=ops')).toEqual(both);
    expect(await listed(api, 'StructuralEntityKeys=acme')).toEqual([]);
    // P20: an unknown key in the list filter matches nothing.
    expect(await listed(api, 'StructuralEntityKeys=nowhere')).toEqual([]);
    expect(await listed(api, 'StructuralEntityKeys=SALES')).toEqual([]); // D2: keys are case-sensitive
  });

  it('IncludeDescendants=true also takes subjects located anywhere below', async () => {
    expect(await listed(api, 'StructuralEntityKeys=sales&IncludeDescendants=true')).toEqual(['F-01', 'F-02', 'F-03', 'F-05']);
    expect(await listed(api, 'StructuralEntityKeys=north&IncludeDescendants=true')).toEqual(['F-02', 'F-03']);
    expect(await listed(api, 'StructuralEntityKeys=acme&IncludeDescendants=true')).toEqual(['F-01', 'F-02', 'F-03', 'F-05']);
    expect(await listed(api, 'structuralEntityKey=north-1,ops&IncludeDescendants=true')).toEqual(['F-03', 'F-04', 'F-05', 'F-07']);
    expect(await listed(api, 'StructuralEntityKeys=sales&IncludeDescendants=false')).toEqual(['F-01', 'F-05']);
    expectValidation(await list(api, 'StructuralEntityKeys=sales&IncludeDescendants=maybe'), 'IncludeDescendants');
  });
});

describe('list filters: custom field values (D7)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app, { subjectFields: FIELDS, structuralEntities: ENTITIES })).client();
    await seed(api, FILTER_SUBJECTS);
  });

  const f = (key: string, v: string) => `customFieldValueFilter.values[${key}]=${encodeURIComponent(v)}`;

  it('one key: a subject matches when the field holds any listed value; an array field when any element does', async () => {
    expect(await listed(api, f('grade', '5'))).toEqual(['F-01', 'F-03', 'F-07']);
    expect(await listed(api, `${f('grade', '5')}&${f('grade', '9')}`)).toEqual(['F-01', 'F-03', 'F-04', 'F-07']);
    expect(await listed(api, f('skills', 'java'))).toEqual(['F-01', 'F-03', 'F-05']);
    expect(await listed(api, `${f('skills', 'rust')}&${f('skills', 'go')}`)).toEqual(['F-02', 'F-03', 'F-06']);
    expect(await listed(api, f('fullName', 'Person F-04'))).toEqual(['F-04']);
    expect(await listed(api, f('skills', 'Java'))).toEqual([]); // exact, not case-folded
  });

  it('ExactAll (default) needs every key to match, ExactAny one of them: three keys incl. an array field', async () => {
    const three = `${f('grade', '5')}&${f('skills', 'java')}&${f('active', 'true')}`;
    expect(await listed(api, three)).toEqual(['F-01']);
    expect(await listed(api, `${three}&customFieldValueFilter.match=ExactAll`)).toEqual(['F-01']);
    expect(await listed(api, `${three}&customFieldValueFilter.match=ExactAny`)).toEqual(['F-01', 'F-03', 'F-04', 'F-05', 'F-06', 'F-07']);
    expect(await listed(api, `${three}&customFieldValueFilter.match=exactany`)).toEqual(['F-01', 'F-03', 'F-04', 'F-05', 'F-06', 'F-07']);
    const two = `${f('grade', '5')}&${f('skills', 'java')}`;
    expect(await listed(api, two)).toEqual(['F-01', 'F-03']);
    expect(await listed(api, `${two}&customFieldValueFilter.match=ExactAny`)).toEqual(['F-01', 'F-03', 'F-05', 'F-07']);
    expectValidation(await list(api, `${two}&customFieldValueFilter.match=Fuzzy`), 'customFieldValueFilter.match');
  });

  it('typed comparison: Integer, Decimal numerically, Boolean, Date, DateTime and Time by value', async () => {
    expect(await listed(api, f('grade', '10'))).toEqual(['F-06']);
    expect(await listed(api, f('salary', '2.50'))).toEqual(['F-01', 'F-07']);
    expect(await listed(api, f('salary', '3.00'))).toEqual(['F-02']);
    expect(await listed(api, f('salary', '10'))).toEqual(['F-04']);
    expect(await listed(api, f('salary', '2.25'))).toEqual(['F-03']);
    expect(await listed(api, f('active', 'true'))).toEqual(['F-01', 'F-04', 'F-06']);
    expect(await listed(api, f('active', 'false'))).toEqual(['F-02', 'F-03']);
    expect(await listed(api, f('birthDate', '1990-01-01'))).toEqual(['F-01', 'F-03']);
    expect(await listed(api, f('lastSeen', '2024-05-01T12:00:00+02:00'))).toEqual(['F-02']);
    expect(await listed(api, f('lastSeen', '2024-05-01T10:00:00.000Z'))).toEqual(['F-02']);
    expect(await listed(api, f('shiftStart', '08:30:00'))).toEqual(['F-04']);
    // Combined with a location filter (AND).
    expect(await listed(api, `StructuralEntityKeys=ops&${f('grade', '5')}`)).toEqual(['F-07']);
  });

  it("an unknown key, or a value that cannot be read as the field's type: 400 naming customFieldValueFilter.values[key]", async () => {
    const bad: [string, string][] = [
      ['nope', '1'],
      ['grade', 'abc'],
      ['grade', '1.5'],
      ['grade', '3000000000'],
      ['salary', 'two'],
      ['active', 'yes'],
      ['birthDate', '2024-13-01'],
      ['birthDate', '01.01.1990'],
      ['lastSeen', 'yesterday'],
      ['shiftStart', '25:00:00'],
    ];
    const answers = await Promise.all(bad.map(([k, v]) => list(api, f(k, v))));
    answers.forEach((r, i) => expectValidation(r, `customFieldValueFilter.values[${bad[i]![0]}]`));
    // Every problem at once, the good key not named.
    const r = await list(api, `${f('grade', 'x')}&${f('active', 'true')}&${f('nope', 'y')}`);
    expectValidation(r, 'customFieldValueFilter.values[grade]', 'customFieldValueFilter.values[nope]');
    expect(Object.keys(r.body.errors)).not.toContain('customFieldValueFilter.values[active]');
  });

  it('SearchTerm together with a custom field filter: 400', async () => {
    const r = await list(api, `SearchTerm=Person&${f('grade', '5')}`);
    expectValidation(r);
    expect(Object.keys(r.body.errors).join(' ')).toMatch(/SearchTerm|customFieldValueFilter/);
  });
});

describe('SearchTerm (D7)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app)).client();
    await seed(api, [
      { no: 'EMP-1001', name: 'John Carpenter' },
      { no: 'EMP-1002', name: 'Jane Smith' },
      { no: 'EMP-1003', name: 'Jonh Doe' },
      { no: 'EMP-1004', name: 'Jon Smith' },
      { no: 'EMP-1005', name: 'Alice Cooper', values: [sv('email', 'String', 'alice@example.org')] },
      { no: 'EMP-1006', name: 'Bob Builder', values: [sv('skills', 'String', 'carpentry')] },
    ]);
  });

  it('`Jonh` finds `John Carpenter` by similarity; substring matches rank first, then by similarity', async () => {
    const r = await list(api, 'SearchTerm=Jonh');
    expect(r.status).toBe(200);
    // Jonh Doe: substring; Jon Smith: word_similarity 0.6; John Carpenter: 0.4; Jane Smith: 0.2 (out).
    expect(ext(r)).toEqual(['EMP-1003', 'EMP-1004', 'EMP-1001']);
    expect(r.body.PageInfo.TotalCount).toBe(3);
  });

  it('`Smith` finds the Smiths (case-insensitive substring) but not `John Carpenter`', async () => {
    expect(sorted(await listed(api, 'SearchTerm=smith'))).toEqual(['EMP-1002', 'EMP-1004']);
    expect(await listed(api, 'SearchTerm=Smith')).not.toContain('EMP-1001');
  });

  it('searches ExternalId and every String value, array elements included', async () => {
    expect((await listed(api, 'SearchTerm=EMP-1005'))[0]).toBe('EMP-1005');
    expect(await listed(api, 'SearchTerm=alice@example')).toEqual(['EMP-1005']);
    // `carpent` occurs in John Carpenter (fullName) and in Bob Builder's skills.
    expect(sorted(await listed(api, 'SearchTerm=carpent'))).toEqual(['EMP-1001', 'EMP-1006']);
    expect(await listed(api, 'SearchTerm=zzzzqqq')).toEqual([]);
  });

  it('LIKE wildcards in the term are plain characters', async () => {
    expect(await listed(api, 'SearchTerm=%25')).toEqual([]);
    expect(await listed(api, 'SearchTerm=J_hn')).toEqual([]);
  });

  it('pages through best-match order with cursors; an explicit OrderBy wins over relevance', async () => {
    const seen: string[] = [];
    let after = '';
    for (let i = 0; i < 4; i++) {
      const r = await list(api, `SearchTerm=Jonh&First=1${after ? `&After=${after}` : ''}`);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.PageInfo.TotalCount).toBe(3);
      seen.push(...ext(r));
      if (!r.body.PageInfo.HasNextPage) break;
      after = r.body.PageInfo.EndCursor;
    }
    expect(seen).toEqual(['EMP-1003', 'EMP-1004', 'EMP-1001']);
    expect(await listed(api, 'SearchTerm=Jonh&OrderBy=ExternalId')).toEqual(['EMP-1001', 'EMP-1003', 'EMP-1004']);
    // A relevance cursor does not fit another term.
    const first = await list(api, 'SearchTerm=Jonh&First=1');
    expectValidation(await list(api, `SearchTerm=Smith&First=1&After=${first.body.PageInfo.EndCursor}`), 'After');
  });
});

// ---------------------------------------------------------------------------------------------------------

type Row = { ext: string; id: string; grade: number | undefined };

/** D6 ascending: typed value, missing last, ties by id. */
function byGradeAscending(rows: Row[]): string[] {
  return [...rows]
    .sort((a, b) => {
      if (a.grade === undefined || b.grade === undefined) {
        if (a.grade !== b.grade) return a.grade === undefined ? 1 : -1;
      } else if (a.grade !== b.grade) return a.grade - b.grade;
      return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
    })
    .map((r) => r.ext);
}

describe('ordering and keyset paging (D6)', () => {
  let api: ApiClient;
  let rows: Row[];
  const GRADES = [
    10,
    9,
    100,
    -1,
    2,
    9,
    10,
    undefined,
    0,
    2147483647,
    -2147483648,
    9,
    undefined,
    1,
    20,
    3,
    10,
    undefined,
    11,
    99,
    5,
    8,
    7,
    9,
  ];
  // ExternalIds in an order where code-point order differs from case-insensitive or numeric order.
  const EXTS = GRADES.map((_, i) =>
    i === 3 ? 'o-lower' : i === 5 ? 'O-Zed' : i === 7 ? 'O-é' : i === 9 ? 'O-X9' : i === 11 ? 'O-a' : `O-${String(i).padStart(2, '0')}`,
  );

  beforeAll(async () => {
    api = await (await createTenant(app)).client();
    const ids = await seed(
      api,
      GRADES.map((g, i) => ({ no: EXTS[i]!, values: g === undefined ? [] : [sv('grade', 'Integer', g)] })),
    );
    rows = GRADES.map((g, i) => ({ ext: EXTS[i]!, id: ids.get(EXTS[i]!)!, grade: g }));
  });

  /** Walks the whole list forward (First/After), checking flags and TotalCount on every page. */
  async function walkForward(query: string, size: number): Promise<string[]> {
    const out: string[] = [];
    let after: string | undefined;
    for (let page = 0; ; page++) {
      const r = await list(api, [query, `First=${size}`, after && `After=${after}`].filter(Boolean).join('&'));
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const p = r.body.PageInfo;
      expect(p.TotalCount).toBe(rows.length);
      expect(p.HasPreviousPage, `page ${page}`).toBe(page > 0);
      const remaining = rows.length - out.length;
      expect(r.body.Edges).toHaveLength(Math.min(size, remaining));
      expect(p.HasNextPage, `page ${page}`).toBe(remaining > size);
      expect(p.StartCursor).toBe(r.body.Edges[0].Cursor);
      expect(p.EndCursor).toBe(r.body.Edges.at(-1).Cursor);
      out.push(...ext(r));
      if (!p.HasNextPage) return out;
      after = p.EndCursor;
      expect(page).toBeLessThan(rows.length);
    }
  }

  /** Walks the whole list backward (Last/Before) from its end, returning it in list order. */
  async function walkBackward(query: string, size: number): Promise<string[]> {
    let out: string[] = [];
    let before: string | undefined;
    for (let page = 0; ; page++) {
      const r = await list(api, [query, `Last=${size}`, before && `Before=${before}`].filter(Boolean).join('&'));
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const p = r.body.PageInfo;
      expect(p.TotalCount).toBe(rows.length);
      expect(p.HasNextPage, `page ${page}`).toBe(page > 0);
      const remaining = rows.length - out.length;
      expect(r.body.Edges).toHaveLength(Math.min(size, remaining));
      expect(p.HasPreviousPage, `page ${page}`).toBe(remaining > size);
      out = [...ext(r), ...out];
      if (!p.HasPreviousPage) return out;
      before = p.StartCursor;
      expect(page).toBeLessThan(rows.length);
    }
  }

  it('OrderBy an Integer field is numeric (9 before 10), missing last; forward and backward walks agree', async () => {
    const expected = byGradeAscending(rows);
    expect(expected.indexOf('O-01')).toBeLessThan(expected.indexOf('O-00')); // 9 before 10
    const forward = await walkForward('OrderBy=grade', 5);
    expect(forward).toEqual(expected);
    expect(new Set(forward).size).toBe(rows.length);
    expect(forward.slice(-3).map((e) => rows.find((r) => r.ext === e)!.grade)).toEqual([undefined, undefined, undefined]);
    expect(await walkBackward('OrderBy=grade', 5)).toEqual(expected);
    expect(await walkForward('OrderBy=grade&OrderDirection=Ascending', 7)).toEqual(expected);
  });

  it('Descending is the exact reverse (missing first), walked forward and backward', async () => {
    const expected = byGradeAscending(rows).reverse();
    expect(await walkForward('OrderBy=grade&OrderDirection=Descending', 5)).toEqual(expected);
    expect(await walkBackward('OrderBy=grade&OrderDirection=descending', 4)).toEqual(expected);
  });

  it('After and Before together bound a window; flags stay exact', async () => {
    const expected = byGradeAscending(rows);
    const all = await list(api, 'OrderBy=grade&First=1000');
    const cursors = (all.body.Edges as any[]).map((e) => e.Cursor as string);
    const r = await list(api, `OrderBy=grade&After=${cursors[3]}&Before=${cursors[10]}&First=3`);
    expect(ext(r)).toEqual(expected.slice(4, 7));
    expect(r.body.PageInfo).toMatchObject({ HasNextPage: true, HasPreviousPage: true, TotalCount: rows.length });
    const l = await list(api, `OrderBy=grade&After=${cursors[3]}&Before=${cursors[10]}&Last=3`);
    expect(ext(l)).toEqual(expected.slice(7, 10));
    expect(l.body.PageInfo).toMatchObject({ HasNextPage: true, HasPreviousPage: true });
    const whole = await list(api, `OrderBy=grade&After=${cursors[3]}&Before=${cursors[10]}`);
    expect(ext(whole)).toEqual(expected.slice(4, 10));
    const empty = await list(api, `OrderBy=grade&After=${cursors.at(-1)}`);
    expect(empty.body).toEqual({
      PageInfo: { HasNextPage: false, HasPreviousPage: true, StartCursor: null, EndCursor: null, TotalCount: rows.length },
      Edges: [],
    });
  });

  it('no First or Last: 20 items', async () => {
    const r = await list(api, 'OrderBy=grade');
    expect(r.body.Edges).toHaveLength(20);
    expect(r.body.PageInfo).toMatchObject({ HasNextPage: true, HasPreviousPage: false, TotalCount: rows.length });
  });

  it('OrderBy Id and ExternalId (code-point order, the default)', async () => {
    const byId = [...rows].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).map((r) => r.ext);
    expect(await walkForward('OrderBy=Id', 6)).toEqual(byId);
    expect(await walkBackward('OrderBy=Id&OrderDirection=Descending', 6)).toEqual([...byId].reverse());
    const byExt = [...EXTS].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    expect(byExt.slice(0, 2)).toEqual(['O-00', 'O-01']);
    expect(byExt.slice(-5)).toEqual(['O-X9', 'O-Zed', 'O-a', 'O-é', 'o-lower']);
    expect(await walkForward('OrderBy=ExternalId', 6)).toEqual(byExt);
    expect(await walkForward('', 25)).toEqual(byExt);
    expect(await walkBackward('OrderBy=ExternalId&OrderDirection=Descending', 6)).toEqual([...byExt].reverse());
  });

  it("unknown OrderBy, another ordering's cursor, a garbage cursor, First/Last out of range: 400", async () => {
    expectValidation(await list(api, 'OrderBy=nope'), 'OrderBy');
    expectValidation(await list(api, 'OrderBy=Grade'), 'OrderBy'); // field keys are case-sensitive
    const byGrade = await list(api, 'OrderBy=grade&First=2');
    const cursor = byGrade.body.PageInfo.EndCursor;
    expectValidation(await list(api, `OrderBy=ExternalId&After=${cursor}`), 'After');
    expectValidation(await list(api, `After=${cursor}`), 'After');
    expectValidation(await list(api, `OrderBy=Id&Before=${cursor}`), 'Before');
    expectValidation(await list(api, 'After=not-a-cursor'), 'After');
    // Another list's cursor (structural entities, ordered by Key).
    expect((await api.put('/api/v1/structuralEntity', { Key: 'e-1', DisplayName: 'E', StructureTypeKey: 'company' })).status).toBe(201);
    const entityCursor = (await api.get('/api/v1/structuralEntity?First=1')).body.PageInfo.EndCursor;
    expect(entityCursor).toEqual(expect.any(String));
    expectValidation(await list(api, `After=${entityCursor}`), 'After');
    expectValidation(await list(api, 'First=1001'), 'First');
    expectValidation(await list(api, 'First=-1'), 'First');
    expectValidation(await list(api, 'First=2&Last=2'));
    expectValidation(await list(api, 'OrderDirection=Sideways'), 'OrderDirection');
    // The same cursor still works with its own ordering, in either direction.
    expect((await list(api, `OrderBy=grade&After=${cursor}&First=1`)).status).toBe(200);
    expect((await list(api, `OrderBy=grade&OrderDirection=Descending&After=${cursor}&First=1`)).status).toBe(200);
  });
});

describe('ordering by other types (D6)', () => {
  let api: ApiClient;
  let ids: Map<string, string>;
  beforeAll(async () => {
    api = await (await createTenant(app, { subjectFields: FIELDS })).client();
    ids = await seed(api, [
      {
        no: 'D-1',
        values: [
          sv('salary', 'Decimal', 10),
          sv('birthDate', 'Date', '2001-01-01'),
          skills('m', 'a'),
          sv('lastSeen', 'DateTime', '2024-05-01T10:00:00+02:00'),
        ],
      },
      {
        no: 'D-2',
        values: [
          sv('salary', 'Decimal', 3),
          sv('birthDate', 'Date', '1999-12-31'),
          skills('b'),
          sv('lastSeen', 'DateTime', '2024-05-01T09:00:00Z'),
        ],
      },
      { no: 'D-3', values: [sv('salary', 'Decimal', -2.5), sv('birthDate', 'Date', '2010-06-01'), skills('z', 'a')] },
      { no: 'D-4', values: [sv('salary', 'Decimal', 2.75), skills('B'), sv('lastSeen', 'DateTime', '2024-05-01T08:30:00Z')] },
      { no: 'D-5', values: [sv('salary', 'Decimal', 0)] },
    ]);
  });

  it('Decimal numerically, Date in time, DateTime by instant, an array field by its first value', async () => {
    expect(await listed(api, 'OrderBy=salary')).toEqual(['D-3', 'D-5', 'D-4', 'D-2', 'D-1']);
    expect(await listed(api, 'OrderBy=salary&OrderDirection=Descending')).toEqual(['D-1', 'D-2', 'D-4', 'D-5', 'D-3']);
    // Ties among the missing values by id.
    const missing = ids.get('D-4')! < ids.get('D-5')! ? ['D-4', 'D-5'] : ['D-5', 'D-4'];
    expect(await listed(api, 'OrderBy=birthDate')).toEqual(['D-2', 'D-1', 'D-3', ...missing]);
    // 10:00+02:00 = 08:00Z, before 08:30Z and 09:00Z.
    const noLastSeen = ids.get('D-3')! < ids.get('D-5')! ? ['D-3', 'D-5'] : ['D-5', 'D-3'];
    expect(await listed(api, 'OrderBy=lastSeen')).toEqual(['D-1', 'D-4', 'D-2', ...noLastSeen]);
    // First values: m, b, z, B → B < b < m < z (code points); D-5 has none.
    expect(await listed(api, 'OrderBy=skills')).toEqual(['D-4', 'D-2', 'D-1', 'D-3', 'D-5']);
  });
});

describe('ordering by a subject field added to the configuration later (D6, D3)', () => {
  // P24: a subject field added by an apply is indexed for every existing subject.
  it('lists every subject, the ones without a value last, and TotalCount agrees', async () => {
    const tenant = await createTenant(app);
    const api = await tenant.client();
    await seed(api, [{ no: 'N-1' }, { no: 'N-2' }, { no: 'N-3' }]);
    // Re-applying the tenant file with one more subject field (D3: applying upserts).
    await createTenant(app, {
      key: tenant.key,
      subjectFields: [...(FIELDS.slice(0, 5) as object[]), { key: 'level', name: 'Level', dataType: 'Integer' }],
    });
    await seed(api, [
      { no: 'N-4', values: [sv('level', 'Integer', 2)] },
      { no: 'N-5', values: [sv('level', 'Integer', 1)] },
    ]);
    const r = await list(api, 'OrderBy=level');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.PageInfo.TotalCount).toBe(5);
    expect(ext(r).slice(0, 2)).toEqual(['N-5', 'N-4']);
    expect(sorted(ext(r).slice(2))).toEqual(['N-1', 'N-2', 'N-3']);
  });
});

describe('TotalCount stays exact under writes (D6)', () => {
  it('page 1 counts n; after a new matching subject, page 2 counts n+1', async () => {
    const api = await (await createTenant(app, { structuralEntities: ENTITIES })).client();
    await seed(
      api,
      Array.from({ length: 6 }, (_, i) => ({ no: `W-${i}`, keys: ['ops'] })),
    );
    await seed(api, [{ no: 'W-elsewhere', keys: ['sales'] }]);
    const p1 = await list(api, 'StructuralEntityKeys=ops&First=3');
    expect(p1.body.PageInfo.TotalCount).toBe(6);
    const created = await api.post(UPSERT, {
      CustomFieldValues: [sv('employeeNumber', 'String', 'W-9'), sv('fullName', 'String', 'Late')],
      StructuralEntityKeys: ['ops'],
    });
    expect(created.status).toBe(201);
    const p2 = await list(api, `StructuralEntityKeys=ops&First=3&After=${p1.body.PageInfo.EndCursor}`);
    expect(p2.body.PageInfo.TotalCount).toBe(7);
    expect(ext(p2)).toEqual(['W-3', 'W-4', 'W-5']);
    // A location change and a PATCH count too.
    const moved = await api.put(`/api/v1/subject/${created.body.internalId}/structuralEntities`, { keys: ['north'] });
    expect(moved.status).toBe(200);
    expect((await list(api, 'StructuralEntityKeys=north&First=1')).body.PageInfo.TotalCount).toBe(1);
    await api.delete(`/api/v1/subject/${created.body.internalId}/structuralEntities?keys=ops`);
    expect((await list(api, 'StructuralEntityKeys=ops&First=1')).body.PageInfo.TotalCount).toBe(6);
    await api.patch(`/api/v2/subject/${created.body.internalId}`, { CustomFields: [sv('grade', 'Integer', 4)] });
    expect((await list(api, 'customFieldValueFilter.values[grade]=4')).body.PageInfo.TotalCount).toBe(1);
  });
});

describe('the same filter through REST and GraphQL (D11)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app, { subjectFields: FIELDS, structuralEntities: ENTITIES })).client();
    await seed(api, FILTER_SUBJECTS);
  });

  const QUERY = `query($keys: [String!], $desc: Boolean, $term: String, $filter: CustomFieldValueFilterInput, $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $dir: OrderDirection) {
    subjects(structuralEntityKeys: $keys, includeDescendants: $desc, searchTerm: $term, customFieldValueFilter: $filter,
             first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $dir) {
      totalCount
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { id subjectId externalId } }
    }
  }`;

  async function both(rest: string, vars: Record<string, unknown>) {
    const r = await list(api, rest);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const g = await api.gql(QUERY, vars);
    expect(g.status).toBe(200);
    expect(g.body.errors).toBeUndefined();
    const conn = g.body.data.subjects;
    expect(conn.edges.map((e: any) => e.node.subjectId)).toEqual(r.body.Edges.map((e: any) => e.Node.Id));
    expect(conn.edges.map((e: any) => e.node.externalId)).toEqual(ext(r));
    expect(conn.edges.map((e: any) => e.cursor)).toEqual(r.body.Edges.map((e: any) => e.Cursor));
    expect(conn.totalCount).toBe(r.body.PageInfo.TotalCount);
    expect(conn.pageInfo.hasNextPage).toBe(r.body.PageInfo.HasNextPage);
    expect(conn.pageInfo.hasPreviousPage).toBe(r.body.PageInfo.HasPreviousPage);
    return ext(r);
  }

  it('locations with descendants, an ExactAny custom field filter, ordering and paging', async () => {
    const rest =
      'StructuralEntityKeys=sales,ops&IncludeDescendants=true&customFieldValueFilter.values[grade]=5&customFieldValueFilter.values[skills]=go' +
      '&customFieldValueFilter.values[skills]=rust&customFieldValueFilter.match=ExactAny&OrderBy=grade&OrderDirection=Descending';
    const vars = {
      keys: ['sales', 'ops'],
      desc: true,
      filter: {
        values: [
          { key: 'grade', values: ['5'] },
          { key: 'skills', values: ['go', 'rust'] },
        ],
        match: 'EXACT_ANY',
      },
      orderBy: 'grade',
      dir: 'DESCENDING',
    };
    const all = await both(rest, vars);
    expect(all[0]).toBe('F-02');
    expect(sorted(all)).toEqual(['F-01', 'F-02', 'F-03', 'F-07']);
    const p1 = await both(`${rest}&First=2`, { ...vars, first: 2 });
    expect(p1).toEqual(all.slice(0, 2));
    const cursor = (await list(api, `${rest}&First=2`)).body.PageInfo.EndCursor;
    expect(await both(`${rest}&First=2&After=${cursor}`, { ...vars, first: 2, after: cursor })).toEqual(all.slice(2));
    expect(await both(`${rest}&Last=1&Before=${cursor}`, { ...vars, last: 1, before: cursor })).toEqual(all.slice(0, 1));
  });

  it('ExactAll default, search term, and the plain list', async () => {
    expect(
      await both('customFieldValueFilter.values[grade]=5&customFieldValueFilter.values[skills]=java', {
        filter: {
          values: [
            { key: 'grade', values: ['5'] },
            { key: 'skills', values: ['java'] },
          ],
        },
      }),
    ).toEqual(['F-01', 'F-03']);
    expect(await both('SearchTerm=F-0', { term: 'F-0' })).toHaveLength(7);
    expect(await both('', {})).toEqual(['F-01', 'F-02', 'F-03', 'F-04', 'F-05', 'F-06', 'F-07']);
  });

  it('GraphQL reports the same validation problems as BAD_REQUEST with the location', async () => {
    const g = await api.gql(QUERY, { filter: { values: [{ key: 'nope', values: ['1'] }] } });
    expect(g.status).toBe(200); // D4/D11: an expected error belongs to its field
    expect(g.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    expect(Object.keys(g.body.errors![0]!.extensions!['errors'])).toContain('customFieldValueFilter.values[nope]');
    const o = await api.gql(QUERY, { orderBy: 'nope' });
    expect(o.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    const s = await api.gql(QUERY, { term: 'x', filter: { values: [{ key: 'grade', values: ['5'] }] } });
    expect(s.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
  });
});

// Issue 8: one value of a single-value field in ExternalId order is read off the filter index, whose rows
// carry the subject's ExternalId sort key (migration 0007). The answers must be those of the general
// path: the same value listed twice takes it (two values), so both are compared page by page.
describe('a one-value filter in ExternalId order (issue 8: read off the filter index)', () => {
  const f = (v: string | number) => `customFieldValueFilter.values[grade]=${v}`;
  // ExternalIds whose code-point order differs from insertion order; grade 1 for every third subject.
  const EXTS = Array.from({ length: 30 }, (_, i) => `E-${String((i * 7) % 30).padStart(2, '0')}${i % 4 === 0 ? 'a' : ''}`);
  let api: ApiClient;
  let tenant: ReturnType<typeof tenantConfig>;

  beforeAll(async () => {
    // Matched by e-mail, so a subject's ExternalId can change.
    tenant = tenantConfig({ matchingFieldKeys: ['email'], externalIdFieldKey: 'employeeNumber', structuralEntities: ENTITIES });
    api = await (await createTenant(app, tenant)).client();
    for (const [i, no] of EXTS.entries()) {
      const r = await api.post(UPSERT, {
        CustomFieldValues: [
          sv('employeeNumber', 'String', no),
          sv('fullName', 'String', `Name ${29 - i}`),
          sv('email', 'String', `p${i}@example.com`),
          sv('grade', 'Integer', i % 3 === 0 ? 1 : 2),
        ],
        StructuralEntityKeys: [i % 2 === 0 ? 'sales' : 'ops'],
      });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    }
  });

  /** Every ExternalId of `query`, walked with pages of `size` (forward, or backward with `back`). */
  async function walk(query: string, size: number, back = false): Promise<string[]> {
    let out: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 40; page++) {
      const r = await list(
        api,
        [query, `${back ? 'Last' : 'First'}=${size}`, cursor && `${back ? 'Before' : 'After'}=${cursor}`].filter(Boolean).join('&'),
      );
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const p = r.body.PageInfo;
      out = back ? [...ext(r), ...out] : [...out, ...ext(r)];
      expect(p.TotalCount).toBeGreaterThanOrEqual(out.length);
      expect(back ? p.HasNextPage : p.HasPreviousPage, `page ${page}`).toBe(page > 0);
      if (!(back ? p.HasPreviousPage : p.HasNextPage)) {
        expect(out).toHaveLength(p.TotalCount);
        return out;
      }
      cursor = back ? p.StartCursor : p.EndCursor;
    }
    throw new Error('no last page');
  }

  const expected = (grade: number, pick: (i: number) => boolean = () => true) =>
    EXTS.filter((_, i) => (i % 3 === 0 ? 1 : 2) === grade && pick(i)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

  it('pages forward and backward, ascending and descending, exactly as the general path does', async () => {
    for (const grade of [1, 2]) {
      const want = expected(grade);
      for (const q of [f(grade), `${f(grade)}&${f(grade)}`, `${f(grade)}&OrderBy=employeeNumber`]) {
        expect(await walk(q, 4), q).toEqual(want);
        expect(await walk(q, 3, true), q).toEqual(want);
        expect(await walk(`${q}&OrderDirection=Descending`, 4), q).toEqual([...want].reverse());
      }
      expect(await walk(`${f(grade)}&StructuralEntityKeys=sales`, 2)).toEqual(expected(grade, (i) => i % 2 === 0));
    }
    expect(await listed(api, f(3))).toEqual([]);
  });

  it('a cursor of one path continues on the other', async () => {
    const want = expected(2);
    const fast = await list(api, `${f(2)}&First=5`);
    const general = await list(api, `${f(2)}&${f(2)}&First=5&After=${fast.body.PageInfo.EndCursor}`);
    expect([...ext(fast), ...ext(general)]).toEqual(want.slice(0, 10));
    const back = await list(api, `${f(2)}&First=5&After=${general.body.PageInfo.EndCursor}`);
    expect(ext(back)).toEqual(want.slice(10, 15));
  });

  it('follows a changed ExternalId, and a tenant apply that makes another field the ExternalId', async () => {
    // p3 (grade 1) gets the smallest ExternalId of all.
    expect(
      (
        await api.post(UPSERT, {
          CustomFieldValues: [
            sv('employeeNumber', 'String', 'A-first'),
            sv('fullName', 'String', 'Name 26'),
            sv('email', 'String', 'p3@example.com'),
            sv('grade', 'Integer', 1),
          ],
        })
      ).status,
    ).toBe(200);
    const renamed = EXTS.map((e, i) => (i === 3 ? 'A-first' : e));
    const byExt = renamed.filter((_, i) => i % 3 === 0).sort();
    expect(await walk(f(1), 3)).toEqual(byExt);
    expect((await walk(f(1), 3))[0]).toBe('A-first');

    // fullName becomes the ExternalId: "Name 29 - i", so the order by ExternalId is by that text.
    await applyTenantFile(
      app.handle.db,
      new SecretBox(app.handle.db, undefined),
      {
        tenants: [{ ...tenant, externalIdFieldKey: 'fullName' }],
      },
      { listen: app.handle.listen },
    );
    const names = EXTS.map((_, i) => `Name ${29 - i}`)
      .filter((_, i) => i % 3 === 0)
      .sort();
    expect(await walk(f(1), 3)).toEqual(names);
    expect(await walk(`${f(1)}&${f(1)}`, 3)).toEqual(names);
    expect(await walk(`${f(1)}&OrderDirection=Descending`, 2)).toEqual([...names].reverse());
  });

  it('migration 0007 gives rows written before it their ExternalId sort key (down, then up)', async () => {
    const before = await walk(f(2), 4);
    const m = migrations['0007_subject_list_key']!;
    await m.down!(app.handle.db);
    await m.up(app.handle.db);
    const unset = await sql<{ n: number }>`SELECT count(*)::int AS n FROM subject_value WHERE list_key IS NULL`.execute(app.handle.db);
    expect(unset.rows[0]!.n).toBe(0);
    expect(await walk(f(2), 4)).toEqual(before);
  });
});

// P164: the REST list's answer is written from the page it loads, not from its executed GraphQL document.
// Byte for byte the same as the document's answer shaped by the route's `respond`, over filters, orders,
// cursors, both ends, page sizes on either side of the slicing bound (P65), an empty page, and values that
// JSON must escape.
describe('the REST list written from its page (P164)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app, { subjectFields: FIELDS, structuralEntities: ENTITIES })).client();
    await seed(api, [
      ...FILTER_SUBJECTS,
      { no: 'Q-"01"', name: 'Zoë \\ "quoted" \u2028 <tab>\t', values: [sv('email', 'String', '\u0007é@example.org')] },
      ...Array.from({ length: 105 }, (_, i) => ({ no: `M-${String(i).padStart(3, '0')}` })),
    ]);
  });

  it("answers exactly what executing the route's GraphQL document and its respond answer", async () => {
    const route = subjectRoutes.find((r) => r.operationId === 'getSubjects')!;
    const document = print(route.operation);
    const raw = async (query: string) => {
      const res = await fetch(`${api.url}${LIST}${query ? `?${query}` : ''}`, { headers: { authorization: `Bearer ${api.token}` } });
      return { status: res.status, text: await res.text() };
    };
    const page2 = JSON.parse((await raw('First=2')).text) as { PageInfo: { EndCursor: string } };
    const last3 = JSON.parse((await raw('Last=3')).text) as { PageInfo: { StartCursor: string } };
    const cases: [string, Record<string, unknown>][] = [
      ['', {}],
      ['First=0', { first: 0 }],
      ['First=2', { first: 2 }],
      [`First=2&After=${encodeURIComponent(page2.PageInfo.EndCursor)}`, { first: 2, after: page2.PageInfo.EndCursor }],
      ['Last=3', { last: 3 }],
      [`Last=2&Before=${encodeURIComponent(last3.PageInfo.StartCursor)}`, { last: 2, before: last3.PageInfo.StartCursor }],
      ['First=100', { first: 100 }],
      ['First=101', { first: 101 }],
      ['OrderBy=grade&OrderDirection=Descending', { orderBy: 'grade', orderDirection: 'DESCENDING' }],
      ['OrderBy=Id&First=7', { orderBy: 'Id', first: 7 }],
      ['StructuralEntityKeys=sales&IncludeDescendants=true', { structuralEntityKeys: ['sales'], includeDescendants: true }],
      ['SearchTerm=quoted', { searchTerm: 'quoted' }],
      ['customFieldValueFilter.values[skills]=java', { customFieldValueFilter: { values: [{ key: 'skills', values: ['java'] }] } }],
      ['customFieldValueFilter.values[grade]=404', { customFieldValueFilter: { values: [{ key: 'grade', values: ['404'] }] } }],
    ];
    for (const [query, variables] of cases) {
      const rest = await raw(query);
      const executed = await api.gql(document, variables);
      expect(executed.body.errors, query).toBeUndefined();
      expect(rest.status, query).toBe(200);
      expect(rest.text, query).toBe(JSON.stringify(route.respond(executed.body.data).body));
    }
    // The pages compared held the values JSON escapes (the last subject by ExternalId), a multi-value field,
    // booleans, decimals and dates.
    const last = JSON.parse((await raw('Last=3')).text) as { Edges: { Node: { ExternalId: string } }[] };
    expect(last.Edges.map((e) => e.Node.ExternalId).at(-1)).toBe('Q-"01"');
  });
});
