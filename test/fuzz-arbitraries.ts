import fc from 'fast-check';
import {
  type GraphQLField,
  type GraphQLInputType,
  type GraphQLNamedType,
  type GraphQLSchema,
  getNamedType,
  isEnumType,
  isInputObjectType,
  isInterfaceType,
  isLeafType,
  isListType,
  isNonNullType,
  isObjectType,
  isScalarType,
  isUnionType,
} from 'graphql';

// Generators of hostile input for the property-based fuzz suite (issue 9, test/fuzz.test.ts): JSON
// values JSON.stringify cannot express (duplicate or prototype-named keys, -0, 1e999, nesting thousands of
// levels deep), strings with lone surrogates and NUL, query strings with invalid percent-encoding, and
// GraphQL documents generated from the schema. Nothing here knows the app: tenant-specific values come
// in through `World`.

// ---------------------------------------------------------------------------------------------------
// A JSON model

/** A JSON object as a list of entries: keys may repeat and may be `__proto__` (never a prototype). */
export class Obj {
  constructor(readonly entries: readonly (readonly [string, J])[]) {}
}
/** JSON text inserted as is (a number JSON.stringify cannot write, a structure nested 5,000 levels). */
export class Raw {
  constructor(readonly text: string) {}
}
/** A GraphQL enum literal (rendered bare in a document, as a string in variables). */
export class Enum {
  constructor(readonly name: string) {}
}
export type J = null | boolean | number | string | readonly J[] | Obj | Raw | Enum;

/** `arb` once in `n` draws, else undefined (fc.option's `freq` is the frequency of nil). */
export const rarely = <T>(arb: fc.Arbitrary<T>, n: number): fc.Arbitrary<T | undefined> =>
  fc.oneof({ weight: n - 1, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: arb });

export const obj = (...entries: (readonly [string, J] | undefined | false)[]) =>
  new Obj(entries.filter((e): e is readonly [string, J] => !!e));

/** JSON text of a model value (lone surrogates come out as `\udXXX` escapes, -0 as `-0`). */
export function toJson(v: J): string {
  if (v === null) return 'null';
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : Number.isFinite(v) ? JSON.stringify(v) : 'null';
  if (typeof v === 'boolean' || typeof v === 'string') return JSON.stringify(v);
  if (v instanceof Raw) return v.text;
  if (v instanceof Enum) return JSON.stringify(v.name);
  if (v instanceof Obj) return `{${v.entries.map(([k, x]) => `${JSON.stringify(k)}:${toJson(x)}`).join(',')}}`;
  return `[${v.map(toJson).join(',')}]`;
}

/** A GraphQL literal of a model value (object keys as sent: an invalid name is a syntax error, on purpose). */
export function toGraphqlLiteral(v: J): string {
  if (v === null) return 'null';
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : Number.isFinite(v) ? String(v) : '1e999';
  if (typeof v === 'boolean' || typeof v === 'string') return JSON.stringify(v);
  if (v instanceof Raw) return v.text;
  if (v instanceof Enum) return v.name;
  if (v instanceof Obj) return `{${v.entries.map(([k, x]) => `${k}: ${toGraphqlLiteral(x)}`).join(', ')}}`;
  return `[${v.map(toGraphqlLiteral).join(', ')}]`;
}

// ---------------------------------------------------------------------------------------------------
// Primitive values at the edges

export const PROTO_NAMES = [
  '__proto__',
  'constructor',
  'hasOwnProperty',
  'toString',
  'valueOf',
  'prototype',
  'isPrototypeOf',
  '__defineGetter__',
  'propertyIsEnumerable',
  'toJSON',
];

export const SPECIAL_STRINGS = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\udc00',
  'bad\udc00name',
  'x\ud800',
  '\ud800\udc00',
  '\ud83d\udca9',
  '\uffff',
  '\ufeff',
  '\u202e',
  'e\u0301',
  "' OR '1'='1",
  '"; DROP TABLE subject; --',
  '$1',
  '%',
  '%zz',
  '%00',
  '\\',
  '\\u0000',
  '../..',
  '\n\r\t',
  '<script>',
  '${x}',
  '{{x}}',
  'null',
  'undefined',
  'true',
  '0',
  '-0',
  'NaN',
  'Infinity',
  '1e308',
  ' lead',
  'trail ',
  '*',
  '_',
  ',',
  'a,b',
  '[]',
  '{}',
  ...PROTO_NAMES,
];

/** Numbers at the edges of JSON, JavaScript, 32-bit and PostgreSQL integers, and the service's limits. */
export const EDGE_NUMBERS = [
  0,
  -0,
  1,
  -1,
  0.5,
  -2.5,
  1e308,
  -1e308,
  1.7976931348623157e308,
  5e-324,
  2 ** 53,
  2 ** 53 + 2,
  -(2 ** 53),
  2 ** 31,
  2 ** 31 - 1,
  -(2 ** 31),
  -(2 ** 31) - 1,
  2 ** 32,
  2 ** 63,
  199,
  200,
  201,
  999,
  1000,
  1001,
  65535,
  123.456,
];
/** Number texts JSON.parse reads oddly (Infinity, precision loss) or not at all. */
export const RAW_NUMBERS = [
  '1e999',
  '-1e999',
  '1E400',
  '123456789012345678901234567890',
  '1e-400',
  '-0.0',
  '1.0',
  '0.1e1',
  '00',
  '+1',
  '0x10',
  'NaN',
  '.5',
  '1.',
  '01',
];

