import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type TestApp, type TestTenant, createTenant, startApp } from './helpers.js';

// Issue 10 item 7: Prometheus metrics without a token, labelled by route template; by tenant only where
// fairness between tenants is measured (issue 15: admission), never by client.

let app: TestApp;
let tenant: TestTenant;
let api: ApiClient;

beforeAll(async () => {
  app = await startApp();
  tenant = await createTenant(app);
  api = await tenant.client();
});
afterAll(async () => {
  await app?.close();
});

const scrape = async (url: string) => {
  const res = await fetch(`${url}/metrics`);
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
};

describe('GET /metrics', () => {
  it('serves the Prometheus text format without a token: requests by route template and status, GraphQL operations, the pool, the process', async () => {
    await api.get('/api/v1/structuralEntity?First=1');
    await api.get('/api/v2/subject/00000000-0000-4000-8000-000000000000');
    await api.gql('query ListThem { subjects(first: 1) { totalCount } }');
    await api.gql('query Broken { subjects(first: 5000) { totalCount } }');
    const m = await scrape(app.url);
    expect(m.status).toBe(200);
    expect(m.type).toMatch(/^text\/plain/);
    expect(m.text).toMatch(/http_requests_total\{method="GET",route="\/api\/v1\/structuralEntity",status="200"\} 1/);
    // The template, not the id: one series whatever the subject.
    expect(m.text).toMatch(/http_requests_total\{method="GET",route="\/api\/v2\/subject\/:subjectId",status="404"\} 1/);
    expect(m.text).toMatch(
      /http_request_duration_seconds_bucket\{le="0.5",method="GET",route="\/api\/v1\/structuralEntity",status="200"\} 1/,
    );
    expect(m.text).toMatch(/http_requests_total\{method="POST",route="\/graphql",status="200"\} 2/);
    expect(m.text).toMatch(/graphql_operations_total\{operation="ListThem",outcome="ok"\} 1/);
    expect(m.text).toMatch(/graphql_operations_total\{operation="Broken",outcome="error"\} 1/);
    expect(m.text).toMatch(/db_pool_connections\{state="total"\} \d+/);
    expect(m.text).toMatch(/process_cpu_user_seconds_total/);
    expect(m.text).toMatch(/nodejs_heap_size_used_bytes/);
    // P103 (no token), P52: admission per tenant; the tenant appears in no other series. No client labels.
    expect(m.text).toMatch(new RegExp(`admission_requests_total\\{tenant="${tenant.key}",outcome="admitted"\\} [1-9]`));
    const withTenant = m.text.split('\n').filter((l) => l.includes(tenant.key));
    expect(withTenant.every((l) => /^admission_\w+\{/.test(l))).toBe(true);
    expect(m.text).not.toContain('full');
  });

  it('counts every garbage collection by kind, and the time paused (P76)', async () => {
    const runs = (text: string, kind: string) =>
      Number(new RegExp(`^nodejs_gc_runs_total\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    const paused = (text: string) =>
      [...text.matchAll(/^nodejs_gc_pause_seconds_total\{kind="\w+"\} (\S+)$/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
    const before = (await scrape(app.url)).text;
    // The tests' app runs in this process: garbage made here is collected there. A scavenge every few MB.
    let keep = 0;
    for (let i = 0; i < 200_000; i++) keep += JSON.stringify({ i, text: `value ${i}`, list: [i, i + 1] }).length;
    expect(keep).toBeGreaterThan(0);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const after = (await scrape(app.url)).text;
    expect(runs(after, 'minor')).toBeGreaterThan(runs(before, 'minor'));
    expect(paused(after)).toBeGreaterThan(paused(before));
    expect(after).toMatch(/# TYPE nodejs_gc_runs_total counter/);
  });

  it('is off with METRICS=false', async () => {
    const off = await startApp({ METRICS: 'false' });
    try {
      expect((await scrape(off.url)).status).toBe(404);
    } finally {
      await off.close();
    }
  });
});
