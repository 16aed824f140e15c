/**
 * The bench's results: ratios, the issue's targets (each with whether it holds), the Markdown tables
 * and the JSON file in bench/results/.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { LoadResult } from './load.js';
import type { DashboardsResult } from './dashboards.js';
import type { NoisyNeighbourResult } from './noisy-neighbour.js';
import type { ScaleOutResult } from './scale-out.js';
import { HALF_RATE_LISTS } from './scenarios.js';
import type { Collections } from './service.js';

export interface Measured extends LoadResult {
  /** VmHWM of the process under test during this run (warm-up included), bytes. */
  peakRssBytes?: number;
}

export interface ScenarioResult {
  id: string;
  title: string;
  connections: number;
  reference: 'B1' | 'B0' | 'none';
  service: Measured;
  /** The same request with one connection (unloaded latency). */
  oneConnection?: Measured;
  b0?: Measured;
  b1?: Measured;
  /** Every statement of one request (auth and configuration included). */
  statementsPerRequest: number;
  statements: { kind: string; tables: string[]; sql: string }[];
  /** What B1 replays, by tables. */
  b1Replays?: string[];
  answerBytes: number;
  b1AnswerBytes?: number;
  /** B1's answer holds the same data as the service's (cursors aside). */
  b1SameData?: boolean;
  /** Provider calls per request: sequential requests for the cache miss, the load's average for the hit. */
  providerCallsPerRequest?: number;
  /** The provider's get-data-points calls during the load run (warm-up included). */
  providerCallsDuringLoad?: number;
  /** Service req/s over the reference's (B1 or B0). */
  ratio?: number;
  failures: number;
}

/** One list request to a peer (PostGraphile), measured like the service's scenarios. */
export interface PeerResult {
  id: string;
  title: string;
  query: string;
  /** The service's scenarios it is compared with: service req/s ÷ this request's req/s. */
  compareWith: string[];
  measured: Measured;
  answerBytes: number;
}

/** Whether the service's `gql-20-same` page carries PostGraphile's information for the same subjects. */
export interface SameInformation {
  holds: boolean;
  subjects: number;
  detail: string;
  /** The service's answer (PostGraphile's is its PeerResult's answerBytes). */
  serviceBytes: number;
}

/** The peers of a run: what ran, and its numbers (absent: skipped or failed, see BenchReport). */
export interface PeersReport {
  /** e.g. `PostGraphile 5.1.5 (amber preset)`. */
  server: string;
  results: PeerResult[];
  sameInformation?: SameInformation;
}

export interface HalfRate {
  rate: number;
  result: Measured;
  /** The service's garbage collections during the run and its warm-up (its /metrics). */
  collections?: Collections;
}

export interface Target {
  target: string;
  measured: string;
  holds: boolean | undefined;
}

export interface Machine {
  cpus: number;
  cpuModel: string;
  memoryGb: number;
  node: string;
  kernel: string;
  platform: string;
  loadAverage1m: { start: number; end: number };
}

/** The machine facts of a report; `loadAtStart` is the 1-minute load average when the run began. */
export function machineFacts(loadAtStart: number): Machine {
  const cpus = os.cpus();
  return {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    memoryGb: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    kernel: os.release(),
    platform: process.platform,
    // Other work on the machine (the bench itself adds about 2): a hint of how noisy the run was.
    loadAverage1m: { start: Math.round(loadAtStart * 100) / 100, end: Math.round(os.loadavg()[0]! * 100) / 100 },
  };
}

