import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ApiClient,
  type ApiResponse,
  FULL_CLIENT,
  type TestApp,
  type TestTenant,
  createTenant,
  startApp,
  expectValidation,
  expectProblem,
} from './helpers.js';

// Subjects through HTTP only: the REST contract (upsert, get by id, PATCH, locations) and POST /graphql.
// D7 is the spec; D2 (tenancy: foreign = unknown = 404), D4 (permissions), D5 (errors, casing, case-
// insensitive names), D11 (GraphQL) where they touch subjects. Lists, filters and paging: subject-list.test.ts.

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

const UPSERT = '/api/v2/messaging/subject';
const byId = (id: string) => `/api/v2/subject/${encodeURIComponent(id)}`;
const locations = (id: string) => `/api/v1/subject/${encodeURIComponent(id)}/structuralEntities`;

/** One sent custom field value (D7): `{Key, Value: {<DataType>: {Value: v}}}`. */
const sv = (key: string, type: string, value: unknown) => ({ Key: key, Value: { [type]: { Value: value } } });
/** The two required fields of the default configuration (employeeNumber is the matching field). */
const person = (no: string, name: string, ...more: unknown[]) => [
  sv('employeeNumber', 'String', no),
  sv('fullName', 'String', name),
  ...more,
];

function upsert(api: ApiClient, values: unknown[], keys?: string[] | null) {
  return api.post(UPSERT, { CustomFieldValues: values, ...(keys !== undefined ? { StructuralEntityKeys: keys } : {}) });
}

/** Upserts, asserting 200/201, and returns the subject's id. */
async function upsertOk(api: ApiClient, values: unknown[], keys?: string[] | null): Promise<string> {
  const r = await upsert(api, values, keys);
  expect([200, 201], JSON.stringify(r.body)).toContain(r.status);
  return r.body.internalId as string;
}

/** The REST Value of field `key` in a subject body (undefined when the field is left out, D7). */
const valueOf = (subject: any, key: string) => (subject.CustomFieldValues as any[]).find((v) => v.Field.Key === key)?.Value;
const textOf = (subject: any, key: string) => {
  const v = valueOf(subject, key);
  return v === undefined ? undefined : Array.isArray(v) ? v.map((x: any) => x.ValueText) : v.ValueText;
};
const locationKeys = (subject: any) => (subject.StructuralEntities as any[]).map((e) => e.Key).sort();

/** Every subject of the tenant (ExternalIds), through the list. */
async function allExternalIds(api: ApiClient): Promise<string[]> {
  const r = await api.get('/api/v2/subject?First=1000');
  expect(r.status).toBe(200);
  return (r.body.Edges as any[]).map((e) => e.Node.ExternalId);
}

const EXTRA_FIELDS = [
  { key: 'employeeNumber', name: 'Employee number', dataType: 'String', type: 'Text', required: true },
  { key: 'fullName', name: 'Full name', dataType: 'String', type: 'Text', required: true },
  { key: 'email', name: 'E-mail', dataType: 'String' },
  { key: 'grade', name: 'Grade', dataType: 'Integer' },
  { key: 'skills', name: 'Skills', dataType: 'String', isArray: true },
  { key: 'birthDate', name: 'Birth date', dataType: 'Date' },
  { key: 'lastSeen', name: 'Last seen', dataType: 'DateTime' },
  { key: 'salary', name: 'Salary', dataType: 'Decimal' },
  { key: 'active', name: 'Active', dataType: 'Boolean' },
  { key: 'shiftStart', name: 'Shift start', dataType: 'Time' },
  { key: 'manager', name: 'Manager', dataType: 'UserIdentifier' },
  { key: 'scores', name: 'Scores', dataType: 'Integer', isArray: true },
];

const ENTITIES = [
  { key: 'acme', displayName: 'Acme', structureTypeKey: 'company' },
  {
    key: 'dept-a',
    displayName: 'Department A',
    structureTypeKey: 'department',
    parentKey: 'acme',
    customFieldValues: [{ key: 'costCenter', value: { String: { Value: 'CC-7' } } }],
  },
  { key: 'dept-b', displayName: 'Department B', structureTypeKey: 'department', parentKey: 'acme' },
  { key: 'dept-c', displayName: 'Department C', structureTypeKey: 'department' },
];

const DEPARTMENT_TYPE = {
  Name: 'Department',
  Key: 'department',
  SubjectAssignable: true,
  CustomFields: [
    { Name: 'Cost center', Key: 'costCenter', Type: 'Text', Required: false },
    { Name: 'Headcount', Key: 'headcount', Type: 'Integer', Required: false },
    { Name: 'Opened', Key: 'opened', Type: 'Date', Required: false },
    { Name: 'Budget', Key: 'budget', Type: 'Decimal', Required: false },
    { Name: 'Active', Key: 'active', Type: 'Boolean', Required: false },
    { Name: 'Manager', Key: 'manager', Type: 'UserIdentifier', Required: false },
  ],
};

// ---------------------------------------------------------------------------------------------------------

