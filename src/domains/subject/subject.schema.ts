import { type ArgBuilder, createContextCache } from '@pothos/core';
import { decodeGlobalID } from '@pothos/plugin-relay';
import DataLoader from 'dataloader';
import { type Types, builder } from '../../graphql/builder.js';
import { orderArgs, pageComplexity } from '../../graphql/connections.js';
import type { Context } from '../../graphql/context.js';
import { CustomFieldValueInput, CustomFieldValueRef, customFieldValues } from '../custom-field/index.js';
import type { StructuralEntityRow, SubjectRow } from '../../db/tables.js';
import { ValidationError } from '../../core/errors.js';
import { requirePermission } from '../../core/permissions.js';
import { type PageArgs, paginateLoaded } from '../../db/paging.js';
import { StructuralEntityConnection, StructuralEntityRef, entityOrder } from '../structural-entity/index.js';
import { findLocations, findSubjectsByIds, isUuid } from './subject.repository.js';
import {
  addSubjectLocations,
  listSubjects,
  loadedSubjectConfig,
  removeSubjectLocations,
  subjectConfig,
  updateSubject,
  upsertSubject,
} from './subject.service.js';

/** Locations of every subject on the page in one query (D11: a fixed number of queries per page). */
const locationsLoader = createContextCache(
  (ctx: Context) =>
    new DataLoader<string, StructuralEntityRow[]>(async (ids) => {
      const rows = await findLocations(ctx.db, ctx.principal.tenantId, ids);
      const bySubject = new Map<string, StructuralEntityRow[]>();
      const entities = StructuralEntityRef.getDataloader(ctx);
      for (const { subject_id, ...e } of rows) {
        // Located entities and their parents, loaded in the same statement, are what `parent` asks next.
        entities.prime(e.key, e);
        if (subject_id !== null) bySubject.set(subject_id, [...(bySubject.get(subject_id) ?? []), e]);
      }
      return ids.map((id) => bySubject.get(id) ?? []);
    }),
);

/** A subject id argument: the UUID, or the Subject's global id (D11). */
export function subjectUuid(id: string): string {
  if (isUuid(id)) return id.toLowerCase();
  try {
    const g = decodeGlobalID(id);
    if (g.typename === 'Subject') return g.id;
  } catch {
    // not a global id: answers as unknown
  }
  return id;
}

export const SubjectRef = builder.loadableNodeRef('Subject', {
  id: { resolve: (s: SubjectRow) => s.id, description: 'Global id (from the subject UUID).' },
  load: (ids: string[], ctx: Context) => findSubjectsByIds(ctx.db, ctx.principal.tenantId, ids),
  sort: (s) => s.id,
});

export const SubjectConnection = builder.connectionObject({ type: SubjectRef, name: 'SubjectConnection' });

/** A subject's locations as a connection, paged in memory (a subject has few), ordered as D6 says. */
async function subjectLocations(ctx: Context, subject: SubjectRow, args: PageArgs) {
  const [entities, order] = await Promise.all([locationsLoader(ctx).load(subject.id), entityOrder(ctx, args.orderBy)]);
  return paginateLoaded({
    list: 'subjectStructuralEntity',
    sortName: order.sort.name,
    items: entities,
    position: (e) => ({ v: order.memoryKey(e), i: e.key }),
    args,
  });
}

SubjectRef.implement({
  description: 'A subject: a person or thing the tenant tracks, with custom field values and locations.',
  fields: (t) => ({
    subjectId: t.exposeString('id', { description: "The service's subject identifier (UUID)." }),
    externalId: t.exposeString('external_id', { nullable: true, description: 'External identifier.' }),
    customFieldValues: t.field({
      type: [CustomFieldValueRef],
      description: 'Custom field values in field order, leaving out fields without a value.',
      resolve: (s, _args, ctx) => {
        const config = loadedSubjectConfig(ctx);
        return config ? customFieldValues(config.fields, s.values) : subjectConfig(ctx).then((c) => customFieldValues(c.fields, s.values));
      },
    }),
    structuralEntities: t.connection(
      {
        type: StructuralEntityRef,
        complexity: pageComplexity,
        description: "The subject's locations: the structural entities it is placed on.",
        args: orderArgs(t.arg),
        resolve: (s, args, ctx) => subjectLocations(ctx, s, args),
      },
      StructuralEntityConnection,
    ),
  }),
});

const CustomFieldMatchEnum = builder.enumType('CustomFieldMatch', {
  description: 'How the keys of a custom field filter combine.',
  values: {
    EXACT_ALL: { value: 'EXACT_ALL', description: 'Every key matches one of its values.' },
    EXACT_ANY: { value: 'EXACT_ANY', description: 'At least one key matches one of its values.' },
  } as const,
});

export const CustomFieldValueFilterInput = builder.inputType('CustomFieldValueFilterInput', {
  description: 'A filter on custom field values, exact match on the canonical text (D7).',
  fields: (t) => ({
    values: t.field({
      type: [
        builder.inputType('CustomFieldFilterValues', {
          description: 'The accepted values of one custom field.',
          fields: (f) => ({
            key: f.string({ required: true, description: 'Key of the custom field.' }),
            values: f.stringList({ required: true, description: 'Accepted values as text; one matching is enough.' }),
          }),
        }),
      ],
      description: 'One entry per custom field key.',
    }),
    match: t.field({ type: CustomFieldMatchEnum, description: 'EXACT_ALL (default): every key matches; EXACT_ANY: one does.' }),
  }),
});