export interface BenchReport {
  label: string | undefined;
  date: string;
  database: 'pglite' | 'postgres';
  machine: Machine;
  commit: string;
  /** Uncommitted changes under src/, db/ or package.json at the end of the run. */
  dirty: boolean;
  /** HEAD or the uncommitted changes under src/ or db/ differed between the start and the end of the run. */
  codeChangedDuringRun?: boolean;
  startCommand: string;
  subjects: number;
  connections: number;
  durationSec: number;
  warmupSec: number;
  latencyDurationSec: number;
  providerLatencyMs: number;
  seedSeconds: number;
  runtimeSeconds: number;
  scenarios: ScenarioResult[];
  /** rest-list at half its maximum rate (the same as halfRates['rest-list']; kept for older readers). */
  halfRate?: HalfRate;
  /** Each of HALF_RATE_LISTS at half its maximum rate. */
  halfRates?: Record<string, HalfRate>;
  targets: Target[];
  /** The noisy-neighbour scenario (two tenants on their own database), run after the others. */
  noisyNeighbour?: NoisyNeighbourResult;
  /** Why the noisy-neighbour scenario has no numbers, when it failed. */
  noisyNeighbourError?: string;
  /** The dashboards scenario (issue 17: aggregates, subscriptions; its own database), run last. */
  dashboards?: DashboardsResult;
  /** Why the dashboards scenario has no numbers, when it failed. */
  dashboardsError?: string;
  /** The scale-out scenario (issue 34: instances behind PgBouncer; its own database), PostgreSQL only. */
  scaleOut?: ScaleOutResult;
  /** Why the scale-out scenario did not run (PGlite, PgBouncer not installed). */
  scaleOutSkipped?: string;
  /** Why the scale-out scenario has no numbers, when it failed. */
  scaleOutError?: string;
  /** PostGraphile 5 on the same database, the same lists (issue 19; bench/peer.ts). */
  peers?: PeersReport;
  /** Why the peer did not run (PGlite, bench/peers not installed). */
  peersSkipped?: string;
  /** Why the peer has no numbers although it was installed (its answer check or its start failed). */
  peersError?: string;
  markdown: string;
}

/** The number of failed answers of a run: non-2xx, connection errors, timeouts, GraphQL errors. */
export const failures = (r: LoadResult | undefined) => (r ? r.non2xx + r.errors + r.timeouts + r.graphqlErrors : 0);

/** A measured number, or undefined when there is none (NaN arrives as null through JSON). */
const val = (n: number | null | undefined): number | undefined => (n === undefined || n === null || !Number.isFinite(n) ? undefined : n);

/**
 * The issue's targets, evaluated on this run's numbers. A target whose scenario had failed answers does
 * not hold, whatever its numbers.
 */
