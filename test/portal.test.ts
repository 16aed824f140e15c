import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from './fake-provider.js';
import {
  type ApiClient,
  FULL_CLIENT,
  type TestApp,
  type TestTenant,
  createTenant,
  expectProblem,
  expectValidation,
  startApp,
  tenantConfig,
} from './helpers.js';

// The subject portal through HTTP and GraphQL: D9 (invite, remove, the portal-users list), with D3 (the
// portal block), D4 (permissions: 403 REST, FORBIDDEN GraphQL), D5 (errors, lower-camel envelope), D6
// (paging) and D7 (a subject id that is not a UUID is 404). Delivery of the mails: portal-mail.test.ts.

let app: TestApp;
beforeAll(async () => {
  // No SMTP_URL: invitations are logged (D9), which is all these tests need.
  app = await startApp({ MAIL_POLL_MS: '50' });
});
afterAll(() => app?.close());

const PORTAL = {
  selfAccessEnabled: true,
  thirdPartyAccessEnabled: true,
  emailFieldKey: 'email',
  displayNameFieldKey: 'fullName',
  invitationFieldKeys: ['email'],
};
const client = (clientId: string, permissions: string[]) => ({
  clientId,
  clientSecret: `${clientId}-secret-value`,
  scopes: ['ServiceApi'],
  permissions,
});
const CLIENTS = [
  FULL_CLIENT,
  client('no-portal', ['List:Subject', 'View:Subject', 'Create:Subject', 'Edit:Subject']),
  client('viewer', ['View:SubjectAccessInvite', 'View:Subject']),
  client('inviter', ['Create:SubjectAccessInvite']),
  client('remover', ['Delete:SubjectAccessInvite']),
];
const as = (t: TestTenant, clientId: string) => t.client({ clientId, clientSecret: `${clientId}-secret-value` });

const invitePath = (id: string) => `/api/v1/subject/${encodeURIComponent(id)}/invite`;
const usersPath = (id: string, query = '') => `/api/v1/subject/${encodeURIComponent(id)}/subjectAccessUsers${query}`;
const sv = (key: string, value: string) => ({ Key: key, Value: { String: { Value: value } } });

/** Creates a subject by upsert (D7) and returns its id. */
async function subject(api: ApiClient, no: string, name: string, email?: string, more: unknown[] = []): Promise<string> {
  const r = await api.post('/api/v2/messaging/subject', {
    CustomFieldValues: [sv('employeeNumber', no), sv('fullName', name), ...(email !== undefined ? [sv('email', email)] : []), ...more],
  });
  expect([200, 201], JSON.stringify(r.body)).toContain(r.status);
  return r.body.internalId as string;
}

/** POST invite with a raw body (or none) and a JSON content type. */
function inviteRaw(api: ApiClient, id: string, raw?: string) {
  return api.request('POST', invitePath(id), raw === undefined ? {} : { raw, headers: { 'content-type': 'application/json' } });
}

const emailsOf = (users: any[]) => users.map((u) => u.email);

/** Every portal user of a subject through the REST list, in order. */
async function listed(api: ApiClient, id: string): Promise<any[]> {
  const r = await api.get(usersPath(id, '?First=1000'));
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return (r.body.edges as any[]).map((e) => e.node);
}

let t: TestTenant;
let api: ApiClient;
let john: string;

beforeAll(async () => {
  t = await createTenant(app, { clients: CLIENTS, portal: PORTAL });
  api = await t.client();
  john = await subject(api, 'E-1', 'John Carpenter', 'john@example.org');
});

