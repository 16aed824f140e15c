/**
 * The bench's scenarios: what each request is, how the load varies it, and what it is compared with.
 * Pure data (no imports from src/), shared by the harness, the capture phase and the load generator.
 */
import { EXTRACT_KEY } from './tenant-data.js';

/** How B1 shapes the rows of the replayed statements into the scenario's answer (see b1-shape.ts). */
export type ShapeKind =
  'restSubjectPage' | 'restSubjectById' | 'restEntityPage' | 'gqlSubjects' | 'gqlSubjectsNoCount' | 'gqlSubjectsWithEntities';

/** How the load generator varies each request (autocannon's setupRequest in load-worker.ts). */
export type Variant =
  /** POST /api/v2/messaging/subject, subject `start + k` for the k-th request: each request a new subject. */
  | { kind: 'upsert'; start: number }
  /** The data-points query with `after` = cursors[k] for the k-th request: each request 50 subjects not read before. */
  | { kind: 'pages'; query: string; cursors: (string | null)[] };

export interface Scenario {
  id: string;
  title: string;
  method: 'GET' | 'POST';
  path: string;
  /** Request body (JSON text) for POST without a variant. */
  body?: string;
  graphql: boolean;
  /** What the ratio column divides by: B1 (same SQL, no framework), B0 (a fixed body), or nothing. */
  reference: 'B1' | 'B0' | 'none';
  /** B1's shaping; absent: no B1 run. */
  shape?: ShapeKind;
  /** Page size of the answer (B1 slices the `limit n+1` rows). */
  pageSize?: number;
  variant?: Variant;
  /** Overrides the bench's connection count (the upsert scenarios: 1 and 20 writers). */
  connections?: number;
  /** Also measured with one connection (unloaded latency). */
  latencyRun: boolean;
  /** Whether a B0 run is made (read scenarios). */
  b0: boolean;
  /** Counts the reference provider's get-data-points calls per request. */
  countProviderCalls?: boolean;
}

/** A subject's fields in the GraphQL scenarios: ids and every custom field value with its field. */
export const SUBJECT_FIELDS =
  'subjectId externalId customFieldValues { field { key name type required isArray } values { dataType valueText } }';
export const GQL_SUBJECTS_20 = `{ subjects(first: 20) { totalCount edges { node { ${SUBJECT_FIELDS} } } } }`;
/** The same page without totalCount: what PostGraphile's list without totalCount is compared with (issue 19). */
export const GQL_SUBJECTS_20_NO_COUNT = `{ subjects(first: 20) { edges { node { ${SUBJECT_FIELDS} } } } }`;
/**
 * The page with the information PostGraphile's list carries (issue 35): pageInfo, each subject's ids and its
 * values as field key → value texts; no field descriptors, no totalCount, no per-edge cursor.
 */
export const GQL_SUBJECTS_20_SAME_INFO =
  '{ subjects(first: 20) { pageInfo { hasNextPage hasPreviousPage startCursor endCursor } ' +
  'edges { node { subjectId externalId customFieldValues { field { key } values { valueText } } } } } }';
export const GQL_SUBJECTS_100_ENTITIES = `{ subjects(first: 100) { totalCount edges { node { ${SUBJECT_FIELDS} structuralEntities(first: 10) { edges { node { key displayName parentKey depth } } } } } } }`;
/** 50 subjects from `after` with their 7 data points each (the extract's one page). */
export const GQL_DATA_POINTS = `query($after: String) { subjects(first: 50, after: $after) { edges { node { externalId dataPoints(extractKey: "${EXTRACT_KEY}", first: 100) { totalCount edges { node { id items { key value } } } } } } } }`;
export const DATA_POINTS_PAGE = 50;
/** Sequential cache-miss requests after the miss load, each on its own new page: the exact provider calls per request. */
export const MISS_CHECKS = 5;

/** The `after` cursors of the pages the sequential miss check reads (just before the capture's page). */
export const missCheckCursors = (pageCursors: (string | null)[]) => pageCursors.slice(-(MISS_CHECKS + 1), -1);

/** The facts the scenarios need from the seeded data (found in the capture phase). */
export interface ScenarioContext {
  /** Cursor of the subject at 90% of the default ordering (ExternalId). */
  deepCursor: string;
  /** A subject id from the middle of the list. */
  subjectId: string;
  /** `after` cursors of consecutive 50-subject pages; [0] is null (the first page). */
  pageCursors: (string | null)[];
  /** First subject index the upsert scenarios may create. */
  upsertStart: number;
}

/** The list scenarios `npm run bench:peers` runs (the ones PostGraphile's lists are compared with). */
export const LIST_SCENARIOS = ['rest-list', 'gql-20', 'gql-20-nocount', 'gql-20-same'];
/** The lists issue 35's targets name, each also run at half its maximum rate (p99 ÷ p50) and held to 200 MB. */
export const HALF_RATE_LISTS = ['rest-list', 'gql-20-same', 'gql-20-nocount'];

export const SEARCH_TERM = 'Jonh Carpentr';
export const FILTER = 'customFieldValueFilter.values[grade]=42';
export const PARENT_KEY = 'company-0000';

