import { sql } from 'kysely';
import pino from 'pino';
import { EventBus, defineTopic, publish } from '../src/db/event-bus.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import {
  ApiClient,
  FULL_CLIENT,
  StatementCounter,
  type TestApp,
  createTenant,
  expectProblem,
  startApp,
  startPeer,
  tenantConfig,
} from './helpers.js';

// Issue 35, P161: each instance caches the clients of verified tokens; a tenant apply announces its change through
// the event bus in its transaction and returns once it was delivered, so P8 still holds on every instance.
const counter = new StatementCounter();
let app: TestApp;
let peer: TestApp;

beforeAll(async () => {
  app = await startApp({ MAIL_POLL_MS: '3600000' }, { plugins: [counter] });
  peer = await startPeer(app);
});
afterAll(async () => {
  await peer?.close();
  await app?.close();
});

const apply = (doc: unknown) => applyTenantFile(app.handle.db, new SecretBox(app.handle.db, undefined), doc, { listen: app.handle.listen });

describe('cached principals (issue 35)', () => {
  it('a permission revoked or granted by a tenant apply holds on the next request on every instance (P8)', async () => {
    const cfg = tenantConfig();
    await apply({ tenants: [cfg] });
    const token = await (await createTenant(app, { key: cfg.key })).token();
    const here = new ApiClient(app.url, token);
    const there = new ApiClient(peer.url, token);
    const lister = { ...FULL_CLIENT, permissions: ['List:StructuralEntity'] };
    for (let round = 0; round < 5; round++) {
      // Both instances hold the client now.
      expect((await here.get('/api/v2/subject')).status).toBe(200);
      expect((await there.get('/api/v2/subject')).status).toBe(200);
      await apply({ tenants: [{ ...cfg, clients: [lister] }] });
      expectProblem(await there.get('/api/v2/subject'), 403);
      expectProblem(await here.get('/api/v2/subject'), 403);
      expect((await there.gql('{ subjects { totalCount } }')).body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
      await apply({ tenants: [cfg] });
    }
  });

  it('a scope taken from the client holds on the next request on every instance (P8)', async () => {
    const cfg = tenantConfig();
    await apply({ tenants: [cfg] });
    const token = await (await createTenant(app, { key: cfg.key })).token();
    const there = new ApiClient(peer.url, token);
    expect((await there.get('/api/v1/structuralEntity')).status).toBe(200);
    await apply({ tenants: [{ ...cfg, clients: [{ ...FULL_CLIENT, scopes: ['ServiceDataProviderApi'] }] }] });
    expectProblem(await there.get('/api/v1/structuralEntity'), 403);
  });

  it('an event the bus cannot read empties the cache: the next request reads its client again', async () => {
    const api = await (await createTenant(app)).client();
    const statements = async () => {
      await api.get('/healthz');
      const before = counter.count;
      expect((await api.get('/api/v1/structuralEntity?First=1')).status).toBe(200);
      return counter.count - before;
    };
    await statements();
    const warm = await statements();
    await sql`SELECT pg_notify('ssdi_events', 'not an event')`.execute(app.handle.db);
    // Delivered to the instance's listener after the commit; the next request reads the client once more.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await statements()).toBe(warm + 1);
    expect(await statements()).toBe(warm);
  });

  // What every request waits for before it reads a cache the bus keeps (P161, D10): on PostgreSQL a round
  // trip on the LISTEN connection, answered after the notifications pending for it; in-process on PGlite.
  it("the event bus's sync resolves only once every event committed before it reached the subscribers", async () => {
    const bus = await EventBus.open(app.handle.listen, pino({ level: 'silent' }));
    try {
      const topic = defineTopic<number>('test.sync', (d) => d as number);
      const heard: number[] = [];
      bus.subscribe(topic, (n) => heard.push(n));
      for (let i = 0; i < 50; i++) {
        await publish(app.handle.db, topic, i);
        // Several callers at once share round trips; each still sees the event.
        await Promise.all([bus.sync(), bus.sync(), bus.sync()]);
        expect(heard.at(-1), `event ${i}`).toBe(i);
      }
    } finally {
      await bus.close();
    }
  });
});
