import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DirectiveLocation, GraphQLBoolean, GraphQLDirective, GraphQLSchema, GraphQLString, parse, validate } from 'graphql';
import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserAvailable, loopbackPage } from './browser.js';
import { schema } from '../src/app/schema.js';
import { DASHBOARD_QUERIES } from '../web/dashboard/queries.js';
import { type TestApp, freePort, startApp } from './helpers.js';

// Issue 17, the demo dashboard at GET /dashboard: served outside production like GraphiQL, its assets from
// the installed packages; in a headless browser on the demo tenant and the reference provider (as
// `npm start` serves them), it renders a non-empty chart and shows a change that the provider's notify
// command posts within 2 s.

const hasBrowser = browserAvailable('test/dashboard.test.ts');

// page.evaluate callbacks run in the page; the project's types are Node's (no DOM library).
declare const document: any;
declare const window: any;

const NODE = process.execPath;
/** A number as the page formats it (Chromium's en-US: grouped thousands, at most 2 decimals). */
const NUMBER = /^\d{1,3}(?:,\d{3})*(?:\.\d{1,2})?$/;
const parseNumber = (text: string) => Number(text.replaceAll(',', ''));
const ASSETS = ['/dashboard/app.js', '/dashboard/app.css', '/dashboard/uplot.js', '/dashboard/uplot.css'];

describe('GET /dashboard over HTTP', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(async () => {
    await app?.close();
  });

  // P98: the page's script and styles are web/'s files, built into dist/web/, no inline code.
  it('serves the page with a token form, loading only its own assets, under a Content-Security-Policy', async () => {
    const res = await fetch(`${app.url}/dashboard`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.headers.get('content-security-policy')).toMatch(
      /default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'/,
    );
    const html = await res.text();
    expect(html).toContain('<form id="ssdi-token"');
    // The demo client is offered outside production, as GraphiQL's form does.
    expect(html).toContain('value="demo-client"');
    const refs = [...html.matchAll(/\b(?:src|href)="([^"]*)"/g)].map((m) => m[1]).filter((ref) => ref !== 'data:,'); // no icon
    expect(refs.sort()).toEqual([...ASSETS].sort());
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/i); // no inline script
    expect(html).not.toMatch(/<style/i);
  });

  it('serves the chart library from the installed uplot package, and its own script with the queries it sends', async () => {
    const lib = await fetch(`${app.url}/dashboard/uplot.js`);
    expect(lib.status).toBe(200);
    expect(lib.headers.get('content-type')).toMatch(/^text\/javascript/);
    const file = createRequire(import.meta.url).resolve('uplot/dist/uPlot.iife.min.js');
    expect(await lib.text()).toBe(await readFile(file, 'utf8'));
    const css = await fetch(`${app.url}/dashboard/uplot.css`);
    expect(css.headers.get('content-type')).toMatch(/^text\/css/);
    const script = await (await fetch(`${app.url}/dashboard/app.js`)).text();
    for (const field of ['dataPointAggregates(input: $input)', '@defer', 'dataPointsChanged(']) expect(script).toContain(field);
    expect(script).not.toMatch(/https?:\/\//);
  });

  it("sends only documents valid against the service's schema (with @defer, which /graphql adds)", () => {
    const defer = new GraphQLDirective({
      name: 'defer',
      locations: [DirectiveLocation.FRAGMENT_SPREAD, DirectiveLocation.INLINE_FRAGMENT],
      args: { if: { type: GraphQLBoolean }, label: { type: GraphQLString } },
    });
    const served = new GraphQLSchema({ ...schema.toConfig(), directives: [...schema.getDirectives(), defer] });
    for (const [name, document] of Object.entries(DASHBOARD_QUERIES)) {
      expect({ name, errors: validate(served, parse(document)).map((e) => e.message) }).toEqual({ name, errors: [] });
    }
  });

  it('answers other methods 405 with Allow, and paths below it 404', async () => {
    const post = await fetch(`${app.url}/dashboard`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD, OPTIONS');
    expect((await fetch(`${app.url}/dashboard/nothing.js`)).status).toBe(404);
  });

  it('is not served with DASHBOARD=false, nor in production', async () => {
    for (const env of [{ DASHBOARD: 'false' }, { NODE_ENV: 'production' }] as Record<string, string>[]) {
      const off = await startApp(env);
      try {
        for (const p of ['/dashboard', ...ASSETS]) expect((await fetch(`${off.url}${p}`)).status).toBe(404);
      } finally {
        await off.close();
      }
    }
  });
});

