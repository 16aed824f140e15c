// The demo dashboard (/dashboard): a page over the public GraphQL API only, the example a dashboard
// builder copies. Get a token (the shared form), then pick an extract, a structural entity and a range: the
// chart, the summary and the subjects list load, and reload on every live change; a child's line drills down,
// a subject's row opens its own series. Text from the service is set with `textContent` only.
import { byId, field } from '../shared/dom.js';
import { type Token, handleTokenForm, show, showHeld, storedToken } from '../shared/token.js';
import { gql } from './graphql.js';
import { refresh, showChart, subscribe } from './live.js';
import { DASHBOARD_QUERIES as Q, type Entity, type OptionsData } from './queries.js';
import { closeSeries } from './series.js';
import { addDays, controls, fail, setLive, settings, state, ymd } from './state.js';

const KEY = 'ssdi.dashboard.token';

handleTokenForm(KEY, (token) => void start(token));

// ---- the pickers ----

async function loadOptions(): Promise<void> {
  const { data, errors } = await gql<OptionsData>(Q.options, {});
  if (!data) throw new Error(errors?.[0]?.message ?? 'no data');
  state.extracts = (data.dataExtracts?.edges ?? []).map((e) => e.node);
  state.entities = (data.structuralEntities?.edges ?? []).map((e) => e.node);
  const extract = field<HTMLSelectElement>(controls, 'extract');
  const entity = field<HTMLSelectElement>(controls, 'entity');
  extract.replaceChildren(...state.extracts.map((x) => new Option(`${x.name} (${x.key})`, x.key)));
  // The hierarchy in order: each entity under its parent, indented by depth.
  const children = new Map<string | null, Entity[]>();
  for (const e of state.entities) {
    const list = children.get(e.parentKey) ?? [];
    list.push(e);
    children.set(e.parentKey, list);
  }
  const ordered: Entity[] = [];
  const walk = (parent: string | null) =>
    (children.get(parent) ?? []).forEach((e) => {
      ordered.push(e);
      walk(e.key);
    });
  walk(null);
  entity.replaceChildren(
    ...ordered.map((e) => {
      const n = children.get(e.key)?.length ?? 0;
      return new Option('\u00a0\u00a0'.repeat(e.depth - 1) + e.displayName + (n ? ` (${n} below)` : ''), e.key);
    }),
  );
  // Defaults: the address's, else the first extract and the topmost entity with children (one series each).
  const params = new URLSearchParams(location.search);
  const pick = (select: HTMLSelectElement, value: string | null) => {
    if (value && [...select.options].some((o) => o.value === value)) select.value = value;
  };
  const firstParent = ordered.find((e) => children.has(e.key));
  if (firstParent) entity.value = firstParent.key;
  pick(extract, params.get('extract'));
  pick(entity, params.get('entity'));
  pick(field(controls, 'range'), params.get('range') ?? params.get('days'));
  for (const name of ['from', 'to']) field(controls, name).value = params.get(name) ?? '';
  customShown();
  pick(field(controls, 'measure'), params.get('measure'));
  const value = params.get('value');
  if (value) field(controls, 'valueItem').value = value;
  const time = params.get('time');
  if (time) field(controls, 'timeItem').value = time;
}

/** The from and to inputs show with a custom range only. */
function customShown(): void {
  byId('dash-custom').hidden = field<HTMLSelectElement>(controls, 'range').value !== 'custom';
}

let entityShown = '';
controls.addEventListener('change', (event) => {
  const range = field<HTMLSelectElement>(controls, 'range');
  // A custom range starts as the range shown before it.
  if (event.target === range && range.value === 'custom' && !field(controls, 'from').value) {
    const shown = state.chart?.data[0];
    field(controls, 'from').value = shown?.length ? ymd(new Date(shown[0]! * 1000)) : addDays(ymd(new Date()), -29);
    field(controls, 'to').value = ymd(new Date());
  }
  customShown();
  const s = settings();
  // Another entity lists other subjects: the one picked under the last is closed.
  if (s.entity !== entityShown) closeSeries();
  entityShown = s.entity;
  const params = new URLSearchParams({
    extract: s.extract,
    entity: s.entity,
    range: s.range,
    ...(s.range === 'custom' ? { from: field(controls, 'from').value, to: field(controls, 'to').value } : {}),
    measure: s.measure,
    value: s.valueItem,
    time: s.timeItem,
  });
  history.replaceState(null, '', `?${params}`);
  state.latest.clear();
  state.was.clear();
  showChart();
  subscribe();
  void refresh();
});
controls.addEventListener('submit', (event) => event.preventDefault());

// ---- start ----

async function start(token: Token): Promise<void> {
  state.token = token;
  showHeld(token, `Token for ${token.tenantKey} / ${token.clientId} until ${new Date(token.expiresAt).toLocaleTimeString()}.`);
  clearTimeout(state.expiry);
  state.expiry = setTimeout(() => {
    show('The token has expired: get a new one.', 'error');
    state.stream?.abort();
    state.chartStream?.abort();
    setLive('error', 'Live updates ended: the token expired. Get a new one.');
  }, token.expiresAt - Date.now());
  byId('dash').hidden = false;
  const shown = byId('dash-queries').querySelector('pre');
  if (shown) shown.textContent = [Q.chart, Q.subjects, Q.series, Q.changes, Q.options].join('\n\n');
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
  entityShown = settings().entity;
  showChart();
  subscribe();
  await refresh();
}

const saved = storedToken(KEY);
if (saved) void start(saved);
