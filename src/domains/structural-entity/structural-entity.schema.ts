import { createContextCache } from '@pothos/core';
import { builder } from '../../graphql/builder.js';
import { orderArgs, pageComplexity } from '../../graphql/connections.js';
import type { Context } from '../../graphql/context.js';
import {
  CustomFieldRef,
  CustomFieldValueInput,
  CustomFieldValueRef,
  type Scalar,
  customFieldValues,
  sortKeyOf,
} from '../custom-field/index.js';
import type { StructuralEntityRow } from '../../db/tables.js';
import { ValidationError } from '../../core/errors.js';
import type { PageArgs, SortKey } from '../../db/paging.js';
import { requirePermission } from '../../core/permissions.js';
import {
  BUILT_IN_ENTITY_ORDERS,
  type BuiltInEntityOrder,
  type EntityFilters,
  entitySortKey,
  findEntitiesByKeys,
  pageEntities,
  structureFieldTypes,
} from './structural-entity.repository.js';
import { upsertStructuralEntity } from './structural-entity.service.js';

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

/** How entities order by one OrderBy key (D6, P14): in SQL, and the same order over loaded rows. */
export interface EntityOrder {
  sort: SortKey;
  /** Order-preserving text of a row's value (for paginateLoaded). */
  memoryKey: (e: StructuralEntityRow) => string;
}

/** A built-in key's order over loaded rows, the same as its SQL order. */
const BUILT_IN_MEMORY_KEY: Record<BuiltInEntityOrder, (e: StructuralEntityRow) => string> = {
  Key: (e) => sortKeyOf('String', e.key),
  DisplayName: (e) => sortKeyOf('String', e.display_name),
  Depth: (e) => sortKeyOf('Integer', e.depth),
  StructureTypeKey: (e) => sortKeyOf('String', e.structure_type_key),
};

async function resolveEntityOrder(ctx: Context, orderBy: string | null | undefined): Promise<EntityOrder> {
  const builtIn = (name: BuiltInEntityOrder): EntityOrder => ({
    sort: entitySortKey({ builtIn: name }),
    memoryKey: BUILT_IN_MEMORY_KEY[name],
  });
  const name = orderBy ?? 'Key';
  const exact = BUILT_IN_ENTITY_ORDERS.find((k) => k === name);
  if (exact) return builtIn(exact);
  const types = await structureFieldTypes(ctx.db, ctx.principal.tenantId, name);
  if (types.length > 0) {
    // A key with different data types in different structure types orders as text.
    const type = types.length === 1 ? types[0]!.data_type : 'String';
    return {
      sort: entitySortKey({ field: name, dataType: type }),
      memoryKey: (e) => {
        const v = e.custom_values[name] as Scalar | Scalar[] | undefined;
        return sortKeyOf(type, Array.isArray(v) ? v[0] : v);
      },
    };
  }
  const ci = BUILT_IN_ENTITY_ORDERS.find((k) => k.toLowerCase() === name.toLowerCase());
  if (ci) return builtIn(ci);
  throw ValidationError.at('orderBy', `Unknown OrderBy '${name}'. Use Key, DisplayName, Depth, StructureTypeKey or a custom field key.`);
}

const orderCache = createContextCache(() => new Map<string, Promise<EntityOrder>>());

/** The entity ordering for an OrderBy key, resolved once per request (lists of many subjects reuse it). */
export function entityOrder(ctx: Context, orderBy: string | null | undefined): Promise<EntityOrder> {
  const cache = orderCache(ctx);
  const key = orderBy ?? '';
  let order = cache.get(key);
  if (!order) cache.set(key, (order = resolveEntityOrder(ctx, orderBy)));
  return order;
}

/** One page of entities: the list behind the root field, `children`, and REST's list. */
export async function listEntities(ctx: Context, filters: EntityFilters, args: PageArgs) {
  const { sort } = await entityOrder(ctx, args.orderBy);
  return pageEntities(ctx.db, ctx.principal.tenantId, filters, sort, args);
}

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
