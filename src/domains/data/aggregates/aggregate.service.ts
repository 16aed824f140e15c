import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { ErrorCollector, NotFoundError, ValidationError } from '../../../core/errors.js';
import {
  type CalendarUnit,
  dayNumber,
  dayText,
  ianaTimeZone,
  nextPeriod,
  periodStart,
  startOfDay,
  zoneOffsets,
} from '../../../core/dates.js';
import { requirePermission } from '../../../core/permissions.js';
import type { SubjectRow } from '../../../db/tables.js';
import type { Context } from '../../../graphql/context.js';
import { findEntitiesByKeys } from '../../structural-entity/index.js';
import { type SubjectConfig, type SubjectFilters, type SubjectListInput, subjectFilters } from '../../subject/index.js';
import { queryDataVersion } from '../../tenant/index.js';
import type { Located, SubjectKey } from '../cache/index.js';
import {
  type AggregateGrouping,
  type AggregateRow,
  aggregatePoints,
  findAggregateSubjects,
  findChildKeys,
} from './aggregate.repository.js';
import { type DataPoint, findExtracts, identifierOf } from '../model/index.js';
import { partialAnswers } from './partial-answers.js';

/** Buckets one aggregate may have (P59). */
export const MAX_BUCKETS = 1000;
/** Groups one aggregate may have (P59); `maxGroups` lowers it (and the cost). */
export const MAX_GROUPS = 100;
/** Subjects one aggregate may read (P59, P127): a bound on its work, whatever the filters; `maxSubjects` lowers it (and the cost). */
export const MAX_AGGREGATE_SUBJECTS = 100_000;
/** `maxSubjects` when the input leaves it out (P127): the bound before P127, so its questions cost what they may do. */
export const DEFAULT_AGGREGATE_SUBJECTS = 10_000;
/** Distinct percentiles one aggregate may compute. */
export const MAX_PERCENTILES = 20;
/** Unavailable subjects listed in the coverage (all are counted). */
export const MAX_UNAVAILABLE_LISTED = 100;
const MIN_YEAR = 1900;

export type AggregateInterval = CalendarUnit;

/** `dataPointAggregates(input)` as GraphQL gives it. */
export interface DataPointAggregatesInput {
  extractKey: string;
  valueItemKey: string;
  timeItemKey: string;
  interval: AggregateInterval;
  from: string;
  to: string;
  timeZone?: string | null | undefined;
  structuralEntityKey?: string | null | undefined;
  includeDescendants?: boolean | null | undefined;
  structuralEntityKeys?: readonly string[] | null | undefined;
  customFieldValueFilter?: SubjectListInput['customFieldValueFilter'];
  groupBy?: 'CHILD_ENTITY' | 'ITEM' | null | undefined;
  groupByItemKey?: string | null | undefined;
  maxGroups?: number | null | undefined;
  maxSubjects?: number | null | undefined;
}

/** The aggregates of some points (one bucket or a whole range, of all points or of one group). */
export interface Aggregates {
  count: number;
  subjectCount: number;
  sumText: string | null;
  average: number | null;
  min: number | null;
  max: number | null;
  stddevSample: number | null;
  /** percentile_cont by fraction, for every fraction the request selects. */
  percentiles: Map<number, number | null>;
}

export interface Bucket {
  /** The bucket's first local date (yyyy-MM-dd): the calendar start of its day, week, month or year. */
  start: string;
  /** The first instant of that date in the time zone (ISO 8601, UTC). */
  startsAt: string;
  aggregates: Aggregates;
}

export interface AggregateGroup {
  key: string;
  /** The child entity's key (groups by child entity). */
  entityKey: string | null;
  aggregates: Aggregates;
  buckets: Bucket[];
}

export interface Coverage {
  subjectCount: number;
  contributingSubjectCount: number;
  staleSubjectCount: number;
  unavailableSubjectCount: number;
  /** The first MAX_UNAVAILABLE_LISTED of them, by ExternalId. */
  unavailableSubjectIds: string[];
  /** Subjects whose sets are still being fetched (a partial answer, P131); 0 in a full answer. */
  pendingSubjectCount: number;
}

export interface Aggregation {
  aggregates: Aggregates;
  buckets: Bucket[];
  groupedAggregates: AggregateGroup[];
  coverage: Coverage;
}

