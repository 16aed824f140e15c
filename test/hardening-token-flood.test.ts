import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addressKey } from '../src/domains/auth/index.js';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { type ApiClient, FULL_CLIENT, type TestApp, createTenant, startApp, tenantConfig } from './helpers.js';
import { Flood, type FloodStats } from './token-flood.js';

// Issue 30, F11: wrong client secrets sent to /connect/token in bulk must not lock clients out of new
// tokens nor slow other tenants down (P80: verifications bounded, P81: failures throttled, and other
// clients' failures from a shared address do not lock a client out, P82: a verified secret is not hashed again). D4: the token endpoint's errors stay RFC 6749 JSON. The flood (./token-flood.ts)
// comes through real HTTP from a worker thread, from 127.0.0.2 ("another address") or 127.0.0.1.

/**
 * What "answered promptly" means here. The bound is 1 s; `npm run bench:token-flood` measures it on
 * a core of its own (8–26 ms, P80). Here the service shares two cores with the flood and another test
 * file, so the test holds the behaviour with room for that: answered while the flood is in flight, where
 * before the change a valid client was still unanswered after 10 s (it took 60–90 s).
 */
const PROMPT_MS = 5_000;

const form = (fields: Record<string, string>) => new URLSearchParams({ grant_type: 'client_credentials', ...fields }).toString();

/** A token request timed from sending to the answer; aborted (status 0) after 10 s. */
async function timedToken(app: TestApp, tenantKey: string, clientId: string, clientSecret: string) {
  const t0 = performance.now();
  try {
    const res = await fetch(`${app.url}/connect/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: form({ tenant_key: tenantKey, client_id: clientId, client_secret: clientSecret }),
      signal: AbortSignal.timeout(10_000),
    });
    const body = (await res.json()) as { access_token?: string; error?: string };
    return { status: res.status, body, headers: res.headers, ms: performance.now() - t0 };
  } catch {
    return { status: 0, body: {}, headers: new Headers(), ms: performance.now() - t0 };
  }
}

/** p99 of `n` sequential list requests of `api` (ms). */
async function listP99(api: ApiClient, n: number): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await api.get('/api/v2/subject?PageSize=20');
    ms.push(performance.now() - t0);
    expect(r.status).toBe(200);
  }
  ms.sort((a, b) => a - b);
  return ms[Math.min(ms.length - 1, Math.ceil(ms.length * 0.99) - 1)]!;
}

/**
 * The flood was refused before hashing: nearly every answer a 429 (throttled, or this address already
 * waiting for a verification) or 503 (the queue full), each with Retry-After, and fast; the rest 401.
 */
function expectRefusedFast(stats: FloodStats) {
  const refused = (stats.byStatus['429'] ?? 0) + (stats.byStatus['503'] ?? 0);
  expect(stats.byStatus['429'] ?? 0).toBeGreaterThan(0);
  expect(refused).toBeGreaterThan(stats.answered * 0.9);
  expect(stats.retryAfter).toBe(refused);
  for (const status of Object.keys(stats.byStatus)) expect(['401', '429', '503']).toContain(status);
  // Half within 100 ms. The slowest percent waits out the server's own backlog (the first burst), which
  // depends on what else the machine runs: it is printed, not asserted.
  expect(stats.refusedP50).toBeLessThan(100);
}

const SECOND = { clientId: 'second', clientSecret: 'second-client-secret', scopes: ['ServiceApi'], permissions: ['*'] };

async function seedOtherTenant(app: TestApp): Promise<ApiClient> {
  const other = await (await createTenant(app)).client();
  for (let i = 0; i < 20; i++) {
    const r = await other.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: `E-${i}` } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${i}` } } },
      ],
    });
    expect(r.status).toBe(201);
  }
  return other;
}

