import { randomUUID } from 'node:crypto';
import { createContextCache } from '@pothos/core';
import { type StoredValue, type UserReference, parseSentValues, reportUnknownUsers } from '../custom-field/index.js';
import type { DataTypeName, Db, SubjectRow } from '../../db/tables.js';
import { type PageArgs, PageTemplates } from '../../db/paging.js';
import { isFault, isUniqueViolation } from '../../db/faults.js';
import { inTransaction } from '../../db/transaction.js';
import { ConflictError, ErrorCollector, NotFoundError, ValidationError } from '../../core/errors.js';
import { isBlank } from '../../core/input.js';
import { type Principal, requirePermission } from '../../core/permissions.js';
import type { Context } from '../../graphql/context.js';
import { findEntityIdsByKeys, findStructureTypes, shareLockEntitiesByKeys } from '../structural-entity/index.js';
import { bumpDataVersion, configVersionCache } from '../tenant/index.js';
import { canonicalFilterValue, firstText, matchingKeyOf } from './subject-values.js';
import {
  type SubjectConfig,
  type SubjectCounts,
  type SubjectFilters,
  type SubjectOrder,
  addLocations,
  loadSubjectConfig,
  pageSubjects,
  readSubjectIndexConfig,
  subjectCounts,
  lockSubjectById,
  removeLocations,
  findSubjectSeen,
  findUpsertTarget,
  insertSubjects,
  saveSubject,
  subjectFieldHasValues,
  subjectValueRows,
  subjectsAfter,
  updateSubjectRow,
  upsertSubjectField,
  writeSubjectValues,
} from './subject.repository.js';

declare module '../../graphql/context.js' {
  interface Context {
    /** The instance's subject caches (built by the app). */
    subjects: SubjectCaches;
  }
}

export interface SubjectCaches {
  /** The subject configuration per tenant and configuration version (P48). */
  config: (db: Db, tenantId: string, configVersion: string) => Promise<SubjectConfig>;
  /** The keys of the structure types subjects may be assigned to, per configuration version. */
  assignableTypes: (db: Db, tenantId: string, configVersion: string) => Promise<Set<string>>;
  /** TotalCounts per tenant, data version and filters. */
  counts: SubjectCounts;
  /** The unfiltered lists' page statements, compiled once per shape (issue 35). */
  pages: PageTemplates;
}

/** One per instance (two apps in a process share none). */
export function subjectCaches(): SubjectCaches {
  return {
    config: configVersionCache(loadSubjectConfig),
    assignableTypes: configVersionCache(
      async (db, tenantId) => new Set((await findStructureTypes(db, tenantId)).filter((t) => t.subject_assignable).map((t) => t.key)),
    ),
    counts: subjectCounts(),
    pages: new PageTemplates(),
  };
}

// The configuration once loaded: a page's nodes resolve after its list has loaded it, so their
// customFieldValues answer synchronously, not through a promise per subject (P69). Per request, keyed
// by the context object itself: a copied context only misses (the promise path).
const requestConfig = createContextCache((ctx: Context) => {
  const entry: { loaded?: SubjectConfig; promise: Promise<SubjectConfig> } = {
    promise: ctx.subjects.config(ctx.db, ctx.principal.tenantId, ctx.principal.configVersion).then((config) => (entry.loaded = config)),
  };
  return entry;
});

/** The tenant's subject fields, loaded once per request. */
export const subjectConfig = (ctx: Context): Promise<SubjectConfig> => requestConfig(ctx).promise;

/** The request's subject fields if already loaded. */
export const loadedSubjectConfig = (ctx: Context): SubjectConfig | undefined => requestConfig(ctx).loaded;

export interface SubjectListInput {
  structuralEntityKeys?: readonly string[] | null | undefined;
  includeDescendants?: boolean | null | undefined;
  searchTerm?: string | null | undefined;
  customFieldValueFilter?:
    { values?: readonly { key: string; values: readonly string[] }[] | null; match?: 'EXACT_ALL' | 'EXACT_ANY' | null } | null | undefined;
}

