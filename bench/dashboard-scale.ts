/**
 * The dashboards bench at real scale (issue 32, build point 7): a dataset of daily points (300k: 5,000
 * subjects × 60 days, or with BENCH_DASHBOARDS_DATASET=3.65m 10,000 × 365) filled through the service's
 * own write path (its aggregates fetch the sets from the reference provider and store them), then
 * warm new questions (zone × interval × grouping × percentiles, each one the answer cache has not seen)
 * and one question repeated, each new question also run by DuckDB on one core on the same rows
 * (duckdb-reference.ts) and checked against it. The cold fill of the 300k dataset with a 20 ms provider
 * is the cold measurement. See bench/README.md, "Dashboards".
 */
import { rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { sql } from 'kysely';
import type { Db } from '../src/db/tables.js';
import {
  COLD_TARGET_MS,
  DUCKDB_RATIO_TARGET,
  FIRST_PARTIAL_TARGET_MS,
  type Dataset,
  type Question,
  REPEATED_TARGET_MS,
  questionInput,
  questionQuery,
  questions,
  rangeOf,
} from './dashboard-questions.js';
import { type ServiceAnswer, differences, exportPoints, openReference } from './duckdb-reference.js';
import type { Target } from './report.js';
import { LEVELS, entityKey } from './tenant-data.js';

const CREATE_EXTRACT = `mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key } } }`;
/** Subjects' fills in flight at once when the dataset is filled by division (3.65 M). */
const FILL_IN_FLIGHT = 2;
/** DuckDB's runs per question (after one unmeasured run). */
const REFERENCE_RUNS = 3;

export interface QuestionResult {
  id: string;
  /** Points the answer counted over the whole range. */
  points: number;
  serviceMs: number;
  /** DuckDB's median of its runs. */
  duckdbMs: number;
  /** Where the two answers differ (count, subjects, exact sum); empty when they agree. */
  differences: string[];
}

export interface Stat {
  p50Ms: number;
  p95Ms: number;
}

export interface ScaleResult {
  dataset: Dataset;
  extractKey: string;
  points: number;
  /** Filling the dataset through the service (300k: one cold aggregate; 3.65 M: by division, FILL_IN_FLIGHT at once). */
  fill: { how: string; seconds: number; providerCalls: number; attempts: number };
  /** The 300k dataset's fill: one aggregate over 5,000 subjects, nothing cached, the provider 20 ms per call. */
  /**
   * The 300k dataset's first aggregate over its 5,000 subjects, nothing cached, the provider 20 ms per
   * call: its time, the subjects it answered for (under load some provider calls time out: then fewer
   * than all, and the fill asks again), the fill's provider calls; and the same question through
   * dataPointAggregatesChanged beside it (`live`, P131; null when the stream failed).
   */
  cold?: { ms: number; contributingSubjects: number; providerCalls: number; live: ColdLive | null };
  vacuumSeconds: number;
  reference: { exportSeconds: number; loadSeconds: number; rows: number };
  questions: QuestionResult[];
  newQuestion: { service: Stat; duckdb: Stat; ratioP50: number; medianRatio: number; providerCalls: number };
  repeated: { iterations: number; service: Stat };
}

/** The cold question followed over SSE: when its first partial answer and its full answer came, from its request. */
export interface ColdLive {
  /** null: the first answer was the full one. */
  firstPartialMs: number | null;
  /** The first partial answer's coverage: subjects with data, of all. */
  firstPartialSubjects: number | null;
  partials: number;
  fullMs: number;
}

/**
 * The endpoint and headers of the first request `call` makes: runScale is handed only `gql`, and the
 * subscription is read over SSE from the same endpoint with the same credentials.
 */
async function endpointOf(call: () => Promise<unknown>): Promise<{ url: string; headers: Record<string, string> } | undefined> {
  const original = globalThis.fetch;
  let seen: { url: string; headers: Record<string, string> } | undefined;
  globalThis.fetch = (input, init) => {
    seen ??= { url: String(input), headers: { ...(init?.headers as Record<string, string> | undefined) } };
    return original(input, init);
  };
  try {
    await call();
  } finally {
    globalThis.fetch = original;
  }
  return seen;
}

/**
 * `input` through dataPointAggregatesChanged over SSE (graphql-sse's distinct connections: a POST answered
 * with a text/event-stream): resolves once the full answer (coverage.pendingSubjectCount 0) arrived, with
 * the times of the first partial answer and of the full one; the stream is closed then.
 */
export async function followLive(endpoint: { url: string; headers: Record<string, string> }, input: unknown): Promise<ColdLive> {
  const query = `subscription ColdLive($input: DataPointAggregatesInput!) { dataPointAggregatesChanged(input: $input) {
    aggregates { count } coverage { subjectCount contributingSubjectCount pendingSubjectCount } } }`;
  const ctl = new AbortController();
  const t0 = performance.now();
  const res = await fetch(endpoint.url, {
    method: 'POST',
    signal: ctl.signal,
    headers: { ...endpoint.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ query, variables: { input } }),
  });
  if (!res.ok || !res.body) throw new Error(`the subscription was answered ${res.status}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let first: { ms: number; subjects: number } | undefined;
  let partials = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error('the subscription ended before the full answer');
      buffer += value;
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trim())
          .join('\n');
        if (!block.includes('event: next') || !data) continue;
        const r = JSON.parse(data) as { data?: { dataPointAggregatesChanged?: any }; errors?: unknown };
        if (r.errors) throw new Error(`the subscription answered ${JSON.stringify(r.errors).slice(0, 300)}`);
        const c = r.data?.dataPointAggregatesChanged?.coverage;
        if (!c) continue;
        const ms = r2(performance.now() - t0);
        if (c.pendingSubjectCount > 0) {
          partials++;
          first ??= { ms, subjects: c.subjectCount - c.pendingSubjectCount };
        } else return { firstPartialMs: first?.ms ?? null, firstPartialSubjects: first?.subjects ?? null, partials, fullMs: ms };
      }
    }
  } finally {
    ctl.abort();
  }
}

const quantile = (xs: readonly number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
};
const r2 = (n: number) => Math.round(n * 100) / 100;
const stat = (xs: readonly number[]): Stat => ({ p50Ms: r2(quantile(xs, 0.5)), p95Ms: r2(quantile(xs, 0.95)) });
const f = (n: number | undefined | null) =>
  n === undefined || n === null || !Number.isFinite(n) ? '–' : n < 10 ? n.toFixed(2) : n.toFixed(1);

export async function runScale(opts: {
  dataset: Dataset;
  db: Db;
  tenantId: string;
  workDir: string;
  /** The service's GraphQL endpoint, authenticated; throws on errors. */
  gql: (query: string, variables: Record<string, unknown>) => Promise<{ data: any }>;
  providerCalls: () => Promise<number>;
  questionCount: number;
  iterations: number;
  log: (line: string) => void;
}): Promise<ScaleResult> {
  const { dataset: d, gql, log } = opts;
  const extractKey = `steps-${d.days}d`;
  const points = d.subjects * d.days;
  const roots = Array.from({ length: LEVELS[0].count }, (_, j) => entityKey(1, j));
  const endpoint = await endpointOf(() =>
    gql(CREATE_EXTRACT, {
      input: {
        key: extractKey,
        name: `Steps per day, ${d.days} days`,
        dataSourceKey: 'reference',
        options: { metric: 'steps', period: { days: d.days } },
      },
    }),
  );

  // The fill: the service's aggregates fetch and store the sets (whatever storage its cache write keeps).
  // `maxGroups` 99 keeps these questions apart from the measured ones in the answer cache.
  const fillInput = (keys: string[]) => ({ ...questionInput(questions()[0]!, d, extractKey, keys), interval: 'MONTH', maxGroups: 99 });
  const fillQuery = `query Fill($input: DataPointAggregatesInput!) { dataPointAggregates(input: $input) { aggregates { count } coverage { subjectCount contributingSubjectCount } } }`;
  /**
   * One fill question, asked again (after 2 s: a provider circuit opened by time-outs closes) while
   * subjects are missing from its answer or it fails: under load some provider calls time out.
   */
  let attempts = 0;
  const fillOnce = async (keys: string[]) => {
    for (let attempt = 1; ; attempt++) {
      attempts++;
      const t = performance.now();
      let problem: string;
      try {
        const r = await gql(fillQuery, { input: fillInput(keys) });
        const a = r.data.dataPointAggregates;
        const ms = performance.now() - t;
        if (a.coverage.contributingSubjectCount === a.coverage.subjectCount)
          return { ms, count: a.aggregates.count as number, complete: true };
        problem = `${a.coverage.contributingSubjectCount} of ${a.coverage.subjectCount} subjects answered`;
        if (attempt === 1 && keys === roots) first = { ms, contributing: a.coverage.contributingSubjectCount };
      } catch (e) {
        problem = (e as Error).message.slice(0, 300);
      }
      log(`    fill of ${keys.length === 1 ? keys[0] : 'every subject'}, attempt ${attempt}: ${problem}`);
      if (attempt >= 5) throw new Error(`the fill of ${keys.join(', ')} failed 5 times: ${problem}`);
      await sleep(2000);
    }
  };
  let first: { ms: number; contributing: number } | undefined;
  let coldLive: ColdLive | null = null;
  const c0 = await opts.providerCalls();
  const t0 = performance.now();
  let how: string;
  if (d.subjects <= 5000) {
    how = `one aggregate over all ${d.subjects} subjects (cold)`;
    // The same question followed live beside the query (P131): they share the provider calls and the
    // full computation; its partial answers are computed on top.
    const live = endpoint
      ? followLive(endpoint, fillInput(roots)).then(
          (l) => l,
          (e: unknown) => (log(`    the cold question's subscription failed: ${(e as Error).message}`), null),
        )
      : Promise.resolve(null);
    const r = await fillOnce(roots);
    first ??= { ms: r.ms, contributing: d.subjects };
    coldLive = await live;
    if (coldLive)
      log(
        `  cold, live: first partial answer ${coldLive.firstPartialMs ?? '–'} ms (${coldLive.firstPartialSubjects ?? 0} subjects), ` +
          `${coldLive.partials} partial answers, the full answer ${coldLive.fullMs} ms`,
      );
  } else {
    const divisions = Array.from({ length: LEVELS[1].count }, (_, j) => entityKey(2, j));
    how = `${divisions.length} aggregates, one per division, ${FILL_IN_FLIGHT} at a time`;
    let next = 0;
    let done = 0;
    await Promise.all(
      Array.from({ length: FILL_IN_FLIGHT }, async () => {
        while (next < divisions.length) {
          await fillOnce([divisions[next++]!]);
          process.stdout.write(`\r  fill: ${++done}/${divisions.length} divisions`);
        }
      }),
    );
    process.stdout.write('\n');
  }
  const all = await fillOnce(roots);
  if (all.count !== points) throw new Error(`the fill counted ${all.count} points, expected ${points}`);
  const fillMs = performance.now() - t0;
  const fillCalls = (await opts.providerCalls()) - c0;
  const fill = { how, seconds: Math.round(fillMs / 100) / 10, providerCalls: fillCalls, attempts };
  log(`  ${d.name}: ${points} points filled in ${fill.seconds} s (${how}; ${attempts} aggregates asked), ${fillCalls} provider calls`);
  // Cold: the first aggregate over every subject with nothing cached (the 300k dataset's fill).
  const cold =
    d.subjects <= 5000 && first
      ? { ms: Math.round(first.ms), contributingSubjects: first.contributing, providerCalls: fillCalls, live: coldLive }
      : undefined;

  // The steady state of a cache in use: statistics of the new rows, the visibility map set.
  const v0 = performance.now();
  await sql`VACUUM ANALYZE`.execute(opts.db);
  const vacuumSeconds = Math.round((performance.now() - v0) / 100) / 10;

  const e0 = performance.now();
  const file = path.join(opts.workDir, `points-${extractKey}.csv`);
  const exported = await exportPoints(opts.db, opts.tenantId, extractKey, file);
  const exportSeconds = Math.round((performance.now() - e0) / 100) / 10;
  if (exported !== points) throw new Error(`exported ${exported} points for DuckDB, expected ${points}`);
  const reference = await openReference(file);
  await rm(file, { force: true });
  log(`  DuckDB (1 thread, in memory): ${reference.rows} rows exported in ${exportSeconds} s, loaded in ${reference.loadSeconds} s`);

  try {
    // New questions: each asked once of the service (nothing in its answer cache), then of DuckDB.
    const asked = questions().slice(0, opts.questionCount);
    const results: QuestionResult[] = [];
    const q0 = await opts.providerCalls();
    for (const q of asked) {
      const t = performance.now();
      const r = await gql(questionQuery(q), { input: questionInput(q, d, extractKey, roots) });
      const serviceMs = performance.now() - t;
      const answer = r.data.dataPointAggregates as ServiceAnswer;
      const ref = await reference.ask(q, d, REFERENCE_RUNS);
      const result: QuestionResult = {
        id: q.id,
        points: answer.aggregates.count,
        serviceMs: r2(serviceMs),
        duckdbMs: r2(quantile(ref.ms, 0.5)),
        differences: differences(answer, ref.rows),
      };
      results.push(result);
      log(
        `    ${q.id.padEnd(42)} ${String(result.points).padStart(8)} points: service ${f(result.serviceMs).padStart(7)} ms, ` +
          `DuckDB ${f(result.duckdbMs).padStart(6)} ms, ×${(result.serviceMs / result.duckdbMs).toFixed(1)}` +
          (result.differences.length ? `  DIFFERS: ${result.differences.slice(0, 3).join('; ')}` : ''),
      );
    }
    const newCalls = (await opts.providerCalls()) - q0;
    const service = stat(results.map((x) => x.serviceMs));
    const duckdb = stat(results.map((x) => x.duckdbMs));
    const newQuestion = {
      service,
      duckdb,
      ratioP50: r2(service.p50Ms / duckdb.p50Ms),
      medianRatio: r2(
        quantile(
          results.map((x) => x.serviceMs / x.duckdbMs),
          0.5,
        ),
      ),
      providerCalls: newCalls,
    };

    // The same question again: the first new question, answered from the service's answer cache.
    const again: Question = asked[0]!;
    const repeatedMs: number[] = [];
    for (let i = 0; i < opts.iterations; i++) {
      const t = performance.now();
      await gql(questionQuery(again), { input: questionInput(again, d, extractKey, roots) });
      repeatedMs.push(performance.now() - t);
    }
    const repeated = { iterations: opts.iterations, service: stat(repeatedMs) };
    log(
      `  ${d.name}: new questions p50 ${f(service.p50Ms)} ms, p95 ${f(service.p95Ms)} ms (DuckDB p50 ${f(duckdb.p50Ms)} ms, ` +
        `p95 ${f(duckdb.p95Ms)} ms; ×${newQuestion.ratioP50}); the same question again p50 ${f(repeated.service.p50Ms)} ms`,
    );
    return {
      dataset: d,
      extractKey,
      points,
      fill,
      ...(cold ? { cold } : {}),
      vacuumSeconds,
      reference: { exportSeconds, loadSeconds: reference.loadSeconds, rows: reference.rows },
      questions: results,
      newQuestion,
      repeated,
    };
  } finally {
    reference.close();
  }
}

