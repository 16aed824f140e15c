import { z } from 'zod';
import { NotFoundError } from '../../core/errors.js';
import { graphql } from '../../generated/gql.js';
import type { RestSubjectFragment, RestSubjectWithLocationsFragment } from '../../generated/graphql.js';

import { booleanQuery, pageSchema, pagingQuery, pagingVariables, restPage, sentValues } from '../../http/rest/envelopes.js';
import { SentValueSchema } from '../custom-field/index.js';
import { defineRoute, pascalLocation } from '../../http/rest/route.js';
import { documentedAs, invalidParameter, problemExample } from '../../http/openapi/documented.js';
import { RestStructuralEntitySchema, exampleHeadOffice, exampleSalesNorth, toRestEntity } from '../structural-entity/index.js';
import { isUuid } from './subject.repository.js';
import { type SubjectListInput, listSubjects as listSubjectPage, subjectConfig } from './subject.service.js';
import { forEachFieldValue, valueText } from '../custom-field/index.js';
import { hasPermission } from '../../core/permissions.js';
import { DEFAULT_PAGE_SIZE, type PageArgs } from '../../db/paging.js';
import type { Context } from '../../graphql/context.js';
import { UNSLICED_NODES } from '../../graphql/slices.js';
import type { RestSubjectsQueryVariables } from '../../generated/graphql.js';

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

const TypedValue = z
  .object({
    DataType: z.string().meta({ description: 'String, Integer, Decimal, Boolean, Date, Time, DateTime or UserIdentifier.' }),
    ValueText: z.string(),
  })
  .meta({ id: 'SubjectValue', description: 'A stored value with its data type, as text.' });
const SubjectFieldSchema = z
  .object({ Key: z.string(), Name: z.string(), Type: z.string(), Required: z.boolean(), IsArray: z.boolean() })
  .meta({ id: 'SubjectCustomField', description: 'A subject field of the tenant.' });
const subjectShape = {
  Id: z.string().meta({ description: 'The subject id (a UUID).' }),
  ExternalId: z.string().nullable().meta({ description: "The value of the tenant's external id field." }),
  CustomFieldValues: z.array(
    z
      .object({
        Field: SubjectFieldSchema,
        Value: z.union([TypedValue, z.array(TypedValue)]).meta({ description: 'One value, or the list of an array field.' }),
      })
      .meta({ id: 'SubjectCustomFieldValue' }),
  ),
};
const RestSubjectSchema = z.object(subjectShape).meta({ id: 'Subject', description: 'A subject (D7), as listed.' });
const RestSubjectByIdSchema = z
  .object({
    ...subjectShape,
    StructuralEntities: z.array(RestStructuralEntitySchema).meta({ description: 'The structural entities the subject is located at.' }),
  })
  .meta({ id: 'SubjectWithLocations', description: 'A subject (D7) with its locations, as answered by id.' });

