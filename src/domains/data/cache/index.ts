// The two-level data point cache (LRU and data_cache), its provider fetches, background re-fetch and
// the one invalidation path.
export { type CachedPoints, DataCache, type Located, type Outcome, type StaleNotice, type SubjectKey } from './data-cache.js';
export { type DataChange, type Invalidated, invalidate } from './invalidation.js';
export type { CacheLookup, DataMeter } from './meter.js';