/** Issue 32's targets with what this run measured (PostgreSQL is the targets' database; PGlite is shown alongside). */
export function scaleTargets(s: ScaleResult): Target[] {
  const d = s.dataset;
  const differing = s.questions.filter((q) => q.differences.length > 0).length;
  const targets: Target[] = [
    {
      target: `new question, warm, over ${s.points} points: p50 ≤ ${d.newQuestionTargetMs} ms`,
      measured: `p50 ${f(s.newQuestion.service.p50Ms)} ms, p95 ${f(s.newQuestion.service.p95Ms)} ms (${s.questions.length} questions)`,
      holds: s.newQuestion.service.p50Ms <= d.newQuestionTargetMs,
    },
    {
      target: `new question within ${DUCKDB_RATIO_TARGET}× of DuckDB (1 thread) on the same rows`,
      measured: `×${s.newQuestion.ratioP50} (p50 ${f(s.newQuestion.service.p50Ms)} ÷ ${f(s.newQuestion.duckdb.p50Ms)} ms); per question median ×${s.newQuestion.medianRatio}`,
      holds: s.newQuestion.ratioP50 <= DUCKDB_RATIO_TARGET,
    },
    {
      target: `same question repeated: p50 ≤ ${REPEATED_TARGET_MS} ms`,
      measured: `p50 ${f(s.repeated.service.p50Ms)} ms (${s.repeated.iterations} requests)`,
      holds: s.repeated.service.p50Ms <= REPEATED_TARGET_MS,
    },
    {
      target: "every new answer equals DuckDB's (count, subjects, exact sum per bucket and group)",
      measured: differing === 0 ? `${s.questions.length} of ${s.questions.length} equal` : `${differing} of ${s.questions.length} differ`,
      holds: differing === 0,
    },
  ];
  if (s.cold)
    targets.push(
      {
        target: `cold, ${s.dataset.subjects} subjects × ${s.dataset.days} points, provider 20 ms: full answer ≤ ${COLD_TARGET_MS / 1000} s`,
        measured:
          `${(s.cold.ms / 1000).toFixed(1)} s, ${s.cold.contributingSubjects} of ${s.dataset.subjects} subjects answered` +
          `; the fill: ${s.fill.providerCalls} provider calls`,
        holds: s.cold.ms <= COLD_TARGET_MS && s.cold.contributingSubjects === s.dataset.subjects,
      },
      {
        target: `cold: first partial answer ≤ ${FIRST_PARTIAL_TARGET_MS / 1000} s (dataPointAggregatesChanged)`,
        measured: !s.cold.live
          ? 'not measured: the subscription failed'
          : s.cold.live.firstPartialMs === null
            ? `none: the first answer was the full one, at ${(s.cold.live.fullMs / 1000).toFixed(1)} s`
            : `${Math.round(s.cold.live.firstPartialMs)} ms (${s.cold.live.firstPartialSubjects} of ${s.dataset.subjects} subjects); ` +
              `${s.cold.live.partials} partial answers, the full one at ${(s.cold.live.fullMs / 1000).toFixed(1)} s`,
        holds: s.cold.live ? s.cold.live.firstPartialMs !== null && s.cold.live.firstPartialMs <= FIRST_PARTIAL_TARGET_MS : undefined,
      },
    );
  return targets;
}