/** The D7 filters of a subject list, read against the tenant's fields; each problem is added to `errors`. */
export function subjectFilters(config: SubjectConfig, input: SubjectListInput, errors: ErrorCollector): SubjectFilters {
  const filterValues = input.customFieldValueFilter?.values ?? [];
  const searchTerm = input.searchTerm ?? undefined;
  if (searchTerm && filterValues.length > 0) errors.add('searchTerm', 'SearchTerm cannot be combined with a custom field value filter.');
  const values: SubjectFilters['values'] = [];
  for (const { key, values: raw } of filterValues) {
    const at = `customFieldValueFilter.values[${key}]`;
    const field = config.byKey.get(key);
    if (!field) {
      errors.add(at, `Unknown custom field '${key}'.`);
      continue;
    }
    const texts: string[] = [];
    for (const r of raw) {
      const c = canonicalFilterValue(field, r);
      if (c.ok) texts.push(c.text);
      else errors.add(at, c.message);
    }
    values.push({ key, texts });
  }
  return {
    ...(input.structuralEntityKeys ? { entityKeys: input.structuralEntityKeys, descendants: input.includeDescendants ?? false } : {}),
    ...(values.length > 0 ? { values, match: input.customFieldValueFilter?.match ?? 'EXACT_ALL' } : {}),
    ...(searchTerm ? { searchTerm } : {}),
  };
}

/** D6 OrderBy for subjects; with a search term and no OrderBy, best match first. */
function subjectOrder(config: SubjectConfig, orderBy: string | null | undefined, searchTerm: string | undefined): SubjectOrder {
  if (!orderBy && searchTerm) return { by: 'relevance' };
  // D6 default: ExternalId; a tenant without an ExternalId field orders by Id.
  const name = orderBy ?? (config.externalIdKey ? 'ExternalId' : 'Id');
  const field = config.byKey.get(name);
  if (field) return { by: 'field', name, fieldKey: field.key };
  if (name.toLowerCase() === 'id') return { by: 'id' };
  if (name.toLowerCase() === 'externalid' && config.externalIdKey)
    return { by: 'field', name: 'ExternalId', fieldKey: config.externalIdKey };
  throw ValidationError.at('orderBy', `Unknown OrderBy '${name}'. Use Id, ExternalId or a subject field key.`);
}

/** One page of subjects: behind `subjects`, `StructuralEntity.subjects` and REST's list (D7 filters). */
export async function listSubjects(ctx: Context, input: SubjectListInput, args: PageArgs) {
  const config = await subjectConfig(ctx);
  const errors = new ErrorCollector();
  const filters = subjectFilters(config, input, errors);
  const order = subjectOrder(config, args.orderBy, filters.searchTerm);
  errors.throwIfAny();
  return pageSubjects(ctx.db, ctx.principal.tenantId, config, filters, order, args, ctx.subjects);
}

export interface SentValue {
  key: string;
  value?: unknown;
}

const NOT_FOUND = 'No subject has this id.';

/** Parses sent values against the tenant's subject fields, checking UserIdentifier values exist. */
async function parseValues(
  db: Db,
  tenantId: string,
  config: SubjectConfig,
  items: readonly SentValue[],
  base: string,
  errors: ErrorCollector,
) {
  const parsed = parseSentValues(items, config.byKey, base, errors);
  await reportUnknownUsers(db, tenantId, parsed.userRefs, errors);
  return parsed.values;
}

/**
 * An empty or blank text in a matching field or the ExternalId field is a 400 (P87): it identifies no
 * subject, and a provider asked for it could fail a call shared with other subjects.
 */
function reportBlankIdentifiers(
  config: SubjectConfig,
  items: readonly SentValue[],
  changes: Map<string, StoredValue | null>,
  base: string,
  errors: ErrorCollector,
): void {
  const identifying = new Set([...config.matchingKeys, ...(config.externalIdKey ? [config.externalIdKey] : [])]);
  items.forEach((item, i) => {
    const v = changes.get(item.key);
    if (!identifying.has(item.key) || v === null || v === undefined) return;
    if ((Array.isArray(v) ? v : [v]).some((e) => typeof e === 'string' && isBlank(e))) {
      const what = config.matchingKeys.includes(item.key) ? 'matching field' : 'ExternalId field';
      errors.add(`${base}[${i}].value`, `The ${what} '${item.key}' must not be empty or only white space.`);
    }
  });
}

