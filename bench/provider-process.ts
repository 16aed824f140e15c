/**
 * The reference provider as a process of its own for the dashboards bench (bench/dashboards.ts), so that
 * generating and sending tens of thousands of points does not run on the event loop of the service under
 * test (which the bench builds in its own process). Usage:
 *
 *   PORT=… BENCH_PROVIDER_LATENCY_MS=20 BENCH_PROVIDER_PAGE_SIZE=1000 BENCH_PROVIDER_ANCHOR=2026-11-20 \
 *     node --import tsx bench/provider-process.ts
 *
 * Beside the provider's own routes, `GET /bench/stats` answers its counters: `getDataPointsCalls` (the
 * provider's counter), `abandoned` (get-data-points calls whose connection closed before the answer was
 * sent: the caller gave up, e.g. its time-out), `repeated` (calls asking for a page asked for before:
 * retries), `statuses` (answers by status) and `slowestMs` (the slowest answer since the last
 * `POST /bench/stats`, from the request's arrival to its end). Each call is logged on stdout.
 */
import { createServer } from 'node:http';
import { createReferenceProvider } from '../src/provider/reference-provider.js';

const env = (name: string) => {
  const v = process.env[name];
  if (v === undefined || v === '') throw new Error(`${name} is required`);
  return v;
};
const provider = createReferenceProvider({
  latencyMs: Number(env('BENCH_PROVIDER_LATENCY_MS')),
  pageSize: Number(env('BENCH_PROVIDER_PAGE_SIZE')),
  anchorDate: env('BENCH_PROVIDER_ANCHOR'),
});
const counters = { abandoned: 0, slowestMs: 0, repeated: 0, statuses: {} as Record<string, number> };
/** The calls answered so far, by extract, first subject identifier and cursor: a call asked again is a repeat. */
const seen = new Set<string>();

const server = createServer((req, res) => {
  if (req.url === '/bench/stats') {
    if (req.method === 'POST') counters.slowestMs = 0;
    res.setHeader('content-type', 'application/json');
    res.end(
      JSON.stringify({ getDataPointsCalls: provider.stats().getDataPointsCalls, ...counters, slowestMs: Math.round(counters.slowestMs) }),
    );
    return;
  }
  if (req.url?.startsWith('/get-data-points')) {
    const t0 = performance.now();
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    res.once('close', () => {
      const ms = performance.now() - t0;
      if (!res.writableFinished) counters.abandoned++;
      counters.slowestMs = Math.max(counters.slowestMs, ms);
      counters.statuses[res.statusCode] = (counters.statuses[res.statusCode] ?? 0) + 1;
      let key = '?';
      try {
        const b = JSON.parse(body) as {
          SubjectIdentifiers: string[];
          PagingRequest: { After: string | null };
          DataExtract: { Key: string };
        };
        key = `${b.DataExtract.Key} ${b.SubjectIdentifiers[0]} (${b.SubjectIdentifiers.length}) ${b.PagingRequest.After ?? 'first page'}`;
      } catch {
        // not JSON: the provider answered 400
      }
      if (seen.has(key)) counters.repeated++;
      seen.add(key);
      // One line per call (the bench's work dir, kept with BENCH_KEEP): what was asked again, and when.
      console.log(
        `${(t0 / 1000).toFixed(3)} s  ${key}  ${res.statusCode}  ${ms.toFixed(0)} ms${res.writableFinished ? '' : '  ABANDONED'}`,
      );
    });
  }
  provider.app(req, res);
});
server.listen(Number(env('PORT')), '127.0.0.1', () => console.log(`reference provider listening on ${env('PORT')}`));
const stop = () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
