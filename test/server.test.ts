import { type ChildProcess, execFile, spawn } from 'node:child_process';
import http from 'node:http';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from './helpers.js';

// The real process as `npm start` runs it (the build global-setup made): D1 start-up, operations, graceful shutdown.
const run = promisify(execFile);
const NODE = process.execPath;
const SERVER = ['--enable-source-maps', 'dist/src/server.js'];

/** Environment for a child on the embedded database, whatever this test run uses. */
function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const { DATABASE_URL: _, ...env } = process.env;
  return { ...env, NODE_ENV: 'development', LOG_LEVEL: 'info', ...extra };
}

describe('configuration (D1)', () => {
  it('stops with one line naming a bad variable', async () => {
    const err = await run(NODE, SERVER, { env: childEnv({ PORT: 'eighty' }) }).catch((e: { code: number; stderr: string }) => e);
    expect((err as { code: number }).code).toBe(1);
    const lines = (err as { stderr: string }).stderr
      .trim()
      .split('\n')
      .filter((l) => !/npm warn/.test(l));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/PORT/);
  });
});

describe('npm start on an empty embedded database (D1)', () => {
  let dir: string;
  let child: ChildProcess;
  let stdout = '';
  let port: number;
  let exit: Promise<number | null>;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'ssdi-server-'));
    port = await freePort();
    child = spawn(NODE, SERVER, { env: childEnv({ PORT: String(port), DATA_DIR: dir }) });
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stdout += d.toString()));
    exit = new Promise((r) => child.on('exit', (code) => r(code)));
    const deadline = Date.now() + 50_000;
    while (!stdout.includes('Then, with the same token, the structural entities')) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`server did not start:\n${stdout}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 60_000);

  afterAll(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });

  it('starts the new data directory from the template npm run build made (P133)', () => {
    expect(stdout).toContain('embedded database started from its template');
  });

  it('prints a curl that gets a token and lists the demo subjects, then one for the structural entities', async () => {
    const lines = stdout.split('\n').map((l) => l.trim());
    const line = lines.find((l) => l.startsWith('TOKEN=$('));
    const entities = lines.find((l) => l.endsWith('/api/v1/structuralEntity'));
    expect(line).toBeDefined();
    expect(entities).toBeDefined();
    const { stdout: both } = await run('bash', ['-c', `${line!} && echo && ${entities!}`]);
    const [out, entityOut] = both.split('\n');
    expect(JSON.parse(entityOut!).Edges.map((e: { Node: { Key: string } }) => e.Node.Key)).toContain('acme');
    const page = JSON.parse(out!);
    // The demo organisation (config/demo.subjects.json), the first page of it listed.
    expect(page.PageInfo.TotalCount).toBe(JSON.parse(await readFile('config/demo.subjects.json', 'utf8')).length);
    expect(page.Edges.slice(0, 3).map((e: { Node: { ExternalId: string } }) => e.Node.ExternalId)).toEqual(['E-1001', 'E-1002', 'E-1003']);
  });

  it("prints a token one-liner that stops with the token endpoint's reason when the request fails (issue 10)", async () => {
    const line = stdout
      .split('\n')
      .map((l) => l.trim())
      .find((l) => l.startsWith('TOKEN=$('))!;
    const failing = line.replace('client_secret=demo-client-secret', 'client_secret=wrong');
    const err = await run('bash', ['-c', failing]).catch((e: { code: number; stderr: string; stdout: string }) => e);
    expect((err as { code: number }).code).not.toBe(0);
    expect((err as { stderr: string }).stderr).toMatch(/token request failed: /);
    expect((err as { stdout: string }).stdout).toBe('');
  });

  it('creates every demo subject of config/demo.subjects.json with its values and locations, in bulk (P133)', async () => {
    const form = { grant_type: 'client_credentials', tenant_key: 'demo', client_id: 'demo-client', client_secret: 'demo-client-secret' };
    const { access_token } = (await (
      await fetch(`http://127.0.0.1:${port}/connect/token`, { method: 'POST', body: new URLSearchParams(form) })
    ).json()) as {
      access_token: string;
    };
    const ask = async (query: string) =>
      (await (
        await fetch(`http://127.0.0.1:${port}/graphql`, {
          method: 'POST',
          headers: { authorization: `Bearer ${access_token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ query }),
        })
      ).json()) as any;
    const file = JSON.parse(await readFile('config/demo.subjects.json', 'utf8')) as {
      CustomFieldValues: { Key: string; Value: unknown }[];
      StructuralEntityKeys: string[];
    }[];
    const external = (s: (typeof file)[number]) =>
      (s.CustomFieldValues.find((v) => v.Key === 'employeeNumber')!.Value as { String: { Value: string } }).String.Value;
    const body = await ask(`{ subjects(first: 1000) { edges { node { externalId customFieldValues { field { key } } } } } }`);
    expect(body.errors).toBeUndefined();
    const byId = new Map<string, any>(body.data.subjects.edges.map((e: any) => [e.node.externalId, e.node]));
    expect(byId.size).toBe(file.length);
    for (const s of file) {
      const node = byId.get(external(s));
      expect(node, external(s)).toBeDefined();
      expect(node.customFieldValues.map((v: any) => v.field.key).sort()).toEqual(s.CustomFieldValues.map((v) => v.Key).sort());
    }
    // Each entity lists the subjects the file locates there (locations, and the index rows lists order by).
    for (const key of new Set(file.flatMap((s) => s.StructuralEntityKeys))) {
      const at = await ask(`{ subjects(structuralEntityKeys: ["${key}"], first: 1000) { edges { node { externalId } } } }`);
      expect(
        at.data.subjects.edges.map((e: any) => e.node.externalId),
        key,
      ).toEqual(
        file
          .filter((s) => s.StructuralEntityKeys.includes(key))
          .map(external)
          .sort(),
      );
    }
    const found = await ask(`{ subjects(searchTerm: "E-1002", first: 1) { edges { node { externalId } } } }`);
    expect(found.data.subjects.edges[0].node.externalId).toBe('E-1002');
  });

  it('serves data points of the demo subjects from the reference provider it started (D1, D10)', async () => {
    const lines = stdout.split('\n').map((l) => l.trim());
    const token = lines.find((l) => l.startsWith('TOKEN=$('))!.split(' && curl')[0]!;
    const query = lines.find((l) => l.includes('/graphql -d'));
    expect(query).toBeDefined();
    const { stdout: out } = await run('bash', ['-c', `${token} && ${query!}`]);
    const body = JSON.parse(out);
    expect(body.errors).toBeUndefined();
    const subjects = body.data.subjects.edges.map((e: any) => e.node);
    expect(subjects.map((s: any) => s.externalId)).toEqual(['E-1001', 'E-1002', 'E-1003']);
    for (const s of subjects) {
      expect(s.dataPoints.edges).toHaveLength(7);
      expect(s.dataPoints.edges[0].node.id).toMatch(new RegExp(`^${s.externalId}:steps:\\d{4}-\\d\\d-\\d\\d$`));
    }
  });

  it('logs JSON lines with a request id and never a token or a secret', async () => {
    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: 'demo',
      client_id: 'demo-client',
      client_secret: 'demo-client-secret',
    });
    const tokenRes = await fetch(`http://127.0.0.1:${port}/connect/token`, { method: 'POST', body: form });
    const { access_token } = (await tokenRes.json()) as { access_token: string };
    const res = await fetch(`http://127.0.0.1:${port}/api/v1/structuralEntity?First=1`, {
      headers: { authorization: `Bearer ${access_token}`, 'x-request-id': 'req-abc-123' },
    });
    expect(res.headers.get('x-request-id')).toBe('req-abc-123');
    await new Promise((r) => setTimeout(r, 300));
    // The JSON log lines (the demo banner prints the demo credentials on purpose, D1).
    const logs = stdout.split('\n').filter((l) => l.startsWith('{'));
    for (const l of logs) expect(() => JSON.parse(l)).not.toThrow();
    const log = logs.join('\n');
    expect(log).toContain('"id":"req-abc-123"');
    // The completion line of an authenticated request names its tenant and client (issue 10).
    const line = logs.map((l) => JSON.parse(l)).find((l) => l.req?.id === 'req-abc-123' && l.res);
    expect(line).toMatchObject({ tenant: 'demo', client: 'demo-client', res: { statusCode: 200 } });
    expect(log).toContain('"path":"/connect/token"');
    expect(log).not.toContain(access_token.split('.')[2]!);
    expect(log).not.toMatch(/demo-client-secret|authorization|client_secret/i);
  });

  it('refuses a second process on the same DATA_DIR with one clear line (issue 10)', async () => {
    const err = await run(NODE, SERVER, { env: childEnv({ PORT: String(await freePort()), DATA_DIR: dir }) }).catch(
      (e: { code: number; stderr: string }) => e,
    );
    expect((err as { code: number }).code).toBe(1);
    const lines = (err as { stderr: string }).stderr
      .trim()
      .split('\n')
      .filter((l) => !/npm warn/.test(l));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^The embedded database in .* is in use by process \d+/);
  });

  it('answers /healthz and /readyz without a token', async () => {
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
  });

  // Node's own default closes an idle connection after 5 s; a client reusing it then races the close.
  // P70: an idle kept-alive connection stays open 65 s.
  it('keeps an idle kept-alive connection open longer than 5 s (HTTP_KEEP_ALIVE_TIMEOUT_MS)', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
        const req = http.get({ host: '127.0.0.1', port, path: '/healthz', agent }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, reused: req.reusedSocket }));
        });
        req.on('error', reject);
      });
    try {
      expect(await get()).toEqual({ status: 200, reused: false });
      await new Promise((r) => setTimeout(r, 6_000));
      expect(await get()).toEqual({ status: 200, reused: true });
    } finally {
      agent.destroy();
    }
  }, 15_000);

  // A request sent with the signal may be read after the drain began: /readyz then rightly answers 503 (P53),
  // so the request in flight is /healthz, which the drain still answers.
  it('shuts down gracefully on SIGTERM: finishes in-flight requests, then exits 0', async () => {
    const inFlight = fetch(`http://127.0.0.1:${port}/healthz`);
    child.kill('SIGTERM');
    expect((await inFlight).status).toBe(200);
    for (const deadline = Date.now() + 10_000; !stdout.includes('shutting down');) {
      if (Date.now() > deadline) throw new Error(`no drain logged:\n${stdout}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(503);
    expect(await exit).toBe(0);
    expect(stdout).toContain('"msg":"stopped"');
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
    // The lock went with it.
    await expect(readFile(path.join(dir, '.ssdi.lock'), 'utf8')).rejects.toThrow();
  });
});

describe('the embedded database lock (issue 10)', () => {
  it('takes over the lock of a process that no longer runs', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-lock-'));
    try {
      // A PID that cannot be running (beyond Linux's pid_max).
      await writeFile(path.join(dir, '.ssdi.lock'), '99999999\n');
      const { stdout } = await run(NODE, ['dist/src/cli/migrate.js'], { env: childEnv({ DATA_DIR: dir }) });
      expect(stdout).toMatch(/migrat/i);
      await expect(readFile(path.join(dir, '.ssdi.lock'), 'utf8')).rejects.toThrow();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('the demo credentials (issue 10)', () => {
  it('are printed on a later start when the first start ended abruptly after creating the demo', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-demo-'));
    // The first start applies the demo and is killed (issue 15: the listener is bound before the
    // database is opened, so a taken port no longer fails a start after the demo was created).
    try {
      const first = spawn(NODE, SERVER, { env: childEnv({ PORT: String(await freePort()), DATA_DIR: dir }) });
      let firstOut = '';
      first.stdout!.on('data', (d: Buffer) => (firstOut += d.toString()));
      const firstExit = new Promise((r) => first.on('exit', r));
      const firstDeadline = Date.now() + 50_000;
      while (!firstOut.includes('Demo tenant created')) {
        if (Date.now() > firstDeadline || first.exitCode !== null) throw new Error(`first start did not create the demo:\n${firstOut}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      first.kill('SIGKILL');
      await firstExit;
      const port = await freePort();
      const child = spawn(NODE, SERVER, { env: childEnv({ PORT: String(port), DATA_DIR: dir }) });
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise((r) => child.on('exit', r));
      try {
        const deadline = Date.now() + 50_000;
        while (!out.includes('Then, with the same token')) {
          if (Date.now() > deadline || child.exitCode !== null) throw new Error(`no banner:\n${out}`);
          await new Promise((r) => setTimeout(r, 200));
        }
        // P133: the directory holds a database, which no template replaces.
        expect(firstOut).toContain('embedded database started from its template');
        expect(out).not.toContain('embedded database started from its template');
        expect(out).toContain('Demo tenant (embedded database).');
        expect(out).toContain('Client secret: demo-client-secret');
        expect(out).toContain(`http://127.0.0.1:${port}/api/v2/subject`);
      } finally {
        child.kill('SIGTERM');
        await exited;
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
