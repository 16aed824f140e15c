import { encodeGlobalID } from '@pothos/plugin-relay';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiClient, type TestApp, type TestTenant, createTenant, expectProblem, expectValidation, startApp } from './helpers.js';

// D9: the users list, access through the hierarchy, and the same through GraphQL (D11).

let app: TestApp;
let tenant: TestTenant;
let api: ApiClient;
let located: string; // a subject at sales-north
let unlocated: string;

const entities = [
  { key: 'acme', displayName: 'Acme', structureTypeKey: 'company' },
  { key: 'sales', displayName: 'Sales', structureTypeKey: 'department', parentKey: 'acme' },
  { key: 'sales-north', displayName: 'Sales North', structureTypeKey: 'department', parentKey: 'sales' },
  { key: 'hq', displayName: 'HQ', structureTypeKey: 'department', parentKey: 'acme' },
  { key: 'other', displayName: 'Other company', structureTypeKey: 'company' },
];

beforeAll(async () => {
  app = await startApp();
  tenant = await createTenant(app, {
    clients: [
      { clientId: 'full', clientSecret: 'full-client-secret', scopes: ['ServiceApi'], permissions: ['*'] },
      { clientId: 'no-users', clientSecret: 'no-users-secret', scopes: ['ServiceApi'], permissions: ['List:Subject', 'View:Subject'] },
    ],
    structuralEntities: entities,
    groups: [
      { key: 'hr', name: 'HR', structuralEntityKeys: ['acme'] },
      { key: 'sales-managers', name: 'Sales managers', structuralEntityKeys: ['sales'] },
      { key: 'north-team', name: 'North team', structuralEntityKeys: ['sales-north'] },
      { key: 'hq-staff', name: 'HQ staff', structuralEntityKeys: ['hq'] },
      { key: 'elsewhere', name: 'Elsewhere', structuralEntityKeys: ['other'] },
    ],
    users: [
      { id: 'u-ann', displayName: 'Ann Smith', email: 'ann@example.org', active: true, groupKeys: ['hr'] },
      { id: 'u-bob', displayName: 'Bob Jones', email: 'bob@example.org', active: true, groupKeys: ['sales-managers', 'hq-staff'] },
      { id: 'u-cy', displayName: 'Cy Former', email: 'cy@example.org', active: false, groupKeys: ['north-team'] },
      { id: 'u-dan', displayName: 'Dan Hq', active: true, groupKeys: ['hq-staff'] },
      { id: 'u-eve', displayName: 'Eve Elsewhere', active: true, groupKeys: ['elsewhere'] },
      { id: 'u-john', displayName: 'John Carpenter', active: true, groupKeys: [] },
      { id: 'u-zed', displayName: 'anna lower', active: true, groupKeys: ['north-team'] },
    ],
  });
  api = await tenant.client();
  const upsert = async (n: string, keys: string[]) => {
    const r = await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: n } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${n}` } } },
      ],
      StructuralEntityKeys: keys,
    });
    expect(r.status).toBe(201);
    return r.body.internalId as string;
  };
  located = await upsert('E-1', ['sales-north']);
  unlocated = await upsert('E-2', []);
});
afterAll(async () => {
  await app?.close();
});

const ids = (body: { id: string }[]) => body.map((u) => u.id);

describe('GET /api/v1/users (D9)', () => {
  it('lists active users as [{id, displayName}] ordered by displayName (ordinal)', async () => {
    const r = await api.get('/api/v1/users');
    expect(r.status).toBe(200);
    expect(r.body).toEqual([
      { id: 'u-ann', displayName: 'Ann Smith' },
      { id: 'u-bob', displayName: 'Bob Jones' },
      { id: 'u-dan', displayName: 'Dan Hq' },
      { id: 'u-eve', displayName: 'Eve Elsewhere' },
      { id: 'u-john', displayName: 'John Carpenter' },
      { id: 'u-zed', displayName: 'anna lower' },
    ]);
  });

  it('includes inactive users with includeInactive, bare or true (names bound case-insensitively, D5)', async () => {
    for (const q of ['includeInactive', 'includeInactive=true', 'IncludeInactive=TRUE']) {
      expect(ids((await api.get(`/api/v1/users?${q}`)).body), q).toContain('u-cy');
    }
    expect(ids((await api.get('/api/v1/users?includeInactive=false')).body)).not.toContain('u-cy');
    expectValidation(await api.get('/api/v1/users?includeInactive=maybe'), 'includeInactive');
  });

  it('searches display names case-insensitively and typo-tolerantly', async () => {
    expect(ids((await api.get('/api/v1/users?searchTerm=SMITH')).body)).toEqual(['u-ann']);
    // word_similarity ≥ 0.3 (D7's rule): "Jonh" finds John Carpenter (and Bob Jones), not Ann Smith.
    const typo = ids((await api.get('/api/v1/users?searchTerm=Jonh')).body);
    expect(typo).toContain('u-john');
    expect(typo).not.toContain('u-ann');
    expect(ids((await api.get('/api/v1/users?searchTerm=ann')).body)).toEqual(['u-ann', 'u-zed']);
    expect((await api.get('/api/v1/users?searchTerm=zzzzqqq')).body).toEqual([]);
  });

  it("finds users with access through the subject's locations and their ancestors, two levels up too", async () => {
    // sales-north ← sales ← acme: hr (acme, two levels up), sales-managers (sales), north-team (sales-north).
    expect(ids((await api.get(`/api/v1/users?withAccessToSubjectId=${located}`)).body)).toEqual(['u-ann', 'u-bob', 'u-zed']);
    // The inactive member of north-team only with includeInactive.
    expect(ids((await api.get(`/api/v1/users?withAccessToSubjectId=${located}&includeInactive`)).body)).toEqual([
      'u-ann',
      'u-bob',
      'u-cy',
      'u-zed',
    ]);
    // Combined with a search term (AND).
    expect(ids((await api.get(`/api/v1/users?withAccessToSubjectId=${located}&searchTerm=bob`)).body)).toEqual(['u-bob']);
    // A subject without locations: nobody.
    expect((await api.get(`/api/v1/users?withAccessToSubjectId=${unlocated}`)).body).toEqual([]);
  });

  it('follows a move in the hierarchy: access comes from the current ancestors', async () => {
    const moved = await api.put('/api/v1/structuralEntity', { Key: 'sales-north', ParentKey: 'hq' });
    expect(moved.status).toBe(200);
    try {
      // Now sales-north ← hq ← acme: hr, hq-staff (bob, dan) and north-team; no longer sales-managers.
      expect(ids((await api.get(`/api/v1/users?withAccessToSubjectId=${located}`)).body)).toEqual(['u-ann', 'u-bob', 'u-dan', 'u-zed']);
    } finally {
      expect((await api.put('/api/v1/structuralEntity', { Key: 'sales-north', ParentKey: 'sales' })).status).toBe(200);
    }
  });

  it("answers 404 for a subject id that is unknown, not a UUID, or another tenant's (D2)", async () => {
    expectProblem(await api.get('/api/v1/users?withAccessToSubjectId=00000000-0000-4000-8000-000000000000'), 404);
    expectProblem(await api.get('/api/v1/users?withAccessToSubjectId=nope'), 404);
    const other = await createTenant(app);
    const otherApi = await other.client();
    expectProblem(await otherApi.get(`/api/v1/users?withAccessToSubjectId=${located}`), 404);
    // And the other tenant sees none of these users.
    expect((await otherApi.get('/api/v1/users')).body).toEqual([{ id: 'u-1', displayName: 'Ann Smith' }]);
  });

  it('demands List:User (D4)', async () => {
    const limited = await tenant.client({ clientId: 'no-users', clientSecret: 'no-users-secret' });
    expectProblem(await limited.get('/api/v1/users'), 403);
  });
});

describe('GraphQL users (D9, D11)', () => {
  // P38: REST answers a plain array of at most 1000 users; GraphQL pages through any number.
  it('gives the same users as REST, as a connection with totalCount, groups and exact paging', async () => {
    const q = `query($after: String, $inactive: Boolean, $subject: ID) {
      users(first: 2, after: $after, includeInactive: $inactive, withAccessToSubjectId: $subject) {
        totalCount pageInfo { hasNextPage hasPreviousPage endCursor }
        edges { node { id displayName email active groups { key name structuralEntities { key } } } }
      }
    }`;
    const p1 = await api.gql(q, { subject: located, inactive: true });
    expect(p1.body.errors).toBeUndefined();
    expect(p1.body.data.users.totalCount).toBe(4);
    expect(p1.body.data.users.edges.map((e: any) => e.node.id)).toEqual(['u-ann', 'u-bob']);
    expect(p1.body.data.users.edges[1].node).toEqual({
      id: 'u-bob',
      displayName: 'Bob Jones',
      email: 'bob@example.org',
      active: true,
      groups: [
        { key: 'hq-staff', name: 'HQ staff', structuralEntities: [{ key: 'hq' }] },
        { key: 'sales-managers', name: 'Sales managers', structuralEntities: [{ key: 'sales' }] },
      ],
    });
    const p2 = await api.gql(q, {
      subject: encodeGlobalID('Subject', located),
      inactive: true,
      after: p1.body.data.users.pageInfo.endCursor,
    });
    expect(p2.body.data.users.edges.map((e: any) => e.node.id)).toEqual(['u-cy', 'u-zed']);
    expect(p2.body.data.users.pageInfo).toMatchObject({ hasNextPage: false, hasPreviousPage: true });
  });

  it('lists Subject.usersWithAccess and reports an unknown subject as NOT_FOUND', async () => {
    const r = await api.gql(
      `query($id: ID!) { subject(id: $id) { usersWithAccess(searchTerm: "a") { totalCount edges { node { id } } } } }`,
      { id: located },
    );
    expect(r.body.data.subject.usersWithAccess.edges.map((e: any) => e.node.id)).toEqual(['u-ann', 'u-zed']);
    const missing = await api.gql(`{ users(withAccessToSubjectId: "00000000-0000-4000-8000-000000000000") { totalCount } }`);
    expect(missing.body.errors[0].extensions.code).toBe('NOT_FOUND');
  });

  it('answers FORBIDDEN on users without List:User, other fields still answered (D4)', async () => {
    const limited = await tenant.client({ clientId: 'no-users', clientSecret: 'no-users-secret' });
    const r = await limited.gql(`query($id: ID!) { users { totalCount } subject(id: $id) { subjectId usersWithAccess { totalCount } } }`, {
      id: located,
    });
    expect(r.status).toBe(200);
    expect(r.body.data.users).toBeNull();
    expect(r.body.data.subject).toEqual({ subjectId: located, usersWithAccess: null });
    expect(r.body.errors.map((e: any) => e.extensions.code)).toEqual(['FORBIDDEN', 'FORBIDDEN']);
  });
});
