import type { DataTypeName } from '../../db/tables.js';
import type { ErrorCollector } from '../../core/errors.js';
import { validDate } from '../../core/dates.js';
import type { SortSqlType } from '../../db/paging.js';

export const DATA_TYPES: readonly DataTypeName[] = [
  'Boolean',
  'String',
  'Integer',
  'Decimal',
  'DateTime',
  'Date',
  'Time',
  'UserIdentifier',
];

/** A custom field definition, of a subject or of a structure type (which has no arrays). */
export interface FieldDef {
  key: string;
  name: string;
  dataType: DataTypeName;
  /** The label returned as Field.Type. */
  type: string;
  required: boolean;
  isArray: boolean;
}

/** Stored canonical value: Integer/Decimal numbers, Boolean, else strings (see valueText). */
export type Scalar = string | number | boolean;
export type StoredValue = Scalar | Scalar[];

/** Data type names are matched case-insensitively (D5). */
export function dataTypeByName(name: string): DataTypeName | undefined {
  const lower = name.toLowerCase();
  return DATA_TYPES.find((t) => t.toLowerCase() === lower);
}

/**
 * Each stored value list in field order, leaving out fields without a value (D7): the one rule of which
 * values a record shows, for the GraphQL values and the REST list's writer (P164) alike.
 */
export function forEachFieldValue(
  fields: readonly FieldDef[],
  stored: Record<string, unknown>,
  visit: (field: FieldDef, values: readonly Scalar[]) => void,
): void {
  for (const field of fields) {
    const v = stored[field.key] as StoredValue | null | undefined;
    if (v === undefined || v === null) continue;
    visit(field, Array.isArray(v) ? v : [v]);
  }
}

/** D7's canonical ValueText. */
export function valueText(type: DataTypeName, v: Scalar): string {
  return type === 'Boolean' ? (v ? 'true' : 'false') : String(v);
}

// The instants whose ISO text has a four-digit year (Date.UTC would read year 1 as 1901).
const MIN_INSTANT = new Date(0).setUTCFullYear(1, 0, 1);
const MAX_INSTANT = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const TIME = /^(\d{2}):(\d{2})(?::(\d{2}))?$/;
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?([Zz]|[+-]\d{2}:?\d{2})?$/;

/**
 * Reads one JSON value as `type`, giving its canonical stored form, or a message saying what is wrong.
 * Strict about JSON kinds (D7): "5" is not an Integer when sent as a body value.
 */
