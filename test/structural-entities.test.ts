import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type ApiResponse, type TestApp, createTenant, startApp, expectValidation } from './helpers.js';

// Structural entities through HTTP only: REST (PUT/GET /api/v1/structuralEntity) and POST /graphql.
// D8 is the spec; D5 (errors, casing), D2 (tenancy), D11 (GraphQL) where they touch entities.

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

const PATH = '/api/v1/structuralEntity';

/** A fresh tenant (random key) and a client with every permission. */
async function freshClient(overrides: Record<string, unknown> = {}): Promise<ApiClient> {
  return (await createTenant(app, overrides)).client();
}

const put = (api: ApiClient, body: unknown) => api.put(PATH, body);
const get = (api: ApiClient, key: string) => api.get(`${PATH}/${encodeURIComponent(key)}`);
const list = (api: ApiClient, query = '') => api.get(`${PATH}${query ? `?${query}` : ''}`);
const keysOf = (r: ApiResponse) => (r.body.Edges as any[]).map((e) => e.Node.Key);

/** Creates entities one after another (parents first), asserting each answers 201. */
async function createAll(api: ApiClient, bodies: Record<string, unknown>[]) {
  for (const b of bodies) {
    const r = await put(api, b);
    expect(r.status, `${JSON.stringify(b)} → ${JSON.stringify(r.body)}`).toBe(201);
  }
}

/** The custom field value of `key` in a REST entity body, or undefined when left out. */
const cfv = (entity: any, key: string) => (entity.CustomFieldValues as any[]).find((v) => v.Field.Key === key);

const DEPARTMENT_FIELDS = [
  { Name: 'Cost center', Key: 'costCenter', Type: 'Text', Required: false },
  { Name: 'Headcount', Key: 'headcount', Type: 'Integer', Required: false },
  { Name: 'Opened', Key: 'opened', Type: 'Date', Required: false },
  { Name: 'Budget', Key: 'budget', Type: 'Decimal', Required: false },
  { Name: 'Active', Key: 'active', Type: 'Boolean', Required: false },
  { Name: 'Manager', Key: 'manager', Type: 'UserIdentifier', Required: false },
];
const DEPARTMENT = { Name: 'Department', Key: 'department', SubjectAssignable: true, CustomFields: DEPARTMENT_FIELDS };
const COMPANY = { Name: 'Company', Key: 'company', SubjectAssignable: false, CustomFields: [] };

describe('upsert: create, update, response body (D5, D8)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await freshClient();
  });

  // D5: creating upserts answer 201, updating ones 200, both with the documented body. D8: the shape.
  it('creates with 201 and the documented body', async () => {
    const r = await put(api, {
      Key: 'hq',
      DisplayName: 'Head office',
      StructureTypeKey: 'department',
      CustomFieldValues: [{ Key: 'costCenter', Value: { String: { Value: 'CC-1' } } }],
    });
    expect(r.status).toBe(201);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(r.body).toEqual({
      Key: 'hq',
      DisplayName: 'Head office',
      ParentKey: null,
      Depth: 1,
      StructureType: DEPARTMENT,
      CustomFieldValues: [
        {
          Field: { Name: 'Cost center', Key: 'costCenter', Type: 'Text', Required: false },
          Value: { $type: 'StringValue', DataType: 'String', Value: 'CC-1', ValueText: 'CC-1' },
        },
      ],
    });
  });

  it('updates with 200 and the documented body, which GET by key returns too', async () => {
    await createAll(api, [{ Key: 'upd', DisplayName: 'Before', StructureTypeKey: 'company' }]);
    const r = await put(api, { Key: 'upd', DisplayName: 'After' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ Key: 'upd', DisplayName: 'After', ParentKey: null, Depth: 1, StructureType: COMPANY, CustomFieldValues: [] });
    const g = await get(api, 'upd');
    expect(g.status).toBe(200);
    expect(g.body).toEqual(r.body);
  });

  it('a second identical PUT updates (200), it does not create again', async () => {
    const body = { Key: 'twice', DisplayName: 'Twice', StructureTypeKey: 'company' };
    expect((await put(api, body)).status).toBe(201);
    const again = await put(api, body);
    expect(again.status).toBe(200);
    expect(again.body.Key).toBe('twice');
    expect(keysOf(await list(api, 'First=1000')).filter((k) => k === 'twice')).toEqual(['twice']);
  });

  it('changes the structure type on update, keeping DisplayName when absent', async () => {
    await createAll(api, [{ Key: 'retype', DisplayName: 'Retype me', StructureTypeKey: 'company' }]);
    const r = await put(api, { Key: 'retype', StructureTypeKey: 'department' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ DisplayName: 'Retype me', StructureType: DEPARTMENT });
  });

  // D2: keys are case-sensitive; an unknown key is 404.
  it('GET by key: 200 for a known key, 404 problem+json for an unknown one; keys are case-sensitive (D2)', async () => {
    await createAll(api, [{ Key: 'Case', DisplayName: 'Case', StructureTypeKey: 'company' }]);
    expect((await get(api, 'Case')).status).toBe(200);
    for (const key of ['nope', 'case', 'CASE']) {
      const r = await get(api, key);
      expect(r.status).toBe(404);
      expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(r.body).toMatchObject({ status: 404 });
    }
  });

  // D8: Key, DisplayName and StructureTypeKey are required on create. D5: nothing is written when a request fails.
  it.each([
    ['Key', { DisplayName: 'No key', StructureTypeKey: 'company' }],
    ['Key', { Key: '', DisplayName: 'Empty key', StructureTypeKey: 'company' }],
    ['DisplayName', { Key: 'no-name', StructureTypeKey: 'company' }],
    ['DisplayName', { Key: 'null-name', DisplayName: null, StructureTypeKey: 'company' }],
    ['StructureTypeKey', { Key: 'no-type', DisplayName: 'No type' }],
  ])('on create %s is required: 400 naming it, nothing created (%j)', async (location, body) => {
    const r = await put(api, body);
    expectValidation(r, location);
    if (typeof (body as { Key?: unknown }).Key === 'string' && (body as { Key: string }).Key !== '') {
      expect((await get(api, (body as { Key: string }).Key)).status).toBe(404);
    }
  });

  it('names DisplayName and StructureTypeKey together when both are missing on create', async () => {
    const r = await put(api, { Key: 'bare' });
    expectValidation(r, 'DisplayName', 'StructureTypeKey');
    expect((await get(api, 'bare')).status).toBe(404);
  });

  // D8: unknown structure type or parent: 400.
  it('unknown structure type: 400 on create (nothing created) and on update (nothing changed)', async () => {
    expectValidation(await put(api, { Key: 'ghost-type', DisplayName: 'Ghost', StructureTypeKey: 'nonexistent' }), 'StructureTypeKey');
    expect((await get(api, 'ghost-type')).status).toBe(404);

    await createAll(api, [{ Key: 'typed', DisplayName: 'Typed', StructureTypeKey: 'company' }]);
    const before = (await get(api, 'typed')).body;
    expectValidation(await put(api, { Key: 'typed', DisplayName: 'Renamed', StructureTypeKey: 'Company' }), 'StructureTypeKey');
    expect((await get(api, 'typed')).body).toEqual(before);
  });

  it('unknown parent: 400 naming ParentKey, nothing created or changed', async () => {
    expectValidation(
      await put(api, { Key: 'orphan', DisplayName: 'Orphan', StructureTypeKey: 'company', ParentKey: 'missing' }),
      'ParentKey',
    );
    expect((await get(api, 'orphan')).status).toBe(404);

    await createAll(api, [{ Key: 'stay', DisplayName: 'Stay', StructureTypeKey: 'company' }]);
    const before = (await get(api, 'stay')).body;
    expectValidation(await put(api, { Key: 'stay', DisplayName: 'Moved?', ParentKey: 'missing' }), 'ParentKey');
    expect((await get(api, 'stay')).body).toEqual(before);
  });

  // D5: request body property names are matched case-insensitively.
  it('body property names are matched case-insensitively (D5)', async () => {
    const created = await put(api, {
      key: 'ci-body',
      DISPLAYNAME: 'Lower and upper',
      structuretypekey: 'department',
      customfieldvalues: [{ KEY: 'headcount', vAlUe: { Integer: { Value: 3 } } }],
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ Key: 'ci-body', DisplayName: 'Lower and upper', StructureType: { Key: 'department' } });
    expect(cfv(created.body, 'headcount').Value).toEqual({ $type: 'IntegerValue', DataType: 'Integer', Value: 3, ValueText: '3' });

    const updated = await put(api, { KEY: 'ci-body', displayName: 'Renamed', PARENTKEY: 'hq' });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ Key: 'ci-body', DisplayName: 'Renamed', ParentKey: 'hq', Depth: 2 });
  });

  it('a body that is not JSON is 400, a wrong content type 415, and neither writes', async () => {
    const notJson = await api.request('PUT', PATH, { raw: '{"Key": "broken",', headers: { 'content-type': 'application/json' } });
    expect(notJson.status).toBe(400);
    const text = await api.request('PUT', PATH, {
      raw: JSON.stringify({ Key: 'as-text', DisplayName: 'x', StructureTypeKey: 'company' }),
      headers: { 'content-type': 'text/plain' },
    });
    expect(text.status).toBe(415);
    expect((await get(api, 'as-text')).status).toBe(404);
  });
});

