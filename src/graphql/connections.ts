import type { ArgBuilder } from '@pothos/core';
import { type Types, builder } from './builder.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from '../db/paging.js';

export const OrderDirectionEnum = builder.enumType('OrderDirection', {
  description: 'Which way a list runs in its orderBy key.',
  values: {
    ASCENDING: { value: 'ASCENDING', description: 'Smallest first; missing values last.' },
    DESCENDING: { value: 'DESCENDING', description: 'The exact reverse of ASCENDING.' },
  } as const,
});

builder.globalConnectionField('totalCount', (t) =>
  t.int({ description: 'Items matching the filters, whatever the cursors and page size.', resolve: (c) => c.totalCount() }),
);

/**
 * The cost of a connection (D11 limits): its selection counts once per item of the page it will load,
 * `first`/`last` from literals or variables, D6's default 20 when neither is given.
 */
export function pageComplexity(args: { first?: number | null; last?: number | null; searchTerm?: string | null }) {
  const size = Number(args.first ?? args.last ?? DEFAULT_PAGE_SIZE);
  // A search scans trigram matches and scores them: one costs like a large page (P47: hundreds of
  // aliased searches in one request must be refused before they run, not block the process).
  return {
    field: args.searchTerm ? SEARCH_COST : 1,
    multiplier: Number.isFinite(size) ? Math.min(Math.max(size, 1), MAX_PAGE_SIZE) : MAX_PAGE_SIZE,
  };
}

/** The cost of one search in a connection: with the default GRAPHQL_MAX_COST, at most 25 per request. */
export const SEARCH_COST = 2000;

/** The ordering arguments every connection adds to Relay's first/after/last/before (D11). */
export function orderArgs(arg: ArgBuilder<Types>) {
  return {
    orderBy: arg.string({ description: 'Key of the field to order by (D6).' }),
    orderDirection: arg({ type: OrderDirectionEnum, description: 'ASCENDING when not given.' }),
  };
}
