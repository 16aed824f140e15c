import { randomUUID } from 'node:crypto';
import { type Client, type ExecutionResult, createClient } from 'graphql-sse';
import { type JWK, SignJWT, importJWK } from 'jose';
import { pino } from 'pino';
import type { Principal } from '../src/core/permissions.js';
import { EventBus } from '../src/db/event-bus.js';
import { DataChangeFeed, type LiveMeter } from '../src/domains/data/index.js';
import { FULL_CLIENT, type TestApp } from './helpers.js';

// Live updates (`dataPointsChanged`) as the tests read them: over SSE through graphql-sse, and in process
// through a feed whose bus messages are handed in directly.

/** One `dataPointsChanged` event as the tests select it. */
export interface Change {
  extractKey: string;
  subjectIds: string[];
  kind: 'CHANGED' | 'REMOVED' | 'REFRESHED';
  at: string;
}

/**
 * One subscription (`dataPointsChanged` unless `T` says another field) read through graphql-sse (distinct
 * connections mode) as fast as events come: every result as it arrives, when it arrived, and how the stream ended.
 */
export class Subscriber<T = { dataPointsChanged: Change | null }> {
  readonly results: ExecutionResult<T, unknown>[] = [];
  readonly arrivals: number[] = [];
  ended: 'complete' | Error | undefined;
  /** Resolves when the server answered the subscription (with its stream, or an error): it is open from then on. */
  readonly ready: Promise<void>;
  private readonly dispose: () => void;
  private readonly client: Client;

  constructor(url: string, token: string, query: string, variables: Record<string, unknown> = {}) {
    this.client = createClient({ url: `${url}/graphql`, headers: { authorization: `Bearer ${token}` }, retryAttempts: 0 });
    let ready!: () => void;
    this.ready = new Promise<void>((r) => (ready = r));
    this.dispose = this.client.subscribe<T>(
      { query, variables },
      {
        next: (r) => {
          this.results.push(r);
          this.arrivals.push(Date.now());
        },
        error: (e) => {
          this.ended = e instanceof Error ? e : new Error(JSON.stringify(e));
          ready();
        },
        complete: () => {
          this.ended = 'complete';
          ready();
        },
      },
      { connected: () => ready() },
    );
  }

  get changes(): Change[] {
    return this.results
      .map((r) => (r.data as { dataPointsChanged?: Change | null } | null | undefined)?.dataPointsChanged)
      .filter((c): c is Change => !!c);
  }

  get errors(): any[] {
    return this.results.flatMap((r) => (r.errors ?? []) as any[]);
  }

  close(): void {
    this.dispose();
    this.client.dispose();
  }
}

/**
 * A feed over an event bus whose "database" is this function: `send` hands it a live event as its
 * LISTEN connection would, `drop` loses that connection. `meter`: what the app's metrics would hear.
 */
export async function feedWithBus(meter?: LiveMeter): Promise<{ feed: DataChangeFeed; send(e: object): void; drop(): void }> {
  let handlers!: Parameters<Parameters<typeof EventBus.open>[0]>[1];
  const bus = await EventBus.open(
    async (_channel, h) => {
      handlers = h;
      h.connected();
      return { close: async () => {} };
    },
    pino({ level: 'silent' }),
  );
  const feed = new DataChangeFeed(undefined as never, { perClient: 10 }, pino({ level: 'silent' }), meter);
  feed.start(bus);
  return {
    feed,
    send: (data) => handlers.message(JSON.stringify({ topic: 'data.points.changed', data })),
    drop: () => handlers.disconnected(),
  };
}

/** A principal of tenant `t1` allowed everything, for feeds used in process. */
export const ANY_PRINCIPAL: Principal = {
  tenantId: 't1',
  tenantKey: 't1',
  clientId: 'c',
  scopes: new Set(['ServiceApi']),
  permissions: new Set(['*']),
  configVersion: '1',
  dataVersion: '1',
};

/** An access token of the service's own key, for the full client, that expires in `seconds`. */
export async function shortLivedToken(app: TestApp, tenantKey: string, seconds: number): Promise<string> {
  const row = await app.handle.db.selectFrom('signing_key').selectAll().where('retired_at', 'is', null).executeTakeFirstOrThrow();
  const jwk = (typeof row.private_jwk === 'string' ? JSON.parse(row.private_jwk) : row.private_jwk) as JWK;
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ tenant: tenantKey, scope: 'ServiceApi' })
    .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: row.kid })
    .setIssuer(app.url)
    .setSubject(FULL_CLIENT.clientId)
    .setIssuedAt(now)
    .setExpirationTime(now + seconds)
    .setJti(randomUUID())
    .sign(await importJWK(jwk, 'ES256'));
}
