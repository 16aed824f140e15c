// The chart: the extract's daily aggregate under the entity, its own total (a thicker line) beside one series
// per child entity (uPlot, the hovered day's values in its legend, with the item's unit), and the summary
// figures above it. A child's line or legend entry drills down to it (drill.ts); the states (loading, empty,
// error, stale) are said in words where the chart would be.
import { byId } from '../shared/dom.js';
import { focusHooks } from './drill.js';
import { formatNumber, formatValue, measureUnit, valueItem } from './format.js';
import { gqlStream, words } from './graphql.js';
import { type Aggregate, type Bucket, type ChartData, DASHBOARD_QUERIES as Q, type DataPointAggregatesInput } from './queries.js';
import { type Settings, addDays, dayOf, daysBetween, fail, state } from './state.js';

const TOTAL_COLOR = '#111827';
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#65a30d'];
const DAY: Intl.DateTimeFormatOptions = { weekday: 'short', year: 'numeric', month: 'short', day: 'numeric' };
const plot = byId('dash-plot');
const note = byId('dash-plot-note');
const stale = byId('dash-stale');
const filling = byId('dash-filling');

/** The longest range charted by day; a longer one is charted by week (a year by day costs more than the query limit). */
export const MAX_DAILY = 92;

/** The chart's interval for the range, and the start of each of its periods in the range (yyyy-MM-dd). */
export function periods(s: Settings): { interval: 'DAY' | 'WEEK'; starts: string[] } {
  const interval = daysBetween(s.from, s.to) > MAX_DAILY ? 'WEEK' : 'DAY';
  // An ISO week starts on a Monday: the first period is the week holding the range's first day.
  let d = interval === 'DAY' ? s.from : addDays(s.from, -((dayOf(s.from).getDay() + 6) % 7));
  const starts: string[] = [];
  for (; d < s.to; d = addDays(d, interval === 'DAY' ? 1 : 7)) starts.push(d);
  return { interval, starts };
}

/** The chart's height: about half the window, so the page is filled at 1280×800 as at 1920×1080. */
export const chartHeight = (): number => Math.round(Math.max(240, Math.min(560, innerHeight * 0.48)));

/** Says where the chart would be what it is waiting for or why there is none; null clears it. */
export function plotNote(text: string | null, kind: 'loading' | 'empty' | 'error' = 'empty'): void {
  note.hidden = text === null;
  note.textContent = text ?? '';
  note.dataset['kind'] = kind;
  plot.dataset['state'] = text === null ? 'drawn' : kind;
}

/**
 * Follows the chart's question (the `chart` subscription): its first event is the current answer (after partial
 * answers while the cache fills, said in words), each later one the answer recomputed after a change under it;
 * every event redraws the chart and the tiles. Resolves when the stream ends (aborted through `signal`, or ended
 * by the service), to whether the question was refused (an answer with errors only: asking again would be
 * refused again); rejects when it cannot be had.
 */
