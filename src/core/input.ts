import type { z } from 'zod';

// What enters the service, whatever the door (REST bodies and queries, GraphQL variables, a provider's
// answers): bounds checked before anything walks a value recursively, text PostgreSQL can store, and names
// matched as ASP.NET binds them (D5). Shared by the REST adapter, the GraphQL endpoint and the domains.

export type ZodDef = { type: string; shape?: Record<string, z.ZodType>; element?: z.ZodType; innerType?: z.ZodType; in?: z.ZodType };
export const defOf = (s: z.ZodType): ZodDef => (s as unknown as { _zod: { def: ZodDef } })._zod.def;

/** Unwraps optional/nullable/default/pipe wrappers to the schema that describes the shape. */
export function unwrap(s: z.ZodType): z.ZodType {
  let d = defOf(s);
  while (d.innerType || (d.type === 'pipe' && d.in)) {
    s = (d.innerType ?? d.in)!;
    d = defOf(s);
  }
  return s;
}

/** Renames object keys to the schema's spelling, matched case-insensitively (D5, as ASP.NET binds). */
export function canonicalKeys(value: unknown, schema: z.ZodType): unknown {
  const s = unwrap(schema);
  const d = defOf(s);
  if (d.type === 'array' && Array.isArray(value)) return value.map((v) => canonicalKeys(v, d.element!));
  if (d.type === 'object' && d.shape && typeof value === 'object' && value !== null && !Array.isArray(value)) {
    // Built only for a key not spelled as the schema does (most bodies spell them all so).
    let names: Map<string, string> | undefined;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const name = Object.hasOwn(d.shape, k)
        ? k
        : ((names ??= new Map(Object.keys(d.shape).map((n) => [n.toLowerCase(), n]))).get(k.toLowerCase()) ?? k);
      // Own properties only: a request's `constructor` or `__proto__` is a name like any other (P47).
      setOwn(out, name, Object.hasOwn(d.shape, name) ? canonicalKeys(v, d.shape[name]!) : v);
    }
    return out;
  }
  return value;
}

/** Sets `name` as an own property, whatever the name (`__proto__` would otherwise set the prototype). */
export function setOwn(target: Record<string, unknown>, name: string, value: unknown): void {
  // Only `__proto__` is an accessor of Object.prototype; an assignment is far cheaper than a definition.
  if (name === '__proto__') Object.defineProperty(target, name, { value, enumerable: true, writable: true, configurable: true });
  else target[name] = value;
}

/** How deep JSON bodies may nest (the contract's deepest body nests 5 levels). */
export const MAX_BODY_NESTING = 32;

/** Items a list in a request may have (D6's largest page), and characters a text may have. */
export const MAX_LIST_ITEMS = 1000;
export const MAX_TEXT_LENGTH = 65_536;

/**
 * The first place where a request value nests deeper than MAX_BODY_NESTING, or holds a list longer than
 * MAX_LIST_ITEMS or a text longer than MAX_TEXT_LENGTH; found without recursion (P47).
 */
export function boundsProblem(value: unknown): { at: string; message: string } | undefined {
  const stack: [unknown, string, number][] = [[value, '', 0]];
  while (stack.length > 0) {
    const [v, at, depth] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.length > MAX_TEXT_LENGTH) return { at: at || '$', message: `A text may have at most ${MAX_TEXT_LENGTH} characters.` };
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    if (depth >= MAX_BODY_NESTING) return { at: '$', message: `The value nests deeper than ${MAX_BODY_NESTING} levels.` };
    if (Array.isArray(v)) {
      if (v.length > MAX_LIST_ITEMS) return { at: at || '$', message: `A list may have at most ${MAX_LIST_ITEMS} items.` };
      v.forEach((child, i) => stack.push([child, `${at}[${i}]`, depth + 1]));
    } else {
      for (const [k, child] of Object.entries(v)) stack.push([child, at ? `${at}.${k}` : k, depth + 1]);
    }
  }
  return undefined;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** What is wrong with a text for PostgreSQL, if anything: U+0000 (P3), or a lone UTF-16 surrogate (P47). */
export function textProblem(s: string): string | undefined {
  if (s.includes('\u0000')) return 'Must not contain the NUL character (U+0000).';
  if (LONE_SURROGATE.test(s)) return 'Must be well-formed Unicode (no lone surrogate).';
  return undefined;
}

// Keys and display names are btree keys (unique key, name ordering): at 4 bytes a character these bounds
// keep an index entry under PostgreSQL's limit of about 2.7 kB (P5).
/** P5: a key (structural entity, field, data extract, user, …) is at most this many characters. */
export const MAX_KEY_LENGTH = 200;
/** P5: a display name is at most this many characters. */
export const MAX_NAME_LENGTH = 400;

/** Whether a text is empty or only white space (`String.prototype.trim`): no identifier, no matching value (P87). */
export function isBlank(text: string): boolean {
  return text.trim() === '';
}
