// The data domain's one door (docs/data-cache.md): what other domains, the app, tests and benches use.
// Importing it registers the domain's GraphQL types. Inside, the subsystems import each other bottom up
// (model, provider, live, cache, aggregates), each through its own index.ts.
import './data.schema.js';

export { AggregateMemory, DEFAULT_AGGREGATE_SUBJECTS, LiveAggregates, MAX_AGGREGATE_SUBJECTS } from './aggregates/index.js';
export { type DataMeter, DataCache, type StaleNotice } from './cache/index.js';
export { DataChangeFeed, type Delivery, type LiveMeter, MAX_PENDING_BURSTS, MAX_PENDING_SUBJECTS } from './live/index.js';
export { POINT_TYPES, SecretBox, findDataPointsUrl, findDataSourceKeys } from './model/index.js';
export { MAX_UNIT_LENGTH } from './data.service.js';
export { ProviderClient, type ProviderSource } from './provider/index.js';
export { type DataSourcesPart, applyDataSources } from './data.apply.js';
export { dataContext } from './data.context.js';
export { dataRoutes } from './data.routes.js';