export const DATE_TIMES = [
  '2024-05-01T10:00:00Z',
  '2024-05-01T10:00:00.123+02:00',
  '2024-05-01 10:00',
  '0001-01-01T00:00:00Z',
  '9999-12-31T23:59:59.999+00:00',
  '0001-01-01T00:00:00+14:00',
  '9999-12-31T23:00:00-14:00',
  '2024-05-01T10:00:00+99:99',
  '2024-05-01T10:00:00+14:30',
  '2024-05-01T10:00:00-14:01',
  '0000-01-01T00:00:00Z',
  '10000-01-01T00:00:00Z',
  '+275760-09-13T00:00:00Z',
  '2024-02-30T00:00:00Z',
  '2024-05-01T24:00:00Z',
  '2024-05-01T23:59:60Z',
  '2024-05-01T10:00:00.1234567891Z',
  '2024-05-01T10:00:00+0200',
  '2024-05-01t10:00:00z',
  '2024-05-01',
  'now',
  '',
];
export const DATES = [
  '2024-05-01',
  '0001-01-01',
  '9999-12-31',
  '0000-01-01',
  '10000-01-01',
  '2024-02-30',
  '2023-02-29',
  '-0001-01-01',
  '2024-5-1',
  '2024-05-01T00:00:00Z',
  'epoch',
];
export const TIMES = [
  '10:00',
  '10:00:00',
  '23:59:59',
  '00:00',
  '24:00:00',
  '23:59:60',
  '10:00:00.123456789',
  '10:00:00+02:00',
  '25:00',
  '-01:00',
  '10:60',
  '1000',
];

export interface StringOpts {
  /** The longest generated string (URLs must stay under the 16 kB header limit). */
  maxLong: number;
}

/** Hostile text: special strings, ASCII and full Unicode (lone surrogates included), mixes, long runs. */
export function hostileString(opts: StringOpts = { maxLong: 300_000 }): fc.Arbitrary<string> {
  const special = fc.constantFrom(...SPECIAL_STRINGS);
  const surrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
  return fc.oneof(
    { weight: 4, arbitrary: special },
    { weight: 3, arbitrary: fc.string({ maxLength: 24 }) },
    { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.string({ maxLength: 6 }), fc.oneof(special, surrogate), fc.string({ maxLength: 6 }))
        .map(([a, b, c]) => a + b + c),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom('a', 'é', '\ud83d\udca9', '\udc00', '%', 'ab ', '\u0000'),
          fc.oneof(fc.integer({ min: 190, max: 210 }), fc.integer({ min: 1, max: opts.maxLong })),
        )
        .map(([c, n]) => c.repeat(Math.max(1, Math.floor(n / c.length)))),
    },
  );
}

// ---------------------------------------------------------------------------------------------------
// Structures: deep, huge, arbitrary

/** JSON text nested `depth` levels: arrays, objects, prototype-named objects or a mix. */
export function deepText(depth: number, kind: 'array' | 'object' | 'proto' | 'mixed'): string {
  const open = (i: number) => {
    const k = kind === 'mixed' ? (['array', 'object', 'proto'] as const)[i % 3]! : kind;
    return k === 'array' ? '[' : k === 'object' ? '{"a":' : '{"__proto__":';
  };
  const close = (i: number) => {
    const k = kind === 'mixed' ? (['array', 'object', 'proto'] as const)[i % 3]! : kind;
    return k === 'array' ? ']' : '}';
  };
  let text = '';
  for (let i = 0; i < depth; i++) text += open(i);
  text += '1';
  for (let i = depth - 1; i >= 0; i--) text += close(i);
  return text;
}

/** A structure nested from a few to a few thousand levels (the service refuses more than 32). */
export const deepJ: fc.Arbitrary<J> = fc
  .record({
    depth: fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1000, max: 5000 })),
    kind: fc.constantFrom('array', 'object', 'proto', 'mixed') as fc.Arbitrary<'array' | 'object' | 'proto' | 'mixed'>,
  })
  .map(({ depth, kind }) => new Raw(deepText(depth, kind)));

/** An array of up to 70,000 short items (about 1 MB at most: some cross MAX_BODY_BYTES, most do not). */
export function hugeArrayJ(items: readonly J[] = ['k', 'sales', 'a@b.c', 1, null, '\u00e9']): fc.Arbitrary<J> {
  return fc
    .record({ n: fc.oneof(fc.integer({ min: 1000, max: 5000 }), fc.integer({ min: 5000, max: 70_000 })), item: fc.constantFrom(...items) })
    .map(({ n, item }) => {
      const parts: string[] = new Array(n);
      for (let i = 0; i < n; i++) parts[i] = typeof item === 'string' ? JSON.stringify(`${item}-${i}`) : toJson(item);
      return new Raw(`[${parts.join(',')}]`);
    });
}

/** Object keys: prototype names, documented names in any case, and hostile text. */
export function keyArb(documented: readonly string[] = []): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...PROTO_NAMES) },
    ...(documented.length ? [{ weight: 3, arbitrary: fc.mixedCase(fc.constantFrom(...documented)) }] : []),
    { weight: 2, arbitrary: hostileString({ maxLong: 2000 }) },
  );
}

