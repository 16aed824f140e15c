import { parse, stringify } from 'lossless-json';

/**
 * A JSON number a double does not hold exactly (more than 15 significant digits, or out of its range),
 * kept as the provider wrote it (P86): stored as that text, so PostgreSQL's numeric sums it exactly.
 * Everywhere else it is its nearest double (`value`; JSON.stringify writes that).
 */
export class ExactDecimal {
  constructor(
    readonly text: string,
    readonly value: number,
  ) {}

  toJSON(): number {
    return this.value;
  }
}

/** A number's JSON text as (sign, significant digits, exponent of the last digit); zero is ['', '', 0]. */
function decimalParts(text: string): [string, string, number] {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m) return ['', text, 0];
  const all = `${m[2]}${m[3] ?? ''}`;
  const lead = all.length - all.replace(/^0+/, '').length;
  const digits = all.replace(/^0+/, '').replace(/0+$/, '');
  if (digits === '') return ['', '', 0];
  const trailing = all.length - lead - digits.length;
  return [m[1]!, digits, Number(m[4] ?? 0) - (m[3]?.length ?? 0) + trailing];
}

/**
 * The number `text` means: a double when the double's shortest text means the same value, else an
 * ExactDecimal. A value too small for a double is its zero, as JSON.parse reads it (no float holds it).
 */
function exactNumber(text: string): number | ExactDecimal {
  const n = Number(text);
  if (n === 0) return n;
  const [a, b] = [decimalParts(text), decimalParts(String(n))];
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2] ? n : new ExactDecimal(text, n);
}

// What may be a number a double does not hold: 16 or more significant digits (a run of digits and a point
// that long), or a three-digit exponent; maybe inside a string, which only costs the slower parse.
const CANDIDATE = /[\d.]{16,}(?:[eE][+-]?\d+)?|[\d.]*\d[eE][+-]?\d{3,}/g;
const ANY_CANDIDATE = /[\d.]{16}|\d[eE][+-]?\d{3}/;

/** Whether `text` may hold a number a double does not hold exactly. */
function mayBeInexact(text: string): boolean {
  if (!ANY_CANDIDATE.test(text)) return false;
  for (const m of text.matchAll(CANDIDATE)) if (typeof exactNumber(m[0]) !== 'number') return true;
  return false;
}

/**
 * JSON.parse for provider answers, except that a number whose text a double does not hold exactly is an
 * ExactDecimal where it is the value of a `Value` property (a data point item's, any letter case); any
 * other such number is its double, as JSON.parse reads it. A repeated property name: the last wins.
 * Answers without such a number (doubles written as their shortest text included) are read by JSON.parse.
 */
export function parseExactJson(text: string): unknown {
  if (!mayBeInexact(text)) return JSON.parse(text);
  return parse(text, (key, value) => (value instanceof ExactDecimal && key.toLowerCase() !== 'value' ? value.value : value), {
    parseNumber: exactNumber,
    onDuplicateKey: ({ newValue }) => newValue,
  });
}

const exactStringifier = [{ test: (v: unknown) => v instanceof ExactDecimal, stringify: (v: unknown) => (v as ExactDecimal).text }];

/** JSON text of a value that may hold ExactDecimals (each written as its text); `holdsExact`: whether it does. */
export function stringifyExactJson(value: unknown, holdsExact: boolean): string {
  return holdsExact ? stringify(value, null, undefined, exactStringifier)! : JSON.stringify(value);
}
