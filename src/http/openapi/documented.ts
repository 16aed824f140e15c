import type { z } from 'zod';

/**
 * Document only: the contract's type of a query parameter whose binding schema takes the query text
 * (e.g. `First` is bound from a string, documented as an integer 0-1000). The OpenAPI document shows
 * `documented`; requests are still bound and validated by the binding schema alone.
 */
const documentedTypes = new WeakMap<z.ZodType, z.ZodType>();

/** Registers `documented` as the OpenAPI type of the query parameter bound by `binding`; returns `binding` unchanged. */
export function documentedAs<T extends z.ZodType>(binding: T, documented: z.ZodType): T {
  documentedTypes.set(binding, documented);
  return binding;
}

/** The schema the OpenAPI document shows for a parameter bound by `binding`. */
export function documentedType(binding: z.ZodType): z.ZodType {
  return documentedTypes.get(binding) ?? binding;
}