describe('POST /api/v1/subject/{id}/invite: self access (D9)', () => {
  it('without a body invites the subject itself, with its e-mail and display name from the configured fields', async () => {
    const r = await api.post(invitePath(john));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual([
      { id: expect.any(String), displayName: 'John Carpenter', email: 'john@example.org', inviteMethod: 'SelfAccess' },
    ]);
    expect(Object.keys(r.body[0])).toEqual(['id', 'displayName', 'email', 'inviteMethod']);
  });

  it('is idempotent: null, an empty body and no body again answer the same user, once', async () => {
    const first = (await api.post(invitePath(john))).body[0];
    for (const raw of ['null', '', undefined]) {
      const r = await inviteRaw(api, john, raw);
      expect(r.status, `${raw}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.body).toEqual([first]);
    }
    expect(await listed(api, john)).toEqual([first]);
  });

  it('takes ExternalId as the display name when the display-name field is empty (D3)', async () => {
    const fields = [...(tenantConfig().subjectFields as object[]), { key: 'nickname', name: 'Nickname', dataType: 'String' }];
    const other = await createTenant(app, { subjectFields: fields, portal: { ...PORTAL, displayNameFieldKey: 'nickname' } });
    const oapi = await other.client();
    const plain = await subject(oapi, 'E-77', 'Mary Major', 'mary@example.org');
    const named = await subject(oapi, 'E-78', 'Max Mustermann', 'max@example.org', [sv('nickname', 'Maxi')]);
    expect((await oapi.post(invitePath(plain))).body[0]).toMatchObject({
      displayName: 'E-77',
      email: 'mary@example.org',
      inviteMethod: 'SelfAccess',
    });
    expect((await oapi.post(invitePath(named))).body[0]).toMatchObject({ displayName: 'Maxi', inviteMethod: 'SelfAccess' });
  });

  // P42: one self-access user per subject.
  it("after the subject's e-mail changed, a new invitation replaces the self-access user", async () => {
    const id = await subject(api, 'E-2', 'Jane Roe', 'jane@example.org');
    const before = (await api.post(invitePath(id))).body[0];
    expect((await api.patch(`/api/v2/subject/${id}`, { CustomFields: [sv('email', 'jane.roe@example.org')] })).status).toBe(200);
    const after = (await api.post(invitePath(id))).body[0];
    expect(after).toMatchObject({ email: 'jane.roe@example.org', inviteMethod: 'SelfAccess' });
    expect(after.id).not.toBe(before.id);
    expect(emailsOf(await listed(api, id))).toEqual(['jane.roe@example.org']);
  });
});

describe('POST /api/v1/subject/{id}/invite: third parties (D9)', () => {
  let id: string;
  beforeAll(async () => {
    id = await subject(api, 'E-3', 'Rita Third', 'rita@example.org');
  });

  it('invites each e-mail of the array as a third-party user whose display name is the e-mail', async () => {
    const r = await api.post(invitePath(id), ['anna@relatives.example', 'Bert@Relatives.example']);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual([
      { id: expect.any(String), displayName: 'anna@relatives.example', email: 'anna@relatives.example', inviteMethod: 'ThirdParty' },
      { id: expect.any(String), displayName: 'Bert@Relatives.example', email: 'Bert@Relatives.example', inviteMethod: 'ThirdParty' },
    ]);
  });

  // P41: e-mail addresses compare case-insensitively as a whole.
  it('is idempotent per (subject, e-mail), comparing e-mails case-insensitively; answers every user the call names, in order', async () => {
    const before = new Map((await listed(api, id)).map((u) => [u.email.toLowerCase(), u]));
    const r = await api.post(invitePath(id), [
      'bert@relatives.example',
      'ANNA@relatives.example',
      'carl@relatives.example',
      'Carl@relatives.example',
    ]);
    expect(r.status).toBe(200);
    expect(r.body.map((u: any) => u.email)).toEqual(['Bert@Relatives.example', 'anna@relatives.example', 'carl@relatives.example']);
    expect(r.body[0]).toEqual(before.get('bert@relatives.example'));
    expect(r.body[1]).toEqual(before.get('anna@relatives.example'));
    expect(emailsOf(await listed(api, id))).toEqual(['anna@relatives.example', 'Bert@Relatives.example', 'carl@relatives.example']);
  });

  it('concurrent invitations of one address create one user and queue one mail', async () => {
    const cid = await subject(api, 'E-10', 'Cora Concurrent', 'cora@example.org');
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        i % 3 === 2 ? api.post(invitePath(cid)) : api.post(invitePath(cid), [i % 2 ? 'Same@relatives.example' : 'same@relatives.example']),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(new Set(answers.filter((_, i) => i % 3 !== 2).map((a) => a.body[0].id)).size).toBe(1);
    expect(new Set(answers.filter((_, i) => i % 3 === 2).map((a) => a.body[0].id)).size).toBe(1);
    const mails = (
      await api.gql(`{ mailOutbox { messages(first: 1000) { edges { node { recipient } } } } }`)
    ).body.data.mailOutbox.messages.edges.map((e: any) => e.node.recipient.toLowerCase());
    expect(mails.filter((r: string) => r === 'same@relatives.example' || r === 'cora@example.org')).toHaveLength(2);
  });

  it('the same subject can be invited for itself and for third parties; other subjects are separate', async () => {
    await api.post(invitePath(id));
    const other = await subject(api, 'E-4', 'Otto Other', 'otto@example.org');
    const r = await api.post(invitePath(other), ['anna@relatives.example']);
    expect(r.body[0].id).not.toBe((await listed(api, id)).find((u) => u.email === 'anna@relatives.example').id);
    expect(emailsOf(await listed(api, id))).toEqual([
      'anna@relatives.example',
      'Bert@Relatives.example',
      'carl@relatives.example',
      'rita@example.org',
    ]);
    expect(emailsOf(await listed(api, other))).toEqual(['anna@relatives.example']);
  });

  // P39: [] is third-party access for nobody.
  it('an empty array is third-party access for nobody: 200 []', async () => {
    const r = await api.post(invitePath(id), []);
    expect(r.status).toBe(200);
    expect(r.body).toEqual([]);
  });

  it('a malformed e-mail is 400 naming its index, and nothing is written (D5)', async () => {
    const count = (await listed(api, id)).length;
    const r = await api.post(invitePath(id), ['dora@relatives.example', 'not-an-e-mail', 'also bad@x']);
    const body = expectValidation(r, '[1]', '[2]');
    expect(Object.keys(body.errors!)).toEqual(['[1]', '[2]']);
    expect((await listed(api, id)).length).toBe(count);
  });

  it('items that are not strings, or a body that is not an array, are 400', async () => {
    expectValidation(await api.post(invitePath(id), ['ok@relatives.example', 5]), '[1]');
    expectValidation(await api.post(invitePath(id), { emails: ['ok@relatives.example'] }), '$');
    expectProblem(await inviteRaw(api, id, '[not json'), 400);
    expectValidation(await api.post(invitePath(id), ['bad\u0000@relatives.example']), '[0]');
  });

  it('a non-JSON content type is 415', async () => {
    expectProblem(await api.request('POST', invitePath(id), { raw: 'x@y.org', headers: { 'content-type': 'text/plain' } }), 415);
  });
});

describe('invite and remove: 404, 409 and 403', () => {
  let noPortal: TestTenant;
  let selfOnly: TestTenant;
  let thirdOnly: TestTenant;
  beforeAll(async () => {
    noPortal = await createTenant(app, { clients: CLIENTS });
    selfOnly = await createTenant(app, {
      clients: CLIENTS,
      portal: { ...PORTAL, thirdPartyAccessEnabled: false, invitationFieldKeys: [] },
    });
    thirdOnly = await createTenant(app, { clients: CLIENTS, portal: { ...PORTAL, selfAccessEnabled: false } });
  });

  it("404 for an unknown subject, a non-UUID id and another tenant's subject (D2, D7)", async () => {
    for (const bad of [randomUUID(), 'not-a-uuid', 'U3ViamVjdDox']) {
      expectProblem(await api.post(invitePath(bad)), 404);
      expectProblem(await api.post(invitePath(bad), ['x@example.org']), 404);
      expectProblem(await api.delete(invitePath(bad)), 404);
      expectProblem(await api.get(usersPath(bad)), 404);
    }
    const foreign = await subject(await noPortal.client(), 'F-1', 'Foreign', 'f@example.org');
    expectProblem(await api.post(invitePath(foreign)), 404);
    expectProblem(await api.delete(invitePath(foreign)), 404);
    expectProblem(await api.get(usersPath(foreign)), 404);
  });

  it('409 when the portal is not configured (no portal block), for every kind of invitation and removal', async () => {
    const napi = await noPortal.client();
    const id = await subject(napi, 'N-1', 'Nora None', 'nora@example.org');
    for (const r of [
      await napi.post(invitePath(id)),
      await napi.post(invitePath(id), ['x@example.org']),
      await napi.delete(invitePath(id)),
      await napi.delete(`${invitePath(id)}?thirdPartyUserEmails=x@example.org`),
    ]) {
      expect(expectProblem(r, 409).detail).toMatch(/not configured/);
    }
  });

  it('the portal-users list of a tenant without a portal is an empty page (D9)', async () => {
    const napi = await noPortal.client();
    const id = await subject(napi, 'N-2', 'Ned None', 'ned@example.org');
    const r = await napi.get(usersPath(id));
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      pageInfo: { hasNextPage: false, hasPreviousPage: false, startCursor: null, endCursor: null, totalCount: 0 },
      edges: [],
    });
    expectValidation(await napi.get(usersPath(id, '?First=1001')), 'First');
  });

  it('409 when the needed access kind is disabled', async () => {
    const sapi = await selfOnly.client();
    const s = await subject(sapi, 'S-1', 'Sam Self', 'sam@example.org');
    expect(expectProblem(await sapi.post(invitePath(s), ['x@example.org']), 409).detail).toMatch(/Third-party access/);
    expect(expectProblem(await sapi.delete(`${invitePath(s)}?thirdPartyUserEmails=x@example.org`), 409).detail).toMatch(
      /Third-party access/,
    );
    expect((await sapi.post(invitePath(s))).status).toBe(200);
    expect((await sapi.delete(invitePath(s))).status).toBe(200);

    const tapi = await thirdOnly.client();
    const u = await subject(tapi, 'T-1', 'Tom Third', 'tom@example.org');
    expect(expectProblem(await tapi.post(invitePath(u)), 409).detail).toMatch(/Self access/);
    expect(expectProblem(await tapi.delete(invitePath(u)), 409).detail).toMatch(/Self access/);
    expect((await tapi.post(invitePath(u), ['x@example.org'])).status).toBe(200);
    expect((await tapi.delete(`${invitePath(u)}?thirdPartyUserEmails=x@example.org`)).status).toBe(200);
  });

  it('409 when the subject lacks a value of one of invitationFieldKeys, for self access and third parties alike', async () => {
    const id = await subject(api, 'E-5', 'Noah Nomail');
    const self = expectProblem(await api.post(invitePath(id)), 409);
    expect(self.detail).toMatch(/'email'/);
    expectProblem(await api.post(invitePath(id), ['x@example.org']), 409);
    expect(await listed(api, id)).toEqual([]);
  });

  it("409 for self access when the subject's e-mail field holds no valid address", async () => {
    const sapi = await selfOnly.client();
    const none = await subject(sapi, 'S-2', 'Sue Nomail');
    const bad = await subject(sapi, 'S-3', 'Sid Bad', 'not an address');
    expect(expectProblem(await sapi.post(invitePath(none)), 409).detail).toMatch(/emailFieldKey/);
    expectProblem(await sapi.post(invitePath(bad)), 409);
  });

  it('403 without the permission, before 404 (D4): Create, Delete and View:SubjectAccessInvite', async () => {
    const denied = await as(t, 'no-portal');
    for (const id of [john, randomUUID(), 'not-a-uuid']) {
      expectProblem(await denied.post(invitePath(id)), 403);
      expectProblem(await denied.post(invitePath(id), ['x@example.org']), 403);
      expectProblem(await denied.delete(invitePath(id)), 403);
      expectProblem(await denied.get(usersPath(id)), 403);
    }
    // Each permission opens exactly its endpoint.
    const viewer = await as(t, 'viewer');
    expect((await viewer.get(usersPath(john))).status).toBe(200);
    expectProblem(await viewer.post(invitePath(john)), 403);
    expectProblem(await viewer.delete(invitePath(john)), 403);
    const inviter = await as(t, 'inviter');
    expect((await inviter.post(invitePath(john))).status).toBe(200);
    expectProblem(await inviter.get(usersPath(john)), 403);
    const remover = await as(t, 'remover');
    expect((await remover.delete(`${invitePath(john)}?thirdPartyUserEmails=nobody@example.org`)).status).toBe(200);
    expectProblem(await remover.post(invitePath(john)), 403);
  });

  // P40: the order of checks: 403, 404, 400, 409.
  it('400 for a malformed e-mail comes after 404 and before 409 (the order: 403, 404, 400, 409)', async () => {
    expectProblem(await api.post(invitePath(randomUUID()), ['bad']), 404);
    const napi = await noPortal.client();
    const id = await subject(napi, 'N-3', 'Nils None', 'nils@example.org');
    expectValidation(await napi.post(invitePath(id), ['bad']), '[0]');
  });
});

describe('DELETE /api/v1/subject/{id}/invite (D9)', () => {
  let id: string;
  const THREE = ['one@relatives.example', 'two@relatives.example', 'three@relatives.example'];
  beforeAll(async () => {
    id = await subject(api, 'E-6', 'Dora Delete', 'dora@example.org');
    expect((await api.post(invitePath(id))).status).toBe(200);
    expect((await api.post(invitePath(id), THREE)).status).toBe(200);
  });

  it('removes one third-party user among three, and nobody else', async () => {
    const r = await api.delete(`${invitePath(id)}?thirdPartyUserEmails=TWO@relatives.example`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual([
      { id: expect.any(String), displayName: 'two@relatives.example', email: 'two@relatives.example', inviteMethod: 'ThirdParty' },
    ]);
    expect(emailsOf(await listed(api, id))).toEqual(['dora@example.org', 'one@relatives.example', 'three@relatives.example']);
  });

  it('takes the e-mails repeated or comma-separated, in any casing of the name; unknown ones are ignored', async () => {
    await api.post(invitePath(id), ['four@relatives.example']);
    const r = await api.delete(
      `${invitePath(id)}?ThirdPartyUserEmails=one@relatives.example,unknown@relatives.example&thirdpartyuseremails=four@relatives.example&thirdPartyUserEmails=not-an-e-mail`,
    );
    expect(r.status).toBe(200);
    expect(emailsOf(r.body)).toEqual(['four@relatives.example', 'one@relatives.example']);
    expect(emailsOf(await listed(api, id))).toEqual(['dora@example.org', 'three@relatives.example']);
  });

  it('third-party removal never removes the self-access user, even with its e-mail', async () => {
    const r = await api.delete(`${invitePath(id)}?thirdPartyUserEmails=dora@example.org`);
    expect(r.body).toEqual([]);
    expect(emailsOf(await listed(api, id))).toEqual(['dora@example.org', 'three@relatives.example']);
  });

  it('without thirdPartyUserEmails removes the self-access user only; again: nothing to remove, still 200', async () => {
    const r = await api.delete(invitePath(id));
    expect(r.status).toBe(200);
    expect(r.body).toEqual([expect.objectContaining({ email: 'dora@example.org', inviteMethod: 'SelfAccess' })]);
    expect(emailsOf(await listed(api, id))).toEqual(['three@relatives.example']);
    const again = await api.delete(invitePath(id));
    expect(again.status).toBe(200);
    expect(again.body).toEqual([]);
  });

  it('a removed user invited again is a new user', async () => {
    const before = (await listed(api, id))[0];
    await api.delete(`${invitePath(id)}?thirdPartyUserEmails=three@relatives.example`);
    const again = (await api.post(invitePath(id), ['three@relatives.example'])).body[0];
    expect(again.email).toBe('three@relatives.example');
    expect(again.id).not.toBe(before.id);
  });
});

describe('GET /api/v1/subject/{id}/subjectAccessUsers: the lower-camel envelope, paged per D6', () => {
  let id: string;
  let all: string[];
  beforeAll(async () => {
    id = await subject(api, 'E-7', 'Paula Paged', 'paula@example.org');
    // 25 third parties, named out of order and in mixed case: the list is by e-mail, case-insensitively.
    const emails = Array.from({ length: 25 }, (_, i) => `${i % 2 ? 'P' : 'p'}erson${String(24 - i).padStart(2, '0')}@relatives.example`);
    expect((await api.post(invitePath(id), emails)).status).toBe(200);
    all = [...emails].sort((a, b) => (a.toLowerCase() < b.toLowerCase() ? -1 : 1));
  });

  it('answers exactly the lower-camel envelope; First defaults to 20; ordered by e-mail', async () => {
    const r = await api.get(usersPath(id));
    expect(r.status).toBe(200);
    expect(Object.keys(r.body).sort()).toEqual(['edges', 'pageInfo']);
    expect(Object.keys(r.body.pageInfo).sort()).toEqual(['endCursor', 'hasNextPage', 'hasPreviousPage', 'startCursor', 'totalCount']);
    expect(r.body.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: false, totalCount: 25 });
    expect(r.body.edges).toHaveLength(20);
    for (const e of r.body.edges) {
      expect(Object.keys(e).sort()).toEqual(['cursor', 'node']);
      expect(Object.keys(e.node)).toEqual(['id', 'displayName', 'email', 'inviteMethod']);
    }
    expect(r.body.edges.map((e: any) => e.node.email)).toEqual(all.slice(0, 20));
    expect(r.body.pageInfo.startCursor).toBe(r.body.edges[0].cursor);
    expect(r.body.pageInfo.endCursor).toBe(r.body.edges[19].cursor);
  });

  it('pages forward with First/After and backward with Last/Before, with exact flags', async () => {
    const p1 = (await api.get(usersPath(id, '?First=10'))).body;
    const p2 = (await api.get(usersPath(id, `?First=10&After=${p1.pageInfo.endCursor}`))).body;
    const p3 = (await api.get(usersPath(id, `?first=10&after=${p2.pageInfo.endCursor}`))).body;
    expect([...p1.edges, ...p2.edges, ...p3.edges].map((e: any) => e.node.email)).toEqual(all);
    expect(p2.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: true, totalCount: 25 });
    expect(p3.pageInfo).toMatchObject({ hasNextPage: false, hasPreviousPage: true });
    expect(p3.edges).toHaveLength(5);

    const last = (await api.get(usersPath(id, '?Last=10'))).body;
    expect(last.edges.map((e: any) => e.node.email)).toEqual(all.slice(15));
    expect(last.pageInfo).toMatchObject({ hasNextPage: false, hasPreviousPage: true });
    const before = (await api.get(usersPath(id, `?Last=10&Before=${last.pageInfo.startCursor}`))).body;
    expect(before.edges.map((e: any) => e.node.email)).toEqual(all.slice(5, 15));
    expect(before.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: true });
    const start = (await api.get(usersPath(id, `?Last=10&Before=${before.pageInfo.startCursor}`))).body;
    expect(start.edges.map((e: any) => e.node.email)).toEqual(all.slice(0, 5));
    expect(start.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: false });
  });

  // P43: the portal users list orders by Email (default) or DisplayName.
  it('orders descending and by DisplayName on request; an unknown OrderBy is 400', async () => {
    const desc = (await api.get(usersPath(id, '?First=1000&OrderDirection=descending'))).body;
    expect(desc.edges.map((e: any) => e.node.email)).toEqual([...all].reverse());
    const byName = (await api.get(usersPath(id, '?First=3&OrderBy=DisplayName'))).body;
    expect(byName.edges.map((e: any) => e.node.displayName)).toEqual([...all].sort().slice(0, 3));
    expectValidation(await api.get(usersPath(id, '?OrderBy=Grade')), 'OrderBy');
  });

  it('bounds: First 0-1000, not with Last, cursors of this list only (400)', async () => {
    expect((await api.get(usersPath(id, '?First=1000'))).body.edges).toHaveLength(25);
    expect((await api.get(usersPath(id, '?First=0'))).body).toMatchObject({
      edges: [],
      pageInfo: { hasNextPage: true, totalCount: 25, startCursor: null, endCursor: null },
    });
    expectValidation(await api.get(usersPath(id, '?First=1001')), 'First');
    expectValidation(await api.get(usersPath(id, '?First=-1')), 'First');
    expectValidation(await api.get(usersPath(id, '?Last=1001')), 'Last');
    expectValidation(await api.get(usersPath(id, '?First=1&Last=1')), 'Last');
    expectValidation(await api.get(usersPath(id, '?First=ten')), 'First');
    expectValidation(await api.get(usersPath(id, '?After=garbage!')), 'After');
    expectValidation(await api.get(usersPath(id, '?Before=bm90IGEgY3Vyc29y')), 'Before');
    // Another subject's cursor, and a subject list's cursor, are not positions of this list (D6).
    const other = (await api.get(usersPath(john, '?First=1'))).body.pageInfo.endCursor;
    expectValidation(await api.get(usersPath(id, `?After=${other}`)), 'After');
    const subjects = (await api.get('/api/v2/subject?First=1')).body.PageInfo.EndCursor;
    expectValidation(await api.get(usersPath(id, `?After=${subjects}`)), 'After');
    // A DisplayName cursor is not an Email position.
    const byName = (await api.get(usersPath(id, '?First=1&OrderBy=DisplayName'))).body.pageInfo.endCursor;
    expectValidation(await api.get(usersPath(id, `?After=${byName}`)), 'After');
  });
});

describe('GraphQL: the same operations (D11, D4)', () => {
  const PAGE = `pageInfo { hasNextPage hasPreviousPage startCursor endCursor } totalCount edges { cursor node { id displayName email inviteMethod } }`;
  let id: string;
  beforeAll(async () => {
    id = await subject(api, 'E-8', 'Gina Graph', 'gina@example.org');
  });

  it('inviteSubjectToPortal: emails absent or null is self access; a list is third parties; idempotent', async () => {
    const M = `mutation($input: InviteSubjectToPortalInput!) { inviteSubjectToPortal(input: $input) { portalUsers { id displayName email inviteMethod } subject { externalId } } }`;
    const self = await api.gql(M, { input: { subjectId: id } });
    expect(self.body.errors).toBeUndefined();
    expect(self.body.data.inviteSubjectToPortal).toEqual({
      portalUsers: [{ id: expect.any(String), displayName: 'Gina Graph', email: 'gina@example.org', inviteMethod: 'SelfAccess' }],
      subject: { externalId: 'E-8' },
    });
    const again = await api.gql(M, { input: { subjectId: id, emails: null } });
    expect(again.body.data.inviteSubjectToPortal.portalUsers).toEqual(self.body.data.inviteSubjectToPortal.portalUsers);
    const third = await api.gql(M, { input: { subjectId: id, emails: ['hugo@relatives.example', 'ida@relatives.example'] } });
    expect(third.body.data.inviteSubjectToPortal.portalUsers.map((u: any) => [u.email, u.inviteMethod])).toEqual([
      ['hugo@relatives.example', 'ThirdParty'],
      ['ida@relatives.example', 'ThirdParty'],
    ]);
    // The REST route answers the very same users.
    const rest = await api.post(invitePath(id), ['hugo@relatives.example', 'ida@relatives.example']);
    expect(rest.body).toEqual(third.body.data.inviteSubjectToPortal.portalUsers);
  });

  it('Subject.portalUsers and subjectPortalUsers page exactly like the REST list, cursors included', async () => {
    const rest = (await api.get(usersPath(id, '?First=2'))).body;
    const q = await api.gql(
      `query($id: ID!) { subject(id: $id) { portalUsers(first: 2) { ${PAGE} } } subjectPortalUsers(subjectId: $id, first: 2) { ${PAGE} } }`,
      { id },
    );
    expect(q.body.errors).toBeUndefined();
    for (const conn of [q.body.data.subject.portalUsers, q.body.data.subjectPortalUsers]) {
      expect(conn.totalCount).toBe(rest.pageInfo.totalCount);
      expect(conn.pageInfo).toEqual({
        hasNextPage: rest.pageInfo.hasNextPage,
        hasPreviousPage: rest.pageInfo.hasPreviousPage,
        startCursor: rest.pageInfo.startCursor,
        endCursor: rest.pageInfo.endCursor,
      });
      expect(conn.edges).toEqual(rest.edges);
    }
    const next = await api.gql(
      `query($id: ID!, $after: String) { subject(id: $id) { portalUsers(first: 2, after: $after) { ${PAGE} } } }`,
      { id, after: rest.pageInfo.endCursor },
    );
    const restNext = (await api.get(usersPath(id, `?First=2&After=${rest.pageInfo.endCursor}`))).body;
    expect(next.body.data.subject.portalUsers.edges).toEqual(restNext.edges);
  });

  it('paging bounds are errors on the field, in the GraphQL way', async () => {
    const r = await api.gql(`query($id: ID!) { subject(id: $id) { externalId portalUsers(first: 1001) { totalCount } } }`, { id });
    expect(r.status).toBe(200);
    expect(r.body.data.subject).toEqual({ externalId: 'E-8', portalUsers: null });
    expect(r.body.errors[0].extensions).toMatchObject({ code: 'BAD_REQUEST', status: 400 });
    const both = await api.gql(`query($id: ID!) { subjectPortalUsers(subjectId: $id, first: 1, last: 1) { totalCount } }`, { id });
    expect(both.body.errors[0].extensions.code).toBe('BAD_REQUEST');
  });

  it('a malformed e-mail names emails[i]; 409 and 404 carry their codes', async () => {
    const M = `mutation($input: InviteSubjectToPortalInput!) { inviteSubjectToPortal(input: $input) { portalUsers { id } } }`;
    const bad = await api.gql(M, { input: { subjectId: id, emails: ['ok@relatives.example', 'nope'] } });
    expect(bad.body.errors[0].extensions).toMatchObject({
      code: 'BAD_REQUEST',
      status: 400,
      errors: { 'emails[1]': [expect.any(String)] },
    });
    const missing = await subject(api, 'E-9', 'Mo Nomail');
    expect((await api.gql(M, { input: { subjectId: missing } })).body.errors[0].extensions).toMatchObject({
      code: 'CONFLICT',
      status: 409,
    });
    expect((await api.gql(M, { input: { subjectId: randomUUID() } })).body.errors[0].extensions).toMatchObject({
      code: 'NOT_FOUND',
      status: 404,
    });
    const unknown = await api.gql(`query($id: ID!) { subjectPortalUsers(subjectId: $id) { totalCount } }`, { id: randomUUID() });
    expect(unknown.body.errors[0].extensions.code).toBe('NOT_FOUND');
  });

  it('removeSubjectPortalAccess removes the named third parties, or the self-access user', async () => {
    const M = `mutation($input: RemoveSubjectPortalAccessInput!) { removeSubjectPortalAccess(input: $input) { portalUsers { email inviteMethod } } }`;
    const third = await api.gql(M, {
      input: { subjectId: id, thirdPartyUserEmails: ['IDA@relatives.example', 'nobody@relatives.example'] },
    });
    expect(third.body.data.removeSubjectPortalAccess.portalUsers).toEqual([{ email: 'ida@relatives.example', inviteMethod: 'ThirdParty' }]);
    const self = await api.gql(M, { input: { subjectId: id } });
    expect(self.body.data.removeSubjectPortalAccess.portalUsers).toEqual([{ email: 'gina@example.org', inviteMethod: 'SelfAccess' }]);
    expect(emailsOf(await listed(api, id))).toEqual(['hugo@relatives.example']);
  });

  it('FORBIDDEN on the field only, with HTTP 200 and the other fields answered (D4)', async () => {
    const denied = await as(t, 'no-portal');
    const q = await denied.gql(
      `query($id: ID!) { subject(id: $id) { externalId portalUsers { totalCount } } mailOutbox { pending } subjectPortalUsers(subjectId: $id) { totalCount } }`,
      { id },
    );
    expect(q.status).toBe(200);
    expect(q.body.data).toEqual({ subject: { externalId: 'E-8', portalUsers: null }, mailOutbox: null, subjectPortalUsers: null });
    expect(q.body.errors.map((e: any) => [e.path.join('.'), e.extensions.code]).sort()).toEqual([
      ['mailOutbox', 'FORBIDDEN'],
      ['subject.portalUsers', 'FORBIDDEN'],
      ['subjectPortalUsers', 'FORBIDDEN'],
    ]);
    for (const m of [
      `mutation { inviteSubjectToPortal(input: { subjectId: "${id}" }) { portalUsers { id } } }`,
      `mutation { removeSubjectPortalAccess(input: { subjectId: "${id}" }) { portalUsers { id } } }`,
    ]) {
      const r = await denied.gql(m);
      expect(r.status).toBe(200);
      expect(r.body.errors[0].extensions.code).toBe('FORBIDDEN');
    }
    // View:SubjectAccessInvite alone reads the list but not the subject's other fields through the payload.
    const viewer = await as(t, 'viewer');
    expect(
      (await viewer.gql(`query($id: ID!) { subjectPortalUsers(subjectId: $id) { totalCount } }`, { id })).body.data.subjectPortalUsers
        .totalCount,
    ).toBe(1);
  });
});

describe('mailOutbox (operations, D9)', () => {
  // P46: mailOutbox needs View:SubjectAccessInvite and counts the tenant's mails only.
  it("counts the tenant's invitations; without SMTP_URL they are logged and count as sent", async () => {
    const other = await createTenant(app, { portal: PORTAL });
    const oapi = await other.client();
    const id = await subject(oapi, 'M-1', 'Mia Mail', 'mia@example.org');
    await oapi.post(invitePath(id));
    await oapi.post(invitePath(id), ['x1@relatives.example', 'x2@relatives.example']);
    const Q = `{ mailOutbox { pending retrying dead sent cancelled lastError messages(first: 10) { totalCount edges { node { recipient status attempts messageId sentAt } } } } }`;
    await eventually(async () => (await oapi.gql(Q)).body.data.mailOutbox.sent === 3, 20_000);
    const outbox = (await oapi.gql(Q)).body.data.mailOutbox;
    expect(outbox).toMatchObject({ pending: 0, retrying: 0, dead: 0, sent: 3, cancelled: 0, lastError: null });
    expect(outbox.messages.totalCount).toBe(3);
    // Queue order: by creation; the two of one call were queued together.
    expect(outbox.messages.edges[0].node.recipient).toBe('mia@example.org');
    expect(outbox.messages.edges.map((e: any) => e.node.recipient).sort()).toEqual([
      'mia@example.org',
      'x1@relatives.example',
      'x2@relatives.example',
    ]);
    for (const e of outbox.messages.edges)
      expect(e.node).toMatchObject({
        status: 'SENT',
        attempts: 1,
        messageId: expect.stringMatching(/^<[0-9a-f-]{36}@localhost>$/),
        sentAt: expect.any(String),
      });
    // Tenants see only their own outbox (D2).
    const mine = (
      await api.gql(`{ mailOutbox { messages(first: 1000) { edges { node { recipient } } } } }`)
    ).body.data.mailOutbox.messages.edges.map((e: any) => e.node.recipient);
    expect(mine).not.toContain('mia@example.org');
  });
});