export function evaluateTargets(
  scenarios: ScenarioResult[],
  halfRates: Record<string, HalfRate>,
  subjects: number,
  peerArg: { peers?: PeersReport; missing?: string } = {},
): Target[] {
  const s = (id: string) => scenarios.find((x) => x.id === id);
  const f2 = (n: number | null | undefined) => (val(n) === undefined ? 'n/a' : n!.toFixed(2));
  const out: Target[] = [];
  const push = (target: string, measured: string, holds: boolean | undefined, ...ids: string[]) => {
    const failed = ids.reduce((n, id) => n + (s(id)?.failures ?? 0) + failures(s(id)?.oneConnection), 0);
    out.push(failed > 0 ? { target, measured: `${measured} (${failed} failed answers)`, holds: false } : { target, measured, holds });
  };
  const ratio = (id: string, min: number, label: string) => {
    const sc = s(id);
    const r = val(sc?.ratio);
    // A reference that failed answers is no reference.
    const refFailed = failures(sc?.reference === 'B1' ? sc.b1 : sc?.reference === 'B0' ? sc.b0 : undefined);
    const measured = r === undefined ? 'n/a' : `${f2(r)}×${refFailed ? ` (${sc?.reference} failed ${refFailed} answers)` : ''}`;
    push(`${label} ≥ ${min}× ${sc?.reference ?? 'B1'} (req/s)`, measured, r === undefined ? undefined : r >= min && refFailed === 0, id);
  };
  // Latency targets compare unloaded p50s (one connection): under 32 connections a p50 is mostly queueing.
  const p50 = (id: string) => val(s(id)?.oneConnection?.p50);
  const relative = (id: string, max: number, label: string) => {
    const a = p50(id);
    const b = p50('rest-list');
    const q = a !== undefined && b !== undefined && b > 0 ? a / b : undefined;
    push(
      `${label} p50 ≤ ${max}× page-1 p50 (1 connection)`,
      q === undefined ? 'n/a' : `${f2(a)} / ${f2(b)} ms = ${f2(q)}×`,
      q === undefined ? undefined : q <= max,
      id,
      'rest-list',
    );
  };
  ratio('rest-list', 0.8, 'REST list of 20 with TotalCount');
  ratio('gql-20', 0.7, 'GraphQL 20 subjects');
  relative('rest-deep', 1.2, 'Deep page');
  const search = p50('rest-search');
  push(
    `SearchTerm p50 ≤ 5 ms at 100k (1 connection)${subjects < 100_000 ? ` — this run has ${subjects} subjects` : ''}`,
    `${f2(search)} ms`,
    search === undefined ? undefined : search <= 5,
    'rest-search',
  );
  relative('rest-filter', 1.5, 'Filter');
  const g100 = s('gql-100-entities');
  push(
    'GraphQL 100 subjects with entities ≤ 3 SQL statements',
    g100 ? String(g100.statementsPerRequest) : 'n/a',
    g100 ? g100.statementsPerRequest <= 3 : undefined,
    'gql-100-entities',
  );
  ratio('gql-100-entities', 0.3, 'GraphQL 100 subjects with entities');
  // Issue 35: the GraphQL lists beside PostGraphile's list (no totalCount on either side).
  const peer = peerArg.peers?.results.find((p) => p.id === 'pg-list');
  const vsPeer = (id: string, min: number, label: string, sameRequired = false) => {
    const target = `${label} ≥ ${min.toFixed(1)}× PostGraphile (req/s)`;
    if (!peer) return push(target, `PostGraphile not run: ${peerArg.missing ?? 'no answer'}`, undefined, id);
    const q = peerRatio(scenarios, peer, id);
    const peerFailed = failures(peer.measured);
    const same = peerArg.peers?.sameInformation;
    const notSame = !sameRequired || same?.holds ? '' : `; not the same information: ${same?.detail ?? 'not checked'}`;
    push(
      target,
      q === undefined
        ? 'n/a'
        : `${rps(s(id)?.service)} / ${rps(peer.measured)} = ${f2(q)}×${peerFailed ? ` (PostGraphile failed ${peerFailed} answers)` : ''}${notSame}`,
      q === undefined ? undefined : q >= min && peerFailed === 0 && notSame === '',
      id,
    );
  };
  vsPeer('gql-20-same', 1, "GraphQL 20 subjects, PostGraphile's information", true);
  vsPeer('gql-20-nocount', 0.8, "GraphQL 20 subjects, the contract's shape");
  ratio('dp-hit', 0.5, 'Data points cache hit');
  const calls = val(s('dp-miss')?.providerCallsPerRequest);
  push(
    'Data points cache miss: exactly 1 provider call per request',
    calls === undefined ? 'n/a' : f2(calls),
    calls === undefined ? undefined : calls === 1,
    'dp-miss',
  );
  for (const id of HALF_RATE_LISTS) {
    const sc = s(id);
    if (!sc) continue;
    const h = halfRates[id];
    const hp50 = val(h?.result.p50);
    const hp99 = val(h?.result.p99);
    const q = hp50 !== undefined && hp99 !== undefined && hp50 > 0 ? hp99 / hp50 : undefined;
    const halfFailed = failures(h?.result);
    out.push({
      target: `${sc.title} at half the max rate: p99 ≤ 5× p50`,
      measured:
        q === undefined
          ? 'n/a'
          : `${f2(hp99)} / ${f2(hp50)} ms = ${f2(q)}×${halfFailed ? ` (${halfFailed} failed answers)` : ''}` +
            (h?.collections ? `; full collections in the run: ${h.collections.major}` : ''),
      holds: q === undefined ? undefined : q <= 5 && halfFailed === 0,
    });
  }
  for (const id of HALF_RATE_LISTS) {
    const sc = s(id);
    if (!sc) continue;
    // The load runs' peak and the half-rate run's: the list's load, whichever of the two is higher.
    const peaks = [sc.service?.peakRssBytes, halfRates[id]?.result.peakRssBytes].map(val).filter((b) => b !== undefined);
    const rss = peaks.length > 0 ? Math.max(...peaks) : undefined;
    push(
      `Peak RSS ≤ 200 MB under the load of ${sc.title}`,
      rss === undefined ? 'n/a' : `${(rss / 2 ** 20).toFixed(0)} MB`,
      rss === undefined ? undefined : rss <= 200 * 2 ** 20,
      id,
    );
  }
  return out;
}

