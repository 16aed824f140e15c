import type { ProviderMeter } from '../provider/index.js';

/**
 * Where a reader found a subject's set of one extract: fresh in the instance's memory (the LRU), fresh in
 * its row, or not (fetched from the provider, or waiting for a fetch in flight of another reader).
 */
export type CacheLookup = 'memory' | 'database' | 'miss';

/** What the data cache tells the instance's metrics, its provider calls included. */
export interface DataMeter extends ProviderMeter {
  lookups(result: CacheLookup, subjects: number): void;
  /** Sets served stale because their provider failed (D10). */
  staleServed(subjects: number): void;
}
