import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { type Response, Router } from 'express';

// Issue 17: the demo dashboard at GET /dashboard (outside production, like GraphiQL). One page over the
// public GraphQL API only, so it doubles as the example a dashboard builder copies: a token form (client
// credentials, as GraphiQL's), an extract's daily aggregate for a structural entity charted with one
// series per child entity (`dataPointAggregates`, uPlot), the entity's subjects with their latest values
// (`subjects` with `dataPoints` under @defer, so the list shows before provider data), and live updates
// (`dataPointsChanged` over SSE: every event re-queries both). Nothing comes from the internet: the chart
// library is served from the installed `uplot` package, the page's script and styles from this module.

/** The page and its assets, each answering GET (and HEAD) only. */
export const DASHBOARD_PATHS = [
  '/dashboard',
  '/dashboard/app.js',
  '/dashboard/app.css',
  '/dashboard/uplot.js',
  '/dashboard/uplot.css',
] as const;

/** The demo tenant's API client (config/demo.tenant.json), offered by the form outside production as GraphiQL's does. */
const DEMO_CLIENT = { tenantKey: 'demo', clientId: 'demo-client', clientSecret: 'demo-client-secret' };

/** Scripts, styles and requests from this origin only; no inline script or style, no frames, no form posts. */
const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

type Asset = { type: string; body: () => Promise<string> };

/** A file of an installed package, read on its first request (resolved now: a missing package fails at start-up). */
function packageFile(specifier: string): () => Promise<string> {
  const file = createRequire(import.meta.url).resolve(specifier);
  let text: Promise<string> | undefined;
  return () =>
    (text ??= readFile(file, 'utf8').catch((e: unknown) => {
      text = undefined; // read again on the next request
      throw e;
    }));
}

/**
 * The dashboard's routes: the page at `/dashboard` and its four assets below it.
 *
 * @param demoDefaults pre-fill the token form with the demo tenant's public client (outside production only).
 */
export function dashboardRouter({ demoDefaults }: { demoDefaults: boolean }): Router {
  const defaults = demoDefaults ? DEMO_CLIENT : { tenantKey: '', clientId: '', clientSecret: '' };
  const html = page(defaults);
  const assets: Record<string, Asset> = {
    '/dashboard/app.js': { type: 'text/javascript', body: () => Promise.resolve(CLIENT_SCRIPT) },
    '/dashboard/app.css': { type: 'text/css', body: () => Promise.resolve(STYLE) },
    '/dashboard/uplot.js': { type: 'text/javascript', body: packageFile('uplot/dist/uPlot.iife.min.js') },
    '/dashboard/uplot.css': { type: 'text/css', body: packageFile('uplot/dist/uPlot.min.css') },
  };
  const secure = (res: Response) => res.set({ 'Content-Security-Policy': CSP, 'X-Content-Type-Options': 'nosniff' });

  const router = Router({ strict: true });
  router.get('/dashboard', (_req, res) => {
    secure(res).set('Cache-Control', 'no-store').type('text/html').send(html);
  });
  for (const [path, asset] of Object.entries(assets)) {
    router.get(path, (_req, res, next) => {
      asset.body().then((body) => void secure(res).set('Cache-Control', 'no-cache').type(asset.type).send(body), next);
    });
  }
  return router;
}

