import { LRUCache } from 'lru-cache';
import { type EventBus, type Unsubscribe, defineTopic, publish } from '../../db/event-bus.js';
import type { Db } from '../../db/tables.js';
import { findClientByTenantKey } from './auth.repository.js';

/** A client as stored, with its tenant's versions as read with it. */
export type StoredClient = NonNullable<Awaited<ReturnType<typeof findClientByTenantKey>>>;

/**
 * A tenant's clients, permissions or configuration version changed: every instance forgets the principals
 * it holds. `m`: the writer's mark (see `publishedAndHeard`).
 */
const PRINCIPALS_CHANGED = defineTopic<{ t: string; m?: string }>('principals-changed', (data) => {
  const d = data as { t?: unknown; m?: unknown };
  if (typeof d?.t !== 'string' || (d.m !== undefined && typeof d.m !== 'string')) throw new Error('not a principals-changed event');
  return { t: d.t, ...(typeof d.m === 'string' ? { m: d.m } : {}) };
});

/**
 * Announces, in the transaction `trx` that changes them, that a tenant's clients or configuration changed.
 * Every write that can change a principal calls it (today only the tenant apply does): it is the one
 * rule that keeps cached principals true (P8).
 */
export async function announcePrincipalsChanged(trx: Db, tenantId: string, mark?: string): Promise<void> {
  await publish(trx, PRINCIPALS_CHANGED, { t: tenantId, ...(mark ? { m: mark } : {}) });
}

/** A client as authentication reads it; `versions`: whether its tenant's data version and read floor were read with it. */
export interface FoundClient {
  client: StoredClient;
  versions: boolean;
}

/**
 * The clients of verified tokens, per instance (issue 35): authentication reads a client once, not on every
 * request. Invalidated through the event bus: a tenant apply announces its change in its transaction and
 * answers once it was delivered, so a revoked scope or permission holds on the next request on every
 * instance (P8). While the bus is not listening, or after a message it could not read, nothing is cached.
 * The tenant's data version and read floor change with every write and are never cached: a cached client
 * comes without them (`versions: false`). Off where reads go to replicas, which need the floor per request.
 */
export class PrincipalCache {
  private readonly clients = new LRUCache<string, StoredClient>({ max: 10_000 });
  /** Bumped by every invalidation: a read that began before one is not cached. */
  private generation = 0;
  private coherent = false;
  private unsubscribe: Unsubscribe | undefined;
  private bus: EventBus | undefined;

  constructor(private readonly enabled: boolean) {}

  /** Follows the bus; without one (or disabled) every lookup reads the database. */
  start(bus: EventBus | undefined): void {
    // The round trip below is every request's, cached or not: the data cache's level 1 relies on it too.
    this.bus = bus;
    if (!bus || !this.enabled) return;
    this.unsubscribe = bus.subscribe(PRINCIPALS_CHANGED, () => this.forget(), {
      connected: () => {
        this.forget();
        this.coherent = true;
      },
      disconnected: () => {
        this.coherent = false;
        this.forget();
      },
      unreadable: () => this.forget(),
    });
  }

  close(): void {
    this.unsubscribe?.();
    this.bus = undefined;
    this.coherent = false;
    this.forget();
  }

  /**
   * The client of a verified token, from the cache when it may be trusted. A request starts caught up with
   * the event bus (`EventBus.sync`): an apply, or a data-cache invalidation (D10), answered before the request
   * was sent has reached this instance's caches before anything is read from them. The round trip is shared
   * by the requests that wait for it; it stands in for the statement authentication read per request.
   */
  async find(db: Db, tenantKey: string, clientId: string): Promise<FoundClient | undefined> {
    await this.bus?.sync();
    const key = `${tenantKey}\u0000${clientId}`;
    const cached = this.coherent ? this.clients.get(key) : undefined;
    if (cached) return { client: cached, versions: false };
    const generation = this.generation;
    const client = await findClientByTenantKey(db, tenantKey, clientId);
    if (!client) return undefined;
    // An invalidation that arrived while the row was read may describe a change the row predates.
    if (this.coherent && generation === this.generation) this.clients.set(key, client);
    return { client, versions: true };
  }

  private forget(): void {
    this.generation++;
    this.clients.clear();
  }
}
