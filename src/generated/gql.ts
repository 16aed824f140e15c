/* eslint-disable */
import * as types from './graphql.js';
import type { TypedDocumentNode as DocumentNode } from '@graphql-typed-document-node/core';

/**
 * Map of all GraphQL operations in the project.
 *
 * This map has several performance disadvantages:
 * 1. It is not tree-shakeable, so it will include all operations in the project.
 * 2. It is not minifiable, so the string of a GraphQL query will be multiple times inside the bundle.
 * 3. It does not support dead code elimination, so it will add unused operations.
 *
 * Therefore it is highly recommended to use the babel or swc plugin for production.
 * Learn more about it here: https://the-guild.dev/graphql/codegen/plugins/presets/preset-client#reducing-bundle-size
 */
type Documents = {
    "\n    mutation RestRefreshDataSet($input: RefreshDataSetInput!) { refreshDataSet(input: $input) { dataExtractKey flaggedEntries } }\n  ": typeof types.RestRefreshDataSetDocument,
    "\n    mutation RestDataChange($input: DataChangeInput!) { reportDataChange(input: $input) { flaggedDataExtractKeys } }\n  ": typeof types.RestDataChangeDocument,
    "\n    mutation RestDataRemoval($input: DataRemovalInput!) { reportDataRemoval(input: $input) { flaggedDataExtractKeys } }\n  ": typeof types.RestDataRemovalDocument,
    "\n  fragment RestPortalUser on PortalUser { id displayName email inviteMethod }\n": typeof types.RestPortalUserFragmentDoc,
    "\n    query RestSubjectPortalUsers(\n      $subjectId: ID!, $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjectPortalUsers(\n        subjectId: $subjectId, first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestPortalUser } }\n      }\n    }\n  ": typeof types.RestSubjectPortalUsersDocument,
    "\n    mutation RestInviteSubjectToPortal($input: InviteSubjectToPortalInput!) {\n      inviteSubjectToPortal(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  ": typeof types.RestInviteSubjectToPortalDocument,
    "\n    mutation RestRemoveSubjectPortalAccess($input: RemoveSubjectPortalAccessInput!) {\n      removeSubjectPortalAccess(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  ": typeof types.RestRemoveSubjectPortalAccessDocument,
    "\n  fragment RestStructuralEntity on StructuralEntity {\n    key\n    displayName\n    parentKey\n    depth\n    structureType { key name subjectAssignable customFields { key name type required } }\n    customFieldValues { field { key name type required } values { dataType value valueText } }\n  }\n": typeof types.RestStructuralEntityFragmentDoc,
    "\n    query RestStructuralEntities(\n      $parentKey: String, $depth: Int, $searchTerm: String, $subjectAssignable: Boolean, $structureTypeKey: String,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      structuralEntities(\n        parentKey: $parentKey, depth: $depth, searchTerm: $searchTerm, subjectAssignable: $subjectAssignable,\n        structureTypeKey: $structureTypeKey,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestStructuralEntity } }\n      }\n    }\n  ": typeof types.RestStructuralEntitiesDocument,
    "\n    query RestStructuralEntity($key: String!) {\n      structuralEntity(key: $key) { ...RestStructuralEntity }\n    }\n  ": typeof types.RestStructuralEntityDocument,
    "\n    mutation RestUpsertStructuralEntity($input: UpsertStructuralEntityInput!) {\n      upsertStructuralEntity(input: $input) { created structuralEntity { ...RestStructuralEntity } }\n    }\n  ": typeof types.RestUpsertStructuralEntityDocument,
    "\n  fragment RestSubject on Subject {\n    subjectId\n    externalId\n    customFieldValues { field { key name type required isArray } values { dataType valueText } }\n  }\n": typeof types.RestSubjectFragmentDoc,
    "\n  fragment RestSubjectWithLocations on Subject {\n    ...RestSubject\n    structuralEntities(first: 1000) { edges { node { ...RestStructuralEntity } } }\n  }\n": typeof types.RestSubjectWithLocationsFragmentDoc,
    "\n    query RestSubjects(\n      $structuralEntityKeys: [String!], $includeDescendants: Boolean, $searchTerm: String,\n      $customFieldValueFilter: CustomFieldValueFilterInput,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjects(\n        structuralEntityKeys: $structuralEntityKeys, includeDescendants: $includeDescendants, searchTerm: $searchTerm,\n        customFieldValueFilter: $customFieldValueFilter,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestSubject } }\n      }\n    }\n  ": typeof types.RestSubjectsDocument,
    "\n    query RestSubject($id: ID!) { subject(id: $id) { ...RestSubjectWithLocations } }\n  ": typeof types.RestSubjectDocument,
    "\n    mutation RestUpdateSubject($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { ...RestSubjectWithLocations } } }\n  ": typeof types.RestUpdateSubjectDocument,
    "\n    mutation RestUpsertSubject($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { ...RestSubject } } }\n  ": typeof types.RestUpsertSubjectDocument,
    "\n    mutation RestAddSubjectLocations($input: SubjectLocationsInput!) {\n      addSubjectToStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  ": typeof types.RestAddSubjectLocationsDocument,
    "\n    mutation RestRemoveSubjectLocations($input: SubjectLocationsInput!) {\n      removeSubjectFromStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  ": typeof types.RestRemoveSubjectLocationsDocument,
    "\n    query RestUsers($searchTerm: String, $includeInactive: Boolean, $withAccessToSubjectId: ID, $first: Int) {\n      users(searchTerm: $searchTerm, includeInactive: $includeInactive, withAccessToSubjectId: $withAccessToSubjectId, first: $first) {\n        edges { node { id displayName } }\n      }\n    }\n  ": typeof types.RestUsersDocument,
    "query DashboardOptions {\n  dataExtracts(first: 100, orderBy: \"name\") { edges { node { key name items { key name unit } } } }\n  structuralEntities(first: 1000, orderBy: \"displayName\") { edges { node { key displayName depth parentKey } } }\n}": typeof types.DashboardOptionsDocument,
    "subscription DashboardChart($input: DataPointAggregatesInput!, $median: Boolean!) {\n  dataPointAggregatesChanged(input: $input) {\n    aggregates { count subjectCount sum average min max percentiles(p: [0.5, 0.9]) }\n    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount pendingSubjectCount }\n    buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    groupedAggregates {\n      key\n      structuralEntity { key displayName }\n      buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    }\n  }\n}": typeof types.DashboardChartDocument,
    "query DashboardSubjects($entity: String!, $extract: String!, $timeItem: String!) {\n  subjects(structuralEntityKeys: [$entity], includeDescendants: true, first: 100) {\n    totalCount\n    edges { node {\n      subjectId externalId\n      customFieldValues { field { key } values { valueText } }\n      structuralEntities(first: 1) { edges { node { key displayName } } }\n      ... @defer(label: \"latest\") {\n        dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: DESCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n        earliest: dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: ASCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n      }\n    } }\n  }\n}": typeof types.DashboardSubjectsDocument,
    "query DashboardSeries($id: ID!, $extract: String!, $timeItem: String!) {\n  subject(id: $id) {\n    subjectId externalId\n    dataPoints(extractKey: $extract, first: 400, orderBy: $timeItem, orderDirection: DESCENDING) {\n      edges { node { id items { key valueText } } }\n    }\n  }\n}": typeof types.DashboardSeriesDocument,
    "subscription DashboardChanges($extract: String!, $entity: String!) {\n  dataPointsChanged(extractKey: $extract, structuralEntityKey: $entity) { extractKey subjectIds kind at }\n}": typeof types.DashboardChangesDocument,
};
const documents: Documents = {
    "\n    mutation RestRefreshDataSet($input: RefreshDataSetInput!) { refreshDataSet(input: $input) { dataExtractKey flaggedEntries } }\n  ": types.RestRefreshDataSetDocument,
    "\n    mutation RestDataChange($input: DataChangeInput!) { reportDataChange(input: $input) { flaggedDataExtractKeys } }\n  ": types.RestDataChangeDocument,
    "\n    mutation RestDataRemoval($input: DataRemovalInput!) { reportDataRemoval(input: $input) { flaggedDataExtractKeys } }\n  ": types.RestDataRemovalDocument,
    "\n  fragment RestPortalUser on PortalUser { id displayName email inviteMethod }\n": types.RestPortalUserFragmentDoc,
    "\n    query RestSubjectPortalUsers(\n      $subjectId: ID!, $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjectPortalUsers(\n        subjectId: $subjectId, first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestPortalUser } }\n      }\n    }\n  ": types.RestSubjectPortalUsersDocument,
    "\n    mutation RestInviteSubjectToPortal($input: InviteSubjectToPortalInput!) {\n      inviteSubjectToPortal(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  ": types.RestInviteSubjectToPortalDocument,
    "\n    mutation RestRemoveSubjectPortalAccess($input: RemoveSubjectPortalAccessInput!) {\n      removeSubjectPortalAccess(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  ": types.RestRemoveSubjectPortalAccessDocument,
    "\n  fragment RestStructuralEntity on StructuralEntity {\n    key\n    displayName\n    parentKey\n    depth\n    structureType { key name subjectAssignable customFields { key name type required } }\n    customFieldValues { field { key name type required } values { dataType value valueText } }\n  }\n": types.RestStructuralEntityFragmentDoc,
    "\n    query RestStructuralEntities(\n      $parentKey: String, $depth: Int, $searchTerm: String, $subjectAssignable: Boolean, $structureTypeKey: String,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      structuralEntities(\n        parentKey: $parentKey, depth: $depth, searchTerm: $searchTerm, subjectAssignable: $subjectAssignable,\n        structureTypeKey: $structureTypeKey,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestStructuralEntity } }\n      }\n    }\n  ": types.RestStructuralEntitiesDocument,
    "\n    query RestStructuralEntity($key: String!) {\n      structuralEntity(key: $key) { ...RestStructuralEntity }\n    }\n  ": types.RestStructuralEntityDocument,
    "\n    mutation RestUpsertStructuralEntity($input: UpsertStructuralEntityInput!) {\n      upsertStructuralEntity(input: $input) { created structuralEntity { ...RestStructuralEntity } }\n    }\n  ": types.RestUpsertStructuralEntityDocument,
    "\n  fragment RestSubject on Subject {\n    subjectId\n    externalId\n    customFieldValues { field { key name type required isArray } values { dataType valueText } }\n  }\n": types.RestSubjectFragmentDoc,
    "\n  fragment RestSubjectWithLocations on Subject {\n    ...RestSubject\n    structuralEntities(first: 1000) { edges { node { ...RestStructuralEntity } } }\n  }\n": types.RestSubjectWithLocationsFragmentDoc,
    "\n    query RestSubjects(\n      $structuralEntityKeys: [String!], $includeDescendants: Boolean, $searchTerm: String,\n      $customFieldValueFilter: CustomFieldValueFilterInput,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjects(\n        structuralEntityKeys: $structuralEntityKeys, includeDescendants: $includeDescendants, searchTerm: $searchTerm,\n        customFieldValueFilter: $customFieldValueFilter,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestSubject } }\n      }\n    }\n  ": types.RestSubjectsDocument,
    "\n    query RestSubject($id: ID!) { subject(id: $id) { ...RestSubjectWithLocations } }\n  ": types.RestSubjectDocument,
    "\n    mutation RestUpdateSubject($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { ...RestSubjectWithLocations } } }\n  ": types.RestUpdateSubjectDocument,
    "\n    mutation RestUpsertSubject($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { ...RestSubject } } }\n  ": types.RestUpsertSubjectDocument,
    "\n    mutation RestAddSubjectLocations($input: SubjectLocationsInput!) {\n      addSubjectToStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  ": types.RestAddSubjectLocationsDocument,
    "\n    mutation RestRemoveSubjectLocations($input: SubjectLocationsInput!) {\n      removeSubjectFromStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  ": types.RestRemoveSubjectLocationsDocument,
    "\n    query RestUsers($searchTerm: String, $includeInactive: Boolean, $withAccessToSubjectId: ID, $first: Int) {\n      users(searchTerm: $searchTerm, includeInactive: $includeInactive, withAccessToSubjectId: $withAccessToSubjectId, first: $first) {\n        edges { node { id displayName } }\n      }\n    }\n  ": types.RestUsersDocument,
    "query DashboardOptions {\n  dataExtracts(first: 100, orderBy: \"name\") { edges { node { key name items { key name unit } } } }\n  structuralEntities(first: 1000, orderBy: \"displayName\") { edges { node { key displayName depth parentKey } } }\n}": types.DashboardOptionsDocument,
    "subscription DashboardChart($input: DataPointAggregatesInput!, $median: Boolean!) {\n  dataPointAggregatesChanged(input: $input) {\n    aggregates { count subjectCount sum average min max percentiles(p: [0.5, 0.9]) }\n    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount pendingSubjectCount }\n    buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    groupedAggregates {\n      key\n      structuralEntity { key displayName }\n      buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    }\n  }\n}": types.DashboardChartDocument,
    "query DashboardSubjects($entity: String!, $extract: String!, $timeItem: String!) {\n  subjects(structuralEntityKeys: [$entity], includeDescendants: true, first: 100) {\n    totalCount\n    edges { node {\n      subjectId externalId\n      customFieldValues { field { key } values { valueText } }\n      structuralEntities(first: 1) { edges { node { key displayName } } }\n      ... @defer(label: \"latest\") {\n        dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: DESCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n        earliest: dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: ASCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n      }\n    } }\n  }\n}": types.DashboardSubjectsDocument,
    "query DashboardSeries($id: ID!, $extract: String!, $timeItem: String!) {\n  subject(id: $id) {\n    subjectId externalId\n    dataPoints(extractKey: $extract, first: 400, orderBy: $timeItem, orderDirection: DESCENDING) {\n      edges { node { id items { key valueText } } }\n    }\n  }\n}": types.DashboardSeriesDocument,
    "subscription DashboardChanges($extract: String!, $entity: String!) {\n  dataPointsChanged(extractKey: $extract, structuralEntityKey: $entity) { extractKey subjectIds kind at }\n}": types.DashboardChangesDocument,
};

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 *
 *
 * @example
 * ```ts
 * const query = graphql(`query GetUser($id: ID!) { user(id: $id) { name } }`);
 * ```
 *
 * The query argument is unknown!
 * Please regenerate the types.
 */
