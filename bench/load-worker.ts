/**
 * The load generator: a child process (pinned to the load core by the harness) that runs autocannon
 * through its programmatic API, so each request can differ (autocannon's setupRequest), and writes the
 * measured numbers as JSON. A fixed-rate run is paced here instead (see `paced`). Usage: `node --import tsx bench/load-worker.ts <spec.json> <result.json>`.
 * Imports nothing from src/: the load generator stays small beside the server.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import autocannon from 'autocannon';
import { type Variant, upsertBody } from './scenarios.js';
import { LEVELS, entityKey, sentSubjectValues } from './tenant-data.js';

/** What one load run does (written by load.ts). */
export interface LoadSpec {
  url: string;
  /** Several servers: autocannon's connections go to them in turn (connection i to urls[i % n]); not for `overallRate`. */
  urls?: string[];
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  body?: string;
  connections: number;
  durationSec: number;
  /** Unmeasured run before the measured one (JIT, caches, connection pools). */
  warmupSec: number;
  /** Fixed request rate over all connections: an open-loop paced run (see `paced`), not autocannon. */
  overallRate?: number;
  variant?: Variant;
  /** Stops after this many requests (a variant that must not repeat itself runs out). */
  maxRequests?: number;
  /** Counts 200 answers whose body holds GraphQL `errors`. */
  checkGraphqlErrors: boolean;
  /** Counts 429 answers that carry a Retry-After header (`retryAfter429`). */
  countRetryAfter?: boolean;
}

/** One measured run's numbers (latencies in ms). */
export interface LoadResult {
  requests: number;
  durationSec: number;
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  graphqlErrors: number;
  statusCodes: Record<string, number>;
  /** Requests the variant produced (warm-up and measured run): how far it got through its inputs. */
  variantUsed: number;
  /** The variant ran out of inputs (maxRequests reached). */
  exhausted: boolean;
  bytesPerSec: number;
  /** 429 answers of the measured run with a Retry-After header (with `countRetryAfter`). */
  retryAfter429?: number;
}

const [specFile, resultFile] = process.argv.slice(2);
if (!specFile || !resultFile) {
  console.error('usage: load-worker.ts <spec.json> <result.json>');
  process.exit(2);
}
const spec = JSON.parse(readFileSync(specFile, 'utf8')) as LoadSpec;

let next = 0; // shared by the warm-up and the measured run: inputs are never reused
let graphqlErrors = 0;
let retryAfter429 = 0;
let counting = false;
const teams = LEVELS[3].count;

function bodyFor(variant: Variant, k: number): string {
  if (variant.kind === 'upsert') return upsertBody(variant.start + k, sentSubjectValues, (i) => entityKey(4, i % teams));
  return JSON.stringify({ query: variant.query, variables: { after: variant.cursors[k % variant.cursors.length] ?? null } });
}

function requestOptions(): autocannon.Request {
  const req: autocannon.Request = { method: spec.method, path: spec.path, headers: spec.headers };
  if (spec.body !== undefined) req.body = spec.body;
  const variant = spec.variant;
  if (variant) {
    req.setupRequest = (r) => {
      r.body = bodyFor(variant, next++);
      return r;
    };
  }
  if (spec.checkGraphqlErrors || spec.countRetryAfter) {
    req.onResponse = (status, body, _context, headers) => {
      if (!counting) return;
      // GraphQL answers errors with 200: an answer with `errors` counts as failed.
      if (spec.checkGraphqlErrors && status === 200 && body.includes('"errors":')) graphqlErrors++;
      // autocannon keeps the header names as sent.
      if (spec.countRetryAfter && status === 429 && Object.keys(headers).some((h) => h.toLowerCase() === 'retry-after')) retryAfter429++;
    };
  }
  return req;
}

// Response times of the measured run, in ms with sub-millisecond resolution (autocannon's own
// histogram has 1 ms resolution, too coarse for fast answers).
const times: number[] = [];

async function run(durationSec: number, measured: boolean, amount?: number): Promise<autocannon.Result> {
  counting = measured;
  const opts: autocannon.Options = {
    url: spec.urls ?? spec.url,
    connections: spec.connections,
    duration: durationSec,
    requests: [requestOptions()],
    timeout: 30,
    ...(spec.overallRate ? { overallRate: spec.overallRate } : {}),
    ...(amount !== undefined ? { amount } : {}),
  };
  const instance = autocannon(opts);
  if (measured)
    instance.on('response', (_client: unknown, _status: number, _bytes: number, responseTime: number) => times.push(responseTime));
  // With `amount` autocannon ignores the duration: stop it at the duration ourselves.
  const timer = amount !== undefined ? setTimeout(() => instance.stop(), durationSec * 1000) : undefined;
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    instance.once('done', resolve);
    instance.once('error', reject);
  });
  clearTimeout(timer);
  return result;
}

