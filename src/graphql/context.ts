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
  /** On PostgreSQL (P152): where a read-only operation reads, and what a write operation does once done. */
  replicas?: ReplicaRouting | undefined;
}

/** A request's read routing: `db` is the primary until the operation is known to be a query. */
export interface ReplicaRouting {
  /** The database a read-only operation of this principal reads from: a replica that has its writes, or the primary. */
  reads(): Db;
  /**
   * After a write operation's transactions committed, before its answer: records its tenant's read floor
   * while replicas may serve reads. Never fails: a floor not recorded is logged, the write's answer stands.
   */
  wrote(): Promise<void>;
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
  const ctx: Context = { ...init, operation: undefined, slices: new Slices() };
  operationKnown(ctx, operationKind(document, operationName));
  return ctx;
}

/**
 * The one place that routes a request's reads (P152): a query reads from `replicas.reads()`; a mutation,
 * a subscription (its events and live aggregates) and anything of unknown kind stay on the primary.
 */
export function operationKnown(ctx: Context, kind: OperationKind | undefined): void {
  ctx.operation = kind;
  if (kind === 'query' && ctx.replicas) ctx.db = ctx.replicas.reads();
}

/** After an operation ran, before its answer is sent: a mutation records its tenant's read floor (P152). */
export async function operationDone(ctx: Context): Promise<void> {
  if (ctx.operation === 'mutation') await ctx.replicas?.wrote();
}