describe('hierarchy: depth, moves and cycles (D8)', () => {
  let api: ApiClient;
  const depthOf = async (key: string) => {
    const r = await get(api, key);
    expect(r.status).toBe(200);
    return { ParentKey: r.body.ParentKey, Depth: r.body.Depth };
  };

  beforeAll(async () => {
    api = await freshClient();
    // a ─ b ─ c ─ d ; x ─ y ; z
    await createAll(api, [
      { Key: 'a', DisplayName: 'A', StructureTypeKey: 'company' },
      { Key: 'b', DisplayName: 'B', StructureTypeKey: 'department', ParentKey: 'a' },
      { Key: 'c', DisplayName: 'C', StructureTypeKey: 'department', ParentKey: 'b' },
      { Key: 'd', DisplayName: 'D', StructureTypeKey: 'department', ParentKey: 'c' },
      { Key: 'x', DisplayName: 'X', StructureTypeKey: 'company', ParentKey: null },
      { Key: 'y', DisplayName: 'Y', StructureTypeKey: 'department', ParentKey: 'x' },
      { Key: 'z', DisplayName: 'Z', StructureTypeKey: 'company' },
    ]);
  });

  it("Depth is 1 at the top and the parent's + 1 below", async () => {
    expect(await depthOf('a')).toEqual({ ParentKey: null, Depth: 1 });
    expect(await depthOf('b')).toEqual({ ParentKey: 'a', Depth: 2 });
    expect(await depthOf('c')).toEqual({ ParentKey: 'b', Depth: 3 });
    expect(await depthOf('d')).toEqual({ ParentKey: 'c', Depth: 4 });
    expect(await depthOf('y')).toEqual({ ParentKey: 'x', Depth: 2 });
  });

  // D8: a parent that would make the entity its own ancestor: 400.
  it('a parent that is the entity itself: 400, nothing written', async () => {
    const before = (await get(api, 'b')).body;
    expectValidation(await put(api, { Key: 'b', DisplayName: 'B changed', ParentKey: 'b' }), 'ParentKey');
    expect((await get(api, 'b')).body).toEqual(before);
  });

  it('a parent that is a descendant (child or deeper): 400, nothing written', async () => {
    const before = await Promise.all(['a', 'b', 'c', 'd'].map(async (k) => (await get(api, k)).body));
    expectValidation(await put(api, { Key: 'a', ParentKey: 'b' }), 'ParentKey');
    expectValidation(await put(api, { Key: 'a', DisplayName: 'A changed', ParentKey: 'd' }), 'ParentKey');
    expectValidation(await put(api, { Key: 'b', ParentKey: 'd' }), 'ParentKey');
    const after = await Promise.all(['a', 'b', 'c', 'd'].map(async (k) => (await get(api, k)).body));
    expect(after).toEqual(before);
  });

  // D8: on update a property left out keeps its value.
  it('ParentKey absent keeps the parent; DisplayName and StructureTypeKey absent keep theirs', async () => {
    const r = await put(api, { Key: 'c', CustomFieldValues: [{ Key: 'costCenter', Value: { String: { Value: 'kept-parent' } } }] });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ Key: 'c', DisplayName: 'C', ParentKey: 'b', Depth: 3, StructureType: { Key: 'department' } });
    expect(await depthOf('d')).toEqual({ ParentKey: 'c', Depth: 4 });
  });

  // D8: moving an entity updates the depth of its whole subtree.
  it('moving a subtree of three levels updates the Depth of every descendant', async () => {
    // b (with c and d below it) moves from under a (depth 2) to under y (depth 2): b 3, c 4, d 5.
    const r = await put(api, { Key: 'b', ParentKey: 'y' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ Key: 'b', DisplayName: 'B', ParentKey: 'y', Depth: 3 });
    expect(await depthOf('b')).toEqual({ ParentKey: 'y', Depth: 3 });
    expect(await depthOf('c')).toEqual({ ParentKey: 'b', Depth: 4 });
    expect(await depthOf('d')).toEqual({ ParentKey: 'c', Depth: 5 });
    // Untouched elsewhere.
    expect(await depthOf('a')).toEqual({ ParentKey: null, Depth: 1 });
    expect(await depthOf('y')).toEqual({ ParentKey: 'x', Depth: 2 });
    expect(keysOf(await list(api, 'ParentKey=a'))).toEqual([]);
    expect(keysOf(await list(api, 'ParentKey=y'))).toEqual(['b']);
    expect(keysOf(await list(api, 'Depth=5'))).toEqual(['d']);

    // The new ancestors are ancestors now: y and x cannot move below b's subtree.
    expectValidation(await put(api, { Key: 'x', ParentKey: 'd' }), 'ParentKey');
  });

  it("moving the subtree's ancestor moves the whole chain", async () => {
    // x ─ y ─ b ─ c ─ d: x moves under z, so everything below deepens by one.
    expect((await put(api, { Key: 'x', ParentKey: 'z' })).status).toBe(200);
    expect(await depthOf('x')).toEqual({ ParentKey: 'z', Depth: 2 });
    expect(await depthOf('y')).toEqual({ ParentKey: 'x', Depth: 3 });
    expect(await depthOf('b')).toEqual({ ParentKey: 'y', Depth: 4 });
    expect(await depthOf('c')).toEqual({ ParentKey: 'b', Depth: 5 });
    expect(await depthOf('d')).toEqual({ ParentKey: 'c', Depth: 6 });
  });

  // D8: "ParentKey": null = moved to the top.
  it('"ParentKey": null moves the entity (and its subtree) to the top', async () => {
    const r = await put(api, { Key: 'b', ParentKey: null });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ Key: 'b', ParentKey: null, Depth: 1, DisplayName: 'B' });
    expect(await depthOf('c')).toEqual({ ParentKey: 'b', Depth: 2 });
    expect(await depthOf('d')).toEqual({ ParentKey: 'c', Depth: 3 });
    expect(keysOf(await list(api, 'Depth=1'))).toEqual(['a', 'b', 'z']);
    // null again on a top entity: still at the top, nothing else changes.
    const again = await put(api, { Key: 'b', ParentKey: null });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ ParentKey: null, Depth: 1 });
  });

  it('creating under a parent gives parent depth + 1', async () => {
    const r = await put(api, { Key: 'e', DisplayName: 'E', StructureTypeKey: 'department', ParentKey: 'd' });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ ParentKey: 'd', Depth: 4 });
  });

  it('GraphQL parent and children agree with the moved tree (D11)', async () => {
    const r = await api.gql<any>(`{
      structuralEntity(key: "c") { key depth parentKey parent { key depth } children { totalCount edges { node { key depth parentKey } } } }
    }`);
    expect(r.status).toBe(200);
    expect(r.body.errors).toBeUndefined();
    expect(r.body.data.structuralEntity).toEqual({
      key: 'c',
      depth: 2,
      parentKey: 'b',
      parent: { key: 'b', depth: 1 },
      children: { totalCount: 1, edges: [{ node: { key: 'd', depth: 3, parentKey: 'c' } }] },
    });
  });
});

