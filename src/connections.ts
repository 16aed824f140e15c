import type { ArgBuilder } from '@pothos/core';
import { type Types, builder } from './builder.js';

export const OrderDirectionEnum = builder.enumType('OrderDirection', {
  values: { ASCENDING: { value: 'ASCENDING' }, DESCENDING: { value: 'DESCENDING' } } as const,
});

builder.globalConnectionField('totalCount', (t) =>
  t.int({ description: 'Items matching the filters, whatever the cursors and page size.', resolve: (c) => c.totalCount() }),
);

/** The ordering arguments every connection adds to Relay's first/after/last/before (D11). */
export function orderArgs(arg: ArgBuilder<Types>) {
  return {
    orderBy: arg.string({ description: 'Key of the field to order by (D6).' }),
    orderDirection: arg({ type: OrderDirectionEnum }),
  };
}