const leafJ: fc.Arbitrary<J> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.constantFrom(...EDGE_NUMBERS),
  fc.constantFrom(...RAW_NUMBERS.slice(0, 10)).map((t) => new Raw(t)),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  hostileString({ maxLong: 20_000 }),
  fc.constantFrom(...DATE_TIMES, ...DATES, ...TIMES),
);

/** Any JSON value, a few levels deep, with hostile keys and leaves (and sometimes a deep or huge part). */
export function anyJ(documented: readonly string[] = []): fc.Arbitrary<J> {
  const { value } = fc.letrec<{ value: J }>((tie) => ({
    value: fc.oneof(
      { depthSize: 'small', maxDepth: 3, withCrossShrink: true },
      { weight: 6, arbitrary: leafJ },
      { weight: 2, arbitrary: fc.array(tie('value'), { maxLength: 4 }) },
      { weight: 2, arbitrary: fc.array(fc.tuple(keyArb(documented), tie('value')), { maxLength: 4 }).map((e) => new Obj(e)) },
    ),
  }));
  return fc.oneof({ weight: 10, arbitrary: value }, { weight: 1, arbitrary: deepJ }, { weight: 1, arbitrary: hugeArrayJ() });
}

// ---------------------------------------------------------------------------------------------------
// Mutations of a valid-shaped value

export type MutationOp = 'replace' | 'delete' | 'protoKey' | 'protoAll' | 'recase' | 'wrapArray' | 'duplicate' | 'deep' | 'huge' | 'kind';
export interface Mutation {
  op: MutationOp;
  /** Which node (pre-order index, modulo the node count). */
  at: number;
  /** Which entry of the node, and which letters to upper-case (bit mask). */
  pick: number;
  value: J;
  key: string;
}

export function mutationArb(documented: readonly string[]): fc.Arbitrary<Mutation> {
  return fc.record({
    op: fc.constantFrom<MutationOp>(
      'replace',
      'replace',
      'delete',
      'protoKey',
      'protoAll',
      'recase',
      'wrapArray',
      'duplicate',
      'deep',
      'huge',
      'kind',
    ),
    at: fc.nat(200),
    pick: fc.nat(),
    value: anyJ(documented),
    key: keyArb(documented),
  });
}

function nodeCount(v: J): number {
  if (Array.isArray(v)) return 1 + v.reduce((n: number, x: J) => n + nodeCount(x), 0);
  if (v instanceof Obj) return 1 + v.entries.reduce((n, [, x]) => n + nodeCount(x), 0);
  return 1;
}

const recase = (s: string, mask: number) => [...s].map((c, i) => ((mask >> (i % 31)) & 1 ? c.toUpperCase() : c.toLowerCase())).join('');
const otherKind = (v: J, m: Mutation): J =>
  typeof v === 'string'
    ? m.pick % 2
      ? Number(v) || 1
      : [v]
    : typeof v === 'number'
      ? String(v)
      : typeof v === 'boolean'
        ? String(v)
        : v === null
          ? obj()
          : Array.isArray(v)
            ? obj(['0', v[0] ?? null])
            : v instanceof Obj
              ? v.entries.map(([, x]) => x)
              : 'text';

/** Adds a prototype-named key (`__proto__`, `constructor`, ...) to every object of `v`, keeping the rest. */
export function withProtoKeys(v: J, pick: number, value: J): J {
  const name = PROTO_NAMES[pick % PROTO_NAMES.length]!;
  if (Array.isArray(v)) return v.map((x) => withProtoKeys(x, pick, value));
  if (v instanceof Obj) return new Obj([...v.entries.map(([k, x]) => [k, withProtoKeys(x, pick, value)] as const), [name, value]]);
  return v;
}

/** Applies one mutation at node `m.at % count` (pre-order) of `v` ('protoAll': to every object). */
export function mutate(v: J, m: Mutation): J {
  if (m.op === 'protoAll') return withProtoKeys(v, m.pick, m.pick % 3 === 0 ? m.value : m.pick % 3 === 1 ? obj() : 1);
  let index = m.at % nodeCount(v);
  const visit = (x: J): J => {
    if (index-- === 0) return change(x);
    if (Array.isArray(x)) return x.map(visit);
    if (x instanceof Obj) return new Obj(x.entries.map(([k, y]) => [k, visit(y)] as const));
    return x;
  };
  const change = (x: J): J => {
    switch (m.op) {
      case 'replace':
        return m.value;
      case 'delete':
        if (Array.isArray(x) && x.length) return x.filter((_, i) => i !== m.pick % x.length);
        if (x instanceof Obj && x.entries.length) return new Obj(x.entries.filter((_, i) => i !== m.pick % x.entries.length));
        return m.value;
      case 'protoKey':
        return x instanceof Obj
          ? new Obj([...x.entries, [PROTO_NAMES[m.pick % PROTO_NAMES.length]!, m.value]])
          : obj([PROTO_NAMES[m.pick % PROTO_NAMES.length]!, x]);
      case 'recase':
        return x instanceof Obj ? new Obj(x.entries.map(([k, y]) => [recase(k, m.pick), y] as const)) : x;
      case 'wrapArray':
        return [x];
      case 'duplicate':
        return x instanceof Obj && x.entries.length
          ? new Obj([...x.entries, [x.entries[m.pick % x.entries.length]![0], m.value]])
          : x instanceof Obj
            ? new Obj([[m.key, m.value]])
            : m.value;
      case 'deep':
        return new Raw(deepText(1000 + (m.pick % 4000), (['array', 'object', 'proto', 'mixed'] as const)[m.pick % 4]!));
      case 'huge': {
        const n = 1000 + (m.pick % 69_000);
        return new Raw(`[${Array.from({ length: n }, (_, i) => JSON.stringify(`k-${i}`)).join(',')}]`);
      }
      case 'kind':
        return otherKind(x, m);
      case 'protoAll':
        return x;
    }
  };
  return visit(v);
}

