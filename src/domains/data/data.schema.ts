import { type ArgBuilder, type InputFieldBuilder, createContextCache } from '@pothos/core';
import DataLoader from 'dataloader';
import { type Types, builder } from '../../graphql/builder.js';
import { orderArgs, pageComplexity } from '../../graphql/connections.js';
import type { Context } from '../../graphql/context.js';
import { sortKeyOf } from '../custom-field/index.js';
import type { DataExtractItem, DataExtractRow, SubjectRow } from '../../db/tables.js';
import { NotFoundError, ValidationError } from '../../core/errors.js';
import { MAX_PAGE_SIZE, type PageArgs, paginateLoaded } from '../../db/paging.js';
import { SubjectRef, subjectConfig, subjectUuid } from '../subject/index.js';
import type { CachedPoints, SubjectKey } from './cache/index.js';
import {
  type DataPoint,
  type DataPointItem,
  type ExtractOrder,
  type ExtractWithSource,
  findExtracts,
  identifierOf,
  pageExtracts,
  plainValue,
  pointSortKey,
  pointValueText,
} from './model/index.js';
import { MAX_UNIT_LENGTH, refreshDataSet, reportDataChange, saveDataExtract } from './data.service.js';

export const DataExtractRef = builder.loadableNodeRef('DataExtract', {
  id: { resolve: (x: ExtractWithSource) => x.key, description: 'Global id (from the key).' },
  load: (keys: string[], ctx: Context) => findExtracts(ctx.db, ctx.principal.tenantId, keys),
  sort: (x) => x.key,
});

const DataSourceRef = builder.objectRef<ExtractWithSource['source']>('DataSource').implement({
  description: "Where an extract's data points come from (the provider's connection details are not exposed).",
  fields: (t) => ({
    key: t.exposeString('key', { description: 'Unique key of the data source.' }),
    name: t.exposeString('name', { description: 'Display name.' }),
    subjectIdentifier: t.exposeString('subject_identifier', {
      description: "What a data point's SubjectIdentifier means: ExternalId, Id or a subject field key.",
    }),
  }),
});

/** A data point with the subject it belongs to. */
interface PointNode {
  point: DataPoint;
  subjectId: string;
}

const DataPointItemRef = builder.objectRef<DataPointItem>('DataPointItem').implement({
  description: 'One keyed, typed value of a data point.',
  fields: (t) => ({
    key: t.string({ description: 'Key of the item.', resolve: (i) => i.Key }),
    dataType: t.string({ description: 'String, Decimal, Integer, DateTime, Date, Time or Boolean.', resolve: (i) => i.Value.DataType }),
    value: t.field({
      type: 'JSON',
      nullable: true,
      description: 'The typed value as the provider sent it.',
      resolve: (i) => plainValue(i.Value.Value),
    }),
    valueText: t.string({
      nullable: true,
      description: 'Canonical text (DateTime in UTC with milliseconds).',
      resolve: (i) => pointValueText(i),
    }),
  }),
});

const DataPointRef = builder.objectRef<PointNode>('DataPoint').implement({
  description: "A data point of a subject, as the extract's data source provides it (D10).",
  fields: (t) => ({
    id: t.string({ description: "The provider's data point id.", resolve: (n) => n.point.Id }),
    subjectIdentifier: t.string({
      description: 'The subject as the provider names it (see DataSource.subjectIdentifier).',
      resolve: (n) => n.point.SubjectIdentifier,
    }),
    subject: t.field({
      type: SubjectRef,
      nullable: true,
      description: 'The subject (View:Subject).',
      authScopes: { permission: 'View:Subject' },
      resolve: (n) => n.subjectId,
    }),
    items: t.field({ type: [DataPointItemRef], description: 'The items (DataPointItems).', resolve: (n) => n.point.DataPointItems }),
  }),
});

const DataPointConnection = builder.connectionObject({ type: DataPointRef, name: 'DataPointConnection' });