describe('custom field values (D5, D7, D8)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await freshClient({
      users: [
        { id: 'u-1', displayName: 'Ann Smith', email: 'ann@example.org', active: true },
        { id: 'u-2', displayName: 'Bob Jones', email: 'bob@example.org', active: true },
      ],
    });
  });

  const ALL = [
    { Key: 'costCenter', Value: { String: { Value: 'CC-42' } } },
    { Key: 'headcount', Value: { Integer: { Value: 42 } } },
    { Key: 'opened', Value: { Date: { Value: '2024-05-01' } } },
    { Key: 'budget', Value: { Decimal: { Value: 3.5 } } },
    { Key: 'active', Value: { Boolean: { Value: false } } },
    { Key: 'manager', Value: { UserIdentifier: { Value: 'u-1' } } },
  ];

  // D8: {Field: {Name, Key, Type, Required}, Value: {$type, DataType, Value, ValueText}}; D7: canonical ValueText.
  it('stores and returns every data type with $type, DataType, the typed Value and ValueText', async () => {
    const r = await put(api, { Key: 'typed', DisplayName: 'Typed', StructureTypeKey: 'department', CustomFieldValues: ALL });
    expect(r.status).toBe(201);
    const expected = {
      costCenter: { $type: 'StringValue', DataType: 'String', Value: 'CC-42', ValueText: 'CC-42' },
      headcount: { $type: 'IntegerValue', DataType: 'Integer', Value: 42, ValueText: '42' },
      opened: { $type: 'DateValue', DataType: 'Date', Value: '2024-05-01', ValueText: '2024-05-01' },
      budget: { $type: 'DecimalValue', DataType: 'Decimal', Value: 3.5, ValueText: '3.5' },
      active: { $type: 'BooleanValue', DataType: 'Boolean', Value: false, ValueText: 'false' },
      manager: { $type: 'UserIdentifierValue', DataType: 'UserIdentifier', Value: 'u-1', ValueText: 'u-1' },
    };
    for (const body of [r.body, (await get(api, 'typed')).body]) {
      expect(body.CustomFieldValues).toHaveLength(6);
      for (const [key, value] of Object.entries(expected)) {
        const field = DEPARTMENT_FIELDS.find((f) => f.Key === key);
        expect(cfv(body, key), key).toEqual({ Field: field, Value: value });
      }
    }
  });

  // D8: CustomFieldValues sets the fields it lists and keeps the others.
  it('CustomFieldValues on update sets the listed fields and keeps the others', async () => {
    await createAll(api, [{ Key: 'partial', DisplayName: 'Partial', StructureTypeKey: 'department', CustomFieldValues: ALL }]);
    const r = await put(api, {
      Key: 'partial',
      CustomFieldValues: [
        { Key: 'headcount', Value: { Integer: { Value: 43 } } },
        { Key: 'manager', Value: { UserIdentifier: { Value: 'u-2' } } },
      ],
    });
    expect(r.status).toBe(200);
    expect(cfv(r.body, 'headcount').Value.Value).toBe(43);
    expect(cfv(r.body, 'manager').Value.Value).toBe('u-2');
    expect(cfv(r.body, 'costCenter').Value.Value).toBe('CC-42');
    expect(cfv(r.body, 'opened').Value.Value).toBe('2024-05-01');
    expect(cfv(r.body, 'budget').Value.Value).toBe(3.5);
    expect(cfv(r.body, 'active').Value.Value).toBe(false);
    // CustomFieldValues absent: every value kept.
    const kept = await put(api, { Key: 'partial', DisplayName: 'Partial 2' });
    expect(kept.status).toBe(200);
    expect(kept.body.CustomFieldValues).toEqual(r.body.CustomFieldValues);
  });

  // D8: a field's value null clears it.
  it.each([
    ['Value: null', null],
    ['{String: null}', { String: null }],
    ['{String: {Value: null}}', { String: { Value: null } }],
  ])('a null value clears the field (%s), the others stay', async (_label, value) => {
    const key = `clear-${Math.random().toString(36).slice(2, 8)}`;
    await createAll(api, [{ Key: key, DisplayName: 'Clear', StructureTypeKey: 'department', CustomFieldValues: ALL }]);
    const r = await put(api, { Key: key, CustomFieldValues: [{ Key: 'costCenter', Value: value }] });
    expect(r.status).toBe(200);
    expect(cfv(r.body, 'costCenter')).toBeUndefined();
    expect(r.body.CustomFieldValues).toHaveLength(5);
    expect(cfv((await get(api, key)).body, 'costCenter')).toBeUndefined();
  });

  // D5: data type names inside a sent value are matched case-insensitively.
  it('data type names and the Value property are matched case-insensitively (D5)', async () => {
    const r = await put(api, {
      Key: 'ci-types',
      DisplayName: 'CI types',
      StructureTypeKey: 'department',
      CustomFieldValues: [
        { Key: 'costCenter', Value: { string: { value: 'lower' } } },
        { Key: 'headcount', Value: { INTEGER: { VALUE: 7 } } },
        { Key: 'opened', Value: { dAtE: { Value: '2023-12-31' } } },
        { Key: 'budget', Value: { decimal: { value: 10.25 } } },
        { Key: 'active', Value: { boolean: { value: true } } },
        { Key: 'manager', Value: { useridentifier: { value: 'u-2' } } },
      ],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(cfv(r.body, 'costCenter').Value).toEqual({ $type: 'StringValue', DataType: 'String', Value: 'lower', ValueText: 'lower' });
    expect(cfv(r.body, 'headcount').Value).toEqual({ $type: 'IntegerValue', DataType: 'Integer', Value: 7, ValueText: '7' });
    expect(cfv(r.body, 'opened').Value.Value).toBe('2023-12-31');
    expect(cfv(r.body, 'budget').Value).toEqual({ $type: 'DecimalValue', DataType: 'Decimal', Value: 10.25, ValueText: '10.25' });
    expect(cfv(r.body, 'active').Value).toEqual({ $type: 'BooleanValue', DataType: 'Boolean', Value: true, ValueText: 'true' });
    expect(cfv(r.body, 'manager').Value.Value).toBe('u-2');
  });

  // D7: a UserIdentifier that names no user of the tenant: 400.
  it('a UserIdentifier naming no user of the tenant: 400 at its location, nothing written', async () => {
    await createAll(api, [{ Key: 'managed', DisplayName: 'Managed', StructureTypeKey: 'department', CustomFieldValues: ALL }]);
    const before = (await get(api, 'managed')).body;
    const r = await put(api, {
      Key: 'managed',
      DisplayName: 'Managed changed',
      CustomFieldValues: [
        { Key: 'headcount', Value: { Integer: { Value: 99 } } },
        { Key: 'manager', Value: { UserIdentifier: { Value: 'u-404' } } },
      ],
    });
    expectValidation(r, 'CustomFieldValues[1].Value.UserIdentifier.Value');
    expect((await get(api, 'managed')).body).toEqual(before);
    // On create too.
    expectValidation(
      await put(api, {
        Key: 'managed-new',
        DisplayName: 'x',
        StructureTypeKey: 'department',
        CustomFieldValues: [{ Key: 'manager', Value: { UserIdentifier: { Value: 'u-404' } } }],
      }),
      'CustomFieldValues[0].Value.UserIdentifier.Value',
    );
    expect((await get(api, 'managed-new')).status).toBe(404);
  });

  it('a user of another tenant is unknown here (D2)', async () => {
    const other = await freshClient({ users: [{ id: 'foreign-user', displayName: 'Foreign', email: 'f@example.org', active: true }] });
    expect(other).toBeDefined();
    expectValidation(
      await put(api, {
        Key: 'foreign-manager',
        DisplayName: 'x',
        StructureTypeKey: 'department',
        CustomFieldValues: [{ Key: 'manager', Value: { UserIdentifier: { Value: 'foreign-user' } } }],
      }),
      'CustomFieldValues[0].Value.UserIdentifier.Value',
    );
  });

  const BAD: [string, unknown, string][] = [
    ['an Integer sent as a string', { Key: 'headcount', Value: { Integer: { Value: '5' } } }, 'CustomFieldValues[1].Value.Integer.Value'],
    ['an Integer with a fraction', { Key: 'headcount', Value: { Integer: { Value: 1.5 } } }, 'CustomFieldValues[1].Value.Integer.Value'],
    [
      'an Integer outside 32 bits',
      { Key: 'headcount', Value: { Integer: { Value: 2147483648 } } },
      'CustomFieldValues[1].Value.Integer.Value',
    ],
    ['an impossible Date', { Key: 'opened', Value: { Date: { Value: '2024-02-30' } } }, 'CustomFieldValues[1].Value.Date.Value'],
    ['a Date in another format', { Key: 'opened', Value: { Date: { Value: '01/05/2024' } } }, 'CustomFieldValues[1].Value.Date.Value'],
    ['a Decimal sent as text', { Key: 'budget', Value: { Decimal: { Value: 'abc' } } }, 'CustomFieldValues[1].Value.Decimal.Value'],
    ['a Boolean sent as text', { Key: 'active', Value: { Boolean: { Value: 'yes' } } }, 'CustomFieldValues[1].Value.Boolean.Value'],
    ['a String sent as a number', { Key: 'costCenter', Value: { String: { Value: 5 } } }, 'CustomFieldValues[1].Value.String.Value'],
    [
      'an empty UserIdentifier',
      { Key: 'manager', Value: { UserIdentifier: { Value: '' } } },
      'CustomFieldValues[1].Value.UserIdentifier.Value',
    ],
    ["a data type other than the field's", { Key: 'headcount', Value: { String: { Value: '5' } } }, 'CustomFieldValues[1].Value'],
    ['a data type name outside the eight', { Key: 'headcount', Value: { Number: { Value: 5 } } }, 'CustomFieldValues[1].Value'],
    [
      'two data type properties',
      { Key: 'headcount', Value: { Integer: { Value: 5 }, Decimal: { Value: 5 } } },
      'CustomFieldValues[1].Value',
    ],
    ['a bare value instead of an object', { Key: 'headcount', Value: 5 }, 'CustomFieldValues[1].Value'],
    ['an array for a single-value field', { Key: 'headcount', Value: [{ Integer: { Value: 5 } }] }, 'CustomFieldValues[1].Value'],
    ['a missing Value property', { Key: 'headcount', Value: { Integer: {} } }, 'CustomFieldValues[1].Value.Integer'],
    ['an unknown field key', { Key: 'noSuchField', Value: { String: { Value: 'x' } } }, 'CustomFieldValues[1].Key'],
    [
      'a field key in another casing (keys are case-sensitive)',
      { Key: 'HeadCount', Value: { Integer: { Value: 5 } } },
      'CustomFieldValues[1].Key',
    ],
  ];

  // D5/D7: bad input is 400 naming the JSON location (contract casing); nothing is written.
  it.each(BAD)('%s: 400 at the JSON location, nothing written (on update and on create)', async (_label, item, location) => {
    const key = `bad-${Math.random().toString(36).slice(2, 8)}`;
    await createAll(api, [{ Key: key, DisplayName: 'Bad values', StructureTypeKey: 'department', CustomFieldValues: ALL }]);
    const before = (await get(api, key)).body;
    // A valid change next to the bad one, and a new display name: none of it may be written.
    const valid =
      (item as { Key: string }).Key === 'budget'
        ? { Key: 'headcount', Value: { Integer: { Value: 1 } } }
        : { Key: 'budget', Value: { Decimal: { Value: 9.75 } } };
    const r = await put(api, { Key: key, DisplayName: 'Changed', CustomFieldValues: [valid, item] });
    expectValidation(r, location);
    expect((await get(api, key)).body).toEqual(before);

    const fresh = `${key}-new`;
    expectValidation(
      await put(api, { Key: fresh, DisplayName: 'New', StructureTypeKey: 'department', CustomFieldValues: [valid, item] }),
      location,
    );
    expect((await get(api, fresh)).status).toBe(404);
  });

  it('reports every bad value of one request, each at its own location', async () => {
    const r = await put(api, {
      Key: 'many-bad',
      DisplayName: 'Many bad',
      StructureTypeKey: 'department',
      CustomFieldValues: [
        { Key: 'headcount', Value: { Integer: { Value: 'x' } } },
        { Key: 'costCenter', Value: { String: { Value: 'fine' } } },
        { Key: 'opened', Value: { Date: { Value: 'yesterday' } } },
      ],
    });
    expectValidation(r, 'CustomFieldValues[0].Value.Integer.Value', 'CustomFieldValues[2].Value.Date.Value');
    expect(Object.keys(r.body.errors)).not.toContain('CustomFieldValues[1].Value.String.Value');
    expect((await get(api, 'many-bad')).status).toBe(404);
  });

  it('a custom field value for an entity whose type has no such field: 400', async () => {
    expectValidation(
      await put(api, {
        Key: 'co',
        DisplayName: 'Company',
        StructureTypeKey: 'company',
        CustomFieldValues: [{ Key: 'headcount', Value: { Integer: { Value: 1 } } }],
      }),
      'CustomFieldValues[0].Key',
    );
    expect((await get(api, 'co')).status).toBe(404);
  });

  // P12: required custom fields are enforced on create and type change; clearing one is 400.
  it("required custom fields: needed on create, cannot be cleared (D8 with D7's rule)", async () => {
    const req = await freshClient({
      structureTypes: [
        {
          key: 'site',
          name: 'Site',
          subjectAssignable: true,
          customFields: [{ key: 'code', name: 'Code', dataType: 'String', type: 'Text', required: true }],
        },
      ],
    });
    expectValidation(await put(req, { Key: 's1', DisplayName: 'Site 1', StructureTypeKey: 'site' }), 'CustomFieldValues');
    expect((await get(req, 's1')).status).toBe(404);
    const ok = await put(req, {
      Key: 's1',
      DisplayName: 'Site 1',
      StructureTypeKey: 'site',
      CustomFieldValues: [{ Key: 'code', Value: { String: { Value: 'S-1' } } }],
    });
    expect(ok.status).toBe(201);
    expect(ok.body.StructureType.CustomFields).toEqual([{ Name: 'Code', Key: 'code', Type: 'Text', Required: true }]);
    expect(cfv(ok.body, 'code').Field).toEqual({ Name: 'Code', Key: 'code', Type: 'Text', Required: true });
    expectValidation(await put(req, { Key: 's1', CustomFieldValues: [{ Key: 'code', Value: null }] }), 'CustomFieldValues[0].Value');
    expect(cfv((await get(req, 's1')).body, 'code').Value.Value).toBe('S-1');
    // Updating other properties without listing the required field keeps it.
    expect((await put(req, { Key: 's1', DisplayName: 'Site one' })).status).toBe(200);
  });
});