// ---------------------------------------------------------------------------------------------------
// Query strings and paths

/** Percent-encodes every code point; a lone surrogate as its WTF-8 bytes (`%ED%B0%80`), as an attacker can. */
export function pctEncode(s: string): string {
  let out = '';
  for (const ch of s) {
    const c = ch.charCodeAt(0);
    if (ch.length === 1 && c >= 0xd800 && c <= 0xdfff)
      out += `%ED%${(0xa0 | ((c >> 6) & 0x1f)).toString(16).toUpperCase()}%${(0x80 | (c & 0x3f)).toString(16).toUpperCase()}`;
    else out += encodeURIComponent(ch);
  }
  return out;
}

/** Malformed or hostile percent-encoding, sent as is. */
export const PCT_GARBAGE = [
  '%zz',
  '%',
  '%%',
  '%E0%A4%A',
  '%ED%A0%80',
  '%ED%B0%80',
  '%C0%80',
  '%00',
  '%FF',
  '%F4%90%80%80',
  '%2F',
  '%2e%2e',
  '%5B%5D',
  '+',
  '%2B',
  '%26',
  '%3D',
  '%23',
];

/** A value as it appears in a query string or a path: encoded hostile text or raw garbage. */
export function encodedValue(plain: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: plain.map(pctEncode) },
    {
      weight: 2,
      arbitrary: fc.tuple(plain.map(pctEncode), fc.constantFrom(...PCT_GARBAGE), plain.map(pctEncode)).map(([a, b, c]) => a + b + c),
    },
    { weight: 1, arbitrary: plain.map((s) => s.replace(/[#?&=/%\s\\]/g, '')).map((s) => encodeURI(s.replace(/[\ud800-\udfff]/g, ''))) },
  );
}

// ---------------------------------------------------------------------------------------------------
// GraphQL documents from the schema

/** What the generators know of the tenant: real keys and ids, so valid-shaped requests reach the logic. */
export interface World {
  subjectIds: string[];
  subjectGlobalIds: string[];
  externalIds: string[];
  entityKeys: string[];
  entityGlobalIds: string[];
  structureTypeKeys: string[];
  subjectFields: FieldInfo[];
  entityFields: FieldInfo[];
  userIds: string[];
  dataSourceKeys: string[];
  extractKeys: string[];
  emails: string[];
  cursors: string[];
}
export interface FieldInfo {
  key: string;
  dataType: string;
  isArray: boolean;
}

/** A JSON value of one data type: valid, at the edges, or of another kind. */
export function typedValueArb(dataType: string): fc.Arbitrary<J> {
  const any = fc.oneof(hostileString({ maxLong: 5000 }), fc.constantFrom(...EDGE_NUMBERS), fc.boolean(), fc.constant(null));
  const byType: Record<string, fc.Arbitrary<J>> = {
    String: hostileString(),
    Integer: fc.oneof(
      fc.integer({ min: -1000, max: 1000 }),
      fc.constantFrom(...EDGE_NUMBERS),
      fc.constantFrom(...RAW_NUMBERS).map((t) => new Raw(t)),
    ),
    Decimal: fc.oneof(
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.constantFrom(...EDGE_NUMBERS),
      fc.constantFrom(...RAW_NUMBERS).map((t) => new Raw(t)),
      fc.constantFrom('1.5', '1e400'),
    ),
    Boolean: fc.oneof(fc.boolean(), fc.constantFrom<J>('true', 1, 0, 'yes')),
    DateTime: fc.constantFrom(...DATE_TIMES),
    Date: fc.constantFrom(...DATES),
    Time: fc.constantFrom(...TIMES),
    UserIdentifier: fc.oneof(fc.constantFrom('u-1', 'u-2', 'u-unknown'), hostileString({ maxLong: 1000 })),
  };
  return fc.oneof({ weight: 5, arbitrary: byType[dataType] ?? any }, { weight: 1, arbitrary: any });
}

const DATA_TYPE_NAMES = ['String', 'Integer', 'Decimal', 'Boolean', 'DateTime', 'Date', 'Time', 'UserIdentifier'];

const pad = (n: number, w = 2) => String(n).padStart(w, '0');
const instant = fc.date({ min: new Date('1900-01-01T00:00:00Z'), max: new Date('2100-12-31T23:59:59Z'), noInvalidDate: true });

/** A JSON value the data type accepts (so valid-shaped requests write, and later requests read what they wrote). */
export function validTypedValueArb(dataType: string): fc.Arbitrary<J> {
  const byType: Record<string, fc.Arbitrary<J>> = {
    String: fc.oneof(fc.string({ minLength: 1, maxLength: 30 }), fc.string({ unit: 'grapheme', minLength: 1, maxLength: 10 })),
    Integer: fc.integer({ min: -1_000_000, max: 1_000_000 }),
    Decimal: fc.double({ min: -1e6, max: 1e6, noNaN: true }),
    Boolean: fc.boolean(),
    DateTime: instant.map((d) => d.toISOString()),
    Date: instant.map((d) => d.toISOString().slice(0, 10)),
    Time: fc.tuple(fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 })).map(([h, m]) => `${pad(h)}:${pad(m)}`),
    UserIdentifier: fc.constantFrom('u-1', 'u-2', 'u-3'),
  };
  return byType[dataType] ?? fc.string({ maxLength: 10 });
}