/** The upsert's checks of the matching values it finds a subject by: every one sent, none null, none blank. */
function reportMatchingValues(
  config: SubjectConfig,
  items: readonly SentValue[],
  changes: Map<string, StoredValue | null>,
  base: string,
  errors: ErrorCollector,
): void {
  reportBlankIdentifiers(config, items, changes, base, errors);
  for (const k of config.matchingKeys) {
    // A matching field sent with a bad value is already reported where it was sent.
    if (!items.some((v) => v.key === k)) errors.add(base, `The matching field '${k}' is required.`);
    else if (changes.get(k) === null) errors.add(base, `The matching field '${k}' cannot be null.`);
  }
}

/**
 * A new subject's required fields not sent; one sent as null or with a bad value is already reported where it
 * was sent, a matching field by reportMatchingValues.
 */
function reportMissingRequired(config: SubjectConfig, items: readonly SentValue[], base: string, errors: ErrorCollector): void {
  for (const f of config.fields)
    if (f.required && !items.some((v) => v.key === f.key) && !config.matchingKeys.includes(f.key))
      errors.add(base, `The required field '${f.key}' is missing.`);
}

function merge(current: Record<string, unknown>, changes: Map<string, StoredValue | null>): Record<string, unknown> {
  const next = { ...current };
  for (const [k, v] of changes) {
    if (v === null) delete next[k];
    else next[k] = v;
  }
  return next;
}

/** ExternalId and the unique matching key derived from canonical values (D7). */
function identity(config: SubjectConfig, values: Record<string, unknown>) {
  const text = (key: string) => firstText(config.byKey.get(key)!.dataType, values[key]);
  return {
    external_id: config.externalIdKey ? text(config.externalIdKey) : null,
    matching_key: matchingKeyOf(config.matchingKeys, values),
  };
}

/** The keys of the structure types subjects may be assigned to (only a tenant apply changes them). */
const assignableTypes = (ctx: WriteContext, db: Db) =>
  ctx.subjects.assignableTypes(db, ctx.principal.tenantId, ctx.principal.configVersion);

/** What a subject write reads of the request: the database, the principal and the instance's caches. */
export type WriteContext = Pick<Context, 'db' | 'principal' | 'subjects'>;

/** Entity ids for location keys; unknown or non-assignable keys are errors at `${base}[i]` (D7). */
async function resolveLocationKeys(
  ctx: WriteContext,
  db: Db,
  keys: readonly string[],
  base: string,
  errors: ErrorCollector,
): Promise<string[]> {
  if (keys.length === 0) return [];
  const rows = await shareLockEntitiesByKeys(db, ctx.principal.tenantId, keys);
  return checkLocationKeys(keys, rows, await assignableTypes(ctx, db), base, errors);
}

/** The ids of the entities `keys` name, found in `rows`; unknown or non-assignable keys are errors. */
function checkLocationKeys(
  keys: readonly string[],
  rows: readonly { id: string; key: string; structure_type_key: string }[],
  assignable: ReadonlySet<string>,
  base: string,
  errors: ErrorCollector,
): string[] {
  const byKey = new Map(rows.map((r) => [r.key, r]));
  keys.forEach((k, i) => {
    const e = byKey.get(k);
    if (!e) errors.add(`${base}[${i}]`, `Unknown structural entity '${k}'.`);
    else if (!assignable.has(e.structure_type_key))
      errors.add(`${base}[${i}]`, `Subjects cannot be assigned to '${k}' (its structure type is not subject-assignable).`);
  });
  return [...new Set(rows.map((r) => r.id))];
}

/** Runs a subject write; a unique violation of the matching values becomes 409 (D7). */
async function write<T>(db: Db, fn: (trx: Db) => Promise<T>): Promise<T> {
  return asConflicts(() => inTransaction(db, fn));
}

/** The conflicts a subject write can meet as 409s: matching values taken, an entity deleted meanwhile. */
async function asConflicts<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (isUniqueViolation(e, 'subject_matching_uq')) throw new ConflictError('Another subject already has these matching field values.');
    if (isFault(e, 'foreign-key-violation', 'subject_location_entity_fk'))
      throw new ConflictError('A structural entity of the request was deleted meanwhile; retry the request.');
    throw e;
  }
}

