import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type ApiResponse, type TestApp, createTenant, startApp, tenantConfig } from './helpers.js';

// Decisions that had no test of their own, each held here through the public surface:
// P2 (unknown query parameters, D5), P11 (tenant keys, D3), P13 (values kept on a structure type change,
// D8), P21 (strings order by their first 200 code points, D6), P23 (get by id: the first 1000 locations,
// D6, D7).

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

const ENTITY = '/api/v1/structuralEntity';
const SUBJECT = '/api/v2/subject';
const UPSERT = '/api/v2/messaging/subject';
const string = (Key: string, Value: string) => ({ Key, Value: { String: { Value } } });

function ok(r: ApiResponse, status = 200): ApiResponse {
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  return r;
}

describe('P2: unknown query parameters are ignored (D5)', () => {
  let api: ApiClient;
  let subjectId: string;
  beforeAll(async () => {
    api = await (await createTenant(app)).client();
    for (const Key of ['a', 'b', 'c']) {
      ok(await api.put(ENTITY, { Key, DisplayName: Key.toUpperCase(), StructureTypeKey: 'department' }), 201);
    }
    const created = ok(await api.post(UPSERT, { CustomFieldValues: [string('employeeNumber', 'E-1'), string('fullName', 'One')] }), 201);
    subjectId = created.body.internalId;
  });

  // P2: neither a name the route does not know (in any case, repeated, bracketed) nor an OData-style option
  // changes the answer: on a list, on the subject list (whose query schema passes extra names through,
  // for its filters), and on routes without query parameters.
  it('ignores unknown query parameters: lists and gets answer as without them', async () => {
    const unknown = 'Unknown=1&unknown=2&Foo%5Bbar%5D=x&%24filter=Key%20eq%20%27c%27&Expand=all&Expand=none';
    for (const path of [`${ENTITY}?First=2`, `${SUBJECT}?First=1`, `${ENTITY}/b`, `${SUBJECT}/${subjectId}`]) {
      const plain = ok(await api.get(path));
      const extra = ok(await api.get(`${path}${path.includes('?') ? '&' : '?'}${unknown}`));
      expect(extra.body, path).toEqual(plain.body);
    }
  });
});

describe('P11: tenant keys are 1-64 letters, digits, dots, underscores and dashes (D3)', () => {
  // P11: the longest key with every allowed kind of character is applied, and travels in the token
  // request's form field and back in the token's claim (createTenant asks the token endpoint); any
  // other key (one starting with a dot, dash or underscore too) is refused by the file's validation, naming
  // the key's path alone.
  it('applies a 64-character key of letters, digits, dots, underscores and dashes, and refuses any other', async () => {
    const key = `Ab9.x_y-${'k'.repeat(56)}`;
    expect(key).toHaveLength(64);
    ok(await (await (await createTenant(app, { key })).client()).get(ENTITY));

    for (const bad of ['', 'k'.repeat(65), 'acme corp', 'acme/corp', 'acme:corp', 'acmé', '.acme', '-acme', '_acme']) {
      const err = await createTenant(app, { key: bad }).then(
        () => undefined,
        (e: unknown) => e,
      );
      // A TenantConfigError's problems (undefined: the file was accepted).
      const problems = (err as { problems?: { path: string }[] } | undefined)?.problems;
      expect(
        problems?.map((p) => p.path),
        `${JSON.stringify(bad)}: ${String(err)}`,
      ).toEqual(['tenants[0].key']);
    }
  });
});

describe('P13: a structure type change keeps the values of fields of the same key and data type (D8)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    const department = tenantConfig().structureTypes[1]!;
    const team = {
      key: 'team',
      name: 'Team',
      subjectAssignable: true,
      customFields: [
        { key: 'costCenter', name: 'Cost centre', dataType: 'String' }, // same key and data type
        { key: 'headcount', name: 'Headcount', dataType: 'String' }, // same key, another data type
        { key: 'motto', name: 'Motto', dataType: 'String' },
      ],
    };
    api = await (await createTenant(app, { structureTypes: [department, team] })).client();
  });

  const valuesOf = (r: ApiResponse) =>
    Object.fromEntries((r.body.CustomFieldValues as any[]).map((v) => [v.Field.Key, v.Value.ValueText as string]));

  // P13: costCenter survives; headcount (Integer → String) and budget (absent from the new type) are
  // dropped, not hidden: changing back does not bring them back.
  it('keeps costCenter, drops headcount (another data type) and budget (not in the new type)', async () => {
    ok(
      await api.put(ENTITY, {
        Key: 'ops',
        DisplayName: 'Operations',
        StructureTypeKey: 'department',
        CustomFieldValues: [
          string('costCenter', 'CC-7'),
          { Key: 'headcount', Value: { Integer: { Value: 12 } } },
          { Key: 'budget', Value: { Decimal: { Value: 1.5 } } },
        ],
      }),
      201,
    );
    const retyped = ok(await api.put(ENTITY, { Key: 'ops', StructureTypeKey: 'team' }));
    expect(retyped.body.StructureType.Key).toBe('team');
    expect(valuesOf(retyped)).toEqual({ costCenter: 'CC-7' });
    expect(valuesOf(ok(await api.get(`${ENTITY}/ops`)))).toEqual({ costCenter: 'CC-7' });

    const back = ok(await api.put(ENTITY, { Key: 'ops', StructureTypeKey: 'department' }));
    expect(valuesOf(back)).toEqual({ costCenter: 'CC-7' });
  });

  // P13: values sent with the change are those of the new type, on top of the kept ones.
  it('applies values sent with the change to the new type', async () => {
    ok(
      await api.put(ENTITY, {
        Key: 'hr',
        DisplayName: 'HR',
        StructureTypeKey: 'department',
        CustomFieldValues: [string('costCenter', 'CC-9')],
      }),
      201,
    );
    const r = ok(await api.put(ENTITY, { Key: 'hr', StructureTypeKey: 'team', CustomFieldValues: [string('headcount', 'a few')] }));
    expect(valuesOf(r)).toEqual({ costCenter: 'CC-9', headcount: 'a few' });
  });
});