const subjectFilterArgs = (arg: ArgBuilder<Types>) => ({
  includeDescendants: arg.boolean({ description: 'Also subjects located anywhere below the given entities.' }),
  searchTerm: arg.string({ description: 'Typo-tolerant search over ExternalId and String values; best match first.' }),
  customFieldValueFilter: arg({ type: CustomFieldValueFilterInput, description: 'Only subjects whose custom field values match.' }),
});

builder.queryFields((t) => ({
  subjects: t.connection(
    {
      complexity: pageComplexity,
      type: SubjectRef,
      nullable: true,
      description: 'Subjects the caller may see (List:Subject, D9).',
      authScopes: { permission: 'List:Subject' },
      args: {
        structuralEntityKeys: t.arg.stringList({ description: 'Only subjects located on one of these entities.' }),
        ...subjectFilterArgs(t.arg),
        ...orderArgs(t.arg),
      },
      resolve: (_root, args, ctx) => listSubjects(ctx, args, args),
    },
    SubjectConnection,
  ),
  subject: t.field({
    type: SubjectRef,
    nullable: true,
    description: 'One subject by id; null when there is none (View:Subject).',
    authScopes: { permission: 'View:Subject' },
    args: { id: t.arg.id({ required: true, description: 'The subject UUID (or its global id).' }) },
    resolve: (_root, args) => subjectUuid(args.id),
  }),
}));

builder.objectField(StructuralEntityRef, 'subjects', (t) =>
  t.connection(
    {
      complexity: pageComplexity,
      type: SubjectRef,
      nullable: true,
      description: 'Subjects located on this entity (List:Subject, D9).',
      authScopes: { permission: 'List:Subject' },
      args: { ...subjectFilterArgs(t.arg), ...orderArgs(t.arg) },
      resolve: (e, args, ctx) => listSubjects(ctx, { ...args, structuralEntityKeys: [e.key] }, args),
    },
    SubjectConnection,
  ),
);

const UpsertSubjectInput = builder.inputType('UpsertSubjectInput', {
  description: 'A subject to create or update, found by its matching fields (D7).',
  fields: (t) => ({
    customFieldValues: t.field({ type: [CustomFieldValueInput], required: true, description: 'Must hold the matching fields.' }),
    structuralEntityKeys: t.stringList({ description: "When given, replaces the subject's locations ([] removes all)." }),
  }),
});

const SubjectPayload = builder.objectRef<{ subject: SubjectRow; created?: boolean }>('SubjectPayload').implement({
  description: 'The result of a subject mutation.',
  fields: (t) => ({
    subject: t.field({ type: SubjectRef, description: 'The subject as stored.', resolve: (p) => p.subject }),
    created: t.boolean({ description: 'True when the call created the subject.', resolve: (p) => p.created ?? false }),
  }),
});

const SubjectLocationsInput = builder.inputType('SubjectLocationsInput', {
  description: 'A subject and structural entity keys to add or remove as its locations.',
  fields: (t) => ({
    subjectId: t.id({ required: true, description: 'The subject UUID (or its global id).' }),
    keys: t.stringList({ required: true, description: 'Keys of the structural entities.' }),
  }),
});

builder.mutationFields((t) => ({
  upsertSubject: t.field({
    type: SubjectPayload,
    nullable: true,
    description: 'Finds the subject by its matching fields and updates it (Edit:Subject), or creates it (Create:Subject) (D7).',
    args: { input: t.arg({ type: UpsertSubjectInput, required: true, description: 'The subject.' }) },
    resolve: (_root, { input }, ctx) => upsertSubject(ctx, input),
  }),
  updateSubject: t.field({
    type: SubjectPayload,
    nullable: true,
    description: 'Sets the given custom fields of a subject (Edit:Subject).',
    args: {
      input: t.arg({
        type: builder.inputType('UpdateSubjectInput', {
          description: 'Custom fields to set on a subject.',
          fields: (f) => ({
            id: f.id({ required: true, description: 'The subject UUID (or its global id).' }),
            customFields: f.field({
              type: [CustomFieldValueInput],
              description: 'The fields to set (this or customFieldValues is required).',
            }),
            customFieldValues: f.field({
              type: [CustomFieldValueInput],
              description: 'Alias of customFields, as the REST body accepts it.',
            }),
          }),
        }),
        required: true,
        description: 'The subject and its fields.',
      }),
    },
    resolve: async (_root, { input }, ctx) => {
      if (input.customFields) return { subject: await updateSubject(ctx, subjectUuid(input.id), input.customFields) };
      if (input.customFieldValues) {
        return { subject: await updateSubject(ctx, subjectUuid(input.id), input.customFieldValues, 'customFieldValues') };
      }
      requirePermission(ctx.principal, 'Edit:Subject'); // 403 before 400, as when a list is given
      throw ValidationError.at('customFields', 'CustomFields is required.');
    },
  }),
  addSubjectToStructuralEntities: t.field({
    type: SubjectPayload,
    nullable: true,
    description: 'Adds locations (Create:SubjectLocation).',
    args: { input: t.arg({ type: SubjectLocationsInput, required: true, description: 'The subject and entity keys.' }) },
    resolve: async (_root, { input }, ctx) => ({ subject: await addSubjectLocations(ctx, subjectUuid(input.subjectId), input.keys) }),
  }),
  removeSubjectFromStructuralEntities: t.field({
    type: SubjectPayload,
    nullable: true,
    description: 'Removes locations (Delete:SubjectLocation); keys that are not locations are ignored.',
    args: { input: t.arg({ type: SubjectLocationsInput, required: true, description: 'The subject and entity keys.' }) },
    resolve: async (_root, { input }, ctx) => ({ subject: await removeSubjectLocations(ctx, subjectUuid(input.subjectId), input.keys) }),
  }),
}));
