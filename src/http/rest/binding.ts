import type { Request } from 'express';
import type { GraphQLError } from 'graphql';
import type { z } from 'zod';
import { type FieldErrors, NotFoundError, ValidationError } from '../../core/errors.js';
import { MAX_LIST_ITEMS, boundsProblem, canonicalKeys, defOf, setOwn, textProblem, unwrap } from '../../core/input.js';
import { type RouteDef, pascalLocation } from './route.js';

/** Query string → object with the schema's names: repeated names are lists, list items may be comma-separated (D5). */
function bindQuery(url: string, schema: z.ZodType): { value: Record<string, unknown>; errors: FieldErrors } {
  const shape = defOf(unwrap(schema)).shape ?? {};
  const names = new Map(Object.keys(shape).map((k) => [k.toLowerCase(), k]));
  const raw = url.includes('?') ? url.slice(url.indexOf('?') + 1) : '';
  // URLSearchParams would decode invalid UTF-8 as U+FFFD, silently changing the value: refuse it.
  for (const part of raw.split('&')) {
    try {
      decodeURIComponent(part.replace(/\+/g, ' '));
    } catch {
      return { value: {}, errors: { [part.split('=')[0]!.replace(/%/g, '') || '$']: ['Not valid percent-encoded UTF-8.'] } };
    }
  }
  const params = new URLSearchParams(raw);
  const grouped = new Map<string, string[]>();
  for (const [k, v] of params) {
    const name = names.get(k.toLowerCase()) ?? k;
    grouped.set(name, [...(grouped.get(name) ?? []), v]);
  }
  const value: Record<string, unknown> = {};
  const errors: FieldErrors = {};
  for (const [name, values] of grouped) {
    const field = Object.hasOwn(shape, name) ? shape[name] : undefined;
    if (!field) {
      setOwn(value, name, values.length === 1 ? values[0] : values);
    } else if (defOf(unwrap(field)).type === 'array') {
      const list = values
        .flatMap((v) => v.split(','))
        .map((v) => v.trim())
        .filter((v) => v !== '');
      if (list.length > MAX_LIST_ITEMS) setOwn(errors, name, [`${name} may list at most ${MAX_LIST_ITEMS} items.`]);
      else setOwn(value, name, list);
    } else if (values.length > 1) {
      setOwn(errors, name, [`${name} is given more than once.`]);
    } else {
      setOwn(value, name, values[0]);
    }
  }
  return { value, errors };
}

function zodErrors(error: z.ZodError, prefix: string): FieldErrors {
  const out: FieldErrors = {};
  for (const issue of error.issues) {
    const loc = issue.path.reduce<string>(
      (acc, seg) => (typeof seg === 'number' ? `${acc}[${seg}]` : acc ? `${acc}.${String(seg)}` : String(seg)),
      prefix,
    );
    (out[loc || '$'] ??= []).push(issue.message);
  }
  return out;
}

/**
 * Binds a request to the route's zod schemas: path, query (D5 list binding) and body, with the input
 * bounds and text checks. Every problem found is reported at once, as one 400 naming each location.
 */
export function bindRequest(route: RouteDef, req: Request): { params: unknown; query: unknown; body: unknown } {
  const errors: FieldErrors = {};
  const parse = <T>(schema: z.ZodType<T> | undefined, raw: unknown, prefix: string): T => {
    if (!schema) return undefined as T;
    const r = schema.safeParse(raw);
    if (r.success) return r.data;
    Object.assign(errors, zodErrors(r.error, prefix));
    return undefined as T;
  };
  // A path key holding U+0000 names nothing that can exist: 404, as an unknown key (D2).
  if (textPaths(req.params, '').length > 0) throw new NotFoundError('No resource has this key.');
  const params = parse(route.params, req.params, '');
  let query: unknown;
  if (route.query) {
    const bound = bindQuery(req.originalUrl, route.query);
    Object.assign(errors, bound.errors);
    query = parse(route.query, bound.value, '');
    addTextErrors(errors, bound.value);
  }
  let body: unknown;
  if (route.body) {
    const raw = (req as { body?: unknown }).body;
    if (raw === undefined && route.body.required) errors['$'] = ['A request body is required.'];
    else {
      // Walks below recurse: a body nested thousands of levels, or holding lists and texts beyond any
      // use, is refused first (P47).
      const bounds = boundsProblem(raw);
      if (bounds) throw ValidationError.at(pascalLocation(bounds.at), bounds.message);
      // Keys canonicalised once, so text problems are named in the contract's casing.
      const canonical = raw === undefined ? undefined : canonicalKeys(raw, route.body.schema);
      body = parse(route.body.schema, canonical, '');
      addTextErrors(errors, canonical);
    }
  }
  if (Object.keys(errors).length > 0) throw new ValidationError(errors);

  return { params, query, body };
}

// Text PostgreSQL cannot store as sent is bad input: 400 naming each location (contract casing, as
// bound) before anything reaches the database, instead of a failed statement or a silently altered value.
function textPaths(value: unknown, at: string): [string, string][] {
  if (typeof value === 'string') {
    const p = textProblem(value);
    return p ? [[at || '$', p]] : [];
  }
  if (Array.isArray(value)) return value.flatMap((v, i) => textPaths(v, `${at}[${i}]`));
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).flatMap(([k, v]) => {
      const p = textProblem(k);
      return p ? [[at || '$', p] as [string, string]] : textPaths(v, at ? `${at}.${k}` : k);
    });
  }
  return [];
}

function addTextErrors(errors: FieldErrors, value: unknown): void {
  for (const [p, message] of textPaths(value, '')) {
    if (!Object.hasOwn(errors, p)) setOwn(errors, p, []);
    errors[p]!.push(message);
  }
}

// D5: a query value that passed the route's zod schema but that GraphQL cannot coerce (an Int
// beyond 32 bits, e.g. `First=3000000000`) is bad input naming the parameter, not an unexpected error.
// Only variable coercion can fail before execution here: the route operations are validated at start-up.
export function variableCoercionError(errors: readonly GraphQLError[], location: (path: string) => string): Error {
  const mapped: FieldErrors = {};
  for (const e of errors) {
    const name = /^Variable "\$(\w+)"/.exec(e.message)?.[1];
    if (!name) return e.originalError ?? e; // not a variable problem: left to the 500 handler
    const why = e.message.includes('; ') ? e.message.slice(e.message.indexOf('; ') + 2) : 'invalid value';
    (mapped[location(name)] ??= []).push(`${location(name)} is not valid: ${why}`);
  }
  return new ValidationError(mapped);
}
