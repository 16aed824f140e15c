import { z } from 'zod';
import { NotFoundError } from '../../errors.js';
import { graphql } from '../../generated/gql.js';
import type { RestSubjectFragment, RestSubjectWithLocationsFragment } from '../../generated/graphql.js';
import { SentValueSchema, defineRoute, pageSchema, pagingQuery, pagingVariables, pascalLocation, restPage, sentValues } from '../../rest.js';
import { RestStructuralEntitySchema, toRestEntity } from '../structural-entity/structural-entity.routes.js';
import { isUuid } from './subject.repository.js';

graphql(`
  fragment RestSubject on Subject {
    subjectId
    externalId
    customFieldValues { field { key name type required isArray } values { dataType valueText } }
  }
`);

graphql(`
  fragment RestSubjectWithLocations on Subject {
    ...RestSubject
    structuralEntities(first: 1000) { edges { node { ...RestStructuralEntity } } }
  }
`);

/** The contract's subject shape (D7); StructuralEntities only in the get-by-id shape. */
export function toRestSubject(s: RestSubjectFragment) {
  return {
    Id: s.subjectId,
    ExternalId: s.externalId,
    CustomFieldValues: s.customFieldValues.map((v) => {
      const values = v.values.map((x) => ({ DataType: x.dataType, ValueText: x.valueText }));
      return {
        Field: { Key: v.field.key, Name: v.field.name, Type: v.field.type, Required: v.field.required, IsArray: v.field.isArray },
        Value: v.field.isArray ? values : values[0],
      };
    }),
  };
}

function toRestSubjectById(s: RestSubjectWithLocationsFragment | null | undefined) {
  if (!s) throw new NotFoundError('No subject has this id.');
  return { ...toRestSubject(s), StructuralEntities: s.structuralEntities.edges.map((e) => toRestEntity(e.node)) };
}

const TypedValue = z.object({ DataType: z.string(), ValueText: z.string() });
const RestSubjectSchema = z.object({
  Id: z.string(),
  ExternalId: z.string().nullable(),
  CustomFieldValues: z.array(
    z.object({
      Field: z.object({ Key: z.string(), Name: z.string(), Type: z.string(), Required: z.boolean(), IsArray: z.boolean() }),
      Value: z.union([TypedValue, z.array(TypedValue)]),
    }),
  ),
});
const RestSubjectByIdSchema = RestSubjectSchema.extend({ StructuralEntities: z.array(RestStructuralEntitySchema) });

/**
 * REST subject ids are UUIDs only (D7); GraphQL also takes global ids. Anything else goes to the operation
 * as an id that names no subject, so it answers 404 after its permission check (403 comes first, D4).
 */
function restSubjectId(id: string): string {
  return isUuid(id) ? id : '00000000-0000-0000-0000-000000000000';
}

const keyList = z.array(z.string()).optional();
const subjectIdParam = z.object({ subjectId: z.string() });
const FILTER_VALUE = /^customFieldValueFilter\.values\[(.*)\]$/i;

// D5: filter locations keep their documented spelling, everything else is PascalCased.
const subjectListLocation = (path: string) => (path.startsWith('customFieldValueFilter') ? path : pascalLocation(path));

