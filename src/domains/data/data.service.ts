import { isDeepStrictEqual } from 'node:util';
import type { Context } from '../../graphql/context.js';
import type { DataExtractItem, DataExtractRow } from '../../db/tables.js';
import { isUniqueViolation } from '../../db/faults.js';
import { ConflictError, ErrorCollector, ForbiddenError, NotFoundError } from '../../core/errors.js';
import { MAX_KEY_LENGTH, MAX_LIST_ITEMS, MAX_NAME_LENGTH } from '../../core/input.js';
import { requirePermission } from '../../core/permissions.js';
import { invalidate } from './cache/index.js';
import {
  type DataPoint,
  POINT_TYPES,
  findDataSource,
  findExtracts,
  findExtractsOfInboundClient,
  findSourcesOfInboundClient,
  insertExtract,
  lockExtract,
  pointValueProblem,
  subjectsByIdentifier,
  updateExtract,
} from './model/index.js';

/** Bounds on one notification, so a body cannot hold unbounded work (413 covers the bytes). */
const MAX_POINTS = MAX_LIST_ITEMS;
const MAX_FILTER_ENTRIES = 100;

export interface DataPointInput {
  id: string;
  subjectIdentifier: string;
  dataPointItems: readonly { key: string; value: { dataType: string; value?: unknown } }[];
}

/** A change notification (D10) in GraphQL casing; REST's body binds onto it. */
export interface DataChangeInput {
  subjectIdentifier: string;
  dataExtractsOptionsValuesFilter?: unknown;
  newOrUpdatedDataPoints?: readonly DataPointInput[] | null | undefined;
  removedDataPointIdentifiers?: readonly string[] | null | undefined;
}

/**
 * Whether an extract's options hold every entry of the filter (D10): keys are dot-separated property
 * paths (a numeric segment indexes an array); a number, string or boolean equals another when their text
 * does (`"7"` matches `7`); objects and arrays compare deeply. An empty filter matches every extract.
 */
export function optionsMatch(options: unknown, filter: Record<string, unknown>): boolean {
  return Object.entries(filter).every(([path, expected]) => {
    let at: unknown = options;
    for (const seg of path.split('.')) {
      if (Array.isArray(at) && /^\d+$/.test(seg)) at = at[Number(seg)];
      else if (typeof at === 'object' && at !== null && !Array.isArray(at) && Object.hasOwn(at, seg))
        at = (at as Record<string, unknown>)[seg];
      else return false;
    }
    const scalar = (v: unknown) => typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';
    return scalar(at) && scalar(expected) ? String(at) === String(expected) : isDeepStrictEqual(at, expected);
  });
}

/** Validates a notification's body beyond its shape: the rules D10 names, each at its location. */
function validateChange(input: DataChangeInput): { filter: Record<string, unknown>; points: DataPoint[] } {
  const errors = new ErrorCollector();
  if (input.subjectIdentifier.trim() === '') errors.add('subjectIdentifier', 'SubjectIdentifier is required.');
  const rawFilter = input.dataExtractsOptionsValuesFilter ?? {};
  let filter: Record<string, unknown> = {};
  if (typeof rawFilter !== 'object' || Array.isArray(rawFilter)) {
    errors.add('dataExtractsOptionsValuesFilter', 'DataExtractsOptionsValuesFilter must be an object from property path to value.');
  } else {
    filter = rawFilter as Record<string, unknown>;
    if (Object.keys(filter).length > MAX_FILTER_ENTRIES)
      errors.add('dataExtractsOptionsValuesFilter', `At most ${MAX_FILTER_ENTRIES} entries.`);
    for (const k of Object.keys(filter)) {
      if (k === '' || k.split('.').some((s) => s === ''))
        errors.add(`dataExtractsOptionsValuesFilter.${k}`, 'A property path has no empty segments.');
    }
  }
  const given = input.newOrUpdatedDataPoints ?? [];
  if (given.length > MAX_POINTS) errors.add('newOrUpdatedDataPoints', `At most ${MAX_POINTS} data points.`);
  const points: DataPoint[] = [];
  given.slice(0, MAX_POINTS).forEach((p, i) => {
    const at = `newOrUpdatedDataPoints[${i}]`;
    if (p.id.trim() === '') errors.add(`${at}.id`, 'Id is required.');
    if (p.subjectIdentifier !== input.subjectIdentifier) {
      errors.add(
        `${at}.subjectIdentifier`,
        `The data point's SubjectIdentifier '${p.subjectIdentifier}' differs from the request's '${input.subjectIdentifier}'.`,
      );
    }
    const items = p.dataPointItems.map((item, j) => {
      const type = POINT_TYPES.find((t) => t.toLowerCase() === item.value.dataType.toLowerCase());
      if (item.key === '') errors.add(`${at}.dataPointItems[${j}].key`, 'Key is required.');
      if (!type) {
        errors.add(`${at}.dataPointItems[${j}].value.dataType`, `DataType must be one of ${POINT_TYPES.join(', ')}.`);
        return undefined;
      }
      const value = item.value.value ?? null;
      const problem = pointValueProblem(type, value);
      if (problem) errors.add(`${at}.dataPointItems[${j}].value.value`, problem);
      return { Key: item.key, Value: { DataType: type, Value: value as string | number | boolean | null } };
    });
    points.push({ Id: p.id, SubjectIdentifier: p.subjectIdentifier, DataPointItems: items.filter((x) => x !== undefined) });
  });
  (input.removedDataPointIdentifiers ?? []).forEach((id, i) => {
    if (id.trim() === '') errors.add(`removedDataPointIdentifiers[${i}]`, 'An identifier must not be empty.');
  });
  if ((input.removedDataPointIdentifiers ?? []).length > MAX_POINTS)
    errors.add('removedDataPointIdentifiers', `At most ${MAX_POINTS} identifiers.`);
  errors.throwIfAny();
  return { filter, points };
}

