import type { FieldErrors } from '../../core/errors.js';
import { type Problem, problem } from '../errors.js';
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

/** The request id of every documented problem example. */
const EXAMPLE_TRACE_ID = '5eda76b3-c536-47de-a748-9489fe05780c';

/** A problem+json body as the service answers it, for a documented example. */
export function problemExample(status: number, detail: string, errors?: FieldErrors): Problem {
  return problem(status, EXAMPLE_TRACE_ID, detail, errors);
}

/** The documented 400 answer of a list whose query parameter is invalid, with an example naming it. */
export function invalidParameter(detail: string, errors: FieldErrors): { description: string; example: Problem } {
  return { description: 'A parameter is invalid.', example: problemExample(400, detail, errors) };
}
