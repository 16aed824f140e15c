/** A real calendar date from year 1 (PostgreSQL has no year 0); setUTCFullYear keeps years below 100. */
export function validDate(y: number, m: number, d: number): boolean {
  if (y < 1) return false;
  const date = new Date(0);
  date.setUTCFullYear(y, m - 1, d);
  return date.getUTCFullYear() === y && date.getUTCMonth() === m - 1 && date.getUTCDate() === d;
}

const DAY_MS = 86_400_000;

// ISO 8601 round-trip ("o") form, with or without an offset: .NET writes up to 7 fraction digits.
const ISO_INSTANT = /^(\d{4})-(\d{2})-(\d{2})T([01]\d|2[0-3]):([0-5]\d):([0-5]\d)(?:\.(\d{1,7}))?(Z|[+-](?:0\d|1[0-4]):[0-5]\d)?$/;

/**
 * The instant (epoch ms) of an ISO 8601 date-time, or undefined when it is not one. One rule in JS and SQL
 * (P17, P85): the fraction is truncated to milliseconds, never rounded (`23:59:59.9999999Z` stays in its
 * day), and a text without an offset is UTC, whatever the process's time zone.
 */
export function isoInstant(text: string): number | undefined {
  const m = ISO_INSTANT.exec(text);
  if (!m || !validDate(+m[1]!, +m[2]!, +m[3]!)) return undefined;
  const d = new Date(0);
  d.setUTCFullYear(+m[1]!, +m[2]! - 1, +m[3]!);
  d.setUTCHours(+m[4]!, +m[5]!, +m[6]!, Number((m[7] ?? '').padEnd(3, '0').slice(0, 3)));
  const zone = m[8];
  if (!zone || zone === 'Z') return d.getTime();
  const sign = zone.startsWith('-') ? -1 : 1;
  return d.getTime() - sign * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(4, 6))) * 60_000;
}
const ISO_DATE = /^(\d{4})-(\d{2})-(\d{2})$/;

/** Days since 1970-01-01 of a `yyyy-MM-dd` calendar date (proleptic Gregorian), or undefined when it is not one. */
export function dayNumber(text: string): number | undefined {
  const m = ISO_DATE.exec(text);
  if (!m || !validDate(+m[1]!, +m[2]!, +m[3]!)) return undefined;
  const d = new Date(0);
  d.setUTCFullYear(+m[1]!, +m[2]! - 1, +m[3]!);
  return Math.round(d.getTime() / DAY_MS);
}

/** The `yyyy-MM-dd` text of a day number (years 1000 to 9999). */
export function dayText(day: number): string {
  return new Date(day * DAY_MS).toISOString().slice(0, 10);
}

/** Calendar periods: a day, an ISO week (from Monday), a month, a year. */
export type CalendarUnit = 'DAY' | 'WEEK' | 'MONTH' | 'YEAR';

/** The first day of the period of `unit` that holds `day`. */
export function periodStart(unit: CalendarUnit, day: number): number {
  if (unit === 'DAY') return day;
  // 1970-01-01 was a Thursday: (day + 3) mod 7 is the days since Monday.
  if (unit === 'WEEK') return day - ((((day + 3) % 7) + 7) % 7);
  const d = new Date(day * DAY_MS);
  return Date.UTC(d.getUTCFullYear(), unit === 'MONTH' ? d.getUTCMonth() : 0, 1) / DAY_MS;
}

/** The first day of the period after the one starting on `start`. */
export function nextPeriod(unit: CalendarUnit, start: number): number {
  if (unit === 'DAY') return start + 1;
  if (unit === 'WEEK') return start + 7;
  const d = new Date(start * DAY_MS);
  return (unit === 'MONTH' ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) : Date.UTC(d.getUTCFullYear() + 1, 0, 1)) / DAY_MS;
}

const zoneFormats = new Map<string, Intl.DateTimeFormat>();

function zoneFormat(zone: string): Intl.DateTimeFormat {
  let f = zoneFormats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      calendar: 'gregory',
      numberingSystem: 'latn',
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    if (zoneFormats.size > 1000) zoneFormats.clear();
    zoneFormats.set(zone, f);
  }
  return f;
}

/**
 * The IANA time zone `name` as the time zone database spells it (`europe/berlin` → `Europe/Berlin`), or
 * undefined when it names none. Offsets (`+02:00`) and POSIX rules are not IANA names.
 */
export function ianaTimeZone(name: string): string | undefined {
  if (!/^[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z0-9_+-]+)*$/.test(name) || name.length > 64) return undefined;
  try {
    return new Intl.DateTimeFormat('en-US', { timeZone: name }).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

/** A time zone's offsets from UTC (ms) at instants, remembered for one computation. */
export function zoneOffsets(zone: string): (instant: number) => number {
  const format = zoneFormat(zone);
  const seen = new Map<number, number>();
  return (instant) => {
    let offset = seen.get(instant);
    if (offset === undefined) {
      const parts: Record<string, number> = {};
      for (const p of format.formatToParts(instant)) if (p.type !== 'literal') parts[p.type] = Number(p.value);
      const d = new Date(0);
      d.setUTCFullYear(parts['year']!, parts['month']! - 1, parts['day']!);
      d.setUTCHours(parts['hour']!, parts['minute']!, parts['second']!);
      offset = d.getTime() - Math.floor(instant / 1000) * 1000;
      seen.set(instant, offset);
    }
    return offset;
  };
}

/**
 * The first instant (epoch ms) of a calendar day in a time zone (Temporal's `startOfDay`): local midnight,
 * the earlier one when the clock shows midnight twice, the end of the gap when it skips midnight.
 */
export function startOfDay(day: number, offsetAt: (instant: number) => number): number {
  const wall = day * DAY_MS;
  const before = offsetAt(wall - DAY_MS);
  const after = offsetAt(wall + DAY_MS);
  const valid = [...new Set([wall - before, wall - after])].filter((t) => t + offsetAt(t) === wall);
  if (valid.length > 0) return Math.min(...valid);
  // Midnight falls into a gap: the first instant whose local time is past it (a transition is on a whole second).
  let lo = wall - Math.max(before, after);
  let hi = wall - Math.min(before, after);
  while (hi - lo > 1000) {
    const mid = lo + Math.floor((hi - lo) / 2000) * 1000;
    if (mid + offsetAt(mid) >= wall) hi = mid;
    else lo = mid;
  }
  return hi;
}
