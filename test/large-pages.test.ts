import fc from 'fast-check';
import type { KyselyPlugin } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SLICE_NODES, UNSLICED_NODES } from '../src/graphql/slices.js';
import { slicedJson } from '../src/http/sliced-json.js';
import { type ApiClient, StatementCounter, type TestApp, createTenant, startApp } from './helpers.js';

// P65 (issue 15, fairness): a large page is executed and serialised a slice per turn of the event loop,
// so the other requests of the instance are served in between; the answer is the same as unsliced.

const SUBJECTS = 600;

/** Calls `onRows` when a statement returns at least `min` rows: the moment a large page's rows are read. */
class LargeResultProbe implements KyselyPlugin {
  onRows: (() => void) | undefined;
  constructor(private readonly min: number) {}
  transformQuery(args: Parameters<KyselyPlugin['transformQuery']>[0]) {
    return args.node;
  }
  async transformResult(args: Parameters<KyselyPlugin['transformResult']>[0]) {
    if (args.result.rows.length >= this.min) this.onRows?.();
    return args.result;
  }
}

const probe = new LargeResultProbe(SUBJECTS);
const counter = new StatementCounter();
let app: TestApp;
let api: ApiClient;

const PAGE = `query($first: Int, $after: String) {
  subjects(first: $first, after: $after) {
    pageInfo { hasNextPage endCursor }
    edges { cursor node { subjectId externalId customFieldValues { field { key name type } values { dataType valueText } } } }
  }
}`;

beforeAll(async () => {
  app = await startApp({ MAIL_POLL_MS: '3600000' }, { plugins: [probe, counter] });
  api = await (await createTenant(app)).client();
  for (let chunk = 0; chunk < SUBJECTS; chunk += 25) {
    const created = await Promise.all(
      Array.from({ length: 25 }, (_, j) =>
        api.post('/api/v2/messaging/subject', {
          CustomFieldValues: [
            { Key: 'employeeNumber', Value: { String: { Value: `L${String(chunk + j).padStart(4, '0')}` } } },
            { Key: 'fullName', Value: { String: { Value: `Large Page ${chunk + j}` } } },
          ],
        }),
      ),
    );
    expect(created.map((r) => r.status)).toEqual(created.map(() => 201));
  }
}, 120_000);
afterAll(() => app?.close());

/** Counts turns of the event loop (one per check phase) until `until` settles. */
async function turnsDuring<T>(start: (mark: () => void) => Promise<T>): Promise<{ result: T; turns: number }> {
  let turns = 0;
  let counting = false;
  let done = false;
  const tick = () => {
    if (counting) turns++;
    if (!done) setImmediate(tick);
  };
  setImmediate(tick);
  try {
    const result = await start(() => (counting = true));
    return { result, turns };
  } finally {
    done = true;
  }
}