describe.skipIf(!hasBrowser)('the dashboard in a headless browser, on the demo tenant and the reference provider', () => {
  let dir: string;
  let server: ChildProcess;
  let output = '';
  let base: string;
  let providerUrl: string;
  let browser: Browser;
  let page: Page;
  /** Requests the page made to anywhere but the service on loopback (aborted). */
  const outside: string[] = [];
  /** Errors the page logged (CSP violations are logged as console errors) or threw. */
  const pageErrors: string[] = [];

  beforeAll(async () => {
    // The built service as `npm start` runs it on an empty embedded database, with the demo tenant file and
    // subjects. One difference: the demo's data source points at a free port instead of 9100, where the
    // service then starts the reference provider, so that this file runs beside test/server.test.ts.
    dir = await mkdtemp(path.join(tmpdir(), 'ssdi-dashboard-'));
    const [port, providerPort] = [await freePort(), await freePort()];
    base = `http://127.0.0.1:${port}`;
    providerUrl = `http://127.0.0.1:${providerPort}`;
    const demo = await readFile('config/demo.tenant.json', 'utf8');
    const tenantFile = path.join(dir, 'demo.tenant.json');
    await writeFile(tenantFile, demo.replaceAll('http://127.0.0.1:9100', providerUrl));
    const { DATABASE_URL: _, ...env } = process.env;
    server = spawn(NODE, ['--enable-source-maps', 'dist/src/server.js'], {
      env: {
        ...env,
        NODE_ENV: 'development',
        LOG_LEVEL: 'warn',
        PORT: String(port),
        DATA_DIR: path.join(dir, 'data'),
        TENANT_CONFIG: tenantFile,
      },
    });
    server.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    server.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const deadline = Date.now() + 50_000;
    while (
      !(await fetch(`${base}/readyz`).then(
        (r) => r.ok,
        () => false,
      ))
    ) {
      if (Date.now() > deadline || server.exitCode !== null) throw new Error(`server did not start:\n${output}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(output).toContain(`Dashboard:     ${base}/dashboard`);

    const form = { grant_type: 'client_credentials', tenant_key: 'demo', client_id: 'demo-client', client_secret: 'demo-client-secret' };
    const token = ((await (await fetch(`${base}/connect/token`, { method: 'POST', body: new URLSearchParams(form) })).json()) as any)
      .access_token as string;
    for (const subject of JSON.parse(await readFile('config/demo.subjects.json', 'utf8')) as unknown[]) {
      const res = await fetch(`${base}/api/v2/messaging/subject`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(subject),
      });
      expect(res.status).toBe(201);
    }

    ({ browser, page } = await loopbackPage(outside));
    page.on('console', (message) => {
      if (message.type() === 'error') pageErrors.push(message.text());
    });
    page.on('pageerror', (error) => pageErrors.push(String(error)));
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    if (server && server.exitCode === null) {
      const exited = new Promise((r) => server.once('exit', r));
      server.kill('SIGINT');
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  });

  it('gets a token with the form and charts the daily average per child entity: a non-empty chart', async () => {
    await page.goto(`${base}/dashboard`);
    expect(await text('#ssdi-status')).toBe('Get a token to load the dashboard.');
    // The form holds the demo client: get a token with it.
    await page.click('#ssdi-token button[type=submit]');
    await page.waitForSelector('#ssdi-status.ssdi-ok');
    expect(await text('#ssdi-status')).toContain('Token for demo / demo-client');

    // The topmost entity with children (Acme Ltd): its own total, and one series per child (Head office; Sales with the subjects below it).
    await page.waitForFunction(() => {
      const chart = window.ssdiDashboard?.chart;
      return chart && chart.data.length > 1 && chart.data.slice(1).every((ys: unknown[]) => ys.some((y) => typeof y === 'number'));
    });
    const chart = await page.evaluate(() => {
      const c = window.ssdiDashboard.chart;
      return { labels: c.series.slice(1).map((s: any) => s.label), data: c.data as (number | null)[][] };
    });
    expect(chart.labels.sort()).toEqual(['Acme Ltd (total)', 'Head office', 'Sales']);
    expect(chart.data[0]).toHaveLength(7); // the last 7 days
    for (const ys of chart.data.slice(1)) {
      for (const y of ys) if (y !== null) expect(y).toBeGreaterThanOrEqual(2000); // the provider's steps: 2000 to 16000
    }
    // Drawn: the canvas holds pixels of both series' colours.
    const drawn = await page.$eval('#dash-plot canvas', (canvas) => {
      const c = canvas as unknown as { width: number; height: number; getContext(t: '2d'): any };
      const { data } = c.getContext('2d').getImageData(0, 0, c.width, c.height);
      const near = (i: number, [r, g, b]: number[]) =>
        Math.abs(data[i] - r!) + Math.abs(data[i + 1] - g!) + Math.abs(data[i + 2] - b!) < 60;
      let blue = 0;
      let red = 0;
      for (let i = 0; i < data.length; i += 4) {
        if (data[i + 3] < 128) continue;
        if (near(i, [37, 99, 235])) blue++;
        else if (near(i, [220, 38, 38])) red++;
      }
      return { blue, red };
    });
    expect(drawn.blue).toBeGreaterThan(100);
    expect(drawn.red).toBeGreaterThan(100);
    expect(await text('#dash-chart-title')).toMatch(/^Steps per day: daily average of "value" under Acme Ltd/);
  });

  // P104, P106
  it("draws the entity's own total beside its children, and the legend reads out the hovered day's values", async () => {
    const own = await page.evaluate(() => {
      const c = window.ssdiDashboard.chart;
      return { label: c.series[1].label as string, width: c.series[1].width as number, data: c.data as (number | null)[][] };
    });
    expect(own.label).toBe('Acme Ltd (total)');
    expect(own.width).toBeGreaterThan(2); // thicker than the children's lines
    // The daily average of all the subjects lies between its children's averages.
    own.data[1]!.forEach((total, day) => {
      const children = own.data
        .slice(2)
        .map((ys) => ys[day])
        .filter((y): y is number => typeof y === 'number');
      if (total === null) return expect(children).toEqual([]);
      expect(total).toBeGreaterThanOrEqual(Math.min(...children) - 1e-9);
      expect(total).toBeLessThanOrEqual(Math.max(...children) + 1e-9);
    });

    const box = (await (await page.$('#dash-plot .u-over'))!.boundingBox())!;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.waitForFunction(() => {
      const c = window.ssdiDashboard.chart;
      return (
        typeof c.cursor.idx === 'number' &&
        document.querySelector('#dash-plot .u-legend .u-series:nth-child(2) .u-value')?.textContent !== '–'
      );
    });
    const hovered = await page.evaluate(() => {
      const c = window.ssdiDashboard.chart;
      const idx = c.cursor.idx as number;
      return {
        labels: c.series.slice(1).map((s: any) => s.label) as string[],
        ys: c.data.slice(1).map((ys: (number | null)[]) => ys[idx]) as (number | null)[],
        rows: [...document.querySelectorAll('#dash-plot .u-legend .u-series')].map((tr: any) => [
          tr.querySelector('.u-label').textContent as string,
          tr.querySelector('.u-value').textContent as string,
        ]),
      };
    });
    expect(hovered.rows.map((r) => r[0])).toEqual(['Day', ...hovered.labels]);
    expect(hovered.labels[0]).toBe('Acme Ltd (total)');
    expect(hovered.rows[0]![1]).toMatch(/\d/); // the hovered day
    hovered.rows.slice(1).forEach(([label, text], i) => {
      const y = hovered.ys[i];
      expect({ label, y: typeof y }).toEqual({ label, y: 'number' });
      expect(text).toMatch(NUMBER);
      expect(Math.abs(parseNumber(text!) - y!)).toBeLessThanOrEqual(0.005 + 1e-9);
    });
    await page.screenshot({ path: '/tmp/dashboard-hover.png', fullPage: true });
    await page.mouse.move(0, 0);
  });

  it("lists the entity's subjects with their latest values (the values deferred)", async () => {
    await page.waitForFunction(() => document.querySelectorAll('#dash-subjects tbody tr .dash-latest:not(.dash-pending)').length === 3);
    const rows = await page.$$eval('#dash-subjects tbody tr', (trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => (td as unknown as { innerText: string }).innerText)),
    );
    expect(rows.map((r) => r.slice(0, 3)).sort()).toEqual([
      ['E-1001', 'John Carpenter', 'Sales North'],
      ['E-1002', 'Maria Okafor', 'Sales South'],
      ['E-1003', 'Lars Berg', 'Head office'],
    ]);
    for (const r of rows) {
      expect(r[3]).toMatch(NUMBER);
      expect(r[4]).toMatch(/^\d{4}-\d\d-\d\d$/);
    }
    await page.screenshot({ path: '/tmp/dashboard.png', fullPage: true });
  });

  it("shows a change posted by the reference provider's notify command within 2 s", async () => {
    await page.waitForSelector('#dash-live[data-state=open]');
    const before = await page.evaluate(() => ({
      value: document.querySelector('#dash-subjects tr[data-subject="E-1001"] .dash-latest')!.textContent,
      sales: window.ssdiDashboard.chart.data[1 + window.ssdiDashboard.chart.series.slice(1).findIndex((s: any) => s.label === 'Sales')],
    }));
    expect(before.value).toMatch(NUMBER);

    // Watching the page from before the command starts; the clock runs from the moment its POST was answered.
    let shownAt = 0;
    const shown = page
      .waitForFunction(
        (old: string) => {
          const row = document.querySelector('#dash-subjects tr[data-subject="E-1001"]');
          const cell = row?.querySelector('.dash-latest');
          const live = document.getElementById('dash-live')!;
          return row?.classList.contains('dash-changed') && cell?.firstChild?.textContent !== old && live.dataset['updated'];
        },
        { polling: 50, timeout: 10_000 },
        before.value!,
      )
      .then(() => (shownAt = Date.now()));
    const notify = spawn(
      NODE,
      ['dist/src/cli/provider-notify.js', '--subject', 'E-1001', '--bump', '--service', base, '--provider', providerUrl],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let notifyOut = '';
    let postedAt = 0;
    notify.stdout.on('data', (d: Buffer) => {
      notifyOut += d.toString();
      if (!postedAt && /creationOrUpdate -> 2\d\d/.test(notifyOut)) postedAt = Date.now();
    });
    notify.stderr.on('data', (d: Buffer) => (notifyOut += d.toString()));
    const code = await new Promise((r) => notify.once('exit', r));
    expect(code, notifyOut).toBe(0);
    expect(postedAt, notifyOut).toBeGreaterThan(0);
    await shown;
    expect(shownAt - postedAt, `shown ${shownAt - postedAt} ms after the POST was answered`).toBeLessThan(2_000);

    // The row shows the new value beside the old one, the chart moved, and the marker says what changed.
    const after = await page.evaluate(() => ({
      cell: (document.querySelector('#dash-subjects tr[data-subject="E-1001"] .dash-latest') as unknown as { innerText: string }).innerText,
      sales: window.ssdiDashboard.chart.data[1 + window.ssdiDashboard.chart.series.slice(1).findIndex((s: any) => s.label === 'Sales')],
      live: document.getElementById('dash-live')!.textContent,
    }));
    expect(after.cell).toMatch(new RegExp(`^${NUMBER.source.slice(1, -1)}\\s*was ${before.value}$`));
    expect(after.sales).not.toEqual(before.sales);
    expect(after.live).toMatch(/^Updated at .*: changed steps-week for E-1001/);
    await page.screenshot({ path: '/tmp/dashboard-live.png', fullPage: true });
  });

  // P108
  it('charts another entity with its own children, a leaf entity as one series, and offers only the day ranges the data needs', async () => {
    const chartAfter = async (select: string, value: string) => {
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.select(`#dash-controls select[name=${select}]`, value);
      await page.waitForFunction(() => window.ssdiDashboard.chart?.data !== window.shownData && !window.ssdiDashboard.refreshing);
      return page.evaluate(() => ({
        labels: window.ssdiDashboard.chart.series.slice(1).map((s: any) => s.label) as string[],
        days: window.ssdiDashboard.chart.data[0].length as number,
        error: document.getElementById('dash-error').hidden ? '' : document.getElementById('dash-error').textContent,
      }));
    };
    expect(await chartAfter('entity', 'sales')).toEqual({ labels: ['Sales (total)', 'Sales North', 'Sales South'], days: 7, error: '' });
    expect(await chartAfter('entity', 'hq')).toEqual({ labels: ['Head office'], days: 7, error: '' });
    // The demo's provider holds the last 7 days: the longer ranges are not offered, and one picked anyway (as an
    // old address may) is narrowed to 7 days.
    const offered = await page.$$eval('#dash-controls select[name=days] option', (os) => os.map((o: any) => [o.value, o.disabled]));
    expect(offered).toEqual([
      ['7', false],
      ['14', true],
      ['30', true],
      ['90', true],
    ]);
    expect(await chartAfter('days', '90')).toEqual({ labels: ['Head office'], days: 7, error: '' });
    expect(new URL(page.url()).search).toBe('?extract=steps-week&entity=hq&days=7&measure=average&value=value&time=date');
  });

  // P108, D11
  it("asks for 90 days of the chart (the page's longest range) within the query limits, median included (D11)", async () => {
    // The page offers only the ranges its data needs; this is its worst question, sent as it would send it.
    const form = { grant_type: 'client_credentials', tenant_key: 'demo', client_id: 'demo-client', client_secret: 'demo-client-secret' };
    const token = ((await (await fetch(`${base}/connect/token`, { method: 'POST', body: new URLSearchParams(form) })).json()) as any)
      .access_token as string;
    // [from, to): the last 90 days, today included.
    const day = (offset: number) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);
    const [from, to] = [day(-89), day(1)];
    for (const [entity, maxGroups] of [
      ['hq', 1],
      ['acme', 2],
    ] as const) {
      const input = { extractKey: 'steps-week', valueItemKey: 'value', timeItemKey: 'date', interval: 'DAY', from, to, timeZone: 'UTC' };
      const res = await fetch(`${base}/graphql`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          query: DASHBOARD_QUERIES.chart,
          variables: {
            input: { ...input, structuralEntityKey: entity, includeDescendants: true, groupBy: 'CHILD_ENTITY', maxGroups },
            median: true,
          },
        }),
      });
      const body = (await res.json()) as { data?: { dataPointAggregates: { buckets: unknown[] } }; errors?: unknown[] };
      expect({ entity, status: res.status, errors: body.errors }).toEqual({ entity, status: 200, errors: undefined });
      expect(body.data!.dataPointAggregates.buckets).toHaveLength(90);
    }
  });

  // P107
  it('shows the picked measure in the first tile: the sum, the count and the median of the points over the range', async () => {
    for (const measure of ['sum', 'count', 'median', 'average'] as const) {
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.select('#dash-controls select[name=measure]', measure);
      await page.waitForFunction(() => window.ssdiDashboard.chart?.data !== window.shownData && !window.ssdiDashboard.refreshing);
      const shown = await page.evaluate(() => ({
        label: document.querySelector('#dash-summary [data-tile=measure] span').textContent as string,
        value: document.querySelector('#dash-summary [data-tile=measure] b').textContent as string,
        daily: (window.ssdiDashboard.chart.data[1] as (number | null)[]).filter((y) => y !== null) as number[],
        labels: [...document.querySelectorAll('#dash-summary span')].map((span: any) => span.textContent as string),
      }));
      expect(shown.label).toBe(`${measure} of value`);
      expect(shown.value).toMatch(NUMBER);
      const total = shown.daily.reduce((a, b) => a + b, 0);
      // Over the range: the sum (and the count) of the daily ones; the average (and the median) between the days' least and most.
      if (measure === 'average' || measure === 'median') {
        expect(parseNumber(shown.value)).toBeGreaterThanOrEqual(Math.min(...shown.daily) - 0.005);
        expect(parseNumber(shown.value)).toBeLessThanOrEqual(Math.max(...shown.daily) + 0.005);
      } else expect(Math.abs(parseNumber(shown.value) - total)).toBeLessThanOrEqual(0.005);
      // The picked measure is not shown twice.
      expect(shown.labels.includes('data points')).toBe(measure !== 'count');
      expect(shown.labels.includes('median')).toBe(measure !== 'median');
    }
  });

  it('made no request outside the service, and the page logged no error (no CSP violation)', () => {
    expect(outside).toEqual([]);
    expect(pageErrors).toEqual([]);
  });

  async function text(selector: string): Promise<string> {
    return page.$eval(selector, (el) => (el as unknown as { innerText: string }).innerText);
  }
});