export function readTyped(type: DataTypeName, raw: unknown): { ok: true; value: Scalar } | { ok: false; message: string } {
  const fail = (message: string) => ({ ok: false as const, message });
  switch (type) {
    case 'Boolean':
      return typeof raw === 'boolean' ? { ok: true, value: raw } : fail('Expected a JSON boolean.');
    case 'String':
      return typeof raw === 'string' ? { ok: true, value: raw } : fail('Expected a JSON string.');
    case 'UserIdentifier':
      return typeof raw === 'string' && raw !== '' ? { ok: true, value: raw } : fail('Expected a user identifier (a non-empty string).');
    case 'Integer':
      if (typeof raw !== 'number' || !Number.isInteger(raw)) return fail('Expected a JSON integer.');
      if (raw < INT32_MIN || raw > INT32_MAX) return fail('Integer is outside the 32-bit range.');
      return { ok: true, value: raw };
    case 'Decimal':
      return typeof raw === 'number' && Number.isFinite(raw) ? { ok: true, value: raw } : fail('Expected a JSON number.');
    case 'Date': {
      const m = typeof raw === 'string' ? DATE.exec(raw) : null;
      if (!m || !validDate(+m[1]!, +m[2]!, +m[3]!)) return fail('Expected a date in the format yyyy-MM-dd.');
      return { ok: true, value: raw as string };
    }
    case 'Time': {
      const m = typeof raw === 'string' ? TIME.exec(raw) : null;
      if (!m || +m[1]! > 23 || +m[2]! > 59 || +(m[3] ?? 0) > 59) return fail('Expected a time in the format HH:mm:ss.');
      return { ok: true, value: `${m[1]}:${m[2]}:${m[3] ?? '00'}` };
    }
    case 'DateTime': {
      const m = typeof raw === 'string' ? DATE_TIME.exec(raw) : null;
      if (!m || !validDate(+m[1]!, +m[2]!, +m[3]!) || +m[4]! > 23 || +m[5]! > 59 || +(m[6] ?? 0) > 59) {
        return fail('Expected an ISO 8601 date-time, for example 2024-05-01T10:00:00Z.');
      }
      // No offset: taken as UTC. Sub-millisecond digits are dropped (canonical form has milliseconds).
      const ms = Number((m[7] ?? '0').padEnd(3, '0').slice(0, 3));
      const at = new Date(0);
      at.setUTCFullYear(+m[1]!, +m[2]! - 1, +m[3]!);
      at.setUTCHours(+m[4]!, +m[5]!, +(m[6] ?? 0), ms);
      let t = at.getTime();
      const zone = m[8];
      if (zone && zone.toUpperCase() !== 'Z') {
        const sign = zone.startsWith('-') ? -1 : 1;
        const digits = zone.slice(1).replace(':', '');
        const [hh, mm] = [Number(digits.slice(0, 2)), Number(digits.slice(2))];
        // Real offsets lie within ±14:00 (UTC−12 … UTC+14); `+99:99` is no offset.
        if (hh > 14 || mm > 59 || (hh === 14 && mm > 0)) return fail('The UTC offset must lie between -14:00 and +14:00.');
        t -= sign * (hh * 60 + mm) * 60000;
      }
      // In UTC the instant must keep a four-digit year from 0001 to 9999: its canonical text sorts as
      // text, and both databases read it back (year 0 or 10000 would poison ordering for the tenant).
      if (t < MIN_INSTANT || t > MAX_INSTANT)
        return fail('The date-time must lie between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z in UTC.');
      return { ok: true, value: new Date(t).toISOString() };
    }
  }
}

/** A sent UserIdentifier value, to be checked against the tenant's users by the caller. */
export interface UserReference {
  path: string;
  userId: string;
}

export interface ParsedValues {
  /** field key → canonical value, or null to clear it. */
  values: Map<string, StoredValue | null>;
  userRefs: UserReference[];
}

function prop(obj: Record<string, unknown>, name: string): { found: boolean; value: unknown } {
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(obj)) if (k.toLowerCase() === lower) return { found: true, value: v };
  return { found: false, value: undefined };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Parses sent custom field values (`[{key, value: {<DataType>: {Value: ...}}}]`, D7/D8), reporting every
 * problem at its path (`<base>[i].value...`) and returning canonical values. A UserIdentifier is only
 * checked for shape here; the caller checks the user exists (one query for all of them).
 */