describe('sent values: the 400 kinds, on upsert and on PATCH, nothing written (D7, D5)', () => {
  let api: ApiClient;
  let id: string;
  beforeAll(async () => {
    api = await (await createTenant(app, { subjectFields: EXTRA_FIELDS })).client();
    id = await upsertOk(api, person('E-1', 'Original Name', sv('grade', 'Integer', 3), sv('email', 'String', 'orig@example.org')));
  });

  // [description, sent item, location suffix after `<Base>[i]`]
  const BAD: [string, unknown, string][] = [
    ['unknown key', sv('nope', 'String', 'x'), '.Key'],
    ['unknown data type name', sv('email', 'Text', 'x'), '.Value'],
    ["data type differing from the field's", sv('grade', 'String', '5'), '.Value'],
    // P16: strict JSON kinds in bodies: "5" is not an Integer.
    ['an Integer sent as a JSON string', sv('grade', 'Integer', '5'), '.Value.Integer.Value'],
    ['a fractional Integer', sv('grade', 'Integer', 1.5), '.Value.Integer.Value'],
    ['a String sent as a JSON number', sv('email', 'String', 5), '.Value.String.Value'],
    ['a Boolean sent as a JSON string', sv('active', 'Boolean', 'true'), '.Value.Boolean.Value'],
    ['a Decimal sent as a JSON string', sv('salary', 'Decimal', '3.5'), '.Value.Decimal.Value'],
    ['a Date in another format', sv('birthDate', 'Date', '01.05.2024'), '.Value.Date.Value'],
    ['a Date that does not exist', sv('birthDate', 'Date', '2023-02-29'), '.Value.Date.Value'],
    ['a Time out of range', sv('shiftStart', 'Time', '25:00:00'), '.Value.Time.Value'],
    ['a Time that is not a time', sv('shiftStart', 'Time', 'noon'), '.Value.Time.Value'],
    ['a DateTime that is not ISO 8601', sv('lastSeen', 'DateTime', '05/01/2024 10:00'), '.Value.DateTime.Value'],
    ['a DateTime with a bad day', sv('lastSeen', 'DateTime', '2024-13-01T10:00:00Z'), '.Value.DateTime.Value'],
    ['an Integer beyond 32 bits', sv('grade', 'Integer', 2147483648), '.Value.Integer.Value'],
    ['an Integer below 32 bits', sv('grade', 'Integer', -2147483649), '.Value.Integer.Value'],
    ['an array for a single-value field', { Key: 'grade', Value: [{ Integer: { Value: 1 } }] }, '.Value'],
    ['an unknown user for a UserIdentifier', sv('manager', 'UserIdentifier', 'u-nobody'), '.Value.UserIdentifier.Value'],
    ['null for a required field', { Key: 'fullName', Value: null }, '.Value'],
    ['a typed null for a required field', sv('fullName', 'String', null), '.Value'],
    [
      'a bad element inside an array field',
      { Key: 'scores', Value: [{ Integer: { Value: 1 } }, { Integer: { Value: 'x' } }] },
      '.Value[1].Integer.Value',
    ],
    ['a value that is no data type object', { Key: 'email', Value: 'plain' }, '.Value'],
  ];

  async function expectUnchanged() {
    const g = await api.get(byId(id));
    expect(g.status).toBe(200);
    expect(textOf(g.body, 'fullName')).toBe('Original Name');
    expect(textOf(g.body, 'grade')).toBe('3');
    expect(textOf(g.body, 'email')).toBe('orig@example.org');
    for (const k of ['skills', 'birthDate', 'lastSeen', 'salary', 'active', 'shiftStart', 'manager', 'scores'])
      expect(valueOf(g.body, k)).toBeUndefined();
  }

  it('upsert of an existing subject: 400 naming CustomFieldValues[2]..., nothing written', async () => {
    const answers = await Promise.all(
      BAD.map(([, item]) => upsert(api, [sv('employeeNumber', 'String', 'E-1'), sv('skills', 'String', 'changed'), item])),
    );
    answers.forEach((r, i) => expectValidation(r, `CustomFieldValues[2]${BAD[i]![2]}`));
    await expectUnchanged();
  });

  it('upsert that would create: 400 and no subject created', async () => {
    const answers = await Promise.all(
      BAD.map(([, item], i) => upsert(api, [sv('employeeNumber', 'String', `NEW-${i}`), sv('skills', 'String', 'new'), item])),
    );
    answers.forEach((r, i) => expectValidation(r, `CustomFieldValues[2]${BAD[i]![2]}`));
    expect(await allExternalIds(api)).toEqual(['E-1']);
  });

  it('PATCH: 400 naming CustomFields[1]..., nothing written', async () => {
    const answers = await Promise.all(
      BAD.map(([, item]) => api.patch(byId(id), { CustomFields: [sv('skills', 'String', 'changed'), item] })),
    );
    answers.forEach((r, i) => expectValidation(r, `CustomFields[1]${BAD[i]![2]}`));
    await expectUnchanged();
  });

  it('names every problem of one request at once', async () => {
    const r = await upsert(api, [
      ...person('E-1', 'Changed'),
      sv('nope', 'String', 'x'),
      sv('grade', 'Integer', 'five'),
      sv('manager', 'UserIdentifier', 'ghost'),
    ]);
    expectValidation(
      r,
      'CustomFieldValues[2].Key',
      'CustomFieldValues[3].Value.Integer.Value',
      'CustomFieldValues[4].Value.UserIdentifier.Value',
    );
    await expectUnchanged();
  });

  // P18: matching fields cannot be cleared.
  it('clearing the matching field by PATCH is a 400, nothing written', async () => {
    const r = await api.patch(byId(id), { CustomFields: [sv('email', 'String', 'new@example.org'), sv('employeeNumber', 'String', null)] });
    expectValidation(r, 'CustomFields[1].Value');
    await expectUnchanged();
    expect(textOf((await api.get(byId(id))).body, 'employeeNumber')).toBe('E-1');
  });

  it('the 32-bit bounds themselves are accepted', async () => {
    const sid = await upsertOk(api, person('E-bounds', 'Bounds', sv('grade', 'Integer', 2147483647), sv('scores', 'Integer', -2147483648)));
    const g = await api.get(byId(sid));
    expect(textOf(g.body, 'grade')).toBe('2147483647');
    expect(textOf(g.body, 'scores')).toEqual(['-2147483648']);
  });
});

