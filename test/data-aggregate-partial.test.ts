import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually } from './fake-provider.js';
import { Subscriber } from './live-updates.js';

// Partial answers (P131): while a cold question's sets arrive from the provider, dataPointAggregatesChanged
// sends answers over the subjects fetched so far (coverage.pendingSubjectCount > 0), then the full answer,
// which the query gives too; a subscriber joining meanwhile gets the latest partial answer at once; the
// query waits for the full answer, and no partial answer is remembered as one (P126) nor follows the full one.
// The first comes as soon as a chunk's points arrive, before they are stored (P132).

const BATCH = 2;
const SUBJECTS = 8;
/** The fake provider's points: three a subject, on 2026-11-01 to 03, values 5, 40 and 300. */
const POINTS = 3;

const SELECTION = `aggregates { count subjectCount sumText }
  buckets { start aggregates { count sumText } }
  coverage { subjectCount contributingSubjectCount pendingSubjectCount unavailableSubjectCount }`;
const SUBSCRIPTION = `subscription($input: DataPointAggregatesInput!) { dataPointAggregatesChanged(input: $input) { ${SELECTION} } }`;
const QUERY = `query($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { ${SELECTION} } }`;
const input = { extractKey: 'steps', valueItemKey: 'value', timeItemKey: 'day', interval: 'DAY', from: '2026-11-01', to: '2026-11-04' };

type Answer = { aggregates: { count: number }; coverage: Record<string, number> };
type AnswerSubscriber = Subscriber<{ dataPointAggregatesChanged: Answer | null }>;
const answersOf = (s: AnswerSubscriber) => s.results.map((r) => r.data?.dataPointAggregatesChanged).filter((x): x is Answer => !!x);

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;
const subscribers: AnswerSubscriber[] = [];

async function subscribe(): Promise<AnswerSubscriber> {
  const s = new Subscriber<{ dataPointAggregatesChanged: Answer | null }>(app.url, await t.tenant.token(), SUBSCRIPTION, { input });
  subscribers.push(s);
  await s.ready;
  return s;
}

beforeAll(async () => {
  // One chunk of BATCH subjects at a time: the test holds the provider's answers after the first.
  app = await startApp({ PROVIDER_BATCH_SIZE: String(BATCH), PROVIDER_CONCURRENCY: '1', PROVIDER_BACKOFF_MS: '1' });
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  t = await createDataTenant(app, provider, SUBJECTS);
});
afterAll(async () => {
  for (const s of subscribers) s.close();
  await app?.close();
  await provider?.close();
});

describe('partial answers of a cold dataPointAggregatesChanged (P131)', () => {
  it('sends partial answers while the sets arrive, the latest to a joiner, then the full answer the query gives', async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    // The first chunk is answered at once, the others once the gate opens.
    provider.faults = [{}];
    provider.always = { until: gate };
    const sub = await subscribe();
    await eventually(() => answersOf(sub).length >= 1);
    const [partial] = answersOf(sub);
    expect(partial!.coverage).toEqual({
      subjectCount: SUBJECTS,
      contributingSubjectCount: BATCH,
      pendingSubjectCount: SUBJECTS - BATCH,
      unavailableSubjectCount: 0,
    });
    expect(partial!.aggregates).toMatchObject({ count: BATCH * POINTS, subjectCount: BATCH, sumText: String(BATCH * 345) });
    // The second chunk's call waits at the gate.
    await eventually(() => provider.fetches('steps').length === 2);

    // A joiner during the fill: the latest partial answer at once; the query meanwhile waits for the full one.
    const joiner = await subscribe();
    await eventually(() => answersOf(joiner).length >= 1);
    expect(answersOf(joiner)[0]).toEqual(answersOf(sub).at(-1));
    expect(answersOf(joiner)[0]!.coverage['pendingSubjectCount']).toBeGreaterThan(0);
    const asked = t.api.gql(QUERY, { input });

    open();
    provider.always = undefined;
    const full = (s: AnswerSubscriber) => answersOf(s).some((a) => a.coverage['pendingSubjectCount'] === 0);
    await eventually(() => full(sub) && full(joiner), 10_000);
    const q = await asked;
    expect(q.body.errors, JSON.stringify(q.body.errors)).toBeUndefined();
    const answer = q.body.data.dataPointAggregates as Answer;
    expect(answer.coverage).toEqual({
      subjectCount: SUBJECTS,
      contributingSubjectCount: SUBJECTS,
      pendingSubjectCount: 0,
      unavailableSubjectCount: 0,
    });
    expect(answer.aggregates).toMatchObject({ count: SUBJECTS * POINTS, subjectCount: SUBJECTS, sumText: String(SUBJECTS * 345) });
    for (const s of [sub, joiner]) {
      const answers = answersOf(s);
      // Partial answers only before the full one, each covering at least what the one before did.
      expect(answers.at(-1)).toEqual(answer);
      const partials = answers.slice(0, -1);
      expect(partials.length).toBeGreaterThanOrEqual(1);
      for (const [i, p] of partials.entries()) {
        expect(p.coverage['pendingSubjectCount']).toBeGreaterThan(0);
        expect(p.coverage['contributingSubjectCount']).toBeLessThan(SUBJECTS);
        expect(p.coverage['contributingSubjectCount']! + p.coverage['pendingSubjectCount']!).toBe(SUBJECTS);
        if (i > 0) expect(p.coverage['pendingSubjectCount']).toBeLessThanOrEqual(partials[i - 1]!.coverage['pendingSubjectCount']!);
      }
      expect(s.errors).toEqual([]);
    }
    // Each set was fetched once: the query shared the subscription's calls.
    expect(provider.fetches('steps')).toHaveLength(SUBJECTS / BATCH);

    // Asked again, warm: the full answer at once, remembered as it was (P126), no partial answer.
    const again = await t.api.gql(QUERY, { input });
    expect(again.body.data.dataPointAggregates).toEqual(answer);
    const late = await subscribe();
    await eventually(() => answersOf(late).length >= 1);
    expect(answersOf(late)).toEqual([answer]);
  });
});