/** The calendar side of an aggregate: its buckets and their boundaries. */
interface BucketPlan {
  /** Each bucket's first day (day numbers; the first may lie before `from`). */
  starts: number[];
  /** [from, start of bucket 2, …, start of bucket N, to): day numbers and instants. */
  dayBounds: number[];
  instantBounds: number[];
  /** Each bucket's start as an instant. */
  startsAt: number[];
}

/**
 * How many buckets [from, to) has at `interval` (undefined when the dates are not valid): the cost rule
 * counts them before anything runs.
 */
export function bucketCount(interval: AggregateInterval, from: string, to: string): number | undefined {
  const f = dayNumber(from);
  const t = dayNumber(to);
  if (f === undefined || t === undefined || t <= f) return undefined;
  let n = 0;
  for (let s = periodStart(interval, f); s < t && n <= MAX_BUCKETS; s = nextPeriod(interval, s)) n++;
  return n;
}

function planBuckets(interval: AggregateInterval, from: number, to: number, zone: string): BucketPlan {
  const starts: number[] = [];
  for (let s = periodStart(interval, from); s < to; s = nextPeriod(interval, s)) starts.push(s);
  const dayBounds = [from, ...starts.slice(1), to];
  const offsets = zoneOffsets(zone);
  const instant = new Map<number, number>();
  const at = (day: number) => {
    let t = instant.get(day);
    if (t === undefined) instant.set(day, (t = startOfDay(day, offsets)));
    return t;
  };
  return { starts, dayBounds, instantBounds: dayBounds.map(at), startsAt: starts.map(at) };
}

const EMPTY: Omit<Aggregates, 'percentiles'> = {
  count: 0,
  subjectCount: 0,
  sumText: null,
  average: null,
  min: null,
  max: null,
  stddevSample: null,
};

function aggregatesOf(row: AggregateRow | undefined, fractions: readonly number[]): Aggregates {
  const percentiles = new Map(fractions.map((p, i) => [p, row?.percentiles?.[i] ?? null]));
  if (!row || row.count === 0) return { ...EMPTY, percentiles };
  return {
    count: row.count,
    subjectCount: row.subjectCount,
    sumText: row.sum,
    average: row.average,
    min: row.min,
    max: row.max,
    stddevSample: row.stddevSample,
    percentiles,
  };
}

/** Code-point order (UTF-8 bytes), as keys order everywhere (D6). */
const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * What one instance remembers of aggregates, built by the app and reached as `ctx.aggregates` (two apps
 * in one process share nothing).
 */
export class AggregateMemory {
  // Subject lists by (tenant, data version, configuration version, identifier mode, filters), as subject
  // keys: the data version is bumped with every write that can change a list (tenant.repository.ts), so a
  // list is exact for its version. Bounded by subjects held (about 190 bytes each, measured): an
  // organisation's list (MAX_AGGREGATE_SUBJECTS) leaves room for three more of its size.
  readonly subjectLists = new LRUCache<string, SubjectKey[]>({ maxSize: 400_000, sizeCalculation: (keys) => Math.max(1, keys.length) });
  // Answers by everything they are computed from (P63): the question, the subject list's data version and
  // configuration, the extract's cache epoch, and each subject's set as `fingerprint` identifies it. A hit
  // is exactly the answer a computation would give now; nothing else needs invalidating.
  readonly answers = new LRUCache<string, Aggregation>({
    maxSize: 100_000,
    sizeCalculation: (a) => (a.buckets.length + 1) * (a.groupedAggregates.length + 1),
  });
  /** Answers being computed, by the same key: concurrent dashboards asking the same question share one statement. */
  readonly computing = new Map<string, Promise<Aggregation>>();
  // The last answer to each question as asked (no fingerprint: the sets are not read), with the extract's
  // invalidation mark read before its sets were and the end of their freshness (P126).
  readonly recent = new LRUCache<string, { answer: Aggregation; mark: string; until: number }>({
    maxSize: 100_000,
    sizeCalculation: (r) => (r.answer.buckets.length + 1) * (r.answer.groupedAggregates.length + 1),
  });
  // Where the sets of a subject list are (all in the rows), under the same mark: a new question over the
  // same subjects does not read their rows again (P126). Bounded by subjects held (about 210 bytes each), as `subjectLists`.
  readonly whereabouts = new LRUCache<string, { located: ReadonlyMap<string, Located>; mark: string; until: number }>({
    maxSize: 400_000,
    sizeCalculation: (w) => Math.max(1, w.located.size),
  });
}

