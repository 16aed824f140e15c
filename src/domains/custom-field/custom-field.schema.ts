import { builder } from '../../graphql/builder.js';
import { type FieldDef, type Scalar, type StoredValue, valueText } from './custom-field.js';
import type { DataTypeName } from '../../db/tables.js';

export interface CustomFieldValueShape {
  field: FieldDef;
  values: Scalar[];
}

export const CustomFieldRef = builder.objectRef<FieldDef>('CustomField').implement({
  fields: (t) => ({
    key: t.exposeString('key'),
    name: t.exposeString('name'),
    type: t.exposeString('typeLabel', { description: 'The label the contract returns as Field.Type.' }),
    dataType: t.exposeString('dataType'),
    required: t.exposeBoolean('required'),
    isArray: t.exposeBoolean('isArray'),
  }),
});

const TypedValueRef = builder.objectRef<{ dataType: DataTypeName; value: Scalar }>('TypedValue').implement({
  fields: (t) => ({
    dataType: t.exposeString('dataType'),
    value: t.field({ type: 'JSON', description: 'The typed JSON value.', resolve: (v) => v.value }),
    valueText: t.string({ description: 'Canonical text (D7).', resolve: (v) => valueText(v.dataType, v.value) }),
  }),
});

export const CustomFieldValueRef = builder.objectRef<CustomFieldValueShape>('CustomFieldValue').implement({
  fields: (t) => ({
    field: t.field({ type: CustomFieldRef, resolve: (v) => v.field }),
    values: t.field({
      type: [TypedValueRef],
      description: 'One element for a single-value field.',
      resolve: (v) => v.values.map((value) => ({ dataType: v.field.dataType, value })),
    }),
  }),
});

export const CustomFieldValueInput = builder.inputType('CustomFieldValueInput', {
  fields: (t) => ({
    key: t.string({ required: true }),
    value: t.field({
      type: 'JSON',
      description: 'As sent over REST: {"<DataType>": {"value": ...}}, an array of those for an array field, or null to clear.',
    }),
  }),
});

/** Stored values in field order, leaving out fields without a value (D7). */
export function customFieldValues(fields: readonly FieldDef[], stored: Record<string, unknown>): CustomFieldValueShape[] {
  const out: CustomFieldValueShape[] = [];
  for (const field of fields) {
    const v = stored[field.key] as StoredValue | undefined;
    if (v === undefined || v === null) continue;
    out.push({ field, values: Array.isArray(v) ? v : [v] });
  }
  return out;
}
