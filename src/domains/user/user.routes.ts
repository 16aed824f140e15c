import { z } from 'zod';
import { graphql } from '../../generated/gql.js';
import { defineRoute } from '../../rest.js';
import { MAX_PAGE_SIZE } from '../../paging.js';

const listUsers = defineRoute({
  method: 'get',
  path: '/api/v1/users',
  operationId: 'getUsers',
  summary: 'Get users',
  tag: 'Users',
  permissions: 'List:User',
  query: z.object({
    searchTerm: z.string().optional().meta({ description: 'Case-insensitive, typo-tolerant search on the display name.' }),
    includeInactive: z
      .string()
      .regex(/^(true|false)?$/i, 'includeInactive must be true or false.')
      // Present without a value (`?includeInactive`) means true (D9).
      .transform((v) => v.toLowerCase() !== 'false')
      .optional()
      .meta({ description: 'Include inactive users (bare or true).' }),
    withAccessToSubjectId: z.string().optional().meta({ description: 'Only users with access to this subject through their groups (404 for an unknown subject).' }),
  }),
  operation: graphql(`
    query RestUsers($searchTerm: String, $includeInactive: Boolean, $withAccessToSubjectId: ID, $first: Int) {
      users(searchTerm: $searchTerm, includeInactive: $includeInactive, withAccessToSubjectId: $withAccessToSubjectId, first: $first) {
        edges { node { id displayName } }
      }
    }
  `),
  variables: ({ query }) => ({
    searchTerm: query.searchTerm,
    includeInactive: query.includeInactive,
    withAccessToSubjectId: query.withAccessToSubjectId,
    // The contract's answer is a plain array: the first page of D6's largest size (P38).
    first: MAX_PAGE_SIZE,
  }),
  location: (path) => path, // documented lower camel
  respond: (data) => ({ status: 200, body: data.users!.edges.map((e) => ({ id: e.node.id, displayName: e.node.displayName })) }),
  responses: {
    200: { description: 'Users ordered by display name (at most 1000).', schema: z.array(z.object({ id: z.string(), displayName: z.string() })) },
    404: { description: 'withAccessToSubjectId names no subject.' },
  },
});

export const userRoutes = [listUsers];