/**
 * A data provider reports created, updated (`newOrUpdatedDataPoints`) or removed
 * (`removedDataPointIdentifiers`) data of one subject (D4, D10). Only clients listed as inbound clients of
 * a data source may (403); the subject must be known to one of those sources (404). The entries of the
 * matching extracts are flagged stale, and removed ids leave them, in one transaction (shared with
 * concurrent reports: DataCache.report) whose invalidation reaches every instance before this returns;
 * then they are re-fetched in the background.
 */
export async function reportDataChange(ctx: Context, input: DataChangeInput): Promise<{ flaggedDataExtractKeys: string[] }> {
  const { tenantId, clientId } = ctx.principal;
  const sources = await findSourcesOfInboundClient(ctx.db, tenantId, clientId);
  if (sources.length === 0) throw new ForbiddenError(`The client '${clientId}' is not an inbound client of any data source.`);
  const { filter, points } = validateChange(input);

  const config = await ctx.subjects.config(ctx.db, tenantId, ctx.principal.configVersion);
  const subjectsBySource = new Map<string, string[]>();
  for (const s of sources)
    subjectsBySource.set(s.key, await subjectsByIdentifier(ctx.db, tenantId, s.subject_identifier, input.subjectIdentifier, config));
  if ([...subjectsBySource.values()].every((ids) => ids.length === 0)) {
    throw new NotFoundError(`No subject has the identifier '${input.subjectIdentifier}'.`);
  }
  const extracts = (await findExtractsOfInboundClient(ctx.db, tenantId, clientId)).filter((x) => optionsMatch(x.options, filter));
  const removed = input.removedDataPointIdentifiers ?? [];
  const recreated = points.map((p) => p.Id);
  // What live subscribers hear (dataPointsChanged): a report of removals only is REMOVED.
  const kind = removed.length > 0 && points.length === 0 ? 'REMOVED' : 'CHANGED';
  const flagged = extracts
    .map((x) => {
      const subjectIds = subjectsBySource.get(x.data_source_key) ?? [];
      return { key: x.key, subjectIds, recreatedIds: new Map(subjectIds.map((id) => [id, recreated])) };
    })
    .filter((x) => x.subjectIds.length > 0);
  // Valid and known by now: flagged with concurrent reports, its failures are still its own.
  if (flagged.length > 0) await ctx.data.report({ tenantId, extracts: flagged, kind, removedIds: removed });
  return { flaggedDataExtractKeys: flagged.map((x) => x.key) };
}

/** Refresh data set (D10): every cached entry of the extract flagged stale and re-fetched in the background. */
export async function refreshDataSet(ctx: Context, dataExtractKey: string): Promise<{ dataExtractKey: string; flaggedEntries: number }> {
  requirePermission(ctx.principal, 'Refresh:DataSet');
  const { tenantId } = ctx.principal;
  const [extract] = await findExtracts(ctx.db, tenantId, [dataExtractKey]);
  if (!extract) throw new NotFoundError(`No data extract has the key '${dataExtractKey}'.`);
  const done = await ctx.data.answering((trx, answering) =>
    invalidate(trx, { tenantId, extracts: [{ key: dataExtractKey, subjectIds: null }], kind: 'REFRESHED' }, answering),
  );
  return { dataExtractKey, flaggedEntries: done.flagged };
}

export interface ExtractInput {
  key: string;
  name?: string | null | undefined;
  dataSourceKey?: string | null | undefined;
  options?: unknown;
  items?: readonly ItemInput[] | null | undefined;
}

/** An item as sent: unit and dataType may be null. */
type ItemInput = { key: string; name: string; unit?: string | null | undefined; dataType?: string | null | undefined };

/** The longest unit an extract's item may name ("steps", "km", "bpm", "h", "kg CO₂e"). */
export const MAX_UNIT_LENGTH = 40;

