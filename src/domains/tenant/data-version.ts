import type { Context } from '../../graphql/context.js';

/**
 * The tenant's data version a request may look cached subject lists and TotalCounts up under without
 * reading it again: the one read with its principal, in a query. None in a mutation, which may change it
 * before it counts, nor before the operation is known.
 */
export function queryDataVersion(ctx: Pick<Context, 'operation' | 'principal'>): string | undefined {
  return ctx.operation === 'query' ? ctx.principal.dataVersion : undefined;
}
