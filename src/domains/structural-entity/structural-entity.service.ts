import { createContextCache } from '@pothos/core';
import { type FieldDef, type Scalar, type StoredValue, parseSentValues, reportUnknownUsers, sortKeyOf } from '../custom-field/index.js';
import type { DataTypeName, Db, StructuralEntityRecord, StructuralEntityRow } from '../../db/tables.js';
import { isUniqueViolation } from '../../db/faults.js';
import { inTransaction } from '../../db/transaction.js';
import { ConflictError, ErrorCollector, ValidationError } from '../../core/errors.js';
import type { Principal } from '../../core/permissions.js';
import type { Context } from '../../graphql/context.js';
import type { PageArgs, SortKey } from '../../db/paging.js';
import { MAX_KEY_LENGTH, MAX_NAME_LENGTH } from '../../core/input.js';
import { bumpDataVersion, configVersionCache } from '../tenant/index.js';
import {
  BUILT_IN_ENTITY_ORDERS,
  type BuiltInEntityOrder,
  type EntityFilters,
  type StructureTypeWithFields,
  entitiesHoldCustomValue,
  findEntitiesByKeys,
  findEntityRecordByKey,
  findStructureTypeFields,
  findStructureTypes,
  hasLocatedSubjects,
  insertEntity,
  lockEntityByKey,
  lockTree,
  moveSubtree,
  entitySortKey,
  pageEntities,
  pruneEntityCustomValues,
  structureFieldTypes,
  replaceStructureTypeFields,
  updateEntity,
  upsertStructureType,
} from './structural-entity.repository.js';

declare module '../../graphql/context.js' {
  interface Context {
    /** The instance's structure types by key, per tenant and configuration version (P48; built by the app). */
    structureTypes: StructureTypesCache;
  }
}

export type StructureTypesCache = (db: Db, tenantId: string, configVersion: string) => Promise<Map<string, StructureTypeWithFields>>;

/** One per instance: every structure type of a tenant at a configuration version, loaded once. */
export function structureTypesCache(): StructureTypesCache {
  return configVersionCache(async (db, tenantId) => new Map((await findStructureTypes(db, tenantId)).map((t) => [t.key, t])));
}

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

/** The upsert body in GraphQL casing; an absent property is `undefined` (D8: absent = unchanged). */
export interface UpsertEntityInput {
  key: string;
  displayName?: string | null | undefined;
  parentKey?: string | null | undefined;
  structureTypeKey?: string | null | undefined;
  customFieldValues?: readonly { key: string; value?: unknown }[] | null | undefined;
}

export interface UpsertOptions {
  /** Throws when the caller may not create (`exists` false) or edit (`exists` true). */
  authorize?: (exists: boolean) => void;
  /** Prefix of error paths (the tenant file reports `tenants[0].structuralEntities[2].key`). */
  pathPrefix?: string;
}

/**
 * Creates or updates one structural entity with every rule of D8, atomically. Used by the GraphQL
 * mutation (and so REST) and by the tenant configuration file, which has no request: `ctx` needs only
 * the tenant (`opts.authorize` carries the caller's permission checks).
 */
export async function upsertStructuralEntity(
  ctx: { db: Db; principal: Pick<Principal, 'tenantId'> },
  input: UpsertEntityInput,
  opts: UpsertOptions = {},
): Promise<{ entity: StructuralEntityRow; created: boolean }> {
  const { db } = ctx;
  const attempt = () => inTransaction(db, (trx) => upsertInTransaction(trx, ctx.principal.tenantId, input, opts));
  try {
    return await attempt();
  } catch (e) {
    // Two concurrent creates of one key: the loser retries, and finds the entity to update.
    if (!db.isTransaction && isUniqueViolation(e, 'structural_entity_key_uq')) return attempt();
    throw e;
  }
}

