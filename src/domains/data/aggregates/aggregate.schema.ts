import { GraphQLFloat, type GraphQLResolveInfo, GraphQLList, GraphQLNonNull, Kind, type SelectionSetNode, valueFromAST } from 'graphql';
import { dayNumber } from '../../../core/dates.js';
import { builder } from '../../../graphql/builder.js';
import { SEARCH_COST } from '../../../graphql/connections.js';
import { StructuralEntityRef } from '../../structural-entity/index.js';
import { CustomFieldValueFilterInput, SubjectRef } from '../../subject/index.js';
import {
  type AggregateGroup,
  type Aggregates,
  type Aggregation,
  type Bucket,
  type Coverage,
  type DataPointAggregatesInput,
  DEFAULT_AGGREGATE_SUBJECTS,
  MAX_AGGREGATE_SUBJECTS,
  MAX_BUCKETS,
  MAX_GROUPS,
  MAX_UNAVAILABLE_LISTED,
  aggregateDataPoints,
  bucketCount,
} from './aggregate.service.js';

// Aggregates of data points over the hierarchy and time (P57–P59, docs/data-cache.md "Aggregating").
// Names follow PostGraphile's pg-aggregates: `aggregates` over everything, `groupedAggregates` per group;
// a bucket has a typed start (its first local date, and that instant) rather than a string key.

const AggregateIntervalEnum = builder.enumType('AggregateInterval', {
  description: 'Calendar buckets in the time zone: a day, an ISO week (from Monday), a month, a year.',
  values: {
    DAY: { value: 'DAY', description: 'A calendar day.' },
    WEEK: { value: 'WEEK', description: 'An ISO week, from Monday.' },
    MONTH: { value: 'MONTH', description: 'A calendar month.' },
    YEAR: { value: 'YEAR', description: 'A calendar year.' },
  } as const,
});

const AggregateGroupByEnum = builder.enumType('AggregateGroupBy', {
  description: 'How dataPointAggregates splits the subjects into groups.',
  values: {
    CHILD_ENTITY: { value: 'CHILD_ENTITY', description: 'One group per child of structuralEntityKey (its subtree).' },
    ITEM: { value: 'ITEM', description: 'One group per value of the String item groupByItemKey.' },
  } as const,
});

export const DataPointAggregatesInputRef = builder.inputType('DataPointAggregatesInput', {
  description: 'What to aggregate: an item of an extract, over which subjects, range and buckets.',
  fields: (t) => ({
    extractKey: t.string({ required: true, description: 'Key of the data extract.' }),
    valueItemKey: t.string({ required: true, description: 'The item to aggregate: Integer or Decimal.' }),
    timeItemKey: t.string({ required: true, description: 'The item that places a point in time: Date or DateTime.' }),
    interval: t.field({ type: AggregateIntervalEnum, required: true, description: 'The size of a bucket.' }),
    from: t.string({ required: true, description: 'First local date of the range (yyyy-MM-dd), included.' }),
    to: t.string({ required: true, description: 'Local date the range ends before (yyyy-MM-dd), excluded.' }),
    timeZone: t.string({ defaultValue: 'UTC', description: 'IANA time zone of the dates and buckets.' }),
    structuralEntityKey: t.string({ description: "The subjects of this entity (and its descendants'); required by CHILD_ENTITY." }),
    includeDescendants: t.boolean({ defaultValue: true, description: 'Also subjects located below the entities.' }),
    structuralEntityKeys: t.stringList({ description: 'As subjects(structuralEntityKeys): subjects located at any of them.' }),
    customFieldValueFilter: t.field({ type: CustomFieldValueFilterInput, description: 'As subjects(customFieldValueFilter).' }),
    groupBy: t.field({ type: AggregateGroupByEnum, description: 'Also aggregate per group (none when absent).' }),
    groupByItemKey: t.string({ description: 'With groupBy ITEM: a String item of the points.' }),
    maxGroups: t.int({
      description: `At most this many groups (1 to ${MAX_GROUPS}, default ${MAX_GROUPS}); more is BAD_REQUEST. The cost counts buckets × maxGroups.`,
    }),
    maxSubjects: t.int({
      description: `At most this many subjects (1 to ${MAX_AGGREGATE_SUBJECTS}, default ${DEFAULT_AGGREGATE_SUBJECTS}); filters selecting more are BAD_REQUEST. The cost counts maxSubjects × (days of the range + ${SUBJECT_FIXED_DAYS}) / ${SUBJECT_DAYS_PER_COST}.`,
    }),
  }),
});

/** `percentiles(p)` takes this. */
const FRACTIONS = new GraphQLNonNull(new GraphQLList(new GraphQLNonNull(GraphQLFloat)));