/**
 * Per request and extract, one loader for every subject asked for: the whole request's subjects become
 * one cache lookup and, for misses, one provider call per chunk (D10). setImmediate batching collects the
 * loads of a whole page of subjects, whose resolvers reach it after awaiting other loaders.
 */
const pointLoaders = createContextCache((_ctx: Context) => new Map<string, DataLoader<SubjectKey, CachedPoints, string>>());

function pointLoader(ctx: Context, extract: ExtractWithSource) {
  const loaders = pointLoaders(ctx);
  let loader = loaders.get(extract.key);
  if (!loader) {
    loader = new DataLoader<SubjectKey, CachedPoints, string>(
      async (subjects) => {
        const outcomes = await ctx.data.load(ctx.principal.tenantId, extract, subjects);
        return subjects.map((s) => outcomes.get(s.id)!);
      },
      { cacheKeyFn: (s) => s.id, batchScheduleFn: (run) => setImmediate(run), maxBatchSize: 10_000 },
    );
    loaders.set(extract.key, loader);
  }
  return loader;
}

/** The extract by key, or NOT_FOUND (an unknown key answers as one of another tenant, D2). */
async function extractByKey(ctx: Context, key: string): Promise<ExtractWithSource> {
  // A missing key loads as null; a failure (the database away) is its own answer, not NOT_FOUND.
  const found = await DataExtractRef.getDataloader(ctx).load(key);
  if (!found) throw new NotFoundError(`No data extract has the key '${key}'.`);
  return found as ExtractWithSource;
}

/** Loads subjects' points, reporting stale ones in the response's extensions (D10). */
async function pointsOf(ctx: Context, extract: ExtractWithSource, subjects: readonly SubjectRow[]): Promise<PointNode[]> {
  const config = await subjectConfig(ctx);
  const keys = subjects.map((s) => ({ id: s.id, identifier: identifierOf(extract.source.subject_identifier, s, config) }));
  const loaded = await pointLoader(ctx, extract).loadMany(keys);
  const nodes: PointNode[] = [];
  loaded.forEach((r, i) => {
    if (r instanceof Error) throw r;
    const key = keys[i]!;
    if (r.stale && key.identifier !== null) {
      ctx.staleData.set(`${extract.key}\u0001${key.identifier}`, {
        extractKey: extract.key,
        subjectIdentifier: key.identifier,
        fetchedAt: r.fetchedAt!.toISOString(),
      });
    }
    for (const point of r.points) nodes.push({ point, subjectId: key.id });
  });
  return nodes;
}

/** D6 for data points: by `Id` (default) or by an item key, typed; ties by id, then subject. */
function pagePoints(extractKey: string, nodes: PointNode[], args: PageArgs) {
  const orderBy = args.orderBy ?? 'Id';
  const byId = orderBy.toLowerCase() === 'id';
  return paginateLoaded({
    list: `dataPoint~${extractKey}`,
    sortName: byId ? 'Id' : orderBy,
    items: nodes,
    position: (n) => ({
      v: byId ? sortKeyOf('String', n.point.Id) : pointSortKey(n.point, orderBy),
      i: `${n.point.Id}\u0001${n.subjectId}`,
    }),
    args,
  });
}

const pointArgs = (arg: ArgBuilder<Types>) => ({
  ...orderArgs(arg),
});

builder.objectField(SubjectRef, 'dataPoints', (t) =>
  t.connection(
    {
      type: DataPointRef,
      nullable: true,
      complexity: pageComplexity,
      description: "The subject's data points of one extract, from the cache or its provider (D10). Order: Id, or an item key.",
      authScopes: { permission: 'View:DataExtract' },
      args: { extractKey: t.arg.string({ required: true, description: 'Key of the data extract.' }), ...pointArgs(t.arg) },
      resolve: async (subject, args, ctx) => {
        const extract = await extractByKey(ctx, args.extractKey);
        return pagePoints(extract.key, await pointsOf(ctx, extract, [subject]), args);
      },
    },
    DataPointConnection,
  ),
);

