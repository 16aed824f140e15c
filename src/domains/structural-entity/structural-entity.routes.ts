import { z } from 'zod';
import { NotFoundError } from '../../core/errors.js';
import { graphql } from '../../generated/gql.js';
import type { RestStructuralEntityFragment } from '../../generated/graphql.js';

import { booleanQuery, pageSchema, pagingQuery, pagingVariables, restPage, sentValues } from '../../http/rest/envelopes.js';
import { AnsweredValue, SentValueSchema } from '../custom-field/index.js';
import { defineRoute } from '../../http/rest/route.js';
import { documentedAs, invalidParameter, problemExample } from '../../http/openapi/documented.js';

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

const CustomFieldSchema = z
  .object({ Name: z.string(), Key: z.string(), Type: z.string(), Required: z.boolean() })
  .meta({ id: 'StructuralEntityCustomField', description: 'A custom field of a structure type.' });
export const RestStructuralEntitySchema = z
  .object({
    Key: z.string(),
    DisplayName: z.string(),
    ParentKey: z.string().nullable().meta({ description: 'null at the top.' }),
    Depth: z.int().meta({ description: '1 at the top; parent + 1 below.' }),
    StructureType: z
      .object({ Name: z.string(), Key: z.string(), SubjectAssignable: z.boolean(), CustomFields: z.array(CustomFieldSchema) })
      .meta({ id: 'StructureType' }),
    CustomFieldValues: z.array(
      z
        .object({
          Field: CustomFieldSchema,
          Value: z
            .object({
              $type: z.string().meta({ description: 'The data type followed by "Value", e.g. StringValue.' }),
              DataType: z.string(),
              Value: AnsweredValue,
              ValueText: z.string(),
            })
            .meta({ id: 'StructuralEntityValue' }),
        })
        .meta({ id: 'StructuralEntityCustomFieldValue' }),
    ),
  })
  .meta({ id: 'StructuralEntity', description: 'A structural entity (D8).' });

// Examples from the demo tenant (config/demo.tenant.json).
const departmentType = {
  Name: 'Department',
  Key: 'department',
  SubjectAssignable: true,
  CustomFields: [
    { Name: 'Cost center', Key: 'costCenter', Type: 'Text', Required: false },
    { Name: 'Headcount limit', Key: 'headcountLimit', Type: 'Integer', Required: false },
  ],
};
const costCenter = (value: string) => ({
  Field: { Name: 'Cost center', Key: 'costCenter', Type: 'Text', Required: false },
  Value: { $type: 'StringValue', DataType: 'String', Value: value, ValueText: value },
});
const headcountLimit = (value: number) => ({
  Field: { Name: 'Headcount limit', Key: 'headcountLimit', Type: 'Integer', Required: false },
  Value: { $type: 'IntegerValue', DataType: 'Integer', Value: value, ValueText: String(value) },
});
export const exampleHeadOffice = {
  Key: 'hq',
  DisplayName: 'Head office',
  ParentKey: 'acme',
  Depth: 2,
  StructureType: departmentType,
  CustomFieldValues: [costCenter('CC-100')],
};
export const exampleSalesNorth = {
  Key: 'sales-north',
  DisplayName: 'Sales North',
  ParentKey: 'sales',
  Depth: 3,
  StructureType: departmentType,
  CustomFieldValues: [],
};
const exampleSales = {
  Key: 'sales',
  DisplayName: 'Sales',
  ParentKey: 'acme',
  Depth: 2,
  StructureType: departmentType,
  CustomFieldValues: [costCenter('CC-200'), headcountLimit(40)],
};
const exampleSalesWest = {
  Key: 'sales-west',
  DisplayName: 'Sales West',
  ParentKey: 'sales',
  Depth: 3,
  StructureType: departmentType,
  CustomFieldValues: [costCenter('CC-230'), headcountLimit(12)],
};

