import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LIVE_AGGREGATE_QUIET_MS } from '../src/domains/data/aggregates/aggregate-subscription.js';
import { PARTIAL_ANSWER_EVERY_MS } from '../src/domains/data/aggregates/partial-answers.js';
import { type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually, providerDataSource } from './fake-provider.js';
import { Subscriber } from './live-updates.js';

// Partial answers (P131): while a cold question's sets arrive from the provider, dataPointAggregatesChanged
// sends answers over the subjects fetched so far (coverage.pendingSubjectCount > 0), then the full answer,
// which the query gives too; a subscriber joining meanwhile gets the latest partial answer at once; the
// query waits for the full answer, and no partial answer is remembered as one (P126) nor follows the full one.
// The first comes as soon as a chunk's points arrive, before they are stored (P132). A full answer the
// query refuses ends the stream with the refusal; a change heard during the fill waits for the first
// answer's computation, so a joiner still gets the partial answer.

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
const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';

type Answer = { aggregates: { count: number }; coverage: Record<string, number> };
type AnswerSubscriber = Subscriber<{ dataPointAggregatesChanged: Answer | null }>;
const answersOf = (s: AnswerSubscriber) => s.results.map((r) => r.data?.dataPointAggregatesChanged).filter((x): x is Answer => !!x);

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;
const subscribers: AnswerSubscriber[] = [];

async function subscribe(asked: Record<string, unknown> = input): Promise<AnswerSubscriber> {
  const s = new Subscriber<{ dataPointAggregatesChanged: Answer | null }>(app.url, await t.tenant.token(), SUBSCRIPTION, { input: asked });
  subscribers.push(s);
  await s.ready;
  return s;
}

beforeAll(async () => {
  // One chunk of BATCH subjects at a time: the test holds the provider's answers after the first.
  app = await startApp({ PROVIDER_BATCH_SIZE: String(BATCH), PROVIDER_CONCURRENCY: '1', PROVIDER_BACKOFF_MS: '1' });
  provider = await new FakeProvider().start();
  provider.pageSize = 100;
  // Three cold extracts of one source: one per test.
  const source = providerDataSource(provider).key;
  t = await createDataTenant(app, provider, SUBJECTS, {
    dataExtracts: ['steps', 'hr', 'sleep'].map((metric) => ({ key: metric, name: metric, dataSourceKey: source, options: { metric } })),
  });
});

/** Holds the provider's answers after the first chunk's until the returned function is called. */
function gateAfterFirstChunk(): () => void {
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  provider.faults = [{}];
  provider.always = { until: gate };
  return () => {
    open();
    provider.always = undefined;
  };
}
afterAll(async () => {
  for (const s of subscribers) s.close();
  await app?.close();
  await provider?.close();
});