const DataExtractItemRef = builder.objectRef<DataExtractItem>('DataExtractItem').implement({
  description: "An item of the extract's data points, as the extract declares it: what to call it and its unit.",
  fields: (t) => ({
    key: t.exposeString('key', { description: 'The key of the item in the data points (DataPointItems[].Key).' }),
    name: t.exposeString('name', { description: 'Display name of the item.' }),
    unit: t.string({
      nullable: true,
      description: 'The unit of its values ("steps", "km", "bpm"), if it has one.',
      resolve: (i) => i.unit ?? null,
    }),
    dataType: t.string({
      nullable: true,
      description: 'The DataType its values are sent with, if declared.',
      resolve: (i) => i.dataType ?? null,
    }),
  }),
});

/** An item as createDataExtract and updateDataExtract take it. */
const DataExtractItemInput = builder.inputType('DataExtractItemInput', {
  description: 'An item an extract declares: its key, name and unit.',
  fields: (f) => ({
    key: f.string({ required: true, description: 'The key of the item in the data points (DataPointItems[].Key).' }),
    name: f.string({ required: true, description: 'Display name of the item.' }),
    unit: f.string({ description: `At most ${MAX_UNIT_LENGTH} characters; leave it out for none.` }),
    dataType: f.string({ description: 'One of the DataTypes of data point items (String, Decimal, Integer, …).' }),
  }),
});

DataExtractRef.implement({
  description: 'A named request for data points of a data source, with the options sent to its provider.',
  fields: (t) => ({
    key: t.exposeString('key', { description: 'Unique key of the extract.' }),
    name: t.exposeString('name', { description: 'Display name.' }),
    options: t.field({ type: 'JSON', description: 'The options sent to the provider as DataExtract.Options.', resolve: (x) => x.options }),
    items: t.field({
      type: [DataExtractItemRef],
      description: 'The items of its data points it declares (name, unit), in the declared order; empty when none are.',
      resolve: (x) => x.items,
    }),
    dataSource: t.field({ type: DataSourceRef, description: 'The data source it reads from.', resolve: (x) => x.source }),
    dataPoints: t.connection(
      {
        type: DataPointRef,
        nullable: true,
        complexity: pageComplexity,
        description: `Data points of the given subjects (UUIDs or global ids, at most ${MAX_PAGE_SIZE}) in one list.`,
        authScopes: { permission: 'View:DataExtract' },
        args: {
          subjectIds: t.arg.idList({ description: 'Required: the subjects whose data points to list; ids naming no subject are ignored.' }),
          ...pointArgs(t.arg),
        },
        resolve: async (extract, args, ctx) => {
          const ids = args.subjectIds;
          if (!ids || ids.length === 0)
            throw ValidationError.at('subjectIds', 'subjectIds is required: name the subjects whose data points to list.');
          if (ids.length > MAX_PAGE_SIZE) throw ValidationError.at('subjectIds', `At most ${MAX_PAGE_SIZE} subjects.`);
          const subjects = await SubjectRef.getDataloader(ctx).loadMany([...new Set(ids.map((id) => subjectUuid(String(id))))]);
          const found = subjects.filter((s): s is SubjectRow => !(s instanceof Error) && s !== null && s !== undefined);
          return pagePoints(extract.key, await pointsOf(ctx, extract, found), args);
        },
      },
      DataPointConnection,
    ),
  }),
});

const DataExtractConnection = builder.connectionObject({ type: DataExtractRef, name: 'DataExtractConnection' });

/** Extracts order by Key (default) or Name; ties by key. */
function extractOrder(orderBy: string | null | undefined): ExtractOrder {
  const name = (orderBy ?? 'Key').toLowerCase();
  if (name === 'key') return 'Key';
  if (name === 'name') return 'Name';
  throw ValidationError.at('orderBy', `Unknown OrderBy '${orderBy}'. Use Key or Name.`);
}

