import { builder } from '../../graphql/builder.js';
import { type FieldDef, type Scalar, forEachFieldValue, valueText } from './custom-field.js';
import type { DataTypeName } from '../../db/tables.js';

/** One value with its type and D7 text, built with the list (see `customFieldValues`). */
export interface TypedValue {
  dataType: DataTypeName;
  value: Scalar;
  valueText: string;
}

export interface CustomFieldValueShape {
  field: FieldDef;
  values: TypedValue[];
}

export const CustomFieldRef = builder.objectRef<FieldDef>('CustomField').implement({
  description: 'A custom field of a structure type or of the subject configuration.',
  fields: (t) => ({
    key: t.exposeString('key', { description: 'Key of the custom field.' }),
    name: t.exposeString('name', { description: 'Display name.' }),
    type: t.exposeString('type', { description: 'The label the contract returns as Field.Type.' }),
    dataType: t.exposeString('dataType', {
      description: 'Data type name: Boolean, String, Integer, Decimal, DateTime, Date, Time or UserIdentifier.',
    }),
    required: t.exposeBoolean('required', { description: 'Whether a value is required.' }),
    isArray: t.exposeBoolean('isArray', { description: 'Subject fields only: the field holds a list of values.' }),
  }),
});

// Every field below is exposed under its own name, so it has no resolver and graphql-jit reads the
// property inline; a resolver per value (even `v => v.field`) costs closures and a result callback per
// call, most of a subject list's allocation (P69).
const TypedValueRef = builder.objectRef<TypedValue>('TypedValue').implement({
  description: 'One custom field value with its data type.',
  fields: (t) => ({
    dataType: t.exposeString('dataType', { description: 'Data type name, for example String.' }),
    value: t.expose('value', { type: 'JSON', description: 'The typed JSON value.' }),
    valueText: t.exposeString('valueText', { description: 'Canonical text (D7).' }),
  }),
});

export const CustomFieldValueRef = builder.objectRef<CustomFieldValueShape>('CustomFieldValue').implement({
  description: 'The value(s) of one custom field; fields without a value are left out.',
  fields: (t) => ({
    field: t.expose('field', { type: CustomFieldRef, description: 'The custom field.' }),
    values: t.expose('values', { type: [TypedValueRef], description: 'One element for a single-value field.' }),
  }),
});

export const CustomFieldValueInput = builder.inputType('CustomFieldValueInput', {
  description: 'A custom field value as sent.',
  fields: (t) => ({
    key: t.string({
      required: true,
      description: 'Key of the custom field on the structure type or subject configuration.',
    }),
    value: t.field({
      type: 'JSON',
      description: 'As sent over REST: {"<DataType>": {"value": ...}}, an array of those for an array field, or null to clear.',
    }),
  }),
});

const typed = (dataType: DataTypeName, value: Scalar): TypedValue => ({ dataType, value, valueText: valueText(dataType, value) });

/** Stored values in field order, leaving out fields without a value (D7). */
export function customFieldValues(fields: readonly FieldDef[], stored: Record<string, unknown>): CustomFieldValueShape[] {
  const out: CustomFieldValueShape[] = [];
  forEachFieldValue(fields, stored, (field, values) => out.push({ field, values: values.map((x) => typed(field.dataType, x)) }));
  return out;
}