/** Text for an HTML attribute or element. */
function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(defaults: typeof DEMO_CLIENT): string {
  const v = (s: string) => escapeHtml(s);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>SSDI dashboard</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/dashboard/uplot.css">
<link rel="stylesheet" href="/dashboard/app.css">
<script src="/dashboard/uplot.js"></script>
<script type="module" src="/dashboard/app.js"></script>
</head>
<body>
<form id="ssdi-token" autocomplete="off" data-token-path="/connect/token" data-scope="ServiceApi">
  <strong>SSDI dashboard</strong>
  <label>Tenant key <input name="tenant_key" autocomplete="off" required value="${v(defaults.tenantKey)}" placeholder="${v(DEMO_CLIENT.tenantKey)}"></label>
  <label>Client id <input name="client_id" autocomplete="off" required value="${v(defaults.clientId)}" placeholder="${v(DEMO_CLIENT.clientId)}"></label>
  <label>Client secret <input name="client_secret" type="password" autocomplete="off" required value="${v(defaults.clientSecret)}"></label>
  <span class="ssdi-scope">scope ServiceApi</span>
  <button type="submit">Get token</button>
  <button type="button" id="ssdi-forget" hidden>Forget token</button>
  <output id="ssdi-status" role="status">Get a token to load the dashboard.</output>
</form>
<main id="dash" hidden>
  <form id="dash-controls" autocomplete="off">
    <label>Extract <select name="extract"></select></label>
    <label>Structural entity <select name="entity"></select></label>
    <label>Days <select name="days"><option>7</option><option>14</option><option>30</option><option>90</option></select></label>
    <label>Measure <select name="measure">
      <option value="average">average</option><option value="sum">sum</option><option value="min">min</option>
      <option value="max">max</option><option value="count">count</option></select></label>
    <label>Value item <input name="valueItem" value="value" required></label>
    <label>Time item <input name="timeItem" value="date" required></label>
  </form>
  <p id="dash-live" role="status" data-state="closed">Live updates: not connected.</p>
  <p id="dash-error" role="alert" hidden></p>
  <section id="dash-summary" aria-label="Summary"></section>
  <figure id="dash-chart"><figcaption id="dash-chart-title"></figcaption><div id="dash-plot"></div></figure>
  <table id="dash-subjects">
    <caption>Subjects and their latest values</caption>
    <thead><tr><th>Subject</th><th>Name</th><th>Location</th><th class="num">Latest</th><th>On</th></tr></thead>
    <tbody></tbody>
  </table>
  <details id="dash-queries"><summary>The GraphQL this page sends</summary><pre></pre></details>
</main>
</body>
</html>
`;
}

const STYLE = `
body { margin: 0; font: 14px system-ui, sans-serif; color: #222; background: #fafafa; }
#ssdi-token { display: flex; flex-wrap: wrap; align-items: center; gap: 6px 12px; padding: 6px 12px;
  font-size: 13px; color: #333; background: #f3f4f6; border-bottom: 1px solid #ddd; }
#ssdi-token input { font: inherit; padding: 2px 4px; width: 11em; }
#ssdi-token button { font: inherit; padding: 2px 10px; cursor: pointer; }
#ssdi-token .ssdi-scope { color: #666; }
.ssdi-error { color: #b00020; }
.ssdi-ok { color: #1a7f37; }
main { padding: 8px 16px 24px; max-width: 1320px; }
#dash-controls { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: center; margin: 8px 0; }
#dash-controls select, #dash-controls input { font: inherit; padding: 2px 4px; }
#dash-controls input { width: 6em; }
#dash-live { margin: 4px 0; color: #555; }
#dash-live[data-state=open] { color: #1a7f37; }
#dash-live[data-state=error] { color: #b00020; }
#dash-live.dash-flash { font-weight: 600; }
#dash-error { color: #b00020; white-space: pre-wrap; }
#dash-summary { display: flex; flex-wrap: wrap; gap: 8px 24px; margin: 8px 0; }
#dash-summary div { display: flex; flex-direction: column; }
#dash-summary b { font-size: 18px; font-variant-numeric: tabular-nums; }
#dash-summary span { color: #666; font-size: 12px; }
#dash-chart { margin: 8px 0; padding: 8px; background: #fff; border: 1px solid #e3e3e3; }
#dash-chart figcaption { font-weight: 600; margin-bottom: 4px; }
#dash-plot { min-height: 320px; }
#dash-plot .dash-empty { padding: 24px; color: #666; }
#dash-subjects { border-collapse: collapse; background: #fff; min-width: 60%; }
#dash-subjects caption { text-align: left; font-weight: 600; padding: 4px 0; }
#dash-subjects th, #dash-subjects td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #eee; }
#dash-subjects .num { text-align: right; font-variant-numeric: tabular-nums; }
#dash-subjects .dash-pending { color: #999; }
#dash-subjects tr.dash-changed td { background: #fff6cc; transition: background 2s; }
#dash-subjects .dash-was { color: #888; font-size: 12px; margin-left: 6px; }
#dash-queries pre { font-size: 12px; background: #fff; border: 1px solid #e3e3e3; padding: 8px; overflow: auto; }
`;

/**
 * The GraphQL documents the page sends, shown on the page too (the example a dashboard builder copies).
 * `options` fills the pickers; `chart` is the daily aggregate per child entity; `subjects` lists the
 * entity's subjects at once and their latest data point later (@defer: the provider may be slow);
 * `changes` is the live subscription, each event of which re-sends `chart` and `subjects`.
 */
export const DASHBOARD_QUERIES = {
  options: `query DashboardOptions {
  dataExtracts(first: 100, orderBy: "name") { edges { node { key name } } }
  structuralEntities(first: 1000, orderBy: "displayName") { edges { node { key displayName depth parentKey } } }
}`,
  chart: `query DashboardChart($input: DataPointAggregatesInput!) {
  dataPointAggregates(input: $input) {
    aggregates { count subjectCount average min max percentiles(p: [0.5, 0.9]) }
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
    buckets { start startsAt aggregates { count sum average min max } }
    groupedAggregates {
      key
      structuralEntity { key displayName }
      buckets { start startsAt aggregates { count sum average min max } }
    }
  }
}`,
  subjects: `query DashboardSubjects($entity: String!, $extract: String!, $timeItem: String!) {
  subjects(structuralEntityKeys: [$entity], includeDescendants: true, first: 100) {
    totalCount
    edges { node {
      subjectId externalId
      customFieldValues { field { key } values { valueText } }
      structuralEntities(first: 1) { edges { node { key displayName } } }
      ... @defer(label: "latest") {
        dataPoints(extractKey: $extract, first: 1, orderBy: $timeItem, orderDirection: DESCENDING) {
          edges { node { id items { key valueText } } }
        }
      }
    } }
  }
}`,
  changes: `subscription DashboardChanges($extract: String!, $entity: String!) {
  dataPointsChanged(extractKey: $extract, structuralEntityKey: $entity) { extractKey subjectIds kind at }
}`,
};

/** JSON safe inside a script (no `</script>`, no line separators). */
function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

/**
 * The page's module (/dashboard/app.js). The token form's settings are its data attributes; the token
 * lives in the tab's sessionStorage; everything else goes to /graphql with it. Text from the service is
 * set with `textContent` only. SSE is read from a fetch stream (an EventSource cannot send the
 * Authorization header): Yoga answers `Accept: text/event-stream` with `event: next` / `event: complete`.
 */
const CLIENT_SCRIPT = String.raw`
const Q = __QUERIES__;
const KEY = 'ssdi.dashboard.token';
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#65a30d'];
const $ = (id) => document.getElementById(id);
const tokenForm = $('ssdi-token');
const statusEl = $('ssdi-status');
const controls = $('dash-controls');
const live = $('dash-live');
const errorBox = $('dash-error');
const plot = $('dash-plot');

/** What the page holds (window.ssdiDashboard, for the console). */
const state = {
  token: null,
  extracts: [],
  entities: [],
  chart: null,
  chartKey: '',
  /** subjectId -> latest value text, as last shown. */
  latest: new Map(),
  /** subjectId -> the value it had before a live change. */
  was: new Map(),
  lastChange: null,
  stream: null,
  expiry: undefined,
  refreshing: null,
  again: false,
};
window.ssdiDashboard = state;

const pad = (n) => String(n).padStart(2, '0');
const ymd = (d) => d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate());
const dayOf = (s) => new Date(Number(s.slice(0, 4)), Number(s.slice(5, 7)) - 1, Number(s.slice(8, 10)));
const addDays = (s, n) => { const d = dayOf(s); d.setDate(d.getDate() + n); return ymd(d); };
const clock = (d) => (d || new Date()).toLocaleTimeString();
const number = (x) => (x === null || x === undefined ? '–' : typeof x === 'number' ? x.toLocaleString(undefined, { maximumFractionDigits: 1 }) : String(x));

function show(text, kind) {
  statusEl.textContent = text;
  statusEl.className = kind ? 'ssdi-' + kind : '';
}
function fail(where, e) {
  errorBox.hidden = false;
  errorBox.textContent = where + ': ' + (e && e.message ? e.message : String(e));
}
function setLive(stateName, text) {
  live.dataset.state = stateName;
  live.textContent = text;
}

// ---- the token (client credentials at /connect/token, as GraphiQL's form) ----

function storedToken() {
  try {
    const t = JSON.parse(sessionStorage.getItem(KEY) || 'null');
    if (t && typeof t.accessToken === 'string' && t.expiresAt > Date.now()) return t;
  } catch (e) {}
  sessionStorage.removeItem(KEY);
  return null;
}

tokenForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  const f = tokenForm.elements;
  const tenantKey = f.tenant_key.value.trim();
  const clientId = f.client_id.value.trim();
  const body = new URLSearchParams({
    grant_type: 'client_credentials', tenant_key: tenantKey, client_id: clientId,
    client_secret: f.client_secret.value, scope: tokenForm.dataset.scope,
  });
  show('Requesting a token…');
  try {
    // Without credentials: the endpoint's 401 (WWW-Authenticate: Basic) must not make the browser prompt.
    const res = await fetch(tokenForm.dataset.tokenPath, {
      method: 'POST', credentials: 'omit', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body,
    });
    const json = await res.json().catch(() => ({}));
    if (!res.ok || typeof json.access_token !== 'string') {
      show(json.error_description || json.error || 'The token request failed (HTTP ' + res.status + ').', 'error');
      return;
    }
    const expiresIn = typeof json.expires_in === 'number' ? json.expires_in : 300;
    const token = { accessToken: json.access_token, expiresAt: Date.now() + expiresIn * 1000, tenantKey, clientId };
    sessionStorage.setItem(KEY, JSON.stringify(token));
    start(token);
  } catch (e) {
    show('The token request failed: ' + (e && e.message ? e.message : e), 'error');
  }
});
$('ssdi-forget').addEventListener('click', () => {
  sessionStorage.removeItem(KEY);
  location.reload();
});

// ---- GraphQL over HTTP: one JSON answer, or a stream of them (SSE) ----

function headers(accept) {
  return { 'Content-Type': 'application/json', Accept: accept, Authorization: 'Bearer ' + state.token.accessToken };
}
function refusal(res, body) {
  const first = body && body.errors && body.errors[0];
  return new Error((first && first.message) || (body && (body.detail || body.title)) || 'HTTP ' + res.status);
}

/** One operation, one JSON answer ({ data, errors }). */
async function gql(query, variables) {
  const res = await fetch('/graphql', {
    method: 'POST', headers: headers('application/graphql-response+json'), body: JSON.stringify({ query, variables }),
  });
  const body = await res.json().catch(() => null);
  if (!body || (body.data === undefined && body.errors) || !res.ok) throw refusal(res, body);
  return body;
}

/**
 * An operation whose answer is a stream (a subscription, a query with @defer): calls onResult with each
 * result as it arrives, onOpen once the stream is open; resolves when the server completes it.
 */
async function gqlStream(query, variables, { signal, onResult, onOpen }) {
  const res = await fetch('/graphql', {
    method: 'POST', signal, headers: headers('text/event-stream'), body: JSON.stringify({ query, variables }),
  });
  if (!(res.headers.get('content-type') || '').startsWith('text/event-stream')) {
    const body = await res.json().catch(() => null);
    if (res.ok && body && (body.data !== undefined || body.errors)) return onResult(body);
    throw refusal(res, body);
  }
  if (onOpen) onOpen();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    for (let m = /\r?\n\r?\n/.exec(buffer); m; m = /\r?\n\r?\n/.exec(buffer)) {
      const block = buffer.slice(0, m.index);
      buffer = buffer.slice(m.index + m[0].length);
      let name = 'message';
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') name = text;
        else if (field === 'data') data.push(text);
      }
      if (name === 'complete') {
        await reader.cancel().catch(() => {});
        return;
      }
      if (name === 'next' && data.length) onResult(JSON.parse(data.join('\n')));
    }
  }
}

