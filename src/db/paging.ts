import { type CompiledQuery, type Expression, type SelectQueryBuilder, type SqlBool, createQueryId, sql } from 'kysely';
import { LRUCache } from 'lru-cache';
import { validDate } from '../core/dates.js';
import { ValidationError } from '../core/errors.js';
import { namedStatement, statementName } from './prepared.js';
import type { Db } from './tables.js';

/** D6: page size when neither first nor last is given, and the bound on both. */
export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 1000;

export type OrderDirection = 'ASCENDING' | 'DESCENDING';

export interface PageArgs {
  first?: number | null | undefined;
  last?: number | null | undefined;
  after?: string | null | undefined;
  before?: string | null | undefined;
  orderBy?: string | null | undefined;
  orderDirection?: OrderDirection | null | undefined;
}

/** Whitelisted SQL types a sort value is compared as (cursor values travel as text). */
export type SortSqlType =
  'text' | 'integer' | 'bigint' | 'numeric' | 'double precision' | 'boolean' | 'date' | 'time' | 'timestamptz' | 'uuid';

/** How one list orders by one OrderBy key. `value` may be null for rows missing it; `id` never is. */
export interface SortKey {
  /** The OrderBy key as the client names it; part of the cursor, so a cursor only fits its ordering. */
  name: string;
  value: Expression<unknown>;
  type: SortSqlType;
  nullable: boolean;
  /** Unique tie-breaker within the list (text-comparable). */
  id: Expression<unknown>;
  idType: SortSqlType;
}

export interface Edge<T> {
  cursor: string;
  node: T;
}

interface PageInfo {
  hasNextPage: boolean;
  hasPreviousPage: boolean;
  startCursor: string | null;
  endCursor: string | null;
}

export interface Connection<T> {
  edges: Edge<T>[];
  pageInfo: PageInfo;
  /** Lazy: GraphQL counts only when asked. */
  totalCount: () => Promise<number>;
}

interface Position {
  v: string | null;
  i: string;
}

// A cursor is base64url(JSON [list, orderBy, value-as-text, id]): opaque to clients, and decodable back
// to a keyset position only for the list and ordering that issued it (D6).
function encodeCursor(list: string, sortName: string, p: Position): string {
  return Buffer.from(JSON.stringify([list, sortName, p.v, p.i])).toString('base64url');
}

const DATE_TEXT = /^(\d{4})-(\d{2})-(\d{2})$/;
const TIME_TEXT = /^(?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?|24:00:00)$/;
const TIMESTAMP_TEXT =
  /^(\d{4})-(\d{2})-(\d{2})[ T](?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:0\d|1[0-5])(?::?[0-5]\d){0,2})?$/;

/**
 * Whether `v` is text PostgreSQL reads as `type` without error. A forged cursor whose value does not fit
 * the ordering's type is not a position of that ordering (D6: 400, never a failed cast and a 500).
 */
function fitsType(type: SortSqlType, v: string): boolean {
  if (v.includes('\u0000')) return false; // PostgreSQL text cannot hold it
  switch (type) {
    case 'text':
      return true;
    case 'integer':
      return /^-?\d{1,10}$/.test(v) && Number(v) >= -2147483648 && Number(v) <= 2147483647;
    case 'bigint':
      return /^-?\d{1,19}$/.test(v) && BigInt(v) >= -(2n ** 63n) && BigInt(v) < 2n ** 63n;
    case 'numeric':
      return v === 'NaN' || /^-?\d{1,1000}(?:\.\d{1,1000})?$/.test(v);
    case 'double precision': {
      // Within float8's range: '1e-400' is 0 to JavaScript but out of range to PostgreSQL.
      const n = Number(v);
      return (
        /^-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?$/i.test(v) &&
        Number.isFinite(n) &&
        (n === 0 ? !/[1-9]/.test(v.split(/e/i)[0]!) : Math.abs(n) >= 1e-307)
      );
    }
    case 'uuid':
      return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v);
    case 'boolean':
      return v === 'true' || v === 'false';
    case 'date': {
      const m = DATE_TEXT.exec(v);
      return m !== null && validDate(+m[1]!, +m[2]!, +m[3]!);
    }
    case 'time':
      return TIME_TEXT.test(v);
    case 'timestamptz': {
      const m = TIMESTAMP_TEXT.exec(v);
      return m !== null && validDate(+m[1]!, +m[2]!, +m[3]!);
    }
  }
}

