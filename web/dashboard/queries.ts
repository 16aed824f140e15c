/**
 * The GraphQL documents the page sends, shown on the page too (the example a dashboard builder copies).
 * `options` fills the pickers; `chart` is the daily aggregate per child entity; `subjects` lists the
 * entity's subjects at once and their latest data point later (@defer: the provider may be slow);
 * `changes` is the live subscription, each event of which re-sends `chart` and `subjects`.
 * test/dashboard.test.ts validates each against the service's schema; the types below are their answers.
 */
export const DASHBOARD_QUERIES = {
  options: `query DashboardOptions {
  dataExtracts(first: 100, orderBy: "name") { edges { node { key name } } }
  structuralEntities(first: 1000, orderBy: "displayName") { edges { node { key displayName depth parentKey } } }
}`,
  chart: `query DashboardChart($input: DataPointAggregatesInput!) {
  dataPointAggregates(input: $input) {
    aggregates { count subjectCount average min max percentiles(p: [0.5, 0.9]) }
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
    buckets { start startsAt aggregates { count sum average min max } }
    groupedAggregates {
      key
      structuralEntity { key displayName }
      buckets { start startsAt aggregates { count sum average min max } }
    }
  }
}`,
  subjects: `query DashboardSubjects($entity: String!, $extract: String!, $timeItem: String!) {
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
      }
    } }
  }
}`,
  changes: `subscription DashboardChanges($extract: String!, $entity: String!) {
  dataPointsChanged(extractKey: $extract, structuralEntityKey: $entity) { extractKey subjectIds kind at }
}`,
};

export interface OptionsData {
  dataExtracts: Connection<Extract>;
  structuralEntities: Connection<Entity>;
}
export interface Extract {
  key: string;
  name: string;
}
export interface Entity {
  key: string;
  displayName: string;
  depth: number;
  parentKey: string | null;
}

export interface ChartData {
  dataPointAggregates: Aggregate;
}
export interface Aggregate {
  aggregates: Figures & { subjectCount: number; percentiles: (number | null)[] };
  coverage: { subjectCount: number; contributingSubjectCount: number; staleSubjectCount: number; unavailableSubjectCount: number };
  buckets: Bucket[];
  groupedAggregates: { key: string; structuralEntity: { key: string; displayName: string } | null; buckets: Bucket[] }[];
}
export interface Figures {
  count: number;
  sum?: number | null;
  average: number | null;
  min: number | null;
  max: number | null;
}
export interface Bucket {
  start: string;
  startsAt: string;
  aggregates: Figures;
}

export interface SubjectsData {
  subjects: Connection<Subject> & { totalCount: number };
}
export interface Subject {
  subjectId: string;
  externalId: string | null;
  customFieldValues: { field: { key: string }; values: { valueText: string | null }[] }[];
  structuralEntities: Connection<{ key: string; displayName: string }>;
  /** Absent until its deferred part arrives. */
  dataPoints?: Connection<{ id: string; items: { key: string; valueText: string | null }[] }>;
}

export interface ChangesData {
  dataPointsChanged: Change;
}
export interface Change {
  extractKey: string;
  subjectIds: string[];
  kind: string;
  at: string;
}

interface Connection<T> {
  edges: { node: T }[];
}