/**
 * Runs a subject write optimistically (P64): `attempt` reads without locks and writes under the
 * condition that the row is still as read, outside a transaction (its write is one statement). If a
 * concurrent write got in between (`attempt` gives undefined), it runs again in a transaction with
 * `lock` set, reading the row FOR UPDATE, so a contended subject is written in turn rather than retried
 * without end; an insert that met a concurrent one runs once more, as an update.
 */
async function optimistically<T>(db: Db, attempt: (db: Db, lock: boolean) => Promise<T | undefined>): Promise<T> {
  return asConflicts(async () => {
    const fast = await attempt(db, false);
    if (fast !== undefined) return fast;
    return inTransaction(db, async (trx) => {
      for (let i = 0; i < 2; i++) {
        const done = await attempt(trx, true);
        if (done !== undefined) return done;
      }
      throw new ConflictError('The subject changed concurrently; retry the request.');
    });
  });
}

export interface UpsertSubjectInput {
  customFieldValues: readonly SentValue[];
  structuralEntityKeys?: readonly string[] | null | undefined;
}

/**
 * POST /api/v2/messaging/subject (D7): finds the subject by its matching values, updating only the given
 * fields (and replacing locations when keys are given), or creates it. Concurrent upserts with the same
 * matching values create one subject: the insert yields to the unique constraint and the loser updates.
 */
export async function upsertSubject(ctx: WriteContext, input: UpsertSubjectInput): Promise<{ subject: SubjectRow; created: boolean }> {
  const { db, principal } = ctx;
  const tenantId = principal.tenantId;
  const config = await ctx.subjects.config(db, tenantId, principal.configVersion);
  const errors = new ErrorCollector();
  const changes = await parseValues(db, tenantId, config, input.customFieldValues, 'customFieldValues', errors);
  // Without matching fields every subject would match every other one (D7 needs them to identify).
  if (config.matchingKeys.length === 0) throw new ConflictError('The tenant has no subject matching fields configured.');
  reportMatchingValues(config, input.customFieldValues, changes, 'customFieldValues', errors);
  errors.throwIfAny();

  const keys = input.structuralEntityKeys ?? undefined;
  const probe = identity(config, Object.fromEntries([...changes].filter(([k]) => config.matchingKeys.includes(k))));
  const assignable = keys?.length ? await assignableTypes(ctx, db) : new Set<string>();
  return optimistically(db, async (db, lock) => {
    const { subject: existing, entities } = await findUpsertTarget(db, tenantId, probe.matching_key, keys ?? [], lock);
    requirePermission(principal, existing ? 'Edit:Subject' : 'Create:Subject');
    if (existing && keys) {
      requirePermission(principal, 'Create:SubjectLocation');
      requirePermission(principal, 'Delete:SubjectLocation');
    }
    const problems = new ErrorCollector();
    if (!existing) reportMissingRequired(config, input.customFieldValues, 'customFieldValues', problems);
    const entityIds = keys ? checkLocationKeys(keys, entities, assignable, 'structuralEntityKeys', problems) : undefined;
    problems.throwIfAny();
    // One statement writes the row, its index rows, its locations and the data version (P64).
    const id = existing?.id ?? randomUUID();
    const values = merge(existing?.values ?? {}, changes);
    const subject = await saveSubject(db, tenantId, {
      id,
      version: existing?.version ?? null,
      write: { ...identity(config, values), values },
      values: subjectValueRows(tenantId, config, { id, values }),
      entityIds,
    });
    return subject && { subject, created: !existing };
  });
}

/**
 * Creates subjects in bulk, each checked as `upsertSubject` checks a new one (problems named under
 * `subjects[i]`), then written by a few multi-row statements in one transaction (the demo organisation at
 * start-up). Matching values another subject holds, or two of `inputs` share, are a 409.
 */