describe('returned values: canonical ValueText, arrays, clearing, case-insensitive names (D7, D5)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app, { subjectFields: EXTRA_FIELDS })).client();
  });

  it('every data type comes back canonical, in the documented field shape', async () => {
    // Sent as raw JSON so the Decimal keeps its trailing zero on the wire.
    const raw = `{"CustomFieldValues": [
      {"Key": "employeeNumber", "Value": {"String": {"Value": "C-1"}}},
      {"Key": "fullName", "Value": {"String": {"Value": "Cara Canon"}}},
      {"Key": "grade", "Value": {"Integer": {"Value": 42}}},
      {"Key": "salary", "Value": {"Decimal": {"Value": 3.50}}},
      {"Key": "active", "Value": {"Boolean": {"Value": false}}},
      {"Key": "birthDate", "Value": {"Date": {"Value": "2024-02-29"}}},
      {"Key": "lastSeen", "Value": {"DateTime": {"Value": "2024-05-01T12:00:00+02:00"}}},
      {"Key": "shiftStart", "Value": {"Time": {"Value": "08:30:15"}}},
      {"Key": "manager", "Value": {"UserIdentifier": {"Value": "u-1"}}},
      {"Key": "skills", "Value": [{"String": {"Value": "go"}}, {"String": {"Value": "sql"}}]}
    ]}`;
    const r = await api.request('POST', UPSERT, { raw, headers: { 'content-type': 'application/json' } });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const g = await api.get(byId(r.body.internalId));
    expect(g.status).toBe(200);
    const one = (DataType: string, ValueText: string) => ({ DataType, ValueText });
    const field = (Key: string, Name: string, Type: string, Required = false, IsArray = false) => ({ Key, Name, Type, Required, IsArray });
    expect(g.body.CustomFieldValues).toEqual(
      expect.arrayContaining([
        { Field: field('employeeNumber', 'Employee number', 'Text', true), Value: one('String', 'C-1') },
        { Field: field('fullName', 'Full name', 'Text', true), Value: one('String', 'Cara Canon') },
        { Field: field('grade', 'Grade', 'Integer'), Value: one('Integer', '42') },
        { Field: field('salary', 'Salary', 'Decimal'), Value: one('Decimal', '3.5') },
        { Field: field('active', 'Active', 'Boolean'), Value: one('Boolean', 'false') },
        { Field: field('birthDate', 'Birth date', 'Date'), Value: one('Date', '2024-02-29') },
        { Field: field('lastSeen', 'Last seen', 'DateTime'), Value: one('DateTime', '2024-05-01T10:00:00.000Z') },
        { Field: field('shiftStart', 'Shift start', 'Time'), Value: one('Time', '08:30:15') },
        { Field: field('manager', 'Manager', 'UserIdentifier'), Value: one('UserIdentifier', 'u-1') },
        { Field: field('skills', 'Skills', 'String', false, true), Value: [one('String', 'go'), one('String', 'sql')] },
      ]),
    );
    // Fields without a value are left out (email, scores).
    expect(g.body.CustomFieldValues).toHaveLength(10);
    expect(g.body.ExternalId).toBe('C-1');
  });

  it('DateTime in UTC with milliseconds from every offset form; Boolean true; Decimal from an integer literal', async () => {
    const cases: [string, string][] = [
      ['2024-05-01T10:00:00Z', '2024-05-01T10:00:00.000Z'],
      ['2024-05-01T10:00:00.5Z', '2024-05-01T10:00:00.500Z'],
      ['2024-05-01T05:30:00-04:30', '2024-05-01T10:00:00.000Z'],
      ['2024-01-01T00:30:00+01:00', '2023-12-31T23:30:00.000Z'],
    ];
    const ids = await Promise.all(
      cases.map(([sent], i) =>
        upsertOk(
          api,
          person(`DT-${i}`, 'Date Time', sv('lastSeen', 'DateTime', sent), sv('active', 'Boolean', true), sv('salary', 'Decimal', 7)),
        ),
      ),
    );
    for (const [i, sid] of ids.entries()) {
      const g = await api.get(byId(sid));
      expect(textOf(g.body, 'lastSeen')).toBe(cases[i]![1]);
      expect(textOf(g.body, 'active')).toBe('true');
      expect(textOf(g.body, 'salary')).toBe('7');
    }
  });

  it('a single object for an array field becomes a one-element array', async () => {
    const r = await upsert(api, person('ARR-1', 'Array One', sv('skills', 'String', 'java'), sv('scores', 'Integer', 9)));
    expect(r.status).toBe(201);
    const g = await api.get(byId(r.body.internalId));
    expect(valueOf(g.body, 'skills')).toEqual([{ DataType: 'String', ValueText: 'java' }]);
    expect(valueOf(g.body, 'scores')).toEqual([{ DataType: 'Integer', ValueText: '9' }]);
    expect(r.body.customFieldValues.filter((v: any) => v.customField.id === 'skills')).toEqual([
      { customField: { id: 'skills' }, value: 'java' },
    ]);
  });

  it('{"String": {"Value": null}} and a null Value clear a field; other fields stay', async () => {
    const sid = await upsertOk(
      api,
      person('CLR-1', 'Clear Me', sv('email', 'String', 'c@example.org'), sv('grade', 'Integer', 4), sv('skills', 'String', 'x')),
    );
    const r = await upsert(api, [sv('employeeNumber', 'String', 'CLR-1'), sv('email', 'String', null), { Key: 'grade', Value: null }]);
    expect(r.status).toBe(200);
    expect(r.body.customFieldValues.map((v: any) => v.customField.id).sort()).toEqual(['employeeNumber', 'fullName', 'skills']);
    const g = await api.get(byId(sid));
    expect(valueOf(g.body, 'email')).toBeUndefined();
    expect(valueOf(g.body, 'grade')).toBeUndefined();
    expect(textOf(g.body, 'skills')).toEqual(['x']);
    // The same by PATCH, typed null of an Integer field and an empty array for an array field.
    const p = await api.patch(byId(sid), { CustomFields: [sv('skills', 'String', null), sv('fullName', 'String', 'Still Here')] });
    expect(p.status).toBe(200);
    expect(valueOf(p.body, 'skills')).toBeUndefined();
    expect(textOf(p.body, 'fullName')).toBe('Still Here');
  });

  it('data type names, Value and property names are matched case-insensitively', async () => {
    const r = await api.post(UPSERT, {
      customfieldvalues: [
        { key: 'employeeNumber', value: { string: { value: 'CI-1' } } },
        { KEY: 'fullName', VALUE: { STRING: { VALUE: 'Case Insensitive' } } },
        { Key: 'grade', Value: { integer: { value: 7 } } },
        { Key: 'lastSeen', Value: { datetime: { Value: '2024-05-01T10:00:00Z' } } },
        { Key: 'manager', Value: { userIDENTIFIER: { Value: 'u-1' } } },
      ],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const g = await api.get(byId(r.body.internalId));
    expect(textOf(g.body, 'fullName')).toBe('Case Insensitive');
    expect(valueOf(g.body, 'grade')).toEqual({ DataType: 'Integer', ValueText: '7' });
    expect(valueOf(g.body, 'lastSeen')).toEqual({ DataType: 'DateTime', ValueText: '2024-05-01T10:00:00.000Z' });
    expect(textOf(g.body, 'manager')).toBe('u-1');
  });
});

