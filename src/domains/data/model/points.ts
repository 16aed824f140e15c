import { z } from 'zod';
import { dayNumber, isoInstant, validDate } from '../../../core/dates.js';
import { type Scalar, sortKeyOf } from '../../custom-field/index.js';
import { ExactDecimal } from './exact-json.js';

/** The data types of a data point item (the contract's table; UserIdentifier is not among them). */
export const POINT_TYPES = ['String', 'Decimal', 'Integer', 'DateTime', 'Date', 'Time', 'Boolean'] as const;
export type PointType = (typeof POINT_TYPES)[number];

export interface DataPointItem {
  Key: string;
  /** An ExactDecimal: a Decimal whose text a double does not hold (P86). */
  Value: { DataType: PointType; Value: string | number | boolean | null | ExactDecimal };
}

/** A data point as the provider sends it (and as it is cached): one row for one subject. */
export interface DataPoint {
  Id: string;
  SubjectIdentifier: string;
  DataPointItems: DataPointItem[];
}

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const TIME = /^(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,7})?$/;

const validDateText = (m: RegExpExecArray | null) => m !== null && validDate(+m[1]!, +m[2]!, +m[3]!);

/** Why `value` is not a valid representation of `type` (the contract's DataType table), or undefined. */
export function pointValueProblem(type: PointType, value: unknown): string | undefined {
  if (value === null) return undefined;
  switch (type) {
    case 'String':
      return typeof value === 'string' ? undefined : 'A String value must be a JSON string or null.';
    case 'Boolean':
      return typeof value === 'boolean' ? undefined : 'A Boolean value must be a JSON boolean or null.';
    case 'Decimal':
      return (typeof value === 'number' && Number.isFinite(value)) || (value instanceof ExactDecimal && Number.isFinite(value.value))
        ? undefined
        : 'A Decimal value must be a JSON number or null.';
    case 'Integer':
      return Number.isInteger(value) && (value as number) >= -2147483648 && (value as number) <= 2147483647
        ? undefined
        : 'An Integer value must be a 32-bit JSON integer or null.';
    case 'Date':
      return typeof value === 'string' && validDateText(DATE.exec(value)) ? undefined : 'A Date value must be a yyyy-MM-dd string or null.';
    case 'Time':
      return typeof value === 'string' && TIME.test(value) ? undefined : 'A Time value must be an HH:mm:ss string or null.';
    case 'DateTime':
      return typeof value === 'string' && isoInstant(value) !== undefined
        ? undefined
        : 'A DateTime value must be an ISO 8601 date-time string or null.';
  }
}

// PostgreSQL cannot store U+0000 in text or jsonb: a point holding it is invalid (dropped, P90).
// Nor a lone UTF-16 surrogate (JSON's `\ud800` escape): it is repaired to U+FFFD (P84).
const text = (empty?: string) =>
  (empty === undefined ? z.string() : z.string().min(1, empty))
    .refine((v) => !v.includes('\u0000'), 'Must not contain U+0000.')
    .transform((v) => (v as string & { toWellFormed(): string }).toWellFormed());

const pointType = z.string().transform((name, ctx) => {
  // Matched case-insensitively, like data type names in sent custom field values (D5).
  const t = POINT_TYPES.find((p) => p.toLowerCase() === name.toLowerCase());
  if (!t) {
    ctx.addIssue({ code: 'custom', message: `DataType must be one of ${POINT_TYPES.join(', ')}.` });
    return z.NEVER;
  }
  return t;
});

const itemSchema = z
  .object({
    Key: text('Key must not be empty.'),
    Value: z.object({
      DataType: pointType,
      Value: z.union([text(), z.number(), z.instanceof(ExactDecimal), z.boolean(), z.null()]).optional(),
    }),
  })
  .transform((item, ctx): DataPointItem => {
    const value = item.Value.Value ?? null;
    const problem = pointValueProblem(item.Value.DataType, value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem, path: ['Value', 'Value'] });
    return { Key: item.Key, Value: { DataType: item.Value.DataType, Value: value } };
  });

/** A data point as the contract shapes it, validated item by item (provider answers, change notifications). */
export const DataPointSchema = z.object({
  Id: text('Id must not be empty.'),
  SubjectIdentifier: text('SubjectIdentifier must not be empty.'),
  DataPointItems: z.array(itemSchema),
});

/** The get-data-points answer (contract: PageInfo and Edges required). */
export const ProviderPageSchema = z.object({
  PageInfo: z.object({
    HasNextPage: z.boolean(),
    HasPreviousPage: z.boolean(),
    StartCursor: z.string().nullable().optional(),
    EndCursor: z.string().min(1).nullable().optional(),
    TotalCount: z.number().int(),
  }),
  Edges: z.array(z.object({ Node: DataPointSchema, Cursor: z.string() })),
});

// The page without its nodes: what must hold for the answer to be read at all.
const ProviderFrameSchema = ProviderPageSchema.extend({ Edges: z.array(z.object({ Node: z.unknown(), Cursor: z.string() })) });

/** A node of a provider's answer that is not a valid data point: the subject and Id it names, if any, and why. */
export interface RejectedPoint {
  subjectIdentifier: string | undefined;
  pointId: string | undefined;
  reason: string;
}

export type ProviderPage =
  | { ok: true; pageInfo: z.infer<typeof ProviderFrameSchema>['PageInfo']; points: DataPoint[]; rejected: RejectedPoint[] }
  | { ok: false; problem: string };

const issueText = (e: z.ZodError, base: string) => {
  const issue = e.issues[0]!;
  return `${[base, ...issue.path].filter((p) => p !== '').join('.') || '$'}: ${issue.message}`;
};