export function parseSentValues(
  items: readonly { key: string; value?: unknown }[],
  fields: ReadonlyMap<string, FieldDef>,
  base: string,
  errors: ErrorCollector,
): ParsedValues {
  const values = new Map<string, StoredValue | null>();
  const userRefs: UserReference[] = [];
  items.forEach((item, i) => {
    const at = `${base}[${i}]`;
    const field = fields.get(item.key);
    if (!field) {
      errors.add(`${at}.key`, `Unknown custom field '${item.key}'.`);
      return;
    }
    if (values.has(field.key)) {
      errors.add(`${at}.key`, `Custom field '${field.key}' is given more than once.`);
      return;
    }
    const readOne = (raw: unknown, path: string): Scalar | null | undefined => {
      if (raw === null) return null;
      if (!isObject(raw)) {
        errors.add(
          path,
          `Expected an object with one property named after a data type, for example {"${field.dataType}": {"Value": ...}}.`,
        );
        return undefined;
      }
      const names = Object.keys(raw);
      if (names.length !== 1) {
        errors.add(path, `Expected exactly one data type property, found ${names.length}.`);
        return undefined;
      }
      const name = names[0]!;
      const type = dataTypeByName(name);
      if (!type) {
        errors.add(path, `Unknown data type '${name}'. Allowed: ${DATA_TYPES.join(', ')}.`);
        return undefined;
      }
      if (type !== field.dataType) {
        errors.add(path, `Custom field '${field.key}' is of data type ${field.dataType}, not ${type}.`);
        return undefined;
      }
      const inner = raw[name];
      if (inner === null) return null;
      if (!isObject(inner)) {
        errors.add(`${path}.${name}`, `Expected an object with a Value property.`);
        return undefined;
      }
      const v = prop(inner, 'Value');
      if (!v.found) {
        errors.add(`${path}.${name}`, `The Value property is missing.`);
        return undefined;
      }
      if (v.value === null) return null;
      const read = readTyped(type, v.value);
      if (!read.ok) {
        errors.add(`${path}.${name}.value`, read.message);
        return undefined;
      }
      if (type === 'UserIdentifier') userRefs.push({ path: `${path}.${name}.value`, userId: read.value as string });
      return read.value;
    };
    const path = `${at}.value`;
    if (Array.isArray(item.value)) {
      if (!field.isArray) {
        errors.add(path, `Custom field '${field.key}' holds a single value, not an array.`);
        return;
      }
      const out: Scalar[] = [];
      let bad = false;
      item.value.forEach((raw, j) => {
        const v = readOne(raw, `${path}[${j}]`);
        if (v === undefined) bad = true;
        else if (v === null) {
          errors.add(`${path}[${j}]`, 'An array element cannot be null.');
          bad = true;
        } else out.push(v);
      });
      if (!bad) values.set(field.key, out.length === 0 ? null : out);
      return;
    }
    const v = readOne(item.value, path);
    if (v === undefined) return;
    // A single object for an array field is a one-element array (D7).
    values.set(field.key, v === null ? null : field.isArray ? [v] : v);
  });
  for (const [key, v] of values) {
    if (v === null && fields.get(key)?.required) {
      const i = items.findIndex((it) => it.key === key);
      errors.add(`${base}[${i}].value`, `Custom field '${key}' is required and cannot be cleared.`);
    }
  }
  return { values, userRefs };
}

/** Strings longer than this order by their prefix only (a btree entry is at most ~2.7 kB); ties by id. */
const SORT_PREFIX = 200;

/**
 * Order-preserving text encoding of a typed value, compared bytewise ("C" collation): the subject list
 * orders by any field through one index on (field, sort_key) (see migration 0002). Present values start
 * with '0' and a missing one is '1', so missing sorts last ascending and first descending (D6). Also
 * the in-memory order of loaded lists (paginateLoaded).
 */
export function sortKeyOf(type: DataTypeName, v: Scalar | undefined): string {
  if (v === undefined) return '1';
  switch (type) {
    case 'Integer':
      // Offset binary: -2^31..2^31-1 → 0..2^32-1, ten digits.
      return `0${String((v as number) + 2147483648).padStart(10, '0')}`;
    case 'Decimal': {
      // IEEE 754 bits made sortable: flip the sign bit of non-negatives, every bit of negatives.
      const buf = Buffer.alloc(8);
      buf.writeDoubleBE((v as number) === 0 ? 0 : (v as number));
      if ((buf[0]! & 0x80) === 0) buf[0] = buf[0]! ^ 0x80;
      else for (let i = 0; i < 8; i++) buf[i] = buf[i]! ^ 0xff;
      return `0${buf.toString('hex')}`;
    }
    case 'Boolean':
      return v ? '01' : '00';
    default: {
      // Strings, user ids, and the fixed-width ISO forms of Date, Time and DateTime sort as text. A text
      // of at most SORT_PREFIX code units has at most that many code points: no need to split it.
      const s = String(v);
      return `0${s.length <= SORT_PREFIX ? s : [...s].slice(0, SORT_PREFIX).join('')}`;
    }
  }
}

/** The SQL type a data type orders and compares as (D6: numbers numerically, dates in time). */
export function sqlTypeOf(type: DataTypeName): SortSqlType {
  switch (type) {
    case 'Integer':
      return 'integer';
    case 'Decimal':
      return 'numeric';
    case 'Boolean':
      return 'boolean';
    case 'Date':
      return 'date';
    case 'Time':
      return 'time';
    case 'DateTime':
      return 'timestamptz';
    default:
      return 'text';
  }
}
