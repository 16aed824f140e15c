import { rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyTenantFilePath, openMigratedDatabase } from '../src/app/runtime.js';
import { loadConfig } from '../src/core/config.js';
import { ApiClient, FULL_CLIENT, pool, startServerInstance, tenantConfig } from './helpers.js';
import { type ReplicaCluster, startReplicaCluster } from './replica-cluster.js';

// Reads on a streaming replica, each tenant's own writes read back (P151, P152, P153): a primary and a hot
// standby of this file's own, instances of the real app over them.

interface Instance {
  url: string;
  metrics(): Promise<string>;
  close(): Promise<void>;
}

let cluster: ReplicaCluster;
let a: Instance;
let b: Instance;

/**
 * An instance on the cluster: the primary as DATABASE_URL, the standby as its replica unless `replicas` is
 * false; `publicUrl`: a peer's (shared tokens); `env`: more settings.
 */
async function startInstance(publicUrl?: string, env: Record<string, string> = {}, replicas = true): Promise<Instance> {
  const app = await startServerInstance(
    {
      DATABASE_URL: cluster.primaryUrl,
      ...(replicas ? { DATABASE_REPLICA_URL: cluster.replicaUrl } : {}),
      DATABASE_REPLICA_PROBE_MS: '50',
      // Paused replay makes the replica lag for the length of a test: left in, so it is left out only by the floor.
      DATABASE_REPLICA_MAX_LAG_MS: '600000',
      ...env,
    },
    { publicUrl },
  );
  return { url: app.url, metrics: async () => (await fetch(`${app.url}/metrics`)).text(), close: app.close };
}

/** Applies a tenant file as `npm run tenant:apply` does (its read floor recorded, P153). */
async function applyFile(t: Record<string, unknown>): Promise<void> {
  const file = path.join(tmpdir(), `ssdi-replicas-${String(t['key'])}.json`);
  await writeFile(file, JSON.stringify({ tenants: [t] }));
  const config = loadConfig({ DATABASE_URL: cluster.primaryUrl, DATA_DIR: '/nonexistent', LOG_LEVEL: 'silent' });
  const handle = await openMigratedDatabase(config);
  try {
    await applyTenantFilePath(handle, config, file);
  } finally {
    await handle.close();
    await rm(file, { force: true });
  }
}

/** A tenant from a file, and a client of it on each instance (and on `more`, started with a.url as PUBLIC_URL). */
async function tenant(t = tenantConfig(), more: Instance[] = []): Promise<{ onA: ApiClient; onB: ApiClient; on: ApiClient[] }> {
  await applyFile(t);
  const form = new URLSearchParams({
    grant_type: 'client_credentials',
    tenant_key: t.key,
    client_id: FULL_CLIENT.clientId,
    client_secret: FULL_CLIENT.clientSecret,
    scope: 'ServiceApi',
  });
  const res = await fetch(`${a.url}/connect/token`, { method: 'POST', body: form });
  const token = ((await res.json()) as { access_token: string }).access_token;
  return { onA: new ApiClient(a.url, token), onB: new ApiClient(b.url, token), on: more.map((i) => new ApiClient(i.url, token)) };
}

/** A sample's value in a scrape, 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1).replace('+Inf', 'Infinity')) : 0;
}

const reads = async (i: Instance, target: string, reason: string) => sample(await i.metrics(), 'db_reads_total', { target, reason });

/** Waits until `read` through instance `i` runs on its replica. */
const untilReadOnReplica = (i: Instance, read: () => Promise<unknown>) =>
  until('a read on the replica', async () => {
    const before = await reads(i, 'replica', 'replayed');
    await read();
    return (await reads(i, 'replica', 'replayed')) > before;
  });

/** Four workers reading subject `id` over REST and GraphQL until stop(): the failures met, the reads served. */
function readLoad(api: ApiClient, id: string): { failures: string[]; served(): number; stop(): Promise<void> } {
  const failures: string[] = [];
  let load = true;
  let served = 0;
  const workers = pool([1, 2, 3, 4], 4, async () => {
    while (load) {
      const [r, g] = await Promise.all([
        api.get(`/api/v2/subject/${id}`),
        api.gql('query($id: ID!) { subject(id: $id) { externalId } }', { id }),
      ]);
      if (r.status !== 200) failures.push(`GET ${r.status} ${JSON.stringify(r.body)}`);
      if (g.status !== 200 || g.body.errors) failures.push(`GraphQL ${g.status} ${JSON.stringify(g.body)}`);
      served += 2;
    }
  });
  return {
    failures,
    served: () => served,
    stop: async () => {
      load = false;
      await workers;
    },
  };
}

