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
   * The kind of operation the request runs, once known (GraphQL: when it executes or subscribes; REST: its
   * route's operation). A domain that caches per snapshot reads it: what a query reads may be cached, what
   * a mutation reads may change before it counts.
   */
  operation: OperationKind | undefined;
  /** Hands a large page's nodes to execution a slice per turn of the event loop (P65). */
  slices: Slices;
}

export type OperationKind = 'query' | 'mutation' | 'subscription';

/** Context.operation: the kind of the operation `operationName` of `document`. */
export function operationKind(document: DocumentNode | undefined, operationName?: string | null): OperationKind | undefined {
  return document && getOperationAST(document, operationName)?.operation;
}

/** What the application supplies for a request's context; the rest is derived per request. */
export type ContextInit = Omit<Context, 'operation' | 'slices'>;

/** Builds the context for one request (GraphQL or a REST route executing its operation `document`). */
export function createContext(init: ContextInit, document?: DocumentNode, operationName?: string | null): Context {
  return {
    ...init,
    operation: operationKind(document, operationName),
    slices: new Slices(),
  };
}
