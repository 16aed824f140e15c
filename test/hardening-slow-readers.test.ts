import { type Socket, connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type TestApp, type TestTenant, createTenant, startApp } from './helpers.js';

// Issue 30, F1: a client that reads slowly holds no admission units, and output it does not take within
// RESPONSE_WRITE_TIMEOUT_MS ends its connection (P77, P78). Before: the units of a request went back only
// when its response closed, so one slow reader of a large answer in each of two tenants held the whole
// instance (5 + 5 units of 10) and every other tenant got 503 for as long as they read.

/** Subjects per reading tenant, each with a 50 KB value: one page of them is a ~10 MB answer. */
const SUBJECTS = 200;
const LONG = 'x'.repeat(50_000);
const BIG_PAGE = `{ subjects(first: ${SUBJECTS}) { edges { node { externalId customFieldValues { field { key } values { valueText } } } } } }`;
const STREAMED = `{ subjects(first: ${SUBJECTS}) { edges @stream(initialCount: 1) { node { externalId customFieldValues { values { valueText } } } } } }`;

let app: TestApp;
let readers: TestTenant[];
let other: ApiClient;

beforeAll(async () => {
  // A queue wait of 1 s: a request that cannot be admitted within it is refused (429/503), so "answers 200"
  // below means "was admitted within a second". The instance holds 10 units, a tenant 5, and each big page
  // weighs a tenant's whole share (its cost over 200 per unit).
  app = await startApp({
    ADMISSION_CAPACITY: '10',
    ADMISSION_QUEUE_TIMEOUT_MS: '1000',
    ADMISSION_COST_PER_UNIT: '200',
    RESPONSE_WRITE_TIMEOUT_MS: '10000',
    MAIL_POLL_MS: '3600000',
  });
  readers = [await createTenant(app), await createTenant(app)];
  for (const tenant of readers) {
    const api = await tenant.client();
    for (let chunk = 0; chunk < SUBJECTS; chunk += 5) {
      const created = await Promise.all(
        Array.from({ length: 5 }, (_, j) =>
          api.post('/api/v2/messaging/subject', {
            CustomFieldValues: [
              { Key: 'employeeNumber', Value: { String: { Value: `S${chunk + j}` } } },
              { Key: 'fullName', Value: { String: { Value: `Slow ${chunk + j}` } } },
              { Key: 'email', Value: { String: { Value: LONG } } },
            ],
          }),
        ),
      );
      expect(created.map((r) => r.status)).toEqual(created.map(() => 201));
    }
  }
  other = await (await createTenant(app)).client();
  await other.post('/api/v2/messaging/subject', {
    CustomFieldValues: [
      { Key: 'employeeNumber', Value: { String: { Value: 'O-1' } } },
      { Key: 'fullName', Value: { String: { Value: 'Other One' } } },
    ],
  });
}, 180_000);
afterAll(() => app?.close());

interface SlowReader {
  /** Bytes read so far (headers included). */
  readonly received: () => number;
  /** Reads the rest at full speed; resolves with the whole text once the connection has ended. */
  rest(): Promise<string>;
  stop(): void;
}

/**
 * POSTs a GraphQL document over a raw socket and reads the answer at `bytesPerSecond` (in 256-byte sips
 * from the socket's buffer: the kernel's window then stays as small as a slow client's), or not at all.
 */