/** Merges a @defer part ({ incremental: [{ path, data }] }) into the result it belongs to. */
function merge(result, part) {
  for (const inc of part.incremental || []) {
    let node = result.data;
    for (const k of inc.path || []) node = node == null ? node : node[k];
    if (node && inc.data) Object.assign(node, inc.data);
    if (inc.errors) result.errors = (result.errors || []).concat(inc.errors);
  }
}

// ---- the pickers ----

function settings() {
  const f = controls.elements;
  return {
    extract: f.extract.value,
    entity: f.entity.value,
    days: Number(f.days.value),
    measure: f.measure.value,
    valueItem: f.valueItem.value.trim(),
    timeItem: f.timeItem.value.trim(),
  };
}

async function loadOptions() {
  const { data } = await gql(Q.options, {});
  state.extracts = ((data.dataExtracts && data.dataExtracts.edges) || []).map((e) => e.node);
  state.entities = ((data.structuralEntities && data.structuralEntities.edges) || []).map((e) => e.node);
  const f = controls.elements;
  f.extract.replaceChildren(...state.extracts.map((x) => new Option(x.name + ' (' + x.key + ')', x.key)));
  // The hierarchy in order: each entity under its parent, indented by depth.
  const children = new Map();
  for (const e of state.entities) {
    const list = children.get(e.parentKey || null) || [];
    list.push(e);
    children.set(e.parentKey || null, list);
  }
  const ordered = [];
  const walk = (parent) => (children.get(parent) || []).forEach((e) => { ordered.push(e); walk(e.key); });
  walk(null);
  f.entity.replaceChildren(...ordered.map((e) => {
    const n = (children.get(e.key) || []).length;
    return new Option('\u00a0\u00a0'.repeat(e.depth - 1) + e.displayName + (n ? ' (' + n + ' below)' : ''), e.key);
  }));
  // Defaults: the address's, else the first extract and the topmost entity with children (one series each).
  const params = new URLSearchParams(location.search);
  const pick = (select, value) => { if (value && [...select.options].some((o) => o.value === value)) select.value = value; };
  const firstParent = ordered.find((e) => children.has(e.key));
  if (firstParent) f.entity.value = firstParent.key;
  pick(f.extract, params.get('extract'));
  pick(f.entity, params.get('entity'));
  pick(f.days, params.get('days'));
  pick(f.measure, params.get('measure'));
  if (params.get('value')) f.valueItem.value = params.get('value');
  if (params.get('time')) f.timeItem.value = params.get('time');
}