describe('upsert: matching, create/update, response, locations (D7)', () => {
  let tenant: TestTenant;
  let api: ApiClient;
  beforeAll(async () => {
    tenant = await createTenant(app, { structuralEntities: ENTITIES });
    api = await tenant.client();
  });

  it('matching field missing or null: 400, nothing created', async () => {
    const missing = await upsert(api, [sv('fullName', 'String', 'No Number')]);
    expectValidation(missing, 'CustomFieldValues');
    expect(JSON.stringify(missing.body.errors)).toContain('employeeNumber');
    const nul = await upsert(api, [sv('employeeNumber', 'String', null), sv('fullName', 'String', 'Null Number')]);
    expectValidation(nul, 'CustomFieldValues[0].Value');
    const empty = await upsert(api, []);
    expectValidation(empty, 'CustomFieldValues');
    expect(await allExternalIds(api)).toEqual([]);
  });

  it('create needs every required field: 400 listing the missing ones, nothing created', async () => {
    const r = await upsert(api, [sv('employeeNumber', 'String', 'REQ-1'), sv('grade', 'Integer', 1)]);
    expectValidation(r, 'CustomFieldValues');
    expect(JSON.stringify(r.body.errors)).toContain('fullName');
    expect(await allExternalIds(api)).not.toContain('REQ-1');
  });

  it('create answers 201, update 200, with the lower-camel response, one entry per array element', async () => {
    const c = await upsert(api, person('U-1', 'Una Upsert', sv('skills', 'String', 'a'), sv('grade', 'Integer', 5)), ['dept-a']);
    expect(c.status, JSON.stringify(c.body)).toBe(201);
    expect(c.headers.get('content-type')).toMatch(/^application\/json/);
    expect(Object.keys(c.body).sort()).toEqual(['customFieldValues', 'externalId', 'internalId']);
    expect(c.body.internalId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i);
    expect(c.body.externalId).toBe('U-1');
    const entry = (id: string, value: string) => ({ customField: { id }, value });
    expect(c.body.customFieldValues).toHaveLength(4);
    expect(c.body.customFieldValues).toEqual(
      expect.arrayContaining([entry('employeeNumber', 'U-1'), entry('fullName', 'Una Upsert'), entry('grade', '5'), entry('skills', 'a')]),
    );

    const u = await upsert(api, [
      sv('employeeNumber', 'String', 'U-1'),
      { Key: 'skills', Value: [{ String: { Value: 'x' } }, { String: { Value: 'y' } }, { String: { Value: 'z' } }] },
    ]);
    expect(u.status, JSON.stringify(u.body)).toBe(200);
    expect(u.body.internalId).toBe(c.body.internalId);
    expect(u.body.customFieldValues).toHaveLength(6);
    expect(u.body.customFieldValues.filter((v: any) => v.customField.id === 'skills').map((v: any) => v.value)).toEqual(['x', 'y', 'z']);

    // Only the given fields changed, and without StructuralEntityKeys the locations stay.
    const g = await api.get(byId(c.body.internalId));
    expect(textOf(g.body, 'fullName')).toBe('Una Upsert');
    expect(textOf(g.body, 'grade')).toBe('5');
    expect(textOf(g.body, 'skills')).toEqual(['x', 'y', 'z']);
    expect(locationKeys(g.body)).toEqual(['dept-a']);
    expect((await allExternalIds(api)).filter((e) => e === 'U-1')).toHaveLength(1);
  });

  it('StructuralEntityKeys replaces the locations; [] removes every one; null keeps them', async () => {
    const sid = await upsertOk(api, person('LOC-1', 'Loc One'), ['dept-a', 'dept-b']);
    expect(locationKeys((await api.get(byId(sid))).body)).toEqual(['dept-a', 'dept-b']);
    expect((await upsert(api, [sv('employeeNumber', 'String', 'LOC-1')], ['dept-c', 'dept-b'])).status).toBe(200);
    expect(locationKeys((await api.get(byId(sid))).body)).toEqual(['dept-b', 'dept-c']);
    expect((await upsert(api, [sv('employeeNumber', 'String', 'LOC-1')], null)).status).toBe(200);
    expect(locationKeys((await api.get(byId(sid))).body)).toEqual(['dept-b', 'dept-c']);
    expect((await upsert(api, [sv('employeeNumber', 'String', 'LOC-1')], [])).status).toBe(200);
    expect(locationKeys((await api.get(byId(sid))).body)).toEqual([]);
  });

  it('an unknown or non-assignable key: 400 naming StructuralEntityKeys[i], nothing changes', async () => {
    const sid = await upsertOk(api, person('LOC-2', 'Loc Two'), ['dept-a']);
    const unknown = await upsert(api, person('LOC-2', 'Renamed'), ['dept-b', 'nowhere']);
    expectValidation(unknown, 'StructuralEntityKeys[1]');
    const company = await upsert(api, person('LOC-2', 'Renamed'), ['acme']);
    expectValidation(company, 'StructuralEntityKeys[0]');
    const caseDiffers = await upsert(api, person('LOC-2', 'Renamed'), ['DEPT-B']); // D2: keys are case-sensitive
    expectValidation(caseDiffers, 'StructuralEntityKeys[0]');
    const g = await api.get(byId(sid));
    expect(locationKeys(g.body)).toEqual(['dept-a']);
    expect(textOf(g.body, 'fullName')).toBe('Loc Two');
    // On create: nothing created.
    expectValidation(await upsert(api, person('LOC-NEW', 'New'), ['acme']), 'StructuralEntityKeys[0]');
    expect(await allExternalIds(api)).not.toContain('LOC-NEW');
  });

  it('updating with StructuralEntityKeys needs Create:SubjectLocation and Delete:SubjectLocation (D4)', async () => {
    const limited = (clientId: string, permissions: string[]) => ({
      clientId,
      clientSecret: `${clientId}-secret-value`,
      scopes: ['ServiceApi'],
      permissions,
    });
    const base = ['Create:Subject', 'Edit:Subject', 'View:Subject', 'List:Subject'];
    const clients = [
      limited('no-loc', base),
      limited('create-loc', [...base, 'Create:SubjectLocation']),
      limited('delete-loc', [...base, 'Delete:SubjectLocation']),
      limited('both-loc', [...base, 'Create:SubjectLocation', 'Delete:SubjectLocation']),
    ];
    const t = await createTenant(app, { structuralEntities: ENTITIES, clients: [FULL_CLIENT, ...clients] });
    const full = await t.client();
    const as = async (c: (typeof clients)[number]) => t.client({ clientId: c.clientId, clientSecret: c.clientSecret });
    const sid = await upsertOk(full, person('P-1', 'Perm One'), ['dept-a']);

    for (const c of clients.slice(0, 3)) {
      const api2 = await as(c);
      const r = await upsert(api2, person('P-1', `Changed by ${c.clientId}`), ['dept-b']);
      expectProblem(r, 403);
      // Without keys the same client may update.
      const ok = await upsert(api2, [sv('employeeNumber', 'String', 'P-1'), sv('grade', 'Integer', 1)]);
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    }
    const g = await full.get(byId(sid));
    expect(locationKeys(g.body)).toEqual(['dept-a']);
    expect(textOf(g.body, 'fullName')).toBe('Perm One');

    const both = await as(clients[3]!);
    expect((await upsert(both, person('P-1', 'Perm Both'), ['dept-b'])).status).toBe(200);
    expect(locationKeys((await full.get(byId(sid))).body)).toEqual(['dept-b']);

    // Creating (with locations) needs Create:Subject only; updating needs Edit:Subject.
    // P19: creating by upsert with StructuralEntityKeys needs only Create:Subject.
    const createOnly = limited('create-only', ['Create:Subject']);
    const editOnly = limited('edit-only', ['Edit:Subject']);
    const t2 = await createTenant(app, { structuralEntities: ENTITIES, clients: [FULL_CLIENT, createOnly, editOnly] });
    const c2 = await t2.client({ clientId: createOnly.clientId, clientSecret: createOnly.clientSecret });
    const e2 = await t2.client({ clientId: editOnly.clientId, clientSecret: editOnly.clientSecret });
    expect((await upsert(c2, person('Q-1', 'Created'), ['dept-a'])).status).toBe(201);
    expectProblem(await upsert(c2, person('Q-1', 'Edited')), 403);
    expectProblem(await upsert(e2, person('Q-2', 'Not created')), 403);
    expect((await upsert(e2, person('Q-1', 'Edited'))).status).toBe(200);
    expect(await allExternalIds(await t2.client())).toEqual(['Q-1']);
  });
});

describe('ExternalId (D7)', () => {
  it('is the text of externalIdFieldKey, and follows its changes', async () => {
    const api = await (await createTenant(app, { externalIdFieldKey: 'email' })).client();
    const c = await upsert(api, person('X-1', 'Ext', sv('email', 'String', 'x1@example.org')));
    expect(c.status).toBe(201);
    expect(c.body.externalId).toBe('x1@example.org');
    const p = await api.patch(byId(c.body.internalId), { CustomFields: [sv('email', 'String', 'a-first@example.org')] });
    expect(p.body.ExternalId).toBe('a-first@example.org');
    await upsertOk(api, person('X-2', 'Ext Two', sv('email', 'String', 'b@example.org')));
    // The default order is by ExternalId, and ExternalId is searchable.
    expect(await allExternalIds(api)).toEqual(['a-first@example.org', 'b@example.org']);
    const s = await api.get('/api/v2/subject?SearchTerm=a-first');
    expect(s.body.Edges.map((e: any) => e.Node.Id)).toEqual([c.body.internalId]);
  });

  it('follows a change of externalIdFieldKey in a re-applied tenant file (D3)', async () => {
    const tenant = await createTenant(app);
    const api = await tenant.client();
    const sid = await upsertOk(api, person('Z-1', 'Zoe', sv('email', 'String', 'zoe@example.org')));
    expect((await api.get(byId(sid))).body.ExternalId).toBe('Z-1');
    await createTenant(app, { key: tenant.key, externalIdFieldKey: 'email' });
    expect((await api.get(byId(sid))).body.ExternalId).toBe('zoe@example.org');
  });

  it('defaults to the first matching field', async () => {
    const api = await (
      await createTenant(app, { externalIdFieldKey: undefined, matchingFieldKeys: ['fullName', 'employeeNumber'] })
    ).client();
    const c = await upsert(api, person('Y-1', 'Yara First'));
    expect(c.status, JSON.stringify(c.body)).toBe(201);
    expect(c.body.externalId).toBe('Yara First');
    expect((await api.get(byId(c.body.internalId))).body.ExternalId).toBe('Yara First');
  });
});

