import { type DocumentNode, getOperationAST } from 'graphql';
import type { Db } from '../db/tables.js';
import type { Principal } from '../core/permissions.js';
import { Slices } from './slices.js';

/**
 * Per-request GraphQL context. Domains add the services they need by declaration merging (the data
 * cache and the stale data served: `domains/data/cache/data-cache.ts`), so this layer never imports a domain. Pothos keeps its dataloaders in a cache keyed by this object, so every
 * loader lives exactly as long as one request and never crosses tenants.
 */
export interface Context {
  db: Db;
  principal: Principal;
  requestId: string;
  /**
   * The tenant's data version read with the principal, in a query: cached TotalCounts are looked up
   * under it without reading it again. Undefined in a mutation, which may change it before it counts.
   */
  dataVersion: string | undefined;
  /** Hands a large page's nodes to execution a slice per turn of the event loop (P65). */
  slices: Slices;
}

/** Context.dataVersion of an operation: the principal's in a query, none in a mutation. */
export function dataVersionFor(
  principal: Principal,
  document: DocumentNode | undefined,
  operationName?: string | null,
): string | undefined {
  return document !== undefined && getOperationAST(document, operationName)?.operation === 'query' ? principal.dataVersion : undefined;
}

/** What the application supplies for a request's context; the rest is derived per request. */
export type ContextInit = Omit<Context, 'dataVersion' | 'slices'>;

/** Builds the context for one request (GraphQL or a REST route executing its operation `document`). */
export function createContext(init: ContextInit, document?: DocumentNode, operationName?: string | null): Context {
  return {
    ...init,
    dataVersion: dataVersionFor(init.principal, document, operationName),
    slices: new Slices(),
  };
}
