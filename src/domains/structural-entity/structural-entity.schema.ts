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
  fields: (t) => ({
    key: t.exposeString('key'),
    name: t.exposeString('name'),
    subjectAssignable: t.exposeBoolean('subject_assignable'),
    customFields: t.field({ type: [CustomFieldRef], resolve: (st) => st.fields }),
  }),
});

// A ref first, implemented below: the type refers to itself (parent, children).
export const StructuralEntityRef = builder.loadableNodeRef('StructuralEntity', {
  id: { resolve: (e: StructuralEntityRow) => e.key },
  load: (keys: string[], ctx: Context) => findEntitiesByKeys(ctx.db, ctx.principal.tenantId, keys),
  sort: (e) => e.key,
});

export const StructuralEntityConnection = builder.connectionObject({ type: StructuralEntityRef, name: 'StructuralEntityConnection' });

StructuralEntityRef.implement({
  fields: (t) => ({
    key: t.exposeString('key'),
    displayName: t.exposeString('display_name'),
    depth: t.exposeInt('depth', { description: '1 at the top; parent + 1 below.' }),
    parentKey: t.exposeString('parent_key', { nullable: true }),
    parent: t.field({ type: StructuralEntityRef, nullable: true, resolve: (e) => e.parent_key }),
    structureType: t.field({ type: StructureTypeRef, resolve: (e) => e.structure_type_key }),
    customFieldValues: t.field({
      type: [CustomFieldValueRef],
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
      authScopes: { permission: 'List:StructuralEntity' },
      args: {
        parentKey: t.arg.string(),
        depth: t.arg.int(),
        searchTerm: t.arg.string(),
        subjectAssignable: t.arg.boolean(),
        structureTypeKey: t.arg.string(),
        ...orderArgs(t.arg),
      },
      resolve: (_root, args, ctx) => listEntities(ctx, args, args),
    },
    StructuralEntityConnection,
  ),
  structuralEntity: t.field({
    type: StructuralEntityRef,
    nullable: true,
    authScopes: { permission: 'View:StructuralEntity' },
    args: { key: t.arg.string({ required: true }) },
    resolve: (_root, args) => args.key,
  }),
}));

const UpsertStructuralEntityInput = builder.inputType('UpsertStructuralEntityInput', {
  fields: (t) => ({
    key: t.string({ required: true }),
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
    fields: (t) => ({
      structuralEntity: t.field({ type: StructuralEntityRef, resolve: (p) => p.entity }),
      created: t.exposeBoolean('created'),
    }),
  });

builder.mutationFields((t) => ({
  upsertStructuralEntity: t.field({
    type: UpsertStructuralEntityPayload,
    nullable: true,
    description: 'Creates (Create:StructuralEntity) or updates (Edit:StructuralEntity) an entity by key (D8).',
    args: { input: t.arg({ type: UpsertStructuralEntityInput, required: true }) },
    resolve: (_root, { input }, ctx) =>
      upsertStructuralEntity(ctx, input, {
        authorize: (exists) => requirePermission(ctx.principal, exists ? 'Edit:StructuralEntity' : 'Create:StructuralEntity'),
      }),
  }),
}));