describe('matching values and concurrency (D7)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app)).client();
  });

  it('a PATCH giving two subjects the same matching values: 409, nothing changed', async () => {
    const a = await upsertOk(api, person('M-A', 'Alpha'));
    const b = await upsertOk(api, person('M-B', 'Beta'));
    const r = await api.patch(byId(b), { CustomFields: [sv('fullName', 'String', 'Beta Changed'), sv('employeeNumber', 'String', 'M-A')] });
    expectProblem(r, 409);
    const g = await api.get(byId(b));
    expect(g.body.ExternalId).toBe('M-B');
    expect(textOf(g.body, 'fullName')).toBe('Beta');
    expect(textOf((await api.get(byId(a))).body, 'fullName')).toBe('Alpha');
    // Changing to a free value is fine, and ExternalId follows.
    const ok = await api.patch(byId(b), { CustomFields: [sv('employeeNumber', 'String', 'M-C')] });
    expect(ok.status).toBe(200);
    expect(ok.body.ExternalId).toBe('M-C');
    expect((await upsert(api, person('M-B', 'Beta again'))).status).toBe(201);
  });

  it('with two matching fields, only the full tuple collides (PATCH 409; upsert finds by the tuple)', async () => {
    const t = await createTenant(app, { matchingFieldKeys: ['employeeNumber', 'grade'] });
    const api2 = await t.client();
    const a = await upsertOk(api2, person('T-1', 'One', sv('grade', 'Integer', 1)));
    const b = await upsertOk(api2, person('T-1', 'Two', sv('grade', 'Integer', 2)));
    expect(b).not.toBe(a);
    expectProblem(await api2.patch(byId(b), { CustomFields: [sv('grade', 'Integer', 1)] }), 409);
    const same = await upsert(api2, [
      sv('employeeNumber', 'String', 'T-1'),
      sv('grade', 'Integer', 2),
      sv('fullName', 'String', 'Two Updated'),
    ]);
    expect(same.status).toBe(200);
    expect(same.body.internalId).toBe(b);
    const missing = await upsert(api2, [sv('employeeNumber', 'String', 'T-1'), sv('fullName', 'String', 'No grade')]);
    expectValidation(missing, 'CustomFieldValues');
    expect(await allExternalIds(api2)).toEqual(['T-1', 'T-1']);
  });

  it('a re-applied tenant file with other matching fields: upsert finds subjects by the new ones (D3)', async () => {
    const tenant = await createTenant(app);
    const api2 = await tenant.client();
    const sid = await upsertOk(api2, person('MM-1', 'Mia Match', sv('email', 'String', 'mia@example.org')));
    await createTenant(app, { key: tenant.key, matchingFieldKeys: ['email'] });
    const r = await upsert(api2, [sv('email', 'String', 'mia@example.org'), sv('grade', 'Integer', 2)]);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.internalId).toBe(sid);
    expect(await allExternalIds(api2)).toEqual(['MM-1']);
  });

  it('a write whose row changed after it read it reads it again and loses nothing (P64)', async () => {
    const sid = await upsertOk(api, person('RACE-2', 'Racer'));
    let patch: Promise<ApiResponse> | undefined;
    await app.handle.db.transaction().execute(async (trx) => {
      // Another writer holds the row; the PATCH reads the row as committed (no lock) and then waits for
      // it to write. (PGlite has one connection: there the PATCH waits before it reads, and reads the change.)
      await sql`SELECT 1 FROM subject WHERE id = ${sid} FOR UPDATE`.execute(trx);
      patch = api.patch(byId(sid), { CustomFields: [sv('email', 'String', 'late@example.org')] });
      await new Promise((r) => setTimeout(r, 300));
      await sql`UPDATE subject SET values = values || '{"grade": 99}'::jsonb WHERE id = ${sid}`.execute(trx);
    });
    const r = await patch!;
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const got = (await api.get(byId(sid))).body;
    expect([textOf(got, 'grade'), textOf(got, 'email')]).toEqual(['99', 'late@example.org']);
  });

  it('20 parallel upserts with the same matching values create exactly one subject', async () => {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => upsert(api, person('RACE-1', `Racer ${i}`, sv('grade', 'Integer', i)))),
    );
    for (const r of answers) expect([200, 201], JSON.stringify(r.body)).toContain(r.status);
    expect(answers.filter((r) => r.status === 201)).toHaveLength(1);
    expect(new Set(answers.map((r) => r.body.internalId)).size).toBe(1);
    const list = await api.get('/api/v2/subject?customFieldValueFilter.values[employeeNumber]=RACE-1');
    expect(list.status).toBe(200);
    expect(list.body.PageInfo.TotalCount).toBe(1);
    expect(list.body.Edges).toHaveLength(1);
  });
});