describe('1,000 bad-secret token requests in flight from another address (F11)', () => {
  let app: TestApp;
  let tenantKey: string;
  let other: ApiClient;
  beforeAll(async () => {
    app = await startApp();
    tenantKey = (await createTenant(app, { clients: [FULL_CLIENT, SECOND] })).key;
    other = await seedOtherTenant(app);
  });
  afterAll(() => app?.close());

  it(
    'a valid client gets its token promptly (PROMPT_MS), floods get fast 429s with Retry-After, the other tenant keeps listing',
    { timeout: 90_000 },
    async () => {
      // The valid client had a token before (its secret verified once); SECOND never had one.
      expect((await timedToken(app, tenantKey, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret)).status).toBe(200);
      const alone = await listP99(other, 200);

      // Wrong secrets for the valid client itself, for unknown clients, for an unknown tenant.
      const bodies = Array.from({ length: 50 }, (_, i) =>
        form(
          i % 3 === 0
            ? { tenant_key: tenantKey, client_id: FULL_CLIENT.clientId, client_secret: `wrong-${i}` }
            : i % 3 === 1
              ? { tenant_key: tenantKey, client_id: `nobody-${i}`, client_secret: `wrong-${i}` }
              : { tenant_key: `no-such-tenant-${i}`, client_id: FULL_CLIENT.clientId, client_secret: `wrong-${i}` },
        ),
      );
      const flood = new Flood(app.url, '127.0.0.2', bodies);
      let stats: FloodStats | undefined;
      let during: number;
      try {
        await flood.started();
        // Today's code then has a queue of the flood's scrypts; after the change the first burst is answered.
        await new Promise((r) => setTimeout(r, 3_000));
        const known = await timedToken(app, tenantKey, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret);
        const fresh = await timedToken(app, tenantKey, SECOND.clientId, SECOND.clientSecret);
        during = await listP99(other, 200);
        console.log(
          `F11 flood from another address: known client ${Math.round(known.ms)} ms (${known.status}), first-time client ${Math.round(fresh.ms)} ms (${fresh.status}), other tenant's list p99 ${during.toFixed(1)} ms during vs ${alone.toFixed(1)} ms alone`,
        );
        expect({ status: known.status, token: typeof known.body.access_token }).toEqual({ status: 200, token: 'string' });
        expect(known.ms).toBeLessThan(PROMPT_MS);
        // Never verified before: its secret is hashed, ahead of the flood's waiting attempts (another address).
        expect({ status: fresh.status, token: typeof fresh.body.access_token }).toEqual({ status: 200, token: 'string' });
        expect(fresh.ms).toBeLessThan(PROMPT_MS);
      } finally {
        stats = await flood.stop();
      }
      // The bound is 3x its p99 alone; on this shared machine p99 over 200 requests swings 2-4x
      // between two runs alone, so the test holds the behaviour (every list answered 200, none near
      // PROMPT_MS) and prints the ratio; P80 has the figures. "Alone" is the larger of before and after.
      const after = await listP99(other, 200);
      console.log(
        `F11 other tenant's list p99 alone after the flood: ${after.toFixed(1)} ms (ratio ${(during / Math.max(alone, after)).toFixed(2)})`,
      );
      expect(during).toBeLessThan(PROMPT_MS);
      console.log(`F11 flood answers: ${JSON.stringify(stats)}`);
      expectRefusedFast(stats);
    },
  );
});

describe('bad secrets for a client from its own address (F11)', () => {
  let app: TestApp;
  let tenantKey: string;
  beforeAll(async () => {
    app = await startApp();
    tenantKey = (await createTenant(app, { clients: [FULL_CLIENT, SECOND] })).key;
  });
  afterAll(() => app?.close());

  it('throttles the failing (client, address) with a fast 429 and Retry-After, and lets the verified secret through', async () => {
    expect((await timedToken(app, tenantKey, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret)).status).toBe(200);
    const answers = [];
    for (let i = 0; i < 12; i++) answers.push(await timedToken(app, tenantKey, FULL_CLIENT.clientId, `wrong-${i}`));
    // P81: 10 failures of one client from one address are answered 401, the next are refused unhashed.
    expect(answers.map((a) => a.status)).toEqual([...Array<number>(10).fill(401), 429, 429]);
    const refused = answers.at(-1)!;
    expect(refused.body).toMatchObject({ error: 'temporarily_unavailable', error_description: expect.any(String) });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(refused.headers.get('cache-control')).toBe('no-store');
    // The holder of the secret, from the same address, is not locked out (P82: recognised without hashing).
    const ok = await timedToken(app, tenantKey, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret);
    expect(ok.status).toBe(200);
    // A success clears its (client, address) count: a holder's own mistakes do not add up to a block.
    expect((await timedToken(app, tenantKey, FULL_CLIENT.clientId, 'wrong-again')).status).toBe(401);
  });

  it(
    'with 1,000 in flight from the same address, the verified client gets its token promptly, a first-time one when it retries',
    { timeout: 90_000 },
    async () => {
      // Its secret verified before the flood (again, should this test run alone).
      expect((await timedToken(app, tenantKey, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret)).status).toBe(200);
      const bodies = Array.from({ length: 50 }, (_, i) =>
        form({ tenant_key: tenantKey, client_id: i % 2 ? FULL_CLIENT.clientId : `nobody-${i}`, client_secret: `wrong-${i}` }),
      );
      const flood = new Flood(app.url, '127.0.0.1', bodies);
      let stats: FloodStats | undefined;
      try {
        await flood.started();
        await new Promise((r) => setTimeout(r, 3_000));
        const known = await timedToken(app, tenantKey, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret);
        // Never verified, from the flooding address: it competes with the flood's ids that have not failed
        // yet (P81), so it may be told to retry; once each of those has failed once, it is verified. An
        // address throttle counting every failure blocked it with the flood, for up to 300 s.
        const t0 = performance.now();
        let fresh = await timedToken(app, tenantKey, SECOND.clientId, SECOND.clientSecret);
        const tries = [fresh.status];
        while (fresh.status === 429 && performance.now() - t0 < 20_000) {
          const retryAfter = Number(fresh.headers.get('retry-after')) * 1_000;
          await new Promise((r) => setTimeout(r, Math.min(retryAfter, 20_000 - (performance.now() - t0))));
          fresh = await timedToken(app, tenantKey, SECOND.clientId, SECOND.clientSecret);
          tries.push(fresh.status);
        }
        console.log(
          `F11 flood from the same address: known client ${Math.round(known.ms)} ms (${known.status}), first-time client ${tries.join(', ')} after ${Math.round(performance.now() - t0)} ms`,
        );
        expect(known.status).toBe(200);
        expect(known.ms).toBeLessThan(PROMPT_MS);
        expect({ status: fresh.status, token: typeof fresh.body.access_token }).toEqual({ status: 200, token: 'string' });
      } finally {
        stats = await flood.stop();
      }
      expectRefusedFast(stats);
    },
  );
});

