import { type FieldDef, type Scalar, type StoredValue, readTyped, valueText } from '../../custom-fields.js';
import type { DataTypeName, NewSubjectValue } from '../../db.js';

/** Strings longer than this order by their prefix only (btree entries have a size limit); ties by id. */
const SORT_PREFIX = 400;

/**
 * Order-preserving text encoding of a typed value, compared bytewise ("C" collation): the subject list
 * orders by any field through one index on (field, sort_key) (see migration 0002). Present values start
 * with '0' and a missing one is '1', so missing sorts last ascending and first descending (D6).
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
    default:
      // Strings, user ids, and the fixed-width ISO forms of Date, Time and DateTime sort as text.
      return `0${[...String(v)].slice(0, SORT_PREFIX).join('')}`;
  }
}

/** The rows of `subject_value` for one subject (every field gets an ordinal-0 row, see migration 0002). */
export function valueRows(
  tenantId: string,
  subjectId: string,
  fields: readonly FieldDef[],
  values: Record<string, unknown>,
  searchableKey: (f: FieldDef) => boolean,
): NewSubjectValue[] {
  const rows: NewSubjectValue[] = [];
  for (const f of fields) {
    const stored = values[f.key] as StoredValue | undefined;
    const list: Scalar[] = stored === undefined || stored === null ? [] : Array.isArray(stored) ? stored : [stored];
    const searchable = searchableKey(f);
    if (list.length === 0) {
      rows.push({ tenant_id: tenantId, subject_id: subjectId, field_key: f.key, ordinal: 0, value_text: null, sort_key: sortKeyOf(f.dataType, undefined), searchable: false });
    }
    list.forEach((v, i) => {
      rows.push({
        tenant_id: tenantId,
        subject_id: subjectId,
        field_key: f.key,
        ordinal: i,
        value_text: valueText(f.dataType, v),
        sort_key: i === 0 ? sortKeyOf(f.dataType, v) : null,
        searchable,
      });
    });
  }
  return rows;
}

/**
 * A filter value from the query string, as the canonical ValueText of the field's type, so that text
 * equality in SQL is typed equality (D7: `5` matches Integer 5, `2.50` matches 2.5, dates by value).
 */
export function canonicalFilterValue(field: FieldDef, raw: string): { ok: true; text: string } | { ok: false; message: string } {
  let parsed: unknown = raw;
  switch (field.dataType) {
    case 'Integer':
    case 'Decimal': {
      // Plain decimal notation only: Number() would also read '0x10', '1e1' or ' 5'.
      const n = /^[+-]?(\d+(\.\d*)?|\.\d+)$/.test(raw) ? Number(raw) : Number.NaN;
      if (!Number.isFinite(n)) return { ok: false, message: `'${raw}' is not a number.` };
      parsed = n;
      break;
    }
    case 'Boolean': {
      const b = raw.toLowerCase();
      if (b !== 'true' && b !== 'false') return { ok: false, message: `'${raw}' is not true or false.` };
      parsed = b === 'true';
      break;
    }
  }
  const r = readTyped(field.dataType, parsed);
  return r.ok ? { ok: true, text: valueText(field.dataType, r.value) } : { ok: false, message: r.message };
}

/** The text of a stored value (the first element of an array field), for ExternalId and matching. */
export function firstText(type: DataTypeName, v: unknown): string | null {
  if (v === undefined || v === null) return null;
  const first = Array.isArray(v) ? v[0] : v;
  return first === undefined ? null : valueText(type, first as Scalar);
}