/** The scenarios in run order: reads first, then data points, then writes (which change the data). */
export function buildScenarios(ctx: ScenarioContext): Scenario[] {
  const read = { method: 'GET' as const, graphql: false, reference: 'B1' as const, latencyRun: true, b0: true };
  const gql = (body: string) => ({ method: 'POST' as const, path: '/graphql', body: JSON.stringify({ query: body }), graphql: true });
  return [
    {
      ...read,
      id: 'rest-list',
      title: 'REST subjects page 1 (First=20, TotalCount)',
      path: '/api/v2/subject?First=20',
      shape: 'restSubjectPage',
      pageSize: 20,
    },
    {
      ...read,
      id: 'rest-deep',
      title: 'REST subjects deep page (After = 90%)',
      path: `/api/v2/subject?First=20&After=${encodeURIComponent(ctx.deepCursor)}`,
      shape: 'restSubjectPage',
      pageSize: 20,
    },
    {
      ...read,
      id: 'rest-filter',
      title: 'REST subjects filter grade=42',
      path: `/api/v2/subject?First=20&${FILTER}`,
      shape: 'restSubjectPage',
      pageSize: 20,
    },
    {
      ...read,
      id: 'rest-search',
      title: `REST subjects SearchTerm "${SEARCH_TERM}"`,
      path: `/api/v2/subject?First=20&SearchTerm=${encodeURIComponent(SEARCH_TERM)}`,
      shape: 'restSubjectPage',
      pageSize: 20,
    },
    { ...read, id: 'rest-by-id', title: 'REST subject by id', path: `/api/v2/subject/${ctx.subjectId}`, shape: 'restSubjectById' },
    {
      ...read,
      id: 'rest-entities',
      title: `REST structural entities ParentKey=${PARENT_KEY}`,
      path: `/api/v1/structuralEntity?ParentKey=${PARENT_KEY}&First=20`,
      shape: 'restEntityPage',
      pageSize: 20,
    },
    { ...read, ...gql(GQL_SUBJECTS_20), id: 'gql-20', title: 'GraphQL 20 subjects (totalCount)', shape: 'gqlSubjects', pageSize: 20 },
    {
      ...read,
      ...gql(GQL_SUBJECTS_20_NO_COUNT),
      id: 'gql-20-nocount',
      title: 'GraphQL 20 subjects (no totalCount)',
      shape: 'gqlSubjectsNoCount',
      pageSize: 20,
    },
    {
      ...read,
      ...gql(GQL_SUBJECTS_20_SAME_INFO),
      id: 'gql-20-same',
      title: "GraphQL 20 subjects, PostGraphile's information (no totalCount)",
      // Compared with PostGraphile's list (the peers' table), not B1: B1 has no shaping for this selection.
      reference: 'none',
    },
    {
      ...read,
      ...gql(GQL_SUBJECTS_100_ENTITIES),
      id: 'gql-100-entities',
      title: 'GraphQL 100 subjects with structural entities',
      shape: 'gqlSubjectsWithEntities',
      pageSize: 100,
    },
    {
      ...read,
      method: 'POST',
      path: '/graphql',
      body: JSON.stringify({ query: GQL_DATA_POINTS, variables: { after: null } }),
      graphql: true,
      id: 'dp-hit',
      title: 'GraphQL data points, 50 subjects, cache hit',
      reference: 'B0',
      countProviderCalls: true,
    },
    {
      ...read,
      method: 'POST',
      path: '/graphql',
      graphql: true,
      id: 'dp-miss',
      title: 'GraphQL data points, 50 subjects, cache miss',
      reference: 'none',
      latencyRun: false,
      countProviderCalls: true,
      // Page 0 is the cache-hit page; the last pages are kept for the exact provider-call count
      // (missCheckCursors) and the capture phase.
      variant: { kind: 'pages', query: GQL_DATA_POINTS, cursors: ctx.pageCursors.slice(1, -(MISS_CHECKS + 1)) },
    },
    {
      id: 'upsert-1',
      title: 'REST upsert, new subject each, 1 writer',
      method: 'POST',
      path: '/api/v2/messaging/subject',
      graphql: false,
      reference: 'none',
      latencyRun: false,
      b0: false,
      connections: 1,
      variant: { kind: 'upsert', start: ctx.upsertStart },
    },
    {
      id: 'upsert-20',
      title: 'REST upsert, new subject each, 20 writers',
      method: 'POST',
      path: '/api/v2/messaging/subject',
      graphql: false,
      reference: 'none',
      latencyRun: false,
      b0: false,
      connections: 20,
      // Far from upsert-1's range, so both only create.
      variant: { kind: 'upsert', start: ctx.upsertStart + 5_000_000 },
    },
  ];
}

/** The upsert body of subject i (the same values as the seeder's subjects, a team as location). */
export function upsertBody(i: number, sent: (i: number) => unknown, teamKey: (i: number) => string): string {
  return JSON.stringify({ CustomFieldValues: sent(i), StructuralEntityKeys: [teamKey(i)] });
}