controls.addEventListener('change', () => {
  const s = settings();
  const params = new URLSearchParams({ extract: s.extract, entity: s.entity, days: s.days, measure: s.measure, value: s.valueItem, time: s.timeItem });
  history.replaceState(null, '', '?' + params);
  state.latest.clear();
  state.was.clear();
  subscribe();
  refresh();
});
controls.addEventListener('submit', (event) => event.preventDefault());

// ---- the chart: the extract's daily aggregate, one series per child entity ----

async function loadChart(s) {
  const to = addDays(ymd(new Date()), 1); // half-open: today included
  const input = {
    extractKey: s.extract, valueItemKey: s.valueItem, timeItemKey: s.timeItem, interval: 'DAY',
    from: addDays(to, -s.days), to, timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    structuralEntityKey: s.entity, includeDescendants: true, groupBy: 'CHILD_ENTITY',
    // Every child is a group; the cost counts buckets × maxGroups, so no more are asked for than there are.
    maxGroups: Math.min(100, Math.max(1, state.entities.filter((e) => e.parentKey === s.entity).length)),
  };
  const { data, errors } = await gql(Q.chart, { input });
  if (errors && errors.length) fail('Chart', errors[0]);
  renderSummary(data && data.dataPointAggregates);
  renderChart(data && data.dataPointAggregates, s, input);
}

