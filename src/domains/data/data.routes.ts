import { z } from 'zod';
import { graphql } from '../../generated/gql.js';

import { defineRoute, pascalLocation } from '../../http/rest/route.js';
import { problemExample } from '../../http/openapi/documented.js';

// Examples from the demo tenant (config/demo.tenant.json: extract steps-week; config/demo.subjects.json: E-1003).

const refreshDataSet = defineRoute({
  method: 'post',
  path: '/api/v1/dataSet/:dataExtractKey/refresh',
  operationId: 'refreshDataSet',
  summary: 'Refresh data set',
  tag: 'Data sets',
  permissions: 'Refresh:DataSet',
  params: z.object({ dataExtractKey: z.string().meta({ description: 'The key of the data extract.', examples: ['steps-week'] }) }),
  operation: graphql(`
    mutation RestRefreshDataSet($input: RefreshDataSetInput!) { refreshDataSet(input: $input) { dataExtractKey flaggedEntries } }
  `),
  variables: ({ params }) => ({ input: { dataExtractKey: params.dataExtractKey } }),
  respond: (data) => ({
    status: 200,
    body: { DataExtractKey: data.refreshDataSet!.dataExtractKey, FlaggedEntries: data.refreshDataSet!.flaggedEntries },
  }),
  responses: {
    200: {
      description: 'Every cached entry of the extract is flagged stale and re-fetched in the background.',
      schema: z
        .object({ DataExtractKey: z.string(), FlaggedEntries: z.int().meta({ description: 'Cached entries flagged stale.' }) })
        .meta({ id: 'RefreshDataSetResponse' }),
      example: { DataExtractKey: 'steps-week', FlaggedEntries: 3 },
    },
    404: { description: 'No data extract has this key.', example: problemExample(404, "No data extract has the key 'steps-week'.") },
  },
});

const DataPointBody = z
  .object({
    Id: z.string(),
    SubjectIdentifier: z.string(),
    DataPointItems: z.array(
      z
        .object({
          Key: z.string(),
          Value: z
            .object({ DataType: z.string(), Value: z.union([z.string(), z.number(), z.boolean(), z.null()]).optional() })
            .meta({ id: 'DataPointValue' }),
        })
        .meta({ id: 'DataPointItem' }),
    ),
  })
  .meta({ id: 'DataPoint', description: 'A new or updated data point of the subject.' });

const filterSchema = z.record(z.string(), z.unknown()).nullable().optional().meta({
  description:
    "Property path (dot-separated) → the value the extract's options must hold there; every entry must hold; empty matches every extract.",
});

const ChangeAnswerSchema = z
  .object({
    FlaggedDataExtractKeys: z.array(z.string()).meta({ description: 'The extracts whose cached entries for the subject were flagged.' }),
  })
  .meta({ id: 'DataChangeResponse' });

// Filter paths are the provider's own, not contract properties: kept as sent.
const changeLocation = (path: string) =>
  path.startsWith('dataExtractsOptionsValuesFilter.')
    ? `DataExtractsOptionsValuesFilter${path.slice('dataExtractsOptionsValuesFilter'.length)}`
    : pascalLocation(path);

const common = {
  tag: 'Data change (data providers)',
  scopes: ['ServiceDataProviderApi', 'ServiceApi'] as ('ServiceDataProviderApi' | 'ServiceApi')[],
  permissions: "An inbound client of one of the tenant's data sources (scope ServiceDataProviderApi or ServiceApi)",
  location: changeLocation,
  responses: {
    200: {
      description: "The matching extracts' entries for the subject are flagged (none matching is not an error).",
      schema: ChangeAnswerSchema,
      example: { FlaggedDataExtractKeys: ['steps-week'] },
    },
    400: {
      description: 'The body is invalid.',
      example: problemExample(400, 'One or more validation errors occurred.', {
        SubjectIdentifier: ['Invalid input: expected string, received undefined'],
      }),
    },
    403: {
      description: "The token lacks the scope, or the client is not an inbound client of one of the tenant's data sources.",
      example: problemExample(403, "The client 'demo-client' is not an inbound client of any data source."),
    },
    404: { description: 'No subject has this identifier.', example: problemExample(404, "No subject has the identifier 'E-9999'.") },
  },
};

