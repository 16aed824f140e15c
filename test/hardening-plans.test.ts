import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient, type TestApp, createTenant, pool, startApp, startPeer } from './helpers.js';
import { FakeProvider, PROVIDER_CLIENT, providerDataSource } from './fake-provider.js';

// Issue 30, F8 (P89): plans that do not depend on luck. On PostgreSQL, an aggregate right after 5,000
// subjects were written in bulk ran its subject selection as a nested-loop semi join over every value
// row of the tenant per subject (quadratic: seconds at 5,000 subjects, past the statement time-out at
// more) until autoanalyze came by. The service analyzes the tables its writes changed within about a
// second (ANALYZE_AFTER_ROWS); here autoanalyze is off for the tables, as in the minute before it runs.
// PostgreSQL only (vitest.config.ts): PGlite has no autovacuum and its own single-process planner.

const SUBJECTS = 5000;

let app: TestApp;
let provider: FakeProvider;
const peers: TestApp[] = [];

beforeAll(async () => {
  provider = await new FakeProvider().start();
  provider.pageSize = 10_000;
  app = await startApp();
  for (const table of [
    'subject',
    'subject_value',
    'subject_location',
    'data_cache',
    'data_cache_point',
    'data_cache_measure',
    'data_cache_kind',
  ]) {
    await sql`ALTER TABLE ${sql.id(table)} SET (autovacuum_enabled = false)`.execute(app.handle.db);
  }
});
afterAll(async () => {
  await Promise.all(peers.map((p) => p.close()));
  await app?.close();
  await provider?.close();
});

describe('plans that do not depend on fresh statistics (F8)', () => {
  it('an aggregate over 5,000 subjects upserted a moment before, filtered by values they all share, answers', async () => {
    const tenant = await createTenant(app, {
      clients: [
        { clientId: 'full', clientSecret: 'full-client-secret', scopes: ['ServiceApi', 'ServiceDataProviderApi'], permissions: ['*'] },
        PROVIDER_CLIENT,
      ],
      dataSources: [{ ...providerDataSource(provider), inboundClientIds: ['provider'] }],
      dataExtracts: [{ key: 'steps', name: 'Steps', dataSourceKey: 'wearables', options: {} }],
    });
    const api = await tenant.client();
    // As an integrator writes them (the contract has no batch upsert): the REST upsert, 16 at a time.
    const numbers = Array.from({ length: SUBJECTS }, (_, i) => `B-${String(i).padStart(5, '0')}`);
    await pool(numbers, 16, async (n) => {
      const r = await api.post('/api/v2/messaging/subject', {
        CustomFieldValues: [
          { Key: 'employeeNumber', Value: { String: { Value: n } } },
          { Key: 'fullName', Value: { String: { Value: `Person ${n}` } } },
          { Key: 'grade', Value: { Integer: { Value: 3 } } },
          { Key: 'email', Value: { String: { Value: 'team@example.org' } } },
        ],
      });
      if (r.status !== 201) throw new Error(`upsert ${n}: ${r.status} ${JSON.stringify(r.body)}`);
    });

    // The aggregate on a second instance whose statements time out after 0.7 s, as they do (after 30 s) in production.
    const peer = await startPeer(app, { DATABASE_STATEMENT_TIMEOUT_MS: '700' });
    peers.push(peer);
    const r = await new ApiClient(peer.url, api.token).gql(
      `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) {
        aggregates { count subjectCount } coverage { subjectCount contributingSubjectCount unavailableSubjectCount }
      } }`,
      {
        input: {
          extractKey: 'steps',
          valueItemKey: 'value',
          timeItemKey: 'day',
          interval: 'MONTH',
          from: '2026-11-01',
          to: '2026-12-01',
          customFieldValueFilter: {
            values: [
              { key: 'grade', values: ['3'] },
              { key: 'email', values: ['team@example.org'] },
            ],
            match: 'EXACT_ALL',
          },
        },
      },
    );
    expect(r.body.errors).toBeUndefined();
    expect(r.body.data.dataPointAggregates.coverage).toEqual({
      subjectCount: SUBJECTS,
      contributingSubjectCount: SUBJECTS,
      unavailableSubjectCount: 0,
    });
    expect(r.body.data.dataPointAggregates.aggregates).toEqual({ count: 3 * SUBJECTS, subjectCount: SUBJECTS });
  }, 180_000);
});
