import { execFile } from 'node:child_process';
import { randomBytes, scryptSync } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox } from '../src/domains/data/index.js';
import { TenantConfigError, applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { ApiClient, FULL_CLIENT, type TestApp, startApp, tenantConfig } from './helpers.js';

// D3: the tenant configuration file. Validated before anything is written (an invalid file changes
// nothing, the error names the JSON path of each problem); applying upserts and is idempotent; secrets are
// stored only as salted hashes (inbound) or encrypted (outbound); entities are applied parents first.

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(() => app?.close());

const apply = (doc: unknown) => applyTenantFile(app.handle.db, new SecretBox(app.handle.db, undefined), doc, { listen: app.handle.listen });

/** Applies an invalid document and returns the error, failing when it is accepted. */
async function rejected(doc: unknown): Promise<TenantConfigError> {
  const err = await apply(doc).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'the file was accepted').toBeInstanceOf(TenantConfigError);
  return err as TenantConfigError;
}

const pathsOf = (err: TenantConfigError) => err.problems.map((p) => p.path);

/** Row count of every table of the service (migration bookkeeping aside). */
async function rowCounts(): Promise<Record<string, number>> {
  const tables = await sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.tables
    WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name NOT LIKE 'kysely_%'
    ORDER BY table_name`.execute(app.handle.db);
  const out: Record<string, number> = {};
  for (const { table_name } of tables.rows) {
    const r = await sql<{ n: string | number }>`SELECT count(*) AS n FROM ${sql.table(table_name)}`.execute(app.handle.db);
    out[table_name] = Number(r.rows[0]!.n);
  }
  expect(Object.keys(out)).toContain('structural_entity');
  return out;
}

const TENANT_TABLES = [
  'client',
  'subject_field',
  'structure_type',
  'structure_type_field',
  'structural_entity',
  'user_group',
  'user_group_structural_entity',
  'app_user',
  'app_user_group',
  'portal_config',
  'data_source',
  'data_extract',
] as const;

/** Every stored row of one tenant (bookkeeping timestamps aside), in a stable order. */
async function tenantSnapshot(key: string) {
  const tenant = await app.handle.db
    .selectFrom('tenant')
    .select(['id', 'key', 'name', 'matching_field_keys', 'external_id_field_key'])
    .where('key', '=', key)
    .executeTakeFirstOrThrow();
  const tables: Record<string, unknown[]> = {};
  for (const t of TENANT_TABLES) {
    const rows = (await app.handle.db.selectFrom(t).selectAll().where('tenant_id', '=', tenant.id).execute()) as Record<string, unknown>[];
    tables[t] = rows
      .map((r) => {
        const { created_at: _c, updated_at: _u, ...rest } = r;
        return JSON.stringify(rest);
      })
      .sort();
  }
  return { tenant, tables };
}

/** A scrypt hash in the documented `scrypt$N$r$p$salt$hash` format, made independently of the service. */
function scryptHash(secret: string): string {
  const salt = randomBytes(16);
  const hash = scryptSync(secret, salt, 32, { N: 16384, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
  return `scrypt$16384$8$1$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

async function tokenRequest(tenantKey: string, clientId: string, clientSecret: string) {
  const res = await fetch(`${app.url}/connect/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: tenantKey,
      client_id: clientId,
      client_secret: clientSecret,
    }),
  });
  return { status: res.status, body: (await res.json()) as { access_token?: string; error?: string } };
}

/** A tenant section of a file; the sections the helper does not type are open. */
type TenantDoc = ReturnType<typeof tenantConfig> & Record<string, any>;

/** A file exercising every section, with entities listed children first. */
function fullTenant(overrides: Record<string, unknown> = {}): TenantDoc {
  return tenantConfig({
    clients: [
      FULL_CLIENT,
      {
        clientId: 'hashed',
        clientSecretHash: scryptHash('hashed-client-secret'),
        scopes: ['ServiceApi'],
        permissions: ['List:StructuralEntity'],
      },
    ],
    structuralEntities: [
      {
        key: 'team',
        displayName: 'Team',
        structureTypeKey: 'department',
        parentKey: 'dept',
        customFieldValues: [{ key: 'headcount', value: { Integer: { Value: 4 } } }],
      },
      {
        key: 'dept',
        displayName: 'Dept',
        structureTypeKey: 'department',
        parentKey: 'root',
        customFieldValues: [{ key: 'costCenter', value: { String: { Value: 'CC-1' } } }],
      },
      { key: 'root', displayName: 'Root', structureTypeKey: 'company' },
    ],
    groups: [{ key: 'staff', name: 'Staff', structuralEntityKeys: ['dept', 'team'] }],
    users: [
      { id: 'u-1', displayName: 'Ann Smith', email: 'ann@example.org', active: true, groupKeys: ['staff'] },
      { id: 'u-2', displayName: 'Bob Jones', active: false },
    ],
    portal: {
      selfAccessEnabled: true,
      thirdPartyAccessEnabled: false,
      emailFieldKey: 'email',
      displayNameFieldKey: 'fullName',
      invitationFieldKeys: ['email'],
    },
    dataSources: [
      {
        key: 'wearables',
        name: 'Wearables',
        getDataPointsUrl: 'http://127.0.0.1:9/get-data-points',
        tokenUrl: 'http://127.0.0.1:9/connect/token',
        clientId: 'service',
        clientSecret: 'outbound-provider-secret-value',
        scope: 'DataProviderApi',
        inboundClientIds: ['full'],
      },
    ],
    dataExtracts: [{ key: 'steps-week', name: 'Steps', dataSourceKey: 'wearables', options: { metric: 'steps', period: { days: 7 } } }],
    ...overrides,
  });
}

describe('D3 applying is idempotent', () => {
  it('applying the same file twice equals applying it once, the client secret hash included', async () => {
    const t = fullTenant();
    const result = await apply({ tenants: [t] });
    expect(result).toEqual({ tenantKeys: [t.key] });
    const once = await tenantSnapshot(t.key);
    // The file really was applied: every section has rows.
    for (const table of TENANT_TABLES) expect(once.tables[table]!.length, table).toBeGreaterThan(0);
    const countsOnce = await rowCounts();

    await apply({ tenants: [t] });
    const twice = await tenantSnapshot(t.key);
    expect(twice).toEqual(once);
    expect(await rowCounts()).toEqual(countsOnce);

    const hash = await app.handle.db
      .selectFrom('client')
      .select('secret_hash')
      .where('tenant_id', '=', once.tenant.id)
      .where('client_id', '=', 'full')
      .executeTakeFirstOrThrow();
    expect(once.tables['client']!.some((r) => (r as string).includes(hash.secret_hash))).toBe(true);
  });

  it('re-applying upserts changes and never deletes entities', async () => {
    const t = fullTenant();
    await apply({ tenants: [t] });
    await apply({
      tenants: [{ ...t, name: 'Renamed', structuralEntities: [{ key: 'root', displayName: 'Root renamed', structureTypeKey: 'company' }] }],
    });
    const snap = await tenantSnapshot(t.key);
    expect(snap.tenant.name).toBe('Renamed');
    const entities = await app.handle.db
      .selectFrom('structural_entity')
      .select(['key', 'display_name', 'depth'])
      .where('tenant_id', '=', snap.tenant.id)
      .orderBy('key')
      .execute();
    expect(entities).toEqual([
      { key: 'dept', display_name: 'Dept', depth: 2 },
      { key: 'root', display_name: 'Root renamed', depth: 1 },
      { key: 'team', display_name: 'Team', depth: 3 },
    ]);
  });

  it('a changed client secret gets a new hash, and only the new secret works', async () => {
    const t = fullTenant();
    await apply({ tenants: [t] });
    const before = await tenantSnapshot(t.key);
    const changed = { ...t, clients: [{ ...FULL_CLIENT, clientSecret: 'a-brand-new-secret' }] };
    await apply({ tenants: [changed] });
    const after = await tenantSnapshot(t.key);
    expect(after.tables['client']).not.toEqual(before.tables['client']);
    expect((await tokenRequest(t.key, 'full', 'a-brand-new-secret')).status).toBe(200);
    expect((await tokenRequest(t.key, 'full', FULL_CLIENT.clientSecret)).status).toBe(401);
  });
});

// P99: each domain's apply reports problems relative to the tenant; the tenant apply prefixes tenants[i].
describe('D3 an invalid file changes nothing and names the JSON path of each problem', () => {
  type Case = [string, (t: TenantDoc) => unknown, string];
  const cases: Case[] = [
    [
      'a wrong dataType',
      (t) => ({ ...t, subjectFields: [...t.subjectFields, { key: 'x', name: 'X', dataType: 'Text' }] }),
      'tenants[0].subjectFields[5].dataType',
    ],
    ['a missing key', (t) => ({ ...t, structureTypes: [...t.structureTypes, { name: 'No key' }] }), 'tenants[0].structureTypes[2].key'],
    [
      'an unknown structureTypeKey of an entity',
      (t) => ({ ...t, structuralEntities: [...t.structuralEntities, { key: 'e', displayName: 'E', structureTypeKey: 'nope' }] }),
      'tenants[0].structuralEntities[3].structureTypeKey',
    ],
    [
      'an unknown parentKey of an entity',
      (t) => ({
        ...t,
        structuralEntities: [...t.structuralEntities, { key: 'e', displayName: 'E', structureTypeKey: 'company', parentKey: 'nope' }],
      }),
      'tenants[0].structuralEntities[3].parentKey',
    ],
    [
      'an unknown group key of a user',
      (t) => ({ ...t, users: [...t.users, { id: 'u-3', displayName: 'C', groupKeys: ['staff', 'no-such-group'] }] }),
      'tenants[0].users[2].groupKeys[1]',
    ],
    [
      'an unknown structural entity of a group',
      (t) => ({ ...t, groups: [{ key: 'g', name: 'G', structuralEntityKeys: ['nope'] }] }),
      'tenants[0].groups[0].structuralEntityKeys[0]',
    ],
    [
      'an unknown dataSourceKey of an extract',
      (t) => ({ ...t, dataExtracts: [{ key: 'x', name: 'X', dataSourceKey: 'nope' }] }),
      'tenants[0].dataExtracts[0].dataSourceKey',
    ],
    [
      'a duplicate field key',
      (t) => ({ ...t, subjectFields: [...t.subjectFields, { key: 'email', name: 'Again', dataType: 'String' }] }),
      'tenants[0].subjectFields[5].key',
    ],
    ['a duplicate clientId', (t) => ({ ...t, clients: [...t.clients, { ...FULL_CLIENT }] }), 'tenants[0].clients[2].clientId'],
    ['an unknown matching field', (t) => ({ ...t, matchingFieldKeys: ['nope'] }), 'tenants[0].matchingFieldKeys[0]'],
    [
      'an unknown portal field',
      (t) => ({ ...t, portal: { selfAccessEnabled: true, emailFieldKey: 'nope' } }),
      'tenants[0].portal.emailFieldKey',
    ],
    [
      'a bad custom field value of an entity',
      (t) => ({
        ...t,
        structuralEntities: [
          ...t.structuralEntities,
          {
            key: 'v',
            displayName: 'V',
            structureTypeKey: 'department',
            customFieldValues: [{ key: 'headcount', value: { Integer: { Value: 'many' } } }],
          },
        ],
      }),
      'tenants[0].structuralEntities[3].customFieldValues[0].value.Integer.value',
    ],
    [
      'a parent cycle inside the file',
      (t) => ({
        ...t,
        structuralEntities: [
          { key: 'a', displayName: 'A', structureTypeKey: 'company', parentKey: 'b' },
          { key: 'b', displayName: 'B', structureTypeKey: 'company', parentKey: 'a' },
        ],
      }),
      'tenants[0].structuralEntities[$].parentKey',
    ],
  ];

  /** `$` in an expected path stands for any index (a cycle may be reported at any of its members). */
  const matching = (paths: string[], expected: string) => {
    const re = new RegExp(`^${expected.replace(/[.[\]]/g, (c) => `\\${c}`).replace('\\[$\\]', '\\[\\d+\\]')}$`);
    return paths.filter((p) => re.test(p));
  };

  it.each(cases)('%s', async (_name, mutate, expectedPath) => {
    // Once for a new tenant, once for an existing one (the valid part must not be applied either).
    const t = fullTenant();
    const countsBefore = await rowCounts();
    const err = await rejected({ tenants: [mutate(t)] });
    const found = matching(pathsOf(err), expectedPath);
    expect(found, `${expectedPath} in ${pathsOf(err).join(', ')}`).toHaveLength(1);
    expect(err.message).toContain(found[0]);
    expect(await rowCounts()).toEqual(countsBefore);

    await apply({ tenants: [t] });
    const snapshot = await tenantSnapshot(t.key);
    const counts = await rowCounts();
    const extraSource = { key: 'extra', name: 'Extra', getDataPointsUrl: 'http://127.0.0.1:9/extra' };
    const changed = mutate({ ...t, name: 'Changed name', dataSources: [...t.dataSources, extraSource] });
    const again = await rejected({ tenants: [changed] });
    expect(matching(pathsOf(again), expectedPath)).toHaveLength(1);
    expect(await tenantSnapshot(t.key)).toEqual(snapshot);
    expect(await rowCounts()).toEqual(counts);
  });

  it('one file with several problems names every one of them, and writes nothing', async () => {
    const t = fullTenant();
    const doc = {
      tenants: [
        {
          ...t,
          clients: [...t.clients, { ...FULL_CLIENT }],
          subjectFields: [
            ...t.subjectFields,
            { key: 'bad', name: 'Bad', dataType: 'Number' },
            { key: 'email', name: 'Dup', dataType: 'String' },
          ],
          structureTypes: [...t.structureTypes, { name: 'No key', subjectAssignable: true }],
          structuralEntities: [
            { key: 'a', displayName: 'A', structureTypeKey: 'company', parentKey: 'b' },
            { key: 'b', displayName: 'B', structureTypeKey: 'company', parentKey: 'a' },
            { key: 'c', displayName: 'C', structureTypeKey: 'no-such-type' },
          ],
          users: [{ id: 'u-9', displayName: 'Z', groupKeys: ['no-such-group'] }],
          dataExtracts: [{ key: 'x', name: 'X', dataSourceKey: 'no-such-source' }],
        },
      ],
    };
    const countsBefore = await rowCounts();
    const err = await rejected(doc);
    const paths = pathsOf(err);
    for (const p of [
      'tenants[0].clients[2].clientId', // duplicate
      'tenants[0].subjectFields[5].dataType', // wrong data type
      'tenants[0].subjectFields[6].key', // duplicate
      'tenants[0].structureTypes[2].key', // missing
      'tenants[0].structuralEntities[$].parentKey', // cycle
      'tenants[0].structuralEntities[2].structureTypeKey', // unknown type
      'tenants[0].users[0].groupKeys[0]', // unknown group
      'tenants[0].dataExtracts[0].dataSourceKey', // unknown data source
    ]) {
      const found = matching(paths, p);
      expect(found, `${p} in ${paths.join(', ')}`).toHaveLength(1);
      expect(err.message).toContain(found[0]);
    }
    expect(await rowCounts()).toEqual(countsBefore);
    expect(await app.handle.db.selectFrom('tenant').select('id').where('key', '=', t.key).execute()).toEqual([]);
  });

  it('a document that is not a tenant file at all is rejected with a path', async () => {
    const countsBefore = await rowCounts();
    expect(pathsOf(await rejected({}))).toEqual(['tenants']);
    expect(pathsOf(await rejected({ tenants: [] }))).toEqual(['tenants']);
    expect(pathsOf(await rejected(null)).length).toBeGreaterThan(0);
    expect(pathsOf(await rejected({ tenants: [{ ...tenantConfig(), extra: 1 }] })).length).toBeGreaterThan(0);
    expect(await rowCounts()).toEqual(countsBefore);
  });
});

describe('D3 secrets', () => {
  it('client secrets are stored only as scrypt hashes, never in plaintext', async () => {
    const t = fullTenant();
    await apply({ tenants: [t] });
    const { tenant } = await tenantSnapshot(t.key);
    const clients = await app.handle.db.selectFrom('client').selectAll().where('tenant_id', '=', tenant.id).orderBy('client_id').execute();
    expect(clients.map((c) => c.client_id)).toEqual(['full', 'hashed']);
    for (const c of clients) expect(c.secret_hash).toMatch(/^scrypt\$\d+\$\d+\$\d+\$[A-Za-z0-9_-]{16,}\$[A-Za-z0-9_-]{32,}$/);
    const dump = JSON.stringify(clients);
    expect(dump).not.toContain(FULL_CLIENT.clientSecret);
    expect(dump).not.toContain('hashed-client-secret');
    // Salted: the same secret in two tenants gets two different hashes.
    const other = fullTenant();
    await apply({ tenants: [other] });
    const otherHash = await app.handle.db
      .selectFrom('client')
      .innerJoin('tenant', 'tenant.id', 'client.tenant_id')
      .select('secret_hash')
      .where('tenant.key', '=', other.key)
      .where('client_id', '=', 'full')
      .executeTakeFirstOrThrow();
    expect(otherHash.secret_hash).not.toBe(clients[0]!.secret_hash);
  });

  it('clientSecretHash is stored as given, and the client can then get a token with the secret', async () => {
    const hash = scryptHash('only-the-operator-knows');
    const t = tenantConfig({
      clients: [{ clientId: 'ops', clientSecretHash: hash, scopes: ['ServiceApi'], permissions: ['List:StructuralEntity'] }],
    });
    await apply({ tenants: [t] });
    const row = await app.handle.db
      .selectFrom('client')
      .innerJoin('tenant', 'tenant.id', 'client.tenant_id')
      .select('secret_hash')
      .where('tenant.key', '=', t.key)
      .executeTakeFirstOrThrow();
    expect(row.secret_hash).toBe(hash);

    const ok = await tokenRequest(t.key, 'ops', 'only-the-operator-knows');
    expect(ok.status).toBe(200);
    const list = await new ApiClient(app.url, ok.body.access_token).get('/api/v1/structuralEntity');
    expect(list.status).toBe(200);
    expect((await tokenRequest(t.key, 'ops', 'a-wrong-secret')).status).toBe(401);
    expect((await tokenRequest(t.key, 'ops', hash)).status).toBe(401);
  });

  it('a malformed clientSecretHash, or both or neither of the two, is rejected with its path', async () => {
    const base = { clientId: 'c', scopes: ['ServiceApi'], permissions: [] };
    const bad = await rejected({ tenants: [tenantConfig({ clients: [{ ...base, clientSecretHash: 'plaintext-not-a-hash' }] })] });
    expect(pathsOf(bad)).toContain('tenants[0].clients[0].clientSecretHash');
    const both = await rejected({
      tenants: [tenantConfig({ clients: [{ ...base, clientSecret: 'long-enough-secret', clientSecretHash: scryptHash('x') }] })],
    });
    expect(pathsOf(both)).toContain('tenants[0].clients[0].clientSecret');
    const neither = await rejected({ tenants: [tenantConfig({ clients: [base] })] });
    expect(pathsOf(neither)).toContain('tenants[0].clients[0].clientSecret');
  });

  // P10: outbound secrets are encrypted at rest, not hashed (they must be sent).
  it('a data source client secret is not stored in plaintext', async () => {
    const t = fullTenant();
    await apply({ tenants: [t] });
    const rows = await app.handle.db
      .selectFrom('data_source')
      .innerJoin('tenant', 'tenant.id', 'data_source.tenant_id')
      .selectAll('data_source')
      .where('tenant.key', '=', t.key)
      .execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]!.client_secret_enc).toBeTruthy();
    expect(JSON.stringify(rows)).not.toContain('outbound-provider-secret-value');
    // Nowhere else either.
    const tables = await sql<{ table_name: string }>`
      SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`.execute(app.handle.db);
    for (const { table_name } of tables.rows) {
      const all = await sql`SELECT * FROM ${sql.table(table_name)}`.execute(app.handle.db);
      expect(JSON.stringify(all.rows), table_name).not.toContain('outbound-provider-secret-value');
    }
  });
});

describe('D3 structural entities', () => {
  it('are applied parents before children, whatever the file order', async () => {
    const t = fullTenant({
      structuralEntities: [
        { key: 'leaf', displayName: 'Leaf', structureTypeKey: 'department', parentKey: 'mid' },
        { key: 'other', displayName: 'Other', structureTypeKey: 'department', parentKey: 'top' },
        { key: 'mid', displayName: 'Mid', structureTypeKey: 'department', parentKey: 'top' },
        { key: 'top', displayName: 'Top', structureTypeKey: 'company' },
      ],
      groups: [],
      users: [],
    });
    await apply({ tenants: [t] });
    const { tenant } = await tenantSnapshot(t.key);
    const rows = await app.handle.db
      .selectFrom('structural_entity')
      .select(['key', 'parent_key', 'depth'])
      .where('tenant_id', '=', tenant.id)
      .orderBy('key')
      .execute();
    expect(rows).toEqual([
      { key: 'leaf', parent_key: 'mid', depth: 3 },
      { key: 'mid', parent_key: 'top', depth: 2 },
      { key: 'other', parent_key: 'top', depth: 2 },
      { key: 'top', parent_key: null, depth: 1 },
    ]);
    // And through the API, as an integrator sees them.
    const token = await tokenRequest(t.key, 'full', FULL_CLIENT.clientSecret);
    const api = new ApiClient(app.url, token.body.access_token);
    const leaf = await api.get('/api/v1/structuralEntity/leaf');
    expect(leaf.status).toBe(200);
    expect(leaf.body).toMatchObject({ Key: 'leaf', ParentKey: 'mid', Depth: 3 });
  });

  it('an entity value may name a user defined in the same file (UserIdentifier)', async () => {
    const t = fullTenant({
      structuralEntities: [
        {
          key: 'd',
          displayName: 'D',
          structureTypeKey: 'department',
          customFieldValues: [{ key: 'manager', value: { UserIdentifier: { Value: 'boss' } } }],
        },
      ],
      groups: [],
      users: [{ id: 'boss', displayName: 'The Boss' }],
    });
    await apply({ tenants: [t] });
    const { tenant } = await tenantSnapshot(t.key);
    const row = await app.handle.db
      .selectFrom('structural_entity')
      .select('custom_values')
      .where('tenant_id', '=', tenant.id)
      .where('key', '=', 'd')
      .executeTakeFirstOrThrow();
    expect(row.custom_values).toEqual({ manager: 'boss' });
  });

  it('a file can move an existing entity under one it creates', async () => {
    const t = fullTenant({ structuralEntities: [{ key: 'x', displayName: 'X', structureTypeKey: 'department' }], groups: [], users: [] });
    await apply({ tenants: [t] });
    await apply({
      tenants: [
        {
          ...t,
          structuralEntities: [
            { key: 'x', displayName: 'X', structureTypeKey: 'department', parentKey: 'new-top' },
            { key: 'new-top', displayName: 'New top', structureTypeKey: 'company' },
          ],
        },
      ],
    });
    const { tenant } = await tenantSnapshot(t.key);
    const rows = await app.handle.db
      .selectFrom('structural_entity')
      .select(['key', 'parent_key', 'depth'])
      .where('tenant_id', '=', tenant.id)
      .orderBy('key')
      .execute();
    expect(rows).toEqual([
      { key: 'new-top', parent_key: null, depth: 1 },
      { key: 'x', parent_key: 'new-top', depth: 2 },
    ]);
  });
});

describe('D1/D3 npm run tenant:apply', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'ssdi-cli-'));
  });
  afterAll(() => (dir ? rm(dir, { recursive: true, force: true }) : undefined));

  /** Runs the CLI on the embedded database in `dir` (DATABASE_URL removed, so it never touches PostgreSQL). */
  function cli(file: string): Promise<{ code: number; stdout: string; stderr: string }> {
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: path.join(dir, 'data'), LOG_LEVEL: 'silent' };
    delete env['DATABASE_URL'];
    delete env['TENANT_CONFIG'];
    return new Promise((resolve) => {
      execFile(
        'npm',
        ['run', '--silent', 'tenant:apply', '--', file],
        { cwd: path.resolve(import.meta.dirname, '..'), env, timeout: 90_000 },
        (error, stdout, stderr) => {
          const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
          resolve({ code, stdout, stderr });
        },
      );
    });
  }

  it(
    'applies a valid file (exit 0, names the tenant) and rejects an invalid one (non-zero, names the path)',
    { timeout: 120_000 },
    async () => {
      const t = fullTenant();
      const good = path.join(dir, 'good.json');
      await writeFile(good, JSON.stringify({ tenants: [t] }));
      const ok = await cli(good);
      expect(ok.code, ok.stderr).toBe(0);
      expect(ok.stdout).toContain(`applied: ${t.key}`);

      const bad = path.join(dir, 'bad.json');
      await writeFile(
        bad,
        JSON.stringify({
          tenants: [
            {
              ...t,
              dataExtracts: [{ key: 'x', name: 'X', dataSourceKey: 'nope' }],
              subjectFields: [{ key: 'k', name: 'K', dataType: 'Texty' }],
            },
          ],
        }),
      );
      const ko = await cli(bad);
      expect(ko.code).not.toBe(0);
      expect(ko.stderr).toContain('tenants[0].subjectFields[0].dataType');
      expect(ko.stdout).not.toContain('applied');
    },
  );
});

describe("D3 entity values in the REST upsert's sent shape (issue 10)", () => {
  it('accepts {"Key", "Value"} copied from a REST body, names bound case-insensitively as REST binds them (D5)', async () => {
    const t = fullTenant({
      structuralEntities: [
        { key: 'root', displayName: 'Root', structureTypeKey: 'company' },
        {
          key: 'dept',
          displayName: 'Dept',
          structureTypeKey: 'department',
          parentKey: 'root',
          customFieldValues: [
            { Key: 'costCenter', Value: { String: { Value: 'CC-1' } } },
            { KEY: 'headcount', value: { integer: { value: 7 } } },
          ],
        },
      ],
      groups: [{ key: 'staff', name: 'Staff', structuralEntityKeys: ['dept'] }],
    });
    await apply({ tenants: [t] });
    const row = await app.handle.db
      .selectFrom('structural_entity')
      .innerJoin('tenant', 'tenant.id', 'structural_entity.tenant_id')
      .select('structural_entity.custom_values')
      .where('tenant.key', '=', t.key)
      .where('structural_entity.key', '=', 'dept')
      .executeTakeFirstOrThrow();
    expect(row.custom_values).toEqual({ costCenter: 'CC-1', headcount: 7 });
    // A name the REST body does not know is still named as a problem, at its path.
    const bad = await apply({
      tenants: [
        fullTenant({
          structuralEntities: [
            { key: 'x', displayName: 'X', structureTypeKey: 'department', customFieldValues: [{ Key: 'costCenter', Valeu: 1 }] },
          ],
          groups: [],
        }),
      ],
    }).catch((e) => e);
    expect(bad).toBeInstanceOf(TenantConfigError);
    expect(pathsOf(bad).join(' ')).toContain('tenants[0].structuralEntities[0].customFieldValues[0]');
  });
});