function renderSummary(agg) {
  const box = $('dash-summary');
  const a = (agg && agg.aggregates) || {};
  const c = (agg && agg.coverage) || {};
  const p = Array.isArray(a.percentiles) ? a.percentiles : [];
  const value = (x) => (x && typeof x === 'object' ? x.value : x);
  const figures = [
    ['data points', a.count],
    ['subjects with data', c.contributingSubjectCount !== undefined ? c.contributingSubjectCount + ' of ' + c.subjectCount : a.subjectCount],
    ['average', a.average],
    ['median', value(p[0])],
    ['90th percentile', value(p[1])],
    ['min – max', a.min === undefined || a.min === null ? null : number(a.min) + ' – ' + number(a.max)],
    ['stale / unavailable', c.staleSubjectCount === undefined ? null : c.staleSubjectCount + ' / ' + c.unavailableSubjectCount],
  ];
  box.replaceChildren(...figures.map(([label, x]) => {
    const div = document.createElement('div');
    const b = document.createElement('b');
    b.textContent = number(x);
    const span = document.createElement('span');
    span.textContent = label;
    div.append(b, span);
    return div;
  }));
}

function renderChart(agg, s, input) {
  const entity = state.entities.find((e) => e.key === s.entity);
  const extract = state.extracts.find((x) => x.key === s.extract);
  $('dash-chart-title').textContent = (extract ? extract.name : s.extract) + ': daily ' + s.measure + ' of "' + s.valueItem +
    '" under ' + (entity ? entity.displayName : s.entity) + ', ' + input.from + ' to ' + addDays(input.to, -1);
  const grouped = (agg && agg.groupedAggregates) || [];
  const groups = grouped.length
    ? grouped.map((g) => ({ label: g.structuralEntity ? g.structuralEntity.displayName : g.key, buckets: g.buckets || [] }))
    : agg && agg.buckets && agg.buckets.length ? [{ label: entity ? entity.displayName : s.entity, buckets: agg.buckets }] : [];
  if (!groups.length) {
    if (state.chart) state.chart.destroy();
    state.chart = null;
    state.chartKey = '';
    const empty = document.createElement('p');
    empty.className = 'dash-empty';
    empty.textContent = 'No data points in this range.';
    plot.replaceChildren(empty);
    return;
  }
  // Every day of the range on the x axis (seconds, local midnight); a day without data is a gap.
  const days = [];
  for (let d = input.from; d < input.to; d = addDays(d, 1)) days.push(d);
  const xs = days.map((d) => dayOf(d).getTime() / 1000);
  const ys = groups.map((g) => {
    const byDay = new Map(g.buckets.map((b) => [String(b.start).slice(0, 10), b.aggregates ? b.aggregates[s.measure] : null]));
    return days.map((d) => (byDay.has(d) ? byDay.get(d) : null));
  });
  const data = [xs, ...ys];
  const key = [s.measure, ...groups.map((g) => g.label)].join('\u0000');
  if (state.chart && state.chartKey === key) {
    state.chart.setData(data);
    return;
  }
  if (state.chart) state.chart.destroy();
  plot.replaceChildren();
  state.chartKey = key;
  state.chart = new uPlot({
    width: plot.clientWidth || 800,
    height: 320,
    scales: { x: { time: true } },
    series: [{ label: 'Day' }, ...groups.map((g, i) => ({ label: g.label, stroke: COLORS[i % COLORS.length], width: 2, points: { size: 6 } }))],
    legend: { live: false },
    axes: [
      // Daily data: a tick per day (or week, or four), labelled with the date only.
      { incrs: [86400, 7 * 86400, 28 * 86400], values: (u, ticks) => ticks.map((t) => new Date(t * 1000).toLocaleDateString(undefined, { month: 'short', day: 'numeric' })) },
      { label: s.measure + ' of ' + s.valueItem, size: 70 },
    ],
  }, data, plot);
}

