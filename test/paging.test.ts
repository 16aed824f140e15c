import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type ApiResponse, type TestApp, createTenant, startApp, expectProblem } from './helpers.js';

// D6 paging over the structural entity list, through REST (GET /api/v1/structuralEntity) and GraphQL
// (structuralEntities and StructuralEntity.children). Every page of every walk is checked exactly.

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

const PATH = '/api/v1/structuralEntity';
const pad = (n: number) => String(n).padStart(2, '0');
const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

// ---------------------------------------------------------------------------------------------------
// The data set: 57 entities over three levels, with ties in DisplayName and Depth, and custom values of
// several types (some missing), so that typed ordering, missing values and tie-breaking all show.

interface Entity {
  key: string;
  displayName: string;
  type: 'company' | 'department';
  parentKey: string | null;
  depth: number;
  headcount?: number;
  opened?: string;
  budget?: number;
  costCenter?: string;
}

const N = 57;
const NAMES = ['Alpha', 'beta', 'Gamma', 'delta', 'Épsilon', 'Zeta'];

function buildEntities(): Entity[] {
  const out: Entity[] = [];
  for (let i = 0; i < N; i++) {
    const key = `e${pad(i)}`;
    const parentKey = i < 5 ? null : i < 35 ? 'e00' : `e${pad(5 + ((i - 35) % 10))}`;
    const e: Entity = {
      key,
      // Period 18: e00, e18, e36 and e54 share a name (ties broken by key, D6).
      displayName: `${NAMES[i % 6]} ${(i * 5) % 9}`,
      type: i < 3 ? 'company' : 'department',
      parentKey,
      depth: i < 5 ? 1 : i < 35 ? 2 : 3,
    };
    if (e.type === 'department') {
      // -3..19 with ties, 9 (e14) and 10 (e19) among them; missing for every sixth.
      if (i % 6 !== 0) e.headcount = ((i * 37) % 23) - 3;
      if (i % 5 !== 0) e.opened = `${2000 + ((i * 7) % 30)}-${pad(1 + ((i * 5) % 12))}-${pad(1 + ((i * 11) % 28))}`;
      if (i % 7 !== 0) e.budget = ((i * 13) % 17) + 0.25 * (i % 4);
      if (i % 8 !== 0) e.costCenter = `${i % 3 === 0 ? 'cc' : 'CC'}${(i * 3) % 10}`;
    }
    out.push(e);
  }
  return out;
}

const ENTITIES = buildEntities();

/** The tenant file's structuralEntities (D3: upserted like the REST upsert). */
function tenantEntities() {
  return ENTITIES.map((e) => ({
    key: e.key,
    displayName: e.displayName,
    structureTypeKey: e.type,
    ...(e.parentKey ? { parentKey: e.parentKey } : {}),
    customFieldValues: [
      ...(e.headcount !== undefined ? [{ key: 'headcount', value: { Integer: { Value: e.headcount } } }] : []),
      ...(e.opened !== undefined ? [{ key: 'opened', value: { Date: { Value: e.opened } } }] : []),
      ...(e.budget !== undefined ? [{ key: 'budget', value: { Decimal: { Value: e.budget } } }] : []),
      ...(e.costCenter !== undefined ? [{ key: 'costCenter', value: { String: { Value: e.costCenter } } }] : []),
    ],
  }));
}

// D6: strings by ordinal (code point) order, numbers numerically, dates in time, missing values last
// in Ascending, ties broken by the id (the key); Descending is the exact reverse.
const ordinal = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
type Value = string | number | undefined;
function expectedOrder(entities: Entity[], value: (e: Entity) => Value, direction: 'asc' | 'desc' = 'asc'): string[] {
  const sorted = [...entities].sort((x, y) => {
    const a = value(x);
    const b = value(y);
    if (a === undefined && b !== undefined) return 1;
    if (a !== undefined && b === undefined) return -1;
    if (a !== undefined && b !== undefined && a !== b) return typeof a === 'number' ? a - (b as number) : ordinal(a, b as string);
    return ordinal(x.key, y.key);
  });
  const keys = sorted.map((e) => e.key);
  return direction === 'asc' ? keys : keys.reverse();
}

const ORDERINGS: Record<string, (e: Entity) => Value> = {
  Key: (e) => e.key,
  DisplayName: (e) => e.displayName,
  Depth: (e) => e.depth,
  StructureTypeKey: (e) => e.type,
  headcount: (e) => e.headcount,
  opened: (e) => e.opened, // yyyy-MM-dd: ordinal order is time order
  budget: (e) => e.budget,
  costCenter: (e) => e.costCenter,
};