// Examples from the demo tenant (config/demo.tenant.json, config/demo.subjects.json).
const EXAMPLE_ID = '48e18403-f60b-4395-aca2-2c64665b13ec';
const field = (Key: string, Name: string, Type: string, Required = false) => ({ Key, Name, Type, Required, IsArray: false });
const exampleSubject = {
  Id: EXAMPLE_ID,
  ExternalId: 'E-1003',
  CustomFieldValues: [
    { Field: field('employeeNumber', 'Employee number', 'Text', true), Value: { DataType: 'String', ValueText: 'E-1003' } },
    { Field: field('fullName', 'Full name', 'Text', true), Value: { DataType: 'String', ValueText: 'Lars Berg' } },
    { Field: field('email', 'E-mail', 'Text'), Value: { DataType: 'String', ValueText: 'lars.berg@example.org' } },
    { Field: field('grade', 'Grade', 'Integer'), Value: { DataType: 'Integer', ValueText: '11' } },
  ],
};
const exampleSubjectWithLocations = { ...exampleSubject, StructuralEntities: [exampleHeadOffice] };
const exampleSubjectPage = {
  PageInfo: {
    HasNextPage: true,
    HasPreviousPage: false,
    StartCursor: 'WyJzdWJqZWN0IiwiRXh0ZXJuYWxJZCIsIjBFLTEwMDEiLCIzNjRmZjVlOS00ZTkzLTRhNmUtOWFjOC02MzYzMjJkNDg5NjMiXQ',
    EndCursor: 'WyJzdWJqZWN0IiwiRXh0ZXJuYWxJZCIsIjBFLTEwMDEiLCIzNjRmZjVlOS00ZTkzLTRhNmUtOWFjOC02MzYzMjJkNDg5NjMiXQ',
    TotalCount: 3,
  },
  Edges: [
    {
      Node: {
        Id: '364ff5e9-4e93-4a6e-9ac8-636322d48963',
        ExternalId: 'E-1001',
        CustomFieldValues: [
          { Field: field('employeeNumber', 'Employee number', 'Text', true), Value: { DataType: 'String', ValueText: 'E-1001' } },
          { Field: field('fullName', 'Full name', 'Text', true), Value: { DataType: 'String', ValueText: 'John Carpenter' } },
          { Field: field('birthDate', 'Birth date', 'Date'), Value: { DataType: 'Date', ValueText: '1985-04-12' } },
          {
            Field: { Key: 'skills', Name: 'Skills', Type: 'Text', Required: false, IsArray: true },
            Value: [
              { DataType: 'String', ValueText: 'negotiation' },
              { DataType: 'String', ValueText: 'sql' },
            ],
          },
        ],
      },
      Cursor: 'WyJzdWJqZWN0IiwiRXh0ZXJuYWxJZCIsIjBFLTEwMDEiLCIzNjRmZjVlOS00ZTkzLTRhNmUtOWFjOC02MzYzMjJkNDg5NjMiXQ',
    },
  ],
};
const notFound = { description: 'No subject has this id.', example: problemExample(404, 'No subject has this id.') };

/**
 * REST subject ids are UUIDs only (D7); GraphQL also takes global ids. Anything else goes to the operation
 * as an id that names no subject, so it answers 404 after its permission check (403 comes first, D4).
 */
function restSubjectId(id: string): string {
  return isUuid(id) ? id : '00000000-0000-0000-0000-000000000000';
}

/**
 * The REST list's answer as text, written from the page `listSubjects` loads (P164): byte for byte what
 * `respond` makes of the executed RestSubjects document (restPage over toRestSubject), key order included,
 * without the document's resolvers, the result's objects, their copy and its serialisation. A missing
 * permission (the document's FORBIDDEN) and a page large enough to be completed in slices (P65) are left
 * to the document.
 */