describe('list filters (D8), query parameter names (D5)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await freshClient();
    await createAll(api, [
      { Key: 'acme', DisplayName: 'Acme Holding', StructureTypeKey: 'company' },
      { Key: 'ops', DisplayName: 'Operations', StructureTypeKey: 'company' },
      { Key: 'sales', DisplayName: 'Sales', StructureTypeKey: 'department' },
      { Key: 'eng', DisplayName: 'Engineering', StructureTypeKey: 'department', ParentKey: 'acme' },
      { Key: 'mkt', DisplayName: 'Marketing Department', StructureTypeKey: 'department', ParentKey: 'acme' },
      { Key: 'cc-7781', DisplayName: 'Finance', StructureTypeKey: 'department', ParentKey: 'acme' },
      { Key: 'lab', DisplayName: 'Research Lab', StructureTypeKey: 'company', ParentKey: 'acme' },
      { Key: 'eng-web', DisplayName: 'Web Team', StructureTypeKey: 'department', ParentKey: 'eng' },
      { Key: 'eng-data', DisplayName: 'Data Team', StructureTypeKey: 'department', ParentKey: 'eng' },
      { Key: 'ops-field', DisplayName: 'Field Service', StructureTypeKey: 'department', ParentKey: 'ops' },
    ]);
  });

  /** Keys of a filtered list (all on one page), checking TotalCount agrees. */
  const filtered = async (query: string) => {
    const r = await list(api, query);
    expect(r.status, `${query}: ${JSON.stringify(r.body)}`).toBe(200);
    expect(r.body.PageInfo.TotalCount).toBe(r.body.Edges.length);
    return keysOf(r);
  };

  it('no filter: every entity, ordered by Key', async () => {
    expect(await filtered('')).toEqual(['acme', 'cc-7781', 'eng', 'eng-data', 'eng-web', 'lab', 'mkt', 'ops', 'ops-field', 'sales']);
  });

  it('ParentKey: the direct children only', async () => {
    expect(await filtered('ParentKey=acme')).toEqual(['cc-7781', 'eng', 'lab', 'mkt']);
    expect(await filtered('ParentKey=eng')).toEqual(['eng-data', 'eng-web']);
    expect(await filtered('ParentKey=sales')).toEqual([]);
    expect(await filtered('ParentKey=unknown')).toEqual([]);
  });

  it('Depth', async () => {
    expect(await filtered('Depth=1')).toEqual(['acme', 'ops', 'sales']);
    expect(await filtered('Depth=2')).toEqual(['cc-7781', 'eng', 'lab', 'mkt', 'ops-field']);
    expect(await filtered('Depth=3')).toEqual(['eng-data', 'eng-web']);
    expect(await filtered('Depth=4')).toEqual([]);
  });

  // D8: SearchTerm over DisplayName and Key with the subjects' rule (D7: ILIKE or word_similarity >= 0.3).
  // P15: a SearchTerm keeps the entity order (Key).
  it('SearchTerm over DisplayName and Key, case-insensitive and typo-tolerant', async () => {
    expect(await filtered('SearchTerm=finance')).toEqual(['cc-7781']); // DisplayName only
    expect(await filtered('SearchTerm=7781')).toEqual(['cc-7781']); // Key only
    expect(await filtered('SearchTerm=RESEARCH')).toEqual(['lab']);
    expect(await filtered('SearchTerm=Team')).toEqual(['eng-data', 'eng-web']);
    expect(await filtered('SearchTerm=Markting')).toEqual(['mkt']); // a typo
    expect(await filtered('SearchTerm=Reserch')).toEqual(['lab']); // a typo
    expect(await filtered('SearchTerm=qqqzzz')).toEqual([]);
  });

  it('SearchTerm treats LIKE wildcards literally', async () => {
    expect(await filtered('SearchTerm=%25')).toEqual([]);
    expect(await filtered('SearchTerm=_')).toEqual([]);
  });

  it('SubjectAssignable (true/false, any casing)', async () => {
    expect(await filtered('SubjectAssignable=true')).toEqual(['cc-7781', 'eng', 'eng-data', 'eng-web', 'mkt', 'ops-field', 'sales']);
    expect(await filtered('SubjectAssignable=false')).toEqual(['acme', 'lab', 'ops']);
    expect(await filtered('SubjectAssignable=FALSE')).toEqual(['acme', 'lab', 'ops']);
  });

  it('StructureTypeKey', async () => {
    expect(await filtered('StructureTypeKey=company')).toEqual(['acme', 'lab', 'ops']);
    expect(await filtered('StructureTypeKey=department')).toEqual(['cc-7781', 'eng', 'eng-data', 'eng-web', 'mkt', 'ops-field', 'sales']);
    expect(await filtered('StructureTypeKey=Company')).toEqual([]);
  });

  // D8: list filters combine with AND.
  it('filters combine with AND', async () => {
    expect(await filtered('ParentKey=acme&StructureTypeKey=company')).toEqual(['lab']);
    expect(await filtered('ParentKey=acme&SubjectAssignable=true')).toEqual(['cc-7781', 'eng', 'mkt']);
    expect(await filtered('Depth=1&StructureTypeKey=department')).toEqual(['sales']);
    expect(await filtered('Depth=2&SearchTerm=Service')).toEqual(['ops-field']);
    expect(await filtered('ParentKey=eng&SearchTerm=web')).toEqual(['eng-web']);
    expect(await filtered('ParentKey=acme&SearchTerm=Markting&SubjectAssignable=true&StructureTypeKey=department&Depth=2')).toEqual([
      'mkt',
    ]);
    expect(await filtered('ParentKey=acme&SearchTerm=Markting&SubjectAssignable=false')).toEqual([]);
    expect(await filtered('Depth=3&SearchTerm=finance')).toEqual([]);
  });

  // D5: query parameter names are matched case-insensitively.
  it('query parameter names are case-insensitive (D5)', async () => {
    expect(await filtered('parentkey=acme')).toEqual(['cc-7781', 'eng', 'lab', 'mkt']);
    expect(await filtered('PARENTKEY=acme&depth=2&structuretypekey=department&subjectassignable=true&searchterm=Finance')).toEqual([
      'cc-7781',
    ]);
    const lower = await list(api, 'first=3');
    const upper = await list(api, 'First=3');
    const mixed = await list(api, 'fIrSt=3');
    expect(lower.status).toBe(200);
    expect(keysOf(lower)).toEqual(['acme', 'cc-7781', 'eng']);
    expect(lower.body).toEqual(upper.body);
    expect(mixed.body).toEqual(upper.body);
    const after = await list(api, `after=${upper.body.PageInfo.EndCursor}&FIRST=2`);
    expect(keysOf(after)).toEqual(['eng-data', 'eng-web']);
  });

  it('bad filter values: 400 naming the parameter', async () => {
    expectValidation(await list(api, 'Depth=abc'), 'Depth');
    expectValidation(await list(api, 'Depth=1.5'), 'Depth');
    expectValidation(await list(api, 'Depth=3000000000'), 'Depth');
    expectValidation(await list(api, 'SubjectAssignable=maybe'), 'SubjectAssignable');
    expectValidation(await list(api, 'ParentKey=a&ParentKey=b'), 'ParentKey');
  });
});

