import { type Compilable, type CompiledQuery, createQueryId } from 'kysely';
import type { Db } from './tables.js';

// SQL text → its statement's name (P71). Only fixed texts of the code are marked, a handful; the cap
// keeps a caller that marked a varying text from preparing without bound on every connection (past it,
// statements simply run unnamed).
const names = new Map<string, string>();
const MAX_NAMED = 64;

/**
 * Marks `sql` as a statement PostgreSQL prepares once per connection and then runs from its plan cache
 * (P71): later executions send no text, and the server neither parses nor, once it settles on a generic
 * plan, plans it again. For statements whose best plan does not depend on their values (a write, a lookup
 * by a unique key); a list whose plan follows the tenant's data stays unnamed, planned every time.
 */
export function namedStatement(sql: string): void {
  if (!names.has(sql) && names.size < MAX_NAMED) names.set(sql, `ssdi_${names.size}`);
}

/** The name `namedStatement` gave `sql`, if it marked it: the pool then runs it as a prepared statement. */
export function statementName(sql: string): string | undefined {
  return names.get(sql);
}

interface Template<R> {
  query: CompiledQuery<R>;
  slots: ({ param: number } | { value: unknown })[];
  /** Which parameters the shape was built with (the others were undefined, and must stay so). */
  given: boolean[];
}

/**
 * Statements whose SQL depends only on their `shape`, one of a few fixed variants (an insert or an
 * update, with or without locations), each built and compiled by Kysely once (P75: building and
 * compiling a statement on every call was a tenth of a subject write's CPU). `build` is called once per
 * shape with placeholders for its parameters, each of which it must bind as a value: never read it,
 * fold it into the SQL text or let it choose the SQL (the shape does that). A parameter the shape does
 * not use is passed as `undefined`, at that shape's every call. Every call then executes the shape's
 * compiled SQL with its own values in those places. With `named`, the statements are also marked with
 * `namedStatement` (only for statements whose plan does not depend on their values).
 */
export function preparedShapes<S extends string, P extends unknown[], R>(
  build: (db: Db, shape: S, ...params: P) => Compilable<R>,
  opts: { named?: boolean } = {},
): (db: Db, shape: S, ...params: P) => Promise<R[]> {
  const templates = new Map<S, Template<R>>();
  const compile = (db: Db, shape: S, params: P): Template<R> => {
    const given = params.map((p) => p !== undefined);
    const marks = params.map((p, i) => (p === undefined ? undefined : `\u0000param ${i}\u0000`));
    const query = build(db, shape, ...(marks as P)).compile();
    const slots = query.parameters.map((p) => (typeof p === 'string' && marks.includes(p) ? { param: marks.indexOf(p) } : { value: p }));
    const bound = new Set(slots.flatMap((s) => ('param' in s ? [s.param] : [])));
    // A placeholder that did not come out as a parameter was read or folded into the text: refuse it.
    if (bound.size !== given.filter(Boolean).length || query.sql.includes('\u0000'))
      throw new Error(`preparedShapes: every parameter of shape '${shape}' must be bound`);
    if (opts.named) namedStatement(query.sql);
    return { query, slots, given };
  };
  return async (db, shape, ...params) => {
    let template = templates.get(shape);
    if (!template) templates.set(shape, (template = compile(db, shape, params)));
    const { query, slots, given } = template;
    if (params.length !== given.length || params.some((p, i) => (p !== undefined) !== given[i]))
      throw new Error(`preparedShapes: shape '${shape}' was called with other parameters`);
    const compiled: CompiledQuery<R> = {
      query: query.query,
      queryId: createQueryId(),
      sql: query.sql,
      parameters: slots.map((s) => ('param' in s ? params[s.param] : s.value)),
    };
    return (await db.executeQuery(compiled)).rows;
  };
}

/** A statement whose SQL never changes: `preparedShapes` with one shape. */
export function preparedQuery<P extends unknown[], R>(
  build: (db: Db, ...params: P) => Compilable<R>,
  opts: { named?: boolean } = {},
): (db: Db, ...params: P) => Promise<R[]> {
  const run = preparedShapes((db: Db, _shape: 'one', ...params: P) => build(db, ...params), opts);
  return (db, ...params) => run(db, 'one', ...params);
}
