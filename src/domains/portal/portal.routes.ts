import { z } from 'zod';
import { graphql } from '../../generated/gql.js';
import type { RestPortalUserFragment } from '../../generated/graphql.js';

import { camelPageSchema, pagingQuery, pagingVariables, restCamelPage } from '../../http/rest/envelopes.js';
import { defineRoute, pascalLocation } from '../../http/rest/route.js';
import { isUuid } from '../subject/index.js';
import { invalidParameter, problemExample } from '../../http/openapi/documented.js';

graphql(`
  fragment RestPortalUser on PortalUser { id displayName email inviteMethod }
`);

/** The contract's subject portal user (lower camel case, D5). */
function toRestPortalUser(u: RestPortalUserFragment) {
  return { id: u.id, displayName: u.displayName, email: u.email, inviteMethod: u.inviteMethod };
}

const PortalUserSchema = z
  .object({
    id: z.string(),
    displayName: z.string(),
    email: z.string(),
    inviteMethod: z.string().meta({ description: 'SelfAccess or ThirdParty.' }),
  })
  .meta({ id: 'SubjectPortalUser', description: 'A user of the subject portal (lower camel case, D5).' });

// Examples from the demo tenant (config/demo.tenant.json, config/demo.subjects.json: Lars Berg).
const EXAMPLE_SUBJECT_ID = '48e18403-f60b-4395-aca2-2c64665b13ec';
const selfUser = {
  id: 'f5022c3b-a990-4142-9408-cd3e0b089f2f',
  displayName: 'Lars Berg',
  email: 'lars.berg@example.org',
  inviteMethod: 'SelfAccess',
};
const thirdPartyUser = {
  id: '99383496-5caf-48a1-aa17-254e69c4c824',
  displayName: 'ingrid.berg@example.org',
  email: 'ingrid.berg@example.org',
  inviteMethod: 'ThirdParty',
};
const notFound = { description: 'No subject has this id.', example: problemExample(404, 'No subject has this id.') };

/** REST subject ids are UUIDs only (D7): anything else names no subject, so 404 after the permission check (D4). */
function restSubjectId(id: string): string {
  return isUuid(id) ? id : '00000000-0000-0000-0000-000000000000';
}

const subjectIdParam = z.object({
  subjectId: z.string().meta({ description: 'The subject id (a UUID).', examples: [EXAMPLE_SUBJECT_ID] }),
});
const tag = 'Subject portal';
const conflict = {
  description: 'The portal is not configured, the access kind is not enabled, or the subject lacks a value an invitation requires.',
  example: problemExample(409, 'Third-party access to the subject portal is not enabled for this tenant.'),
};

const listPortalUsers = defineRoute({
  method: 'get',
  path: '/api/v1/subject/:subjectId/subjectAccessUsers',
  operationId: 'getSubjectPortalUsers',
  summary: 'Get subject portal users',
  tag,
  permissions: 'View:SubjectAccessInvite',
  params: subjectIdParam,
  query: z.object({ ...pagingQuery }),
  operation: graphql(`
    query RestSubjectPortalUsers(
      $subjectId: ID!, $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection
    ) {
      subjectPortalUsers(
        subjectId: $subjectId, first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection
      ) {
        totalCount
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
        edges { cursor node { ...RestPortalUser } }
      }
    }
  `),
  variables: ({ params, query }) => ({ subjectId: restSubjectId(params.subjectId), ...pagingVariables(query) }),
  respond: (data) => ({ status: 200, body: restCamelPage(data.subjectPortalUsers!, toRestPortalUser) }),
  responses: {
    200: {
      description: "A page of the subject's portal users, by e-mail (an empty page when the portal is not configured).",
      schema: camelPageSchema(PortalUserSchema, 'SubjectPortalUser'),
      example: {
        pageInfo: {
          hasNextPage: false,
          hasPreviousPage: false,
          startCursor:
            'WyJwb3J0YWxVc2VyfjQ4ZTE4NDAzLWY2MGItNDM5NS1hY2EyLTJjNjQ2NjViMTNlYyIsIkVtYWlsIiwiaW5ncmlkLmJlcmdAZXhhbXBsZS5vcmciLCI5OTM4MzQ5Ni01Y2FmLTQ4YTEtYWExNy0yNTRlNjljNGM4MjQiXQ',
          endCursor:
            'WyJwb3J0YWxVc2VyfjQ4ZTE4NDAzLWY2MGItNDM5NS1hY2EyLTJjNjQ2NjViMTNlYyIsIkVtYWlsIiwibGFycy5iZXJnQGV4YW1wbGUub3JnIiwiZjUwMjJjM2ItYTk5MC00MTQyLTk0MDgtY2QzZTBiMDg5ZjJmIl0',
          totalCount: 2,
        },
        edges: [
          {
            cursor:
              'WyJwb3J0YWxVc2VyfjQ4ZTE4NDAzLWY2MGItNDM5NS1hY2EyLTJjNjQ2NjViMTNlYyIsIkVtYWlsIiwiaW5ncmlkLmJlcmdAZXhhbXBsZS5vcmciLCI5OTM4MzQ5Ni01Y2FmLTQ4YTEtYWExNy0yNTRlNjljNGM4MjQiXQ',
            node: thirdPartyUser,
          },
          {
            cursor:
              'WyJwb3J0YWxVc2VyfjQ4ZTE4NDAzLWY2MGItNDM5NS1hY2EyLTJjNjQ2NjViMTNlYyIsIkVtYWlsIiwibGFycy5iZXJnQGV4YW1wbGUub3JnIiwiZjUwMjJjM2ItYTk5MC00MTQyLTk0MDgtY2QzZTBiMDg5ZjJmIl0',
            node: selfUser,
          },
        ],
      },
    },
    400: invalidParameter('One or more validation errors occurred.', {
      OrderDirection: ['OrderDirection must be Ascending or Descending.'],
    }),
    404: notFound,
  },
});