describe('partial answers of a cold dataPointAggregatesChanged (P131)', () => {
  it('sends partial answers while the sets arrive, the latest to a joiner, then the full answer the query gives', async () => {
    // The first chunk is answered at once, the others once the gate opens.
    const open = gateAfterFirstChunk();
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
    let answered = false;
    const asked = t.api.gql(QUERY, { input }).finally(() => (answered = true));
    await sleep(200);
    expect(answered).toBe(false);

    open();
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
    // A partial answer that started before the full one would be sent by now: none is.
    await sleep(PARTIAL_ANSWER_EVERY_MS + 500);
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

  it('ends the stream with the refusal when the query refuses the full answer after partial answers', async () => {
    // Each subject's `label` is its identifier: the first chunk has BATCH groups, all the subjects more than maxGroups.
    provider.data = (identifier) =>
      [1, 2, 3].map((n) => ({
        Id: `${identifier}-${n}`,
        SubjectIdentifier: identifier,
        DataPointItems: [
          { Key: 'value', Value: { DataType: 'Integer', Value: n } },
          { Key: 'label', Value: { DataType: 'String', Value: identifier } },
          { Key: 'day', Value: { DataType: 'Date', Value: `2026-11-0${n}` } },
        ],
      }));
    const open = gateAfterFirstChunk();
    try {
      const sub = await subscribe({ ...input, extractKey: 'hr', groupBy: 'ITEM', groupByItemKey: 'label', maxGroups: BATCH });
      await eventually(() => answersOf(sub).length >= 1);
      expect(answersOf(sub)[0]!.coverage['pendingSubjectCount']).toBe(SUBJECTS - BATCH);
      open();
      await eventually(() => sub.ended !== undefined, 10_000);
      // The query's refusal (P59), as the stream's last event; no full answer before it.
      expect(sub.errors.map((e) => e.extensions?.code)).toEqual(['BAD_REQUEST']);
      expect(sub.errors[0].message).toMatch(/more groups than maxGroups/);
      expect(answersOf(sub).every((a) => a.coverage['pendingSubjectCount']! > 0)).toBe(true);
      expect(sub.ended).toBe('complete');
    } finally {
      open();
      provider.data = undefined;
    }
  });

  it('keeps the partial answers for a joiner when a change is heard during the fill', async () => {
    const open = gateAfterFirstChunk();
    try {
      const asked = { ...input, extractKey: 'sleep' };
      const sub = await subscribe(asked);
      await eventually(() => answersOf(sub).length >= 1);
      // A change under the question: heard at once, computed only after the first answer's computation.
      const res = await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: { metric: 'sleep' } });
      expect(res.status).toBe(200);
      await sleep(LIVE_AGGREGATE_QUIET_MS + 300);
      const joiner = await subscribe(asked);
      await eventually(() => answersOf(joiner).length >= 1);
      expect(answersOf(joiner)[0]!.coverage['pendingSubjectCount']).toBeGreaterThan(0);
      open();
      const full = (s: AnswerSubscriber) => answersOf(s).some((a) => a.coverage['pendingSubjectCount'] === 0);
      await eventually(() => full(sub) && full(joiner), 10_000);
      expect([...sub.errors, ...joiner.errors]).toEqual([]);
    } finally {
      open();
    }
  });

  // steps is warm (the first test): change reports flag some subjects' sets, whose re-fetch waits at the gate.
  async function afterFlagging(identifiers: string[], to: string): Promise<number[]> {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    provider.always = { until: gate };
    try {
      for (const SubjectIdentifier of identifiers) {
        const res = await t.provider.post(CHANGE, { SubjectIdentifier, DataExtractsOptionsValuesFilter: { metric: 'steps' } });
        expect(res.status).toBe(200);
      }
      // Not awaited: the stream opens with its first answer, which waits for the gate.
      const sub = new Subscriber<{ dataPointAggregatesChanged: Answer | null }>(app.url, await t.tenant.token(), SUBSCRIPTION, {
        input: { ...input, to },
      });
      subscribers.push(sub);
      // P132: what was fresh is not answered before the provider's first answer.
      await sleep(300);
      expect(answersOf(sub)).toEqual([]);
      open();
      await eventually(() => answersOf(sub).some((a) => a.coverage['pendingSubjectCount'] === 0), 10_000);
      await sleep(PARTIAL_ANSWER_EVERY_MS + 500);
      expect(sub.errors).toEqual([]);
      return answersOf(sub).map((a) => a.coverage['pendingSubjectCount']!);
    } finally {
      open();
      provider.always = undefined;
    }
  }

  it('sends only the full answer when at most one provider call is missing', async () => {
    expect(await afterFlagging(['E-01'], '2026-11-05')).toEqual([0]);
  });

  it('sends no partial answer before the provider answered when more is missing', async () => {
    const pending = await afterFlagging(['E-05', 'E-06', 'E-07', 'E-08'], '2026-11-06');
    expect(pending.at(-1)).toBe(0);
    for (const p of pending.slice(0, -1)) expect(p).toBeGreaterThan(BATCH);
  });
});