/** A sent custom field value the field accepts (exact names and type). */
export function validSentValueArb(
  fields: readonly FieldInfo[],
  names: { key: string; value: string; inner: string } = { key: 'Key', value: 'Value', inner: 'Value' },
): fc.Arbitrary<J> {
  return fc.constantFrom(...fields).chain((f) => {
    const one = validTypedValueArb(f.dataType).map((v) => obj([f.dataType, obj([names.inner, v])]));
    return (f.isArray ? fc.array(one, { maxLength: 3 }) : one).map((v) => obj([names.key, f.key], [names.value, v]));
  });
}

/** A sent custom field value `{"<DataType>": {"Value": x}}` (or a list of them, or null), names in any case. */
export function sentValueArb(
  fields: readonly FieldInfo[],
  names: { key: string; value: string; inner: string } = { key: 'Key', value: 'Value', inner: 'Value' },
): fc.Arbitrary<J> {
  return fc.constantFrom(...fields).chain((f) => {
    const typeName = fc.oneof(
      { weight: 8, arbitrary: fc.constant(f.dataType) },
      { weight: 1, arbitrary: fc.mixedCase(fc.constant(f.dataType)) },
      { weight: 1, arbitrary: fc.constantFrom(...DATA_TYPE_NAMES, ...PROTO_NAMES) },
    );
    const one = fc.tuple(typeName, typedValueArb(f.dataType)).map(([t, v]) => obj([t, obj([names.inner, v])]));
    const value = f.isArray
      ? fc.oneof(fc.array(one, { maxLength: 4 }), one)
      : fc.oneof({ weight: 6, arbitrary: one }, { weight: 1, arbitrary: fc.array(one, { maxLength: 2 }) });
    const key = fc.oneof(
      { weight: 8, arbitrary: fc.constant(f.key) },
      { weight: 1, arbitrary: fc.mixedCase(fc.constant(f.key)) },
      { weight: 1, arbitrary: hostileString({ maxLong: 500 }) },
    );
    return fc
      .tuple(key, fc.oneof({ weight: 10, arbitrary: value }, { weight: 1, arbitrary: fc.constant(null) }))
      .map(([k, v]) => obj([names.key, k], [names.value, v]));
  });
}

/** Strings that look like keys and ids of the world, or not. */
export function hinted(values: readonly string[], maxLong = 2000): fc.Arbitrary<string> {
  return values.length
    ? fc.oneof(
        { weight: 8, arbitrary: fc.constantFrom(...values) },
        { weight: 1, arbitrary: fc.mixedCase(fc.constantFrom(...values)) },
        { weight: 2, arbitrary: hostileString({ maxLong }) },
      )
    : hostileString({ maxLong });
}

/** A forged cursor: base64url of JSON shaped like the service's, with hostile positions. */
export function forgedCursorArb(w: World): fc.Arbitrary<string> {
  const list = fc.constantFrom('subject', 'structuralEntity', 'user', 'portalUser', 'dataPoint', 'dataExtract', 'outboxMail', '__proto__');
  const order = fc.constantFrom(
    'Id',
    'DisplayName',
    'Key',
    'hired',
    'grade',
    'score',
    'born',
    'starts',
    'skills',
    'Relevance',
    'constructor',
  );
  const pos = fc.oneof(fc.constantFrom<J>(...DATE_TIMES, ...DATES, ...TIMES, ...EDGE_NUMBERS), hostileString({ maxLong: 3000 }));
  const id = fc.oneof(
    fc.constantFrom<J>(...w.subjectIds, ...w.entityKeys, '00000000-0000-0000-0000-000000000000', 1e308, -1),
    hostileString({ maxLong: 100 }),
  );
  const shaped = fc.tuple(list, order, pos, id).map((t) => toJson(t as J[]));
  const text = fc.oneof({ weight: 4, arbitrary: shaped }, { weight: 1, arbitrary: anyJ().map(toJson) });
  return fc.oneof(
    { weight: 6, arbitrary: text.map((t) => Buffer.from(t, 'utf8').toString('base64url')) },
    { weight: 2, arbitrary: w.cursors.length ? fc.constantFrom(...w.cursors) : fc.constant('') },
    { weight: 1, arbitrary: hostileString({ maxLong: 3000 }) },
  );
}

interface ArgValue {
  /** As a variable `$vN: type`, or inline. */
  variable: boolean;
  type: string;
  value: J;
}
interface FieldSel {
  alias: string | undefined;
  name: string;
  args: [string, ArgValue][];
  sel: Sel[] | undefined;
}
type Sel = FieldSel | { on: string; sel: Sel[] };

/** A generated GraphQL operation: the document and its variables. */
export interface GraphqlOperation {
  kind: 'query' | 'mutation';
  document: string;
  variables: Obj;
  /** Root fields (response keys) the operation selects. */
  rootKeys: string[];
}

