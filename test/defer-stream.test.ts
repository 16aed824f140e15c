import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant } from './fake-provider.js';

// Issue 17, incremental delivery: @defer and @stream (Yoga's defer-stream plugin), so that a page of
// subjects renders before slow provider data. graphql-jit implements neither: documents using them are
// never compiled (graphql-plugins.ts compiledRepeatedDocuments), however often they are sent (docs/decisions.md P56).

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;

beforeAll(async () => {
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  app = await startApp({ PROVIDER_BACKOFF_MS: '1', PROVIDER_RETRIES: '0' });
  t = await createDataTenant(app, provider, 3);
});
afterAll(async () => {
  await app?.close();
  await provider?.close();
});

const DEFERRED = `query Dashboard($extract: String!) {
  subjects(first: 3) {
    totalCount
    edges { node { externalId ... @defer(label: "points") { dataPoints(extractKey: $extract) { totalCount } } } }
  }
}`;

interface Part {
  at: number;
  body: any;
}

/** POSTs a query asking for multipart/mixed and reads its parts as they arrive, each with its arrival time. */
async function multipart(query: string, variables: Record<string, unknown>): Promise<{ status: number; type: string; parts: Part[] }> {
  const res = await fetch(`${app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'multipart/mixed', authorization: `Bearer ${t.api.token}` },
    body: JSON.stringify({ query, variables }),
  });
  const parts: Part[] = [];
  let buffer = Buffer.alloc(0);
  const reader = res.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer = Buffer.concat([buffer, Buffer.from(value)]);
    for (;;) {
      const header = /Content-Length: (\d+)\r\n\r\n/.exec(buffer.toString('latin1'));
      if (!header) break;
      const start = header.index + header[0].length;
      const length = Number(header[1]);
      if (buffer.length < start + length) break;
      parts.push({ at: Date.now(), body: JSON.parse(buffer.subarray(start, start + length).toString('utf8')) });
      buffer = buffer.subarray(start + length);
    }
  }
  return { status: res.status, type: res.headers.get('content-type') ?? '', parts };
}

describe('@defer', () => {
  it('sends the page of subjects before a provider that answers after 1 s, then the deferred data points', async () => {
    provider.faults = [{ delayMs: 1_000 }];
    const sent = Date.now();
    const { status, type, parts } = await multipart(DEFERRED, { extract: 'steps' });
    expect(status).toBe(200);
    expect(type).toMatch(/^multipart\/mixed/);
    const [first, ...rest] = parts;
    // The subjects, without their data points, before the provider has answered.
    expect(first!.body.data.subjects.edges.map((e: any) => e.node)).toEqual([
      { externalId: 'E-01' },
      { externalId: 'E-02' },
      { externalId: 'E-03' },
    ]);
    expect(first!.body.hasNext).toBe(true);
    expect(first!.at - sent).toBeLessThan(1_000);
    // Then the data points, once it has.
    const deferred = rest.flatMap((p) => p.body.incremental ?? []);
    expect(deferred).toHaveLength(3);
    for (const d of deferred) expect(d).toMatchObject({ label: 'points', data: { dataPoints: { totalCount: 3 } } });
    expect(rest.at(-1)!.at - sent).toBeGreaterThanOrEqual(1_000);
    expect(rest.at(-1)!.body.hasNext).toBe(false);
  });

  it('is never compiled by graphql-jit: the same document stays incremental however often it is sent', async () => {
    for (let i = 0; i < 3; i++) {
      const { parts } = await multipart(DEFERRED, { extract: 'hr' });
      expect(parts.length, `round ${i}`).toBeGreaterThan(1);
      expect(parts[0]!.body.data.subjects.edges[0].node).toEqual({ externalId: 'E-01' });
      expect(parts.flatMap((p) => p.body.incremental ?? [])).toHaveLength(3);
    }
  });

  it("renders a deferred part's error as every GraphQL error (D4: code and status)", async () => {
    // An extract nothing is cached for, whose provider fails: the deferred part carries the error.
    const created = await t.api.gql(
      `mutation { createDataExtract(input: { key: "gone", name: "Gone", dataSourceKey: "wearables", options: {} }) { dataExtract { key } } }`,
    );
    expect(created.body.errors).toBeUndefined();
    provider.always = { status: 500 };
    try {
      const { parts } = await multipart(DEFERRED, { extract: 'gone' });
      const errors = parts.flatMap((p) => (p.body.incremental ?? []).flatMap((i: any) => i.errors ?? []));
      expect(errors.length).toBeGreaterThan(0);
      for (const e of errors) {
        expect(e.extensions).toMatchObject({ code: 'PROVIDER_UNAVAILABLE', status: 502 });
        expect(e.extensions.http).toBeUndefined();
      }
    } finally {
      provider.always = undefined;
      provider.faults = [];
    }
  });
});

describe('@stream', () => {
  it('sends the first items of a list at once and the rest after', async () => {
    const { parts } = await multipart(`query { subjects(first: 3) { edges @stream(initialCount: 1) { node { externalId } } } }`, {});
    expect(parts[0]!.body.data.subjects.edges).toEqual([{ node: { externalId: 'E-01' } }]);
    const later = parts.slice(1).flatMap((p) => (p.body.incremental ?? []).flatMap((i: any) => i.items ?? []));
    expect(later).toEqual([{ node: { externalId: 'E-02' } }, { node: { externalId: 'E-03' } }]);
  });

  it('answers a plain JSON client in one response when it cannot take parts', async () => {
    const r = await t.api.gql(`query { subjects(first: 2) { edges { node { externalId } } } }`);
    expect(r.status).toBe(200);
    expect(r.body.data.subjects.edges).toHaveLength(2);
  });
});