describe('REST and GraphQL agree (D8, D11)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await freshClient();
    await createAll(api, [
      { Key: 'root', DisplayName: 'Root', StructureTypeKey: 'company' },
      {
        Key: 'r-a',
        DisplayName: 'Alpha',
        StructureTypeKey: 'department',
        ParentKey: 'root',
        CustomFieldValues: [
          { Key: 'costCenter', Value: { String: { Value: 'A-1' } } },
          { Key: 'headcount', Value: { Integer: { Value: 12 } } },
          { Key: 'opened', Value: { Date: { Value: '2020-02-29' } } },
          { Key: 'budget', Value: { Decimal: { Value: 1234.5 } } },
          { Key: 'active', Value: { Boolean: { Value: true } } },
          { Key: 'manager', Value: { UserIdentifier: { Value: 'u-1' } } },
        ],
      },
      { Key: 'r-b', DisplayName: 'Beta', StructureTypeKey: 'department', ParentKey: 'root' },
      {
        Key: 'r-a-1',
        DisplayName: 'Alpha one',
        StructureTypeKey: 'department',
        ParentKey: 'r-a',
        CustomFieldValues: [{ Key: 'headcount', Value: { Integer: { Value: -1 } } }],
      },
      { Key: 'solo', DisplayName: 'Solo', StructureTypeKey: 'company' },
    ]);
  });

  const ENTITY = `
    id key displayName depth parentKey
    parent { key }
    children(first: 10) { totalCount edges { node { key } } }
    structureType { key name subjectAssignable customFields { key name type dataType required isArray } }
    customFieldValues { field { key name type dataType required isArray } values { dataType value valueText } }
  `;

  /** A GraphQL entity in the REST shape (D8), to compare field by field. */
  const asRest = (n: any) => ({
    Key: n.key,
    DisplayName: n.displayName,
    ParentKey: n.parentKey,
    Depth: n.depth,
    StructureType: {
      Name: n.structureType.name,
      Key: n.structureType.key,
      SubjectAssignable: n.structureType.subjectAssignable,
      CustomFields: n.structureType.customFields.map((f: any) => ({ Name: f.name, Key: f.key, Type: f.type, Required: f.required })),
    },
    CustomFieldValues: n.customFieldValues.map((v: any) => {
      expect(v.values).toHaveLength(1);
      expect(v.field.isArray).toBe(false);
      expect(v.values[0].dataType).toBe(v.field.dataType);
      return {
        Field: { Name: v.field.name, Key: v.field.key, Type: v.field.type, Required: v.field.required },
        Value: {
          $type: `${v.values[0].dataType}Value`,
          DataType: v.values[0].dataType,
          Value: v.values[0].value,
          ValueText: v.values[0].valueText,
        },
      };
    }),
  });

  // D11: the REST endpoints are translations onto the same GraphQL operations.
  it('the structuralEntities connection holds what the REST list holds, cursors included', async () => {
    const rest = await list(api, 'First=10');
    const g = await api.gql<any>(`{ structuralEntities(first: 10) {
      totalCount pageInfo { hasNextPage hasPreviousPage startCursor endCursor } edges { cursor node { ${ENTITY} } } } }`);
    expect(g.status).toBe(200);
    expect(g.body.errors).toBeUndefined();
    const conn = g.body.data.structuralEntities;
    expect(conn.totalCount).toBe(rest.body.PageInfo.TotalCount);
    expect(conn.totalCount).toBe(5);
    expect(conn.pageInfo).toEqual({
      hasNextPage: rest.body.PageInfo.HasNextPage,
      hasPreviousPage: rest.body.PageInfo.HasPreviousPage,
      startCursor: rest.body.PageInfo.StartCursor,
      endCursor: rest.body.PageInfo.EndCursor,
    });
    expect(conn.edges.map((e: any) => e.cursor)).toEqual(rest.body.Edges.map((e: any) => e.Cursor));
    expect(conn.edges.map((e: any) => asRest(e.node))).toEqual(rest.body.Edges.map((e: any) => e.Node));
    // parent and children follow ParentKey.
    for (const { node } of conn.edges) {
      expect(node.parent?.key ?? null).toBe(node.parentKey);
      const children = keysOf(await list(api, `ParentKey=${node.key}`));
      expect(node.children.edges.map((e: any) => e.node.key)).toEqual(children);
      expect(node.children.totalCount).toBe(children.length);
    }
    const alpha = conn.edges.find((e: any) => e.node.key === 'r-a').node;
    expect(alpha.customFieldValues.find((v: any) => v.field.key === 'budget').values).toEqual([
      { dataType: 'Decimal', value: 1234.5, valueText: '1234.5' },
    ]);
  });

  it('REST list filters and their GraphQL arguments select the same entities', async () => {
    const cases: [string, string][] = [
      ['ParentKey=root', 'parentKey: "root"'],
      ['Depth=2', 'depth: 2'],
      ['SearchTerm=alpha', 'searchTerm: "alpha"'],
      ['SubjectAssignable=false', 'subjectAssignable: false'],
      ['StructureTypeKey=department&Depth=2', 'structureTypeKey: "department", depth: 2'],
    ];
    for (const [query, args] of cases) {
      const rest = await list(api, query);
      const g = await api.gql<any>(`{ structuralEntities(${args}) { totalCount edges { node { key } } } }`);
      expect(g.body.errors).toBeUndefined();
      expect(
        g.body.data.structuralEntities.edges.map((e: any) => e.node.key),
        query,
      ).toEqual(keysOf(rest));
      expect(g.body.data.structuralEntities.totalCount).toBe(rest.body.PageInfo.TotalCount);
    }
  });

  it('structuralEntity(key) and node(id) give what GET by key gives', async () => {
    for (const key of ['root', 'r-a', 'r-b', 'r-a-1', 'solo']) {
      const rest = await get(api, key);
      const g = await api.gql<any>(`query($key: String!) { structuralEntity(key: $key) { ${ENTITY} } }`, { key });
      expect(g.body.errors).toBeUndefined();
      const entity = g.body.data.structuralEntity;
      expect(asRest(entity)).toEqual(rest.body);
      const n = await api.gql<any>(`query($id: ID!) { node(id: $id) { __typename id ... on StructuralEntity { ${ENTITY} } } }`, {
        id: entity.id,
      });
      expect(n.body.errors).toBeUndefined();
      expect(n.body.data.node.__typename).toBe('StructuralEntity');
      expect(n.body.data.node.id).toBe(entity.id);
      expect(asRest(n.body.data.node)).toEqual(rest.body);
    }
    const missing = await api.gql<any>('{ structuralEntity(key: "nope") { key } }');
    expect(missing.body.errors).toBeUndefined();
    expect(missing.body.data.structuralEntity).toBeNull();
  });

  // D2: a foreign key answers exactly as an unknown one.
  it('another tenant cannot see, read, or parent to these entities (D2)', async () => {
    const other = await freshClient();
    const id = (await api.gql<any>('{ structuralEntity(key: "root") { id } }')).body.data.structuralEntity.id;
    expect((await get(other, 'root')).status).toBe(404);
    expect((await list(other, '')).body.PageInfo.TotalCount).toBe(0);
    const g = await other.gql<any>('query($id: ID!) { node(id: $id) { id } e: structuralEntity(key: "root") { key } }', { id });
    expect(g.body.data).toEqual({ node: null, e: null });
    expectValidation(await put(other, { Key: 'child', DisplayName: 'x', StructureTypeKey: 'company', ParentKey: 'root' }), 'ParentKey');
    // The same key in the other tenant is a different entity.
    const own = await put(other, { Key: 'root', DisplayName: 'Other root', StructureTypeKey: 'company' });
    expect(own.status).toBe(201);
    expect((await get(api, 'root')).body.DisplayName).toBe('Root');
  });

  // P26: mutation payloads carry `created` (REST's 201 or 200).
  it('the upsertStructuralEntity mutation writes what REST reads, with the same rules', async () => {
    const m = await api.gql<any>(
      `mutation($input: UpsertStructuralEntityInput!) { upsertStructuralEntity(input: $input) { created structuralEntity { key depth parentKey customFieldValues { field { key } values { value } } } } }`,
      {
        input: {
          key: 'via-gql',
          displayName: 'Via GraphQL',
          structureTypeKey: 'department',
          parentKey: 'r-a',
          customFieldValues: [{ key: 'headcount', value: { Integer: { value: 5 } } }],
        },
      },
    );
    expect(m.body.errors).toBeUndefined();
    expect(m.body.data.upsertStructuralEntity).toEqual({
      created: true,
      structuralEntity: {
        key: 'via-gql',
        depth: 3,
        parentKey: 'r-a',
        customFieldValues: [{ field: { key: 'headcount' }, values: [{ value: 5 }] }],
      },
    });
    const rest = await get(api, 'via-gql');
    expect(rest.body).toMatchObject({ Key: 'via-gql', DisplayName: 'Via GraphQL', ParentKey: 'r-a', Depth: 3 });
    expect(cfv(rest.body, 'headcount').Value.Value).toBe(5);

    const upd = await api.gql<any>(
      'mutation { upsertStructuralEntity(input: {key: "via-gql", parentKey: null}) { created structuralEntity { depth displayName } } }',
    );
    expect(upd.body.data.upsertStructuralEntity).toEqual({ created: false, structuralEntity: { depth: 1, displayName: 'Via GraphQL' } });

    const bad = await api.gql<any>(
      'mutation { upsertStructuralEntity(input: {key: "via-gql", displayName: "Nope", customFieldValues: [{key: "headcount", value: {Integer: {value: "x"}}}]}) { created } }',
    );
    expect(bad.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    expect(bad.body.data?.upsertStructuralEntity ?? null).toBeNull();
    expect((await get(api, 'via-gql')).body.DisplayName).toBe('Via GraphQL');
  });
});