/** Every fraction a `percentiles(p)` field asks for anywhere below the aggregation: one statement computes them all. */
export function requestedPercentiles(info: GraphQLResolveInfo): number[] {
  const found = new Set<number>();
  const fragments = new Set<string>();
  const visit = (set: SelectionSetNode | undefined) => {
    for (const s of set?.selections ?? []) {
      if (s.kind === Kind.FIELD) {
        const p = s.name.value === 'percentiles' ? s.arguments?.find((a) => a.name.value === 'p') : undefined;
        const values: unknown = p ? valueFromAST(p.value, FRACTIONS, info.variableValues) : undefined;
        if (Array.isArray(values)) for (const v of values) found.add(v as number);
        visit(s.selectionSet);
      } else if (s.kind === Kind.INLINE_FRAGMENT) visit(s.selectionSet);
      else if (!fragments.has(s.name.value)) {
        fragments.add(s.name.value);
        visit(info.fragments[s.name.value]?.selectionSet);
      }
    }
  };
  for (const node of info.fieldNodes) visit(node.selectionSet);
  return [...found];
}

const DataPointAggregatesRef = builder.objectRef<Aggregates>('DataPointAggregates').implement({
  description: 'Aggregates of the value item over the points counted (those with a number in the range).',
  fields: (t) => ({
    count: t.exposeInt('count', { description: 'Points counted.' }),
    subjectCount: t.exposeInt('subjectCount', { description: 'Subjects with at least one point counted.' }),
    sum: t.float({
      nullable: true,
      description: 'The sum as the nearest Float (null without points, or beyond the Float range); sumText is exact.',
      resolve: (a) => {
        const sum = a.sumText === null ? null : Number(a.sumText);
        return sum !== null && Number.isFinite(sum) ? sum : null;
      },
    }),
    sumText: t.string({
      nullable: true,
      description: "The exact sum of the values as sent (decimal text, PostgreSQL numeric): a Decimal sum without a Float's rounding.",
      resolve: (a) => a.sumText,
    }),
    average: t.float({ nullable: true, description: 'Mean of the values (null without points).', resolve: (a) => a.average }),
    min: t.float({ nullable: true, description: 'Smallest value (null without points).', resolve: (a) => a.min }),
    max: t.float({ nullable: true, description: 'Largest value (null without points).', resolve: (a) => a.max }),
    stddevSample: t.float({
      nullable: true,
      description: 'Sample standard deviation (null below two points).',
      resolve: (a) => a.stddevSample,
    }),
    percentiles: t.field({
      type: ['Float'],
      nullable: { list: false, items: true },
      description:
        "Continuous percentiles (PostgreSQL's percentile_cont) for fractions p from 0 to 1, in the order asked; null without points.",
      args: { p: t.arg.floatList({ required: true, description: 'Fractions from 0 to 1.' }) },
      resolve: (a, { p }) => p.map((f) => a.percentiles.get(f) ?? null),
    }),
  }),
});

const DataPointBucketRef = builder.objectRef<Bucket>('DataPointBucket').implement({
  description: 'One calendar bucket of the range; every bucket is present, empty ones with count 0.',
  fields: (t) => ({
    start: t.exposeString('start', {
      description:
        "The bucket's first local date (yyyy-MM-dd): its day, the Monday of its ISO week, the first of its month or year. The first and last buckets count only the points within [from, to).",
    }),
    startsAt: t.exposeString('startsAt', { description: 'The first instant of that date in the time zone (ISO 8601, UTC).' }),
    aggregates: t.field({ type: DataPointAggregatesRef, description: 'Over the bucket.', resolve: (b) => b.aggregates }),
  }),
});

const DataPointAggregateGroupRef = builder.objectRef<AggregateGroup>('DataPointAggregateGroup').implement({
  description: 'The aggregates of one group (a child entity or an item value).',
  fields: (t) => ({
    key: t.exposeString('key', { description: 'The child entity key, or the item value.' }),
    structuralEntity: t.field({
      type: StructuralEntityRef,
      nullable: true,
      authScopes: { permission: 'View:StructuralEntity' },
      description: 'The child entity (groups by CHILD_ENTITY).',
      resolve: (g) => g.entityKey,
    }),
    aggregates: t.field({
      type: DataPointAggregatesRef,
      description: "Over the whole range, the group's points only.",
      resolve: (g) => g.aggregates,
    }),
    buckets: t.field({ type: [DataPointBucketRef], description: "Per bucket, the group's points only.", resolve: (g) => g.buckets }),
  }),
});