/**
 * Operations of the schema with random fields, arguments and variables: valid-shaped values from the world
 * (existing ids and keys, sent values of the tenant's fields) mixed with hostile ones of the same and of
 * other kinds, as literals or variables (sometimes of a wrongly declared type).
 */
export function graphqlOperationArb(schema: GraphQLSchema, w: World): fc.Arbitrary<GraphqlOperation> {
  const memoSel = new Map<string, fc.Arbitrary<Sel[]>>();
  const memoInput = new Map<string, fc.Arbitrary<J>>();
  const MAX_DEPTH = 5;

  const stringFor = (name: string, parent: string): fc.Arbitrary<J> => {
    const n = name.toLowerCase();
    if (n === 'after' || n === 'before') return forgedCursorArb(w);
    if (n === 'orderby')
      return hinted([
        'Id',
        'DisplayName',
        'Key',
        'ExternalId',
        'Email',
        'CreatedAt',
        ...w.subjectFields.map((f) => f.key),
        ...w.entityFields.map((f) => f.key),
      ]);
    if (n === 'searchterm')
      return fc.oneof(
        hinted(['Person', 'sales', 'Ann', 'E-1']),
        fc.integer({ min: 195, max: 205 }).map((k) => 'a'.repeat(k)),
      );
    if (n.includes('extractkey')) return hinted(w.extractKeys);
    if (n === 'datasourcekey') return hinted(w.dataSourceKeys);
    if (n === 'structuretypekey') return hinted(w.structureTypeKeys);
    if (
      n === 'parentkey' ||
      n === 'keys' ||
      n === 'structuralentitykeys' ||
      (n === 'key' && (parent === 'Query' || parent === 'UpsertStructuralEntityInput'))
    )
      return hinted(w.entityKeys);
    if (n === 'key' && parent === 'CustomFieldFilterValues') return hinted(w.subjectFields.map((f) => f.key));
    if (n === 'key') return hinted([...w.extractKeys, ...w.entityKeys]);
    if (n.includes('email')) return hinted(w.emails);
    if (n === 'subjectidentifier') return hinted(w.externalIds);
    if (n === 'name' || n === 'displayname') return hostileString({ maxLong: 5000 });
    if (n === 'values') return hinted(['E-1001', 'Person 1', '5', 'true']);
    if (n === 'datatype') return fc.oneof(fc.constantFrom(...DATA_TYPE_NAMES), hostileString({ maxLong: 100 }));
    return fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom('x', 'sales', 'E-1001', 'Person 1') },
      { weight: 1, arbitrary: hostileString({ maxLong: 20_000 }) },
    );
  };
  const idFor = (name: string): fc.Arbitrary<J> => {
    const n = name.toLowerCase();
    const ids =
      n.includes('subject') || n === 'id' || n === 'ids'
        ? [...w.subjectIds, ...w.subjectGlobalIds, ...w.entityGlobalIds]
        : [...w.subjectIds, ...w.subjectGlobalIds];
    return fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(...ids) },
      { weight: 1, arbitrary: fc.uuid() },
      { weight: 2, arbitrary: hostileString({ maxLong: 2000 }) },
      { weight: 1, arbitrary: fc.constantFrom<J>(1, 1e308, -0) },
    );
  };
  const intFor = (name: string): fc.Arbitrary<J> =>
    name === 'first' || name === 'last'
      ? fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 0, max: 20 }) }, { weight: 2, arbitrary: fc.constantFrom(...EDGE_NUMBERS) })
      : fc.oneof(fc.integer({ min: -3, max: 10 }), fc.constantFrom(...EDGE_NUMBERS));

  const inputArb = (type: GraphQLInputType, name: string, parent: string): fc.Arbitrary<J> => {
    if (isNonNullType(type)) {
      return fc.oneof({ weight: 30, arbitrary: inputArb(type.ofType, name, parent) }, { weight: 1, arbitrary: fc.constant(null) });
    }
    if (isListType(type)) {
      const item = inputArb(type.ofType, name, parent);
      const named = getNamedType(type);
      const huge =
        named.name === 'String' || named.name === 'ID'
          ? [{ weight: 1, arbitrary: hugeArrayJ(['k', 'sales', w.subjectIds[0] ?? 'x']) }]
          : [];
      return fc.oneof({ weight: 24, arbitrary: fc.array(item, { maxLength: 4 }) }, { weight: 2, arbitrary: item }, ...huge);
    }
    const memoKey = `${parent}.${name}:${type.toString()}`;
    const hit = memoInput.get(memoKey);
    if (hit) return hit;
    let arb: fc.Arbitrary<J>;
    if (isInputObjectType(type)) {
      if (type.name === 'CustomFieldValueInput') {
        const fields = parent.includes('StructuralEntity') ? w.entityFields : w.subjectFields;
        arb = sentValueArb(fields, { key: 'key', value: 'value', inner: 'Value' });
      } else {
        const fields = Object.values(type.getFields());
        const entries = fields.map((f) =>
          fc.oneof(
            { weight: isNonNullType(f.type) ? 30 : 3, arbitrary: inputArb(f.type, f.name, type.name).map((v) => [f.name, v] as const) },
            { weight: isNonNullType(f.type) ? 1 : 2, arbitrary: fc.constant(undefined) },
          ),
        );
        const extra = rarely(fc.tuple(keyArb(), anyJ()), 40);
        arb = fc.tuple(fc.tuple(...entries), extra).map(([es, x]) => obj(...es, x));
      }
    } else if (isEnumType(type)) {
      arb = fc.oneof(
        { weight: 8, arbitrary: fc.constantFrom(...type.getValues().map((v) => new Enum(v.name))) },
        { weight: 1, arbitrary: fc.constantFrom(new Enum('FOO'), new Enum('Ascending'), 'ASCENDING') },
      );
    } else if (isScalarType(type)) {
      const sensible: Record<string, () => fc.Arbitrary<J>> = {
        String: () => stringFor(name, parent),
        ID: () => idFor(name),
        Int: () => intFor(name),
        Float: () => fc.constantFrom(...EDGE_NUMBERS),
        Boolean: () => fc.boolean(),
        JSON: () =>
          name === 'value' && parent === 'DataPointValueInput'
            ? fc.oneof(typedValueArb('Integer'), typedValueArb('DateTime'), typedValueArb('String'))
            : name === 'options' || name.toLowerCase().includes('filter')
              ? fc.oneof(fc.constant(obj(['metric', 'steps'])), anyJ(['metric']))
              : anyJ(),
      };
      arb = fc.oneof({ weight: 12, arbitrary: (sensible[type.name] ?? (() => anyJ()))() }, { weight: 1, arbitrary: anyJ() });
    } else {
      arb = anyJ();
    }
    memoInput.set(memoKey, arb);
    return arb;
  };

  const argArb = (arg: { name: string; type: GraphQLInputType }, parent: string): fc.Arbitrary<[string, ArgValue] | undefined> => {
    const typeText = arg.type.toString();
    const declared = fc.oneof(
      { weight: 12, arbitrary: fc.constant(typeText) },
      { weight: 1, arbitrary: fc.constantFrom('String', 'JSON', 'Int!', '[String!]!', 'ID', 'Foo', `${typeText.replace(/!$/, '')}`) },
    );
    const value = inputArb(arg.type, arg.name, parent);
    const given = fc.record({ variable: fc.boolean(), type: declared, value }).map((a) => [arg.name, a] as [string, ArgValue]);
    return isNonNullType(arg.type)
      ? fc.oneof({ weight: 30, arbitrary: given }, { weight: 1, arbitrary: fc.constant(undefined) })
      : fc.option(given, { freq: 2, nil: undefined });
  };

  const leafOf = (type: GraphQLNamedType): Sel[] => {
    if (isObjectType(type) || isInterfaceType(type)) {
      const leaf = Object.values(type.getFields()).find(
        (f) => isLeafType(getNamedType(f.type)) && f.args.every((a) => !isNonNullType(a.type)),
      );
      return [{ alias: undefined, name: leaf ? leaf.name : '__typename', args: [], sel: undefined }];
    }
    return [{ alias: undefined, name: '__typename', args: [], sel: undefined }];
  };

  const fieldArb = (f: GraphQLField<unknown, unknown>, parent: string, depth: number): fc.Arbitrary<Sel> => {
    const named = getNamedType(f.type);
    const sub: fc.Arbitrary<Sel[] | undefined> = isLeafType(named)
      ? fc.constant(undefined)
      : depth >= MAX_DEPTH
        ? fc.constant(leafOf(named))
        : fc.constant(null).chain(() => selArb(named, depth + 1));
    const args = f.args.length
      ? fc.tuple(...f.args.map((a) => argArb(a, parent))).map((as) => as.filter((a): a is [string, ArgValue] => a !== undefined))
      : fc.constant([] as [string, ArgValue][]);
    return fc.record({
      alias: rarely(fc.constantFrom('a', 'b', 'x1', '__proto__', 'constructor'), 6),
      name: fc.constant(f.name),
      args,
      sel: sub,
    });
  };

  const selArb = (type: GraphQLNamedType, depth: number): fc.Arbitrary<Sel[]> => {
    const key = `${type.name}@${depth}`;
    const hit = memoSel.get(key);
    if (hit) return hit;
    let arb: fc.Arbitrary<Sel[]>;
    if (isObjectType(type)) {
      const fields = Object.values(type.getFields()).map((f) => fieldArb(f, type.name, depth));
      arb = fc.array(fc.oneof(...fields), { minLength: 1, maxLength: depth === 0 ? 2 : 3 });
    } else if (isInterfaceType(type) || isUnionType(type)) {
      const possible = schema.getPossibleTypes(type);
      arb = fc
        .array(fc.constantFrom(...possible), { minLength: 1, maxLength: 2 })
        .chain((ts) => fc.tuple(...ts.map((t) => selArb(t, depth).map((sel) => ({ on: t.name, sel }))))) as fc.Arbitrary<Sel[]>;
      arb = arb.map((s) => [{ alias: undefined, name: '__typename', args: [], sel: undefined }, ...s]);
    } else {
      arb = fc.constant(leafOf(type));
    }
    memoSel.set(key, arb);
    return arb;
  };

  const render = (kind: 'query' | 'mutation', sels: Sel[]): GraphqlOperation => {
    const defs: string[] = [];
    const vars: [string, J][] = [];
    // One field per response key in a selection set: two fields under one alias would only be a
    // validation error (that kind is generated on purpose elsewhere, rarely).
    const distinct = (sels: Sel[]) => {
      const seen = new Set<string>();
      return sels.filter((s) => {
        if ('on' in s) return true;
        const k = s.alias ?? s.name;
        if (seen.has(k)) return false;
        seen.add(k);
        return true;
      });
    };
    const renderSel = (s: Sel): string => {
      if ('on' in s) return `... on ${s.on} { ${distinct(s.sel).map(renderSel).join(' ')} }`;
      const args = s.args.map(([name, a]) => {
        if (!a.variable) return `${name}: ${toGraphqlLiteral(a.value)}`;
        const v = `v${defs.length}`;
        defs.push(`$${v}: ${a.type}`);
        vars.push([v, a.value]);
        return `${name}: $${v}`;
      });
      return `${s.alias ? `${s.alias}: ` : ''}${s.name}${args.length ? `(${args.join(', ')})` : ''}${s.sel ? ` { ${distinct(s.sel).map(renderSel).join(' ')} }` : ''}`;
    };
    sels = distinct(sels);
    const body = sels.map(renderSel).join(' ');
    const rootKeys = sels.flatMap((s) => ('on' in s ? [] : [s.alias ?? s.name]));
    return { kind, document: `${kind}${defs.length ? `(${defs.join(', ')})` : ''} { ${body} }`, variables: new Obj(vars), rootKeys };
  };

  const query = selArb(schema.getQueryType()!, 0).map((s) => render('query', s));
  const mutationType = schema.getMutationType()!;
  const mutation = fc
    .oneof(...Object.values(mutationType.getFields()).map((f) => fieldArb(f, mutationType.name, 1)))
    .map((s) => render('mutation', [s]));
  return fc.oneof({ weight: 3, arbitrary: query }, { weight: 2, arbitrary: mutation });
}