describe('large pages (P65)', () => {
  it('answers a page of 600 subjects over GraphQL exactly as six pages of 100', async () => {
    const whole = await api.gql(PAGE, { first: SUBJECTS });
    expect(whole.status).toBe(200);
    expect(whole.body.errors).toBeUndefined();
    const pieces: unknown[] = [];
    let after: string | null = null;
    do {
      const page: { body: { data?: any } } = await api.gql(PAGE, { first: 100, after });
      pieces.push(...page.body.data.subjects.edges);
      after = page.body.data.subjects.pageInfo.hasNextPage ? page.body.data.subjects.pageInfo.endCursor : null;
    } while (after);
    expect(pieces).toHaveLength(SUBJECTS);
    expect(whole.body.data.subjects.edges).toEqual(pieces);
    expect(whole.body.data.subjects.edges[599].node.customFieldValues.map((v: any) => v.values[0].valueText)).toEqual([
      'L0599',
      'Large Page 599',
    ]);
  });

  it('answers a REST list of 600 subjects exactly as six pages of 100', async () => {
    const whole = await api.get(`/api/v2/subject?First=${SUBJECTS}`);
    expect(whole.status).toBe(200);
    const pieces: unknown[] = [];
    let after: string | null = null;
    do {
      const page: { body: any } = await api.get(`/api/v2/subject?First=100${after ? `&After=${encodeURIComponent(after)}` : ''}`);
      pieces.push(...page.body.Edges);
      after = page.body.PageInfo.HasNextPage ? page.body.PageInfo.EndCursor : null;
    } while (after);
    expect(whole.body.Edges).toHaveLength(SUBJECTS);
    expect(whole.body.Edges).toEqual(pieces);
    expect(whole.body.PageInfo.TotalCount).toBe(SUBJECTS);
  });

  it('lets the event loop turn while a large page is produced: a turn at least for each slice of held-back nodes', async () => {
    // From the moment the page's rows are read to the answer: at least one turn for each SLICE_NODES
    // nodes past the first UNSLICED_NODES. Unsliced, the whole page would be built and serialised in one turn.
    for (const [name, send] of [
      ['GraphQL', () => api.gql(PAGE, { first: SUBJECTS })],
      ['REST', () => api.get(`/api/v2/subject?First=${SUBJECTS}`)],
    ] as const) {
      const { result, turns } = await turnsDuring(async (mark) => {
        probe.onRows = mark;
        try {
          return await send();
        } finally {
          probe.onRows = undefined;
        }
      });
      expect(result.status, name).toBe(200);
      expect(turns, name).toBeGreaterThanOrEqual(Math.ceil((SUBJECTS - UNSLICED_NODES) / SLICE_NODES));
    }
  });

  it('completes a large page 40 nodes per turn past its first 100: one statement for the locations of each (P73)', async () => {
    // The locations loader batches what a turn asks for: the first 100 subjects in one statement, then
    // one per slice. The same query for 100 subjects runs none of the held-back ones.
    const LOCATIONS = `query($first: Int) { subjects(first: $first) { edges { node { subjectId structuralEntities { edges { node { key } } } } } } }`;
    const statementsFor = async (first: number) => {
      await api.get('/healthz'); // settle anything in flight
      const before = counter.count;
      const res = await api.gql(LOCATIONS, { first });
      expect(res.status).toBe(200);
      expect(res.body.errors).toBeUndefined();
      expect(res.body.data.subjects.edges).toHaveLength(first);
      return counter.count - before;
    };
    const hundred = await statementsFor(100);
    const whole = await statementsFor(SUBJECTS);
    // 500 held back, 40 per turn: 13 more statements (100 per turn, as before P73, made 5).
    expect(whole - hundred).toBe(13);
  });
});

describe('slicedJson (P65)', () => {
  it('writes exactly what JSON.stringify writes', async () => {
    const value = fc.letrec((tie) => ({
      any: fc.oneof(
        { depthSize: 'small' },
        fc.constantFrom(null, undefined, true, false, 0, -1.5, Number.NaN, Infinity),
        fc.string(),
        fc.date({ noInvalidDate: true }),
        fc.array(tie('any'), { maxLength: 40 }),
        fc.dictionary(fc.string(), tie('any'), { maxKeys: 6 }),
        fc.func(fc.integer()),
      ),
    })).any;
    await fc.assert(
      fc.asyncProperty(value, async (v) => {
        expect(await slicedJson(v)).toBe(JSON.stringify(v) ?? '');
      }),
      { numRuns: 300 },
    );
  });

  it('writes a large result over several turns of the event loop', async () => {
    const edges = Array.from({ length: 100_000 }, (_, i) => ({
      node: { id: `n${i}`, values: Array.from({ length: 5 }, (_, k) => `v${k}`) },
    }));
    const { result, turns } = await turnsDuring(async (mark) => {
      mark();
      return slicedJson({ data: { subjects: { edges } } });
    });
    expect(result).toBe(JSON.stringify({ data: { subjects: { edges } } }));
    expect(turns).toBeGreaterThan(1);
  });
});