describe('get by id, PATCH, unknown and foreign ids (D7, D2)', () => {
  let api: ApiClient;
  let foreignId: string;
  beforeAll(async () => {
    api = await (await createTenant(app, { structuralEntities: ENTITIES })).client();
    const other = await (await createTenant(app, { structuralEntities: ENTITIES })).client();
    foreignId = await upsertOk(other, person('FOREIGN-1', 'Foreign'), ['dept-a']);
  });

  it('GET by id returns the subject with StructuralEntities in the full structural entity shape', async () => {
    const sid = await upsertOk(api, person('G-1', 'Gina Get', sv('grade', 'Integer', 3)), ['dept-a']);
    const g = await api.get(byId(sid));
    expect(g.status).toBe(200);
    expect(g.headers.get('content-type')).toMatch(/^application\/json/);
    expect(g.body).toEqual({
      Id: sid,
      ExternalId: 'G-1',
      CustomFieldValues: [
        {
          Field: { Key: 'employeeNumber', Name: 'Employee number', Type: 'Text', Required: true, IsArray: false },
          Value: { DataType: 'String', ValueText: 'G-1' },
        },
        {
          Field: { Key: 'fullName', Name: 'Full name', Type: 'Text', Required: true, IsArray: false },
          Value: { DataType: 'String', ValueText: 'Gina Get' },
        },
        {
          Field: { Key: 'grade', Name: 'Grade', Type: 'Integer', Required: false, IsArray: false },
          Value: { DataType: 'Integer', ValueText: '3' },
        },
      ],
      StructuralEntities: [
        {
          Key: 'dept-a',
          DisplayName: 'Department A',
          ParentKey: 'acme',
          Depth: 2,
          StructureType: DEPARTMENT_TYPE,
          CustomFieldValues: [
            {
              Field: { Name: 'Cost center', Key: 'costCenter', Type: 'Text', Required: false },
              Value: { $type: 'StringValue', DataType: 'String', Value: 'CC-7', ValueText: 'CC-7' },
            },
          ],
        },
      ],
    });
    // The list node has no StructuralEntities (interface: "a subject without StructuralEntities").
    const l = await api.get('/api/v2/subject?customFieldValueFilter.values[employeeNumber]=G-1');
    expect(l.body.Edges).toHaveLength(1);
    const { StructuralEntities: _omit, ...withoutLocations } = g.body;
    expect(l.body.Edges[0].Node).toEqual(withoutLocations);
    // An upper-case UUID names the same subject.
    expect((await api.get(byId(sid.toUpperCase()))).body.Id).toBe(sid);
  });

  it('PATCH answers 200 with the get-by-id shape; CustomFieldValues is accepted as alias of CustomFields', async () => {
    const sid = await upsertOk(api, person('P-1', 'Pat Patch', sv('email', 'String', 'p@example.org')), ['dept-b']);
    const p = await api.patch(byId(sid), { CustomFields: [sv('grade', 'Integer', 8), sv('skills', 'String', 'rust')] });
    expect(p.status, JSON.stringify(p.body)).toBe(200);
    expect(p.body).toEqual((await api.get(byId(sid))).body);
    expect(locationKeys(p.body)).toEqual(['dept-b']);
    expect(textOf(p.body, 'grade')).toBe('8');
    expect(textOf(p.body, 'skills')).toEqual(['rust']);
    expect(textOf(p.body, 'email')).toBe('p@example.org');
    expect(textOf(p.body, 'fullName')).toBe('Pat Patch');

    const alias = await api.patch(byId(sid), { CustomFieldValues: [sv('grade', 'Integer', 9)] });
    expect(alias.status, JSON.stringify(alias.body)).toBe(200);
    expect(textOf(alias.body, 'grade')).toBe('9');
    const lower = await api.patch(byId(sid), { customFields: [{ key: 'grade', value: { integer: { value: 10 } } }] });
    expect(lower.status).toBe(200);
    expect(textOf(lower.body, 'grade')).toBe('10');
  });

  it('PATCH without CustomFields: 400', async () => {
    const sid = await upsertOk(api, person('P-2', 'Pat Two'));
    expectValidation(await api.patch(byId(sid), {}));
    expectValidation(await api.patch(byId(sid), { CustomFields: 'grade' }));
  });

  it('a bad value sent under the CustomFieldValues alias is named at the path as sent (D5)', async () => {
    const sid = await upsertOk(api, person('P-3', 'Pat Three'));
    const r = await api.patch(byId(sid), { CustomFieldValues: [sv('grade', 'String', 'x')] });
    expectValidation(r, 'CustomFieldValues[0].Value');
  });

  it("a non-UUID id, an unknown UUID and a foreign tenant's subject: 404 on GET, PATCH, PUT and DELETE locations", async () => {
    const ids = ['not-a-uuid', '00000000-0000-4000-8000-000000000000', foreignId, 'U3ViamVjdDp4'];
    for (const id of ids) {
      expectProblem(await api.get(byId(id)), 404);
      expectProblem(await api.patch(byId(id), { CustomFields: [sv('grade', 'Integer', 1)] }), 404);
      expectProblem(await api.put(locations(id), { keys: ['dept-a'] }), 404);
      expectProblem(await api.delete(`${locations(id)}?keys=dept-a`), 404);
    }
  });

  it("a Subject's GraphQL global id is not a UUID: 404 on the REST paths (D7); GraphQL does not see foreign subjects", async () => {
    const sid = await upsertOk(api, person('GID-1', 'Global'), ['dept-a']);
    const globalId = (await api.gql(`query($id: ID!) { subject(id: $id) { id } }`, { id: sid })).body.data.subject.id as string;
    expect(globalId).not.toBe(sid);
    expectProblem(await api.get(byId(globalId)), 404);
    expectProblem(await api.patch(byId(globalId), { CustomFields: [sv('fullName', 'String', 'Changed')] }), 404);
    expectProblem(await api.put(locations(globalId), { keys: ['dept-b'] }), 404);
    expectProblem(await api.delete(`${locations(globalId)}?keys=dept-a`), 404);
    const g = await api.get(byId(sid));
    expect(textOf(g.body, 'fullName')).toBe('Global');
    expect(locationKeys(g.body)).toEqual(['dept-a']);

    const foreignGlobal = Buffer.from(`Subject:${foreignId}`).toString('base64');
    const r = await api.gql(`query($a: ID!, $b: ID!) { a: subject(id: $a) { id } b: subject(id: $b) { id } n: node(id: $b) { id } }`, {
      a: foreignId,
      b: foreignGlobal,
    });
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ a: null, b: null, n: null });
  });

  it('the foreign subject is untouched by those requests', async () => {
    const other = await createTenant(app, { structuralEntities: ENTITIES });
    const otherApi = await other.client();
    const fid = await upsertOk(otherApi, person('FOREIGN-2', 'Foreign Two'), ['dept-a']);
    await api.patch(byId(fid), { CustomFields: [sv('fullName', 'String', 'Hijacked')] });
    await api.put(locations(fid), { keys: ['dept-b'] });
    await api.delete(`${locations(fid)}?keys=dept-a`);
    const g = await otherApi.get(byId(fid));
    expect(textOf(g.body, 'fullName')).toBe('Foreign Two');
    expect(locationKeys(g.body)).toEqual(['dept-a']);
  });
});