// ---------------------------------------------------------------------------------------------------
// One page, whatever the transport, normalised.

interface PageArgs {
  first?: number;
  last?: number;
  after?: string;
  before?: string;
  orderBy?: string;
  orderDirection?: string;
}

interface Page {
  keys: string[];
  cursors: string[];
  hasNextPage: boolean;
  hasPreviousPage: boolean;
  startCursor: string | null;
  endCursor: string | null;
  totalCount: number;
}

type Fetch = (args: PageArgs) => Promise<Page>;

function restQuery(args: PageArgs, filters: Record<string, string> = {}): string {
  const q = new URLSearchParams(filters);
  if (args.first !== undefined) q.set('First', String(args.first));
  if (args.last !== undefined) q.set('Last', String(args.last));
  if (args.after !== undefined) q.set('After', args.after);
  if (args.before !== undefined) q.set('Before', args.before);
  if (args.orderBy !== undefined) q.set('OrderBy', args.orderBy);
  if (args.orderDirection !== undefined) q.set('OrderDirection', args.orderDirection);
  const s = q.toString();
  return s ? `${PATH}?${s}` : PATH;
}

/** REST pages of the entity list, with fixed filters. */
function restFetch(api: ApiClient, filters: Record<string, string> = {}): Fetch {
  return async (args) => {
    const r = await api.get(restQuery(args, filters));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const edges = r.body.Edges as { Cursor: string; Node: { Key: string } }[];
    return {
      keys: edges.map((e) => e.Node.Key),
      cursors: edges.map((e) => e.Cursor),
      hasNextPage: r.body.PageInfo.HasNextPage,
      hasPreviousPage: r.body.PageInfo.HasPreviousPage,
      startCursor: r.body.PageInfo.StartCursor,
      endCursor: r.body.PageInfo.EndCursor,
      totalCount: r.body.PageInfo.TotalCount,
    };
  };
}

const CONNECTION = 'totalCount pageInfo { hasNextPage hasPreviousPage startCursor endCursor } edges { cursor node { key } }';
const PAGE_VARS = '$first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection';
const PAGE_ARGS = 'first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection';

function gqlPage(conn: any): Page {
  return {
    keys: conn.edges.map((e: any) => e.node.key),
    cursors: conn.edges.map((e: any) => e.cursor),
    hasNextPage: conn.pageInfo.hasNextPage,
    hasPreviousPage: conn.pageInfo.hasPreviousPage,
    startCursor: conn.pageInfo.startCursor,
    endCursor: conn.pageInfo.endCursor,
    totalCount: conn.totalCount,
  };
}

/** GraphQL: structuralEntities, or the children of `parentKey`. */
function gqlFetch(api: ApiClient, parentKey?: string): Fetch {
  const query = parentKey
    ? `query(${PAGE_VARS}, $key: String!) { structuralEntity(key: $key) { children(${PAGE_ARGS}) { ${CONNECTION} } } }`
    : `query(${PAGE_VARS}) { structuralEntities(${PAGE_ARGS}) { ${CONNECTION} } }`;
  return async (args) => {
    const r = await api.gql<any>(query, { ...args, ...(parentKey ? { key: parentKey } : {}) });
    expect(r.status).toBe(200);
    expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
    return gqlPage(parentKey ? r.body.data.structuralEntity.children : r.body.data.structuralEntities);
  };
}

/** Checks the page's own consistency: StartCursor/EndCursor are its edges' (null when empty, D6). */
function checkCursors(p: Page) {
  expect(p.startCursor).toBe(p.cursors[0] ?? null);
  expect(p.endCursor).toBe(p.cursors[p.cursors.length - 1] ?? null);
  expect(new Set(p.cursors).size).toBe(p.cursors.length);
}

/**
 * D6: walks forward with First/After from the start, checking every page exactly (items, TotalCount,
 * HasNextPage, HasPreviousPage), then the empty page after the end. Returns each item's cursor.
 */