declare module '../../../graphql/context.js' {
  interface Context {
    /** The instance's remembered aggregate answers and subject lists. */
    aggregates: AggregateMemory;
  }
}

/**
 * The subjects an aggregate reads, with their provider identifiers under `mode`, and the data version
 * the list is exact for (null: no subjects). More than `maxSubjects` is a 400. A query reuses the list of
 * the tenant's current data version (`queryDataVersion`).
 */
async function aggregateSubjects(
  ctx: Context,
  filters: SubjectFilters,
  mode: string,
  config: SubjectConfig,
  maxSubjects: number,
): Promise<{ keys: SubjectKey[]; dataVersion: string | null }> {
  const { tenantId, configVersion } = ctx.principal;
  const listKey = (version: string) =>
    createHash('sha256')
      .update(JSON.stringify([tenantId, version, configVersion, mode, filters]))
      .digest('base64url');
  const version = await queryDataVersion(ctx);
  const cached = version === undefined ? undefined : ctx.aggregates.subjectLists.get(listKey(version));
  if (cached) return { keys: tooMany(cached, maxSubjects), dataVersion: version! };
  const { subjects, dataVersion } = await findAggregateSubjects(
    ctx.db,
    tenantId,
    filters,
    maxSubjects + 1,
    mode !== 'ExternalId' && mode !== 'Id',
  );
  // A list is kept only whole: it serves any maxSubjects it fits.
  tooMany(subjects, maxSubjects);
  const keys = subjects.map((s) => ({ id: s.id, identifier: identifierOf(mode, s as SubjectRow, config) }));
  if (dataVersion !== null) ctx.aggregates.subjectLists.set(listKey(dataVersion), keys);
  return { keys, dataVersion };
}

function tooMany<T>(keys: T[], maxSubjects: number): T[] {
  if (keys.length > maxSubjects)
    throw ValidationError.at(
      'maxSubjects',
      `The filters select more than maxSubjects (${maxSubjects}) subjects; raise it (at most ${MAX_AGGREGATE_SUBJECTS}) or narrow them.`,
    );
  return keys;
}

/**
 * What identifies every subject's set, in list order: the fetch time of a set fresh in the rows (a row
 * changes only by a write, which sets a new fetch time, or by an invalidation, after which it is not
 * fresh until re-fetched). Undefined when a set is in memory (fetched and not stored, served stale) or
 * failed: such answers are computed each time.
 */
function fingerprint(keys: readonly SubjectKey[], located: ReadonlyMap<string, Located>): string | undefined {
  const parts: string[] = [];
  for (const k of keys) {
    const l = located.get(k.id);
    if (l === undefined || l instanceof Error) return undefined;
    if (l.at === 'rows') parts.push(String(l.fetchedAt.getTime()));
    else if (k.identifier === null) parts.push('-');
    else return undefined;
  }
  return parts.join(',');
}

/**
 * `dataPointAggregates` (P57): one numeric item of one extract's points, over a set of subjects,
 * bucketed by a time item in a time zone, optionally grouped. The subjects' sets are made as fresh as a
 * read would serve them (DataCache.locate: fetched in provider chunks, single-flight, stale on failure),
 * then aggregated in PostgreSQL. `fractions`: the percentiles the request selects anywhere.
 */
