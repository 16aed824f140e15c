// What the page holds, its elements and the pickers' settings: shared by the charts, the subjects list and
// the live updates.
import { byId, field, messageOf } from '../shared/dom.js';
import type { Token } from '../shared/token.js';
import type { Change, Entity, Extract } from './queries.js';

export type Measure = 'average' | 'sum' | 'min' | 'max' | 'count' | 'median';

/** The pickers' values; the range [from, to) in local dates, as the chart asks for it. */
export interface Settings {
  extract: string;
  entity: string;
  /** A number of days up to today, or 'custom' (the from and to inputs). */
  range: string;
  from: string;
  to: string;
  measure: Measure;
  valueItem: string;
  timeItem: string;
}

export interface DashboardState {
  token: Token | null;
  extracts: Extract[];
  entities: Entity[];
  chart: uPlot | null;
  /** The measure and series the chart was made for (another set makes a new chart). */
  chartKey: string;
  /** The entity key of each of the chart's series (index 1 on: the selected entity, then its children). */
  seriesKeys: string[];
  /** The subject whose own series is shown below the chart, if one is; and that chart. */
  subject: { id: string; label: string } | null;
  seriesChart: uPlot | null;
  /** The first and last day the listed subjects have data for (yyyy-MM-dd), once known. */
  extent: { earliest: string | null; latest: string | null };
  /** subjectId -> latest value text, as last shown. */
  latest: Map<string, string | null>;
  /** subjectId -> the value it had before a live change. */
  was: Map<string, string | null>;
  lastChange: Change | null;
  stream: AbortController | null;
  expiry: ReturnType<typeof setTimeout> | undefined;
  /** The chart's stream, while open; whether its first answer is awaited. */
  chartStream: AbortController | null;
  chartLoading: boolean;
  /** The list (and the open subject) loading now, if they are. */
  refreshing: Promise<void> | null;
  /** A refresh was asked for while loading: load once more after. */
  again: boolean;
}

declare global {
  interface Window {
    /** For the console (and the tests). */
    ssdiDashboard: DashboardState;
  }
}

export const state: DashboardState = {
  token: null,
  extracts: [],
  entities: [],
  chart: null,
  chartKey: '',
  seriesKeys: [],
  subject: null,
  seriesChart: null,
  extent: { earliest: null, latest: null },
  latest: new Map(),
  was: new Map(),
  lastChange: null,
  stream: null,
  expiry: undefined,
  chartStream: null,
  chartLoading: false,
  refreshing: null,
  again: false,
};
window.ssdiDashboard = state;

export const controls = byId<HTMLFormElement>('dash-controls');
const errorBox = byId('dash-error');
const live = byId('dash-live');

export function settings(): Settings {
  const range = field<HTMLSelectElement>(controls, 'range').value;
  const today = ymd(new Date());
  const [from, to] =
    range === 'custom'
      ? [field(controls, 'from').value, addDays(field(controls, 'to').value || today, 1)]
      : [addDays(today, 1 - Number(range)), addDays(today, 1)]; // half-open: today included
  return {
    extract: field<HTMLSelectElement>(controls, 'extract').value,
    entity: field<HTMLSelectElement>(controls, 'entity').value,
    range,
    from,
    to,
    measure: field<HTMLSelectElement>(controls, 'measure').value as Measure,
    valueItem: field(controls, 'valueItem').value.trim(),
    timeItem: field(controls, 'timeItem').value.trim(),
  };
}

/** The longest range the page asks for: a year and a day (a leap year's 366 days). */
export const MAX_DAYS = 366;

/** What is wrong with the custom range, in words; null when it can be asked. */
export function rangeProblem(s: Settings): string | null {
  if (s.range !== 'custom') return null;
  const to = field(controls, 'to').value;
  if (!DATE.test(s.from) || !DATE.test(to)) return 'Pick both days of the custom range (from and to).';
  if (s.from > to) return `The range starts (${s.from}) after it ends (${to}): pick a "from" day on or before the "to" day.`;
  if (daysBetween(s.from, s.to) > MAX_DAYS)
    return `The range spans ${daysBetween(s.from, s.to)} days; at most ${MAX_DAYS} can be charted by day.`;
  return null;
}

/** Shows what failed where (until the next refresh). */
export function fail(where: string, e: unknown): void {
  errorBox.hidden = false;
  errorBox.textContent = `${where}: ${messageOf(e)}`;
}
export function clearFailure(): void {
  errorBox.hidden = true;
}

export function setLive(stateName: 'connecting' | 'open' | 'error', text: string): void {
  live.dataset['state'] = stateName;
  live.textContent = text;
}

/**
 * Fits the range pickers to the data the listed subjects hold (`earliest` to `latest`): offers only the day
 * ranges up to the first that reaches back to its first day, narrows one picked beyond them, and keeps a
 * custom range within the data (its inputs' min and max). A change reloads the page's data.
 */
export function clampRange(earliest: string | null, latest: string | null): void {
  state.extent = { earliest, latest };
  const select = field<HTMLSelectElement>(controls, 'range');
  const presets = [...select.options].filter((o) => o.value !== 'custom');
  const ranges = presets.map((o) => Number(o.value));
  const today = ymd(new Date());
  // No data (or none known): every range is offered.
  const held = earliest ? daysBetween(earliest, addDays(today, 1)) : Infinity;
  const enough = ranges.find((n) => n >= held) ?? Math.max(...ranges);
  for (const o of presets) o.disabled = Number(o.value) > enough;
  const [from, to] = [field(controls, 'from'), field(controls, 'to')];
  from.min = to.min = earliest ?? '';
  from.max = to.max = latest ?? today;
  let changed = false;
  if (select.value !== 'custom' && Number(select.value) > enough) {
    select.value = String(enough);
    changed = true;
  }
  if (select.value === 'custom') {
    for (const input of [from, to]) {
      const clamped = clampDay(input.value, input.min, input.max);
      if (clamped !== input.value) [input.value, changed] = [clamped, true];
    }
  }
  if (changed) controls.dispatchEvent(new Event('change'));
}

/** A day within [min, max] (either bound may be empty: none). */
export function clampDay(day: string, min: string, max: string): string {
  if (!DATE.test(day)) return day;
  if (min && day < min) return min;
  if (max && day > max) return max;
  return day;
}

// Dates as the service's `start` (yyyy-MM-dd, local).
const DATE = /^\d{4}-\d\d-\d\d$/;
const pad = (n: number) => String(n).padStart(2, '0');
export const ymd = (d: Date): string => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
export const dayOf = (s: string): Date => new Date(Number(s.slice(0, 4)), Number(s.slice(5, 7)) - 1, Number(s.slice(8, 10)));
export function addDays(s: string, n: number): string {
  const d = dayOf(s);
  d.setDate(d.getDate() + n);
  return ymd(d);
}
/** The days in [from, to). */
export const daysBetween = (from: string, to: string): number => Math.round((dayOf(to).getTime() - dayOf(from).getTime()) / 86_400_000);
export const clock = (d?: Date): string => (d ?? new Date()).toLocaleTimeString();
