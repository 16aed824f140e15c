// The chart: the extract's daily aggregate under the entity, its own total (a thicker line) beside one series
// per child entity (uPlot, the hovered day's values in its legend), and the summary figures above it.
import { byId } from '../shared/dom.js';
import { formatNumber } from './format.js';
import { gql } from './graphql.js';
import { type Aggregate, type Bucket, type ChartData, DASHBOARD_QUERIES as Q, type DataPointAggregatesInput } from './queries.js';
import { type Settings, addDays, dayOf, fail, state, ymd } from './state.js';

const TOTAL_COLOR = '#111827';
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#65a30d'];
const HEIGHT = 320;
const DAY: Intl.DateTimeFormatOptions = { weekday: 'short', month: 'short', day: 'numeric' };
const plot = byId('dash-plot');

/** What the chart asks for, its range [from, to) in local dates always set. */
type ChartInput = DataPointAggregatesInput & { from: string; to: string };

export async function loadChart(s: Settings): Promise<void> {
  const to = addDays(ymd(new Date()), 1); // half-open: today included
  const input: ChartInput = {
    extractKey: s.extract,
    valueItemKey: s.valueItem,
    timeItemKey: s.timeItem,
    interval: 'DAY',
    from: addDays(to, -s.days),
    to,
    timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    structuralEntityKey: s.entity,
    includeDescendants: true,
    groupBy: 'CHILD_ENTITY',
    // Every child is a group; the cost counts buckets × maxGroups, so no more are asked for than there are.
    maxGroups: Math.min(100, Math.max(1, state.entities.filter((e) => e.parentKey === s.entity).length)),
  };
  const { data, errors } = await gql<ChartData>(Q.chart, { input, median: s.measure === 'median' });
  if (errors?.length) fail('Chart', errors[0]);
  renderSummary(data?.dataPointAggregates, s);
  renderChart(data?.dataPointAggregates, s, input);
}

function renderSummary(agg: Aggregate | null | undefined, s: Settings): void {
  const a = agg?.aggregates;
  const c = agg?.coverage;
  const p = a?.percentiles ?? [];
  // The first tile is the picked measure over the whole range; the others describe the points behind it.
  const figures: [string, unknown][] = [
    [`${s.measure} of ${s.valueItem}`, s.measure === 'median' ? p[0] : a?.[s.measure]],
    ...(s.measure === 'count' ? [] : ([['data points', a?.count]] as [string, unknown][])),
    ['subjects with data', c ? `${c.contributingSubjectCount} of ${c.subjectCount}` : a?.subjectCount],
    ...(s.measure === 'median' ? [] : ([['median', p[0]]] as [string, unknown][])),
    ['90th percentile', p[1]],
    ['min – max', a?.min === undefined || a.min === null ? null : `${formatNumber(a.min)} – ${formatNumber(a.max)}`],
    ['stale / unavailable', c ? `${c.staleSubjectCount} / ${c.unavailableSubjectCount}` : null],
  ];
  byId('dash-summary').replaceChildren(
    ...figures.map(([label, x], i) => {
      const div = document.createElement('div');
      if (i === 0) div.dataset['tile'] = 'measure';
      const b = document.createElement('b');
      b.textContent = formatNumber(x);
      const span = document.createElement('span');
      span.textContent = label;
      div.append(b, span);
      return div;
    }),
  );
}

function renderChart(agg: Aggregate | null | undefined, s: Settings, input: ChartInput): void {
  const entity = state.entities.find((e) => e.key === s.entity);
  const extract = state.extracts.find((x) => x.key === s.extract);
  byId('dash-chart-title').textContent =
    `${extract ? extract.name : s.extract}: daily ${s.measure} of "${s.valueItem}" under ` +
    `${entity ? entity.displayName : s.entity}, ${input.from} to ${addDays(input.to, -1)}`;
  const grouped = agg?.groupedAggregates ?? [];
  const name = entity ? entity.displayName : s.entity;
  // The entity's own total first (all its subjects, those placed on it directly too), then each child's.
  const groups: { label: string; buckets: Bucket[]; total?: true }[] = agg?.buckets.length
    ? [
        { label: grouped.length ? `${name} (total)` : name, buckets: agg.buckets, total: true },
        ...grouped.map((g) => ({ label: g.structuralEntity ? g.structuralEntity.displayName : g.key, buckets: g.buckets })),
      ]
    : [];
  if (!groups.length) {
    state.chart?.destroy();
    state.chart = null;
    state.chartKey = '';
    const empty = document.createElement('p');
    empty.className = 'dash-empty';
    empty.textContent = 'No data points in this range.';
    plot.replaceChildren(empty);
    return;
  }
  // Every day of the range on the x axis (seconds, local midnight); a day without data is a gap.
  const days: string[] = [];
  for (let d = input.from; d < input.to; d = addDays(d, 1)) days.push(d);
  const xs = days.map((d) => dayOf(d).getTime() / 1000);
  const ys = groups.map((g) => {
    const byDay = new Map(
      g.buckets.map((b) => [b.start.slice(0, 10), (s.measure === 'median' ? b.aggregates.median?.[0] : b.aggregates[s.measure]) ?? null]),
    );
    return days.map((d) => byDay.get(d) ?? null);
  });
  const data: uPlot.AlignedData = [xs, ...ys];
  const key = [s.measure, ...groups.map((g) => g.label)].join('\u0000');
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
      height: HEIGHT,
      scales: { x: { time: true } },
      series: [
        { label: 'Day', value: (_u, t) => (t === null ? '–' : new Date(t * 1000).toLocaleDateString(undefined, DAY)) },
        ...groups.map((g, i) => ({
          label: g.label,
          stroke: g.total ? TOTAL_COLOR : COLORS[(i - 1) % COLORS.length],
          width: g.total ? 3.5 : 2,
          points: { size: 6 },
          value: (_u: uPlot, y: number | null) => formatNumber(y),
        })),
      ],
      // The legend reads out the hovered day's value of each series.
      legend: { live: true },
      axes: [
        // Daily data: a tick per day (or week, or four), labelled with the date only.
        {
          incrs: [86400, 7 * 86400, 28 * 86400],
          values: (_u, ticks) => ticks.map((t) => new Date(t * 1000).toLocaleDateString(undefined, { month: 'short', day: 'numeric' })),
        },
        { label: `${s.measure} of ${s.valueItem}`, size: 80, values: (_u, ticks) => ticks.map(formatNumber) },
      ],
    },
    data,
    plot,
  );
}

addEventListener('resize', () => state.chart?.setSize({ width: plot.clientWidth || 800, height: HEIGHT }));
