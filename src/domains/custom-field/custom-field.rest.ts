import { z } from 'zod';
import { documentedAs } from '../../http/openapi/documented.js';
import type { DataTypeName } from '../../db/tables.js';

// The REST shapes of custom field values for the OpenAPI document. Requests are still bound loosely and
// checked by the shared validator (custom-field.ts), whose messages name each problem (D7): the typed
// shapes below are what typed clients see, so a misspelt data type or a wrong value fails at compile time.

/** The JSON kind of each data type's value as sent (custom-field.ts `readTyped`). */
const SENT: Record<DataTypeName, z.ZodType> = {
  String: z.string(),
  Integer: z.int32(),
  Decimal: z.number(),
  Boolean: z.boolean(),
  Date: z.string().meta({ format: 'date', description: 'yyyy-MM-dd.' }),
  Time: z
    .string()
    .regex(/^\d{2}:\d{2}(?::\d{2})?$/)
    .meta({ description: 'HH:mm:ss (seconds optional).' }),
  DateTime: z.string().meta({ format: 'date-time', description: 'ISO 8601; without an offset: UTC.' }),
  UserIdentifier: z.string().min(1),
};

/** One value as sent: an object with one property named after its data type, e.g. {"Integer": {"Value": 5}}. */
const SentTypedValue = z
  .xor(
    (Object.entries(SENT) as [DataTypeName, z.ZodType][]).map(([type, value]) =>
      z
        .object({ [type]: z.object({ Value: value }).strict() })
        .strict()
        .meta({ id: `Sent${type}Value` }),
    ),
  )
  .meta({ id: 'SentTypedValue', description: 'A value as sent: one property named after its data type (matched case-insensitively).' });

/** A sent custom field value (D7/D8): documented typed, bound as any JSON and checked by the shared validator. */
export const SentValueSchema = z
  .object({
    Key: z.string().meta({ description: 'The custom field key.' }),
    Value: documentedAs(
      z.unknown(),
      z.xor([SentTypedValue, z.array(SentTypedValue), z.null()]).meta({
        description: 'One value, the list of an array field, or null to clear the field.',
      }),
    ),
  })
  .meta({ id: 'CustomFieldValueInput', description: 'A custom field value as sent (property names are matched case-insensitively).' });

/** A stored value of a structural entity's field as answered: its JSON kind follows its data type. */
export const AnsweredValue = z
  .union([z.string(), z.number(), z.boolean()])
  .meta({ description: 'The value as JSON (a string, number or boolean).' });
