import { createHash } from 'node:crypto';
import { type FieldDef, type Scalar, type StoredValue, readTyped, sortKeyOf, valueText } from '../custom-field/index.js';
import type { DataTypeName, NewSubjectValue } from '../../db/tables.js';

/**
 * The rows of `subject_value` for one subject (every field gets an ordinal-0 row, see migration 0002),
 * each carrying the sort key of the subject's ExternalId (`externalIdKey`) as `list_key` (migration 0007).
 */
export function valueRows(
  tenantId: string,
  subjectId: string,
  fields: readonly FieldDef[],
  values: Record<string, unknown>,
  searchableKey: (f: FieldDef) => boolean,
  externalIdKey?: string,
): NewSubjectValue[] {
  const rows: NewSubjectValue[] = [];
  for (const f of fields) {
    const stored = values[f.key] as StoredValue | undefined;
    const list: Scalar[] = stored === undefined || stored === null ? [] : Array.isArray(stored) ? stored : [stored];
    const searchable = searchableKey(f);
    if (list.length === 0) {
      rows.push({
        tenant_id: tenantId,
        subject_id: subjectId,
        field_key: f.key,
        ordinal: 0,
        value_text: null,
        sort_key: sortKeyOf(f.dataType, undefined),
        searchable: false,
      });
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
  const listKey = rows.find((r) => r.field_key === externalIdKey && r.ordinal === 0)?.sort_key ?? null;
  for (const r of rows) r.list_key = listKey;
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

/**
 * The unique matching key of a subject (D7): a digest of its matching fields' canonical values, in the
 * configured order (a digest because the values can be longer than a btree entry may be).
 */
export function matchingKeyOf(matchingKeys: readonly string[], values: Record<string, unknown>): string {
  return createHash('sha256')
    .update(JSON.stringify(matchingKeys.map((k) => values[k] ?? null)))
    .digest('hex');
}