const listSubjects = defineRoute({
  method: 'get',
  path: '/api/v2/subject',
  operationId: 'getSubjects',
  summary: 'Get subjects',
  tag: 'Subjects',
  permissions: 'List:Subject',
  query: z.looseObject({
    StructuralEntityKeys: keyList.meta({ description: 'Subjects located at any of these (repeatable or comma-separated).' }),
    structuralEntityKey: keyList.meta({ description: 'Alias of StructuralEntityKeys.' }),
    IncludeDescendants: z
      .string()
      .regex(/^(true|false)?$/i, 'IncludeDescendants must be true or false.')
      .transform((v) => v.toLowerCase() !== 'false')
      .optional(),
    SearchTerm: z.string().optional(),
    'customFieldValueFilter.match': z
      .string()
      .regex(/^(exactall|exactany)$/i, 'customFieldValueFilter.match must be ExactAll or ExactAny.')
      .transform((v) => (v.toLowerCase() === 'exactany' ? ('EXACT_ANY' as const) : ('EXACT_ALL' as const)))
      .optional(),
    ...pagingQuery,
  }),
  operation: graphql(`
    query RestSubjects(
      $structuralEntityKeys: [String!], $includeDescendants: Boolean, $searchTerm: String,
      $customFieldValueFilter: CustomFieldValueFilterInput,
      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection
    ) {
      subjects(
        structuralEntityKeys: $structuralEntityKeys, includeDescendants: $includeDescendants, searchTerm: $searchTerm,
        customFieldValueFilter: $customFieldValueFilter,
        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection
      ) {
        totalCount
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
        edges { cursor node { ...RestSubject } }
      }
    }
  `),
  variables: ({ query: q }) => {
    const keys = [...(q.StructuralEntityKeys ?? []), ...(q.structuralEntityKey ?? [])];
    // `customFieldValueFilter.values[<key>]=v`, repeatable per key (values are not split on commas).
    const values = Object.entries(q)
      .map(([name, v]) => [FILTER_VALUE.exec(name)?.[1], v] as const)
      .filter((e): e is readonly [string, unknown] => e[0] !== undefined)
      .map(([key, v]) => ({ key, values: (Array.isArray(v) ? v : [v]).map(String) }));
    return {
      structuralEntityKeys: q.StructuralEntityKeys || q.structuralEntityKey ? keys : undefined,
      includeDescendants: q.IncludeDescendants,
      searchTerm: q.SearchTerm,
      customFieldValueFilter: values.length > 0 || q['customFieldValueFilter.match'] ? { values, match: q['customFieldValueFilter.match'] } : undefined,
      ...pagingVariables(q),
    };
  },
  location: subjectListLocation,
  respond: (data) => ({ status: 200, body: restPage(data.subjects!, toRestSubject) }),
  responses: { 200: { description: 'A page of subjects (without StructuralEntities).', schema: pageSchema(RestSubjectSchema) } },
});

const getSubject = defineRoute({
  method: 'get',
  path: '/api/v2/subject/:subjectId',
  operationId: 'getSubjectById',
  summary: 'Get subject by id',
  tag: 'Subjects',
  permissions: 'View:Subject',
  params: subjectIdParam,
  operation: graphql(`
    query RestSubject($id: ID!) { subject(id: $id) { ...RestSubjectWithLocations } }
  `),
  variables: ({ params }) => ({ id: restSubjectId(params.subjectId) }),
  respond: (data) => ({ status: 200, body: toRestSubjectById(data.subject) }),
  responses: { 200: { description: 'The subject with its structural entities.', schema: RestSubjectByIdSchema }, 404: { description: 'No subject has this id.' } },
});

const updateSubject = defineRoute({
  method: 'patch',
  path: '/api/v2/subject/:subjectId',
  operationId: 'updateSubjectById',
  summary: 'Update subject by id',
  tag: 'Subjects',
  permissions: 'Edit:Subject',
  params: subjectIdParam,
  body: {
    required: true,
    schema: z
      .object({ CustomFields: z.array(SentValueSchema).optional(), CustomFieldValues: z.array(SentValueSchema).optional().meta({ description: 'Alias of CustomFields.' }) })
      .refine((b) => b.CustomFields !== undefined || b.CustomFieldValues !== undefined, { message: 'CustomFields is required.', path: ['CustomFields'] }),
  },
  operation: graphql(`
    mutation RestUpdateSubject($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { ...RestSubjectWithLocations } } }
  `),
  variables: ({ params, body }) => ({
    input: {
      id: restSubjectId(params.subjectId),
      ...(body.CustomFields !== undefined ? { customFields: sentValues(body.CustomFields) } : { customFieldValues: sentValues(body.CustomFieldValues ?? []) }),
    },
  }),
  respond: (data) => ({ status: 200, body: toRestSubjectById(data.updateSubject?.subject) }),
  responses: { 200: { description: 'The updated subject (get-by-id shape).', schema: RestSubjectByIdSchema }, 409: { description: 'Another subject has these matching values.' } },
});