addEventListener('resize', () => {
  if (state.chart) state.chart.setSize({ width: plot.clientWidth || 800, height: 320 });
});

// ---- the subjects and their latest values (@defer: the list first, the provider's data after) ----

async function loadSubjects(s) {
  const result = { data: null, errors: [] };
  await gqlStream(Q.subjects, { entity: s.entity, extract: s.extract, timeItem: s.timeItem }, {
    onResult: (part) => {
      if (part.incremental) merge(result, part);
      else {
        result.data = part.data;
        result.errors = part.errors || [];
      }
      renderSubjects(result.data, s);
    },
  });
  if (result.errors.length) fail('Subjects', result.errors[0]);
}

function latestOf(node, s) {
  const edge = node.dataPoints && node.dataPoints.edges[0];
  if (!edge) return { value: node.dataPoints === undefined ? undefined : null, time: null };
  const item = (key) => edge.node.items.find((i) => i.key === key);
  return { value: (item(s.valueItem) || {}).valueText ?? null, time: (item(s.timeItem) || {}).valueText ?? null };
}

function renderSubjects(data, s) {
  const edges = (data && data.subjects && data.subjects.edges) || [];
  const rows = edges.map(({ node }) => {
    const field = (key) => {
      const v = node.customFieldValues.find((c) => c.field.key === key);
      return v && v.values.length ? v.values.map((x) => x.valueText).join(', ') : '';
    };
    const place = node.structuralEntities.edges[0];
    const latest = latestOf(node, s);
    const tr = document.createElement('tr');
    tr.dataset.subject = node.externalId || node.subjectId;
    tr.dataset.subjectId = node.subjectId;
    const cell = (text, cls) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (cls) td.className = cls;
      tr.append(td);
      return td;
    };
    cell(node.externalId || node.subjectId);
    cell(field('fullName') || field('name') || field('displayName'));
    cell(place ? place.node.displayName : '');
    const known = state.latest.get(node.subjectId);
    if (latest.value === undefined) {
      // Not here yet (deferred): the value shown before, greyed.
      cell(known === undefined || known === null ? '…' : known, 'num dash-latest dash-pending');
      cell('');
    } else {
      if (known !== undefined && known !== latest.value) state.was.set(node.subjectId, known);
      state.latest.set(node.subjectId, latest.value);
      const td = cell(latest.value === null ? '–' : latest.value, 'num dash-latest');
      if (state.was.has(node.subjectId)) {
        tr.className = 'dash-changed';
        const was = document.createElement('span');
        was.className = 'dash-was';
        was.textContent = 'was ' + (state.was.get(node.subjectId) ?? '–');
        td.append(was);
      }
      cell(latest.time || '', 'dash-time');
    }
    return tr;
  });
  $('dash-subjects').tBodies[0].replaceChildren(...rows);
}