/**
 * Open-loop load at a fixed rate: request k is due at start + k / rate, whatever became of the earlier
 * ones, over at most `connections` keep-alive sockets; its latency counts from when it was due, so time
 * spent waiting for a free socket is included (no coordinated omission). autocannon's own rate limit
 * lets each connection send its share of a second back to back at the second's start: bursts, whose
 * queueing would dominate the percentiles.
 */
async function paced(
  durationSec: number,
  rate: number,
  measured: boolean,
): Promise<{ duration: number; statusCodes: Record<string, number>; errors: number }> {
  const target = new URL(spec.url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: spec.connections });
  const statusCodes: Record<string, number> = {};
  let errors = 0;
  let inFlight = 0;
  const start = performance.now();
  const end = start + durationSec * 1000;
  let issued = 0;
  const send = (due: number) => {
    inFlight++;
    const body = spec.variant ? bodyFor(spec.variant, next++) : spec.body;
    const req = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: spec.path,
        method: spec.method,
        agent,
        headers: { ...spec.headers, ...(body !== undefined ? { 'content-length': Buffer.byteLength(body) } : {}) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => spec.checkGraphqlErrors && chunks.push(c));
        res.on('end', () => {
          inFlight--;
          if (!measured) return;
          times.push(performance.now() - due);
          statusCodes[res.statusCode ?? 0] = (statusCodes[res.statusCode ?? 0] ?? 0) + 1;
          if (spec.countRetryAfter && res.statusCode === 429 && res.headers['retry-after'] !== undefined) retryAfter429++;
          if (spec.checkGraphqlErrors && res.statusCode === 200 && Buffer.concat(chunks).toString().includes('"errors":')) graphqlErrors++;
        });
      },
    );
    req.on('error', () => {
      inFlight--;
      if (measured) errors++;
    });
    req.end(body);
  };
  // Request k is due at start + k / rate and is sent as soon as that time has come. (Until 2026-11-24
  // the loop sent request k only once floor(elapsed × rate) exceeded k: a whole period after it was due,
  // which every latency included.)
  const total = Math.ceil(durationSec * rate);
  const dueAt = (k: number) => start + (k * 1000) / rate;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (issued < total && dueAt(issued) <= now) send(dueAt(issued++));
      if (now < end) setTimeout(tick, 1);
      else resolve();
    };
    tick();
  });
  // The answers still on their way belong to the run.
  while (inFlight > 0) await new Promise((r) => setTimeout(r, 5));
  agent.destroy();
  return { duration: (performance.now() - start) / 1000, statusCodes, errors };
}

const remaining = () => (spec.maxRequests === undefined ? undefined : Math.max(0, spec.maxRequests - next));
let duration: number;
let errors: number;
let timeouts = 0;
let non2xx: number;
let bytesPerSec = 0;
let statusCodes: Record<string, number> = {};
if (spec.overallRate) {
  if (spec.warmupSec > 0) await paced(spec.warmupSec, spec.overallRate, false);
  const p = await paced(spec.durationSec, spec.overallRate, true);
  ({ duration, statusCodes, errors } = p);
  non2xx = Object.entries(statusCodes).reduce((n, [code, c]) => n + (code.startsWith('2') ? 0 : c), 0);
} else {
  if (spec.warmupSec > 0) {
    const left = remaining();
    // A variant with limited inputs keeps most of them for the measured run.
    await run(spec.warmupSec, false, left === undefined ? undefined : Math.max(spec.connections, Math.floor(left / 10)));
  }
  const r = await run(spec.durationSec, true, remaining());
  for (const [code, v] of Object.entries(r.statusCodeStats ?? {})) statusCodes[code] = Number((v as { count: number | string }).count);
  ({ duration, errors, timeouts, non2xx } = r);
  bytesPerSec = r.throughput.average;
}
const total = Object.values(statusCodes).reduce((a, b) => a + b, 0);
times.sort((a, b) => a - b);
const pct = (p: number) => (times.length === 0 ? Number.NaN : times[Math.min(times.length - 1, Math.ceil(p * times.length) - 1)]!);
const round = (n: number) => Math.round(n * 1000) / 1000;
const result: LoadResult = {
  requests: total,
  durationSec: duration,
  rps: total / duration,
  p50: round(pct(0.5)),
  p90: round(pct(0.9)),
  p99: round(pct(0.99)),
  max: round(times.at(-1) ?? Number.NaN),
  mean: round(times.reduce((a, b) => a + b, 0) / Math.max(1, times.length)),
  non2xx,
  errors,
  timeouts,
  graphqlErrors,
  statusCodes,
  variantUsed: next,
  exhausted: spec.maxRequests !== undefined && next >= spec.maxRequests,
  bytesPerSec,
  ...(spec.countRetryAfter ? { retryAfter429 } : {}),
};
writeFileSync(resultFile, JSON.stringify(result));
process.exit(0);