export async function createSubjects(ctx: WriteContext, inputs: readonly UpsertSubjectInput[]): Promise<void> {
  const { db, principal } = ctx;
  const tenantId = principal.tenantId;
  requirePermission(principal, 'Create:Subject');
  const config = await ctx.subjects.config(db, tenantId, principal.configVersion);
  if (config.matchingKeys.length === 0) throw new ConflictError('The tenant has no subject matching fields configured.');
  await write(db, async (trx) => {
    const errors = new ErrorCollector();
    const keys = [...new Set(inputs.flatMap((s) => s.structuralEntityKeys ?? []))];
    const entities = keys.length > 0 ? await shareLockEntitiesByKeys(trx, tenantId, keys) : [];
    const assignable = keys.length > 0 ? await assignableTypes(ctx, trx) : new Set<string>();
    const users: UserReference[] = [];
    const subjects = inputs.map((input, i) => {
      const base = `subjects[${i}]`;
      const parsed = parseSentValues(input.customFieldValues, config.byKey, `${base}.customFieldValues`, errors);
      users.push(...parsed.userRefs);
      reportMatchingValues(config, input.customFieldValues, parsed.values, `${base}.customFieldValues`, errors);
      reportMissingRequired(config, input.customFieldValues, `${base}.customFieldValues`, errors);
      const ks = input.structuralEntityKeys ?? [];
      const rows = entities.filter((e) => ks.includes(e.key));
      const entityIds = checkLocationKeys(ks, rows, assignable, `${base}.structuralEntityKeys`, errors);
      const values = merge({}, parsed.values);
      const id = randomUUID();
      return { id, write: { ...identity(config, values), values }, values: subjectValueRows(tenantId, config, { id, values }), entityIds };
    });
    await reportUnknownUsers(trx, tenantId, users, errors);
    errors.throwIfAny();
    await insertSubjects(trx, tenantId, subjects);
    await bumpDataVersion(trx, tenantId);
  });
}

/** PATCH /api/v2/subject/{id} (D7): sets the given fields; matching values may change (409 on collision). */
export async function updateSubject(
  ctx: WriteContext,
  id: string,
  customFields: readonly SentValue[],
  base: 'customFields' | 'customFieldValues' = 'customFields',
): Promise<SubjectRow> {
  const { db, principal } = ctx;
  const tenantId = principal.tenantId;
  requirePermission(principal, 'Edit:Subject');
  const config = await ctx.subjects.config(db, tenantId, principal.configVersion);
  const errors = new ErrorCollector();
  // Problems are named under the list as sent (D5: CustomFieldValues is accepted as an alias).
  const changes = await parseValues(db, tenantId, config, customFields, base, errors);
  reportBlankIdentifiers(config, customFields, changes, base, errors);
  customFields.forEach((item, i) => {
    if (config.matchingKeys.includes(item.key) && changes.get(item.key) === null) {
      errors.add(`${base}[${i}].value`, `The matching field '${item.key}' cannot be cleared.`);
    }
  });
  return optimistically(db, async (db, lock) => {
    const existing = await findSubjectSeen(db, tenantId, id, lock);
    if (!existing) throw new NotFoundError(NOT_FOUND);
    errors.throwIfAny();
    const values = merge(existing.values, changes);
    const rows = subjectValueRows(tenantId, config, { id: existing.id, values });
    const write = { ...identity(config, values), values };
    return saveSubject(db, tenantId, { id: existing.id, version: existing.version, write, values: rows });
  });
}

/** PUT .../structuralEntities (D7): adds locations; any unknown or non-assignable key adds nothing. */
export async function addSubjectLocations(ctx: WriteContext, id: string, keys: readonly string[]): Promise<SubjectRow> {
  const { principal } = ctx;
  requirePermission(principal, 'Create:SubjectLocation');
  return inTransaction(ctx.db, async (trx) => {
    const subject = await lockSubjectById(trx, principal.tenantId, id);
    if (!subject) throw new NotFoundError(NOT_FOUND);
    const errors = new ErrorCollector();
    const ids = await resolveLocationKeys(ctx, trx, keys, 'keys', errors);
    errors.throwIfAny();
    await addLocations(trx, principal.tenantId, subject.id, ids);
    await bumpDataVersion(trx, principal.tenantId);
    return subject;
  });
}

