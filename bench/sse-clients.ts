/**
 * The dashboards bench's subscribers (bench/dashboards.ts): a child process, pinned to the load core by
 * the harness, holding many GraphQL subscriptions over Yoga's SSE transport (POST /graphql with
 * `Accept: text/event-stream`), one socket each, so that the server's memory (in the harness process) holds
 * only the server's side of them. Driven over the IPC channel:
 *
 *   → { type: 'open', url, headers, body, count, concurrency }   ← { type: 'opened', established, failures, ms }
 *   → { type: 'collect', expect, timeoutMs }                     ← { type: 'collected', arrivals, events, errors }
 *   → { type: 'close' }                                          ← { type: 'closed' }, then it exits
 *
 * A stream counts as established when its first bytes arrive (Yoga writes an SSE comment `:` once the
 * subscription is registered). Arrival times are epoch milliseconds with sub-millisecond resolution
 * (`performance.timeOrigin + performance.now()`), comparable with the harness's own. Imports nothing from
 * src/: the process stays small beside the server.
 */
import http from 'node:http';

export type ToClients =
  | { type: 'open'; url: string; headers: Record<string, string>; body: string; count: number; concurrency: number }
  | { type: 'collect'; expect: number; timeoutMs: number }
  | { type: 'close' };

export type FromClients =
  | { type: 'opened'; established: number; failures: string[]; ms: number }
  /** `arrivals`: per stream that got its `expect`-th event, when (epoch ms); `events`: the first event's data of one stream. */
  | { type: 'collected'; arrivals: number[]; sample: unknown; errors: string[]; ended: number }
  | { type: 'closed' }
  | { type: 'error'; message: string };

/** Now in epoch milliseconds, sub-millisecond: comparable across processes on one machine. */
export const epochNow = () => performance.timeOrigin + performance.now();

interface Stream {
  req: http.ClientRequest;
  /**
   * `event: next` data as it arrived, with when, parsed only when collected: the arrival times of a burst
   * reaching many streams at once are not stretched by this process parsing each one in turn.
   */
  unread: { at: number; data: string }[];
  /** Events received (`event: next` with data). */
  events: number;
  /** Arrival of each event, epoch ms. */
  arrivals: number[];
  first?: unknown;
  errors: string[];
  ended: boolean;
}

const send = (m: FromClients) => process.send?.(m);

/** The stream's events parsed: an answer counts as an event, a result with errors as its errors. */
function parse(s: Stream): void {
  for (const { at, data } of s.unread.splice(0)) {
    const result = JSON.parse(data) as { data?: unknown; errors?: { message: string }[] };
    if (result.errors?.length) s.errors.push(...result.errors.map((e) => e.message));
    else {
      s.events++;
      s.arrivals.push(at);
      s.first ??= result.data;
    }
  }
}

function openStream(
  agent: http.Agent,
  m: Extract<ToClients, { type: 'open' }>,
  streams: Stream[],
): Promise<{ ok: true } | { ok: false; reason: string }> {
  return new Promise((resolve) => {
    const u = new URL('/graphql', m.url);
    let settled = false;
    const settle = (r: { ok: true } | { ok: false; reason: string }) => {
      if (!settled) {
        settled = true;
        resolve(r);
      }
    };
    const req = http.request(
      u,
      {
        method: 'POST',
        agent,
        headers: {
          ...m.headers,
          'content-type': 'application/json',
          accept: 'text/event-stream',
          'content-length': Buffer.byteLength(m.body),
        },
      },
      (res) => {
        if (res.statusCode !== 200 || !String(res.headers['content-type']).startsWith('text/event-stream')) {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () =>
            settle({ ok: false, reason: `${res.statusCode} ${String(res.headers['content-type'])}: ${text.slice(0, 300)}` }),
          );
          return;
        }
        const s: Stream = { req, unread: [], events: 0, arrivals: [], errors: [], ended: false };
        let buffer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const at = epochNow();
          if (!settled) {
            streams.push(s);
            settle({ ok: true });
          }
          buffer += chunk;
          let cut: number;
          while ((cut = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const lines = block.split('\n');
            const event = lines
              .find((l) => l.startsWith('event:'))
              ?.slice(6)
              .trim();
            const data = lines
              .filter((l) => l.startsWith('data:'))
              .map((l) => l.slice(5).trimStart())
              .join('\n');
            if (event === 'complete') s.ended = true;
            else if (event === 'next' && data) s.unread.push({ at, data });
          }
        });
        res.on('end', () => (s.ended = true));
      },
    );
    req.on('error', (e) => settle({ ok: false, reason: e.message }));
    req.end(m.body);
  });
}

async function main() {
  // Each stream holds its socket for its whole life: no pooling limit.
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const streams: Stream[] = [];
  process.on('disconnect', () => process.exit(0));
  process.on('message', (raw) => {
    const m = raw as ToClients;
    void (async () => {
      if (m.type === 'open') {
        const t0 = performance.now();
        const failures: string[] = [];
        let next = 0;
        const worker = async () => {
          while (next < m.count) {
            next++;
            const r = await openStream(agent, m, streams);
            if (!r.ok) failures.push(r.reason);
          }
        };
        await Promise.all(Array.from({ length: Math.max(1, Math.min(m.concurrency, m.count)) }, worker));
        send({ type: 'opened', established: streams.length, failures: failures.slice(0, 20), ms: performance.now() - t0 });
      } else if (m.type === 'collect') {
        const until = performance.now() + m.timeoutMs;
        // Events unread count here (an error among them ends the wait as the stream's end would, once parsed).
        const done = () => streams.every((s) => s.events + s.unread.length >= m.expect || s.ended || s.errors.length > 0);
        while (!done() && performance.now() < until) await new Promise((r) => setTimeout(r, 5));
        for (const s of streams) parse(s);
        send({
          type: 'collected',
          arrivals: streams.filter((s) => s.arrivals.length >= m.expect).map((s) => s.arrivals[m.expect - 1]!),
          sample: streams.find((s) => s.first !== undefined)?.first,
          errors: [...new Set(streams.flatMap((s) => s.errors))].slice(0, 20),
          ended: streams.filter((s) => s.ended).length,
        });
      } else if (m.type === 'close') {
        for (const s of streams.splice(0)) s.req.destroy();
        agent.destroy();
        // Exits once the answer is out (the harness waits for the exit).
        process.send?.({ type: 'closed' } satisfies FromClients, () => process.exit(0));
      }
    })().catch((e: unknown) => send({ type: 'error', message: e instanceof Error ? e.message : String(e) }));
  });
}

await main();
