import { Worker } from 'node:worker_threads';

// The token flood of issue 30, F11 (P80-P82): bad-secret token requests kept in flight through real HTTP
// from a worker thread (its own event loop), from a chosen loopback address (Linux routes all of 127/8
// to loopback). Used by test/hardening-token-flood.test.ts and bench/token-flood.ts alike.

export const IN_FLIGHT = 1_000;
/**
 * Each flood request is sent again about this long after its answer (uniformly 0-2x, so the flood rolls
 * instead of coming in waves): up to 200 attempts a second once they are answered fast, 4 times the
 * issue's measured 45/s. Sent again at once, the flood becomes a request flood at the HTTP server's full
 * rate, which any endpoint (a 401 on /graphql) suffers alike and only a proxy in front can bound (P81).
 */
export const RESEND_AFTER_MS = Number(process.env['FLOOD_RESEND_MS'] ?? 5_000);

export interface FloodStats {
  answered: number;
  byStatus: Record<string, number>;
  /** Answers 429/503 that carried Retry-After. */
  retryAfter: number;
  /** Answer times of the 429 and 503 answers after the first burst, ms: median and 99th percentile. */
  refusedP50: number;
  refusedP99: number;
}

/**
 * Keeps IN_FLIGHT bad-secret token requests open against `url` from `localAddress`, each sent again
 * about RESEND_AFTER_MS after its answer, until stopped. `bodies` are the form bodies, used in turn.
 */
export class Flood {
  private readonly worker: Worker;
  private readonly ready: Promise<void>;

  constructor(url: string, localAddress: string, bodies: string[]) {
    this.worker = new Worker(FLOOD_SOURCE, {
      eval: true,
      workerData: { url, localAddress, bodies, inFlight: IN_FLIGHT, resendAfterMs: RESEND_AFTER_MS },
    });
    this.ready = new Promise((resolve, reject) => {
      this.worker.once('message', () => resolve());
      this.worker.once('error', reject);
    });
  }

  /** Resolves once every request was sent once (so IN_FLIGHT are open or were answered). */
  started(): Promise<void> {
    return this.ready;
  }

  async stop(): Promise<FloodStats> {
    const stats = new Promise<FloodStats>((resolve) =>
      this.worker.on('message', (m: { stats?: FloodStats }) => m.stats && resolve(m.stats)),
    );
    this.worker.postMessage('stop');
    const s = await stats;
    await this.worker.terminate();
    return s;
  }
}

const FLOOD_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const { url, localAddress, bodies, inFlight, resendAfterMs } = workerData;
const target = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: inFlight });
const stats = { answered: 0, byStatus: {}, retryAfter: 0 };
const refused = [];
let stopping = false;
let open = 0;
let sent = 0;
function send(i) {
  if (stopping) {
    if (--open === 0) {
      refused.sort((a, b) => a - b);
      const at = (q) => refused.length ? Math.round(refused[Math.min(refused.length - 1, Math.ceil(refused.length * q) - 1)]) : 0;
      parentPort.postMessage({ stats: { ...stats, refusedP50: at(0.5), refusedP99: at(0.99) } });
    }
    return;
  }
  const body = bodies[i % bodies.length];
  const t0 = performance.now();
  const req = http.request({
    host: target.hostname, port: target.port, path: '/connect/token', method: 'POST', agent, localAddress,
    headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) },
  }, (res) => {
    res.resume();
    res.on('end', () => {
      stats.answered++;
      stats.byStatus[res.statusCode] = (stats.byStatus[res.statusCode] ?? 0) + 1;
      if (res.headers['retry-after']) stats.retryAfter++;
      // Timed after the first burst: 1,000 requests at once queue in the HTTP server itself.
      if ((res.statusCode === 429 || res.statusCode === 503) && i >= inFlight) refused.push(performance.now() - t0);
      setTimeout(() => send(i + inFlight), Math.random() * 2 * resendAfterMs);
    });
  });
  req.on('error', (e) => {
    if (stopping) return send(i);
    const k = 'error ' + e.code;
    stats.byStatus[k] = (stats.byStatus[k] ?? 0) + 1;
    setTimeout(() => send(i + inFlight), Math.random() * 2 * resendAfterMs);
  });
  req.end(body);
  if (++sent === inFlight) parentPort.postMessage({ started: true });
}
open = inFlight;
for (let i = 0; i < inFlight; i++) send(i);
parentPort.on('message', () => {
  stopping = true;
  agent.destroy();
});
`;
