/**
 * The token flood of issue 30, F11 (P80): the built service alone on SERVER_CORE, this harness and the
 * flood (test/token-flood.ts: 1,000 wrong client secrets in flight from 127.0.0.2) on LOAD_CORE. Prints
 * a valid client's token answer time (its secret verified before, and a client's first request) under
 * the flood, and another tenant's REST list p99 (sequential requests) alone, during and after it.
 *
 * `npx tsx bench/token-flood.ts` (PGlite) or with DATABASE_URL. Environment: FLOOD_RESEND_MS (5000),
 * FLOOD_LIST_REQUESTS (400).
 */
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { migrateToLatest } from '../src/db/migrate.js';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { Flood } from '../test/token-flood.js';
import { makeWorkDir, onCleanup, pinSelf, runMain } from './processes.js';
import { createBenchDatabase } from './seed.js';
import { LOAD_CORE, createSubject, envNumber, startCommand, startService } from './service.js';

const LIST_REQUESTS = envNumber('FLOOD_LIST_REQUESTS', 400);
const fields = [
  { key: 'employeeNumber', name: 'Employee number', dataType: 'String' as const, required: true },
  { key: 'fullName', name: 'Full name', dataType: 'String' as const, required: true },
];
const tenant = (key: string, clients: { clientId: string; clientSecret: string }[]) => ({
  key,
  name: key,
  clients: clients.map((c) => ({ ...c, scopes: ['ServiceApi' as const], permissions: ['*'] })),
  subjectFields: fields,
  matchingFieldKeys: ['employeeNumber'],
  externalIdFieldKey: 'employeeNumber',
});
const KNOWN = { clientId: 'known', clientSecret: 'known-client-secret' };
const FIRST = { clientId: 'first', clientSecret: 'first-client-secret' };
const LISTER = { clientId: 'lister', clientSecret: 'lister-client-secret' };

async function token(url: string, tenantKey: string, c: { clientId: string; clientSecret: string }) {
  const t0 = performance.now();
  const res = await fetch(`${url}/connect/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: tenantKey,
      client_id: c.clientId,
      client_secret: c.clientSecret,
    }),
    signal: AbortSignal.timeout(120_000),
  }).catch(() => undefined);
  const body = res ? ((await res.json()) as { access_token?: string }) : {};
  return { status: res?.status ?? 0, token: body.access_token, ms: Math.round(performance.now() - t0) };
}

async function listP99(url: string, authorization: string): Promise<{ p50: number; p99: number }> {
  const ms: number[] = [];
  for (let i = 0; i < LIST_REQUESTS; i++) {
    const t0 = performance.now();
    const res = await fetch(`${url}/api/v2/subject?PageSize=20`, { headers: { authorization } });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`list answered ${res.status}`);
    ms.push(performance.now() - t0);
  }
  ms.sort((a, b) => a - b);
  const at = (q: number) => Math.round(ms[Math.min(ms.length - 1, Math.ceil(ms.length * q) - 1)]! * 10) / 10;
  return { p50: at(0.5), p99: at(0.99) };
}

async function main() {
  const log = (line: string) => console.log(line);
  const workDir = await makeWorkDir('ssdi-bench-token-flood-', log);
  const db = await createBenchDatabase(process.env['DATABASE_URL']);
  onCleanup('bench database', () => db.dispose());
  const handle = await db.open();
  await migrateToLatest(handle.db);
  await applyTenantFile(handle.db, new SecretBox(handle.db, undefined), {
    tenants: [tenant('flooded', [KNOWN, FIRST]), tenant('other', [LISTER])],
  });
  await handle.close();
  await pinSelf(LOAD_CORE);
  const service = await startService(startCommand(log), db, { name: 'token-flood: service', logFile: path.join(workDir, 'service.log') });
  const lister = await token(service.url, 'other', LISTER);
  const authorization = `Bearer ${lister.token}`;
  for (let i = 0; i < 20; i++) await createSubject(service.url, authorization, i);
  const before = await token(service.url, 'flooded', KNOWN);
  log(`known client, before the flood: ${before.ms} ms (${before.status})`);
  await listP99(service.url, authorization); // warm-up
  const alone = await listP99(service.url, authorization);
  log(`other tenant's list alone: ${JSON.stringify(alone)}`);

  const bodies = Array.from({ length: 50 }, (_, i) =>
    new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: i % 3 === 2 ? `no-such-tenant-${i}` : 'flooded',
      client_id: i % 3 === 1 ? `nobody-${i}` : KNOWN.clientId,
      client_secret: `wrong-${i}`,
    }).toString(),
  );
  const flood = new Flood(service.url, '127.0.0.2', bodies);
  await flood.started();
  await sleep(3_000);
  const known = await token(service.url, 'flooded', KNOWN);
  const first = await token(service.url, 'flooded', FIRST);
  log(`under the flood: known client ${known.ms} ms (${known.status}), first-time client ${first.ms} ms (${first.status})`);
  const during = await listP99(service.url, authorization);
  log(`other tenant's list during the flood: ${JSON.stringify(during)} (p99 ${(during.p99 / alone.p99).toFixed(2)}x alone)`);
  log(`flood answers: ${JSON.stringify(await flood.stop())}`);
  const after = await listP99(service.url, authorization);
  log(`other tenant's list after the flood: ${JSON.stringify(after)}`);
}

await runMain('token-flood bench', main);