/**
 * A get-data-points page (its keys canonical): a bad frame (PageInfo, Edges, a Cursor) fails the whole
 * answer; each node is validated on its own, so a node that is bad is dropped alone (P90).
 */
export function readProviderPage(json: unknown): ProviderPage {
  const frame = ProviderFrameSchema.safeParse(json);
  if (!frame.success) return { ok: false, problem: issueText(frame.error, '') };
  const points: DataPoint[] = [];
  const rejected: RejectedPoint[] = [];
  frame.data.Edges.forEach((edge, i) => {
    const fast = validPoint(edge.Node);
    if (fast) return void points.push(fast);
    const node = DataPointSchema.safeParse(edge.Node);
    if (node.success) points.push(node.data);
    else {
      const { SubjectIdentifier: named, Id: id } = (edge.Node ?? {}) as { SubjectIdentifier?: unknown; Id?: unknown };
      rejected.push({
        subjectIdentifier: typeof named === 'string' ? named : undefined,
        pointId: typeof id === 'string' ? id : undefined,
        reason: issueText(node.error, `Edges.${i}.Node`),
      });
    }
  });
  return { ok: true, pageInfo: frame.data.PageInfo, points, rejected };
}

const TYPE_NAMES = new Map(POINT_TYPES.map((t) => [t.toLowerCase(), t]));
const goodText = (v: unknown): v is string => typeof v === 'string' && v !== '' && !v.includes('\u0000');

/**
 * DataPointSchema's answer for a node it accepts, without zod, about 8 times faster (a cold fill reads
 * hundreds of thousands of nodes): undefined for anything else, which zod then reads and explains.
 */
function validPoint(node: unknown): DataPoint | undefined {
  if (typeof node !== 'object' || node === null) return undefined;
  const { Id, SubjectIdentifier, DataPointItems } = node as Record<string, unknown>;
  if (!goodText(Id) || !goodText(SubjectIdentifier) || !Array.isArray(DataPointItems)) return undefined;
  const items: DataPointItem[] = [];
  for (const item of DataPointItems as unknown[]) {
    if (typeof item !== 'object' || item === null) return undefined;
    const { Key, Value } = item as Record<string, unknown>;
    if (!goodText(Key) || typeof Value !== 'object' || Value === null) return undefined;
    const { DataType: name, Value: raw } = Value as Record<string, unknown>;
    const type = typeof name === 'string' ? TYPE_NAMES.get(name.toLowerCase()) : undefined;
    if (!type || (typeof raw === 'string' && raw.includes('\u0000'))) return undefined;
    const value = raw ?? null;
    if (!(value === null || ['string', 'number', 'boolean'].includes(typeof value) || value instanceof ExactDecimal)) return undefined;
    if (pointValueProblem(type, value) !== undefined) return undefined;
    const v =
      typeof value === 'string'
        ? (value as string & { toWellFormed(): string }).toWellFormed()
        : (value as DataPointItem['Value']['Value']);
    items.push({ Key: (Key as string & { toWellFormed(): string }).toWellFormed(), Value: { DataType: type, Value: v } });
  }
  const wellFormed = (t: string) => (t as string & { toWellFormed(): string }).toWellFormed();
  return { Id: wellFormed(Id), SubjectIdentifier: wellFormed(SubjectIdentifier), DataPointItems: items };
}

/** Canonical text of an item value (D7's forms): DateTime in UTC with milliseconds (truncated, P85); null stays null. */
export function pointValueText(item: DataPointItem): string | null {
  const { DataType: type, Value: v } = item.Value;
  if (v === null) return null;
  if (type === 'DateTime') return new Date(isoInstant(v as string)!).toISOString();
  return String(plainValue(v));
}

/** A value as JSON.parse would read it: an ExactDecimal is its nearest double. */
export function plainValue(v: DataPointItem['Value']['Value']): string | number | boolean | null {
  return v instanceof ExactDecimal ? v.value : v;
}

/** Whether some points hold an ExactDecimal (their JSON text must then be written by stringifyExactJson). */
export function holdsExact(points: readonly DataPoint[]): boolean {
  return points.some((p) => p.DataPointItems.some((i) => i.Value.Value instanceof ExactDecimal));
}

/** Order-preserving text of an item's value (missing or null sorts last ascending, D6). */
export function pointSortKey(point: DataPoint, key: string): string {
  const item = point.DataPointItems.find((i) => i.Key === key);
  if (!item || item.Value.Value === null) return sortKeyOf('String', undefined);
  const type = item.Value.DataType;
  // DateTimes compare in time: their UTC text is fixed-width.
  const v: Scalar = type === 'DateTime' ? pointValueText(item)! : (plainValue(item.Value.Value) as Scalar);
  return sortKeyOf(type, v);
}

/**
 * A valid point's items by key as `data_point_items` (migrations 0008, 0009) derives them for
 * `data_cache_point`: the first item of a key wins, a null value is absent; DateTime {t: epoch ms,
 * truncated (P85)}, Date {d: day number}, Time {h: text}; the others as sent (an ExactDecimal keeps its text).
 * Derived here, a cold fill's point rows cost the database no function call per point.
 */
export function pointItems(point: DataPoint): Record<string, unknown> {
  const items: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  const seen = new Set<string>();
  for (const { Key: key, Value: value } of point.DataPointItems) {
    if (seen.has(key)) continue;
    seen.add(key);
    const v = value.Value;
    if (v === null) continue;
    items[key] =
      value.DataType === 'DateTime'
        ? { t: isoInstant(v as string) }
        : value.DataType === 'Date'
          ? { d: dayNumber(v as string) }
          : value.DataType === 'Time'
            ? { h: v }
            : v;
  }
  return items;
}
