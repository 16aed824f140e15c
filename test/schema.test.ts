import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import {
  buildClientSchema,
  getIntrospectionQuery,
  isEnumType,
  isInputObjectType,
  isInterfaceType,
  isObjectType,
  lexicographicSortSchema,
  printSchema,
} from 'graphql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../db/migrations.js';
import { printedSchema, schema } from '../src/app/schema.js';
import { ApiClient, type TestApp, type TestTenant, createTenant, startApp } from './helpers.js';

// D11 GraphQL: the checked-in schema, the migrations list, the depth and cost limits, GraphiQL, the
// token requirement (D4) and Relay's node/nodes.

const root = path.resolve(import.meta.dirname, '..');

let app: TestApp;
let tenant: TestTenant;
let other: TestTenant;
let api: ApiClient;

beforeAll(async () => {
  app = await startApp();
  tenant = await createTenant(app, {
    structuralEntities: [
      { key: 'root', displayName: 'Root', structureTypeKey: 'company' },
      { key: 'dept', displayName: 'Dept', structureTypeKey: 'department', parentKey: 'root' },
      { key: 'team', displayName: 'Team', structureTypeKey: 'department', parentKey: 'dept' },
      { key: 'only-here', displayName: 'Only in the first tenant', structureTypeKey: 'company' },
    ],
  });
  // A second tenant with a key in common: a global id names a key, the tenant comes from the token (D2).
  other = await createTenant(app, { structuralEntities: [{ key: 'root', displayName: 'Other root', structureTypeKey: 'company' }] });
  api = await tenant.client();
});
afterAll(() => app?.close());

