// The page's one number format: the tiles, the chart's axis and legend, and the subjects list all use it.
// (The schema has no unit for an extract's value item, so numbers are shown without one.)

const NUMBER = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

/** A number (or a number's text, as a data point's valueText) in the page's format; other text as it is, none as '–'. */
export function formatNumber(x: unknown): string {
  if (x === null || x === undefined || x === '') return '–';
  const n = typeof x === 'number' ? x : typeof x === 'string' ? Number(x) : NaN;
  return Number.isFinite(n) ? NUMBER.format(n) : String(x);
}
