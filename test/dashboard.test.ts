import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DirectiveLocation, GraphQLBoolean, GraphQLDirective, GraphQLSchema, GraphQLString, parse, validate } from 'graphql';
import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserAvailable, loopbackPage } from './browser.js';
import { schema } from '../src/app/schema.js';
import { DASHBOARD_QUERIES } from '../web/dashboard/queries.js';
import { type TestApp, freePort, pool, startApp } from './helpers.js';

// Issue 17, the demo dashboard at GET /dashboard: served outside production like GraphiQL, its assets from
// the installed packages; in a headless browser on the demo tenant and the reference provider (as
// `npm start` serves them), it renders a non-empty chart and shows a change that the provider's notify
// command posts within 2 s. Issue 32: units from the extract's items, drill-down, a subject's series, a
// custom range, the empty, error and stale states, the live aggregate, the layout; a screenshot is kept in
// test-results/ (git-ignored, for CI to keep).

const hasBrowser = browserAvailable('test/dashboard.test.ts');

// page.evaluate callbacks run in the page; the project's types are Node's (no DOM library).
declare const document: any;
declare const window: any;

const NODE = process.execPath;
/** A number as the page formats it (Chromium's en-US: grouped thousands, at most 2 decimals). */
const NUMBER = /^\d{1,3}(?:,\d{3})*(?:\.\d{1,2})?$/;
/** A number of steps, the unit the demo's extract declares for its value item (P120). */
const STEPS = new RegExp(`^${NUMBER.source.slice(1, -1)} steps$`);
/** The demo's extract holds a year; here the provider serves 60 days, so a cold fill of the whole organisation takes seconds. */
const DAYS_HELD = 60;
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
    for (const field of ['dataPointAggregatesChanged(input: $input)', '@defer', 'dataPointsChanged(', 'subject(id: $id)'])
      expect(script).toContain(field);
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