/** DELETE .../structuralEntities?keys= (D7): removes those locations; keys not among them are ignored. */
export async function removeSubjectLocations(ctx: WriteContext, id: string, keys: readonly string[]): Promise<SubjectRow> {
  const { principal } = ctx;
  requirePermission(principal, 'Delete:SubjectLocation');
  return inTransaction(ctx.db, async (trx) => {
    const subject = await lockSubjectById(trx, principal.tenantId, id);
    if (!subject) throw new NotFoundError(NOT_FOUND);
    if (keys.length === 0) throw ValidationError.at('keys', 'At least one key is required.');
    await removeLocations(trx, principal.tenantId, subject.id, await findEntityIdsByKeys(trx, principal.tenantId, keys));
    await bumpDataVersion(trx, principal.tenantId);
    return subject;
  });
}

/**
 * Recomputes every subject of a tenant after its subject configuration changed (tenant file, P24):
 * ExternalId, matching values and index rows, in batches, inside the caller's transaction (`ctx.db`; the
 * apply has no request, so `ctx` needs only the tenant). New matching values that collide fail with 409
 * (the apply reports it and rolls back).
 */
export async function reindexSubjects(ctx: { db: Db; principal: Pick<Principal, 'tenantId'> }): Promise<number> {
  const { db } = ctx;
  const { tenantId } = ctx.principal;
  const config = await loadSubjectConfig(db, tenantId);
  let after: string | null = null;
  let n = 0;
  for (;;) {
    const batch = await subjectsAfter(db, tenantId, after, 500);
    if (batch.length === 0) break;
    await write(db, async (trx) => {
      for (const s of batch) {
        const id = identity(config, s.values);
        if (id.external_id !== s.external_id || id.matching_key !== s.matching_key) {
          await updateSubjectRow(trx, tenantId, s.id, { ...id, values: s.values });
        }
      }
      await writeSubjectValues(trx, tenantId, config, batch);
    });
    n += batch.length;
    after = batch[batch.length - 1]!.id;
  }
  await bumpDataVersion(db, tenantId);
  return n;
}

/** What subject indexing depends on (field keys and types, matching fields, the ExternalId field), read before an apply. */
export interface SubjectIndexSnapshot {
  fields: Map<string, { key: string; data_type: DataTypeName; is_array: boolean }>;
  signature: string;
}

/** The tenant's subject index configuration before the tenant apply writes (none for a new tenant). */
export async function subjectIndexSnapshot(db: Db, tenantId: string | undefined): Promise<SubjectIndexSnapshot> {
  if (!tenantId) return { fields: new Map(), signature: '' };
  const { fields, tenant: t } = await readSubjectIndexConfig(db, tenantId);
  return {
    fields: new Map(fields.map((f) => [f.key, f])),
    signature: JSON.stringify([fields, t.matching_field_keys, t.external_id_field_key]),
  };
}

/** A tenant file's subject fields (D3, D7), in their order. */
export interface SubjectFieldsPart {
  subjectFields: readonly {
    key: string;
    name: string;
    dataType: DataTypeName;
    type?: string | undefined;
    required: boolean;
    isArray: boolean;
  }[];
}

/**
 * Writes a tenant's subject fields in the tenant apply's transaction `trx` and answers the problems found
 * (paths from the tenant): a field holding values keeps its data type and isArray. Without problems, a
 * changed index configuration (`before`, read before the tenant row was written) re-indexes every subject
 * (P24); two subjects that would then share matching values throw a ConflictError.
 */
export async function applySubjectFields(
  trx: Db,
  tenantId: string,
  part: SubjectFieldsPart,
  before: SubjectIndexSnapshot,
): Promise<{ path: string; message: string }[]> {
  const problems: { path: string; message: string }[] = [];
  for (const [i, f] of part.subjectFields.entries()) {
    const was = before.fields.get(f.key);
    if (was && (was.data_type !== f.dataType || was.is_array !== f.isArray) && (await subjectFieldHasValues(trx, tenantId, f.key))) {
      problems.push({
        path: `subjectFields[${i}].dataType`,
        message: `subjects hold values of '${f.key}': its data type and isArray cannot change`,
      });
    }
    await upsertSubjectField(trx, tenantId, {
      key: f.key,
      name: f.name,
      data_type: f.dataType,
      type_label: f.type ?? f.dataType,
      required: f.required,
      is_array: f.isArray,
      position: i,
    });
  }
  if (problems.length === 0 && (await subjectIndexSnapshot(trx, tenantId)).signature !== before.signature) {
    await reindexSubjects({ db: trx, principal: { tenantId } });
  }
  return problems;
}
