import { LRUCache } from 'lru-cache';
import type { Db } from '../../db/tables.js';

/**
 * Memoises what only a tenant apply changes, per instance, under `(tenant, config_version)` (P48). Every
 * apply bumps the version, so an entry is never stale, only unused; a request reads the version with its
 * principal and never the configuration itself. A failed load is forgotten, not cached.
 */
export function configVersionCache<T>(load: (db: Db, tenantId: string) => Promise<T>) {
  const entries = new LRUCache<string, Promise<T>>({ max: 1000 });
  return (db: Db, tenantId: string, configVersion: string): Promise<T> => {
    const key = `${tenantId}|${configVersion}`;
    let entry = entries.get(key);
    if (!entry) {
      entry = load(db, tenantId);
      entries.set(key, entry);
      entry.catch(() => entries.delete(key));
    }
    return entry;
  };
}