// Each step waits for what the page draws, on a shared machine: more than the default 30 s is allowed.
describe.skipIf(!hasBrowser)(
  'the dashboard in a headless browser, on the demo tenant and the reference provider',
  { timeout: 120_000 },
  () => {
    let dir: string;
    let server: ChildProcess;
    let output = '';
    let base: string;
    let providerUrl: string;
    let token: string;
    let browser: Browser;
    let page: Page;
    /** Requests the page made to anywhere but the service on loopback (aborted). */
    const outside: string[] = [];
    /** Errors the page logged (CSP violations are logged as console errors) or threw. */
    const pageErrors: string[] = [];

    beforeAll(async () => {
      // The built service as `npm start` runs it on an empty embedded database, with the demo tenant file and
      // subjects. Two differences: the demo's data source points at a free port instead of 9100, where the
      // service then starts the reference provider, so that this file runs beside test/server.test.ts; and the
      // provider serves 60 days instead of the demo's year.
      dir = await mkdtemp(path.join(tmpdir(), 'ssdi-dashboard-'));
      const [port, providerPort] = [await freePort(), await freePort()];
      base = `http://127.0.0.1:${port}`;
      providerUrl = `http://127.0.0.1:${providerPort}`;
      const demo = await readFile('config/demo.tenant.json', 'utf8');
      expect(demo).toContain('"period": { "days": 365 }');
      const tenantFile = path.join(dir, 'demo.tenant.json');
      await writeFile(
        tenantFile,
        demo.replaceAll('http://127.0.0.1:9100', providerUrl).replace('"period": { "days": 365 }', `"period": { "days": ${DAYS_HELD} }`),
      );
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
      token = ((await (await fetch(`${base}/connect/token`, { method: 'POST', body: new URLSearchParams(form) })).json()) as any)
        .access_token as string;
      const subjects = JSON.parse(await readFile('config/demo.subjects.json', 'utf8')) as unknown[];
      expect(subjects.length).toBeGreaterThanOrEqual(300); // an organisation, not a sketch
      const statuses = await pool(subjects, 8, async (subject) => {
        const res = await fetch(`${base}/api/v2/messaging/subject`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify(subject),
        });
        await res.body?.cancel();
        return res.status;
      });
      expect(new Set(statuses)).toEqual(new Set([201]));

      ({ browser, page } = await loopbackPage(outside));
      await page.setViewport({ width: 1280, height: 800 });
      page.setDefaultTimeout(60_000);
      page.on('console', (message) => {
        if (message.type() === 'error') pageErrors.push(message.text());
      });
      page.on('pageerror', (error) => pageErrors.push(String(error)));
    }, 180_000);

    afterAll(async () => {
      await browser?.close();
      if (server && server.exitCode === null) {
        const exited = new Promise((r) => server.once('exit', r));
        server.kill('SIGINT');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    });

    it('gets a token with the form and charts the daily average per child entity over the days the data holds', async () => {
      await page.goto(`${base}/dashboard`);
      expect(await text('#ssdi-status')).toBe('Get a token to load the dashboard.');
      // The form holds the demo client: get a token with it.
      await page.click('#ssdi-token button[type=submit]');
      await page.waitForSelector('#ssdi-status.ssdi-ok');
      expect(await text('#ssdi-status')).toContain('Token for demo / demo-client');

      // The page starts on a year, which the data does not reach back to: narrowed to 90 days (P108), by day.
      await page.waitForFunction(() => document.querySelector('#dash-controls select[name=range]').value === '90');
      const chart = await settledChart();
      expect(chart.labels).toEqual(['Acme Ltd (total)', 'Head office', 'Operations', 'Research & development', 'Sales']);
      expect(chart.days).toBe(90);
      for (const ys of chart.data.slice(1)) {
        expect(ys.filter((y) => y !== null)).toHaveLength(DAYS_HELD); // the days before the data are gaps
        for (const y of ys) if (y !== null) expect(y).toBeGreaterThanOrEqual(2000); // the provider's steps: 2000 to 16000
      }
      // Drawn: the canvas holds pixels of two children's colours.
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
      expect(await text('#dash-chart-title')).toMatch(
        /^Steps per day: daily average of Steps \(steps\) under Acme Ltd, \d{4}-\d\d-\d\d to /,
      );
      expect(await crumbs()).toEqual(['Acme Ltd']);
    });

    // P104, P106, P120
    it("draws the entity's own total beside its children, and the legend reads out the hovered day's values with their unit", async () => {
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

      // Towards the right: a day with data.
      const box = (await (await page.$('#dash-plot .u-over'))!.boundingBox())!;
      await page.mouse.move(box.x + box.width * 0.8, box.y + box.height / 2);
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
      expect(hovered.rows[0]![1]).toMatch(/\d/); // the hovered day
      hovered.rows.slice(1).forEach(([label, text], i) => {
        const y = hovered.ys[i];
        expect({ label, y: typeof y }).toEqual({ label, y: 'number' });
        expect(text).toMatch(STEPS);
        expect(Math.abs(parseNumber(text!.replace(' steps', '')) - y!)).toBeLessThanOrEqual(0.005 + 1e-9);
      });
      // The axis and the first tile name the unit too.
      expect(await page.evaluate(() => window.ssdiDashboard.chart.axes[1].label)).toBe('average (steps)');
      expect(await text('#dash-summary [data-tile=measure] b')).toMatch(STEPS);
      await page.mouse.move(0, 0);
    });

    it("lists the entity's subjects with their latest values and unit (the values deferred)", async () => {
      await page.waitForFunction(() => document.querySelectorAll('#dash-subjects tbody tr .dash-latest:not(.dash-pending)').length === 100);
      const subjects = (JSON.parse(await readFile('config/demo.subjects.json', 'utf8')) as unknown[]).length;
      expect(await text('#dash-subjects-caption')).toBe(`Subjects: the first 100 of ${subjects}`);
      const rows = await page.$$eval('#dash-subjects tbody tr', (trs) =>
        trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => (td as unknown as { innerText: string }).innerText)),
      );
      for (const r of rows) {
        expect(r[3]).toMatch(STEPS);
        expect(r[4]).toMatch(/^\d{4}-\d\d-\d\d$/);
      }
    });

    // P107
    it('shows the picked measure in the first tile: the sum, the count and the median of the points over the range', async () => {
      for (const measure of ['sum', 'count', 'median', 'average'] as const) {
        await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
        await page.select('#dash-controls select[name=measure]', measure);
        await page.waitForFunction(() => window.ssdiDashboard.chart?.data !== window.shownData && !window.ssdiDashboard.chartLoading);
        const shown = await page.evaluate(() => ({
          label: document.querySelector('#dash-summary [data-tile=measure] span').textContent as string,
          value: document.querySelector('#dash-summary [data-tile=measure] b').innerText as string,
          daily: (window.ssdiDashboard.chart.data[1] as (number | null)[]).filter((y) => y !== null) as number[],
          labels: [...document.querySelectorAll('#dash-summary span')].map((span: any) => span.textContent as string),
        }));
        expect(shown.label).toBe(`${measure} of Steps`);
        // A count is of data points: no unit.
        expect(shown.value).toMatch(measure === 'count' ? NUMBER : STEPS);
        const value = parseNumber(shown.value.replace(' steps', ''));
        const total = shown.daily.reduce((a, b) => a + b, 0);
        // Over the range: the sum (and the count) of the daily ones; the average (and the median) between the days' least and most.
        if (measure === 'average' || measure === 'median') {
          expect(value).toBeGreaterThanOrEqual(Math.min(...shown.daily) - 0.005);
          expect(value).toBeLessThanOrEqual(Math.max(...shown.daily) + 0.005);
        } else expect(Math.abs(value - total)).toBeLessThanOrEqual(0.005);
        // The picked measure is not shown twice.
        expect(shown.labels.includes('data points')).toBe(measure !== 'count');
        expect(shown.labels.includes('median')).toBe(measure !== 'median');
      }
    });

    // P118
    it("drills down from a child's legend entry and from its line to its children, and back up by the breadcrumb", async () => {
      // The legend entry: Sales becomes the selection, its children the lines.
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.evaluate(() => {
        const row = [...document.querySelectorAll('#dash-plot .u-legend .u-series')].find(
          (tr: any) => tr.querySelector('.u-label').textContent === 'Sales',
        ) as any;
        row.querySelector('.u-label').click();
      });
      let chart = await settledChart();
      expect(chart.labels).toEqual(['Sales (total)', 'Sales North', 'Online sales', 'Sales South']); // the children by key
      expect(chart.entity).toBe('sales');
      expect(await crumbs()).toEqual(['Acme Ltd', 'Sales']);
      expect(new URL(page.url()).searchParams.get('entity')).toBe('sales');

      // The line: the pointer on Sales North's line, where it is farthest from the other lines, and a click.
      const at = await page.evaluate(() => {
        const c = window.ssdiDashboard.chart;
        const i = c.series.findIndex((s: any) => s.label === 'Sales North');
        let best = { j: -1, gap: -1 };
        c.data[0].forEach((_x: number, j: number) => {
          const y = c.data[i][j];
          if (y === null) return;
          const others = c.data.slice(1).filter((_ys: unknown, k: number) => k + 1 !== i);
          const gap = Math.min(
            ...others.map((ys: (number | null)[]) => (ys[j] === null ? Infinity : Math.abs(c.valToPos(ys[j], 'y') - c.valToPos(y, 'y')))),
          );
          if (gap > best.gap) best = { j, gap };
        });
        const over = c.over.getBoundingClientRect();
        return { x: over.left + c.valToPos(c.data[0][best.j], 'x'), y: over.top + c.valToPos(c.data[i][best.j], 'y'), gap: best.gap };
      });
      expect(at.gap).toBeGreaterThan(3);
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.mouse.move(at.x - 1, at.y);
      await page.mouse.move(at.x, at.y);
      await page.mouse.click(at.x, at.y);
      chart = await settledChart();
      expect(chart.entity).toBe('sales-north');
      expect(chart.labels).toEqual(['Sales North (total)', 'North key accounts', 'North retail']);
      expect(await crumbs()).toEqual(['Acme Ltd', 'Sales', 'Sales North']);

      // Back up: the breadcrumb's Sales, then Sales North again by its legend entry.
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.click('#dash-crumbs button[data-entity=sales]');
      expect((await settledChart()).entity).toBe('sales');
      await page.evaluate(() => {
        window.shownData = window.ssdiDashboard.chart.data;
        const row = [...document.querySelectorAll('#dash-plot .u-legend .u-series')].find(
          (tr: any) => tr.querySelector('.u-label').textContent === 'Sales North',
        ) as any;
        row.querySelector('.u-label').click();
      });
      expect((await settledChart()).entity).toBe('sales-north');
    });

    // P118
    it("opens a subject's own series from its row: its data points over the range, with the unit", async () => {
      await page.waitForFunction(() => document.querySelector('#dash-subjects tr[data-subject="E-1001"] .dash-latest:not(.dash-pending)'));
      await page.click('#dash-subjects tr[data-subject="E-1001"]');
      await page.waitForFunction(() => window.ssdiDashboard.seriesChart && !document.getElementById('dash-series').hidden);
      const series = await page.evaluate(() => {
        const c = window.ssdiDashboard.seriesChart;
        return { label: c.series[1].label as string, xs: c.data[0].length as number, ys: c.data[1] as (number | null)[] };
      });
      expect(await text('#dash-series-title')).toMatch(/^E-1001 John Carpenter: Steps per day, Steps \(steps\), \d{4}-\d\d-\d\d to /);
      expect(series.label).toBe('E-1001 John Carpenter');
      expect(series.xs).toBe(90);
      const values = series.ys.filter((y): y is number => y !== null);
      expect(values).toHaveLength(DAYS_HELD);
      for (const y of values) expect(Number.isInteger(y) && y >= 2000 && y < 16000).toBe(true);
      // Its latest value is the one the row shows.
      const latest = await page.$eval('#dash-subjects tr[data-subject="E-1001"] .dash-latest', (td: any) => td.textContent as string);
      expect(parseNumber(latest.replace(' steps', ''))).toBe(values.at(-1));
      // Hovering it reads out a value with its unit.
      await page.$eval('#dash-series', (el: any) => el.scrollIntoView()); // below the fold at 1280×800
      const box = (await (await page.$('#dash-series-plot .u-over'))!.boundingBox())!;
      await page.mouse.move(box.x + box.width * 0.8, box.y + box.height / 2);
      await page.waitForFunction(() =>
        /\d steps$/.test(document.querySelector('#dash-series-plot .u-legend .u-series:nth-child(2) .u-value')?.textContent ?? ''),
      );
      await page.mouse.move(0, 0);
      await page.evaluate(() => window.scrollTo(0, 0));
    });

    // P121
    it("shows a change posted by the reference provider's notify command: the row within 2 s, and the pushed aggregate redraws the chart", async () => {
      await page.waitForSelector('#dash-live[data-state=open]');
      const before = await page.evaluate(() => ({
        value: document.querySelector('#dash-subjects tr[data-subject="E-1001"] .dash-latest')!.textContent,
        total: window.ssdiDashboard.chart.data[1],
        series: window.ssdiDashboard.seriesChart.data[1],
        events: Number(document.getElementById('dash-plot').dataset['events']),
      }));
      expect(before.value).toMatch(STEPS);

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

      // The chart was not asked again: the service pushed the recomputed aggregate on its stream (P121).
      await page.waitForFunction(
        (events: number, old: (number | null)[]) =>
          Number(document.getElementById('dash-plot').dataset['events']) > events &&
          JSON.stringify(window.ssdiDashboard.chart.data[1]) !== JSON.stringify(old),
        { timeout: 10_000 },
        before.events,
        before.total,
      );
      // The row shows the new value beside the old one, the subject's series moved, and the marker says what changed.
      await page.waitForFunction(
        (old: unknown) => JSON.stringify(window.ssdiDashboard.seriesChart.data[1]) !== JSON.stringify(old),
        {},
        before.series,
      );
      const after = await page.evaluate(() => ({
        cell: (document.querySelector('#dash-subjects tr[data-subject="E-1001"] .dash-latest') as unknown as { innerText: string })
          .innerText,
        live: document.getElementById('dash-live')!.textContent,
      }));
      expect(after.cell).toMatch(new RegExp(`^${STEPS.source.slice(1, -1)}\\s*was ${before.value}$`));
      expect(after.live).toMatch(/^Updated at .*: changed steps-week for E-1001/);
    });

    // P108, P118
    it('charts a custom range: validated in words, kept within the data, kept in the address', async () => {
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.select('#dash-controls select[name=range]', 'custom');
      // Prefilled with the range shown before, then narrowed to the first day the data holds.
      await page.waitForFunction(() => {
        const from = document.querySelector('#dash-controls input[name=from]');
        return from.value && from.value === from.min && !document.getElementById('dash-custom').hidden;
      });
      let chart = await settledChart();
      expect(chart.days).toBe(DAYS_HELD);
      expect(chart.data[1]!.every((y) => y !== null)).toBe(true);

      const range = await page.evaluate(() => {
        const [from, to] = ['from', 'to'].map((n) => document.querySelector(`#dash-controls input[name=${n}]`));
        return { min: from.min as string, max: to.max as string };
      });
      const set = (from: string, to: string) =>
        page.evaluate(
          (f: string, t: string) => {
            window.shownData = window.ssdiDashboard.chart?.data;
            document.querySelector('#dash-controls input[name=from]').value = f;
            const to = document.querySelector('#dash-controls input[name=to]');
            to.value = t;
            to.dispatchEvent(new Event('change', { bubbles: true }));
          },
          from,
          to,
        );
      // Its start after its end: said in words, nothing asked.
      await set(range.max, range.min);
      await page.waitForFunction(() => document.getElementById('dash-plot-note').dataset['kind'] === 'error');
      expect(await text('#dash-plot-note')).toBe(
        `The range starts (${range.max}) after it ends (${range.min}): pick a "from" day on or before the "to" day.`,
      );
      expect(await text('#dash-error')).toMatch(/^Range: The range starts/);

      // Ten days: charted by day, in the address.
      const tenBefore = new Date(Date.parse(`${range.max}T00:00:00Z`) - 9 * 86_400_000).toISOString().slice(0, 10);
      await set(tenBefore, range.max);
      chart = await settledChart();
      expect(chart.days).toBe(10);
      expect(await page.$eval('#dash-error', (el: any) => el.hidden)).toBe(true);
      const search = new URL(page.url()).searchParams;
      expect([search.get('range'), search.get('from'), search.get('to')]).toEqual(['custom', tenBefore, range.max]);

      // A start before the data: narrowed to its first day.
      await set('2000-01-01', range.max);
      await page.waitForFunction((min: string) => document.querySelector('#dash-controls input[name=from]').value === min, {}, range.min);
      chart = await settledChart();
      expect(chart.days).toBe(DAYS_HELD);
    });

    // P108
    it('offers only the day ranges the data needs, and narrows one picked beyond them', async () => {
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.select('#dash-controls select[name=range]', '30');
      expect((await settledChart()).days).toBe(30);
      const offered = await page.$$eval('#dash-controls select[name=range] option', (os) => os.map((o: any) => [o.value, o.disabled]));
      expect(offered).toEqual([
        ['7', false],
        ['30', false],
        ['90', false],
        ['365', true],
        ['custom', false],
      ]);
      await page.evaluate(() => (window.shownData = window.ssdiDashboard.chart.data));
      await page.select('#dash-controls select[name=range]', '365');
      await page.waitForFunction(() => document.querySelector('#dash-controls select[name=range]').value === '90');
      expect((await settledChart()).days).toBe(90);
      expect(new URL(page.url()).search).toBe('?extract=steps-week&entity=sales-north&range=90&measure=average&value=value&time=date');
    });

    // P119
    it('says in words when there is nothing to chart (no subjects; no values) and when the question is refused', async () => {
      await page.click('#dash-series-close');
      await page.select('#dash-controls select[name=entity]', 'graduates');
      await page.waitForFunction(() => document.getElementById('dash-plot-note').textContent.startsWith('No subjects'));
      expect(await text('#dash-plot-note')).toBe('No subjects under Graduate intake: there is nothing to chart.');
      expect(await page.$('#dash-plot canvas')).toBeNull();
      await page.waitForFunction(() => document.getElementById('dash-subjects-caption').textContent === 'No subjects here');

      // A value item that holds text: the service refuses the question, the page says why.
      await page.select('#dash-controls select[name=entity]', 'hq');
      await settledChart();
      await page.evaluate(() => {
        const input = document.querySelector('#dash-controls input[name=valueItem]');
        input.value = 'note';
        input.dispatchEvent(new Event('change', { bubbles: true }));
      });
      await page.waitForFunction(() => document.getElementById('dash-plot-note').dataset['kind'] === 'error');
      expect(await text('#dash-plot-note')).toBe(
        "The chart could not be loaded: The item 'note' holds String values; aggregates need Integer or Decimal.",
      );
      expect(await text('#dash-error')).toMatch(/^Chart: The item 'note' holds String values/);
      await page.evaluate(() => {
        const input = document.querySelector('#dash-controls input[name=valueItem]');
        input.value = 'value';
        input.dispatchEvent(new Event('change', { bubbles: true }));
      });
      expect((await settledChart()).labels).toEqual(['Head office (total)', 'Finance', 'IT services', 'People & culture']);
    });

    // D11, P119
    it("asks for the page's longest ranges (90 days by day, a year by week) within the query limits, median included (D11)", async () => {
      // The page's worst questions, sent on its own stream as it would send them: the root's children (the most).
      const day = (offset: number) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);
      for (const [interval, days, buckets] of [
        ['DAY', 92, 92],
        ['WEEK', 366, 53],
      ] as const) {
        const input = {
          extractKey: 'steps-week',
          valueItemKey: 'value',
          timeItemKey: 'date',
          interval,
          from: day(1 - days),
          to: day(1),
          timeZone: 'UTC',
          structuralEntityKey: 'acme',
          includeDescendants: true,
          groupBy: 'CHILD_ENTITY',
          maxGroups: 4,
        };
        const answer = await firstEvent(DASHBOARD_QUERIES.chart, { input, median: true });
        expect({ interval, errors: answer.errors }).toEqual({ interval, errors: undefined });
        expect(answer.data.dataPointAggregatesChanged.buckets.length).toBeGreaterThanOrEqual(buckets);
      }
    });

    // P122
    it('fills the page at 1280×800 and 1920×1080: the chart takes the width the list leaves, the list the chart’s height', async () => {
      await mkdir('test-results', { recursive: true });
      for (const [width, height] of [
        [1280, 800],
        [1920, 1080],
      ] as const) {
        await page.setViewport({ width, height });
        await page.select('#dash-controls select[name=entity]', 'acme');
        await page.waitForFunction(
          (w: number) => {
            const c = window.ssdiDashboard.chart;
            return (
              c &&
              !window.ssdiDashboard.chartLoading &&
              c.series[1].label === 'Acme Ltd (total)' &&
              Math.abs(c.width - document.getElementById('dash-plot').clientWidth) < 2 &&
              w > 0
            );
          },
          {},
          width,
        );
        await page.waitForFunction(
          () => document.querySelectorAll('#dash-subjects tbody tr .dash-latest:not(.dash-pending)').length === 100,
        );
        const layout = await page.evaluate(() => {
          const box = (id: string) => document.getElementById(id)!.getBoundingClientRect().toJSON();
          return {
            chart: box('dash-chart'),
            charts: box('dash-charts'),
            list: box('dash-list'),
            body: box('dash-body'),
            main: box('dash'),
            canvas: (document.querySelector('#dash-plot canvas') as any).getBoundingClientRect().toJSON(),
          };
        });
        // No empty column or band: the chart and the list span the page's width, the list as tall as the charts.
        expect(layout.main.width).toBeGreaterThan(width - 20); // a scrollbar at most
        expect(layout.list.right).toBeGreaterThan(width - 40);
        expect(layout.canvas.width).toBeGreaterThan(width * 0.55);
        expect(Math.abs(layout.list.bottom - layout.charts.bottom)).toBeLessThan(2);
        // The chart is about half the window's height, and all of it is in view.
        expect(layout.chart.height).toBeGreaterThan(height * 0.45);
        expect(layout.body.bottom).toBeLessThanOrEqual(height);
        await page.mouse.move(layout.canvas.left + layout.canvas.width * 0.7, layout.canvas.top + layout.canvas.height / 2);
        await page.screenshot({ path: width === 1280 ? 'test-results/dashboard.png' : `test-results/dashboard-${width}.png` });
        await page.mouse.move(0, 0);
      }
    });

    it('made no request outside the service, and the page logged no error (no CSP violation)', () => {
      expect(outside).toEqual([]);
      // A request the service turned away for now (429, while it filled its cache) is logged by Chromium and sent again after its Retry-After.
      expect(pageErrors.filter((e) => !e.endsWith('the server responded with a status of 429 (Too Many Requests)'))).toEqual([]);
    });

    /** The breadcrumb: the selected entity's ancestors and itself. */
    async function crumbs(): Promise<string[]> {
      return page.$$eval('#dash-crumbs [data-entity]', (els) => els.map((el: any) => el.textContent as string));
    }

    async function text(selector: string): Promise<string> {
      return page.$eval(selector, (el) => (el as unknown as { innerText: string }).innerText);
    }

    /** The chart once another answer than `window.shownData` is drawn and none is awaited: its series and days. */
    async function settledChart() {
      await page.waitForFunction(() => {
        const s = window.ssdiDashboard;
        return s.chart && s.chart.data !== window.shownData && !s.chartLoading && !s.refreshing;
      });
      return page.evaluate(() => ({
        labels: window.ssdiDashboard.chart.series.slice(1).map((s: any) => s.label) as string[],
        days: window.ssdiDashboard.chart.data[0].length as number,
        data: window.ssdiDashboard.chart.data as (number | null)[][],
        entity: document.querySelector('#dash-controls select[name=entity]').value as string,
      }));
    }

    /** The first event of a subscription over SSE, as the page reads it. */
    async function firstEvent(query: string, variables: Record<string, unknown>): Promise<any> {
      const ctl = new AbortController();
      const res = await fetch(`${base}/graphql`, {
        method: 'POST',
        signal: ctl.signal,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify({ query, variables }),
      });
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) throw new Error(`the stream ended before an event: ${buffer}`);
          buffer += value;
          const event = /event: next\r?\ndata: (.*)\r?\n\r?\n/.exec(buffer);
          if (event) return JSON.parse(event[1]!);
        }
      } finally {
        ctl.abort();
      }
    }
  },
);