async function walkForward(fetch: Fetch, expected: string[], size: number, extra: PageArgs = {}): Promise<string[]> {
  const cursors: string[] = [];
  let after: string | undefined;
  let offset = 0;
  for (let pages = 0; ; pages++) {
    expect(pages).toBeLessThanOrEqual(expected.length / Math.max(size, 1) + 1);
    const p = await fetch({ ...extra, first: size, ...(after !== undefined ? { after } : {}) });
    const want = expected.slice(offset, offset + size);
    expect(p.keys, `page at ${offset}`).toEqual(want);
    expect(p.totalCount).toBe(expected.length);
    expect(p.hasPreviousPage, `HasPreviousPage at ${offset}`).toBe(offset > 0);
    expect(p.hasNextPage, `HasNextPage at ${offset}`).toBe(offset + want.length < expected.length);
    checkCursors(p);
    cursors.push(...p.cursors);
    offset += want.length;
    if (!p.hasNextPage) break;
    after = p.endCursor!;
  }
  expect(offset).toBe(expected.length);
  if (cursors.length > 0) {
    // After the last item: an empty page that still knows what lies before it.
    const beyond = await fetch({ ...extra, first: size, after: cursors[cursors.length - 1]! });
    expect(beyond).toEqual({
      keys: [],
      cursors: [],
      hasNextPage: false,
      hasPreviousPage: true,
      startCursor: null,
      endCursor: null,
      totalCount: expected.length,
    });
  }
  return cursors;
}

/** D6: the mirror image with Last/Before from the end, then the empty page before the start. */
async function walkBackward(fetch: Fetch, expected: string[], size: number, extra: PageArgs = {}): Promise<string[]> {
  const cursors: string[] = [];
  let before: string | undefined;
  let end = expected.length;
  for (let pages = 0; ; pages++) {
    expect(pages).toBeLessThanOrEqual(expected.length / Math.max(size, 1) + 1);
    const p = await fetch({ ...extra, last: size, ...(before !== undefined ? { before } : {}) });
    const start = Math.max(0, end - size);
    const want = expected.slice(start, end);
    expect(p.keys, `page ending at ${end}`).toEqual(want);
    expect(p.totalCount).toBe(expected.length);
    expect(p.hasNextPage, `HasNextPage ending at ${end}`).toBe(end < expected.length);
    expect(p.hasPreviousPage, `HasPreviousPage ending at ${end}`).toBe(start > 0);
    checkCursors(p);
    cursors.unshift(...p.cursors);
    end = start;
    if (!p.hasPreviousPage) break;
    before = p.startCursor!;
  }
  expect(end).toBe(0);
  if (cursors.length > 0) {
    const beyond = await fetch({ ...extra, last: size, before: cursors[0]! });
    expect(beyond).toEqual({
      keys: [],
      cursors: [],
      hasNextPage: true,
      hasPreviousPage: false,
      startCursor: null,
      endCursor: null,
      totalCount: expected.length,
    });
  }
  return cursors;
}

/** Both walks, agreeing on each item's cursor. */
async function walkBoth(fetch: Fetch, expected: string[], size: number, extra: PageArgs = {}) {
  const forward = await walkForward(fetch, expected, size, extra);
  const backward = await walkBackward(fetch, expected, size, extra);
  expect(backward).toEqual(forward);
  return forward;
}

/** D5/D6: a 400 problem+json naming one of `locations`. */
function expect400(r: ApiResponse, ...locations: string[]) {
  const named = Object.keys(expectProblem(r, 400).errors ?? {});
  expect(
    named.some((n) => locations.includes(n)),
    `errors ${JSON.stringify(r.body.errors)} should name ${locations.join(' or ')}`,
  ).toBe(true);
}

// ---------------------------------------------------------------------------------------------------