/** Documents nested thousands of levels, aliased thousands of times, too long, or not GraphQL at all. */
export const specialDocumentArb: fc.Arbitrary<string> = fc.oneof(
  fc
    .integer({ min: 1, max: 3000 })
    .map(
      (n) =>
        `query { ${'subjects { edges { node { structuralEntities { edges { node { '.repeat(Math.ceil(n / 6))}__typename${' }'.repeat(Math.ceil(n / 6) * 6)} }`,
    ),
  fc.integer({ min: 1, max: 3000 }).map((n) => `{ ${'...on Query { '.repeat(n)}__typename${' }'.repeat(n)} }`),
  fc.integer({ min: 1, max: 3000 }).map((n) => `{ subjects(structuralEntityKeys: ${'['.repeat(n)}"x"${']'.repeat(n)}) { totalCount } }`),
  fc
    .integer({ min: 1, max: 3000 })
    .map(
      (n) =>
        `mutation { upsertSubject(input: {customFieldValues: [{key: "x", value: ${'{a: '.repeat(n)}1${'}'.repeat(n)}}]}) { created } }`,
    ),
  // Aliased fan-out: half within the breadth limit (1000 selected fields), half beyond it.
  fc
    .record({
      n: fc.oneof(fc.integer({ min: 2, max: 500 }), fc.integer({ min: 500, max: 6000 })),
      f: fc.constantFrom(
        '__typename',
        'subjects { totalCount }',
        'subjects(searchTerm: "Person {i}") { totalCount }',
        'users(first: 1000) { totalCount }',
        '__schema { queryType { name } }',
        'structuralEntities(searchTerm: "s{i}") { totalCount }',
      ),
    })
    .map(({ n, f }) => `{ ${Array.from({ length: n }, (_, i) => `a${i}: ${f.replace('{i}', String(i))}`).join(' ')} }`),
  fc.integer({ min: 10_000, max: 40_000 }).map((n) => `{ ${'__typename '.repeat(n)}}`),
  fc.constantFrom(
    '{ __schema { types { name fields { name args { name } } } } }',
    '{ a: __schema { queryType { name } } b: __schema { queryType { name } } c: __schema { queryType { name } } }',
    '{ __type(name: "Subject") { name fields { name } } }',
    'fragment A on Query { ...B } fragment B on Query { ...A } { ...A }',
    'subscription { subjects { totalCount } }',
    'query A { __typename } query B { __typename }',
    '{ subjects(first: 1000) { edges { node { structuralEntities(first: 1000) { edges { node { subjects(first: 1000) { totalCount } } } } } } } }',
    '{ __typename @skip(if: $x) }',
    '{ __typename @deprecated }',
    'query($x: Int = "s") { __typename }',
    'query($x: [[[[Int]]]]) { __typename }',
    '{ node(id: "") { id } nodes(ids: []) { id } }',
    `{ nodes(ids: [${Array.from({ length: 150 }, () => '"x"').join(',')}]) { id } }`,
    '{ subjects { edges { node { dataPoints(extractKey: "steps-week") { totalCount edges { node { id items { key value valueText } } } } } } } }',
    '{ mailOutbox { pending messages(first: 5) { edges { node { id recipient status } } } } }',
    '',
    '{',
    '}',
    '{ __typename',
    '"unterminated',
    '{ "__typename" }',
    '\u0000{ __typename }',
    '{ __typename } \udc00',
    '#only a comment',
    '{ a: b: c }',
    'query { ...on Subject { id } }',
  ),
  hostileString({ maxLong: 50_000 }),
);