function decodeCursor(list: string, sort: SortKey, cursor: string, param: 'after' | 'before'): Position {
  const sortName = sort.name;
  const bad = () => ValidationError.at(param, `The cursor is not valid for this list and ordering.`);
  if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw bad();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw bad();
  }
  if (
    !Array.isArray(parsed) ||
    parsed.length !== 4 ||
    parsed[0] !== list ||
    parsed[1] !== sortName ||
    !(parsed[2] === null || typeof parsed[2] === 'string') ||
    typeof parsed[3] !== 'string' ||
    (parsed[2] === null && !sort.nullable) ||
    (parsed[2] !== null && !fitsType(sort.type, parsed[2])) ||
    !fitsType(sort.idType, parsed[3])
  ) {
    throw bad();
  }
  return { v: parsed[2], i: parsed[3] };
}

/** Validates first/last (D6) and returns the page size and which end the page is taken from. */
export function pageWindow(args: PageArgs): { size: number; fromEnd: boolean } {
  const check = (name: 'first' | 'last', n: number | null | undefined) => {
    if (n !== null && n !== undefined && (!Number.isInteger(n) || n < 0 || n > MAX_PAGE_SIZE)) {
      throw ValidationError.at(name, `${name === 'first' ? 'First' : 'Last'} must be an integer from 0 to ${MAX_PAGE_SIZE}.`);
    }
  };
  check('first', args.first);
  check('last', args.last);
  const hasFirst = args.first !== null && args.first !== undefined;
  const hasLast = args.last !== null && args.last !== undefined;
  if (hasFirst && hasLast) throw ValidationError.at('last', 'First and Last cannot be given together.');
  if (hasLast) return { size: args.last!, fromEnd: true };
  return { size: hasFirst ? args.first! : DEFAULT_PAGE_SIZE, fromEnd: false };
}

const cast = (v: string, type: SortSqlType) => sql`cast(${v} as ${sql.raw(type)})`;

/**
 * `row` lies strictly after `p` in ascending order (`ahead` = true) or strictly before it. The
 * ascending order is PostgreSQL's default `value ASC NULLS LAST, id ASC` (D6: missing values last), and
 * descending is its exact reverse, so one index serves both. Null comparisons are spelled out and the
 * whole predicate is coalesced, so it is always true or false (never NULL) and can be negated.
 */
function beyond(key: SortKey, p: Position, ahead: boolean): Expression<SqlBool> {
  const op = sql.raw(ahead ? '>' : '<');
  if (!key.nullable && p.v !== null) {
    // Never NULL, and a row comparison is an index range condition: page 5,000 costs what page 1 does.
    return sql<SqlBool>`((${key.value}, ${key.id}) ${op} (${cast(p.v, key.type)}, ${cast(p.i, key.idType)}))`;
  }
  const id = sql`${key.id} ${op} ${cast(p.i, key.idType)}`;
  let pred;
  if (p.v === null) {
    // Position among the missing values, which sort last.
    pred = ahead ? sql`(${key.value} IS NULL AND ${id})` : sql`(${key.value} IS NOT NULL OR ${id})`;
  } else {
    const v = cast(p.v, key.type);
    const core = sql`(${key.value} ${op} ${v} OR (${key.value} = ${v} AND ${id}))`;
    pred = ahead && key.nullable ? sql`(${key.value} IS NULL OR ${core})` : core;
  }
  return sql<SqlBool>`coalesce(${pred}, false)`;
}

/**
 * `NOT beyond(key, p, ahead)`: `row` lies at `p` or on the other side of it. Where `beyond` is a row
 * comparison, so is this, an index range condition even in a generic plan (P168); a negated one is not.
 */