const listEntities = defineRoute({
  method: 'get',
  path: '/api/v1/structuralEntity',
  operationId: 'getStructuralEntities',
  summary: 'Get structural entities',
  tag: 'Structural entities',
  permissions: 'List:StructuralEntity',
  query: z.object({
    ParentKey: z.string().optional().meta({ description: 'Only the children of this entity.' }),
    // A 32-bit integer: a larger one would fail the GraphQL Int variable instead of answering 400 (D5).
    Depth: documentedAs(
      z
        .string()
        .regex(/^[+-]?\d+$/, 'Depth must be an integer.')
        .transform(Number)
        .refine((n) => n >= -2147483648 && n <= 2147483647, 'Depth must be a 32-bit integer.')
        .optional(),
      z.int32().optional().meta({ description: 'Only entities at this depth (1 at the top).' }),
    ),
    SearchTerm: z.string().optional().meta({ description: 'Search on the display name and key.' }),
    SubjectAssignable: booleanQuery(
      'SubjectAssignable',
      'Only entities whose structure type is (true) or is not (false) subject-assignable.',
    ),
    StructureTypeKey: z.string().optional().meta({ description: 'Only entities of this structure type.' }),
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
  responses: {
    200: {
      description: 'A page of structural entities.',
      schema: pageSchema(RestStructuralEntitySchema, 'StructuralEntity'),
      example: {
        PageInfo: {
          HasNextPage: false,
          HasPreviousPage: false,
          StartCursor: 'WyJzdHJ1Y3R1cmFsRW50aXR5IiwiS2V5IiwiaHEiLCJocSJd',
          EndCursor: 'WyJzdHJ1Y3R1cmFsRW50aXR5IiwiS2V5Iiwic2FsZXMiLCJzYWxlcyJd',
          TotalCount: 2,
        },
        Edges: [
          { Node: exampleHeadOffice, Cursor: 'WyJzdHJ1Y3R1cmFsRW50aXR5IiwiS2V5IiwiaHEiLCJocSJd' },
          { Node: exampleSales, Cursor: 'WyJzdHJ1Y3R1cmFsRW50aXR5IiwiS2V5Iiwic2FsZXMiLCJzYWxlcyJd' },
        ],
      },
    },
    400: invalidParameter('One or more validation errors occurred.', { SubjectAssignable: ['SubjectAssignable must be true or false.'] }),
  },
});

const getEntity = defineRoute({
  method: 'get',
  path: '/api/v1/structuralEntity/:structuralEntityKey',
  operationId: 'getStructuralEntityByKey',
  summary: 'Get structural entity by key',
  tag: 'Structural entities',
  permissions: 'View:StructuralEntity',
  params: z.object({ structuralEntityKey: z.string().meta({ description: 'The key of the structural entity.', examples: ['sales'] }) }),
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
  responses: {
    200: { description: 'The structural entity.', schema: RestStructuralEntitySchema, example: exampleSales },
    404: { description: 'No structural entity has this key.', example: problemExample(404, 'No structural entity has this key.') },
  },
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
    schema: z
      .object({
        Key: z.string(),
        DisplayName: z.string().nullable().optional().meta({ description: 'Required on create; absent keeps the value.' }),
        ParentKey: z.string().nullable().optional().meta({ description: 'Absent: unchanged; null: moved to the top.' }),
        StructureTypeKey: z.string().nullable().optional().meta({ description: 'Required on create; absent keeps the type.' }),
        CustomFieldValues: z
          .array(SentValueSchema)
          .nullable()
          .optional()
          .meta({ description: 'Sets the listed fields, keeps the others; a null value clears.' }),
      })
      .meta({ id: 'UpsertStructuralEntityRequest' }),
    example: {
      Key: 'sales-west',
      DisplayName: 'Sales West',
      ParentKey: 'sales',
      StructureTypeKey: 'department',
      CustomFieldValues: [
        { Key: 'costCenter', Value: { String: { Value: 'CC-230' } } },
        { Key: 'headcountLimit', Value: { Integer: { Value: 12 } } },
      ],
    },
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
    200: { description: 'Updated.', schema: RestStructuralEntitySchema, example: exampleSalesWest },
    201: { description: 'Created.', schema: RestStructuralEntitySchema, example: exampleSalesWest },
    400: {
      description: 'The body is invalid.',
      example: problemExample(400, 'One or more validation errors occurred.', {
        'CustomFieldValues[1].Value.Integer.Value': ['Expected a JSON integer.'],
      }),
    },
    409: {
      description: 'The entity has subjects and its new structure type is not subject-assignable.',
      example: problemExample(409, "'sales-west' has subjects; its type cannot change to 'company', which is not subject-assignable."),
    },
  },
});

export const structuralEntityRoutes = [listEntities, getEntity, upsertEntity];
