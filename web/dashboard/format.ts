// The page's one number format: the tiles, the chart's axis and legend, the subject's series and the subjects
// list all use it, with the unit the extract declares for the item (DataExtract.items).
import type { Settings } from './state.js';
import { state } from './state.js';

const NUMBER = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

/** A number (or a number's text, as a data point's valueText) in the page's format; other text as it is, none as '–'. */
export function formatNumber(x: unknown): string {
  if (x === null || x === undefined || x === '') return '–';
  const n = typeof x === 'number' ? x : typeof x === 'string' ? Number(x) : NaN;
  return Number.isFinite(n) ? NUMBER.format(n) : String(x);
}

/** A number and its unit ("9,012.5 steps"); none without a unit or a number. */
export function formatValue(x: unknown, unit: string | null): string {
  const text = formatNumber(x);
  return unit && text !== '–' ? `${text} ${unit}` : text;
}

/** The picked value item as the extract declares it: its name and unit (the key, and none, if undeclared). */
export function valueItem(s: Pick<Settings, 'extract' | 'valueItem'>): { name: string; unit: string | null } {
  const item = state.extracts.find((x) => x.key === s.extract)?.items.find((i) => i.key === s.valueItem);
  return { name: item?.name ?? s.valueItem, unit: item?.unit ?? null };
}

/** The unit of the picked measure: the item's, except for a count (of data points). */
export const measureUnit = (s: Settings): string | null => (s.measure === 'count' ? null : valueItem(s).unit);