function notBeyond(key: SortKey, p: Position, ahead: boolean): Expression<SqlBool> {
  if (key.nullable || p.v === null) return sql<SqlBool>`NOT ${beyond(key, p, ahead)}`;
  const op = sql.raw(ahead ? '<=' : '>=');
  return sql<SqlBool>`((${key.value}, ${key.id}) ${op} (${cast(p.v, key.type)}, ${cast(p.i, key.idType)}))`;
}

/** The statements a list is paged over. */
export interface PageParts<Row> {
  /** The filtered query (tenant and filters applied, row columns selected); no order, no limit. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- any list's query: paging reads only the selected row
  query: SelectQueryBuilder<any, any, Row>;
  /**
   * The same rows as `query` with fewer joins, for the EXISTS probes beyond a page's edge: the sort's
   * `value` and `id` must resolve in it. A probe inside the page statement is planned with it, and a
   * one-table probe plans in a fraction of a join's time (P48: a deep page then costs page 1).
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as `query`
  probeQuery?: SelectQueryBuilder<any, any, any>;
  /** A value read in the page's statement (snapshot) and handed to `count`: what a cached count is keyed by. */
  version?: Expression<unknown>;
}

/**
 * Parts whose SQL text depends only on `shape`, built with the values they bind (issue 35: a list's page
 * statement is built and compiled once per shape, as a write's are, P75). `build` must bind each of
 * `values` as a statement parameter wherever it uses it, never read it or fold it into the text: it is
 * called once per shape with placeholders instead.
 */
export interface PageTemplate<Row> {
  db: Db;
  shape: string;
  values: Record<string, unknown>;
  build(values: Record<string, unknown>): PageParts<Row>;
  /**
   * Its pages run named and prepared (P71, P167, P168), the page size written into the text: only for a
   * shape whose generic plan is right for every tenant and value, whatever the statistics say of an
   * average tenant, as an ordered read of an index holding every column the order needs is.
   */
  prepared?: boolean;
}

interface CompiledPage {
  query: CompiledQuery<unknown>;
  /** Each parameter: a named value of the call, or a constant of the shape. */
  slots: ({ name: string } | { value: unknown })[];
}

/** At most this many page statements are named (P167), so the fixed ones of P71 always find a name. */
const MAX_NAMED_PAGES = 24;

/**
 * Compiled page statements by shape, one cache per instance (built by the app). Bounded: the shapes are
 * a list's orders, cursor directions and page sizes (the size is in the text, P167), a few dozen per size.
 */
export class PageTemplates {
  private readonly compiled = new LRUCache<string, CompiledPage>({ max: 500 });
  /** Page statements named so far: a page size is a client's choice, so they may take only part of P71's names. */
  private named = 0;

  /**
   * The page statement of `key` with `values`, compiled from `build(placeholders)` the first time; with
   * `named`, marked to run as a named statement while fewer than MAX_NAMED_PAGES are.
   */
  statement<Row>(
    key: string,
    values: Record<string, unknown>,
    build: (values: Record<string, unknown>) => SelectQueryBuilder<any, any, Row>, // eslint-disable-line @typescript-eslint/no-explicit-any
    named: boolean,
  ): CompiledQuery<Row> {
    let page = this.compiled.get(key);
    if (!page) {
      // Absent values stay absent (the key says which are): only given ones get a placeholder.
      const marks = Object.fromEntries(
        Object.entries(values).map(([name, value]) => [name, value === undefined || value === null ? value : `\u0000param ${name}\u0000`]),
      );
      const byMark = new Map(Object.entries(marks).flatMap(([name, mark]) => (typeof mark === 'string' ? [[mark, name]] : [])));
      const query = build(marks).compile() as CompiledQuery<unknown>;
      const slots = query.parameters.map((p) => (typeof p === 'string' && byMark.has(p) ? { name: byMark.get(p)! } : { value: p }));
      // A placeholder that did not come out as a parameter was read or folded into the text.
      if (query.sql.includes('\u0000') || query.parameters.some((p) => typeof p === 'string' && p.includes('\u0000') && !byMark.has(p)))
        throw new Error(`PageTemplates: shape '${key}' must bind every value as a parameter`);
      if (named && statementName(query.sql) === undefined && this.named < MAX_NAMED_PAGES) {
        namedStatement(query.sql);
        this.named++;
      }
      this.compiled.set(key, (page = { query, slots }));
    }
    return {
      query: page.query.query,
      queryId: createQueryId(),
      sql: page.query.sql,
      parameters: page.slots.map((s) => ('name' in s ? values[s.name] : s.value)),
    } as CompiledQuery<Row>;
  }
}

