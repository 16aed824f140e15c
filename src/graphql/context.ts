import { type DocumentNode, getOperationAST } from 'graphql';
import type { Logger } from 'pino';
import type { Db } from '../db/tables.js';
import type { Principal } from '../core/permissions.js';
import type { DataCache } from '../domains/data/data-cache.js';

/** D10: data served from the cache because its provider failed, reported in `extensions.staleData`. */
export interface StaleNotice {
  extractKey: string;
  subjectIdentifier: string;
  fetchedAt: string;
}

/**
 * Per-request GraphQL context. Pothos keeps its dataloaders in a cache keyed by this object, so every
 * loader lives exactly as long as one request and never crosses tenants.
 */
export interface Context {
  db: Db;
  principal: Principal;
  requestId: string;
  log: Logger;
  /** The instance's data point cache (shared by requests; its per-request loaders live in the schema). */
  data: DataCache;
  /** Stale data served in this request, by extract and subject identifier. */
  staleData: Map<string, StaleNotice>;
  /**
   * The tenant's data version read with the principal, in a query: cached TotalCounts are looked up
   * under it without reading it again. Undefined in a mutation, which may change it before it counts.
   */
  dataVersion: string | undefined;
}

/** Context.dataVersion of an operation: the principal's in a query, none in a mutation. */
export function dataVersionFor(principal: Principal, document: DocumentNode | undefined, operationName?: string | null): string | undefined {
  return document !== undefined && getOperationAST(document, operationName)?.operation === 'query' ? principal.dataVersion : undefined;
}

/** Builds the context for one request (GraphQL or a REST route executing its operation `document`). */
export function createContext(init: Omit<Context, 'staleData' | 'dataVersion'>, document?: DocumentNode, operationName?: string | null): Context {
  return { ...init, staleData: new Map(), dataVersion: dataVersionFor(init.principal, document, operationName) };
}
