import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, readSteps } from './fake-provider.js';

// The circuit breaker of a data source (issue 15), through GraphQL against a loopback fake provider: it
// opens when at least PROVIDER_BREAKER_FAILURES calls within PROVIDER_BREAKER_WINDOW_MS were made and
// PROVIDER_BREAKER_THRESHOLD of them failed, probes after PROVIDER_BREAKER_PROBE_MS (default 1 s, doubled
// while probes fail, up to PROVIDER_BREAKER_OPEN_MS) and logs each state change once, not each read it refuses. An open circuit
// refuses only reads that have older data to serve (issue 30, F7, P88; test/hardening-provider-faults.test.ts).

interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

const WARN = 40;
const DEBUG = 20;
const OPENED = 'data provider circuit opened';
const HALF_OPEN = 'data provider circuit half-open: probing';
const CLOSED = 'data provider circuit closed';
const CALL_FAILED = 'data provider call failed';

const logs: LogLine[] = [];
let app: TestApp;
const providers: FakeProvider[] = [];

beforeAll(async () => {
  // One attempt per call, so that a read is one call through the breaker; the first probe delay is the
  // default, doubled up to 30 s (the default stops at 1.5 s).
  app = await startApp(
    {
      LOG_LEVEL: 'debug',
      PROVIDER_RETRIES: '0',
      PROVIDER_BACKOFF_MS: '1',
      PROVIDER_BREAKER_WINDOW_MS: '5000',
      PROVIDER_BREAKER_OPEN_MS: '30000',
    },
    { logStream: { write: (line: string) => logs.push(JSON.parse(line) as LogLine) } },
  );
});
afterAll(async () => {
  await app?.close();
  await Promise.all(providers.map((p) => p.close()));
});

/**
 * A data tenant of 3 subjects on a fresh fake provider (so a circuit of its own), and its test's log
 * lines: those logged from now on (tests run one after another).
 */
async function setup() {
  const provider = await new FakeProvider().start();
  // One page per read.
  provider.pageSize = 100;
  providers.push(provider);
  const from = logs.length;
  const t = await createDataTenant(app, provider, 3);
  return { provider, t, lines: (msg?: string) => logs.slice(from).filter((l) => msg === undefined || l.msg === msg) };
}

/** One GraphQL read of a subject's `steps` data points (E-01 unless told): their count, or the error code. */
async function read(t: DataTenant, subject = 'E-01'): Promise<number | string> {
  const r = await readSteps(t, subject);
  return typeof r === 'string' ? r : r.count;
}

describe('data provider circuit breaker', () => {
  it('stays closed after a burst of fewer failed calls than PROVIDER_BREAKER_FAILURES, all of them failing', async () => {
    const { provider, t, lines } = await setup();
    provider.always = { status: 503 };
    for (let i = 0; i < 4; i++) expect(await read(t)).toBe('PROVIDER_UNAVAILABLE');
    expect(provider.fetches()).toHaveLength(4);
    provider.always = undefined;
    // At once, no probe delay: the circuit never opened.
    expect(await read(t)).toBe(3);
    expect(provider.fetches()).toHaveLength(5);
    expect(lines(CALL_FAILED).filter((l) => l.level === WARN)).toHaveLength(4);
    expect(lines(OPENED)).toEqual([]);
  });

  it('opens on a burst of failures, refuses reads that have older data (served stale) without a warning each, and closes 2 s after the provider recovers', async () => {
    const { provider, t, lines } = await setup();
    // E-02 cached: its read is one of the window's 5 calls, so the fourth failure opens the circuit.
    expect(await read(t, 'E-02')).toBe(3);
    provider.always = { status: 503 };
    for (let i = 0; i < 4; i++) expect(await read(t)).toBe('PROVIDER_UNAVAILABLE');
    expect(provider.fetches()).toHaveLength(5);
    expect(lines(OPENED)).toEqual([
      expect.objectContaining({ level: WARN, dataSource: 'wearables', reason: 'The provider answered 503.', probeInMs: 1000 }),
    ]);
    // E-02's set flagged: its reads would go to the provider, and have older data to serve (D10).
    expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);

    // Open: refused without calling the provider (P88: only reads with something to serve), logged at debug only.
    const refused = await Promise.all(Array.from({ length: 10 }, () => readSteps(t, 'E-02')));
    expect(refused).toEqual(Array(10).fill({ count: 3, stale: true }));
    expect(provider.fetches()).toHaveLength(5);
    const warnings = () =>
      lines()
        .filter((l) => l.level >= WARN)
        .map((l) => l.msg)
        .sort();
    expect(warnings()).toEqual([...Array(4).fill(CALL_FAILED), OPENED].sort());
    expect(lines(CALL_FAILED).filter((l) => l.level === DEBUG).length).toBeGreaterThanOrEqual(10);

    provider.always = undefined;
    await sleep(2000);
    expect(await readSteps(t, 'E-02')).toEqual({ count: 3, stale: false });
    expect(provider.fetches()).toHaveLength(6);
    expect(lines(OPENED)).toHaveLength(1);
    expect(lines(HALF_OPEN)).toHaveLength(1);
    expect(lines(CLOSED)).toEqual([expect.objectContaining({ dataSource: 'wearables' })]);
    expect(warnings()).toHaveLength(5);
  });

  // P35: the probe delay doubles while probes fail and resets once one succeeds.
  it('doubles the probe delay while probes fail, and starts again from 1 s after it closed', async () => {
    const { provider, t, lines } = await setup();
    expect(await read(t, 'E-02')).toBe(3);
    provider.always = { status: 503 };
    for (let i = 0; i < 4; i++) await read(t);
    expect(lines(OPENED).map((l) => l.probeInMs)).toEqual([1000]);
    expect((await t.api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);

    await sleep(1100);
    // A read with older data is the probe once the delay is over: it reaches the provider, fails, and the
    // circuit opens again for 2 s.
    expect(await readSteps(t, 'E-02')).toEqual({ count: 3, stale: true });
    expect(provider.fetches()).toHaveLength(6);
    expect(lines(OPENED).map((l) => l.probeInMs)).toEqual([1000, 2000]);
    await sleep(1200);
    expect(await readSteps(t, 'E-02')).toEqual({ count: 3, stale: true });
    expect(provider.fetches()).toHaveLength(6);

    provider.always = undefined;
    await sleep(900);
    expect(await readSteps(t, 'E-02')).toEqual({ count: 3, stale: false });
    expect(lines(CLOSED)).toHaveLength(1);

    // Failing again (E-03, nothing cached): the successful probe is one of the window's 5 calls, so the
    // fourth failure opens the circuit, 1 s away from its probe again; the fifth read, with nothing to
    // serve, is that probe at once (P88), and its failure doubles the delay.
    provider.always = { status: 503 };
    for (let i = 0; i < 5; i++) expect(await read(t, 'E-03')).toBe('PROVIDER_UNAVAILABLE');
    expect(provider.fetches()).toHaveLength(7 + 5);
    expect(lines(OPENED).map((l) => l.probeInMs)).toEqual([1000, 2000, 1000, 2000]);
  });
});