async function until(what: string, done: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await done()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`not reached: ${what}`);
}

const UPSERT = '/api/v2/messaging/subject';
const sv = (key: string, type: string, value: unknown) => ({ Key: key, Value: { [type]: { Value: value } } });
const fullName = (subject: any) => (subject.CustomFieldValues as any[]).find((v) => v.Field.Key === 'fullName')?.Value?.ValueText;
const grade = (subject: any) => (subject.CustomFieldValues as any[]).find((v) => v.Field.Key === 'grade')?.Value?.ValueText;

beforeAll(async () => {
  cluster = await startReplicaCluster();
  a = await startInstance();
  b = await startInstance(a.url);
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await cluster?.close();
});

describe('read replicas (P151, P152)', () => {
  it('reads of a tenant whose writes the replica holds go to the replica', async () => {
    const { onA } = await tenant();
    await cluster.caughtUp();
    // The probe has seen the replica replay the tenant's floor once one read goes there.
    await untilReadOnReplica(a, () => onA.get('/api/v2/subject?First=10'));
    const before = await reads(a, 'replica', 'replayed');
    for (let i = 0; i < 5; i++) {
      const r = await onA.get('/api/v2/subject?First=10');
      expect(r.status).toBe(200);
      const g = await onA.gql('{ subjects(first: 10) { totalCount } }');
      expect(g.body.errors).toBeUndefined();
    }
    expect(await reads(a, 'replica', 'replayed')).toBeGreaterThanOrEqual(before + 10);
    const text = await a.metrics();
    expect(sample(text, 'db_replica_up', { replica: new URL(cluster.replicaUrl).host })).toBe(1);
    // The service's request sessions on the standby (application_name 'ssdi'; the probe's is 'ssdi-probe').
    const standby = new pg.Client({ connectionString: cluster.replicaUrl });
    await standby.connect();
    const { rows } = await standby.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'ssdi'`);
    await standby.end();
    expect(rows[0].n).toBeGreaterThan(0);
  });

  it("reads run on the replica: with replay paused, a change made on the primary behind the service's back is not seen until replayed", async () => {
    const { onA } = await tenant();
    const created = await onA.post(UPSERT, {
      CustomFieldValues: [sv('employeeNumber', 'String', 'S-1'), sv('fullName', 'String', 'Old Name')],
    });
    expect(created.status).toBe(201);
    const id = created.body.internalId as string;
    await cluster.caughtUp();
    await untilReadOnReplica(a, () => onA.get(`/api/v2/subject/${id}`));
    await cluster.pauseReplay();
    try {
      // No floor raised: the tenant's reads stay on the replica, which has not replayed this.
      await cluster.onPrimary(`UPDATE subject SET values = jsonb_set(values, '{fullName}', '"New Name"') WHERE id = $1`, [id]);
      const stale = await onA.get(`/api/v2/subject/${id}`);
      expect(fullName(stale.body)).toBe('Old Name');
    } finally {
      await cluster.resumeReplay();
    }
    await cluster.caughtUp();
    expect(fullName((await onA.get(`/api/v2/subject/${id}`)).body)).toBe('New Name');
  });

  it('a replica further behind than DATABASE_REPLICA_MAX_LAG_MS is left out: reads go to the primary as lagging', async () => {
    const c = await startInstance(a.url, { DATABASE_REPLICA_MAX_LAG_MS: '300' });
    try {
      const [onC] = (await tenant(undefined, [c])).on;
      await cluster.caughtUp();
      await untilReadOnReplica(c, () => onC!.get('/api/v2/subject?First=10'));
      await cluster.pauseReplay();
      try {
        // The primary moves on (written directly: no floor); the paused replica's lag passes the bound.
        await until('reads left to the primary as lagging', async () => {
          await cluster.onPrimary('CREATE TABLE IF NOT EXISTS test_lag (at timestamptz); INSERT INTO test_lag VALUES (now())');
          const before = await reads(c, 'primary', 'lagging');
          expect((await onC!.get('/api/v2/subject?First=10')).status).toBe(200);
          return (await reads(c, 'primary', 'lagging')) > before;
        });
      } finally {
        await cluster.resumeReplay();
      }
    } finally {
      await c.close();
    }
  });

  it("the lag bound holds while the primary's request pool is saturated: the probe has a connection of its own", async () => {
    const s = await startInstance(a.url, { DATABASE_POOL_SIZE: '1', DATABASE_REPLICA_MAX_LAG_MS: '300' });
    const locker = new pg.Client({ connectionString: cluster.primaryUrl });
    await locker.connect();
    try {
      const [onS] = (await tenant(undefined, [s])).on;
      await cluster.caughtUp();
      await until('no lag', async () => sample(await s.metrics(), 'db_replica_lag_seconds') === 0);
      await cluster.pauseReplay();
      // A write waits on a lock with the pool's one connection: the request pool has none to give.
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE subject IN ACCESS EXCLUSIVE MODE');
      const held = onS!.post(UPSERT, { CustomFieldValues: [sv('employeeNumber', 'String', 'P-1'), sv('fullName', 'String', 'Po Ol')] });
      await until('the write waits on the lock', async () => {
        const { rows } = await locker.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'ssdi' AND wait_event_type = 'Lock'`,
        );
        return rows[0].n > 0;
      });
      await cluster.onPrimary('CREATE TABLE IF NOT EXISTS test_lag (at timestamptz); INSERT INTO test_lag VALUES (now())');
      await until('the lag past the bound shows', async () => sample(await s.metrics(), 'db_replica_lag_seconds') > 0.3);
      await locker.query('ROLLBACK');
      expect((await held).status).toBe(201);
    } finally {
      await locker.end();
      await cluster.resumeReplay();
      await s.close();
    }
  });

  it('an instance without replicas of its own records floors while its primary has a standby: another instance reads its writes back', async () => {
    const w = await startInstance(a.url, {}, false);
    try {
      const { onA, on } = await tenant(undefined, [w]);
      const onW = on[0]!;
      const created = await onW.post(UPSERT, {
        CustomFieldValues: [sv('employeeNumber', 'String', 'W-1'), sv('fullName', 'String', 'Wri Ter')],
      });
      expect(created.status).toBe(201);
      const id = created.body.internalId as string;
      await cluster.caughtUp();
      await cluster.pauseReplay();
      try {
        for (let round = 1; round <= 10; round++) {
          const up = await onW.post(UPSERT, { CustomFieldValues: [sv('employeeNumber', 'String', 'W-1'), sv('grade', 'Integer', round)] });
          expect(up.status).toBe(200);
          expect(grade((await onA.get(`/api/v2/subject/${id}`)).body), `round ${round}`).toBe(String(round));
        }
      } finally {
        await cluster.resumeReplay();
      }
    } finally {
      await w.close();
    }
  });

  it('with replay paused, a write is read back at once, every time: REST, GraphQL, and on another instance', async () => {
    const { onA, onB } = await tenant();
    await cluster.caughtUp();
    const created = await onA.post(UPSERT, {
      CustomFieldValues: [sv('employeeNumber', 'String', 'R-1'), sv('fullName', 'String', 'Rae Plica')],
    });
    expect(created.status).toBe(201);
    const id = created.body.internalId as string;
    const behind = await reads(a, 'primary', 'behind');
    await cluster.pauseReplay();
    try {
      for (let round = 1; round <= 30; round++) {
        // REST: POST (upsert) then GET, on the same instance and on the other one.
        const up = await onA.post(UPSERT, { CustomFieldValues: [sv('employeeNumber', 'String', 'R-1'), sv('grade', 'Integer', round)] });
        expect(up.status).toBe(200);
        const [here, there] = await Promise.all([onA.get(`/api/v2/subject/${id}`), onB.get(`/api/v2/subject/${id}`)]);
        expect([grade(here.body), grade(there.body)], `round ${round}`).toEqual([String(round), String(round)]);
        // GraphQL: a mutation then a query.
        const m = await onB.gql('mutation($input: UpsertSubjectInput!) { upsertSubject(input: $input) { created } }', {
          input: {
            customFieldValues: [
              { key: 'employeeNumber', value: { String: { value: 'R-1' } } },
              { key: 'grade', value: { Integer: { value: 1000 + round } } },
            ],
          },
        });
        expect(m.body.errors).toBeUndefined();
        const q = await onA.gql('query($id: ID!) { subject(id: $id) { customFieldValues { field { key } values { valueText } } } }', {
          id,
        });
        const value = q.body.data.subject.customFieldValues.find((v: any) => v.field.key === 'grade').values[0].valueText;
        expect(value, `round ${round}`).toBe(String(1000 + round));
      }
      // They were read back because the primary served them: the replica had not replayed the writes.
      expect(await reads(a, 'primary', 'behind')).toBeGreaterThanOrEqual(behind + 60);
      await until('the lag shows', async () => sample(await a.metrics(), 'db_replica_lag_seconds') > 0);
    } finally {
      await cluster.resumeReplay();
    }
    await cluster.caughtUp();
    // Caught up: its reads go to the replica again, and the lag is 0.
    await until('reads back on the replica', async () => {
      const before = await reads(a, 'replica', 'replayed');
      await onA.get(`/api/v2/subject/${id}`);
      return (await reads(a, 'replica', 'replayed')) > before;
    });
    await until('no lag', async () => sample(await a.metrics(), 'db_replica_lag_seconds') === 0);
  });

  it('a tenant file applied while replay is paused is served at once (P153)', async () => {
    const t = tenantConfig();
    const { onA, onB } = await tenant(t);
    await cluster.caughtUp();
    // Each instance has cached the configuration under its version.
    for (const api of [onA, onB]) expect((await api.get('/api/v1/structuralEntity/acme')).status).toBe(404);
    await cluster.pauseReplay();
    try {
      await applyFile({ ...t, structuralEntities: [{ key: 'acme', displayName: 'Acme', structureTypeKey: 'company' }] });
      // No write of the API in between: the apply recorded the floor.
      for (const api of [onA, onB]) {
        const r = await api.get('/api/v1/structuralEntity/acme');
        expect(r.status, JSON.stringify(r.body)).toBe(200);
      }
    } finally {
      await cluster.resumeReplay();
    }
  });

  it("a replica's loss costs no request: reads carry on from the primary, and return once it is back", async () => {
    const { onA } = await tenant();
    await cluster.caughtUp();
    const created = await onA.post(UPSERT, {
      CustomFieldValues: [sv('employeeNumber', 'String', 'L-1'), sv('fullName', 'String', 'Lo Ad')],
    });
    expect(created.status).toBe(201);
    const id = created.body.internalId as string;
    const load = readLoad(onA, id);
    try {
      await until('load under way', async () => load.served() > 20);
      // P154: statements cut under way run again on the primary; the probe then marks the replica down.
      await cluster.stopReplica();
      await until('the replica down in /metrics', async () => sample(await a.metrics(), 'db_replica_up') === 0);
      const whileDown = load.served();
      await until('reads served from the primary meanwhile', async () => load.served() > whileDown + 20);
      expect(await reads(a, 'primary', 'down')).toBeGreaterThan(0);
      await cluster.startReplica();
      await cluster.caughtUp();
      await until('the replica up again', async () => sample(await a.metrics(), 'db_replica_up') === 1);
      const back = await reads(a, 'replica', 'replayed');
      await until('reads back on the replica', async () => (await reads(a, 'replica', 'replayed')) > back + 10);
    } finally {
      await load.stop();
    }
    expect(load.failures).toEqual([]);
  });

  it('a hung replica (SIGSTOP) costs no request: its statements time out and run on the primary, and close() ends', async () => {
    // Client-side bounds of a second (statement timeout + 1 s), so the test stays short (P154).
    const h = await startInstance(a.url, { DATABASE_STATEMENT_TIMEOUT_MS: '1000', DATABASE_CONNECT_TIMEOUT_MS: '1000' });
    let closed = false;
    try {
      const [onH] = (await tenant(undefined, [h])).on;
      const created = await onH!.post(UPSERT, {
        CustomFieldValues: [sv('employeeNumber', 'String', 'H-1'), sv('fullName', 'String', 'Hu Ng')],
      });
      expect(created.status).toBe(201);
      const id = created.body.internalId as string;
      await cluster.caughtUp();
      await untilReadOnReplica(h, () => onH!.get(`/api/v2/subject/${id}`));
      const load = readLoad(onH!, id);
      try {
        await until('load under way', async () => load.served() > 20);
        await cluster.freezeReplica();
        await until('the replica down in /metrics', async () => sample(await h.metrics(), 'db_replica_up') === 0);
        const whileDown = load.served();
        await until('reads served from the primary meanwhile', async () => load.served() > whileDown + 20);
      } finally {
        await load.stop();
      }
      expect(load.failures).toEqual([]);
      // Still frozen: closing waits for no answer of the replica.
      await h.close();
      closed = true;
    } finally {
      await cluster.thawReplica();
      if (!closed) await h.close();
    }
    await cluster.caughtUp();
  });
});