interface PaginateCommon {
  /** Names the list inside cursors ("structuralEntity", "subject", ...). */
  list: string;
  /**
   * Counts the filtered rows; called only when totalCount is read, with `version`'s value as the page's
   * statement read it (undefined when the page came back empty).
   */
  count: (version: string | undefined) => Promise<number>;
  sort: SortKey;
  args: PageArgs;
}

/** A list's parts, or a template of them and the instance's compiled templates. */
export type PaginateOptions<Row> = PaginateCommon & (PageParts<Row> | { template: PageTemplate<Row>; templates: PageTemplates });

/**
 * An edge whose cursor is encoded when first read: GraphQL selections often leave it out (P48). A
 * class, not an object literal with a getter: each such literal got a hidden class of its own, which
 * kept its row alive through scavenges (P74).
 */
class LazyEdge<T> implements Edge<T> {
  private encoded: string | undefined;
  constructor(
    readonly node: T,
    private readonly encode: () => string,
  ) {}
  get cursor(): string {
    return (this.encoded ??= this.encode());
  }
}

/** A page's flags, and its first and last cursors read from its edges when asked for (as `LazyEdge`). */
class LazyPageInfo<T> implements PageInfo {
  constructor(
    private readonly edges: readonly Edge<T>[],
    readonly hasNextPage: boolean,
    readonly hasPreviousPage: boolean,
  ) {}
  get startCursor(): string | null {
    return this.edges[0]?.cursor ?? null;
  }
  get endCursor(): string | null {
    return this.edges[this.edges.length - 1]?.cursor ?? null;
  }
}

/**
 * Relay cursor connection over a keyset (D6): `after`/`before` bound the window, `first`/`last` take
 * from its start or end, and hasNextPage/hasPreviousPage are exact: when the fetched page cannot tell,
 * one indexed EXISTS probe beyond the page's edge does.
 */