describe('P21: strings order by their first 200 code points, then by id (D6)', () => {
  let api: ApiClient;
  let low: string; // the smaller id of two subjects
  let high: string;
  beforeAll(async () => {
    api = await (await createTenant(app)).client();
    const ids: string[] = [];
    for (const n of ['S-1', 'S-2']) {
      ids.push(
        ok(await api.post(UPSERT, { CustomFieldValues: [string('employeeNumber', n), string('fullName', n)] }), 201).body.internalId,
      );
    }
    [low, high] = ids.sort() as [string, string];
  });

  /** Gives the smaller id the email `forLow` and the larger one `forHigh`, and lists by email both ways. */
  async function orderWith(forLow: string, forHigh: string) {
    for (const [id, email] of [
      [low, forLow],
      [high, forHigh],
    ] as const) {
      const r = ok(await api.patch(`${SUBJECT}/${id}`, { CustomFields: [string('email', email)] }));
      expect(r.body.CustomFieldValues.find((v: any) => v.Field.Key === 'email').Value.ValueText).toBe(email);
    }
    const ids = async (dir: string) =>
      (ok(await api.get(`${SUBJECT}?OrderBy=email&OrderDirection=${dir}`)).body.Edges as any[]).map((e) => e.Node.Id as string);
    return { ascending: await ids('Ascending'), descending: await ids('Descending') };
  }

  // Astral characters are two UTF-16 code units each: a cut at 200 code units would fall at 100 of them.
  const smile = '\u{1F600}';

  // P21: equal in the first 200 code points, the larger text on the smaller id: ordered by id.
  it('orders strings equal in their first 200 code points by id', async () => {
    const prefix = smile.repeat(200);
    expect(await orderWith(`${prefix}b`, `${prefix}a`)).toEqual({ ascending: [low, high], descending: [high, low] });
  });

  // P21: code points, not code units: texts differing at code point 151 (UTF-16 unit 301) order by text.
  it('counts code points, not UTF-16 code units: a difference at code point 151 orders by the text', async () => {
    const prefix = smile.repeat(150);
    expect(await orderWith(`${prefix}b`, `${prefix}a`)).toEqual({ ascending: [high, low], descending: [low, high] });
  });
});

describe('P23: get by id answers the first 1000 locations by Key; GraphQL pages through all (D6, D7)', () => {
  const LOCATIONS = 1001;
  const keyOf = (i: number) => `loc-${String(i).padStart(4, '0')}`;
  const allKeys = Array.from({ length: LOCATIONS }, (_, i) => keyOf(i));
  let api: ApiClient;
  let id: string;
  beforeAll(async () => {
    // Created in reverse key order (ids run opposite to keys), so an order by id would show.
    const structuralEntities = [...allKeys].reverse().map((key) => ({ key, displayName: key, structureTypeKey: 'department' }));
    api = await (await createTenant(app, { structuralEntities })).client();
    // A request lists at most 1000 keys: the smallest key is added on its own, last.
    const created = await api.post(UPSERT, {
      CustomFieldValues: [string('employeeNumber', 'E-1'), string('fullName', 'Everywhere')],
      StructuralEntityKeys: allKeys.slice(1),
    });
    id = ok(created, 201).body.internalId;
    ok(await api.put(`/api/v1/subject/${id}/structuralEntities`, { Keys: [keyOf(0)] }));
  });

  // P23: 1001 locations; the answer holds the 1000 first by Key (loc-1000, the last, is left out).
  it('answers the first 1000 locations of 1001 by Key', async () => {
    const r = ok(await api.get(`${SUBJECT}/${id}`));
    expect((r.body.StructuralEntities as any[]).map((e) => e.Key)).toEqual(allKeys.slice(0, 1000));
  });

  // P23: the subject's structuralEntities connection reaches the 1001st.
  it('pages through all 1001 locations with GraphQL', async () => {
    const query = `query($id: ID!, $after: String) {
      subject(id: $id) { structuralEntities(first: 1000, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { node { key } } } }
    }`;
    const first = ok(await api.gql(query, { id }));
    expect(first.body.errors).toBeUndefined();
    const page1 = first.body.data.subject.structuralEntities;
    expect(page1.totalCount).toBe(LOCATIONS);
    expect(page1.pageInfo.hasNextPage).toBe(true);
    const second = ok(await api.gql(query, { id, after: page1.pageInfo.endCursor }));
    expect(second.body.errors).toBeUndefined();
    const page2 = second.body.data.subject.structuralEntities;
    expect([...page1.edges, ...page2.edges].map((e: any) => e.node.key)).toEqual(allKeys);
    expect(page2.pageInfo.hasNextPage).toBe(false);
  });
});
