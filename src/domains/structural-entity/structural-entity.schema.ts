import { builder } from '../../graphql/builder.js';
import { orderArgs, pageComplexity } from '../../graphql/connections.js';
import type { Context } from '../../graphql/context.js';
import { CustomFieldRef, CustomFieldValueInput, CustomFieldValueRef, customFieldValues } from '../custom-field/index.js';
import type { StructuralEntityRow } from '../../db/tables.js';
import { requirePermission } from '../../core/permissions.js';
import { findEntitiesByKeys } from './structural-entity.repository.js';
import { listEntities, upsertStructuralEntity } from './structural-entity.service.js';

export const StructureTypeRef = builder.loadableObject('StructureType', {
  load: async (keys: string[], ctx: Context) => {
    const types = await ctx.structureTypes(ctx.db, ctx.principal.tenantId, ctx.principal.configVersion);
    return keys.map((k) => types.get(k) ?? new Error(`Unknown structure type '${k}'.`));
  },
  description: 'The type of a structural entity, with its custom fields.',
  fields: (t) => ({
    key: t.exposeString('key', { description: 'Unique key of the structure type.' }),
    name: t.exposeString('name', { description: 'Display name.' }),
    subjectAssignable: t.exposeBoolean('subject_assignable', {
      description: 'Whether subjects may be placed on entities of this type.',
    }),
    customFields: t.field({ type: [CustomFieldRef], description: 'Custom fields of entities of this type.', resolve: (st) => st.fields }),
  }),
});

// A ref first, implemented below: the type refers to itself (parent, children).
export const StructuralEntityRef = builder.loadableNodeRef('StructuralEntity', {
  id: { resolve: (e: StructuralEntityRow) => e.key, description: 'Global id (from the key).' },
  load: (keys: string[], ctx: Context) => findEntitiesByKeys(ctx.db, ctx.principal.tenantId, keys),
  sort: (e) => e.key,
});

export const StructuralEntityConnection = builder.connectionObject({ type: StructuralEntityRef, name: 'StructuralEntityConnection' });

StructuralEntityRef.implement({
  description: "A node of the tenant's structure tree, identified by its unique key.",
  fields: (t) => ({
    key: t.exposeString('key', { description: 'Unique key.' }),
    displayName: t.exposeString('display_name', { description: 'Display name.' }),
    depth: t.exposeInt('depth', { description: '1 at the top; parent + 1 below.' }),
    parentKey: t.exposeString('parent_key', { nullable: true, description: 'Key of the parent; null at the top.' }),
    parent: t.field({
      type: StructuralEntityRef,
      nullable: true,
      description: 'The parent; null at the top.',
      resolve: (e) => e.parent_key,
    }),
    structureType: t.field({ type: StructureTypeRef, description: 'The structure type.', resolve: (e) => e.structure_type_key }),
    customFieldValues: t.field({
      type: [CustomFieldValueRef],
      description: 'Custom field values in field order, leaving out fields without a value.',
      resolve: async (e, _args, ctx) => {
        const type = await StructureTypeRef.getDataloader(ctx).load(e.structure_type_key);
        return customFieldValues(type.fields, e.custom_values);
      },
    }),
    children: t.connection(
      {
        complexity: pageComplexity,
        type: StructuralEntityRef,
        nullable: true,
        description: 'The direct children (List:StructuralEntity).',
        authScopes: { permission: 'List:StructuralEntity' },
        args: orderArgs(t.arg),
        resolve: (e, args, ctx) => listEntities(ctx, { parentKey: e.key }, args),
      },
      StructuralEntityConnection,
    ),
  }),
});

builder.queryFields((t) => ({
  structuralEntities: t.connection(
    {
      complexity: pageComplexity,
      type: StructuralEntityRef,
      nullable: true,
      description: 'Structural entities, all filters optional (List:StructuralEntity).',
      authScopes: { permission: 'List:StructuralEntity' },
      args: {
        parentKey: t.arg.string({ description: 'Only direct children of this entity.' }),
        depth: t.arg.int({ description: 'Only entities at this depth (1 at the top).' }),
        searchTerm: t.arg.string({ description: 'Fuzzy search on key and display name.' }),
        subjectAssignable: t.arg.boolean({ description: "Only entities whose structure type's subjectAssignable is this." }),
        structureTypeKey: t.arg.string({ description: 'Only entities of this structure type.' }),
        ...orderArgs(t.arg),
      },
      resolve: (_root, args, ctx) => listEntities(ctx, args, args),
    },
    StructuralEntityConnection,
  ),
  structuralEntity: t.field({
    type: StructuralEntityRef,
    nullable: true,
    description: 'One structural entity by key; null when there is none (View:StructuralEntity).',
    authScopes: { permission: 'View:StructuralEntity' },
    args: { key: t.arg.string({ required: true, description: 'Key of the entity.' }) },
    resolve: (_root, args) => args.key,
  }),
}));

const UpsertStructuralEntityInput = builder.inputType('UpsertStructuralEntityInput', {
  description: 'An entity to create or update, by key (D8).',
  fields: (t) => ({
    key: t.string({ required: true, description: 'Unique key: updates the entity with this key, or creates it.' }),
    displayName: t.string({ description: 'Required on create; absent keeps the value.' }),
    parentKey: t.string({ description: 'Absent keeps the parent; null moves the entity to the top.' }),
    structureTypeKey: t.string({ description: 'Required on create; absent keeps the type.' }),
    customFieldValues: t.field({
      type: [CustomFieldValueInput],
      description: 'Sets the listed fields, keeps the others; a null value clears.',
    }),
  }),
});

const UpsertStructuralEntityPayload = builder
  .objectRef<{ entity: StructuralEntityRow; created: boolean }>('UpsertStructuralEntityPayload')
  .implement({
    description: 'The result of upsertStructuralEntity.',
    fields: (t) => ({
      structuralEntity: t.field({ type: StructuralEntityRef, description: 'The entity as stored.', resolve: (p) => p.entity }),
      created: t.exposeBoolean('created', { description: 'True when the entity was created, false when updated.' }),
    }),
  });

builder.mutationFields((t) => ({
  upsertStructuralEntity: t.field({
    type: UpsertStructuralEntityPayload,
    nullable: true,
    description: 'Creates (Create:StructuralEntity) or updates (Edit:StructuralEntity) an entity by key (D8).',
    args: { input: t.arg({ type: UpsertStructuralEntityInput, required: true, description: 'The entity.' }) },
    resolve: (_root, { input }, ctx) =>
      upsertStructuralEntity(ctx, input, {
        authorize: (exists) => requirePermission(ctx.principal, exists ? 'Edit:StructuralEntity' : 'Create:StructuralEntity'),
      }),
  }),
}));