/** What is wrong with an extract's declared items, collected under `items[i].…`. */
function checkItems(items: readonly DataExtractItem[], errors: ErrorCollector): void {
  if (items.length > MAX_LIST_ITEMS) errors.add('items', `At most ${MAX_LIST_ITEMS} items.`);
  const seen = new Set<string>();
  items.forEach((item, i) => {
    if (item.key.trim() === '' || item.key.length > MAX_KEY_LENGTH)
      errors.add(`items[${i}].key`, `Key must have 1 to ${MAX_KEY_LENGTH} characters.`);
    else if (seen.has(item.key)) errors.add(`items[${i}].key`, `The item '${item.key}' is listed twice.`);
    seen.add(item.key);
    if (item.name.trim() === '' || item.name.length > MAX_NAME_LENGTH)
      errors.add(`items[${i}].name`, `Name must have 1 to ${MAX_NAME_LENGTH} characters.`);
    if (item.unit !== undefined && (item.unit.trim() === '' || item.unit.length > MAX_UNIT_LENGTH))
      errors.add(`items[${i}].unit`, `Unit must have 1 to ${MAX_UNIT_LENGTH} characters (leave it out for none).`);
    if (item.dataType !== undefined && !(POINT_TYPES as readonly string[]).includes(item.dataType))
      errors.add(`items[${i}].dataType`, `DataType must be one of ${POINT_TYPES.join(', ')}.`);
  });
}

/** The items as stored: absent unit and dataType left out. */
const storedItems = (items: readonly ItemInput[]): DataExtractItem[] =>
  items.map(({ key, name, unit, dataType }) => ({
    key,
    name,
    ...(unit == null ? {} : { unit }),
    ...(dataType == null ? {} : { dataType }),
  }));

/**
 * Creates (Create:DataExtract) or updates (Edit:DataExtract) a data extract. A change of its options or
 * data source flags its cached data stale and re-fetches it (P37): the cached sets answered another question.
 */
export async function saveDataExtract(ctx: Context, input: ExtractInput, mode: 'create' | 'update'): Promise<DataExtractRow> {
  requirePermission(ctx.principal, mode === 'create' ? 'Create:DataExtract' : 'Edit:DataExtract');
  const { tenantId } = ctx.principal;
  const errors = new ErrorCollector();
  if (input.key.trim() === '' || input.key.length > MAX_KEY_LENGTH) errors.add('key', `Key must have 1 to ${MAX_KEY_LENGTH} characters.`);
  if (mode === 'create' && (input.name === undefined || input.name === null)) errors.add('name', 'Name is required.');
  if (input.name !== undefined && input.name !== null && (input.name.trim() === '' || input.name.length > MAX_NAME_LENGTH)) {
    errors.add('name', `Name must have 1 to ${MAX_NAME_LENGTH} characters.`);
  }
  if (mode === 'create' && (input.dataSourceKey === undefined || input.dataSourceKey === null))
    errors.add('dataSourceKey', 'DataSourceKey is required.');
  else if (
    input.dataSourceKey !== undefined &&
    input.dataSourceKey !== null &&
    !(await findDataSource(ctx.db, tenantId, input.dataSourceKey))
  ) {
    errors.add('dataSourceKey', `No data source has the key '${input.dataSourceKey}'.`);
  }
  const options = input.options;
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options)))
    errors.add('options', 'Options must be a JSON object.');
  if (options !== undefined && options !== null && JSON.stringify(options).includes('\\u0000'))
    errors.add('options', 'Options must not contain U+0000.');
  const items = input.items ? storedItems(input.items) : undefined;
  if (items) checkItems(items, errors);
  errors.throwIfAny();

  return ctx.data.answering(async (trx, answering) => {
    const existing = await lockExtract(trx, tenantId, input.key);
    if (mode === 'create') {
      if (existing) throw new ConflictError(`A data extract with the key '${input.key}' exists.`);
      try {
        return await insertExtract(trx, tenantId, {
          key: input.key,
          name: input.name!,
          data_source_key: input.dataSourceKey!,
          options: (options ?? {}) as object,
          items: items ?? [],
        });
      } catch (e) {
        if (isUniqueViolation(e)) throw new ConflictError(`A data extract with the key '${input.key}' exists.`);
        throw e;
      }
    }
    if (!existing) throw new NotFoundError(`No data extract has the key '${input.key}'.`);
    const next = {
      name: input.name ?? existing.name,
      data_source_key: input.dataSourceKey ?? existing.data_source_key,
      options: (options ?? existing.options) as object,
      items: items ?? existing.items,
    };
    const row = await updateExtract(trx, tenantId, input.key, next);
    const changed = next.data_source_key !== existing.data_source_key || !isDeepStrictEqual(next.options, existing.options);
    if (changed) await invalidate(trx, { tenantId, extracts: [{ key: input.key, subjectIds: null }], kind: 'REFRESHED' }, answering);
    return row;
  });
}
