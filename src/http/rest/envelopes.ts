import { z } from 'zod';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from '../../db/paging.js';
import { documentedAs } from '../openapi/documented.js';

/** The D6 page info fields in lower camel case; new schema instances per call (each object owns its own). */
function pageInfoFields() {
  return {
    hasNextPage: z.boolean(),
    hasPreviousPage: z.boolean(),
    startCursor: z.string().nullable().meta({ description: 'Cursor of the first node of the page; null for an empty page.' }),
    endCursor: z.string().nullable().meta({ description: 'Cursor of the last node of the page; null for an empty page.' }),
    totalCount: z.int().meta({ description: 'Nodes in the whole list (every page).' }),
  };
}

const PageInfoSchema = z
  .object(Object.fromEntries(Object.entries(pageInfoFields()).map(([k, v]) => [k[0]!.toUpperCase() + k.slice(1), v])))
  .meta({ id: 'PageInfo', description: 'Where the page lies in the list (D6).' });

/** The PascalCase paged envelope schema around a node schema, named `<name>Page` (OpenAPI). */
export function pageSchema(node: z.ZodType, name: string) {
  return z
    .object({
      PageInfo: PageInfoSchema,
      Edges: z.array(
        z
          .object({ Node: node, Cursor: z.string().meta({ description: 'Opaque cursor of this node, for After or Before.' }) })
          .meta({ id: `${name}Edge` }),
      ),
    })
    .meta({ id: `${name}Page` });
}

/** Sent custom field values in the GraphQL input shape. */
export function sentValues(items: readonly { Key: string; Value?: unknown }[]) {
  return items.map((v) => ({ key: v.Key, value: v.Value ?? null }));
}

/** The contract's PascalCase paged envelope (D5/D6) around mapped nodes. */
export function restPage<N, R>(
  conn: {
    totalCount: number;
    pageInfo: { hasNextPage: boolean; hasPreviousPage: boolean; startCursor?: string | null; endCursor?: string | null };
    edges: { cursor: string; node: N }[];
  },
  map: (n: N) => R,
) {
  return {
    PageInfo: {
      HasNextPage: conn.pageInfo.hasNextPage,
      HasPreviousPage: conn.pageInfo.hasPreviousPage,
      StartCursor: conn.pageInfo.startCursor ?? null,
      EndCursor: conn.pageInfo.endCursor ?? null,
      TotalCount: conn.totalCount,
    },
    Edges: conn.edges.map((e) => ({ Node: map(e.node), Cursor: e.cursor })),
  };
}

/** The lower-camel-case paged envelope (D5: the portal-users list) around mapped nodes. */
export function restCamelPage<N, R>(conn: Parameters<typeof restPage<N, R>>[0], map: (n: N) => R) {
  return {
    pageInfo: {
      hasNextPage: conn.pageInfo.hasNextPage,
      hasPreviousPage: conn.pageInfo.hasPreviousPage,
      startCursor: conn.pageInfo.startCursor ?? null,
      endCursor: conn.pageInfo.endCursor ?? null,
      totalCount: conn.totalCount,
    },
    edges: conn.edges.map((e) => ({ cursor: e.cursor, node: map(e.node) })),
  };
}

const CamelPageInfoSchema = z
  .object(pageInfoFields())
  .meta({ id: 'CamelCasePageInfo', description: 'Where the page lies in the list (D6), in lower camel case (D5).' });

/** The lower-camel-case paged envelope schema around a node schema, named `<name>Page` (OpenAPI). */
export function camelPageSchema(node: z.ZodType, name: string) {
  return z
    .object({
      pageInfo: CamelPageInfoSchema,
      edges: z.array(
        z
          .object({ cursor: z.string().meta({ description: 'Opaque cursor of this node, for After or Before.' }), node })
          .meta({ id: `${name}Edge` }),
      ),
    })
    .meta({ id: `${name}Page` });
}

/** Zod schemas of the paging query parameters shared by every list (D6); names as documented. */
export const pagingQuery = {
  After: z.string().optional().meta({ description: 'Cursor: items after this node.' }),
  Before: z.string().optional().meta({ description: 'Cursor: items before this node.' }),
  First: documentedAs(
    z
      .string()
      .regex(/^[+-]?\d+$/, 'First must be an integer.')
      .transform(Number)
      .optional(),
    z
      .int()
      .min(0)
      .max(MAX_PAGE_SIZE)
      .optional()
      .meta({ description: `Number of first items; ${DEFAULT_PAGE_SIZE} when neither First nor Last is given.` }),
  ),
  Last: documentedAs(
    z
      .string()
      .regex(/^[+-]?\d+$/, 'Last must be an integer.')
      .transform(Number)
      .optional(),
    z.int().min(0).max(MAX_PAGE_SIZE).optional().meta({ description: 'Number of last items.' }),
  ),
  OrderBy: z.string().optional().meta({ description: 'Key of the field to order by.' }),
  OrderDirection: documentedAs(
    z
      .string()
      .regex(/^(ascending|descending)$/i, 'OrderDirection must be Ascending or Descending.')
      .transform((v) => (v.toLowerCase() === 'descending' ? ('DESCENDING' as const) : ('ASCENDING' as const)))
      .optional(),
    z
      .enum(['Ascending', 'Descending'])
      .optional()
      .meta({ description: 'Sort direction, Ascending when absent (the names are matched case-insensitively).' }),
  ),
};

/** GraphQL paging variables from the bound paging query. */
export function pagingVariables(q: {
  After?: string | undefined;
  Before?: string | undefined;
  First?: number | undefined;
  Last?: number | undefined;
  OrderBy?: string | undefined;
  OrderDirection?: 'ASCENDING' | 'DESCENDING' | undefined;
}) {
  return { after: q.After, before: q.Before, first: q.First, last: q.Last, orderBy: q.OrderBy, orderDirection: q.OrderDirection };
}

/**
 * A boolean query parameter (D5): `true` or `false` in any case. With `bare`, the name present without a
 * value (`?includeInactive`) means true.
 */
export function booleanQuery(name: string, description: string, opts: { bare?: boolean } = {}) {
  return documentedAs(
    z
      .string()
      .regex(opts.bare ? /^(true|false)?$/i : /^(true|false)$/i, `${name} must be true or false.`)
      .transform((v) => v.toLowerCase() !== 'false')
      .optional(),
    z.boolean().optional().meta({ description }),
  );
}
