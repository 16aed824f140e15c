import type { Logger } from 'pino';
import type { Db } from './db.js';
import type { Principal } from './domains/auth/permissions.js';

/**
 * Per-request GraphQL context. Pothos keeps its dataloaders in a cache keyed by this object, so every
 * loader lives exactly as long as one request and never crosses tenants.
 */
export interface Context {
  db: Db;
  principal: Principal;
  requestId: string;
  log: Logger;
}

/** Builds the context for one request (GraphQL or a REST route executing its operation). */
export function createContext(init: Context): Context {
  return { ...init };
}