export async function followChart(s: Settings, signal: AbortSignal): Promise<{ refused: boolean }> {
  const input: DataPointAggregatesInput & { from: string; to: string } = {
    extractKey: s.extract,
    valueItemKey: s.valueItem,
    timeItemKey: s.timeItem,
    interval: periods(s).interval,
    from: s.from,
    to: s.to,
    timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    structuralEntityKey: s.entity,
    includeDescendants: true,
    groupBy: 'CHILD_ENTITY',
    // Every child is a group; the cost counts buckets × maxGroups, so no more are asked for than there are.
    maxGroups: Math.min(100, Math.max(1, state.entities.filter((e) => e.parentKey === s.entity).length)),
  };
  // Loading: said at once, and after a while why it may take long (a cold cache is filled from the provider).
  const started = Date.now();
  const loading = () => {
    const waited = Math.round((Date.now() - started) / 1000);
    plotNote(
      waited < 2
        ? 'Loading the chart…'
        : `Loading the chart… ${waited} s (a first question over data not yet cached asks the provider for it)`,
      'loading',
    );
  };
  if (state.chart) plot.dataset['state'] = 'loading';
  else loading();
  state.chartLoading = true;
  const ticker = setInterval(() => state.chart || loading(), 1000);
  const shown = (agg: Aggregate | null | undefined, problem: string | undefined) => {
    clearInterval(ticker);
    // A partial answer (the cache still filling) is drawn, and replaced by the next.
    const pending = agg?.coverage.pendingSubjectCount ?? 0;
    state.chartLoading = pending > 0;
    renderSummary(agg, s);
    renderStale(agg);
    filling.hidden = pending === 0;
    filling.textContent =
      agg && pending > 0
        ? `Partial answer, filling: ${formatNumber(agg.coverage.subjectCount - pending)} of ${formatNumber(agg.coverage.subjectCount)} subjects' data fetched from the provider so far; the chart is redrawn as the rest arrives.`
        : '';
    renderChart(agg, s, problem);
    plot.dataset['events'] = String(Number(plot.dataset['events'] ?? 0) + 1);
  };
  let refused = false;
  try {
    await gqlStream<ChartData>(
      Q.chart,
      { input, median: s.measure === 'median' },
      {
        signal,
        onResult: (r) => {
          if (signal.aborted) return;
          const problem = r.errors?.[0] && words(r.errors[0]);
          refused = !!problem && !r.data?.dataPointAggregatesChanged;
          if (problem) fail('Chart', new Error(problem));
          shown(r.data?.dataPointAggregatesChanged, problem);
        },
      },
    );
    return { refused };
  } catch (e) {
    if (signal.aborted) return { refused: false };
    shown(null, e instanceof Error ? e.message : String(e));
    throw e;
  } finally {
    clearInterval(ticker);
    // A stream replaced by another leaves the flag to it.
    if (!signal.aborted) state.chartLoading = false;
  }
}

function renderSummary(agg: Aggregate | null | undefined, s: Settings): void {
  const a = agg?.aggregates;
  const c = agg?.coverage;
  const p = a?.percentiles ?? [];
  const { name } = valueItem(s);
  const unit = measureUnit(s);
  // A figure with the unit (set smaller by the tile).
  const v = (x: unknown): [string, string] => [formatNumber(x), formatNumber(x) === '–' ? '' : (unit ?? '')];
  // The first tile is the picked measure over the whole range; the others describe the points behind it.
  type Figure = [string, string | [string, string]];
  const figures: Figure[] = [
    [`${s.measure} of ${name}`, v(s.measure === 'median' ? p[0] : a?.[s.measure])],
    ...(s.measure === 'count' ? [] : ([['data points', formatNumber(a?.count)]] as Figure[])),
    [
      'subjects with data',
      c ? `${formatNumber(c.contributingSubjectCount)} of ${formatNumber(c.subjectCount)}` : formatNumber(a?.subjectCount),
    ],
    ...(s.measure === 'median' ? [] : ([['median', v(p[0])]] as Figure[])),
    ['90th percentile', v(p[1])],
    ['min – max', a?.min === undefined || a.min === null ? '–' : [`${formatNumber(a.min)} – ${formatNumber(a.max)}`, unit ?? '']],
    ['stale / unavailable', c ? `${c.staleSubjectCount} / ${c.unavailableSubjectCount}` : '–'],
  ];
  byId('dash-summary').replaceChildren(
    ...figures.map(([label, text], i) => {
      const div = document.createElement('div');
      if (i === 0) div.dataset['tile'] = 'measure';
      const b = document.createElement('b');
      const [figure, unitText] = typeof text === 'string' ? [text, ''] : text;
      b.textContent = figure;
      if (unitText) {
        const small = document.createElement('small');
        small.textContent = unitText;
        b.append(' ', small);
      }
      const span = document.createElement('span');
      span.textContent = label;
      div.append(b, span);
      return div;
    }),
  );
}

/** Stale: some subjects' data could not be refreshed (older data shown) or could not be had at all. */
function renderStale(agg: Aggregate | null | undefined): void {
  const c = agg?.coverage;
  const parts: string[] = [];
  if (c?.staleSubjectCount)
    parts.push(
      `${c.staleSubjectCount} of ${c.subjectCount} subjects' data could not be refreshed from the provider: older data is shown for them.`,
    );
  if (c?.unavailableSubjectCount)
    parts.push(`${c.unavailableSubjectCount} of ${c.subjectCount} subjects have no data: the provider could not be reached for them.`);
  stale.hidden = parts.length === 0;
  stale.textContent = parts.length ? `Not all current: ${parts.join(' ')}` : '';
}