describe('REST: forward and backward walks (D6)', () => {
  let api: ApiClient;
  let fetch: Fetch;
  beforeAll(async () => {
    api = await (await createTenant(app, { structuralEntities: tenantEntities() })).client();
    fetch = restFetch(api);
  });

  it('the data set is what the tests expect', async () => {
    const all = await api.get(`${PATH}?First=1000`);
    expect(all.body.PageInfo.TotalCount).toBe(N);
    const byKey = new Map((all.body.Edges as any[]).map((e) => [e.Node.Key, e.Node]));
    for (const e of ENTITIES) {
      const n = byKey.get(e.key);
      expect(n, e.key).toBeDefined();
      expect(n.Depth).toBe(e.depth);
      expect(n.ParentKey).toBe(e.parentKey);
      expect(n.CustomFieldValues.find((v: any) => v.Field.Key === 'headcount')?.Value.Value).toBe(e.headcount);
    }
  });

  // D6: Relay cursor connections with exact HasNextPage/HasPreviousPage; default order by Key.
  it('default order (Key): pages of 7, forward and backward, no duplicates or gaps', async () => {
    const expected = expectedOrder(ENTITIES, ORDERINGS.Key!);
    const cursors = await walkBoth(fetch, expected, 7);
    expect(new Set(cursors).size).toBe(N);
  });

  it('pages of 19 (57 = 3 × 19: the last page is full and still says HasNextPage false)', async () => {
    await walkBoth(fetch, expectedOrder(ENTITIES, ORDERINGS.Key!), 19);
  });

  it('one page holding everything, and pages of 1', async () => {
    await walkBoth(fetch, expectedOrder(ENTITIES, ORDERINGS.Key!), 1000);
    await walkBoth(
      restFetch(api, { Depth: '1' }),
      expectedOrder(
        ENTITIES.filter((e) => e.depth === 1),
        ORDERINGS.Key!,
      ),
      1,
    );
  });

  // D6: neither First nor Last given: First = 20.
  it('default First is 20 when neither First nor Last is given', async () => {
    const expected = expectedOrder(ENTITIES, ORDERINGS.Key!);
    const p = await fetch({});
    expect(p.keys).toEqual(expected.slice(0, 20));
    expect(p).toMatchObject({ hasNextPage: true, hasPreviousPage: false, totalCount: N });
    const next = await fetch({ after: p.endCursor! });
    expect(next.keys).toEqual(expected.slice(20, 40));
    expect(next).toMatchObject({ hasNextPage: true, hasPreviousPage: true });
  });

  // D6: StartCursor/EndCursor are null on an empty page; the flags stay exact.
  it('First=0 and Last=0: empty pages with exact flags and null cursors', async () => {
    const expected = expectedOrder(ENTITIES, ORDERINGS.Key!);
    const cursors = await walkForward(fetch, expected, 1000);
    const empty = { keys: [], cursors: [], startCursor: null, endCursor: null, totalCount: N };
    expect(await fetch({ first: 0 })).toEqual({ ...empty, hasNextPage: true, hasPreviousPage: false });
    expect(await fetch({ last: 0 })).toEqual({ ...empty, hasNextPage: false, hasPreviousPage: true });
    expect(await fetch({ first: 0, after: cursors[10]! })).toEqual({ ...empty, hasNextPage: true, hasPreviousPage: true });
    expect(await fetch({ first: 0, after: cursors[N - 1]! })).toEqual({ ...empty, hasNextPage: false, hasPreviousPage: true });
    expect(await fetch({ last: 0, before: cursors[0]! })).toEqual({ ...empty, hasNextPage: true, hasPreviousPage: false });
  });

  // D6: After/Before follow the Relay algorithm; HasNextPage/HasPreviousPage are exact, not the Relay shortcut.
  it('After and Before together bound a window; flags look at the whole list', async () => {
    const expected = expectedOrder(ENTITIES, ORDERINGS.Key!);
    const c = await walkForward(fetch, expected, 1000);
    const w = (args: PageArgs) => fetch(args);
    expect(await w({ first: 5, after: c[10]!, before: c[30]! })).toMatchObject({
      keys: expected.slice(11, 16),
      hasNextPage: true,
      hasPreviousPage: true,
      totalCount: N,
    });
    expect(await w({ last: 5, after: c[10]!, before: c[30]! })).toMatchObject({
      keys: expected.slice(25, 30),
      hasNextPage: true,
      hasPreviousPage: true,
      totalCount: N,
    });
    expect(await w({ first: 30, after: c[10]!, before: c[20]! })).toMatchObject({
      keys: expected.slice(11, 20),
      hasNextPage: true,
      hasPreviousPage: true,
    });
    expect(await w({ last: 30, after: c[10]!, before: c[20]! })).toMatchObject({
      keys: expected.slice(11, 20),
      hasNextPage: true,
      hasPreviousPage: true,
    });
    expect(await w({ first: 5, after: c[10]!, before: c[11]! })).toEqual({
      keys: [],
      cursors: [],
      hasNextPage: true,
      hasPreviousPage: true,
      startCursor: null,
      endCursor: null,
      totalCount: N,
    });
    expect(await w({ last: 5, before: c[3]! })).toMatchObject({ keys: expected.slice(0, 3), hasNextPage: true, hasPreviousPage: false });
    expect(await w({ first: 5, before: c[3]! })).toMatchObject({ keys: expected.slice(0, 3), hasNextPage: true, hasPreviousPage: false });
    expect(await w({ first: 5, after: c[53]! })).toMatchObject({ keys: expected.slice(54), hasNextPage: false, hasPreviousPage: true });
    expect(await w({ last: 5, after: c[53]! })).toMatchObject({ keys: expected.slice(54), hasNextPage: false, hasPreviousPage: true });
    expect(await w({ first: 10, after: c[50]!, before: c[56]! })).toMatchObject({
      keys: expected.slice(51, 56),
      hasNextPage: true,
      hasPreviousPage: true,
    });
    expect(await w({ last: 2, after: c[0]!, before: c[N - 1]! })).toMatchObject({
      keys: expected.slice(N - 3, N - 1),
      hasNextPage: true,
      hasPreviousPage: true,
    });
  });

  it('a cursor from the middle of a tied ordering continues right after its item (keyset)', async () => {
    const byName = expectedOrder(ENTITIES, ORDERINGS.DisplayName!);
    const c = await walkForward(fetch, byName, 1000, { orderBy: 'DisplayName' });
    // The position of byName[20] is (its name, its key): the next page starts right after it.
    const p = await fetch({ orderBy: 'DisplayName', first: 3, after: c[20]! });
    expect(p.keys).toEqual(byName.slice(21, 24));
  });

  // D6: TotalCount is the number of items matching the filters, ignoring cursors and page size.
  it('TotalCount is the filtered count on every page of a filtered walk', async () => {
    const filters: [Record<string, string>, (e: Entity) => boolean][] = [
      [{ ParentKey: 'e00' }, (e) => e.parentKey === 'e00'],
      [{ Depth: '3' }, (e) => e.depth === 3],
      [{ SubjectAssignable: 'false' }, (e) => e.type === 'company'],
      [{ StructureTypeKey: 'department', Depth: '2' }, (e) => e.type === 'department' && e.depth === 2],
    ];
    for (const [f, keep] of filters) {
      const subset = ENTITIES.filter(keep);
      expect(subset.length).toBeGreaterThan(0);
      await walkBoth(restFetch(api, f), expectedOrder(subset, ORDERINGS.Key!), 6);
      await walkForward(restFetch(api, f), expectedOrder(subset, ORDERINGS.headcount!, 'desc'), 8, {
        orderBy: 'headcount',
        orderDirection: 'Descending',
      });
    }
  });

  it('an empty list: no edges, both flags false, null cursors, TotalCount 0', async () => {
    const none = restFetch(api, { StructureTypeKey: 'nothing' });
    const empty = { keys: [], cursors: [], hasNextPage: false, hasPreviousPage: false, startCursor: null, endCursor: null, totalCount: 0 };
    expect(await none({})).toEqual(empty);
    expect(await none({ first: 0 })).toEqual(empty);
    expect(await none({ last: 5 })).toEqual(empty);
    expect(await none({ last: 0 })).toEqual(empty);
  });
});

