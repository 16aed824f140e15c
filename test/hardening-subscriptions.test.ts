import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Delivery, MAX_PENDING_BURSTS } from '../src/domains/data/index.js';
import { type TestApp, startApp } from './helpers.js';
import { type DataTenant, FakeProvider, createDataTenant, eventually } from './fake-provider.js';
import { ANY_PRINCIPAL as principal, Subscriber, feedWithBus } from './live-updates.js';

// Issue 30, F2: a change report with no filter flags every extract of its source, one live event each, in
// one transaction; with more extracts than MAX_PENDING_BURSTS the events arrive together, and a subscriber
// that read promptly was ended with SLOW_CONSUMER after one. A subscriber is judged by what really waits
// (P91): one report's (one transaction's) changes are one burst of pressure, so a reader that keeps up hears
// them all; a reader that does not read is still ended once more bursts than the bound wait unread.

const CHANGE = '/connector-dataprovider/api/v1/dataChange/creationOrUpdate';
const EXTRACTS = 66;
const SUBSCRIPTION = `subscription { dataPointsChanged { extractKey subjectIds kind at } }`;

let app: TestApp;
let provider: FakeProvider;
let t: DataTenant;
const keys = Array.from({ length: EXTRACTS }, (_, i) => `x${String(i).padStart(2, '0')}`);

beforeAll(async () => {
  provider = await new FakeProvider().start();
  app = await startApp({ PROVIDER_BACKOFF_MS: '1' });
  t = await createDataTenant(app, provider, 2, {
    dataExtracts: keys.map((key, i) => ({ key, name: `Extract ${i}`, dataSourceKey: 'wearables', options: { metric: `m${i}` } })),
  });
});
afterAll(async () => {
  await app?.close();
  await provider?.close();
});

describe('a change report that flags more extracts than MAX_PENDING_BURSTS (over SSE)', () => {
  // P101: one report is one invalidate call, so one burst however many extracts it flags.
  it('reaches a prompt reader whole, report after report, and the stream stays open', async () => {
    expect(EXTRACTS).toBeGreaterThan(MAX_PENDING_BURSTS);
    const reader = new Subscriber(app.url, await t.tenant.token(), SUBSCRIPTION);
    try {
      await reader.ready;
      expect(reader.ended).toBeUndefined();
      for (let report = 1; report <= 3; report++) {
        const res = await t.provider.post(CHANGE, { SubjectIdentifier: 'E-01', DataExtractsOptionsValuesFilter: {} });
        expect(res.status).toBe(200);
        expect(res.body.FlaggedDataExtractKeys).toHaveLength(EXTRACTS);
        await eventually(() => reader.changes.length >= EXTRACTS * report || reader.ended !== undefined, 10_000);
        expect(reader.errors.map((e) => e.extensions?.code)).toEqual([]);
        expect(reader.ended).toBeUndefined();
        const heard = reader.changes.slice(EXTRACTS * (report - 1));
        expect(new Set(heard.map((c) => c.extractKey))).toEqual(new Set(keys));
        expect(heard.every((c) => c.kind === 'CHANGED' && c.subjectIds.length === 1 && c.subjectIds[0] === t.subjects.get('E-01'))).toBe(
          true,
        );
      }
    } finally {
      reader.close();
    }
  });
});

describe('what counts as waiting (the feed, read or not by hand)', () => {
  const ev = (x: string, b?: string) => ({ t: 't1', x, s: ['s'], k: 'CHANGED', a: new Date().toISOString(), ...(b ? { b } : {}) });
  const take = async (it: AsyncIterator<Delivery>, n: number) => {
    const out: Delivery[] = [];
    for (let i = 0; i < n; i++) out.push((await it.next()).value as Delivery);
    return out;
  };
  const code = (d: Delivery | undefined) => (d && 'end' in d ? d.end.extensions['code'] : undefined);

  it('one burst of any size waits as one: all of it is delivered, nothing ends', async () => {
    const { feed: f, send } = await feedWithBus();
    const it = f.open(principal, {});
    for (const key of keys) send(ev(key, 'report-1'));
    // A second burst over the same extracts merges into what waits.
    for (const key of keys) send(ev(key, 'report-2'));
    const got = await take(it, EXTRACTS);
    expect(got.map(code)).toEqual(keys.map(() => undefined));
    expect(got.map((d) => 'change' in d && d.change.extractKey)).toEqual(keys);
    expect(f.size).toBe(1);
    f.close();
  });

  it(`a reader with more than MAX_PENDING_BURSTS bursts unread is ended with SLOW_CONSUMER`, async () => {
    const { feed: f, send } = await feedWithBus();
    const it = f.open(principal, {});
    for (let i = 0; i < MAX_PENDING_BURSTS; i++) send(ev(`y${i}`, `report-${i}`));
    expect(f.size).toBe(1);
    send(ev('one-more', 'report-last'));
    const [d] = await take(it, 1);
    expect(code(d)).toBe('SLOW_CONSUMER');
    expect(await it.next()).toEqual({ value: undefined, done: true });
    expect(f.size).toBe(0);
    f.close();
  });

  it('reading frees what was read: a reader that keeps pace with many bursts is never ended', async () => {
    const { feed: f, send } = await feedWithBus();
    const it = f.open(principal, {});
    for (let round = 0; round < 10; round++) {
      for (let i = 0; i < MAX_PENDING_BURSTS; i++) send(ev(`z${i}`, `r${round}-${i}`));
      const got = await take(it, MAX_PENDING_BURSTS);
      expect(got.map(code).filter(Boolean)).toEqual([]);
    }
    expect(f.size).toBe(1);
    f.close();
  });
});