// ---- live: every change re-sends both queries ----

/** Loads the chart and the list; a call while loading runs them once more after. */
function refresh() {
  if (state.refreshing) {
    state.again = true;
    return state.refreshing;
  }
  state.refreshing = (async () => {
    do {
      state.again = false;
      errorBox.hidden = true;
      const s = settings();
      await Promise.all([
        loadChart(s).catch((e) => fail('Chart', e)),
        loadSubjects(s).catch((e) => fail('Subjects', e)),
      ]);
    } while (state.again);
  })().finally(() => {
    state.refreshing = null;
  });
  return state.refreshing;
}

function subscribe() {
  if (state.stream) state.stream.abort();
  const ctl = new AbortController();
  state.stream = ctl;
  const s = settings();
  let lastError = null;
  setLive('connecting', 'Live updates: connecting…');
  const ended = (e) => {
    if (ctl.signal.aborted) return;
    const code = lastError && lastError.extensions && lastError.extensions.code;
    if (code === 'UNAUTHENTICATED' || state.token.expiresAt <= Date.now()) {
      setLive('error', 'Live updates ended: the token expired. Get a new one.');
      return;
    }
    const why = lastError ? lastError.message : e ? e.message || String(e) : 'the stream ended';
    setLive('error', 'Live updates: disconnected (' + why + '); reconnecting…');
    setTimeout(() => {
      if (ctl.signal.aborted) return;
      subscribe();
      refresh(); // what changed meanwhile
    }, 2000);
  };
  gqlStream(Q.changes, { extract: s.extract, entity: s.entity }, {
    signal: ctl.signal,
    onOpen: () => setLive('open', 'Live updates: listening since ' + clock() + '.'),
    onResult: (r) => {
      if (r.errors && r.errors.length) lastError = r.errors[0];
      const change = r.data && r.data.dataPointsChanged;
      if (change) onChange(change);
    },
  }).then(() => ended(null), ended);
}

