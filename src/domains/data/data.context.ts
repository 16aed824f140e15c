import type { Context } from '../../graphql/context.js';
import type { AggregateMemory } from './aggregates/index.js';
import type { DataCache } from './cache/index.js';

/**
 * The data domain's members of one request's context: the instance's cache and remembered aggregates,
 * and the request's own record of stale data served (`extensions.staleData`, D10).
 */
export function dataContext(data: DataCache, aggregates: AggregateMemory): Pick<Context, 'data' | 'aggregates' | 'staleData'> {
  return { data, aggregates, staleData: new Map() };
}
