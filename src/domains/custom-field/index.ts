// The custom-field domain's door: typed values (D7) as the entity and subject domains use them.
export {
  DATA_TYPES,
  type FieldDef,
  type ParsedValues,
  type Scalar,
  type StoredValue,
  type UserReference,
  dataTypeByName,
  forEachFieldValue,
  parseSentValues,
  readTyped,
  sortKeyOf,
  sqlTypeOf,
  valueText,
} from './custom-field.js';
export { jsonFieldSortExpr, reportUnknownUsers } from './custom-field.repository.js';
export { AnsweredValue, SentValueSchema } from './custom-field.rest.js';
export { CustomFieldRef, CustomFieldValueInput, CustomFieldValueRef, customFieldValues } from './custom-field.schema.js';