builder.queryFields((t) => ({
  dataExtracts: t.connection(
    {
      type: DataExtractRef,
      nullable: true,
      complexity: pageComplexity,
      description: 'Data extracts of the tenant, ordered by Key (default) or Name (View:DataExtract).',
      authScopes: { permission: 'View:DataExtract' },
      args: { dataSourceKey: t.arg.string({ description: 'Only extracts of this data source.' }), ...orderArgs(t.arg) },
      resolve: (_root, args, ctx) => pageExtracts(ctx.db, ctx.principal.tenantId, args.dataSourceKey, extractOrder(args.orderBy), args),
    },
    DataExtractConnection,
  ),
  dataExtract: t.field({
    type: DataExtractRef,
    nullable: true,
    description: 'One data extract by key; null when there is none (View:DataExtract).',
    authScopes: { permission: 'View:DataExtract' },
    args: { key: t.arg.string({ required: true, description: 'Key of the extract.' }) },
    resolve: (_root, args) => args.key,
  }),
}));

const RefreshDataSetPayload = builder.objectRef<{ dataExtractKey: string; flaggedEntries: number }>('RefreshDataSetPayload').implement({
  description: 'The result of refreshDataSet.',
  fields: (t) => ({
    dataExtractKey: t.exposeString('dataExtractKey', { description: 'Key of the refreshed extract.' }),
    flaggedEntries: t.exposeInt('flaggedEntries', { description: 'Cached entries flagged stale and queued for a background re-fetch.' }),
  }),
});

const DataExtractPayload = builder.objectRef<{ dataExtract: DataExtractRow }>('DataExtractPayload').implement({
  description: 'The result of createDataExtract or updateDataExtract.',
  fields: (t) => ({
    dataExtract: t.field({
      type: DataExtractRef,
      nullable: true,
      description: 'The extract as stored (View:DataExtract).',
      authScopes: { permission: 'View:DataExtract' },
      resolve: (p) => p.dataExtract.key,
    }),
  }),
});

const DataPointValueInput = builder.inputType('DataPointValueInput', {
  description: 'A typed value of a data point item.',
  fields: (t) => ({
    dataType: t.string({ required: true, description: 'String, Decimal, Integer, DateTime, Date, Time or Boolean.' }),
    value: t.field({ type: 'JSON', description: 'The value, of that data type.' }),
  }),
});
const DataPointItemInput = builder.inputType('DataPointItemInput', {
  description: 'One keyed, typed value of a data point.',
  fields: (t) => ({
    key: t.string({ required: true, description: 'Key of the item.' }),
    value: t.field({ type: DataPointValueInput, required: true, description: 'The typed value.' }),
  }),
});
const DataPointInput = builder.inputType('DataPointInput', {
  description: 'A new or changed data point.',
  fields: (t) => ({
    id: t.string({ required: true, description: "The provider's data point id." }),
    subjectIdentifier: t.string({ required: true, description: 'The subject as the data source names it.' }),
    dataPointItems: t.field({ type: [DataPointItemInput], required: true, description: 'The items.' }),
  }),
});

const DataChangePayload = builder.objectRef<{ flaggedDataExtractKeys: string[] }>('DataChangePayload').implement({
  description: 'The result of reportDataChange or reportDataRemoval.',
  fields: (t) => ({
    flaggedDataExtractKeys: t.exposeStringList('flaggedDataExtractKeys', {
      description: 'The matching extracts whose entries for the subject were flagged.',
    }),
  }),
});