const dataChange = defineRoute({
  ...common,
  method: 'post',
  path: '/connector-dataprovider/api/v1/dataChange/creationOrUpdate',
  operationId: 'dataChangeCreationOrUpdate',
  summary: 'Data change: creation or update',
  body: {
    required: true,
    schema: z
      .object({
        SubjectIdentifier: z.string().meta({ description: 'The subject, as the data source identifies it (its subjectIdentifier).' }),
        DataExtractsOptionsValuesFilter: filterSchema,
        NewOrUpdatedDataPoints: z
          .array(DataPointBody)
          .nullable()
          .optional()
          .meta({ description: "Each SubjectIdentifier must be the request's." }),
      })
      .meta({ id: 'DataChangeCreationOrUpdateRequest' }),
    example: {
      SubjectIdentifier: 'E-1003',
      DataExtractsOptionsValuesFilter: { metric: 'steps' },
      NewOrUpdatedDataPoints: [
        {
          Id: 'E-1003-steps-2026-11-21',
          SubjectIdentifier: 'E-1003',
          DataPointItems: [
            { Key: 'date', Value: { DataType: 'Date', Value: '2026-11-21' } },
            { Key: 'steps', Value: { DataType: 'Integer', Value: 9412 } },
          ],
        },
      ],
    },
  },
  operation: graphql(`
    mutation RestDataChange($input: DataChangeInput!) { reportDataChange(input: $input) { flaggedDataExtractKeys } }
  `),
  variables: ({ body }) => ({
    input: {
      subjectIdentifier: body.SubjectIdentifier,
      dataExtractsOptionsValuesFilter: body.DataExtractsOptionsValuesFilter ?? null,
      newOrUpdatedDataPoints: (body.NewOrUpdatedDataPoints ?? []).map((p) => ({
        id: p.Id,
        subjectIdentifier: p.SubjectIdentifier,
        dataPointItems: p.DataPointItems.map((i) => ({ key: i.Key, value: { dataType: i.Value.DataType, value: i.Value.Value ?? null } })),
      })),
    },
  }),
  respond: (data) => ({ status: 200, body: { FlaggedDataExtractKeys: data.reportDataChange!.flaggedDataExtractKeys } }),
});

const dataRemoval = defineRoute({
  ...common,
  method: 'post',
  path: '/connector-dataprovider/api/v1/dataChange/removal',
  operationId: 'dataChangeRemoval',
  summary: 'Data change: removal',
  body: {
    required: true,
    schema: z
      .object({
        SubjectIdentifier: z.string().meta({ description: 'The subject, as the data source identifies it (its subjectIdentifier).' }),
        DataExtractsOptionsValuesFilter: filterSchema,
        RemovedDataPointIdentifiers: z
          .array(z.string())
          .meta({ description: 'Ids of the removed data points: they leave the cache at once.' }),
      })
      .meta({ id: 'DataChangeRemovalRequest' }),
    example: { SubjectIdentifier: 'E-1003', RemovedDataPointIdentifiers: ['E-1003-steps-2026-11-21'] },
  },
  operation: graphql(`
    mutation RestDataRemoval($input: DataRemovalInput!) { reportDataRemoval(input: $input) { flaggedDataExtractKeys } }
  `),
  variables: ({ body }) => ({
    input: {
      subjectIdentifier: body.SubjectIdentifier,
      dataExtractsOptionsValuesFilter: body.DataExtractsOptionsValuesFilter ?? null,
      removedDataPointIdentifiers: body.RemovedDataPointIdentifiers,
    },
  }),
  respond: (data) => ({ status: 200, body: { FlaggedDataExtractKeys: data.reportDataRemoval!.flaggedDataExtractKeys } }),
});

export const dataRoutes = [refreshDataSet, dataChange, dataRemoval];