const yes = (h: boolean | undefined) => (h === undefined ? '–' : h ? 'holds' : 'does not hold');

/** The scale part's Markdown: the targets, then each question. */
export function scaleMarkdown(s: ScaleResult, database: string): string {
  const { from, to } = rangeOf(s.dataset);
  return [
    `Dashboards at scale (issue 32)${database ? `, ${database}` : ''}: ${s.dataset.subjects} subjects × ${s.dataset.days} daily points = ${s.points} points, ` +
      `${from} to ${to}; filled in ${s.fill.seconds} s (${s.fill.how}, ${s.fill.providerCalls} provider calls); VACUUM ANALYZE ${s.vacuumSeconds} s; ` +
      `DuckDB ${s.reference.rows} rows (export ${s.reference.exportSeconds} s, load ${s.reference.loadSeconds} s), ${REFERENCE_RUNS} runs per question. ` +
      'The machine is shared with other work: absolute times are noisy, the ratio to DuckDB in the same run is what counts.',
    '',
    '| target | measured | holds |',
    '| --- | --- | --- |',
    ...scaleTargets(s).map((t) => `| ${t.target} | ${t.measured} | ${yes(t.holds)} |`),
    '',
    `| new question (zone, interval, grouping, percentiles) | points | service ms | DuckDB ms | ratio | equal |`,
    '| --- | ---: | ---: | ---: | ---: | --- |',
    ...s.questions.map(
      (q) =>
        `| ${q.id} | ${q.points} | ${f(q.serviceMs)} | ${f(q.duckdbMs)} | ×${(q.serviceMs / q.duckdbMs).toFixed(1)} | ${q.differences.length ? `no: ${q.differences[0]}` : 'yes'} |`,
    ),
  ].join('\n');
}

