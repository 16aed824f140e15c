import { request } from 'node:http';
import { serverAudits } from 'graphql-http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, createTenant, startApp } from './helpers.js';

// GraphQL over HTTP (issue 18, P62): request errors answer 4xx under application/graphql-response+json
// (also the default without Accept), 200 under application/json; field errors answer 200 with data (D4).

let app: TestApp;
let token: string;

beforeAll(async () => {
  app = await startApp();
  token = await (await createTenant(app)).token();
});
afterAll(() => app?.close());

/** fetch with the bearer token /graphql needs (D4); the caller's headers otherwise as given. */
const authed = (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

const post = (body: unknown, accept?: string) =>
  authed(`${app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(accept ? { accept } : {}) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

/**
 * POST without any Accept header (fetch would send `Accept: *\/*`): status, content type and parsed body.
 */
const postWithoutAccept = (body: unknown) =>
  new Promise<{ status: number; type: string; json: any }>((resolve, reject) => {
    const req = request(
      `${app.url}/graphql`,
      { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, type: res.headers['content-type'] ?? '', json: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });

describe('graphql-http server audits', () => {
  it('every MUST and SHOULD audit passes (P62)', async () => {
    const results = await Promise.all(serverAudits({ url: () => `${app.url}/graphql`, fetchFn: authed }).map((a) => a.fn()));
    expect(results.length).toBeGreaterThan(50);
    // Errors are failed MUSTs, warnings failed SHOULDs, notices failed MAYs: none of them.
    const failed = results.filter((r) => r.status !== 'ok').map((r) => `${r.status} ${r.id} ${r.name}: ${'reason' in r ? r.reason : ''}`);
    expect(failed).toEqual([]);
  });
});

describe('request errors (P62)', () => {
  const GRAPHQL_RESPONSE = 'application/graphql-response+json';
  // The spec's request errors answer 200 under application/json (legacy clients); Yoga's unknown operation
  // name is a 400 whatever the Accept.
  const cases: [string, unknown, string, number?][] = [
    ['a parse error', { query: '{' }, 'GRAPHQL_PARSE_FAILED'],
    ['a validation error', { query: '{ noSuchField }' }, 'GRAPHQL_VALIDATION_FAILED'],
    [
      'a variable that does not coerce',
      { query: 'query($n: Int!) { subjects(first: $n) { totalCount } }', variables: { n: 'x' } },
      'GRAPHQL_VALIDATION_FAILED',
    ],
    ['an unknown operation name', { query: 'query A { __typename }', operationName: 'B' }, 'OPERATION_RESOLUTION_FAILURE', 400],
  ];
  for (const [what, body, code, legacyStatus = 200] of cases) {
    it(`${what}: 400 without data under ${GRAPHQL_RESPONSE} (and without Accept), ${legacyStatus} under application/json`, async () => {
      const res = await post(body, GRAPHQL_RESPONSE);
      const answers = [
        { status: res.status, type: res.headers.get('content-type') ?? '', json: await res.json() },
        await postWithoutAccept(body),
      ];
      for (const [i, answer] of answers.entries()) {
        expect(answer.status, i === 0 ? GRAPHQL_RESPONSE : 'no Accept').toBe(400);
        expect(answer.type).toContain(GRAPHQL_RESPONSE);
        expect(answer.json).not.toHaveProperty('data');
        expect(answer.json.errors[0].extensions).toMatchObject({ code, status: 400 });
        expect(answer.json.errors[0].extensions).not.toHaveProperty('http');
      }
      const legacy = await post(body, 'application/json');
      expect(legacy.status).toBe(legacyStatus);
      expect(legacy.headers.get('content-type')).toContain('application/json');
      expect(await legacy.json()).toMatchObject({ errors: [{ extensions: { code, status: 400 } }] });
    });
  }

  it('a mutation over GET: 405 with Allow: POST, whatever the Accept', async () => {
    for (const accept of [GRAPHQL_RESPONSE, 'application/json']) {
      const res = await authed(`${app.url}/graphql?query=mutation+{+__typename+}`, { headers: { accept } });
      expect(res.status, accept).toBe(405);
      expect(res.headers.get('allow')).toBe('POST');
      expect(await res.json()).toMatchObject({ errors: [{ extensions: { status: 405 } }] });
    }
  });

  it('a non-string operationName: 400, whatever the Accept', async () => {
    for (const operationName of [{ obj: 'ect' }, 0, false, ['array']]) {
      for (const accept of [GRAPHQL_RESPONSE, 'application/json']) {
        const res = await post({ query: 'query Q { __typename }', operationName }, accept);
        expect(res.status, `${JSON.stringify(operationName)} ${accept}`).toBe(400);
        expect(await res.json()).toMatchObject({ errors: [{ extensions: { code: 'BAD_REQUEST' } }] });
      }
    }
  });

  it('a field error still answers 200 with data (D4), under either media type', async () => {
    const body = { query: '{ __typename node(id: "not-a-global-id") { id } }' };
    const answers = [];
    for (const accept of [GRAPHQL_RESPONSE, 'application/json']) {
      const res = await post(body, accept);
      answers.push({ status: res.status, json: await res.json() });
    }
    answers.push(await postWithoutAccept(body));
    for (const { status, json } of answers) {
      expect(status).toBe(200);
      expect(json.data).toEqual({ __typename: 'Query', node: null });
      expect(json.errors).toMatchObject([{ path: ['node'], extensions: { code: 'BAD_REQUEST' } }]);
    }
  });
});

describe('one answer per document (issue 18, part 2)', () => {
  // The second execution of a document runs compiled (graphql-jit); its errors must read as the first's.
  it('a failing document answers the same three times: interpreted, then compiled', async () => {
    const documents = [
      '{ __typename a: node(id: "not-a-global-id") { id } b: node(id: "x") { id } }',
      'query Q($id: ID!) {\n  __typename\n  node(id: $id) {\n    id\n  }\n}',
      '{ nodes(ids: ["nope", "neither"]) { id } }',
      // A request error: nothing executes (400), the same way both times.
      'query C($id: ID!, $n: Int!) { node(id: $id) { id } subjects(first: $n) { totalCount } }',
    ];
    for (const query of documents) {
      const answers: unknown[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await post(
          { query, ...(query.includes('$id') ? { variables: { id: 'not-a-global-id', n: 'x' } } : {}) },
          GRAPHQL_RESPONSE_TYPE,
        );
        answers.push({ status: res.status, body: await res.json() });
      }
      const first = answers[0] as { body: { errors: { locations?: unknown }[] } };
      expect(first.body.errors.length, query).toBeGreaterThan(0);
      for (const e of first.body.errors) expect(e.locations, query).toBeDefined();
      expect(answers[1], query).toEqual(answers[0]);
      expect(answers[2], query).toEqual(answers[0]);
    }
  });

  // The compiled runs (P48, P165) must answer every byte the interpreted run does: escapes, nulls, enums,
  // numbers, an interface's fragments, skipped fields, the JSON scalar.
  it('a successful document answers the same bytes three times: interpreted, then compiled', async () => {
    const upsert = `mutation U($input: UpsertSubjectInput!) { upsertSubject(input: $input) { subject { id } } }`;
    const names = ['Quote " back\\\\slash \\n tab\\t', 'Émile 😀 \u2028 </script>', 'plain'];
    const ids: string[] = [];
    for (const [i, name] of names.entries()) {
      const values = [
        { key: 'employeeNumber', value: { String: { value: `SER-${i}` } } },
        { key: 'fullName', value: { String: { value: name } } },
        ...(i === 2 ? [] : [{ key: 'grade', value: { Integer: { value: i + 7 } } }]),
        ...(i === 0 ? [{ key: 'skills', value: [{ String: { value: 'a"b' } }, { String: { value: '' } }] }] : []),
      ];
      const res = await post({ query: upsert, variables: { input: { customFieldValues: values } } });
      ids.push(((await res.json()) as any).data.upsertSubject.subject.id);
    }
    const documents = [
      `query L($skip: Boolean!) {
        subjects(first: 10, customFieldValueFilter: { match: EXACT_ANY, values: [{ key: "employeeNumber", values: ["SER-0", "SER-1", "SER-2"] }] }) {
          totalCount
          pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
          edges { cursor node { __typename id subjectId externalId
            later: customFieldValues { field { key name type required isArray } values { dataType valueText } }
            hidden: externalId @skip(if: $skip)
          } }
        }
      }`,
      `query N($ids: [ID!]!) { nodes(ids: $ids) { __typename id ... on Subject { externalId customFieldValues { values { valueText } } } } }`,
      '{ dataExtracts(first: 5) { totalCount edges { node { key name options } } } }',
    ];
    for (const query of documents) {
      const answers: string[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await post({ query, variables: { skip: true, ids } }, GRAPHQL_RESPONSE_TYPE);
        expect(res.status, query).toBe(200);
        answers.push(await res.text());
      }
      expect(JSON.parse(answers[0]!).data, query).toBeTruthy();
      expect(answers[1], query).toBe(answers[0]);
      expect(answers[2], query).toBe(answers[0]);
    }
  });

  // P165: compiled per operation. Keyed by the document alone, the third request below ran operation B,
  // compiled for the second, although it asked for A.
  it('a document with two operations runs the one each request names, compiled too', async () => {
    const query = 'query A { a: __typename } query B { b: subjects(first: 1) { totalCount } }';
    for (const operationName of ['A', 'B', 'A', 'B', 'A']) {
      const res = await post({ query, operationName }, GRAPHQL_RESPONSE_TYPE);
      expect(res.status).toBe(200);
      const { data } = (await res.json()) as { data: Record<string, unknown> };
      expect(Object.keys(data), operationName).toEqual([operationName.toLowerCase()]);
    }
  });

  // graphql-jit before 0.8.9 ran a mutation's own fields before those of its fragments (its issue 283):
  // the compiled run (the second) updated the subject before creating it.
  // P69: one graphql-jit, the one that keeps a mutation's order.
  it('mutation fields run in document order, fragments included, interpreted and compiled', async () => {
    const query = `
      mutation M($first: UpsertSubjectInput!, $second: UpsertSubjectInput!) {
        ...First
        second: upsertSubject(input: $second) { created subject { customFieldValues { field { key } values { valueText } } } }
      }
      fragment First on Mutation { first: upsertSubject(input: $first) { created } }`;
    const input = (n: number, name: string) => ({
      customFieldValues: [
        { key: 'employeeNumber', value: { String: { value: `ORDER-${n}` } } },
        { key: 'fullName', value: { String: { value: name } } },
      ],
    });
    for (let n = 0; n < 3; n++) {
      const res = await post({ query, variables: { first: input(n, 'One'), second: input(n, 'Two') } }, GRAPHQL_RESPONSE_TYPE);
      const { data } = (await res.json()) as { data: any };
      expect([data.first.created, data.second.created], `execution ${n + 1}`).toEqual([true, false]);
      const names = data.second.subject.customFieldValues.filter((v: any) => v.field.key === 'fullName');
      expect(names[0].values[0].valueText).toBe('Two');
    }
  });
});

const GRAPHQL_RESPONSE_TYPE = 'application/graphql-response+json';