describe('checked-in artefacts', () => {
  // P95: the schema is what each domain's door registers.
  it('schema.graphql is the printed Pothos schema (run `npm run schema` when this fails)', async () => {
    const onDisk = await readFile(path.join(root, 'schema.graphql'), 'utf8');
    expect(onDisk).toBe(printedSchema());
  });

  it('schema.graphql is what a client introspects over HTTP, @defer and @stream included', async () => {
    const r = await api.gql(getIntrospectionQuery());
    expect(r.body.errors).toBeUndefined();
    const served = `${printSchema(lexicographicSortSchema(buildClientSchema(r.body.data)))}\n`;
    expect(served).toBe(await readFile(path.join(root, 'schema.graphql'), 'utf8'));
    expect(served).toMatch(/^directive @defer\(/m);
    expect(served).toMatch(/^directive @stream\(/m);
  });

  // P135: a client reads what each part means, its bounds and its permission in the schema itself.
  it('every type, field, argument, input field and enum value has a description', () => {
    const undescribed: string[] = [];
    for (const type of Object.values(schema.getTypeMap())) {
      if (type.name.startsWith('__')) continue;
      if (!type.description) undescribed.push(type.name);
      if (isObjectType(type) || isInterfaceType(type)) {
        for (const field of Object.values(type.getFields())) {
          if (!field.description) undescribed.push(`${type.name}.${field.name}`);
          for (const arg of field.args) if (!arg.description) undescribed.push(`${type.name}.${field.name}(${arg.name})`);
        }
      }
      if (isInputObjectType(type)) {
        for (const field of Object.values(type.getFields())) if (!field.description) undescribed.push(`${type.name}.${field.name}`);
      }
      if (isEnumType(type)) for (const value of type.getValues()) if (!value.description) undescribed.push(`${type.name}.${value.name}`);
    }
    expect(undescribed).toEqual([]);
  });

  it('every file in db/migrations/ is listed in db/migrations.ts under its name, and nothing else is', async () => {
    const files = (await readdir(path.join(root, 'db/migrations'))).filter((f) => /\.(ts|js|mjs)$/.test(f) && !f.endsWith('.d.ts'));
    expect(files.length).toBeGreaterThan(0);
    const names = files.map((f) => f.replace(/\.(ts|js|mjs)$/, '')).sort();
    expect(Object.keys(migrations).sort()).toEqual(names);
    for (const name of names) {
      const file = files.find((f) => f.replace(/\.(ts|js|mjs)$/, '') === name)!;
      const mod = (await import(/* @vite-ignore */ path.join(root, 'db/migrations', file))) as { up?: unknown };
      expect(typeof mod.up, name).toBe('function');
      expect(migrations[name]!.up, name).toBe(mod.up);
    }
  });
});

/** `{ structuralEntity(key) { parent { parent { ... { key } } } } }` with `n` levels of parent. */
function parentChain(n: number): string {
  return `{ structuralEntity(key: "team") { ${'parent { '.repeat(n)}key${' }'.repeat(n)} } }`;
}

describe('D11 depth and cost limits', () => {
  it('a query nested beyond GRAPHQL_MAX_DEPTH is rejected with a GraphQL error before execution', async () => {
    expect(app.config.GRAPHQL_MAX_DEPTH).toBe(20);
    const res = await api.gql(parentChain(30));
    expect([200, 400]).toContain(res.status);
    expect(res.body.data).toBeUndefined();
    expect(res.body.errors?.length).toBeGreaterThan(0);
    expect(res.body.errors![0]!.message).toMatch(/depth/i);
  });

  it('the depth limit also counts through fragments', async () => {
    const n = 30;
    const fragments = Array.from(
      { length: n },
      (_, i) => `fragment F${i} on StructuralEntity { key parent { ${i + 1 < n ? `...F${i + 1}` : 'key'} } }`,
    );
    const res = await api.gql(`{ structuralEntity(key: "team") { ...F0 } }\n${fragments.join('\n')}`);
    expect(res.body.data).toBeUndefined();
    expect(res.body.errors![0]!.message).toMatch(/depth/i);
  });

  it('relay-style nesting of depth 15 is still answered (D11: the limit is at least 15)', async () => {
    const res = await api.gql(parentChain(13));
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    // team → dept → root → null: the chain ends after two parents.
    expect(res.body.data).toEqual({ structuralEntity: { parent: { parent: { parent: null } } } });
    // Three connection levels (depth 13); small pages keep it within the cost limit.
    const relay = await api.gql(
      '{ structuralEntities(first: 2) { edges { node { children(first: 2) { edges { node { key children(first: 2) { edges { node { key parent { key } } } } } } } } } } }',
    );
    expect(relay.body.errors).toBeUndefined();
    // The first two by key: dept (with team under it) and only-here (no children).
    expect(relay.body.data.structuralEntities.edges.map((e: any) => e.node.children.edges.map((c: any) => c.node.key))).toEqual([
      ['team'],
      [],
    ]);
  });

  it('a costly query (large fan-out of nested pages) is rejected with a GraphQL error before execution', async () => {
    const nested = (n: number) =>
      `{ structuralEntities(first: ${n}) { edges { node { key children(first: ${n}) { edges { node { key children(first: ${n}) { edges { node { key } } } } } } } } } }`;
    const res = await api.gql(nested(1000));
    expect([200, 400]).toContain(res.status);
    expect(res.body.data).toBeUndefined();
    expect(res.body.errors?.length).toBeGreaterThan(0);
    expect(res.body.errors![0]!.message).toMatch(/cost/i);
    // The same shape with small pages is answered: the limit is about cost, not about the shape.
    const small = await api.gql(nested(2));
    expect(small.body.errors).toBeUndefined();
    expect(small.body.data.structuralEntities.edges.length).toBe(2);
  });

  it('a costly query (fan-out through aliases) is rejected with a GraphQL error before execution', async () => {
    const selection =
      'structuralEntities(first: 10) { totalCount edges { cursor node { id key displayName depth parentKey structureType { key name } } } }';
    const query = `{ ${Array.from({ length: 300 }, (_, i) => `a${i}: ${selection}`).join(' ')} }`;
    expect(query.length).toBeLessThan(app.config.MAX_BODY_BYTES);
    const res = await api.gql(query);
    expect([200, 400]).toContain(res.status);
    expect(res.body.data).toBeUndefined();
    expect(res.body.errors![0]!.message).toMatch(/cost|breadth/i);

    const once = await api.gql(`{ a0: ${selection} }`);
    expect(once.body.errors).toBeUndefined();
    expect(once.body.data.a0.totalCount).toBe(4);
  });
});

describe('D4/D11 /graphql access', () => {
  it('GET /graphql asking for HTML serves GraphiQL without a token', async () => {
    const res = await fetch(`${app.url}/graphql`, { headers: { accept: 'text/html' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect((await res.text()).toLowerCase()).toContain('graphiql');
  });

  it('POST /graphql without a token is 401 with WWW-Authenticate: Bearer (problem+json)', async () => {
    const res = await new ApiClient(app.url, undefined).gql('{ structuralEntity(key: "root") { key } }');
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(JSON.stringify(res.body)).not.toContain('Root');
  });

  it('GET /graphql asking for JSON (an operation, not the GraphiQL page) needs a token too', async () => {
    const res = await fetch(`${app.url}/graphql?query=${encodeURIComponent('{ structuralEntity(key: "root") { key } }')}`, {
      headers: { accept: 'application/json' },
    });
    expect(res.status).toBe(401);
  });

  it('an invalid token fails the whole request with 401 invalid_token', async () => {
    const res = await new ApiClient(app.url, `${api.token!.slice(0, -4)}AAAA`).gql('{ structuralEntity(key: "root") { key } }');
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer error="invalid_token"/);
  });
});

describe('D11 Relay node/nodes', () => {
  it('node(id) resolves a StructuralEntity global id; nodes(ids) resolves several in order', async () => {
    const ids = await api.gql<{ a: { id: string }; b: { id: string } }>(
      '{ a: structuralEntity(key: "root") { id } b: structuralEntity(key: "team") { id } }',
    );
    expect(ids.body.errors).toBeUndefined();
    const rootId = ids.body.data!.a.id;
    const teamId = ids.body.data!.b.id;
    expect(rootId).not.toBe(teamId);
    expect(rootId).not.toBe('root'); // a global id, not the bare key

    const one = await api.gql(
      'query ($id: ID!) { node(id: $id) { __typename id ... on StructuralEntity { key displayName depth parent { key } } } }',
      { id: teamId },
    );
    expect(one.body.errors).toBeUndefined();
    expect(one.body.data).toEqual({
      node: { __typename: 'StructuralEntity', id: teamId, key: 'team', displayName: 'Team', depth: 3, parent: { key: 'dept' } },
    });

    const many = await api.gql('query ($ids: [ID!]!) { nodes(ids: $ids) { id ... on StructuralEntity { key } } }', {
      ids: [teamId, rootId],
    });
    expect(many.body.errors).toBeUndefined();
    expect(many.body.data).toEqual({
      nodes: [
        { id: teamId, key: 'team' },
        { id: rootId, key: 'root' },
      ],
    });
  });

  it("a global id resolves within the token's tenant only (D2: another tenant's entity is as unknown)", async () => {
    const ids = await api.gql('{ here: structuralEntity(key: "only-here") { id } root: structuralEntity(key: "root") { id } }');
    const otherApi = await other.client();
    const res = await otherApi.gql('query ($ids: [ID!]!) { nodes(ids: $ids) { ... on StructuralEntity { key displayName } } }', {
      ids: [ids.body.data.here.id, ids.body.data.root.id],
    });
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data).toEqual({ nodes: [null, { key: 'root', displayName: 'Other root' }] });
  });
});

describe('P3 NUL characters over GraphQL', () => {
  it('an argument holding U+0000 is a BAD_REQUEST field error (HTTP 200), never an internal error', async () => {
    const res = await api.gql('query($k: String!) { structuralEntity(key: $k) { key } }', { k: 'a\u0000b' });
    expect(res.status).toBe(200);
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    expect(res.body.data).toEqual({ structuralEntity: null });
  });
});

describe('D11 cost limit with variables', () => {
  it('counts page sizes given as variables: first: $n costs what first: 1000 does', async () => {
    const query =
      'query($n: Int) { structuralEntities(first: $n) { edges { node { key children(first: $n) { edges { node { key children(first: $n) { edges { node { key } } } } } } } } } }';
    const big = await api.gql(query, { n: 1000 });
    expect(big.body.data).toBeUndefined();
    expect(big.body.errors![0]!.message).toMatch(/cost/i);
    const small = await api.gql(query, { n: 2 });
    expect(small.body.errors).toBeUndefined();
    expect(small.body.data.structuralEntities.edges.length).toBe(2);
  });

  it('the document is validated once, the cost per request: a cheap run does not let a costly one through', async () => {
    const query =
      'query($m: Int) { structuralEntities(first: $m) { edges { node { key children(first: $m) { edges { node { key children(first: $m) { edges { node { key } } } } } } } } } }';
    for (const [m, ok] of [
      [2, true],
      [1000, false],
      [2, true],
      [1000, false],
    ] as const) {
      const res = await api.gql(query, { m });
      if (ok) expect(res.body.errors).toBeUndefined();
      else expect(res.body.errors![0]!.message).toMatch(/cost/i);
    }
  });
});

describe('D11 global ids of no node type', () => {
  it('answer null in node and nodes, like an unknown id, and the rest of the query is answered', async () => {
    const foreign = Buffer.from('Foo:1').toString('base64');
    const res = await api.gql('query($id: ID!) { node(id: $id) { id } nodes(ids: [$id]) { id } structuralEntity(key: "root") { key } }', {
      id: foreign,
    });
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data).toEqual({ node: null, nodes: [null], structuralEntity: { key: 'root' } });
  });
});