/** Service req/s of scenario `id` ÷ the peer's req/s (undefined without both). */
export function peerRatio(scenarios: ScenarioResult[], peer: PeerResult, id: string): number | undefined {
  const service = val(scenarios.find((x) => x.id === id)?.service?.rps);
  const theirs = val(peer.measured.rps);
  return service === undefined || theirs === undefined || theirs === 0 ? undefined : service / theirs;
}

/** Milliseconds for a table cell; NaN (no answer in the run) is null after the JSON round trip from the load generator. */
export const ms = (n: number | null | undefined) =>
  n === undefined ? '' : n === null || !Number.isFinite(n) ? 'n/a' : n < 10 ? n.toFixed(2) : n.toFixed(1);
/** A run's requests per second for a table cell. */
export const rps = (r: LoadResult | undefined) => (r ? r.rps.toFixed(0) : '');
const mb = (b: number | undefined) => (b === undefined ? '' : (b / 2 ** 20).toFixed(0));

/** Where a run's numbers come from, for the head of its tables: machine, load, commit, label. */
export function provenance(r: {
  machine: Machine;
  commit: string;
  dirty: boolean;
  codeChangedDuringRun?: boolean;
  label: string | undefined;
}): string {
  return (
    `node ${r.machine.node}, ${r.machine.cpus} × ${r.machine.cpuModel}, load average ${r.machine.loadAverage1m.start} → ${r.machine.loadAverage1m.end}; ` +
    `commit ${r.commit.slice(0, 7)}${r.dirty ? ' (+ uncommitted changes)' : ''}${r.codeChangedDuringRun ? ' (code changed during the run!)' : ''}` +
    (r.label ? `; label ${r.label}` : '')
  );
}

/** The Markdown tables: scenarios, then targets. */
export function markdown(r: Omit<BenchReport, 'markdown'>): string {
  const lines = [
    `${r.subjects} subjects, ${r.database}, ${r.connections} connections (upserts: 1 and 20), ${r.durationSec} s per run after a ${r.warmupSec} s warm-up, ` +
      `1-connection runs ${r.latencyDurationSec} s; ${provenance(r)}`,
    '',
    '| scenario | conns | req/s | p50 ms | p99 ms | p50 ms, 1 conn | SQL/req | peak RSS MB | B1 req/s | B0 req/s | ratio | failed |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const s of r.scenarios) {
    const ratio =
      s.ratio === undefined
        ? s.providerCallsPerRequest !== undefined
          ? `${s.providerCallsPerRequest.toFixed(2)} provider calls/req`
          : ''
        : `${s.ratio.toFixed(2)}× ${s.reference}`;
    const failed = s.failures + failures(s.oneConnection);
    const b1 = s.b1 ? `${rps(s.b1)}${s.b1SameData === false ? ' (≠ data)' : ''}${failures(s.b1) ? ` ⚠ ${failures(s.b1)} failed` : ''}` : '';
    const b0 = s.b0 ? `${rps(s.b0)}${failures(s.b0) ? ` ⚠ ${failures(s.b0)} failed` : ''}` : '';
    const exhausted = s.service.exhausted ? ' (inputs ran out)' : '';
    lines.push(
      `| ${s.title}${exhausted} | ${s.connections} | ${rps(s.service)} | ${ms(s.service.p50)} | ${ms(s.service.p99)} | ${ms(s.oneConnection?.p50)} | ${s.statementsPerRequest} | ${mb(s.service.peakRssBytes)} | ${b1} | ${b0} | ${ratio} | ${failed > 0 ? `⚠ ${failed}` : '0'} |`,
    );
  }
  // Older reports have only rest-list's half-rate run.
  for (const [id, half] of Object.entries(r.halfRates ?? (r.halfRate ? { 'rest-list': r.halfRate } : {}))) {
    const h = half.result;
    const sc = r.scenarios.find((s) => s.id === id);
    lines.push(
      `| ${sc?.title ?? id} at half max rate (${half.rate} req/s) | ${r.connections} | ${rps(h)} | ${ms(h.p50)} | ${ms(h.p99)} |  | ${sc?.statementsPerRequest ?? ''} | ${mb(h.peakRssBytes)} |  |  | p99/p50 ${ms(h.p99 / h.p50)} | ${failures(h) > 0 ? `⚠ ${failures(h)}` : '0'} |`,
    );
  }
  lines.push('', ...peersMarkdown(r));
  lines.push('', '| target | measured | holds |', '| --- | --- | :---: |');
  for (const t of r.targets) lines.push(`| ${t.target} | ${t.measured} | ${t.holds === undefined ? '–' : t.holds ? 'yes' : 'no'} |`);
  return lines.join('\n');
}