export async function paginate<Row>(opts: PaginateOptions<Row>): Promise<Connection<Row>> {
  const { list, sort, args } = opts;
  const { size, fromEnd } = pageWindow(args);
  const after = args.after ? decodeCursor(list, sort, args.after, 'after') : null;
  const before = args.before ? decodeCursor(list, sort, args.before, 'before') : null;
  const descending = args.orderDirection === 'DESCENDING';
  // "Ahead" in the requested direction is ascending-ahead unless descending.
  const ahead = (p: Position, forward: boolean) => beyond(sort, p, forward !== descending);
  const notAhead = (p: Position) => notBeyond(sort, p, !descending);
  const notBehind = (p: Position) => notBeyond(sort, p, descending);
  const probeOf = (parts: PageParts<Row>) => (pred: Expression<SqlBool>) =>
    (parts.probeQuery ?? parts.query.clearSelect())
      .select(sql`1`.as('one'))
      .where(pred)
      .limit(sql.lit(1));

  const scanDesc = descending !== fromEnd;
  const dir = sql.raw(scanDesc ? 'DESC' : 'ASC');
  const pageStatement = (
    parts: PageParts<Row>,
    at: { after: Position | null; before: Position | null; limit: unknown; prepared?: boolean },
  ) => {
    const probe = probeOf(parts);
    // Whether anything lies behind the cursor the page starts from (a deep page's hasPreviousPage, or
    // hasNextPage paging back): an uncorrelated subquery in the page's own statement, evaluated once, so a
    // deep page costs one round trip like the first (P48).
    const edge = !fromEnd ? at.after : at.before;
    let q = parts.query.select([
      sql<string | null>`cast(${sort.value} as text)`.as('__sv'),
      sql<string>`cast(${sort.id} as text)`.as('__id'),
    ]);
    if (edge) {
      const behind = probe(!fromEnd ? notAhead(edge) : notBehind(edge));
      // A generic plan costs an EXISTS by its first row and may scan the table for it; a first row in the
      // index's order can only be read from the index (P168).
      q = at.prepared
        ? q.select(sql<boolean>`${behind.orderBy(sql`${sort.value} ${dir}`).orderBy(sql`${sort.id} ${dir}`)} IS NOT NULL`.as('__edge'))
        : q.select((eb) => eb.exists(behind).as('__edge'));
    }
    if (parts.version) q = q.select(sql<string>`(${parts.version})`.as('__v'));
    if (at.after) q = q.where(ahead(at.after, true));
    if (at.before) q = q.where(ahead(at.before, false));
    return q
      .orderBy(sql`${sort.value} ${dir}`)
      .orderBy(sql`${sort.id} ${dir}`)
      .limit(at.limit as number);
  };
  type PageRow = Row & { __sv: string | null; __id: string; __edge?: boolean; __v?: string };
  let parts: PageParts<Row> | undefined;
  let rows: PageRow[];
  if ('template' in opts) {
    const { template } = opts;
    // The cursors' presence and whether their values are null choose the SQL; their values, and the OrderBy's
    // name (which only the cursors carry), do not.
    const cursorShape = (p: Position | null) => (p === null ? '-' : p.v === null ? 'n' : 'v');
    // A prepared statement's generic plan is made without its values: the page size is written into the
    // text, so the plan is the ordered index read a LIMIT of that size calls for (a parameter is planned as
    // a tenth of the rows: a sort of all of them, P167). Behind a cursor of a nullable order the window and
    // its probe are ORs of comparisons, no index range: those pages stay unnamed (P168).
    const prepared = template.prepared === true && (!sort.nullable || (!after && !before));
    const key = [template.shape, list, cursorShape(after), cursorShape(before), fromEnd, descending, size].join('\u0001');
    const values = { ...template.values, __afterV: after?.v, __afterI: after?.i, __beforeV: before?.v, __beforeI: before?.i };
    const statement = opts.templates.statement(
      key,
      values,
      (v) =>
        pageStatement(template.build(v), {
          after: after && { v: after.v === null ? null : (v['__afterV'] as string), i: v['__afterI'] as string },
          before: before && { v: before.v === null ? null : (v['__beforeV'] as string), i: v['__beforeI'] as string },
          limit: sql.lit(size + 1),
          prepared,
        }),
      prepared,
    );
    rows = (await template.db.executeQuery(statement)).rows as PageRow[];
  } else {
    parts = opts;
    rows = (await pageStatement(parts, { after, before, limit: size + 1 }).execute()) as PageRow[];
  }
  // The probes below run rarely (paging back, an empty page): a template's parts are built as they are needed.
  const real = () => (parts ??= 'template' in opts ? opts.template.build(opts.template.values) : opts);

  const more = rows.length > size;
  const page = rows.slice(0, size);
  if (fromEnd) page.reverse();
  const pos = (r: { __sv: string | null; __id: string }): Position => ({ v: r.__sv, i: r.__id });
  const first = page[0];
  const last = page[page.length - 1];

  const exists = async (pred: Expression<SqlBool>) => (await probeOf(real())(pred).execute()).length > 0;
  // Anything behind the page's first row is behind the cursor it started from, and the reverse: the
  // statement's own answer, or (no row came back to carry it) a probe.
  const behindEdge = async (p: Position) => (rows[0] ? rows[0].__edge === true : exists(!fromEnd ? notAhead(p) : notBehind(p)));

  let hasNextPage: boolean;
  let hasPreviousPage: boolean;
  if (!fromEnd) {
    hasNextPage =
      more || (before !== null && (await exists(last ? ahead(pos(last), true) : after ? ahead(after, true) : sql<SqlBool>`true`)));
    hasPreviousPage = after !== null && (await behindEdge(after));
  } else {
    hasPreviousPage =
      more || (after !== null && (await exists(first ? ahead(pos(first), false) : before ? ahead(before, false) : sql<SqlBool>`true`)));
    hasNextPage = before !== null && (await behindEdge(before));
  }

  const edges = page.map((r) => {
    const { __sv, __id, __edge, __v, ...node } = r;
    return new LazyEdge(node as unknown as Row, () => encodeCursor(list, sort.name, pos(r)));
  });
  let counted: Promise<number> | undefined;
  return {
    edges,
    pageInfo: new LazyPageInfo(edges, hasNextPage, hasPreviousPage),
    totalCount: () => (counted ??= opts.count(rows[0]?.__v)),
  };
}