async function writeSubjectPage(ctx: Context, v: RestSubjectsQueryVariables): Promise<string | undefined> {
  if (!hasPermission(ctx.principal, 'List:Subject') || (v.first ?? v.last ?? DEFAULT_PAGE_SIZE) > UNSLICED_NODES) return undefined;
  // Coerced as execution coerces them: every list is a list.
  const page = await listSubjectPage(ctx, v as SubjectListInput, v as PageArgs);
  const [total, config] = await Promise.all([page.totalCount(), subjectConfig(ctx)]);
  // Per field, serialised once: what opens its entry (its descriptor; first in a subject's list or after
  // another), and what precedes each value text (a single value's with its key).
  const heads = new Map(
    config.fields.map((f) => {
      const open = `{"Field":${JSON.stringify({ Key: f.key, Name: f.name, Type: f.type, Required: f.required, IsArray: f.isArray })}`;
      const value = `{"DataType":${JSON.stringify(f.dataType)},"ValueText":`;
      return [f, { open, openNext: `,${open}`, single: `,"Value":${value}`, value, valueNext: `,${value}` }];
    }),
  );
  const info = page.pageInfo;
  // The answer's pieces in order, joined once: no intermediate text is built and copied again. The array is
  // sized for the usual page up front (about four pieces a value), not grown and copied as it fills.
  const out = new Array<string>(8 + page.edges.length * (8 + 5 * config.fields.length));
  let n = 0;
  out[n++] =
    `{"PageInfo":{"HasNextPage":${info.hasNextPage},"HasPreviousPage":${info.hasPreviousPage},` +
    `"StartCursor":${JSON.stringify(info.startCursor ?? null)},"EndCursor":${JSON.stringify(info.endCursor ?? null)},"TotalCount":${total}},` +
    `"Edges":[`;
  let edge = '{"Node":{"Id":';
  for (const { node, cursor } of page.edges) {
    out[n++] = edge;
    edge = ',{"Node":{"Id":';
    out[n++] = JSON.stringify(node.id);
    out[n++] = ',"ExternalId":';
    out[n++] = JSON.stringify(node.external_id);
    out[n++] = ',"CustomFieldValues":[';
    let first = true;
    forEachFieldValue(config.fields, node.values, (def, stored) => {
      const { open, openNext, single, value, valueNext } = heads.get(def)!;
      out[n++] = first ? open : openNext;
      first = false;
      // toRestSubject's `isArray ? values : values[0]`: a single value with none stored has no Value key.
      if (def.isArray) {
        out[n++] = ',"Value":[';
        for (let i = 0; i < stored.length; i++) {
          out[n++] = i > 0 ? valueNext : value;
          out[n++] = JSON.stringify(valueText(def.dataType, stored[i]!));
          out[n++] = '}';
        }
        out[n++] = ']}';
      } else if (stored.length > 0) {
        out[n++] = single;
        out[n++] = JSON.stringify(valueText(def.dataType, stored[0]!));
        out[n++] = '}}';
      } else out[n++] = '}';
    });
    out[n++] = ']},"Cursor":';
    out[n++] = JSON.stringify(cursor);
    out[n++] = '}';
  }
  out[n++] = ']}';
  out.length = n;
  return out.join('');
}

const keyList = z.array(z.string()).optional();
const subjectIdParam = z.object({ subjectId: z.string().meta({ description: 'The subject id (a UUID).', examples: [EXAMPLE_ID] }) });
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
  description:
    'Filter by custom field values with `customFieldValueFilter.values[<field key>]=<value>` (repeatable per key; values are not split on commas), combined by `customFieldValueFilter.match`.',
  query: z.looseObject({
    StructuralEntityKeys: keyList.meta({ description: 'Subjects located at any of these (repeatable or comma-separated).' }),
    structuralEntityKey: keyList.meta({ description: 'Alias of StructuralEntityKeys.' }),
    IncludeDescendants: booleanQuery(
      'IncludeDescendants',
      'Also subjects located below those structural entities (false when absent; present without a value: true).',
      { bare: true },
    ),
    SearchTerm: z
      .string()
      .optional()
      .meta({ description: "Search on the subjects' values; the answer is ordered by relevance unless OrderBy is given." }),
    'customFieldValueFilter.match': documentedAs(
      z
        .string()
        .regex(/^(exactall|exactany)$/i, 'customFieldValueFilter.match must be ExactAll or ExactAny.')
        .transform((v) => (v.toLowerCase() === 'exactany' ? ('EXACT_ANY' as const) : ('EXACT_ALL' as const)))
        .optional(),
      z.enum(['ExactAll', 'ExactAny']).optional().meta({
        description:
          'ExactAll (default): every customFieldValueFilter.values entry must match; ExactAny: one suffices. The names are matched case-insensitively.',
      }),
    ),
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
      customFieldValueFilter:
        values.length > 0 || q['customFieldValueFilter.match'] ? { values, match: q['customFieldValueFilter.match'] } : undefined,
      ...pagingVariables(q),
    };
  },
  location: subjectListLocation,
  respond: (data) => ({ status: 200, body: restPage(data.subjects!, toRestSubject) }),
  direct: writeSubjectPage,
  responses: {
    200: {
      description: 'A page of subjects (without StructuralEntities).',
      schema: pageSchema(RestSubjectSchema, 'Subject'),
      example: exampleSubjectPage,
    },
    400: invalidParameter('First must be an integer from 0 to 1000.', { First: ['First must be an integer from 0 to 1000.'] }),
  },
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
  responses: {
    200: { description: 'The subject with its structural entities.', schema: RestSubjectByIdSchema, example: exampleSubjectWithLocations },
    404: notFound,
  },
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
      .object({
        CustomFields: z
          .array(SentValueSchema)
          .optional()
          .meta({ description: 'The fields to set (required unless CustomFieldValues is given); the others keep their values.' }),
        CustomFieldValues: z.array(SentValueSchema).optional().meta({ description: 'Alias of CustomFields.' }),
      })
      .refine((b) => b.CustomFields !== undefined || b.CustomFieldValues !== undefined, {
        message: 'CustomFields is required.',
        path: ['CustomFields'],
      })
      .meta({ id: 'UpdateSubjectRequest' }),
    example: { CustomFields: [{ Key: 'email', Value: { String: { Value: 'lars.berg@example.org' } } }] },
  },
  operation: graphql(`
    mutation RestUpdateSubject($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { ...RestSubjectWithLocations } } }
  `),
  variables: ({ params, body }) => ({
    input: {
      id: restSubjectId(params.subjectId),
      ...(body.CustomFields !== undefined
        ? { customFields: sentValues(body.CustomFields) }
        : { customFieldValues: sentValues(body.CustomFieldValues ?? []) }),
    },
  }),
  respond: (data) => ({ status: 200, body: toRestSubjectById(data.updateSubject?.subject) }),
  responses: {
    200: { description: 'The updated subject (get-by-id shape).', schema: RestSubjectByIdSchema, example: exampleSubjectWithLocations },
    400: {
      description: 'The body is invalid.',
      example: problemExample(400, 'One or more validation errors occurred.', {
        'CustomFields[0].Value.Integer.Value': ['Expected a JSON integer.'],
      }),
    },
    404: notFound,
    409: {
      description: 'Another subject has these matching values.',
      example: problemExample(409, 'Another subject already has these matching field values.'),
    },
  },
});