async function upsertInTransaction(db: Db, tenantId: string, input: UpsertEntityInput, opts: UpsertOptions) {
  const at = (p: string) => `${opts.pathPrefix ?? ''}${p}`;
  const errors = new ErrorCollector();
  if (typeof input.key !== 'string' || input.key.trim() === '') errors.add(at('key'), 'Key is required.');
  else if (input.key.length > MAX_KEY_LENGTH) errors.add(at('key'), `Key is longer than ${MAX_KEY_LENGTH} characters.`);
  errors.throwIfAny();

  if (input.parentKey !== undefined) await lockTree(db, tenantId);
  const existing = await lockEntityByKey(db, tenantId, input.key);
  opts.authorize?.(existing !== undefined);

  if (input.displayName !== undefined || !existing) {
    if (typeof input.displayName !== 'string' || input.displayName.trim() === '') errors.add(at('displayName'), 'DisplayName is required.');
    else if (input.displayName.length > MAX_NAME_LENGTH)
      errors.add(at('displayName'), `DisplayName is longer than ${MAX_NAME_LENGTH} characters.`);
  }
  if (
    (input.structureTypeKey !== undefined || !existing) &&
    (typeof input.structureTypeKey !== 'string' || input.structureTypeKey === '')
  ) {
    errors.add(at('structureTypeKey'), 'StructureTypeKey is required.');
  }
  const typeKey = input.structureTypeKey ?? existing?.structure_type_key;
  const type = typeKey ? (await findStructureTypes(db, tenantId, [typeKey]))[0] : undefined;
  if (typeKey && !type) errors.add(at('structureTypeKey'), `Unknown structure type '${typeKey}'.`);

  let parent: StructuralEntityRecord | null = null;
  let move = false;
  if (input.parentKey !== undefined && input.parentKey !== null) {
    parent = (await findEntityRecordByKey(db, tenantId, input.parentKey)) ?? null;
    if (!parent) errors.add(at('parentKey'), `Unknown parent '${input.parentKey}'.`);
    else if (existing && (parent.id === existing.id || parent.path.map(String).includes(String(existing.id)))) {
      errors.add(
        at('parentKey'),
        `'${input.parentKey}' is '${input.key}' itself or one of its descendants; an entity cannot be its own ancestor.`,
      );
    }
    move = existing !== undefined && existing.parent_key !== input.parentKey;
  } else if (input.parentKey === null) {
    move = existing !== undefined && existing.parent_key !== null;
  }

  const values: Record<string, unknown> = {};
  if (type) {
    const fields = new Map<string, FieldDef>(type.fields.map((f) => [f.key, f]));
    // Values survive a type change only for fields of the same key and data type in the new type.
    const previous = existing?.custom_values ?? {};
    const previousType =
      existing && existing.structure_type_key !== type.key
        ? (await findStructureTypes(db, tenantId, [existing.structure_type_key]))[0]
        : type;
    for (const [k, v] of Object.entries(previous)) {
      const was = previousType?.fields.find((f) => f.key === k);
      const now = fields.get(k);
      if (now && was && now.dataType === was.dataType) values[k] = v;
    }
    const parsed = parseSentValues(input.customFieldValues ?? [], fields, at('customFieldValues'), errors);
    await reportUnknownUsers(db, tenantId, parsed.userRefs, errors);
    for (const [k, v] of parsed.values) {
      if (v === null) delete values[k];
      else values[k] = v satisfies StoredValue;
    }
    for (const f of type.fields) {
      if (f.required && values[f.key] === undefined && !parsed.values.has(f.key)) {
        errors.add(at('customFieldValues'), `Custom field '${f.key}' is required.`);
      }
    }
  }
  errors.throwIfAny();

  // D8: an entity holding subjects cannot become a type subjects cannot be assigned to.
  if (existing && type && existing.structure_type_key !== type.key && !type.subject_assignable) {
    if (await hasLocatedSubjects(db, tenantId, existing.id)) {
      throw new ConflictError(`'${existing.key}' has subjects; its type cannot change to '${type.key}', which is not subject-assignable.`);
    }
  }

  const write = {
    key: input.key,
    display_name: input.displayName ?? existing!.display_name,
    structure_type_key: type!.key,
    custom_values: values,
  };
  if (!existing) {
    const entity = await insertEntity(db, tenantId, write, parent);
    return { entity, created: true };
  }
  await updateEntity(db, tenantId, existing.id, write);
  if (move) {
    await moveSubtree(db, tenantId, existing, parent);
    await bumpDataVersion(db, tenantId); // subject lists with IncludeDescendants change
  }
  const entity = (await findEntitiesByKeys(db, tenantId, [existing.key]))[0]!;
  return { entity, created: false };
}