function renderChart(agg: Aggregate | null | undefined, s: Settings, problem: string | undefined): void {
  const entity = state.entities.find((e) => e.key === s.entity);
  const extract = state.extracts.find((x) => x.key === s.extract);
  const { name: itemName } = valueItem(s);
  const unit = measureUnit(s);
  const name = entity ? entity.displayName : s.entity;
  const { interval, starts } = periods(s);
  byId('dash-chart-title').textContent =
    `${extract ? extract.name : s.extract}: ${interval === 'DAY' ? 'daily' : 'weekly'} ${s.measure} of ${itemName}${unit ? ` (${unit})` : ''} under ` +
    `${name}, ${s.from} to ${addDays(s.to, -1)}`;
  const grouped = agg?.groupedAggregates ?? [];
  // The entity's own total first (all its subjects, those placed on it directly too), then each child's.
  const groups: { label: string; key: string; buckets: Bucket[]; total?: true }[] = agg?.buckets.some((b) => b.aggregates.count > 0)
    ? [
        { label: grouped.length ? `${name} (total)` : name, key: s.entity, buckets: agg.buckets, total: true },
        ...grouped.map((g) => ({ label: g.structuralEntity ? g.structuralEntity.displayName : g.key, key: g.key, buckets: g.buckets })),
      ]
    : [];
  if (!groups.length) {
    state.chart?.destroy();
    state.chart = null;
    state.chartKey = '';
    state.seriesKeys = [];
    plot.replaceChildren();
    if (problem) plotNote(`The chart could not be loaded: ${problem}`, 'error');
    else if (agg && agg.coverage.subjectCount === 0) plotNote(`No subjects under ${name}: there is nothing to chart.`);
    else plotNote(`No data points of ${itemName} under ${name} from ${s.from} to ${addDays(s.to, -1)}.`);
    return;
  }
  plotNote(null);
  // Every period of the range on the x axis (seconds, local midnight); one without data is a gap.
  const days = starts;
  const xs = days.map((d) => dayOf(d).getTime() / 1000);
  const ys = groups.map((g) => {
    const byDay = new Map(
      g.buckets.map((b) => [b.start.slice(0, 10), (s.measure === 'median' ? b.aggregates.median?.[0] : b.aggregates[s.measure]) ?? null]),
    );
    return days.map((d) => byDay.get(d) ?? null);
  });
  const data: uPlot.AlignedData = [xs, ...ys];
  state.seriesKeys = groups.map((g) => g.key);
  const key = [s.measure, unit, interval, ...groups.map((g) => g.label)].join('\u0000');
  if (state.chart && state.chartKey === key) {
    state.chart.setData(data);
    return;
  }
  state.chart?.destroy();
  plot.replaceChildren();
  state.chartKey = key;
  state.chart = new uPlot(
    {
      width: plot.clientWidth || 800,
      height: chartHeight(),
      scales: { x: { time: true } },
      // A click picks (drill.ts), it does not zoom; the line nearest the pointer is the one a click picks.
      cursor: { drag: { x: false, y: false }, focus: { prox: 24 } },
      focus: { alpha: 0.35 },
      hooks: focusHooks,
      series: [
        {
          label: interval === 'DAY' ? 'Day' : 'Week of',
          value: (_u, t) => (t === null ? '–' : new Date(t * 1000).toLocaleDateString(undefined, DAY)),
        },
        ...groups.map((g, i) => ({
          label: g.label,
          stroke: g.total ? TOTAL_COLOR : COLORS[(i - 1) % COLORS.length],
          width: g.total ? 3 : 1.5,
          points: { show: days.length <= 62, size: 5 },
          value: (_u: uPlot, y: number | null) => formatValue(y, unit),
        })),
      ],
      // The legend reads out the hovered day's value of each series.
      legend: { live: true },
      axes: [
        {
          values: (_u, ticks) => ticks.map((t) => new Date(t * 1000).toLocaleDateString(undefined, { month: 'short', day: 'numeric' })),
        },
        { label: `${s.measure}${unit ? ` (${unit})` : ''}`, size: 80, values: (_u, ticks) => ticks.map(formatNumber) },
      ],
    },
    data,
    plot,
  );
}

addEventListener('resize', () => state.chart?.setSize({ width: plot.clientWidth || 800, height: chartHeight() }));