const UpsertResponseSchema = z
  .object({
    internalId: z.string().meta({ description: 'The subject id (a UUID).' }),
    externalId: z.string().nullable(),
    customFieldValues: z.array(
      z
        .object({
          customField: z.object({ id: z.string().meta({ description: 'The field key.' }) }),
          value: z.string().meta({ description: 'The value as text (one entry per value of an array field).' }),
        })
        .meta({ id: 'UpsertSubjectResponseValue' }),
    ),
  })
  .meta({ id: 'UpsertSubjectResponse', description: 'The upserted subject (lower camel case, D5).' });
const exampleUpsertAnswer = {
  internalId: EXAMPLE_ID,
  externalId: 'E-1003',
  customFieldValues: [
    { customField: { id: 'employeeNumber' }, value: 'E-1003' },
    { customField: { id: 'fullName' }, value: 'Lars Berg' },
    { customField: { id: 'grade' }, value: '11' },
  ],
};

const upsertSubject = defineRoute({
  method: 'post',
  path: '/api/v2/messaging/subject',
  operationId: 'upsertSubject',
  summary: 'Upsert subject',
  tag: 'Subjects',
  permissions:
    'Create:Subject (new); Edit:Subject (existing), plus Create:SubjectLocation and Delete:SubjectLocation with StructuralEntityKeys',
  body: {
    required: true,
    schema: z
      .object({
        CustomFieldValues: z.array(SentValueSchema).meta({
          description: "The subject is matched by the tenant's matching fields among these; the listed fields are set, the others kept.",
        }),
        StructuralEntityKeys: z.array(z.string()).nullable().optional().meta({ description: 'Replaces the locations when given.' }),
      })
      .meta({ id: 'UpsertSubjectRequest' }),
    example: {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'E-1003' } } },
        { Key: 'fullName', Value: { String: { Value: 'Lars Berg' } } },
        { Key: 'grade', Value: { Integer: { Value: 11 } } },
      ],
      StructuralEntityKeys: ['hq'],
    },
  },
  operation: graphql(`
    mutation RestUpsertSubject($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { ...RestSubject } } }
  `),
  variables: ({ body }) => ({
    input: {
      customFieldValues: sentValues(body.CustomFieldValues),
      ...(body.StructuralEntityKeys !== undefined && body.StructuralEntityKeys !== null
        ? { structuralEntityKeys: body.StructuralEntityKeys }
        : {}),
    },
  }),
  respond: (data) => {
    const { created, subject } = data.upsertSubject!;
    return {
      status: created ? 201 : 200,
      body: {
        internalId: subject.subjectId,
        externalId: subject.externalId,
        customFieldValues: subject.customFieldValues.flatMap((v) =>
          v.values.map((x) => ({ customField: { id: v.field.key }, value: x.valueText })),
        ),
      },
    };
  },
  responses: {
    200: { description: 'Updated.', schema: UpsertResponseSchema, example: exampleUpsertAnswer },
    201: { description: 'Created.', schema: UpsertResponseSchema, example: exampleUpsertAnswer },
    400: {
      description: 'The body is invalid.',
      example: problemExample(400, 'One or more validation errors occurred.', {
        CustomFieldValues: ["The required field 'fullName' is missing."],
      }),
    },
    409: {
      description: 'Another subject has these matching values, or the tenant has no matching fields.',
      example: problemExample(409, 'The subject changed concurrently; retry the request.'),
    },
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
  body: {
    required: true,
    schema: z
      .object({ Keys: z.array(z.string()).meta({ description: 'Structural entity keys to add (subject-assignable ones).' }) })
      .meta({ id: 'AddSubjectToLocationRequest' }),
    example: { Keys: ['sales-north'] },
  },
  operation: graphql(`
    mutation RestAddSubjectLocations($input: SubjectLocationsInput!) {
      addSubjectToStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }
    }
  `),
  variables: ({ params, body }) => ({ input: { subjectId: restSubjectId(params.subjectId), keys: body.Keys } }),
  respond: (data) => ({ status: 200, body: toRestSubjectById(data.addSubjectToStructuralEntities?.subject) }),
  responses: {
    200: {
      description: 'The subject (get-by-id shape).',
      schema: RestSubjectByIdSchema,
      example: { ...exampleSubject, StructuralEntities: [exampleHeadOffice, exampleSalesNorth] },
    },
    400: {
      description: 'The body is invalid, or a key names no subject-assignable structural entity.',
      example: problemExample(400, 'One or more validation errors occurred.', {
        'Keys[0]': ["Subjects cannot be assigned to 'acme' (its structure type is not subject-assignable)."],
        'Keys[1]': ["Unknown structural entity 'nowhere'."],
      }),
    },
    404: notFound,
  },
});