const DataPointCoverageRef = builder.objectRef<Coverage>('DataPointCoverage').implement({
  description: 'Which subjects the aggregates cover (D10: never silently partial).',
  fields: (t) => ({
    subjectCount: t.exposeInt('subjectCount', { description: 'Subjects the filters select.' }),
    contributingSubjectCount: t.exposeInt('contributingSubjectCount', { description: 'Subjects with at least one point counted.' }),
    staleSubjectCount: t.exposeInt('staleSubjectCount', {
      description: 'Subjects whose older data was used because their provider failed (listed in extensions.staleData).',
    }),
    unavailableSubjectCount: t.exposeInt('unavailableSubjectCount', {
      description: 'Subjects left out: their provider failed and nothing was cached.',
    }),
    unavailableSubjects: t.field({
      type: [SubjectRef],
      description: `The first ${MAX_UNAVAILABLE_LISTED} of them, by ExternalId.`,
      resolve: (c) => c.unavailableSubjectIds,
    }),
    pendingSubjectCount: t.exposeInt('pendingSubjectCount', {
      description:
        'Subjects whose data is still being fetched from their provider, counted nowhere else: more than 0 only in a partial ' +
        "answer, which dataPointAggregatesChanged sends while a question's data arrives; 0 in every full answer (always in " +
        'dataPointAggregates).',
    }),
  }),
});

export const DataPointAggregationRef = builder.objectRef<Aggregation>('DataPointAggregation').implement({
  description: 'The answer of dataPointAggregates: totals, buckets, groups and coverage.',
  fields: (t) => ({
    aggregates: t.field({ type: DataPointAggregatesRef, description: 'Over the whole range.', resolve: (a) => a.aggregates }),
    buckets: t.field({ type: [DataPointBucketRef], description: 'Every bucket of the range, in order.', resolve: (a) => a.buckets }),
    groupedAggregates: t.field({
      type: [DataPointAggregateGroupRef],
      description:
        'Per group, in key order (empty without groupBy). Groups by child entity list every child; a subject located under several is in each.',
      resolve: (a) => a.groupedAggregates,
    }),
    coverage: t.field({ type: DataPointCoverageRef, description: 'Which subjects the aggregates cover.', resolve: (a) => a.coverage }),
  }),
});

/** An aggregate costs like a search, plus what it may read (P127), and its selection once per bucket and group (P59). */
export const AGGREGATE_COST = SEARCH_COST;
/**
 * Subject-days (one day of a subject's daily series: a point) that cost 1 (P127): a year over 10,000
 * subjects adds 7,500, a year over 100,000 is past GRAPHQL_MAX_COST's default.
 */
export const SUBJECT_DAYS_PER_COST = 500;
/** Days each subject counts besides the range's: reading its rows costs about what 10 points do (P127). */
export const SUBJECT_FIXED_DAYS = 10;

const bounded = (v: unknown, fallback: number, max: number) => Math.min(Math.max(Math.trunc(Number(v ?? fallback)) || 1, 1), max);

/**
 * The field costs a search plus maxSubjects × (days of the range + SUBJECT_FIXED_DAYS) /
 * SUBJECT_DAYS_PER_COST (the subjects and points it may read), its selection once per bucket × group. A
 * range past MAX_BUCKETS counts no days: the field refuses it with a 400 naming `interval` first.
 */
export function aggregateComplexity(input: DataPointAggregatesInput | undefined) {
  const counted = input ? bucketCount(input.interval, input.from, input.to) : undefined;
  const buckets = counted ?? 1;
  const groups = input?.groupBy ? bounded(input.maxGroups, MAX_GROUPS, MAX_GROUPS) : 1;
  const subjects = bounded(input?.maxSubjects, DEFAULT_AGGREGATE_SUBJECTS, MAX_AGGREGATE_SUBJECTS);
  // bucketCount is defined only for valid dates, from before to.
  const days = input && counted !== undefined && counted <= MAX_BUCKETS ? dayNumber(input.to)! - dayNumber(input.from)! : 0;
  return {
    field: AGGREGATE_COST + Math.ceil((subjects * (days + SUBJECT_FIXED_DAYS)) / SUBJECT_DAYS_PER_COST),
    multiplier: Math.min(buckets, MAX_BUCKETS) * groups,
  };
}

builder.queryField('dataPointAggregates', (t) =>
  t.field({
    type: DataPointAggregationRef,
    nullable: true,
    description: `Aggregates of one numeric item of an extract's data points over a set of subjects (at most maxSubjects), by calendar bucket of a time item in a time zone, optionally grouped; as fresh as reading them (D10). Cost (D11): ${AGGREGATE_COST} + ⌈maxSubjects × (days of [from, to) + ${SUBJECT_FIXED_DAYS}) / ${SUBJECT_DAYS_PER_COST}⌉ + the selection × buckets × maxGroups (1 without groupBy). View:DataExtract and List:Subject.`,
    authScopes: { permission: 'View:DataExtract' },
    complexity: (args) => aggregateComplexity(args.input as DataPointAggregatesInput | undefined),
    args: { input: t.arg({ type: DataPointAggregatesInputRef, required: true, description: 'What to aggregate.' }) },
    resolve: (_root, { input }, ctx, info) => aggregateDataPoints(ctx, input, requestedPercentiles(info)),
  }),
);