export async function aggregateDataPoints(
  ctx: Context,
  input: DataPointAggregatesInput,
  fractions: readonly number[],
  /** Hears partial answers while the subjects' sets arrive (P131; none once the full answer is computed), and their failures. */
  onPartial?: { answer: (answer: Aggregation) => void; failed: (err: unknown) => void },
): Promise<Aggregation> {
  requirePermission(ctx.principal, 'View:DataExtract');
  requirePermission(ctx.principal, 'List:Subject');
  const tenantId = ctx.principal.tenantId;

  // 404: the extract, and the entity the request names.
  const [extract] = await findExtracts(ctx.db, tenantId, [input.extractKey]);
  if (!extract) throw new NotFoundError(`No data extract has the key '${input.extractKey}'.`);
  const entityKey = input.structuralEntityKey ?? undefined;
  if (entityKey !== undefined && (await findEntitiesByKeys(ctx.db, tenantId, [entityKey])).length === 0)
    throw new NotFoundError(`No structural entity has the key '${entityKey}'.`);

  // 400: the input.
  const errors = new ErrorCollector();
  const zone = ianaTimeZone(input.timeZone ?? 'UTC');
  if (!zone) errors.add('timeZone', `'${input.timeZone}' is not an IANA time zone name (such as Europe/Berlin or UTC).`);
  const from = dayNumber(input.from);
  const to = dayNumber(input.to);
  const inYears = (d: number | undefined) => d !== undefined && Number(dayText(d).slice(0, 4)) >= MIN_YEAR;
  if (!inYears(from)) errors.add('from', `from must be a date yyyy-MM-dd from ${MIN_YEAR}-01-01 on.`);
  if (!inYears(to)) errors.add('to', `to must be a date yyyy-MM-dd from ${MIN_YEAR}-01-01 on.`);
  else if (from !== undefined && to! <= from) errors.add('to', 'to must be after from: the range is [from, to).');
  const buckets = bucketCount(input.interval, input.from, input.to);
  if (buckets !== undefined && buckets > MAX_BUCKETS)
    errors.add(
      'interval',
      `The range has more than ${MAX_BUCKETS} ${input.interval} buckets; choose a longer interval or a shorter range.`,
    );
  const maxGroups = input.maxGroups ?? MAX_GROUPS;
  if (!Number.isInteger(maxGroups) || maxGroups < 1 || maxGroups > MAX_GROUPS)
    errors.add('maxGroups', `maxGroups must be 1 to ${MAX_GROUPS}.`);
  const maxSubjects = input.maxSubjects ?? DEFAULT_AGGREGATE_SUBJECTS;
  if (!Number.isInteger(maxSubjects) || maxSubjects < 1 || maxSubjects > MAX_AGGREGATE_SUBJECTS)
    errors.add('maxSubjects', `maxSubjects must be 1 to ${MAX_AGGREGATE_SUBJECTS}.`);
  if (entityKey !== undefined && input.structuralEntityKeys)
    errors.add('structuralEntityKeys', 'Give structuralEntityKey or structuralEntityKeys, not both.');
  if (input.groupBy === 'CHILD_ENTITY') {
    if (entityKey === undefined)
      errors.add('groupBy', 'groupBy CHILD_ENTITY needs structuralEntityKey: the entity whose children are the groups.');
    if (input.includeDescendants === false) errors.add('includeDescendants', 'groupBy CHILD_ENTITY reads the subjects below the entity.');
  }
  if (input.groupBy === 'ITEM' && !input.groupByItemKey) errors.add('groupByItemKey', 'groupBy ITEM needs groupByItemKey.');
  if (input.groupBy !== 'ITEM' && input.groupByItemKey) errors.add('groupByItemKey', 'groupByItemKey goes with groupBy ITEM.');
  if (fractions.length > MAX_PERCENTILES) errors.add('p', `At most ${MAX_PERCENTILES} distinct percentiles in one request.`);
  if (fractions.some((p) => !(p >= 0 && p <= 1))) errors.add('p', 'A percentile is a fraction from 0 to 1.');
  const config = await ctx.subjects.config(ctx.db, tenantId, ctx.principal.configVersion);
  const filters = subjectFilters(
    config,
    {
      structuralEntityKeys: entityKey !== undefined ? [entityKey] : input.structuralEntityKeys,
      includeDescendants: input.includeDescendants ?? true,
      customFieldValueFilter: input.customFieldValueFilter,
    },
    errors,
  );
  let children: string[] = [];
  if (input.groupBy === 'CHILD_ENTITY' && entityKey !== undefined) {
    children = await findChildKeys(ctx.db, tenantId, entityKey);
    if (children.length > maxGroups)
      errors.add('structuralEntityKey', `The entity has ${children.length} children, more groups than maxGroups (${maxGroups}).`);
  }
  errors.throwIfAny();

  const mode = extract.source.subject_identifier;
  const { keys, dataVersion } = await aggregateSubjects(ctx, filters, mode, config, maxSubjects);
  const asked =
    dataVersion === null
      ? undefined
      : JSON.stringify([tenantId, dataVersion, ctx.principal.configVersion, extract.key, extract.cache_epoch, mode, input, fractions]);
  // Asked again while no invalidation of the extract was heard and every set is within its TTL: the last
  // answer, without reading the subjects' rows (P126). The mark is read before the rows are.
  const mark = ctx.data.invalidationMark(tenantId, extract.key);
  const recent = asked !== undefined && mark !== undefined ? ctx.aggregates.recent.get(asked) : undefined;
  if (recent && recent.mark === mark && Date.now() < recent.until) return recent.answer;
  // Another question over the same subjects while the mark stands: where their sets are is known too.
  const sets =
    dataVersion === null
      ? undefined
      : JSON.stringify([tenantId, dataVersion, ctx.principal.configVersion, extract.key, extract.cache_epoch, mode, filters]);
  const whereabouts = sets !== undefined && mark !== undefined ? ctx.aggregates.whereabouts.get(sets) : undefined;
  const plan = planBuckets(input.interval, from!, to!, zone!);
  const grouping: AggregateGrouping =
    input.groupBy === 'ITEM'
      ? { by: 'item', key: input.groupByItemKey! }
      : input.groupBy === 'CHILD_ENTITY'
        ? { by: 'child', parentKey: entityKey! }
        : { by: 'none' };
  const asOf = (located: ReadonlyMap<string, Located>): Question => ({
    extract,
    input,
    fractions,
    plan,
    grouping,
    children,
    maxGroups,
    keys,
    located,
  });
  // Partial answers are computed, never remembered: only the full answer below is.
  const partials =
    onPartial &&
    partialAnswers(keys.length, ctx.data.batchSize, (l) => computeAggregation(ctx, asOf(l)), onPartial.answer, onPartial.failed);
  const located =
    whereabouts && whereabouts.mark === mark && Date.now() < whereabouts.until
      ? whereabouts.located
      : await ctx.data.locate(tenantId, extract, keys, partials?.progress).finally(() => partials?.end());
  const until = freshUntil(ctx, located);
  if (sets !== undefined && mark !== undefined && until !== undefined && whereabouts?.located !== located)
    ctx.aggregates.whereabouts.set(sets, { located, mark, until });

  const question = asOf(located);
  // The answer is a function of the question, the subject list's data version and what each subject's set
  // is (fingerprint): asked again, it is served from memory; asked concurrently, computed once.
  const print = fingerprint(keys, located);
  const key = print !== undefined && asked !== undefined ? createHash('sha256').update(asked).update(print).digest('base64url') : undefined;
  if (key === undefined) return computeAggregation(ctx, question);
  const { answers, computing, recent: recents } = ctx.aggregates;
  const remember = (answer: Aggregation) => {
    if (mark !== undefined && until !== undefined) recents.set(asked!, { answer, mark, until });
    return answer;
  };
  const known = answers.get(key) ?? computing.get(key);
  if (known) return remember(await known);
  const work = computeAggregation(ctx, question);
  computing.set(key, work);
  try {
    const answer = await work;
    answers.set(key, answer);
    return remember(answer);
  } finally {
    computing.delete(key);
  }
}

