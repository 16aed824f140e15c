import { type Compilable, type CompiledQuery, createQueryId } from 'kysely';
import type { Db } from './tables.js';

/**
 * A statement whose SQL never changes, built and compiled by Kysely once (issue 19: building and
 * compiling a query on every call is a few percent of a list request's CPU). `build` is called once with
 * placeholders for its string parameters, each of which it must bind as a value (never fold into the
 * SQL text); every call then executes the compiled SQL with its own values in those places.
 */
export function preparedQuery<P extends string[], R>(
  build: (db: Db, ...params: P) => Compilable<R>,
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