describe('structure type changes and subjects (D8)', () => {
  // D8: changing the type of an entity that has subjects to a non-assignable type: 409.
  it('an entity holding subjects cannot change to a non-assignable type (409); without subjects it can', async () => {
    const api = await freshClient();
    await createAll(api, [
      {
        Key: 'staffed',
        DisplayName: 'Staffed',
        StructureTypeKey: 'department',
        CustomFieldValues: [{ Key: 'headcount', Value: { Integer: { Value: 1 } } }],
      },
      { Key: 'empty', DisplayName: 'Empty', StructureTypeKey: 'department' },
    ]);
    const subject = await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: 'E-1' } } },
        { Key: 'fullName', Value: { String: { Value: 'Ann Smith' } } },
      ],
      StructuralEntityKeys: ['staffed'],
    });
    expect(subject.status, JSON.stringify(subject.body)).toBe(201);

    const before = (await get(api, 'staffed')).body;
    const r = await put(api, { Key: 'staffed', DisplayName: 'Now a company', StructureTypeKey: 'company' });
    expect(r.status, JSON.stringify(r.body)).toBe(409);
    expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect((await get(api, 'staffed')).body).toEqual(before);
    // Other updates of the entity are still fine.
    expect((await put(api, { Key: 'staffed', DisplayName: 'Still staffed' })).status).toBe(200);

    // No subjects: the type may change.
    const free = await put(api, { Key: 'empty', StructureTypeKey: 'company' });
    expect(free.status).toBe(200);
    expect(free.body.StructureType).toEqual(COMPANY);

    // Once the subject has left, the change goes through.
    const removed = await api.delete(`/api/v1/subject/${subject.body.internalId}/structuralEntities?keys=staffed`);
    expect(removed.status).toBe(200);
    const now = await put(api, { Key: 'staffed', StructureTypeKey: 'company' });
    expect(now.status).toBe(200);
    expect(now.body).toMatchObject({ DisplayName: 'Still staffed', StructureType: COMPANY, CustomFieldValues: [] });
  });
});