async function onChange(change) {
  state.lastChange = change;
  await refresh();
  const names = new Map([...document.querySelectorAll('#dash-subjects tbody tr')].map((tr) => [tr.dataset.subjectId, tr.dataset.subject]));
  const who = change.subjectIds.length ? change.subjectIds.map((id) => names.get(id) || id).join(', ') : 'every subject';
  live.dataset.updated = new Date().toISOString();
  setLive('open', 'Updated at ' + clock() + ': ' + change.kind.toLowerCase() + ' ' + change.extractKey + ' for ' + who +
    ' (reported ' + clock(new Date(change.at)) + ').');
  live.classList.add('dash-flash');
  setTimeout(() => live.classList.remove('dash-flash'), 1500);
}

// ---- start ----

async function start(token) {
  state.token = token;
  tokenForm.elements.tenant_key.value = token.tenantKey;
  tokenForm.elements.client_id.value = token.clientId;
  show('Token for ' + token.tenantKey + ' / ' + token.clientId + ' until ' + new Date(token.expiresAt).toLocaleTimeString() + '.', 'ok');
  $('ssdi-forget').hidden = false;
  clearTimeout(state.expiry);
  state.expiry = setTimeout(() => {
    show('The token has expired: get a new one.', 'error');
    if (state.stream) state.stream.abort();
    setLive('error', 'Live updates ended: the token expired. Get a new one.');
  }, token.expiresAt - Date.now());
  $('dash').hidden = false;
  $('dash-queries').querySelector('pre').textContent = [Q.chart, Q.subjects, Q.changes, Q.options].join('\n\n');
  try {
    await loadOptions();
  } catch (e) {
    fail('Loading extracts and structural entities', e);
    return;
  }
  if (!state.extracts.length) {
    fail('Dashboard', new Error('The tenant has no data extract.'));
    return;
  }
  subscribe();
  await refresh();
}

const saved = storedToken();
if (saved) start(saved);
`.replace('__QUERIES__', () => scriptJson(DASHBOARD_QUERIES));