describe('REST: OrderBy and OrderDirection (D6)', () => {
  let api: ApiClient;
  let fetch: Fetch;
  beforeAll(async () => {
    api = await (await createTenant(app, { structuralEntities: tenantEntities() })).client();
    fetch = restFetch(api);
  });

  // D6: Descending is the exact reverse of Ascending (missing values first).
  it.each(['DisplayName', 'Depth', 'StructureTypeKey', 'headcount', 'opened', 'budget', 'costCenter'])(
    'OrderBy %s: Ascending and Descending walks; Descending is the exact reverse',
    async (orderBy) => {
      const asc = expectedOrder(ENTITIES, ORDERINGS[orderBy]!);
      const desc = expectedOrder(ENTITIES, ORDERINGS[orderBy]!, 'desc');
      expect(desc).toEqual([...asc].reverse());
      await walkBoth(fetch, asc, 10, { orderBy });
      await walkBoth(fetch, desc, 10, { orderBy, orderDirection: 'Descending' });
      // Ascending is the default direction.
      expect(await fetch({ orderBy, orderDirection: 'Ascending', first: 1000 })).toEqual(await fetch({ orderBy, first: 1000 }));
    },
  );

  // D6: strings by ordinal (code-point) order; ties broken by id.
  it('DisplayName orders by code point, ties by key', async () => {
    const p = await fetch({ orderBy: 'DisplayName', first: 1000 });
    // 'Z' < 'b' < 'É' in code points; a culture-aware order would put 'beta' first.
    const names = p.keys.map((k) => ENTITIES.find((e) => e.key === k)!.displayName);
    expect(names.indexOf('Zeta 7')).toBeLessThan(names.indexOf('beta 5'));
    expect(names.findIndex((n) => n.startsWith('delta'))).toBeLessThan(names.findIndex((n) => n.startsWith('Épsilon')));
    // e00, e18, e36, e54 are all "Alpha 0": they come in key order.
    expect(p.keys.filter((k) => ['e00', 'e18', 'e36', 'e54'].includes(k))).toEqual(['e00', 'e18', 'e36', 'e54']);
    expect(p.keys.slice(0, 4)).toEqual(['e00', 'e18', 'e36', 'e54']);
  });

  // D6: typed fields sort by their type; missing values last in Ascending.
  // P14: a custom field key orders structural entities by its type.
  it('an Integer field orders numerically (9 before 10), missing values last (Ascending) or first (Descending)', async () => {
    const asc = (await fetch({ orderBy: 'headcount', first: 1000 })).keys;
    const desc = (await fetch({ orderBy: 'headcount', orderDirection: 'Descending', first: 1000 })).keys;
    expect(ENTITIES.find((e) => e.key === 'e14')!.headcount).toBe(9);
    expect(ENTITIES.find((e) => e.key === 'e19')!.headcount).toBe(10);
    expect(asc.indexOf('e14')).toBeLessThan(asc.indexOf('e19'));
    expect(desc.indexOf('e19')).toBeLessThan(desc.indexOf('e14'));
    const missing = ENTITIES.filter((e) => e.headcount === undefined)
      .map((e) => e.key)
      .sort(ordinal);
    expect(missing.length).toBeGreaterThan(5);
    expect(asc.slice(-missing.length)).toEqual(missing);
    expect(desc.slice(0, missing.length)).toEqual([...missing].reverse());
    expect(desc).toEqual([...asc].reverse());
    // The smallest is negative: a text order would not put -3 first.
    expect(ENTITIES.find((e) => e.key === asc[0])!.headcount).toBe(-3);
  });

  it('a Date field orders in time, a Decimal numerically (2.5 before 10.25)', async () => {
    const opened = (await fetch({ orderBy: 'opened', first: 1000 })).keys.map((k) => ENTITIES.find((e) => e.key === k)!.opened);
    const present = opened.filter((v): v is string => v !== undefined);
    expect(present).toEqual([...present].sort(ordinal));
    expect(opened.slice(present.length).every((v) => v === undefined)).toBe(true);
    const budgets = (await fetch({ orderBy: 'budget', first: 1000 })).keys.map((k) => ENTITIES.find((e) => e.key === k)!.budget);
    const nums = budgets.filter((v): v is number => v !== undefined);
    expect(nums).toEqual([...nums].sort((a, b) => a - b));
    expect(nums.some((v) => v >= 10) && nums.some((v) => v < 10)).toBe(true);
  });

  // D6: OrderDirection is Ascending or Descending, case-insensitive. D5: parameter names too.
  it('OrderDirection is case-insensitive', async () => {
    const desc = expectedOrder(ENTITIES, ORDERINGS.DisplayName!, 'desc').slice(0, 10);
    for (const dir of ['Descending', 'descending', 'DESCENDING', 'dEsCeNdInG']) {
      const r = await api.get(`${PATH}?OrderBy=DisplayName&OrderDirection=${dir}&First=10`);
      expect(r.status).toBe(200);
      expect(
        r.body.Edges.map((e: any) => e.Node.Key),
        dir,
      ).toEqual(desc);
    }
    const asc = expectedOrder(ENTITIES, ORDERINGS.DisplayName!).slice(0, 10);
    for (const dir of ['ascending', 'ASCENDING']) {
      const r = await api.get(`${PATH}?orderby=DisplayName&orderdirection=${dir}&first=10`);
      expect(
        r.body.Edges.map((e: any) => e.Node.Key),
        dir,
      ).toEqual(asc);
    }
    expect400(await api.get(`${PATH}?OrderDirection=Down`), 'OrderDirection');
    expect400(await api.get(`${PATH}?OrderDirection=`), 'OrderDirection');
  });

  // D6: OrderBy is Key, DisplayName, Depth, StructureTypeKey or a custom field key; anything else 400.
  it('unknown OrderBy: 400 naming OrderBy', async () => {
    for (const orderBy of ['nope', 'grade', 'constructor', 'toString', '__proto__', 'Head count']) {
      expect400(await api.get(`${PATH}?OrderBy=${encodeURIComponent(orderBy)}`), 'OrderBy');
    }
  });
});

