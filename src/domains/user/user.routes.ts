import { z } from 'zod';
import { graphql } from '../../generated/gql.js';

import { defineRoute } from '../../http/rest/route.js';
import { booleanQuery } from '../../http/rest/envelopes.js';
import { MAX_PAGE_SIZE } from '../../db/paging.js';
import { invalidParameter, problemExample } from '../../http/openapi/documented.js';

const listUsers = defineRoute({
  method: 'get',
  path: '/api/v1/users',
  operationId: 'getUsers',
  summary: 'Get users',
  tag: 'Users',
  permissions: 'List:User',
  query: z.object({
    searchTerm: z.string().optional().meta({ description: 'Case-insensitive, typo-tolerant search on the display name.' }),
    includeInactive: booleanQuery('includeInactive', 'Include inactive users (false when absent; present without a value: true).', {
      bare: true,
    }),
    withAccessToSubjectId: z
      .string()
      .optional()
      .meta({
        description: 'Only users with access to this subject through their groups (404 for an unknown subject).',
        examples: ['48e18403-f60b-4395-aca2-2c64665b13ec'],
      }),
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
    200: {
      description: 'Users ordered by display name (at most 1000).',
      schema: z.array(z.object({ id: z.string(), displayName: z.string() }).meta({ id: 'User', description: 'A user of the tenant.' })),
      // The demo tenant's active users (config/demo.tenant.json).
      example: [
        { id: 'u-ann', displayName: 'Ann Smith' },
        { id: 'u-bob', displayName: 'Bob Jones' },
      ],
    },
    400: invalidParameter('One or more validation errors occurred.', { includeInactive: ['includeInactive must be true or false.'] }),
    404: { description: 'withAccessToSubjectId names no subject.', example: problemExample(404, 'No subject has this id.') },
  },
});

export const userRoutes = [listUsers];
