import { type Compilable, type CompiledQuery, type QueryResult, createQueryId } from 'kysely';
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

/** Runs `compiled` after marking it with `namedStatement`. */
export async function executeNamed<R>(db: Db, compiled: CompiledQuery<R>): Promise<QueryResult<R>> {
  namedStatement(compiled.sql);
  return db.executeQuery(compiled);
}

/**
 * A statement whose SQL never changes, built and compiled by Kysely once (issue 19: building and
 * compiling a query on every call is a few percent of a list request's CPU). `build` is called once with
 * placeholders for its string parameters, each of which it must bind as a value (never fold into the
 * SQL text); every call then executes the compiled SQL with its own values in those places. With
 * `named`, the statement is also marked with `namedStatement` (only if its plan does not depend on them).
 */
export function preparedQuery<P extends string[], R>(
  build: (db: Db, ...params: P) => Compilable<R>,
  opts: { named?: boolean } = {},
): (db: Db, ...params: P) => Promise<R[]> {
  let template: { query: CompiledQuery<R>; slots: ({ param: number } | { value: unknown })[] } | undefined;
  return async (db, ...params) => {
    if (!template) {
      const marks = params.map((_, i) => `\u0000param ${i}\u0000`) as P;
      const query = build(db, ...marks).compile();
      const slots = query.parameters.map((p) => (typeof p === 'string' && marks.includes(p) ? { param: marks.indexOf(p) } : { value: p }));
      const bound = new Set(slots.flatMap((s) => ('param' in s ? [s.param] : [])));
      // A placeholder that did not come out as a parameter was folded into the text: refuse to run it.
      if (bound.size !== params.length || query.sql.includes('\u0000')) throw new Error('preparedQuery: every parameter must be bound');
      template = { query, slots };
      if (opts.named) namedStatement(query.sql);
    }
    const { query, slots } = template;
    const compiled: CompiledQuery<R> = {
      query: query.query,
      queryId: createQueryId(),
      sql: query.sql,
      parameters: slots.map((s) => ('param' in s ? params[s.param] : s.value)),
    };
    return (await db.executeQuery(compiled)).rows;
  };
}