export function graphql(source: string): unknown;

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestRefreshDataSet($input: RefreshDataSetInput!) { refreshDataSet(input: $input) { dataExtractKey flaggedEntries } }\n  "): (typeof documents)["\n    mutation RestRefreshDataSet($input: RefreshDataSetInput!) { refreshDataSet(input: $input) { dataExtractKey flaggedEntries } }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestDataChange($input: DataChangeInput!) { reportDataChange(input: $input) { flaggedDataExtractKeys } }\n  "): (typeof documents)["\n    mutation RestDataChange($input: DataChangeInput!) { reportDataChange(input: $input) { flaggedDataExtractKeys } }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestDataRemoval($input: DataRemovalInput!) { reportDataRemoval(input: $input) { flaggedDataExtractKeys } }\n  "): (typeof documents)["\n    mutation RestDataRemoval($input: DataRemovalInput!) { reportDataRemoval(input: $input) { flaggedDataExtractKeys } }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment RestPortalUser on PortalUser { id displayName email inviteMethod }\n"): (typeof documents)["\n  fragment RestPortalUser on PortalUser { id displayName email inviteMethod }\n"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    query RestSubjectPortalUsers(\n      $subjectId: ID!, $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjectPortalUsers(\n        subjectId: $subjectId, first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestPortalUser } }\n      }\n    }\n  "): (typeof documents)["\n    query RestSubjectPortalUsers(\n      $subjectId: ID!, $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjectPortalUsers(\n        subjectId: $subjectId, first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestPortalUser } }\n      }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestInviteSubjectToPortal($input: InviteSubjectToPortalInput!) {\n      inviteSubjectToPortal(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  "): (typeof documents)["\n    mutation RestInviteSubjectToPortal($input: InviteSubjectToPortalInput!) {\n      inviteSubjectToPortal(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestRemoveSubjectPortalAccess($input: RemoveSubjectPortalAccessInput!) {\n      removeSubjectPortalAccess(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  "): (typeof documents)["\n    mutation RestRemoveSubjectPortalAccess($input: RemoveSubjectPortalAccessInput!) {\n      removeSubjectPortalAccess(input: $input) { portalUsers { ...RestPortalUser } }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment RestStructuralEntity on StructuralEntity {\n    key\n    displayName\n    parentKey\n    depth\n    structureType { key name subjectAssignable customFields { key name type required } }\n    customFieldValues { field { key name type required } values { dataType value valueText } }\n  }\n"): (typeof documents)["\n  fragment RestStructuralEntity on StructuralEntity {\n    key\n    displayName\n    parentKey\n    depth\n    structureType { key name subjectAssignable customFields { key name type required } }\n    customFieldValues { field { key name type required } values { dataType value valueText } }\n  }\n"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    query RestStructuralEntities(\n      $parentKey: String, $depth: Int, $searchTerm: String, $subjectAssignable: Boolean, $structureTypeKey: String,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      structuralEntities(\n        parentKey: $parentKey, depth: $depth, searchTerm: $searchTerm, subjectAssignable: $subjectAssignable,\n        structureTypeKey: $structureTypeKey,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestStructuralEntity } }\n      }\n    }\n  "): (typeof documents)["\n    query RestStructuralEntities(\n      $parentKey: String, $depth: Int, $searchTerm: String, $subjectAssignable: Boolean, $structureTypeKey: String,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      structuralEntities(\n        parentKey: $parentKey, depth: $depth, searchTerm: $searchTerm, subjectAssignable: $subjectAssignable,\n        structureTypeKey: $structureTypeKey,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestStructuralEntity } }\n      }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    query RestStructuralEntity($key: String!) {\n      structuralEntity(key: $key) { ...RestStructuralEntity }\n    }\n  "): (typeof documents)["\n    query RestStructuralEntity($key: String!) {\n      structuralEntity(key: $key) { ...RestStructuralEntity }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestUpsertStructuralEntity($input: UpsertStructuralEntityInput!) {\n      upsertStructuralEntity(input: $input) { created structuralEntity { ...RestStructuralEntity } }\n    }\n  "): (typeof documents)["\n    mutation RestUpsertStructuralEntity($input: UpsertStructuralEntityInput!) {\n      upsertStructuralEntity(input: $input) { created structuralEntity { ...RestStructuralEntity } }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment RestSubject on Subject {\n    subjectId\n    externalId\n    customFieldValues { field { key name type required isArray } values { dataType valueText } }\n  }\n"): (typeof documents)["\n  fragment RestSubject on Subject {\n    subjectId\n    externalId\n    customFieldValues { field { key name type required isArray } values { dataType valueText } }\n  }\n"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment RestSubjectWithLocations on Subject {\n    ...RestSubject\n    structuralEntities(first: 1000) { edges { node { ...RestStructuralEntity } } }\n  }\n"): (typeof documents)["\n  fragment RestSubjectWithLocations on Subject {\n    ...RestSubject\n    structuralEntities(first: 1000) { edges { node { ...RestStructuralEntity } } }\n  }\n"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    query RestSubjects(\n      $structuralEntityKeys: [String!], $includeDescendants: Boolean, $searchTerm: String,\n      $customFieldValueFilter: CustomFieldValueFilterInput,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjects(\n        structuralEntityKeys: $structuralEntityKeys, includeDescendants: $includeDescendants, searchTerm: $searchTerm,\n        customFieldValueFilter: $customFieldValueFilter,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestSubject } }\n      }\n    }\n  "): (typeof documents)["\n    query RestSubjects(\n      $structuralEntityKeys: [String!], $includeDescendants: Boolean, $searchTerm: String,\n      $customFieldValueFilter: CustomFieldValueFilterInput,\n      $first: Int, $after: String, $last: Int, $before: String, $orderBy: String, $orderDirection: OrderDirection\n    ) {\n      subjects(\n        structuralEntityKeys: $structuralEntityKeys, includeDescendants: $includeDescendants, searchTerm: $searchTerm,\n        customFieldValueFilter: $customFieldValueFilter,\n        first: $first, after: $after, last: $last, before: $before, orderBy: $orderBy, orderDirection: $orderDirection\n      ) {\n        totalCount\n        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }\n        edges { cursor node { ...RestSubject } }\n      }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    query RestSubject($id: ID!) { subject(id: $id) { ...RestSubjectWithLocations } }\n  "): (typeof documents)["\n    query RestSubject($id: ID!) { subject(id: $id) { ...RestSubjectWithLocations } }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestUpdateSubject($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { ...RestSubjectWithLocations } } }\n  "): (typeof documents)["\n    mutation RestUpdateSubject($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { ...RestSubjectWithLocations } } }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestUpsertSubject($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { ...RestSubject } } }\n  "): (typeof documents)["\n    mutation RestUpsertSubject($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { ...RestSubject } } }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestAddSubjectLocations($input: SubjectLocationsInput!) {\n      addSubjectToStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  "): (typeof documents)["\n    mutation RestAddSubjectLocations($input: SubjectLocationsInput!) {\n      addSubjectToStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RestRemoveSubjectLocations($input: SubjectLocationsInput!) {\n      removeSubjectFromStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  "): (typeof documents)["\n    mutation RestRemoveSubjectLocations($input: SubjectLocationsInput!) {\n      removeSubjectFromStructuralEntities(input: $input) { subject { ...RestSubjectWithLocations } }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    query RestUsers($searchTerm: String, $includeInactive: Boolean, $withAccessToSubjectId: ID, $first: Int) {\n      users(searchTerm: $searchTerm, includeInactive: $includeInactive, withAccessToSubjectId: $withAccessToSubjectId, first: $first) {\n        edges { node { id displayName } }\n      }\n    }\n  "): (typeof documents)["\n    query RestUsers($searchTerm: String, $includeInactive: Boolean, $withAccessToSubjectId: ID, $first: Int) {\n      users(searchTerm: $searchTerm, includeInactive: $includeInactive, withAccessToSubjectId: $withAccessToSubjectId, first: $first) {\n        edges { node { id displayName } }\n      }\n    }\n  "];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "query DashboardOptions {\n  dataExtracts(first: 100, orderBy: \"name\") { edges { node { key name items { key name unit } } } }\n  structuralEntities(first: 1000, orderBy: \"displayName\") { edges { node { key displayName depth parentKey } } }\n}"): (typeof documents)["query DashboardOptions {\n  dataExtracts(first: 100, orderBy: \"name\") { edges { node { key name items { key name unit } } } }\n  structuralEntities(first: 1000, orderBy: \"displayName\") { edges { node { key displayName depth parentKey } } }\n}"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "subscription DashboardChart($input: DataPointAggregatesInput!, $median: Boolean!) {\n  dataPointAggregatesChanged(input: $input) {\n    aggregates { count subjectCount sum average min max percentiles(p: [0.5, 0.9]) }\n    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount pendingSubjectCount }\n    buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    groupedAggregates {\n      key\n      structuralEntity { key displayName }\n      buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    }\n  }\n}"): (typeof documents)["subscription DashboardChart($input: DataPointAggregatesInput!, $median: Boolean!) {\n  dataPointAggregatesChanged(input: $input) {\n    aggregates { count subjectCount sum average min max percentiles(p: [0.5, 0.9]) }\n    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount pendingSubjectCount }\n    buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    groupedAggregates {\n      key\n      structuralEntity { key displayName }\n      buckets { start startsAt aggregates { count sum average min max median: percentiles(p: [0.5]) @include(if: $median) } }\n    }\n  }\n}"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "query DashboardSubjects($entity: String!, $extract: String!, $timeItem: String!) {\n  subjects(structuralEntityKeys: [$entity], includeDescendants: true, first: 100) {\n    totalCount\n    edges { node {\n      subjectId externalId\n      customFieldValues { field { key } values { valueText } }\n      structuralEntities(first: 1) { edges { node { key displayName } } }\n      ... @defer(label: \"latest\") {\n        dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: DESCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n        earliest: dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: ASCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n      }\n    } }\n  }\n}"): (typeof documents)["query DashboardSubjects($entity: String!, $extract: String!, $timeItem: String!) {\n  subjects(structuralEntityKeys: [$entity], includeDescendants: true, first: 100) {\n    totalCount\n    edges { node {\n      subjectId externalId\n      customFieldValues { field { key } values { valueText } }\n      structuralEntities(first: 1) { edges { node { key displayName } } }\n      ... @defer(label: \"latest\") {\n        dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: DESCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n        earliest: dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: ASCENDING) {\n          edges { node { id items { key valueText } } }\n        }\n      }\n    } }\n  }\n}"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "query DashboardSeries($id: ID!, $extract: String!, $timeItem: String!) {\n  subject(id: $id) {\n    subjectId externalId\n    dataPoints(extractKey: $extract, first: 400, orderBy: $timeItem, orderDirection: DESCENDING) {\n      edges { node { id items { key valueText } } }\n    }\n  }\n}"): (typeof documents)["query DashboardSeries($id: ID!, $extract: String!, $timeItem: String!) {\n  subject(id: $id) {\n    subjectId externalId\n    dataPoints(extractKey: $extract, first: 400, orderBy: $timeItem, orderDirection: DESCENDING) {\n      edges { node { id items { key valueText } } }\n    }\n  }\n}"];
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "subscription DashboardChanges($extract: String!, $entity: String!) {\n  dataPointsChanged(extractKey: $extract, structuralEntityKey: $entity) { extractKey subjectIds kind at }\n}"): (typeof documents)["subscription DashboardChanges($extract: String!, $entity: String!) {\n  dataPointsChanged(extractKey: $extract, structuralEntityKey: $entity) { extractKey subjectIds kind at }\n}"];

export function graphql(source: string) {
  return (documents as any)[source] ?? {};
}

export type DocumentType<TDocumentNode extends DocumentNode<any, any>> = TDocumentNode extends DocumentNode<  infer TType,  any>  ? TType  : never;