/**
 * The same connection over items already loaded (a subject's few locations, batched by a loader):
 * identical cursors, window and exact page flags as `paginate`, computed in memory. `position` gives an
 * item's order-preserving sort text and its unique id; texts compare by UTF-16 code units.
 */
export function paginateLoaded<T>(opts: {
  list: string;
  sortName: string;
  items: readonly T[];
  position: (item: T) => { v: string; i: string };
  args: PageArgs;
}): Connection<T> {
  const { list, sortName, args } = opts;
  const { size, fromEnd } = pageWindow(args);
  const textSort: SortKey = { name: sortName, value: sql``, type: 'text', nullable: false, id: sql``, idType: 'text' };
  const after = args.after ? decodeCursor(list, textSort, args.after, 'after') : null;
  const before = args.before ? decodeCursor(list, textSort, args.before, 'before') : null;
  const cmp = (a: Position, b: Position) => (a.v! < b.v! ? -1 : a.v! > b.v! ? 1 : a.i < b.i ? -1 : a.i > b.i ? 1 : 0);
  const sign = args.orderDirection === 'DESCENDING' ? -1 : 1;
  const all = opts.items.map((node) => ({ node, pos: opts.position(node) })).sort((a, b) => sign * cmp(a.pos, b.pos));
  // In the requested direction: is `p` strictly beyond `anchor` (forward) or before it (backward)?
  const ahead = (p: Position, anchor: Position, forward: boolean) => sign * cmp(p, anchor) * (forward ? 1 : -1) > 0;
  const window = all.filter((x) => (!after || ahead(x.pos, after, true)) && (!before || ahead(x.pos, before, false)));
  const page = fromEnd ? window.slice(Math.max(0, window.length - size)) : window.slice(0, size);
  const first = page[0];
  const last = page[page.length - 1];
  const idx = (x: (typeof all)[number]) => all.indexOf(x);
  let hasNextPage: boolean;
  let hasPreviousPage: boolean;
  if (!fromEnd) {
    hasNextPage =
      window.length > size ||
      (before !== null && (last ? idx(last) < all.length - 1 : all.some((x) => !after || ahead(x.pos, after, true))));
    hasPreviousPage = after !== null && (first ? idx(first) > 0 : all.some((x) => !ahead(x.pos, after, true)));
  } else {
    hasPreviousPage =
      window.length > size || (after !== null && (first ? idx(first) > 0 : all.some((x) => !before || ahead(x.pos, before, false))));
    hasNextPage = before !== null && (last ? idx(last) < all.length - 1 : all.some((x) => !ahead(x.pos, before, false)));
  }
  const edges = page.map((x) => new LazyEdge(x.node, () => encodeCursor(list, sortName, x.pos)));
  return {
    edges,
    pageInfo: new LazyPageInfo(edges, hasNextPage, hasPreviousPage),
    totalCount: () => Promise.resolve(all.length),
  };
}

/** How many rows a list query has: its selection replaced by `count(*)` (a connection's TotalCount). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any list query of any tables
export async function countRows(query: SelectQueryBuilder<any, any, any>): Promise<number> {
  const r = (await query
    .clearSelect()
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow()) as { n: string | number | bigint };
  return Number(r.n);
}