const UpsertResponseSchema = z.object({
  internalId: z.string(),
  externalId: z.string().nullable(),
  customFieldValues: z.array(z.object({ customField: z.object({ id: z.string() }), value: z.string() })),
});

const upsertSubject = defineRoute({
  method: 'post',
  path: '/api/v2/messaging/subject',
  operationId: 'upsertSubject',
  summary: 'Upsert subject',
  tag: 'Subjects',
  permissions: 'Create:Subject (new); Edit:Subject (existing), plus Create:SubjectLocation and Delete:SubjectLocation with StructuralEntityKeys',
  body: {
    required: true,
    schema: z.object({
      CustomFieldValues: z.array(SentValueSchema),
      StructuralEntityKeys: z.array(z.string()).nullable().optional().meta({ description: 'Replaces the locations when given.' }),
    }),
  },
  operation: graphql(`
    mutation RestUpsertSubject($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { ...RestSubject } } }
  `),
  variables: ({ body }) => ({
    input: {
      customFieldValues: sentValues(body.CustomFieldValues),
      ...(body.StructuralEntityKeys !== undefined && body.StructuralEntityKeys !== null ? { structuralEntityKeys: body.StructuralEntityKeys } : {}),
    },
  }),
  respond: (data) => {
    const { created, subject } = data.upsertSubject!;
    return {
      status: created ? 201 : 200,
      body: {
        internalId: subject.subjectId,
        externalId: subject.externalId,
        customFieldValues: subject.customFieldValues.flatMap((v) => v.values.map((x) => ({ customField: { id: v.field.key }, value: x.valueText }))),
      },
    };
  },
  responses: {
    200: { description: 'Updated.', schema: UpsertResponseSchema },
    201: { description: 'Created.', schema: UpsertResponseSchema },
    409: { description: 'Another subject has these matching values.' },
  },
});

const addLocations = defineRoute({
  method: 'put',
  path: '/api/v1/subject/:subjectId/structuralEntities',
  operationId: 'addSubjectToLocation',
  summary: 'Add subject to location',
  tag: 'Subjects',
  permissions: 'Create:SubjectLocation',
  params: subjectIdParam,
  body: { required: true, schema: z.object({ Keys: z.array(z.string()) }) },
  operation: graphql(`
    mutation RestAddSubjectLocations($input: SubjectLocationsInput!) {
      addSubjectToStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }
    }
  `),
  variables: ({ params, body }) => ({ input: { subjectId: restSubjectId(params.subjectId), keys: body.Keys } }),
  respond: (data) => ({ status: 200, body: toRestSubjectById(data.addSubjectToStructuralEntities?.subject) }),
  responses: { 200: { description: 'The subject (get-by-id shape).', schema: RestSubjectByIdSchema }, 404: { description: 'No subject has this id.' } },
});

const removeLocations = defineRoute({
  method: 'delete',
  path: '/api/v1/subject/:subjectId/structuralEntities',
  operationId: 'removeSubjectFromLocation',
  summary: 'Remove subject from location',
  tag: 'Subjects',
  permissions: 'Delete:SubjectLocation',
  params: subjectIdParam,
  query: z.object({ keys: z.array(z.string()).optional().meta({ description: 'Comma-separated structural entity keys (required).' }) }),
  operation: graphql(`
    mutation RestRemoveSubjectLocations($input: SubjectLocationsInput!) {
      removeSubjectFromStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }
    }
  `),
  variables: ({ params, query }) => ({ input: { subjectId: restSubjectId(params.subjectId), keys: query.keys ?? [] } }),
  location: (path) => (path === 'keys' ? 'keys' : pascalLocation(path)), // documented lower case
  respond: (data) => ({ status: 200, body: toRestSubjectById(data.removeSubjectFromStructuralEntities?.subject) }),
  responses: { 200: { description: 'The subject (get-by-id shape).', schema: RestSubjectByIdSchema }, 404: { description: 'No subject has this id.' } },
});

export const subjectRoutes = [listSubjects, getSubject, updateSubject, upsertSubject, addLocations, removeLocations];