describe('REST: bounds and bad cursors (D6)', () => {
  let api: ApiClient;
  let keyCursors: string[];
  let nameCursors: string[];
  beforeAll(async () => {
    api = await (await createTenant(app, { structuralEntities: tenantEntities() })).client();
    keyCursors = (await restFetch(api)({ first: 1000 })).cursors;
    nameCursors = (await restFetch(api)({ first: 1000, orderBy: 'DisplayName' })).cursors;
  });

  it('First and Last from 0 to 1000 are accepted', async () => {
    for (const q of ['First=0', 'First=1000', 'Last=0', 'Last=1000']) {
      expect((await api.get(`${PATH}?${q}`)).status, q).toBe(200);
    }
  });

  // D6: First/Last are integers from 0 to 1000; 400 outside. D5: the location is the documented name.
  it.each([
    ['First=-1', 'First'],
    ['First=1001', 'First'],
    ['First=3000000000', 'First'],
    ['First=1.5', 'First'],
    ['First=abc', 'First'],
    ['First=', 'First'],
    ['Last=-1', 'Last'],
    ['Last=1001', 'Last'],
    ['Last=2.0', 'Last'],
    ['Last=ten', 'Last'],
    ['first=-5', 'First'],
    // P1: a repeated scalar parameter is 400 naming it.
    ['First=1&First=2', 'First'],
  ])('%s: 400 problem+json naming %s', async (query, location) => {
    expect400(await api.get(`${PATH}?${query}`), location);
  });

  // D6: 400 when both are given.
  it('First and Last together: 400 naming First or Last', async () => {
    expect400(await api.get(`${PATH}?First=5&Last=5`), 'First', 'Last');
    expect400(await api.get(`${PATH}?First=0&Last=0`), 'First', 'Last');
  });

  // D6: a cursor that does not decode into a position of this list's ordering: 400.
  it('garbage cursors: 400 naming After or Before', async () => {
    const garbage = [
      'not a cursor!',
      'abc',
      '%%%',
      b64({ list: 'structuralEntity' }),
      b64([1, 2, 3, 4]),
      b64(['structuralEntity', 'Key', 'x']),
      Buffer.from('[oops').toString('base64url'),
    ];
    for (const g of garbage) {
      expect400(await api.get(`${PATH}?After=${encodeURIComponent(g)}`), 'After');
      expect400(await api.get(`${PATH}?Last=3&Before=${encodeURIComponent(g)}`), 'Before');
    }
  });

  it('a cursor of another ordering: 400', async () => {
    expect400(await api.get(`${PATH}?After=${nameCursors[5]}`), 'After');
    expect400(await api.get(`${PATH}?OrderBy=headcount&After=${keyCursors[5]}`), 'After');
    expect400(await api.get(`${PATH}?OrderBy=Depth&Last=2&Before=${nameCursors[5]}`), 'Before');
    // The same ordering is fine.
    expect((await api.get(`${PATH}?OrderBy=DisplayName&After=${nameCursors[5]}`)).status).toBe(200);
  });

  it('a cursor of another list: 400', async () => {
    expect400(await api.get(`${PATH}?After=${b64(['otherList', 'Key', 'x', 'y'])}`), 'After');
    expect400(await api.get(`${PATH}?After=${b64(['subject', 'Key', 'e01', 'e01'])}`), 'After');
  });

  it("a cursor whose position does not fit the ordering's type: 400, not a failed cast", async () => {
    const forged: [string, unknown[]][] = [
      ['headcount', ['structuralEntity', 'headcount', 'abc', 'e01']],
      ['headcount', ['structuralEntity', 'headcount', '99999999999', 'e01']],
      ['Depth', ['structuralEntity', 'Depth', 'two', 'e01']],
      ['opened', ['structuralEntity', 'opened', '2024-02-30', 'e01']],
      ['opened', ['structuralEntity', 'opened', 'yesterday', 'e01']],
      ['budget', ['structuralEntity', 'budget', '1,5', 'e01']],
      ['Key', ['structuralEntity', 'Key', null, 'e01']],
      ['Key', ['structuralEntity', 'Key', 5, 'e01']],
      ['Key', ['structuralEntity', 'Key', 'e01', null]],
    ];
    for (const [orderBy, cursor] of forged) {
      expect400(await api.get(`${PATH}?OrderBy=${orderBy}&After=${b64(cursor)}`), 'After');
    }
    // A well-formed position is accepted, even one no item holds (keyset, not offset).
    const p = await api.get(`${PATH}?OrderBy=headcount&First=1000&After=${b64(['structuralEntity', 'headcount', '9', 'e14'])}`);
    expect(p.status).toBe(200);
    const asc = expectedOrder(ENTITIES, ORDERINGS.headcount!);
    expect(p.body.Edges.map((e: any) => e.Node.Key)).toEqual(asc.slice(asc.indexOf('e14') + 1));
    const missingPos = await api.get(`${PATH}?OrderBy=headcount&First=1000&After=${b64(['structuralEntity', 'headcount', null, 'e00'])}`);
    expect(missingPos.status).toBe(200);
    expect(missingPos.body.Edges.map((e: any) => e.Node.Key)).toEqual(asc.slice(asc.indexOf('e00') + 1));
  });
});