describe('concurrency (D8)', () => {
  // D8 (upsert) under concurrency: one create wins, the others update; never a 500.
  it('10 parallel PUTs creating one new key give exactly one entity, one 201 and no 500', async () => {
    const api = await freshClient();
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        put(api, {
          Key: 'race',
          DisplayName: `Racer ${i}`,
          StructureTypeKey: 'department',
          CustomFieldValues: [{ Key: 'headcount', Value: { Integer: { Value: i } } }],
        }),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(1);
    expect(statuses.filter((s) => s === 200)).toHaveLength(9);
    const all = await list(api, 'First=100');
    expect(keysOf(all)).toEqual(['race']);
    expect(all.body.PageInfo.TotalCount).toBe(1);
    // The stored entity is one of the writes, whole (not a mix of two).
    const stored = (await get(api, 'race')).body;
    const i = Number(stored.DisplayName.replace('Racer ', ''));
    expect(stored.DisplayName).toMatch(/^Racer \d$/);
    expect(cfv(stored, 'headcount').Value.Value).toBe(i);
  });

  it('parallel creates of children under one parent and a parallel move keep every Depth consistent', async () => {
    const api = await freshClient();
    await createAll(api, [
      { Key: 'p', DisplayName: 'P', StructureTypeKey: 'company' },
      { Key: 'q', DisplayName: 'Q', StructureTypeKey: 'company' },
    ]);
    const writes = [
      ...Array.from({ length: 8 }, (_, i) =>
        put(api, { Key: `kid-${i}`, DisplayName: `Kid ${i}`, StructureTypeKey: 'department', ParentKey: 'p' }),
      ),
      put(api, { Key: 'p', ParentKey: 'q' }),
    ];
    const results = await Promise.all(writes);
    for (const r of results) expect([200, 201]).toContain(r.status);
    expect((await get(api, 'p')).body).toMatchObject({ ParentKey: 'q', Depth: 2 });
    const kids = await list(api, 'ParentKey=p&First=100');
    expect(kids.body.PageInfo.TotalCount).toBe(8);
    for (const e of kids.body.Edges) expect(e.Node.Depth).toBe(3);
  });
});
