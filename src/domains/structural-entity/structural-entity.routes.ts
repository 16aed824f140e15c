import { z } from 'zod';
import { NotFoundError } from '../../errors.js';
import { graphql } from '../../generated/gql.js';
import type { RestStructuralEntityFragment } from '../../generated/graphql.js';
import { SentValueSchema, defineRoute, pageSchema, pagingQuery, pagingVariables, restPage, sentValues } from '../../rest.js';

graphql(`
  fragment RestStructuralEntity on StructuralEntity {
    key
    displayName
    parentKey
    depth
    structureType { key name subjectAssignable customFields { key name type required } }
    customFieldValues { field { key name type required } values { dataType value valueText } }
  }
`);

/** The contract's structural entity shape (D8), PascalCase. */
export function toRestEntity(e: RestStructuralEntityFragment) {
  return {
    Key: e.key,
    DisplayName: e.displayName,
    ParentKey: e.parentKey,
    Depth: e.depth,
    StructureType: {
      Name: e.structureType.name,
      Key: e.structureType.key,
      SubjectAssignable: e.structureType.subjectAssignable,
      CustomFields: e.structureType.customFields.map((f) => ({ Name: f.name, Key: f.key, Type: f.type, Required: f.required })),
    },
    CustomFieldValues: e.customFieldValues.map((v) => {
      const value = v.values[0]!;
      return {
        Field: { Name: v.field.name, Key: v.field.key, Type: v.field.type, Required: v.field.required },
        Value: { $type: `${value.dataType}Value`, DataType: value.dataType, Value: value.value, ValueText: value.valueText },
      };
    }),
  };
}

const CustomFieldSchema = z.object({ Name: z.string(), Key: z.string(), Type: z.string(), Required: z.boolean() });
export const RestStructuralEntitySchema = z
  .object({
    Key: z.string(),
    DisplayName: z.string(),
    ParentKey: z.string().nullable(),
    Depth: z.int(),
    StructureType: z.object({ Name: z.string(), Key: z.string(), SubjectAssignable: z.boolean(), CustomFields: z.array(CustomFieldSchema) }),
    CustomFieldValues: z.array(
      z.object({
        Field: CustomFieldSchema,
        Value: z.object({ $type: z.string(), DataType: z.string(), Value: z.unknown(), ValueText: z.string() }),
      }),
    ),
  });

const listEntities = defineRoute({
  method: 'get',
  path: '/api/v1/structuralEntity',
  operationId: 'getStructuralEntities',
  summary: 'Get structural entities',
  tag: 'Structural entities',
  permissions: 'List:StructuralEntity',
  query: z.object({
    ParentKey: z.string().optional(),
    // A 32-bit integer: a larger one would fail the GraphQL Int variable instead of answering 400 (D5).
    Depth: z
      .string()
      .regex(/^[+-]?\d+$/, 'Depth must be an integer.')
      .transform(Number)
      .refine((n) => n >= -2147483648 && n <= 2147483647, 'Depth must be a 32-bit integer.')
      .optional(),
    SearchTerm: z.string().optional(),
    SubjectAssignable: z
      .string()
      .regex(/^(true|false)$/i, 'SubjectAssignable must be true or false.')
      .transform((v) => v.toLowerCase() === 'true')
      .optional(),
    StructureTypeKey: z.string().optional(),
    ...pagingQuery,
  }),
  operation: graphql(`
    query RestStructuralEntities(
      $parentKey: String, $depth: Int, $searchTerm: String, $subjectAssignable: Boolean, $structureTypeKey: String,
      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection
    ) {
      structuralEntities(
        parentKey: $parentKey, depth: $depth, searchTerm: $searchTerm, subjectAssignable: $subjectAssignable,
        structureTypeKey: $structureTypeKey,
        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection
      ) {
        totalCount
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
        edges { cursor node { ...RestStructuralEntity } }
      }
    }
  `),
  variables: ({ query: q }) => ({
    parentKey: q.ParentKey,
    depth: q.Depth,
    searchTerm: q.SearchTerm,
    subjectAssignable: q.SubjectAssignable,
    structureTypeKey: q.StructureTypeKey,
    ...pagingVariables(q),
  }),
  respond: (data) => ({ status: 200, body: restPage(data.structuralEntities!, toRestEntity) }),
  responses: { 200: { description: 'A page of structural entities.', schema: pageSchema(RestStructuralEntitySchema) } },
});

const getEntity = defineRoute({
  method: 'get',
  path: '/api/v1/structuralEntity/:structuralEntityKey',
  operationId: 'getStructuralEntityByKey',
  summary: 'Get structural entity by key',
  tag: 'Structural entities',
  permissions: 'View:StructuralEntity',
  params: z.object({ structuralEntityKey: z.string() }),
  operation: graphql(`
    query RestStructuralEntity($key: String!) {
      structuralEntity(key: $key) { ...RestStructuralEntity }
    }
  `),
  variables: ({ params }) => ({ key: params.structuralEntityKey }),
  respond: (data) => {
    if (!data.structuralEntity) throw new NotFoundError('No structural entity has this key.');
    return { status: 200, body: toRestEntity(data.structuralEntity) };
  },
  responses: { 200: { description: 'The structural entity.', schema: RestStructuralEntitySchema }, 404: { description: 'No structural entity has this key.' } },
});

const upsertEntity = defineRoute({
  method: 'put',
  path: '/api/v1/structuralEntity',
  operationId: 'upsertStructuralEntity',
  summary: 'Upsert structural entity',
  tag: 'Structural entities',
  permissions: 'Create:StructuralEntity (new) or Edit:StructuralEntity (existing)',
  body: {
    required: true,
    schema: z.object({
      Key: z.string(),
      DisplayName: z.string().nullable().optional(),
      ParentKey: z.string().nullable().optional().meta({ description: 'Absent: unchanged; null: moved to the top.' }),
      StructureTypeKey: z.string().nullable().optional(),
      CustomFieldValues: z.array(SentValueSchema).nullable().optional(),
    }),
  },
  operation: graphql(`
    mutation RestUpsertStructuralEntity($input: UpsertStructuralEntityInput!) {
      upsertStructuralEntity(input: $input) { created structuralEntity { ...RestStructuralEntity } }
    }
  `),
  variables: ({ body }) => ({
    input: {
      key: body.Key,
      // Absent stays absent (unchanged), null stays null (D8).
      ...(body.DisplayName !== undefined ? { displayName: body.DisplayName } : {}),
      ...(body.ParentKey !== undefined ? { parentKey: body.ParentKey } : {}),
      ...(body.StructureTypeKey !== undefined ? { structureTypeKey: body.StructureTypeKey } : {}),
      ...(body.CustomFieldValues ? { customFieldValues: sentValues(body.CustomFieldValues) } : {}),
    },
  }),
  respond: (data) => ({
    status: data.upsertStructuralEntity!.created ? 201 : 200,
    body: toRestEntity(data.upsertStructuralEntity!.structuralEntity),
  }),
  responses: {
    200: { description: 'Updated.', schema: RestStructuralEntitySchema },
    201: { description: 'Created.', schema: RestStructuralEntitySchema },
  },
});

export const structuralEntityRoutes = [listEntities, getEntity, upsertEntity];