describe('GraphQL: structuralEntities and children (D6, D11)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app, { structuralEntities: tenantEntities() })).client();
  });

  // D11: every connection takes first/after/last/before/orderBy/orderDirection with D6's rules.
  it('structuralEntities: forward and backward walks, several orderings', async () => {
    const fetch = gqlFetch(api);
    await walkBoth(fetch, expectedOrder(ENTITIES, ORDERINGS.Key!), 9);
    await walkBoth(fetch, expectedOrder(ENTITIES, ORDERINGS.headcount!, 'desc'), 9, { orderBy: 'headcount', orderDirection: 'DESCENDING' });
    await walkBoth(fetch, expectedOrder(ENTITIES, ORDERINGS.opened!), 11, { orderBy: 'opened', orderDirection: 'ASCENDING' });
  });

  it('structuralEntities cursors are the REST cursors', async () => {
    const g = await gqlFetch(api)({ first: 1000, orderBy: 'DisplayName' });
    const r = await restFetch(api)({ first: 1000, orderBy: 'DisplayName' });
    expect(g).toEqual(r);
  });

  it('children: forward and backward walks with totalCount of the children', async () => {
    const children = ENTITIES.filter((e) => e.parentKey === 'e00');
    expect(children).toHaveLength(30);
    const fetch = gqlFetch(api, 'e00');
    await walkBoth(fetch, expectedOrder(children, ORDERINGS.Key!), 8);
    await walkBoth(fetch, expectedOrder(children, ORDERINGS.DisplayName!, 'desc'), 7, {
      orderBy: 'DisplayName',
      orderDirection: 'DESCENDING',
    });
    await walkBoth(fetch, expectedOrder(children, ORDERINGS.budget!), 12, { orderBy: 'budget' });
    const leaf = await gqlFetch(api, 'e56')({ first: 5 });
    expect(leaf).toEqual({
      keys: [],
      cursors: [],
      hasNextPage: false,
      hasPreviousPage: false,
      startCursor: null,
      endCursor: null,
      totalCount: 0,
    });
  });

  it('children default to First 20', async () => {
    const p = await gqlFetch(api, 'e00')({});
    expect(p.keys).toHaveLength(20);
    expect(p).toMatchObject({ hasNextPage: true, hasPreviousPage: false, totalCount: 30 });
  });

  it('bad paging arguments are BAD_REQUEST errors on the field', async () => {
    const nameCursor = (await gqlFetch(api)({ first: 1, orderBy: 'DisplayName' })).cursors[0]!;
    const cases: Record<string, unknown>[] = [
      { first: -1 },
      { first: 1001 },
      { last: -1 },
      { last: 1001 },
      { first: 1, last: 1 },
      { after: 'garbage!' },
      { before: b64(['otherList', 'Key', 'x', 'y']), last: 1 },
      { after: nameCursor },
      { orderBy: 'nope' },
      { orderBy: 'constructor' },
      { orderBy: 'headcount', after: b64(['structuralEntity', 'headcount', 'abc', 'e01']) },
    ];
    for (const vars of cases) {
      for (const parentKey of [undefined, 'e00']) {
        const query = parentKey
          ? `query(${PAGE_VARS}) { structuralEntity(key: "e00") { key children(${PAGE_ARGS}) { totalCount } } }`
          : `query(${PAGE_VARS}) { structuralEntities(${PAGE_ARGS}) { totalCount } }`;
        const r = await api.gql<any>(query, vars);
        // The HTTP status of a request with a field error is left to the GraphQL layer; the error is what D6 fixes.
        expect(r.body.errors?.[0]?.extensions?.code, `${JSON.stringify(vars)} ${JSON.stringify(r.body)}`).toBe('BAD_REQUEST');
        if (parentKey) expect(r.body.data.structuralEntity).toEqual({ key: 'e00', children: null });
        else expect(r.body.data?.structuralEntities ?? null).toBeNull();
      }
    }
  });

  it('orderDirection takes only ASCENDING and DESCENDING', async () => {
    const r = await api.gql<any>('{ structuralEntities(orderDirection: SIDEWAYS) { totalCount } }');
    expect(r.body.errors?.length).toBeGreaterThan(0);
    expect(r.body.data).toBeUndefined();
  });
});
