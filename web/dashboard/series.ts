// A subject's own series: its data points over the range (the `series` query: the subject's newest points,
// those in the range charted by day), opened by clicking its row in the subjects list, closed by its button.
import { byId } from '../shared/dom.js';
import { formatNumber, formatValue, valueItem } from './format.js';
import { gql, words } from './graphql.js';
import { DASHBOARD_QUERIES as Q, type SeriesData } from './queries.js';
import { type Settings, addDays, dayOf, state } from './state.js';

const panel = byId('dash-series');
const title = byId('dash-series-title');
const plot = byId('dash-series-plot');
const note = byId('dash-series-note');
const HEIGHT = 200;
const DAY: Intl.DateTimeFormatOptions = { weekday: 'short', year: 'numeric', month: 'short', day: 'numeric' };

export function openSeries(subject: { id: string; label: string }, s: Settings): Promise<void> {
  state.subject = subject;
  panel.hidden = false;
  return loadSeries(s);
}

export function closeSeries(): void {
  state.subject = null;
  state.seriesChart?.destroy();
  state.seriesChart = null;
  plot.replaceChildren();
  panel.hidden = true;
}
byId('dash-series-close').addEventListener('click', closeSeries);

/** (Re)loads the open subject's series, if one is open. */
export async function loadSeries(s: Settings): Promise<void> {
  const subject = state.subject;
  if (!subject) return;
  const { name, unit } = valueItem(s);
  const extract = state.extracts.find((x) => x.key === s.extract);
  title.textContent = `${subject.label}: ${extract ? extract.name : s.extract}, ${name}${unit ? ` (${unit})` : ''}, ${s.from} to ${addDays(s.to, -1)}`;
  const say = (text: string | null, kind = 'empty') => {
    note.hidden = text === null;
    note.textContent = text ?? '';
    note.dataset['kind'] = kind;
    plot.dataset['state'] = text === null ? 'drawn' : kind;
  };
  if (!state.seriesChart) say('Loading the subject’s data points…', 'loading');
  let data: SeriesData | null | undefined;
  try {
    const result = await gql<SeriesData>(Q.series, { id: subject.id, extract: s.extract, timeItem: s.timeItem });
    if (result.errors?.[0]) throw new Error(words(result.errors[0]));
    data = result.data;
  } catch (e) {
    state.seriesChart?.destroy();
    state.seriesChart = null;
    plot.replaceChildren();
    say(`The subject's data points could not be loaded: ${e instanceof Error ? e.message : String(e)}`, 'error');
    return;
  }
  if (state.subject !== subject) return; // another was opened meanwhile
  // The day of each point in the range, and its value.
  const byDay = new Map<string, number | null>();
  for (const { node } of data?.subject?.dataPoints?.edges ?? []) {
    const day = node.items.find((i) => i.key === s.timeItem)?.valueText?.slice(0, 10);
    const text = node.items.find((i) => i.key === s.valueItem)?.valueText;
    if (!day || day < s.from || day >= s.to || byDay.has(day)) continue;
    const n = text === null || text === undefined ? NaN : Number(text);
    byDay.set(day, Number.isFinite(n) ? n : null);
  }
  if (![...byDay.values()].some((v) => v !== null)) {
    state.seriesChart?.destroy();
    state.seriesChart = null;
    plot.replaceChildren();
    say(`${subject.label} has no data points of ${name} in this range.`);
    return;
  }
  say(null);
  const days: string[] = [];
  for (let d = s.from; d < s.to; d = addDays(d, 1)) days.push(d);
  const aligned: uPlot.AlignedData = [days.map((d) => dayOf(d).getTime() / 1000), days.map((d) => byDay.get(d) ?? null)];
  const key = `${subject.id}\u0000${unit}\u0000${name}`;
  if (state.seriesChart && plot.dataset['key'] === key) {
    state.seriesChart.setData(aligned);
    return;
  }
  state.seriesChart?.destroy();
  plot.replaceChildren();
  plot.dataset['key'] = key;
  state.seriesChart = new uPlot(
    {
      width: plot.clientWidth || 800,
      height: HEIGHT,
      scales: { x: { time: true } },
      cursor: { drag: { x: false, y: false } },
      series: [
        { label: 'Day', value: (_u, t) => (t === null ? '–' : new Date(t * 1000).toLocaleDateString(undefined, DAY)) },
        {
          label: subject.label,
          stroke: '#0f766e',
          width: 1.5,
          points: { show: days.length <= 62, size: 5 },
          value: (_u, y) => formatValue(y, unit),
        },
      ],
      legend: { live: true },
      axes: [
        { values: (_u, ticks) => ticks.map((t) => new Date(t * 1000).toLocaleDateString(undefined, { month: 'short', day: 'numeric' })) },
        { label: unit ?? name, size: 80, values: (_u, ticks) => ticks.map(formatNumber) },
      ],
    },
    aligned,
    plot,
  );
}

addEventListener('resize', () => state.seriesChart?.setSize({ width: plot.clientWidth || 800, height: HEIGHT }));