/**
 * Until when every subject's set is where `located` says (epoch ms): the first end of freshness of the sets
 * in the rows. Undefined when a set is in memory or failed: such a finding holds for this request only.
 */
function freshUntil(ctx: Context, located: ReadonlyMap<string, Located>): number | undefined {
  let until = Number.POSITIVE_INFINITY;
  for (const l of located.values()) {
    if (l instanceof Error || l.at !== 'rows') return undefined;
    until = Math.min(until, ctx.data.freshUntil(l.fetchedAt));
  }
  return until;
}

/** What an aggregate is computed from, once its input is valid and its subjects are located. */
interface Question {
  extract: { key: string };
  input: DataPointAggregatesInput;
  fractions: readonly number[];
  plan: BucketPlan;
  grouping: AggregateGrouping;
  /** The groups of CHILD_ENTITY, in code-point order. */
  children: readonly string[];
  maxGroups: number;
  /** The subjects, by ExternalId, and where each one's set is. */
  keys: readonly SubjectKey[];
  located: ReadonlyMap<string, Located>;
}

/** Splits the subjects by where their sets are, aggregates in PostgreSQL and shapes the answer. */
async function computeAggregation(ctx: Context, q: Question): Promise<Aggregation> {
  const { input, fractions, plan, grouping, children, maxGroups, keys, located } = q;
  const errors = new ErrorCollector();

  const rowSubjectIds: string[] = [];
  const memorySets: { subjectId: string; points: DataPoint[] }[] = [];
  const unavailable: string[] = [];
  let stale = 0;
  let firstError: Error | undefined;
  keys.forEach((k) => {
    const l: Located | undefined = located.get(k.id);
    if (!l) return;
    if (l instanceof Error) {
      unavailable.push(k.id);
      firstError ??= l;
    } else if (l.at === 'rows') rowSubjectIds.push(k.id);
    else {
      if (l.stale && k.identifier !== null) {
        stale++;
        ctx.staleData.set(`${q.extract.key}\u0001${k.identifier}`, {
          extractKey: q.extract.key,
          subjectIdentifier: k.identifier,
          fetchedAt: l.fetchedAt!.toISOString(),
        });
      }
      if (l.points.length > 0) memorySets.push({ subjectId: k.id, points: l.points });
    }
  });
  // D10 as for reads: nothing at all could be served. Some subjects missing is reported in the coverage.
  const withIdentifier = keys.filter((k) => k.identifier !== null).length;
  if (firstError && unavailable.length === withIdentifier) throw firstError;

  const { rows, problems } = await aggregatePoints(ctx.db, {
    tenantId: ctx.principal.tenantId,
    extractKey: q.extract.key,
    rowSubjectIds,
    memorySets,
    valueKey: input.valueItemKey,
    timeKey: input.timeItemKey,
    instantBounds: plan.instantBounds,
    dayBounds: plan.dayBounds,
    percentiles: fractions,
    grouping,
  });
  if (problems.value)
    errors.add('valueItemKey', `The item '${input.valueItemKey}' holds ${problems.value} values; aggregates need Integer or Decimal.`);
  if (problems.time)
    errors.add('timeItemKey', `The item '${input.timeItemKey}' holds ${problems.time} values; buckets need Date or DateTime.`);
  if (problems.group)
    errors.add('groupByItemKey', `The item '${input.groupByItemKey}' holds ${problems.group} values; groups need String.`);
  errors.throwIfAny();

  const bucketsOf = (selected: AggregateRow[]): Bucket[] => {
    const byIndex = new Map(selected.filter((r) => r.bucket !== null).map((r) => [r.bucket!, r]));
    return plan.starts.map((s, i) => ({
      start: dayText(s),
      startsAt: new Date(plan.startsAt[i]!).toISOString(),
      aggregates: aggregatesOf(byIndex.get(i + 1), fractions),
    }));
  };
  const whole = rows.filter((r) => !r.grouped);
  const groupKeys = grouping.by === 'child' ? children : [...new Set(rows.filter((r) => r.grouped).map((r) => r.group!))].sort(byCodePoint);
  if (grouping.by === 'item' && groupKeys.length > maxGroups)
    throw ValidationError.at(
      'groupByItemKey',
      `The item '${grouping.key}' has ${groupKeys.length} values in the range, more groups than maxGroups (${maxGroups}).`,
    );
  const totals = aggregatesOf(
    whole.find((r) => r.bucket === null),
    fractions,
  );
  const listed = new Set(unavailable.slice(0, MAX_UNAVAILABLE_LISTED));
  return {
    aggregates: totals,
    buckets: bucketsOf(whole),
    groupedAggregates: groupKeys.map((key) => {
      const mine = rows.filter((r) => r.grouped && r.group === key);
      return {
        key,
        entityKey: grouping.by === 'child' ? key : null,
        aggregates: aggregatesOf(
          mine.find((r) => r.bucket === null),
          fractions,
        ),
        buckets: bucketsOf(mine),
      };
    }),
    coverage: {
      subjectCount: keys.length,
      contributingSubjectCount: totals.subjectCount,
      staleSubjectCount: stale,
      unavailableSubjectCount: unavailable.length,
      // `subjects` (and so `unavailable`) are in ExternalId order.
      unavailableSubjectIds: [...listed],
      pendingSubjectCount: keys.filter((k) => !located.has(k.id)).length,
    },
  };
}
