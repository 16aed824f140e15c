// What the page holds, its elements and the pickers' settings: shared by the chart, the subjects list and
// the live updates.
import { byId, field, messageOf } from '../shared/dom.js';
import type { Token } from '../shared/token.js';
import type { Change, Entity, Extract } from './queries.js';

export type Measure = 'average' | 'sum' | 'min' | 'max' | 'count' | 'median';

/** The pickers' values. */
export interface Settings {
  extract: string;
  entity: string;
  days: number;
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
  /** subjectId -> latest value text, as last shown. */
  latest: Map<string, string | null>;
  /** subjectId -> the value it had before a live change. */
  was: Map<string, string | null>;
  lastChange: Change | null;
  stream: AbortController | null;
  expiry: ReturnType<typeof setTimeout> | undefined;
  /** The chart and list loading now, if they are. */
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
  latest: new Map(),
  was: new Map(),
  lastChange: null,
  stream: null,
  expiry: undefined,
  refreshing: null,
  again: false,
};
window.ssdiDashboard = state;

export const controls = byId<HTMLFormElement>('dash-controls');
const errorBox = byId('dash-error');
const live = byId('dash-live');

export function settings(): Settings {
  return {
    extract: field<HTMLSelectElement>(controls, 'extract').value,
    entity: field<HTMLSelectElement>(controls, 'entity').value,
    days: Number(field<HTMLSelectElement>(controls, 'days').value),
    measure: field<HTMLSelectElement>(controls, 'measure').value as Measure,
    valueItem: field(controls, 'valueItem').value.trim(),
    timeItem: field(controls, 'timeItem').value.trim(),
  };
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
 * Offers only the day ranges the data needs: those up to the first that reaches back to `earliest` (the
 * earliest data point's date); a range picked beyond them is narrowed, which reloads the page's data.
 */
export function clampDays(earliest: string | null): void {
  const select = field<HTMLSelectElement>(controls, 'days');
  const ranges = [...select.options].map((o) => Number(o.value));
  // No data (or none known): every range is offered.
  const held = earliest ? Math.round((dayOf(ymd(new Date())).getTime() - dayOf(earliest).getTime()) / 86_400_000) + 1 : Infinity;
  const enough = ranges.find((n) => n >= held) ?? Math.max(...ranges);
  for (const o of select.options) o.disabled = Number(o.value) > enough;
  if (Number(select.value) > enough) {
    select.value = String(enough);
    select.dispatchEvent(new Event('change', { bubbles: true }));
  }
}

// Dates as the service's `start` (yyyy-MM-dd, local).
const pad = (n: number) => String(n).padStart(2, '0');
export const ymd = (d: Date): string => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
export const dayOf = (s: string): Date => new Date(Number(s.slice(0, 4)), Number(s.slice(5, 7)) - 1, Number(s.slice(8, 10)));
export function addDays(s: string, n: number): string {
  const d = dayOf(s);
  d.setDate(d.getDate() + n);
  return ymd(d);
}
export const clock = (d?: Date): string => (d ?? new Date()).toLocaleTimeString();