/** Before/after of the scale part's numbers: `before` is a previous run's JSON (BENCH_BEFORE). */
export function beforeAfterMarkdown(before: ScaleResult | undefined, after: ScaleResult, beforeFile: string): string {
  if (!before) return `BENCH_BEFORE=${beforeFile}: no scale part in that file`;
  const rows: [string, number | undefined, number | undefined, string][] = [
    ['new question p50 (ms)', before.newQuestion.service.p50Ms, after.newQuestion.service.p50Ms, 'ms'],
    ['new question p95 (ms)', before.newQuestion.service.p95Ms, after.newQuestion.service.p95Ms, 'ms'],
    ['DuckDB p50, same run (ms)', before.newQuestion.duckdb.p50Ms, after.newQuestion.duckdb.p50Ms, 'ms'],
    ['service ÷ DuckDB (p50)', before.newQuestion.ratioP50, after.newQuestion.ratioP50, '×'],
    ['same question repeated p50 (ms)', before.repeated.service.p50Ms, after.repeated.service.p50Ms, 'ms'],
    ['cold: full answer (ms)', before.cold?.ms, after.cold?.ms, 'ms'],
    [
      'cold: first partial answer (ms)',
      before.cold?.live?.firstPartialMs ?? undefined,
      after.cold?.live?.firstPartialMs ?? undefined,
      'ms',
    ],
    ['cold: provider calls', before.cold?.providerCalls, after.cold?.providerCalls, ''],
    ['fill (s)', before.fill.seconds, after.fill.seconds, 's'],
  ];
  return [
    `Before/after (${before.dataset.name} before, ${after.dataset.name} now; before: ${beforeFile})`,
    '',
    '| measure | before | after | after ÷ before |',
    '| --- | ---: | ---: | ---: |',
    ...rows.map(
      ([name, b, a, unit]) =>
        `| ${name} | ${unit ? f(b) : (b ?? '–')} | ${unit ? f(a) : (a ?? '–')} | ${b !== undefined && a !== undefined && b > 0 ? `${(a / b).toFixed(2)}×` : '–'} |`,
    ),
  ].join('\n');
}