function slowReader(token: string, query: string, bytesPerSecond: number, accept = 'application/json'): SlowReader {
  const body = JSON.stringify({ query });
  const socket: Socket = connect(Number(new URL(app.url).port), '127.0.0.1');
  const chunks: Buffer[] = [];
  let received = 0;
  const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  socket.write(
    `POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n` +
      `Accept: ${accept}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  socket.pause();
  const sip = 256;
  const timer =
    bytesPerSecond > 0
      ? setInterval(
          () => {
            const chunk = socket.read(sip) as Buffer | null;
            if (chunk) chunks.push(chunk);
            if (chunk) received += chunk.length;
          },
          (1000 * sip) / bytesPerSecond,
        )
      : undefined;
  void ended.then(() => clearInterval(timer));
  return {
    received: () => received,
    rest: async () => {
      clearInterval(timer);
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.resume();
      await ended;
      return Buffer.concat(chunks).toString();
    },
    stop: () => {
      clearInterval(timer);
      socket.destroy();
    },
  };
}

async function metric(name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${app.url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : 0;
}

/** Admission units held now by one tenant (absent: none). */
const unitsOf = (tenant: string) => metric('admission_in_flight_units', `tenant="${tenant}"`);

async function until(check: () => Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('a slow reader holds no admission units (F1)', () => {
  it('with a 2 KB/s reader of a 10 MB answer in each of two tenants, a third tenant is served 200 at once, every time', async () => {
    const slow = await Promise.all(readers.map(async (t) => slowReader(await t.token(), BIG_PAGE, 2048)));
    try {
      // The answers were produced (their units back) while both readers are still at their first kilobytes.
      await until(async () => slow.every((s) => s.received() > 0), 20_000);
      // Before the deadline (10 s) could have cut them.
      await until(async () => (await Promise.all(readers.map((t) => unitsOf(t.key)))).every((u) => u === 0), 8_000);
      for (let i = 0; i < 10; i++) {
        const list = await other.get('/api/v2/subject');
        expect(list.status).toBe(200);
        expect(list.body.Edges.map((e: any) => e.Node.ExternalId)).toEqual(['O-1']);
        const page = await other.gql('{ subjects(first: 10) { edges { node { externalId } } } }');
        expect(page.status).toBe(200);
        expect(page.body.data.subjects.edges).toEqual([{ node: { externalId: 'O-1' } }]);
      }
      // The slow readers' own tenants are served too: nothing of theirs is held.
      for (const t of readers) expect((await (await t.client()).get('/api/v2/subject?First=1')).status).toBe(200);
      // All of it while both readers were still connected, at their first kilobytes (the deadline cut none).
      expect(await metric('http_responses_cut_total', 'kind="answer"')).toBe(0);
      for (const s of slow) expect(s.received()).toBeLessThan(100_000);
    } finally {
      for (const s of slow) s.stop();
    }
  });
});

describe('a response not taken within RESPONSE_WRITE_TIMEOUT_MS ends its connection (F1)', () => {
  // P79: a slow reader holds its answer's memory for the deadline at most.
  it('a reader that stops reading a large answer is cut after the deadline and counted; a prompt reader of the same answer gets all of it', async () => {
    const before = await metric('http_responses_cut_total', 'kind="answer"');
    const stalled = slowReader(await readers[0]!.token(), BIG_PAGE, 0);
    const started = Date.now();
    await until(async () => (await metric('http_responses_cut_total', 'kind="answer"')) === before + 1, 20_000);
    // Cut by the deadline (10 s here), not by anything earlier.
    expect(Date.now() - started).toBeGreaterThanOrEqual(9_500);
    // What the kernel had taken before the cut still arrives, then the connection ends: a truncated answer.
    const text = await stalled.rest();
    expect(text).toMatch(/^HTTP\/1\.1 200 /);
    const length = Number(/content-length: (\d+)/i.exec(text)![1]);
    expect(text.length - text.indexOf('\r\n\r\n') - 4).toBeLessThan(length);

    const whole = await (await readers[0]!.client()).gql(BIG_PAGE);
    expect(whole.status).toBe(200);
    expect(whole.body.data.subjects.edges).toHaveLength(SUBJECTS);
    expect(await metric('http_responses_cut_total', 'kind="answer"')).toBe(before + 1);
  }, 60_000);

  it('a @stream reader that stops draining is cut (multipart and SSE), and its units go back', async () => {
    const tenant = readers[1]!;
    for (const accept of ['multipart/mixed', 'text/event-stream']) {
      const before = await metric('http_responses_cut_total', 'kind="stream"');
      const stalled = slowReader(await tenant.token(), STREAMED, 0, accept);
      await until(async () => (await metric('http_responses_cut_total', 'kind="stream"')) === before + 1, 20_000);
      await until(async () => (await unitsOf(tenant.key)) === 0, 5_000);
      // Cut before its last part: the stream never says it is complete.
      const text = await stalled.rest();
      expect(text).toMatch(/"hasNext":true/);
      expect(text).not.toMatch(/"hasNext":false/);
    }
  }, 60_000);
});