/**
 * The peers' table: each PostGraphile list beside the service's scenarios it is compared with; or the
 * line saying why there is none.
 */
function peersMarkdown(r: Omit<BenchReport, 'markdown'>): string[] {
  if (!r.peers) {
    return [r.peersError ? `PostGraphile: FAILED: ${r.peersError}` : `PostGraphile: skipped: ${r.peersSkipped ?? 'not run'}`];
  }
  const b1 = r.scenarios.find((s) => s.id === 'rest-list')?.b1;
  const lines = [
    `Peer: ${r.peers.server}, same database and run, same load (${r.connections} connections, ${r.durationSec} s after ${r.warmupSec} s), pinned like the service. ` +
      'Ratio: service req/s ÷ PostGraphile req/s.',
    '',
    '| PostGraphile request | req/s | p50 ms | p99 ms | peak RSS MB | answer bytes | ÷ B1 (REST list) | failed | service scenario | service req/s | service answer bytes | service ÷ PostGraphile |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |',
  ];
  for (const p of r.peers.results) {
    const m = p.measured;
    const vsB1 = b1 && b1.rps > 0 ? `${(m.rps / b1.rps).toFixed(2)}×` : '';
    const failed = failures(m);
    p.compareWith.forEach((id, i) => {
      const s = r.scenarios.find((x) => x.id === id);
      const q = peerRatio(r.scenarios, p, id);
      const head =
        i === 0
          ? `| ${p.title} | ${rps(m)} | ${ms(m.p50)} | ${ms(m.p99)} | ${mb(m.peakRssBytes)} | ${p.answerBytes} | ${vsB1} | ${failed > 0 ? `⚠ ${failed}` : '0'} |`
          : '| | | | | | | | |';
      lines.push(
        `${head} ${s?.title ?? id} | ${rps(s?.service)} | ${s?.answerBytes ?? ''} | ${q === undefined ? 'n/a' : `${q.toFixed(2)}×`} |`,
      );
    });
  }
  const same = r.peers.sameInformation;
  if (same) lines.push('', `Same information (gql-20-same vs PostGraphile): ${same.holds ? 'yes' : 'NO'}: ${same.detail}.`);
  return lines;
}

/** Writes `bench/results/<date>[-<kind>][-<label>]-<database>.json`; returns the path. */
export async function writeReport<R extends { date: string; label: string | undefined; database: string }>(
  dir: string,
  report: R,
  kind?: string,
): Promise<string> {
  await mkdir(dir, { recursive: true });
  const safeLabel = report.label?.replace(/[^A-Za-z0-9._-]+/g, '-');
  const file = path.join(dir, `${report.date}${kind ? `-${kind}` : ''}${safeLabel ? `-${safeLabel}` : ''}-${report.database}.json`);
  await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
  return file;
}
