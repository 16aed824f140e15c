/**
 * The dashboards bench's datasets and questions (issue 32, build point 7): a year or two months of daily
 * points per subject, and the questions a dashboard builder asks of them (zone × interval × grouping ×
 * percentiles), each as the service's GraphQL input and as what the DuckDB reference needs to compute
 * the same aggregate (duckdb-reference.ts): the range as local days and the zone's UTC offsets over it.
 * Pure functions, no imports from src/.
 */

/** A dataset: subjects × daily points of the `steps` metric, the reference provider's series ending on ANCHOR. */
export interface Dataset {
  name: '300k' | '3.65m';
  subjects: number;
  days: number;
  /** The new question's warm p50 target (issue 32, Targets). */
  newQuestionTargetMs: number;
}

export const DATASETS: Record<Dataset['name'], Dataset> = {
  '300k': { name: '300k', subjects: 5000, days: 60, newQuestionTargetMs: 100 },
  '3.65m': { name: '3.65m', subjects: 10_000, days: 365, newQuestionTargetMs: 500 },
};
/** The same question asked again: p50 target (the service's answer cache). */
export const REPEATED_TARGET_MS = 20;
/** A new question's p50 within this many times DuckDB's on the same rows. */
export const DUCKDB_RATIO_TARGET = 5;
/** Cold, 5,000 subjects, 20 ms provider: the full answer within this. */
export const COLD_TARGET_MS = 5000;
/** The same: the first partial answer (dataPointAggregatesChanged, P131) within this. */
export const FIRST_PARTIAL_TARGET_MS = 1000;

/** The provider's last day of every series (fixed, so runs on different days aggregate the same points). */
export const ANCHOR = '2026-11-20';

export const ZONES = ['UTC', 'Europe/Berlin', 'Asia/Kathmandu', 'America/St_Johns'] as const;
export const INTERVALS = ['DAY', 'WEEK', 'MONTH'] as const;
export const GROUPINGS = ['none', 'CHILD_ENTITY', 'ITEM'] as const;
export const PERCENTILES = [[], [0.5, 0.9]] as const;
/** The root whose children CHILD_ENTITY groups by (the bench tenant has two roots: its subjects are half of them). */
export const CHILD_PARENT = 'company-0000';
/** The String item ITEM groups by (null on about 4 points in 5: those count in the totals, in no group). */
export const GROUP_ITEM = 'note';

export interface Question {
  id: string;
  zone: (typeof ZONES)[number];
  interval: (typeof INTERVALS)[number];
  grouping: (typeof GROUPINGS)[number];
  percentiles: readonly number[];
}

const addDays = (date: string, days: number) => new Date(Date.parse(`${date}T00:00:00Z`) + days * 86_400_000).toISOString().slice(0, 10);
const dayNumber = (date: string) => Date.parse(`${date}T00:00:00Z`) / 86_400_000;

/**
 * Every question's range: the dataset's first day to the day after the anchor (recordings at 20:00–24:00
 * UTC fall on the next local day east of UTC+4), so every point is in range in every zone.
 */
export function rangeOf(d: Dataset): { from: string; to: string } {
  return { from: addDays(ANCHOR, -(d.days - 1)), to: addDays(ANCHOR, 2) };
}

/**
 * All 72 questions, in an order that varies every dimension from one to the next (a stride through the
 * product), so the first n are a spread of them.
 */
export function questions(): Question[] {
  const all: Question[] = [];
  for (const zone of ZONES)
    for (const interval of INTERVALS)
      for (const grouping of GROUPINGS)
        for (const percentiles of PERCENTILES)
          all.push({
            id: `${zone} ${interval} ${grouping}${percentiles.length ? ' p50/p90' : ''}`,
            zone,
            interval,
            grouping,
            percentiles,
          });
  // 25 is prime to 72: i × 25 mod 72 visits each once.
  return all.map((_, i) => all[(i * 25) % all.length]!);
}

const MEASURES = 'count subjectCount sumText average min max stddevSample';
/** The GraphQL query of a question: the whole range, every bucket, every group's buckets; percentiles only when asked. */
export function questionQuery(q: Question): string {
  const measures = `${MEASURES}${q.percentiles.length ? ` percentiles(p: [${q.percentiles.join(', ')}])` : ''}`;
  return `query Question($input: DataPointAggregatesInput!) {
  dataPointAggregates(input: $input) {
    aggregates { ${measures} }
    buckets { start aggregates { ${measures} } }
    ${q.grouping === 'none' ? '' : `groupedAggregates { key aggregates { ${measures} } buckets { start aggregates { ${measures} } } }`}
    coverage { subjectCount contributingSubjectCount staleSubjectCount unavailableSubjectCount }
  }
}`;
}

/** The service's input for a question over an extract; `roots` select every subject of the tenant. */
export function questionInput(q: Question, d: Dataset, extractKey: string, roots: readonly string[]): Record<string, unknown> {
  return {
    extractKey,
    valueItemKey: 'value',
    timeItemKey: 'recordedAt',
    interval: q.interval,
    ...rangeOf(d),
    timeZone: q.zone,
    ...(q.grouping === 'CHILD_ENTITY'
      ? { structuralEntityKey: CHILD_PARENT, groupBy: 'CHILD_ENTITY' }
      : { structuralEntityKeys: [...roots], ...(q.grouping === 'ITEM' ? { groupBy: 'ITEM', groupByItemKey: GROUP_ITEM } : {}) }),
  };
}

/** A zone's UTC offset (ms) at an instant, from Intl (independent of the service's own zone arithmetic). */
function offsetAt(zone: string, ms: number): number {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone: zone,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  }).formatToParts(new Date(ms));
  const n = (t: string) => Number(parts.find((p) => p.type === t)!.value);
  return Date.UTC(n('year'), n('month') - 1, n('day'), n('hour'), n('minute'), n('second')) - Math.floor(ms / 1000) * 1000;
}

/**
 * What the reference needs of a question's time: the range as local day numbers (days since 1970-01-01,
 * `to` excluded) and the zone's offsets over it: `offsets[0]` before `changes[0]`, `offsets[i]` from
 * `changes[i - 1]` on (instants in epoch ms, found to the minute).
 */
export function timeOf(q: Question, d: Dataset): { fromDay: number; toDay: number; offsets: number[]; changes: number[] } {
  const { from, to } = rangeOf(d);
  const start = Date.parse(`${from}T00:00:00Z`) - 2 * 86_400_000;
  const end = Date.parse(`${to}T00:00:00Z`) + 2 * 86_400_000;
  const offsets = [offsetAt(q.zone, start)];
  const changes: number[] = [];
  for (let t = start; t < end; t += 3_600_000) {
    if (offsetAt(q.zone, t + 3_600_000) === offsets.at(-1)) continue;
    let lo = t;
    let hi = t + 3_600_000;
    while (hi - lo > 60_000) {
      const mid = lo + Math.floor((hi - lo) / 120_000) * 60_000;
      if (offsetAt(q.zone, mid) === offsets.at(-1)) lo = mid;
      else hi = mid;
    }
    changes.push(hi);
    offsets.push(offsetAt(q.zone, hi));
  }
  return { fromDay: dayNumber(from), toDay: dayNumber(to), offsets, changes };
}
