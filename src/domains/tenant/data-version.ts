import type { Context } from '../../graphql/context.js';
import { readDataVersion } from './tenant.repository.js';

/**
 * The tenant's data version a query may look cached subject lists and TotalCounts up under: the one read
 * with its principal, or (a principal from the instance's cache carries none) read now. None in a
 * mutation, which may change it before it counts, nor before the operation is known.
 */
export async function queryDataVersion(ctx: Pick<Context, 'operation' | 'principal' | 'db'>): Promise<string | undefined> {
  if (ctx.operation !== 'query') return undefined;
  return ctx.principal.dataVersion ?? readDataVersion(ctx.db, ctx.principal.tenantId);
}
