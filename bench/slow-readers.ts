/**
 * Slow readers of issue 30, F1 (P77–P79): the built service alone on SERVER_CORE (ADMISSION_CAPACITY 10,
 * ADMISSION_COST_PER_UNIT 200, so one big page weighs a tenant's whole share of 5), this harness on
 * LOAD_CORE. Two tenants hold 200 subjects with a 50 KB value each; in each, one raw socket POSTs a
 * `subjects(first: 200)` page (~10 MB) and reads the answer at 2 KB/s in 256-byte sips. Meanwhile a third
 * tenant lists its subjects sequentially. Prints that tenant's statuses and latency alone and during the
 * reads, and the reading tenants' `admission_in_flight_units` sampled from /metrics throughout.
 *
 * `npx tsx bench/slow-readers.ts` (PGlite) or with DATABASE_URL. Environment: SLOW_LIST_REQUESTS (10),
 * SLOW_REQUEST_TIMEOUT_MS (10000: a list not answered within it counts as status 0), SLOW_READ_BPS (2048),
 * SLOW_LIST_PAUSE_MS (1000: the pause between two lists during the reads, so they span ~10 s of reading).
 * Uses only bench helpers and src/ exports that older commits have too, so it also measures "before".
 */
import path from 'node:path';
import { type Socket, connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { migrateToLatest } from '../src/db/migrate.js';
import { SecretBox } from '../src/domains/data/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { freePort, makeWorkDir, onCleanup, pinSelf, runMain, spawnPinned, waitForHttp } from './processes.js';
import { createBenchDatabase } from './seed.js';
import { LOAD_CORE, REPO, SERVER_CORE, baseEnv, bearer, createSubject, envNumber, startCommand } from './service.js';

const LIST_REQUESTS = envNumber('SLOW_LIST_REQUESTS', 10);
const REQUEST_TIMEOUT_MS = envNumber('SLOW_REQUEST_TIMEOUT_MS', 10_000);
const READ_BPS = envNumber('SLOW_READ_BPS', 2048);
const LIST_PAUSE_MS = envNumber('SLOW_LIST_PAUSE_MS', 1000);
const SUBJECTS = 200;
const LONG = 'x'.repeat(50_000);
const BIG_PAGE = `{ subjects(first: ${SUBJECTS}) { edges { node { externalId customFieldValues { field { key } values { valueText } } } } } }`;
/** What the service is started with beyond the bench's basics; the rest are its defaults. */
const SETTINGS = { ADMISSION_CAPACITY: '10', ADMISSION_COST_PER_UNIT: '200', MAIL_POLL_MS: '3600000' };
/** A hard bound on the whole run: the old code answers each list only after its 5 s queue wait. */
const RUN_LIMIT_MS = 240_000 + LIST_REQUESTS * (REQUEST_TIMEOUT_MS * 2 + LIST_PAUSE_MS);

const CLIENT = { clientId: 'bench', clientSecret: 'bench-client-secret' };
const tenant = (key: string) => ({
  key,
  name: key,
  clients: [{ ...CLIENT, scopes: ['ServiceApi' as const], permissions: ['*'] }],
  subjectFields: [
    { key: 'employeeNumber', name: 'Employee number', dataType: 'String' as const, required: true },
    { key: 'fullName', name: 'Full name', dataType: 'String' as const, required: true },
    { key: 'email', name: 'E-mail', dataType: 'String' as const },
  ],
  matchingFieldKeys: ['employeeNumber'],
  externalIdFieldKey: 'employeeNumber',
});
const READERS = ['reader-a', 'reader-b'];
const OTHER = 'other';

/** A raw-socket POST of BIG_PAGE whose answer is read at READ_BPS from the paused socket. */
function slowReader(url: string, authorization: string) {
  const body = JSON.stringify({ query: BIG_PAGE });
  const socket: Socket = connect(Number(new URL(url).port), '127.0.0.1');
  let received = 0;
  let closedAt: number | undefined;
  const opened = Date.now();
  socket.on('error', () => {});
  socket.once('close', () => (closedAt = Date.now()));
  socket.write(
    `POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${authorization}\r\nContent-Type: application/json\r\n` +
      `Accept: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  socket.pause();
  let head = '';
  const timer = setInterval(
    () => {
      const chunk = socket.read(256) as Buffer | null;
      if (!chunk) return;
      if (received < 64) head += chunk.toString('latin1');
      received += chunk.length;
    },
    (1000 * 256) / READ_BPS,
  );
  onCleanup('slow reader', () => {
    clearInterval(timer);
    socket.destroy();
  });
  return {
    received: () => received,
    status: () => /^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? '-',
    /** Seconds the server kept the connection open (undefined: still open). */
    closedAfter: () => (closedAt === undefined ? undefined : Math.round((closedAt - opened) / 100) / 10),
    stop: () => {
      clearInterval(timer);
      socket.destroy();
    },
  };
}

async function metrics(url: string): Promise<string> {
  try {
    return await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
  } catch {
    return '';
  }
}
const metric = (text: string, name: string, labels: string) =>
  Number(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);

/** LIST_REQUESTS sequential `GET /api/v2/subject` of the third tenant, each bounded by REQUEST_TIMEOUT_MS. */
async function lists(url: string, authorization: string, pauseMs = 0) {
  const rows: { status: number; ms: number }[] = [];
  for (let i = 0; i < LIST_REQUESTS; i++) {
    if (i > 0) await sleep(pauseMs);
    const t0 = performance.now();
    let status = 0;
    try {
      const res = await fetch(`${url}/api/v2/subject`, { headers: { authorization }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
      await res.arrayBuffer();
      status = res.status;
    } catch {
      // timed out: status 0
    }
    rows.push({ status, ms: performance.now() - t0 });
  }
  const ms = rows.map((r) => r.ms).sort((a, b) => a - b);
  const statuses = new Map<number, number>();
  for (const r of rows) statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
  return {
    statuses: [...statuses].map(([s, n]) => `${s}×${n}`).join(' '),
    p50: Math.round(ms[Math.ceil(ms.length / 2) - 1]!),
    max: Math.round(ms.at(-1)!),
    non200: rows.filter((r) => r.status !== 200).length,
  };
}

async function main() {
  setTimeout(() => {
    console.error(`slow-readers: still running after ${RUN_LIMIT_MS / 1000} s, stopping`);
    process.kill(process.pid, 'SIGTERM');
  }, RUN_LIMIT_MS).unref();
  const log = (line: string) => console.log(line);
  const workDir = await makeWorkDir('ssdi-bench-slow-readers-', log);
  const db = await createBenchDatabase(process.env['DATABASE_URL']);
  onCleanup('bench database', () => db.dispose());
  const handle = await db.open();
  await migrateToLatest(handle.db);
  await applyTenantFile(handle.db, new SecretBox(handle.db, undefined), { tenants: [...READERS, OTHER].map(tenant) });
  await handle.close();

  const start = startCommand(log);
  await pinSelf(LOAD_CORE);
  const port = await freePort();
  const env = {
    ...baseEnv(),
    PORT: String(port),
    HOST: '127.0.0.1',
    NODE_ENV: 'production',
    LOG_LEVEL: 'warn',
    ...SETTINGS,
    ...(db.databaseUrl ? { DATABASE_URL: db.databaseUrl } : { DATA_DIR: db.dataDir }),
  };
  const proc = spawnPinned('slow-readers: service', SERVER_CORE, ['sh', '-c', start], {
    cwd: REPO,
    env,
    logFile: path.join(workDir, 'service.log'),
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/readyz`, proc);

  const auth = Object.fromEntries(
    await Promise.all([...READERS, OTHER].map(async (k) => [k, (await bearer(url, k, CLIENT)).authorization] as const)),
  );
  const t0 = Date.now();
  for (const k of READERS)
    for (let i = 0; i < SUBJECTS; i += 5) await Promise.all(Array.from({ length: 5 }, (_, j) => createSubject(url, auth[k]!, i + j, LONG)));
  await createSubject(url, auth[OTHER]!, 1);
  log(`seeded ${READERS.length} × ${SUBJECTS} subjects with a 50 KB value in ${((Date.now() - t0) / 1000).toFixed(1)} s (${db.kind})`);

  await lists(url, auth[OTHER]!); // warm-up
  const alone = await lists(url, auth[OTHER]!);

  const readers = READERS.map((k) => slowReader(url, auth[k]!));
  const readStart = Date.now();
  // Sampled from the first byte on, until the lists are done.
  const units: Record<string, { v: number; listing: boolean }[]> = Object.fromEntries(READERS.map((k) => [k, []]));
  let sampling = true;
  let listing = false;
  const sampler = (async () => {
    while (sampling) {
      const text = await metrics(url);
      for (const k of READERS) units[k]!.push({ v: metric(text, 'admission_in_flight_units', `tenant="${k}"`), listing });
      await sleep(100);
    }
  })();
  const firstBytes = Date.now() + 60_000;
  while (readers.some((r) => r.received() === 0) && Date.now() < firstBytes) await sleep(50);
  const producedAfter = (Date.now() - readStart) / 1000;
  listing = true;
  const during = await lists(url, auth[OTHER]!, LIST_PAUSE_MS);
  sampling = false;
  await sampler;
  const text = await metrics(url);
  const readFor = (Date.now() - readStart) / 1000;
  const ends = readers.map((r) => ({ status: r.status(), received: r.received(), closedAfter: r.closedAfter() }));
  for (const r of readers) r.stop();
  await proc.stop();

  const settings = `ADMISSION_CAPACITY=${SETTINGS.ADMISSION_CAPACITY} ADMISSION_COST_PER_UNIT=${SETTINGS.ADMISSION_COST_PER_UNIT}, defaults otherwise (ADMISSION_QUEUE_TIMEOUT_MS 5000, RESPONSE_WRITE_TIMEOUT_MS 30000 where it exists)`;
  log(`\nservice: ${db.kind}, ${settings}`);
  log(
    `readers: ${READERS.length} × POST /graphql subjects(first: ${SUBJECTS}) read at ${READ_BPS} B/s; first bytes after ${producedAfter.toFixed(1)} s`,
  );
  log(
    `third tenant: ${LIST_REQUESTS} sequential GET /api/v2/subject, each bounded by ${REQUEST_TIMEOUT_MS} ms (during the reads: ${LIST_PAUSE_MS} ms apart)\n`,
  );
  const table: Record<string, Record<string, string | number>> = {
    'list, alone': { statuses: alone.statuses, 'p50 ms': alone.p50, 'max ms': alone.max, 'non-200': alone.non200 },
    'list, during the reads': { statuses: during.statuses, 'p50 ms': during.p50, 'max ms': during.max, 'non-200': during.non200 },
  };
  console.table(table);
  const readerTable: Record<string, Record<string, string | number>> = {};
  READERS.forEach((k, i) => {
    const all = units[k]!.map((s) => s.v);
    const u = units[k]!.filter((s) => s.listing).map((s) => s.v);
    const r = ends[i]!;
    readerTable[k] = {
      'units max (whole run)': Math.max(0, ...all),
      'units max (during the lists)': Math.max(0, ...u),
      'samples > 0 (during the lists)': `${u.filter((v) => v > 0).length}/${u.length}`,
      status: r.status,
      'bytes read': r.received,
      'closed by server after s': r.closedAfter ?? `open at ${readFor.toFixed(1)}`,
    };
  });
  console.table(readerTable);
  log(
    `http_responses_cut_total{kind="answer"}: ${metric(text, 'http_responses_cut_total', 'kind="answer"')} (0 where the metric does not exist)`,
  );
}

await runMain('slow-readers bench', main);