const invite = defineRoute({
  method: 'post',
  path: '/api/v1/subject/:subjectId/invite',
  operationId: 'inviteSubjectToPortal',
  summary: 'Invite subject to portal',
  tag,
  permissions: 'Create:SubjectAccessInvite',
  params: subjectIdParam,
  body: {
    required: false,
    schema: z.array(z.string()).nullable().optional().meta({
      id: 'InviteSubjectToPortalRequest',
      description: 'Third-party e-mail addresses. No body (or null): the subject itself is invited (self access).',
    }),
    example: ['ingrid.berg@example.org'],
  },
  operation: graphql(`
    mutation RestInviteSubjectToPortal($input: InviteSubjectToPortalInput!) {
      inviteSubjectToPortal(input: $input) { portalUsers { ...RestPortalUser } }
    }
  `),
  variables: ({ params, body }) => ({ input: { subjectId: restSubjectId(params.subjectId), emails: body ?? null } }),
  // The body is the list itself: `emails[1]` is `[1]` as sent (D5).
  location: (path) => path.replace(/^emails/, '') || '$',
  respond: (data) => ({ status: 200, body: data.inviteSubjectToPortal!.portalUsers.map(toRestPortalUser) }),
  responses: {
    200: {
      description: 'The portal users the call concerns (new or already invited: inviting is idempotent per subject and e-mail).',
      schema: z.array(PortalUserSchema),
      example: [thirdPartyUser],
    },
    400: {
      description: 'The body is invalid.',
      example: problemExample(400, 'One or more validation errors occurred.', { '[0]': ["'ingrid.berg' is not a valid e-mail address."] }),
    },
    404: notFound,
    409: conflict,
  },
});

const removeAccess = defineRoute({
  method: 'delete',
  path: '/api/v1/subject/:subjectId/invite',
  operationId: 'removeSubjectPortalAccess',
  summary: 'Remove access to portal',
  tag,
  permissions: 'Delete:SubjectAccessInvite',
  params: subjectIdParam,
  query: z.object({
    thirdPartyUserEmails: z
      .array(z.string())
      .optional()
      .meta({
        description:
          'Third-party users to remove (repeatable or comma-separated; unknown addresses are ignored). Absent: the self-access user is removed.',
        examples: [['ingrid.berg@example.org']],
      }),
  }),
  operation: graphql(`
    mutation RestRemoveSubjectPortalAccess($input: RemoveSubjectPortalAccessInput!) {
      removeSubjectPortalAccess(input: $input) { portalUsers { ...RestPortalUser } }
    }
  `),
  variables: ({ params, query }) => ({
    input: { subjectId: restSubjectId(params.subjectId), thirdPartyUserEmails: query.thirdPartyUserEmails ?? null },
  }),
  location: (path) => (path.startsWith('thirdPartyUserEmails') ? path : pascalLocation(path)), // documented lower case
  respond: (data) => ({ status: 200, body: data.removeSubjectPortalAccess!.portalUsers.map(toRestPortalUser) }),
  responses: {
    200: {
      description: 'The portal users removed (their invitation mails not yet sent are cancelled).',
      schema: z.array(PortalUserSchema),
      example: [thirdPartyUser],
    },
    404: notFound,
    409: conflict,
  },
});

export const portalRoutes = [listPortalUsers, invite, removeAccess];