const removeLocations = defineRoute({
  method: 'delete',
  path: '/api/v1/subject/:subjectId/structuralEntities',
  operationId: 'removeSubjectFromLocation',
  summary: 'Remove subject from location',
  tag: 'Subjects',
  permissions: 'Delete:SubjectLocation',
  params: subjectIdParam,
  query: z.object({
    // Absent keys answer 400 (after the subject is found, D7): documented as required.
    keys: documentedAs(
      z.array(z.string()).optional(),
      z
        .array(z.string())
        .min(1)
        .meta({ description: 'Structural entity keys to remove (repeatable or comma-separated).', examples: [['sales-north']] }),
    ),
  }),
  operation: graphql(`
    mutation RestRemoveSubjectLocations($input: SubjectLocationsInput!) {
      removeSubjectFromStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }
    }
  `),
  variables: ({ params, query }) => ({ input: { subjectId: restSubjectId(params.subjectId), keys: query.keys ?? [] } }),
  location: (path) => (path === 'keys' ? 'keys' : pascalLocation(path)), // documented lower case
  respond: (data) => ({ status: 200, body: toRestSubjectById(data.removeSubjectFromStructuralEntities?.subject) }),
  responses: {
    200: { description: 'The subject (get-by-id shape).', schema: RestSubjectByIdSchema, example: exampleSubjectWithLocations },
    400: {
      description: 'The request is invalid, e.g. no key is given.',
      example: problemExample(400, 'At least one key is required.', { keys: ['At least one key is required.'] }),
    },
    404: notFound,
  },
});

export const subjectRoutes = [listSubjects, getSubject, updateSubject, upsertSubject, addLocations, removeLocations];