describe('locations: PUT adds, DELETE removes (D7)', () => {
  let api: ApiClient;
  let sid: string;
  beforeAll(async () => {
    api = await (await createTenant(app, { structuralEntities: ENTITIES })).client();
    sid = await upsertOk(api, person('L-1', 'Lou Location'));
  });

  it('PUT adds, already present keys change nothing, answers 200 with the get-by-id shape', async () => {
    const r = await api.put(locations(sid), { keys: ['dept-a'] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(locationKeys(r.body)).toEqual(['dept-a']);
    expect(r.body).toEqual((await api.get(byId(sid))).body);
    const again = await api.put(locations(sid), { Keys: ['dept-a', 'dept-b'] });
    expect(again.status).toBe(200);
    expect(locationKeys(again.body)).toEqual(['dept-a', 'dept-b']);
    expect(again.body.StructuralEntities).toHaveLength(2);
    expect(textOf(again.body, 'fullName')).toBe('Lou Location');
  });

  it('PUT with an unknown or non-assignable key: 400 naming Keys[i], nothing added', async () => {
    expectValidation(await api.put(locations(sid), { keys: ['dept-c', 'nowhere'] }), 'Keys[1]');
    expectValidation(await api.put(locations(sid), { keys: ['acme', 'dept-c'] }), 'Keys[0]');
    expectValidation(await api.put(locations(sid), {}));
    expect(locationKeys((await api.get(byId(sid))).body)).toEqual(['dept-a', 'dept-b']);
  });

  it('DELETE removes the listed keys, ignoring unknown ones and ones not among the locations', async () => {
    await api.put(locations(sid), { keys: ['dept-c'] });
    const r = await api.delete(`${locations(sid)}?keys=dept-a,nowhere,acme`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(locationKeys(r.body)).toEqual(['dept-b', 'dept-c']);
    expect(r.body).toEqual((await api.get(byId(sid))).body);
    const repeated = await api.delete(`${locations(sid)}?keys=dept-b&keys=dept-c`);
    expect(repeated.status).toBe(200);
    expect(locationKeys(repeated.body)).toEqual([]);
  });

  it('DELETE with keys missing or empty: 400, nothing removed', async () => {
    await api.put(locations(sid), { keys: ['dept-a'] });
    for (const q of ['', '?keys=', '?keys=,']) {
      const r = await api.delete(`${locations(sid)}${q}`);
      expectValidation(r);
      expect(Object.keys(r.body.errors).map((k) => k.toLowerCase())).toContain('keys');
    }
    expect(locationKeys((await api.get(byId(sid))).body)).toEqual(['dept-a']);
  });

  it('PUT needs Create:SubjectLocation, DELETE needs Delete:SubjectLocation (D4)', async () => {
    const c = {
      clientId: 'viewer',
      clientSecret: 'viewer-secret-value',
      scopes: ['ServiceApi'],
      permissions: ['View:Subject', 'Edit:Subject'],
    };
    const t = await createTenant(app, { structuralEntities: ENTITIES, clients: [FULL_CLIENT, c] });
    const full = await t.client();
    const id = await upsertOk(full, person('L-2', 'Perm'), ['dept-a']);
    const viewer = await t.client({ clientId: c.clientId, clientSecret: c.clientSecret });
    expectProblem(await viewer.put(locations(id), { keys: ['dept-b'] }), 403);
    expectProblem(await viewer.delete(`${locations(id)}?keys=dept-a`), 403);
    expect(locationKeys((await full.get(byId(id))).body)).toEqual(['dept-a']);
  });
});

describe('GraphQL: Subject fields, subject(id), node(id), StructuralEntity.subjects, mutations (D11, D7)', () => {
  let api: ApiClient;
  beforeAll(async () => {
    api = await (await createTenant(app, { structuralEntities: ENTITIES })).client();
  });

  const SUBJECT = `
    id subjectId externalId
    customFieldValues { field { key name type dataType required isArray } values { dataType value valueText } }
    structuralEntities(first: 10) { totalCount edges { node { key depth structureType { key } } } }
  `;

  it('upsertSubject creates then updates; the Subject exposes its fields', async () => {
    const mutation = `mutation($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created subject { ${SUBJECT} } } }`;
    const created = await api.gql(mutation, {
      input: {
        customFieldValues: [
          { key: 'employeeNumber', value: { String: { value: 'GQ-1' } } },
          { key: 'fullName', value: { String: { value: 'Graph Quill' } } },
          { key: 'grade', value: { Integer: { value: 6 } } },
          { key: 'skills', value: [{ String: { value: 'a' } }, { String: { value: 'b' } }] },
        ],
        structuralEntityKeys: ['dept-a'],
      },
    });
    expect(created.status).toBe(200);
    expect(created.body.errors).toBeUndefined();
    const s = created.body.data.upsertSubject;
    expect(s.created).toBe(true);
    expect(s.subject.externalId).toBe('GQ-1');
    expect(s.subject.subjectId).toMatch(/^[0-9a-f-]{36}$/);
    expect(s.subject.id).not.toBe(s.subject.subjectId);
    expect(s.subject.customFieldValues).toEqual([
      {
        field: { key: 'employeeNumber', name: 'Employee number', type: 'Text', dataType: 'String', required: true, isArray: false },
        values: [{ dataType: 'String', value: 'GQ-1', valueText: 'GQ-1' }],
      },
      {
        field: { key: 'fullName', name: 'Full name', type: 'Text', dataType: 'String', required: true, isArray: false },
        values: [{ dataType: 'String', value: 'Graph Quill', valueText: 'Graph Quill' }],
      },
      {
        field: { key: 'grade', name: 'Grade', type: 'Integer', dataType: 'Integer', required: false, isArray: false },
        values: [{ dataType: 'Integer', value: 6, valueText: '6' }],
      },
      {
        field: { key: 'skills', name: 'Skills', type: 'String', dataType: 'String', required: false, isArray: true },
        values: [
          { dataType: 'String', value: 'a', valueText: 'a' },
          { dataType: 'String', value: 'b', valueText: 'b' },
        ],
      },
    ]);
    expect(s.subject.structuralEntities).toEqual({
      totalCount: 1,
      edges: [{ node: { key: 'dept-a', depth: 2, structureType: { key: 'department' } } }],
    });

    const updated = await api.gql(mutation, {
      input: {
        customFieldValues: [
          { key: 'employeeNumber', value: { String: { value: 'GQ-1' } } },
          { key: 'grade', value: { Integer: { value: 7 } } },
        ],
      },
    });
    expect(updated.body.errors).toBeUndefined();
    expect(updated.body.data.upsertSubject.created).toBe(false);
    expect(updated.body.data.upsertSubject.subject.subjectId).toBe(s.subject.subjectId);
    const rest = await api.get(byId(s.subject.subjectId));
    expect(textOf(rest.body, 'grade')).toBe('7');
    expect(textOf(rest.body, 'fullName')).toBe('Graph Quill');
  });

  // P25: GraphQL values take the REST sent shape: one validator, the same locations.
  it('upsertSubject with a bad value: a BAD_REQUEST error naming the location, nothing written', async () => {
    const r = await api.gql(`mutation($input: UpsertSubjectInput!) { upsertSubject(input: $input) { subject { id } } }`, {
      input: {
        customFieldValues: [
          { key: 'employeeNumber', value: { String: { value: 'GQ-BAD' } } },
          { key: 'fullName', value: { String: { value: 'Bad' } } },
          { key: 'grade', value: { Integer: { value: 'x' } } },
        ],
      },
    });
    expect(r.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    expect(Object.keys(r.body.errors![0]!.extensions!['errors'])).toContain('customFieldValues[2].value.Integer.value');
    expect(await allExternalIds(api)).not.toContain('GQ-BAD');
  });

  it('subject(id) takes the UUID or the global id; node(id) resolves the global id; unknown ids are null', async () => {
    const sid = await upsertOk(api, person('GQ-2', 'Node Nora'), ['dept-b']);
    const q = `query($id: ID!) { subject(id: $id) { id subjectId externalId } }`;
    const byUuid = await api.gql(q, { id: sid });
    expect(byUuid.body.errors).toBeUndefined();
    const globalId = byUuid.body.data.subject.id as string;
    expect(byUuid.body.data.subject).toEqual({ id: globalId, subjectId: sid, externalId: 'GQ-2' });
    expect((await api.gql(q, { id: globalId })).body.data.subject).toEqual({ id: globalId, subjectId: sid, externalId: 'GQ-2' });
    const node = await api.gql(`query($id: ID!) { node(id: $id) { __typename id ... on Subject { subjectId externalId } } }`, {
      id: globalId,
    });
    expect(node.body.data.node).toEqual({ __typename: 'Subject', id: globalId, subjectId: sid, externalId: 'GQ-2' });
    for (const unknown of ['00000000-0000-4000-8000-000000000000', 'nope']) {
      const r = await api.gql(q, { id: unknown });
      expect(r.status).toBe(200);
      expect(r.body.data?.subject ?? null).toBeNull();
    }
  });

  it('StructuralEntity.subjects lists the subjects located there', async () => {
    const t = await createTenant(app, { structuralEntities: ENTITIES });
    const api2 = await t.client();
    await Promise.all([
      upsertOk(api2, person('SE-2', 'Two'), ['dept-a']),
      upsertOk(api2, person('SE-1', 'One'), ['dept-a', 'dept-b']),
      upsertOk(api2, person('SE-3', 'Three'), ['dept-b']),
    ]);
    const r = await api2.gql(`{
      a: structuralEntity(key: "dept-a") { subjects { totalCount edges { node { externalId } } } }
      c: structuralEntity(key: "dept-c") { subjects { totalCount edges { node { externalId } } } }
      acme: structuralEntity(key: "acme") { subjects(includeDescendants: true, orderDirection: DESCENDING) { totalCount edges { node { externalId } } } }
    }`);
    expect(r.body.errors).toBeUndefined();
    const ext = (c: any) => c.subjects.edges.map((e: any) => e.node.externalId);
    expect(ext(r.body.data.a)).toEqual(['SE-1', 'SE-2']);
    expect(r.body.data.a.subjects.totalCount).toBe(2);
    expect(ext(r.body.data.c)).toEqual([]);
    expect(ext(r.body.data.acme)).toEqual(['SE-3', 'SE-2', 'SE-1']);
    expect(r.body.data.acme.subjects.totalCount).toBe(3);
  });

  it('updateSubject, addSubjectToStructuralEntities and removeSubjectFromStructuralEntities', async () => {
    const sid = await upsertOk(api, person('GQ-3', 'Muta Tion'));
    const upd = await api.gql(
      `mutation($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { subjectId externalId customFieldValues { field { key } values { valueText } } } } }`,
      {
        input: {
          id: sid,
          customFields: [
            { key: 'grade', value: { Integer: { value: 11 } } },
            { key: 'email', value: { String: { value: 'm@example.org' } } },
          ],
        },
      },
    );
    expect(upd.body.errors).toBeUndefined();
    const vals = upd.body.data.updateSubject.subject.customFieldValues.map((v: any) => [
      v.field.key,
      v.values.map((x: any) => x.valueText),
    ]);
    expect(vals).toEqual([
      ['employeeNumber', ['GQ-3']],
      ['fullName', ['Muta Tion']],
      ['email', ['m@example.org']],
      ['grade', ['11']],
    ]);

    // customFieldValues is accepted as an alias of customFields (as in the REST body); one of them is required.
    const alias = await api.gql(
      `mutation($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { customFieldValues { field { key } values { valueText } } } } }`,
      { input: { id: sid, customFieldValues: [{ key: 'grade', value: { Integer: { value: 12 } } }] } },
    );
    expect(alias.body.errors).toBeUndefined();
    expect(alias.body.data.updateSubject.subject.customFieldValues.find((v: any) => v.field.key === 'grade').values).toEqual([
      { valueText: '12' },
    ]);
    const badAlias = await api.gql(`mutation($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { id } } }`, {
      input: { id: sid, customFieldValues: [{ key: 'grade', value: { String: { value: 'x' } } }] },
    });
    expect(badAlias.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    expect(Object.keys(badAlias.body.errors![0]!.extensions!['errors'])).toEqual(['customFieldValues[0].value']);
    const neither = await api.gql(`mutation($input: UpdateSubjectInput!) { updateSubject(input: $input) { subject { id } } }`, {
      input: { id: sid },
    });
    expect(neither.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');

    const add = await api.gql(
      `mutation($input: SubjectLocationsInput!) { addSubjectToStructuralEntities(input: $input) { subject { structuralEntities { edges { node { key } } } } } }`,
      { input: { subjectId: sid, keys: ['dept-a', 'dept-c'] } },
    );
    expect(add.body.errors).toBeUndefined();
    expect(add.body.data.addSubjectToStructuralEntities.subject.structuralEntities.edges.map((e: any) => e.node.key)).toEqual([
      'dept-a',
      'dept-c',
    ]);

    // The global id works as subjectId too.
    const globalId = (await api.gql(`query($id: ID!) { subject(id: $id) { id } }`, { id: sid })).body.data.subject.id;
    const remove = await api.gql(
      `mutation($input: SubjectLocationsInput!) { removeSubjectFromStructuralEntities(input: $input) { subject { subjectId structuralEntities { edges { node { key } } } } } }`,
      { input: { subjectId: globalId, keys: ['dept-a', 'nowhere'] } },
    );
    expect(remove.body.errors).toBeUndefined();
    expect(remove.body.data.removeSubjectFromStructuralEntities.subject.subjectId).toBe(sid);
    expect(remove.body.data.removeSubjectFromStructuralEntities.subject.structuralEntities.edges.map((e: any) => e.node.key)).toEqual([
      'dept-c',
    ]);

    const bad = await api.gql(
      `mutation($input: SubjectLocationsInput!) { addSubjectToStructuralEntities(input: $input) { subject { id } } }`,
      {
        input: { subjectId: sid, keys: ['acme'] },
      },
    );
    expect(bad.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    const unknown = await api.gql(
      `mutation($input: SubjectLocationsInput!) { addSubjectToStructuralEntities(input: $input) { subject { id } } }`,
      {
        input: { subjectId: '00000000-0000-4000-8000-000000000000', keys: ['dept-a'] },
      },
    );
    expect(unknown.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(locationKeys((await api.get(byId(sid))).body)).toEqual(['dept-c']);
  });

  it('a mutation without the permission is a FORBIDDEN error on that field (D4)', async () => {
    const c = {
      clientId: 'reader',
      clientSecret: 'reader-secret-value',
      scopes: ['ServiceApi'],
      permissions: ['View:Subject', 'List:Subject'],
    };
    const t = await createTenant(app, { structuralEntities: ENTITIES, clients: [FULL_CLIENT, c] });
    const reader = await t.client({ clientId: c.clientId, clientSecret: c.clientSecret });
    const r = await reader.gql(`mutation { upsertSubject(input: { customFieldValues: [
      { key: "employeeNumber", value: { String: { value: "F-1" } } }, { key: "fullName", value: { String: { value: "F" } } }] }) { subject { id } } }`);
    expect(r.status).toBe(200);
    expect(r.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
    expect(await allExternalIds(await t.client())).toEqual([]);
  });
});