describe('clients behind one address, as behind a NAT (F11, P81)', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(() => app?.close());

  it("several clients retrying wrong secrets past 50 failures do not lock out another tenant's first-time client there", async () => {
    const misconfigured = Array.from({ length: 6 }, (_, i) => ({
      ...FULL_CLIENT,
      clientId: `service-${i}`,
      clientSecret: `right-secret-${i}`,
    }));
    const neighbours = (await createTenant(app, { clients: misconfigured })).key;
    const other = (await createTenant(app)).key;
    const statuses: number[][] = [];
    for (const c of misconfigured) {
      const answers = [];
      for (let i = 0; i < 12; i++) answers.push((await timedToken(app, neighbours, c.clientId, `wrong-${i}`)).status);
      statuses.push(answers);
    }
    // 60 failures from 127.0.0.1, past the 50 that used to block the address (for 300 s by now); this
    // instance never verified the other tenant's secret, so nothing but hashing it can let it in.
    const fresh = await timedToken(app, other, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret);
    expect({ status: fresh.status, token: typeof fresh.body.access_token }).toEqual({ status: 200, token: 'string' });
    expect(fresh.ms).toBeLessThan(PROMPT_MS);
    // Each misconfigured client is throttled on its own (client, address) count.
    for (const answers of statuses) expect(answers).toEqual([...Array<number>(10).fill(401), 429, 429]);
  });

  it('a client spraying wrong secrets over many client ids from one address is refused before hashing', async () => {
    const tenantKey = (await createTenant(app)).key;
    const answers = [];
    for (let i = 0; i < 34; i++) answers.push(await timedToken(app, tenantKey, `sprayed-${i}`, `wrong-${i}`));
    // 20 distinct failing clients block the address (the 6 of the test before count too, when run in
    // order); clients that never failed there still get verified one at a time (the slow lane), until 10
    // of those fail as well; then everything from the address is refused at once, with Retry-After.
    const firstRefused = answers.findIndex((a) => a.status !== 401);
    expect(firstRefused).toBeGreaterThanOrEqual(20);
    expect(firstRefused).toBeLessThanOrEqual(30);
    for (const a of answers.slice(firstRefused)) {
      expect({ status: a.status, error: a.body.error }).toEqual({ status: 429, error: 'temporarily_unavailable' });
      expect(Number(a.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(a.ms).toBeLessThan(PROMPT_MS);
    }
  });

  it('counts an IPv6 address by its /64 and an IPv4-mapped IPv6 address as IPv4', () => {
    // Loopback has one IPv6 address (::1), so this part is checked on the key itself.
    expect(addressKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd')).toBe(addressKey('2001:db8:1:2::5'));
    expect(addressKey('2001:db8:1:2::5')).not.toBe(addressKey('2001:db8:1:3::5'));
    expect(addressKey('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(addressKey('192.0.2.7')).toBe('192.0.2.7');
  });
});

describe('a rotated client secret (F11, P82)', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(() => app?.close());

  it('the old secret, verified before the rotation, no longer gets a token; the new one does', async () => {
    const t = tenantConfig();
    const apply = (clientSecret: string) =>
      applyTenantFile(
        app.handle.db,
        new SecretBox(app.handle.db, undefined),
        {
          tenants: [{ ...t, clients: [{ ...FULL_CLIENT, clientSecret }] }],
        },
        { listen: app.handle.listen },
      );
    await apply('first-secret-value');
    expect((await timedToken(app, t.key, FULL_CLIENT.clientId, 'first-secret-value')).status).toBe(200);
    expect((await timedToken(app, t.key, FULL_CLIENT.clientId, 'first-secret-value')).status).toBe(200);
    await apply('second-secret-value');
    const old = await timedToken(app, t.key, FULL_CLIENT.clientId, 'first-secret-value');
    expect({ status: old.status, error: old.body.error }).toEqual({ status: 401, error: 'invalid_client' });
    expect((await timedToken(app, t.key, FULL_CLIENT.clientId, 'second-secret-value')).status).toBe(200);
    // Rotated back: the second secret, recognised from the cache until now, no longer counts.
    await apply('first-secret-value');
    expect((await timedToken(app, t.key, FULL_CLIENT.clientId, 'second-secret-value')).status).toBe(401);
    expect((await timedToken(app, t.key, FULL_CLIENT.clientId, 'first-secret-value')).status).toBe(200);
  });
});