/** A tenant file's structure types with their custom fields (D3, D8); a type's field list is its definition (P9). */
export interface StructureTypesPart {
  structureTypes: readonly {
    key: string;
    name: string;
    subjectAssignable: boolean;
    customFields: readonly { key: string; name: string; dataType: DataTypeName; type?: string | undefined; required: boolean }[];
  }[];
}

/**
 * Writes a tenant's structure types in the tenant apply's transaction `trx` and answers the problems found
 * (paths from the tenant): a field whose entities hold values keeps its data type. Values of a field the
 * file drops are removed, so a field re-added later under the same key starts empty.
 */
export async function applyStructureTypes(
  trx: Db,
  tenantId: string,
  part: StructureTypesPart,
): Promise<{ path: string; message: string }[]> {
  const problems: { path: string; message: string }[] = [];
  for (const [si, st] of part.structureTypes.entries()) {
    const oldFields = await findStructureTypeFields(trx, tenantId, st.key);
    for (const [fi, f] of st.customFields.entries()) {
      const old = oldFields.find((o) => o.key === f.key);
      if (old && old.data_type !== f.dataType && (await entitiesHoldCustomValue(trx, tenantId, st.key, f.key))) {
        problems.push({
          path: `structureTypes[${si}].customFields[${fi}].dataType`,
          message: `entities hold values of '${f.key}': its data type cannot change`,
        });
      }
    }
    await upsertStructureType(trx, tenantId, { key: st.key, name: st.name, subject_assignable: st.subjectAssignable });
    await replaceStructureTypeFields(
      trx,
      tenantId,
      st.key,
      st.customFields.map((f, i) => ({
        key: f.key,
        name: f.name,
        data_type: f.dataType,
        type_label: f.type ?? f.dataType,
        required: f.required,
        position: i,
      })),
    );
    await pruneEntityCustomValues(
      trx,
      tenantId,
      st.key,
      st.customFields.map((f) => f.key),
    );
  }
  return problems;
}

/** A tenant file's structural entities (D3, D8): each upserted as the API upserts one. */
export interface StructuralEntitiesPart {
  structuralEntities: readonly {
    key: string;
    displayName: string;
    structureTypeKey: string;
    parentKey?: string | null | undefined;
    customFieldValues?: readonly { key: string; value?: unknown }[] | undefined;
  }[];
}

/**
 * Upserts a tenant's structural entities in the tenant apply's transaction `trx`, parents before children
 * (the file has no cycles), with every rule of D8; answers the problems found (paths from the tenant).
 */
export async function applyStructuralEntities(
  trx: Db,
  tenantId: string,
  part: StructuralEntitiesPart,
): Promise<{ path: string; message: string }[]> {
  const entities = part.structuralEntities;
  const inFile = new Map(entities.map((e, i) => [e.key, i]));
  const order: number[] = [];
  const state = new Map<number, 'visiting' | 'done'>();
  const visit = (i: number): void => {
    if (state.has(i)) return;
    state.set(i, 'visiting');
    const parent = entities[i]!.parentKey;
    if (parent && inFile.has(parent)) visit(inFile.get(parent)!);
    state.set(i, 'done');
    order.push(i);
  };
  entities.forEach((_, i) => visit(i));
  const problems: { path: string; message: string }[] = [];
  for (const i of order) {
    const e = entities[i]!;
    try {
      await upsertStructuralEntity(
        { db: trx, principal: { tenantId } },
        {
          key: e.key,
          displayName: e.displayName,
          structureTypeKey: e.structureTypeKey,
          ...(e.parentKey !== undefined ? { parentKey: e.parentKey } : {}),
          customFieldValues: e.customFieldValues ?? [],
        },
        { pathPrefix: `structuralEntities[${i}].` },
      );
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      for (const [path, messages] of Object.entries(err.fieldErrors ?? {})) for (const m of messages) problems.push({ path, message: m });
    }
  }
  return problems;
}