/** What a change or removal report names: the subject, and which of its extracts by their option values. */
const changeTarget = (f: InputFieldBuilder<Types, 'InputObject'>) => ({
  subjectIdentifier: f.string({ required: true, description: 'The subject as the data source names it.' }),
  dataExtractsOptionsValuesFilter: f.field({ type: 'JSON', description: 'Property path → value; every entry must hold.' }),
});
const DataChangeInput = builder.inputType('DataChangeInput', {
  description: 'New or changed data of a subject, as its data provider reports it.',
  fields: (f) => ({
    ...changeTarget(f),
    newOrUpdatedDataPoints: f.field({ type: [DataPointInput], description: 'The new or changed data points.' }),
  }),
});
const DataRemovalInput = builder.inputType('DataRemovalInput', {
  description: 'Removed data points of a subject, as its data provider reports them.',
  fields: (f) => ({
    ...changeTarget(f),
    removedDataPointIdentifiers: f.stringList({ required: true, description: 'Ids of the removed data points.' }),
  }),
});

builder.mutationFields((t) => ({
  refreshDataSet: t.field({
    type: RefreshDataSetPayload,
    nullable: true,
    description: 'Flags every cached entry of the extract stale and re-fetches them in the background (Refresh:DataSet).',
    args: {
      input: t.arg({
        type: builder.inputType('RefreshDataSetInput', {
          description: 'The extract to refresh.',
          fields: (f) => ({ dataExtractKey: f.string({ required: true, description: 'Key of the extract.' }) }),
        }),
        required: true,
        description: 'The extract.',
      }),
    },
    resolve: (_root, { input }, ctx) => refreshDataSet(ctx, input.dataExtractKey),
  }),
  createDataExtract: t.field({
    type: DataExtractPayload,
    nullable: true,
    description: 'Creates a data extract on a data source of the tenant (Create:DataExtract).',
    args: {
      input: t.arg({
        type: builder.inputType('CreateDataExtractInput', {
          description: 'A new data extract.',
          fields: (f) => ({
            key: f.string({ required: true, description: 'Unique key of the extract.' }),
            name: f.string({ required: true, description: 'Display name.' }),
            dataSourceKey: f.string({ required: true, description: 'Key of a data source of the tenant.' }),
            options: f.field({ type: 'JSON', description: 'A JSON object (default {}).' }),
            items: f.field({
              type: [DataExtractItemInput],
              description: 'The items its data points hold, with their units (default none).',
            }),
          }),
        }),
        required: true,
        description: 'The extract.',
      }),
    },
    resolve: async (_root, { input }, ctx) => ({ dataExtract: await saveDataExtract(ctx, input, 'create') }),
  }),
  updateDataExtract: t.field({
    type: DataExtractPayload,
    nullable: true,
    description:
      'Changes a data extract (Edit:DataExtract); absent properties keep their value. New options or a new data source drop its cached data.',
    args: {
      input: t.arg({
        type: builder.inputType('UpdateDataExtractInput', {
          description: 'Changes to a data extract; absent properties keep their value.',
          fields: (f) => ({
            key: f.string({ required: true, description: 'Key of the extract to change.' }),
            name: f.string({ description: 'New display name.' }),
            dataSourceKey: f.string({ description: 'Key of the new data source (drops its cached data).' }),
            options: f.field({ type: 'JSON', description: 'New options, a JSON object (drops its cached data).' }),
            items: f.field({ type: [DataExtractItemInput], description: 'Replaces the declared items.' }),
          }),
        }),
        required: true,
        description: 'The changes.',
      }),
    },
    resolve: async (_root, { input }, ctx) => ({ dataExtract: await saveDataExtract(ctx, input, 'update') }),
  }),
}));

// A provider's change and removal reports: one service, two inputs (inbound clients of a data source only).
const reports = [
  [
    'reportDataChange',
    DataChangeInput,
    'A data provider reports new or changed data of a subject (inbound clients of a data source only).',
  ],
  ['reportDataRemoval', DataRemovalInput, 'A data provider reports removed data points of a subject; they leave the cache at once.'],
] as const;
for (const [field, Input, description] of reports) {
  builder.mutationField(field, (t) =>
    t.field({
      type: DataChangePayload,
      nullable: true,
      description,
      args: { input: t.arg({ type: Input, required: true, description: 'The report.' }) },
      resolve: (_root, { input }, ctx) => reportDataChange(ctx, input),
    }),
  );
}
