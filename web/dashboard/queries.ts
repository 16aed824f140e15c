import type {
  DashboardChangesSubscription,
  DashboardChartSubscription,
  DashboardOptionsQuery,
  DashboardSeriesQuery,
  DashboardSubjectsQuery,
  DataPointAggregatesInput,
} from '../../src/generated/graphql.js';

/**
 * The GraphQL documents the page sends, shown on the page too (the example a dashboard builder copies).
 * `options` fills the pickers (each extract's items name the value's unit); `chart` is the live daily aggregate
 * of the entity and of each child entity (the daily medians only when picked: they cost sorts), its first event
 * the current answer (preceded by partial answers while a cold cache fills: coverage.pendingSubjectCount > 0),
 * then the recomputed answer whenever the data under it changes; `subjects` lists
 * the entity's subjects at once and their latest and earliest data points later (@defer: the provider may be
 * slow; the earliest ones tell how many days back the data goes); `series` is one subject's data points, newest
 * first (a picked subject's own chart);
 * `changes` says which subjects' data changed: each event re-sends `subjects` (and `series`).
 * `npm run codegen` types their answers (below) and test/dashboard.test.ts validates them against the service's
 * schema; the GraphQL comment marks each for codegen.
 */
export const DASHBOARD_QUERIES = {
  options: /* GraphQL */ `query DashboardOptions {
  dataExtracts(first: 100, orderBy: "name") { edges { node { key name items { key name unit } } } }
  structuralEntities(first: 1000, orderBy: "displayName") { edges { node { key displayName depth parentKey } } }
}`,
  chart: /* GraphQL */ `subscription DashboardChart($input: DataPointAggregatesInput!, $median: Boolean!) {
  dataPointAggregatesChanged(input: $input) {
    aggregates { count subjectCount sum average min max percentiles(p: [0.5, 0.9]) }
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount pendingSubjectCount }
    buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }
    groupedAggregates {
      key
      structuralEntity { key displayName }
      buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }
    }
  }
}`,
  subjects: /* GraphQL */ `query DashboardSubjects($entity: String!, $extract: String!, $timeItem: String!) {
  subjects(structuralEntityKeys: [$entity], includeDescendants: true, first: 100) {
    totalCount
    edges { node {
      subjectId externalId
      customFieldValues { field { key } values { valueText } }
      structuralEntities(first: 1) { edges { node { key displayName } } }
      ... @defer(label: "latest") {
        dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: DESCENDING) {
          edges { node { id items { key valueText } } }
        }
        earliest: dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: ASCENDING) {
          edges { node { id items { key valueText } } }
        }
      }
    } }
  }
}`,
  series: /* GraphQL */ `query DashboardSeries($id: ID!, $extract: String!, $timeItem: String!) {
  subject(id: $id) {
    subjectId externalId
    dataPoints(extractKey: $extract, first: 400, orderBy: $timeItem, orderDirection: DESCENDING) {
      edges { node { id items { key valueText } } }
    }
  }
}`,
  changes: /* GraphQL */ `subscription DashboardChanges($extract: String!, $entity: String!) {
  dataPointsChanged(extractKey: $extract, structuralEntityKey: $entity) { extractKey subjectIds kind at }
}`,
};

// The answers' types, generated from these documents and schema.graphql by `npm run codegen` (codegen.ts).
export type OptionsData = DashboardOptionsQuery;
export type Extract = Node<OptionsData['dataExtracts']>;
export type Entity = Node<OptionsData['structuralEntities']>;
export type ChartData = DashboardChartSubscription;
export type Aggregate = NonNullable<ChartData['dataPointAggregatesChanged']>;
export type Bucket = Aggregate['buckets'][number];
export type SubjectsData = DashboardSubjectsQuery;
/** A subject; `dataPoints` absent until its deferred part arrives. */
export type Subject = Node<SubjectsData['subjects']>;
export type SeriesData = DashboardSeriesQuery;
export type ChangesData = DashboardChangesSubscription;
export type Change = NonNullable<ChangesData['dataPointsChanged']>;
export type { DataPointAggregatesInput };

/** The node type of a connection that may be null (a root field an error nulls). */
type Node<C extends { edges: { node: unknown }[] } | null> = NonNullable<C>['edges'][number]['node'];
