/**
 * `npm run bench:profile`: where a list request's CPU goes, so a target the bench misses comes with the
 * profile that explains it (issue 35). For each list scenario, `npm start`'s command with `--cpu-prof`
 * serves the seeded bench database, pinned to its core, under the bench's load (autocannon on the other
 * core); then its profile is summarised: CPU per request (the process's user + system time over the
 * measured run), the busy time by layer (HTTP and Express, GraphQL execution, pg, Kysely, JSON, GC, ...)
 * and the functions with the most self time. Start-up and idle samples are left out of the shares.
 * A second run of 5 s under V8's sampling heap profiler (through the inspector, counting what the
 * collector has freed too; its own run, as its stack walks cost CPU) gives the bytes a request allocates
 * and the functions that allocate most: what the collector's share comes from.
 *
 *   npm run bench:profile                                       # PGlite; DATABASE_URL=… for PostgreSQL
 *   BENCH_PROFILE_SCENARIOS=rest-list,gql-20-same npm run bench:profile
 *
 * BENCH_SUBJECTS (default 100000), BENCH_DURATION (10 s), BENCH_WARMUP (3 s), BENCH_CONNECTIONS (32),
 * BENCH_LABEL as for `npm run bench`. Writes bench/results/<date>-profile[-<label>]-<db>.json; with
 * BENCH_KEEP=1 the .cpuprofile files stay in the printed work directory (open them in Chrome's DevTools).
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import WebSocket from 'ws';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { migrateToLatest } from '../src/db/migrate.js';
import { runLoad } from './load.js';
import { cpuMs, drain, freePort, makeWorkDir, onCleanup, pinSelf, runMain } from './processes.js';
import { type Scenario, LIST_SCENARIOS, buildScenarios } from './scenarios.js';
import { machineFacts, writeReport } from './report.js';
import { createBenchDatabase, seedTenant } from './seed.js';
import { LOAD_CORE, REPO, baseEnv, bearer, envNumber, startCommand, startService } from './service.js';
import { CLIENT, TENANT_KEY } from './tenant-data.js';

const SUBJECTS = Math.floor(envNumber('BENCH_SUBJECTS', 100_000));
const DURATION = envNumber('BENCH_DURATION', 10);
const WARMUP = envNumber('BENCH_WARMUP', 3);
const CONNECTIONS = Math.floor(envNumber('BENCH_CONNECTIONS', 32));
const ONLY = (process.env['BENCH_PROFILE_SCENARIOS'] || LIST_SCENARIOS.join(',')).split(',').map((s) => s.trim());
const TOP_FUNCTIONS = 15;
/** Seconds of the allocation-sampled run that follows each measured one. */
const ALLOCATION_RUN = 5;

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface CpuProfile {
  nodes: { id: number; callFrame: CallFrame }[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * The layer a function's self time is counted in. The order matters: the first rule that matches wins
 * (JSON.stringify is a builtin and shows as its caller's self time: the REST handler's).
 */
const LAYERS: [string, (f: CallFrame, pkg: string | undefined) => boolean][] = [
  ['garbage collection', (f) => f.functionName === '(garbage collector)'],
  [
    'start-up (module loading)',
    (f) => /node:internal\/modules|^node:internal\/fs/.test(f.url) || /^(compileSourceTextModule|wrapSafe)$/.test(f.functionName),
  ],
  [
    'JSON.stringify (and the REST handler)',
    (f) => /stringify/i.test(f.functionName) || (f.functionName === 'handle' && /rest\/router/.test(f.url)),
  ],
  [
    'HTTP: node:http, sockets, Express',
    (f, pkg) =>
      /^node:(internal\/)?(_http|net|stream|events|buffer|internal\/streams|internal\/stream_base|internal\/http)/.test(f.url) ||
      /^(router|express|body-parser|on-finished|finalhandler|send|depd|statuses|content-type|type-is|raw-body|qs)$/.test(pkg ?? '') ||
      /^(writev|writevGeneric|writeUtf8String|writeBuffer|writeLatin1String|utf8Slice|latin1Slice|parserOnIncoming)$/.test(f.functionName),
  ],
  ['pg (protocol, rows)', (_f, pkg) => /^(pg|pg-protocol|pg-types|pg-pool|postgres-.*)$/.test(pkg ?? '')],
  // PGlite's PostgreSQL is WebAssembly: its functions carry wasm:// URLs.
  ['PGlite (in-process database)', (f, pkg) => pkg === '@electric-sql/pglite' || f.url.startsWith('wasm://')],
  ['Kysely', (_f, pkg) => pkg === 'kysely'],
  ['Yoga, whatwg-node, envelop', (_f, pkg) => /^(graphql-yoga|@whatwg-node\/.*|@envelop\/.*|@graphql-yoga\/.*)$/.test(pkg ?? '')],
  // graphql-jit's compiled resolvers are anonymous code named after the type and field (`Subject__…Handler`).
  [
    'GraphQL execution (graphql-jit, Pothos)',
    (f, pkg) => /^(graphql-jit|graphql|@pothos\/.*)$/.test(pkg ?? '') || /Handler$/.test(f.functionName),
  ],
  ['zod', (_f, pkg) => pkg === 'zod'],
  ['metrics, logging, tracing', (_f, pkg) => /^(prom-client|pino|pino-http|@opentelemetry\/.*)$/.test(pkg ?? '')],
  ["the service's own code", (f) => /\/dist\/src\//.test(f.url)],
];
const OTHER = 'other (V8 builtins, microtasks, node internals)';

/** The npm package a script URL belongs to (`@scope/name` or `name`), if any. */
function packageOf(url: string): string | undefined {
  return /node_modules\/((?:@[^/]+\/)?[^/]+)\/(?!.*node_modules\/)/.exec(url)?.[1];
}

/** A function as the tables name it: its name, and its file (package-relative or dist-relative) and line. */
function functionName(f: CallFrame): string {
  const where = f.url ? `${f.url.replace(/^.*node_modules\//, '').replace(/^.*\/dist\//, '')}:${f.lineNumber + 1}` : 'native';
  return `${f.functionName || '(anonymous)'} ${where}`;
}

interface Summary {
  /** Busy milliseconds in the profile, start-up and idle left out. */
  busyMs: number;
  layers: { layer: string; share: number }[];
  functions: { name: string; share: number }[];
}

/** Self time by layer and by function, as shares of the busy time after start-up. */
export function summarise(profile: CpuProfile): Summary {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const byLayer = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const f = frames.get(id)!;
    const dt = profile.timeDeltas[i] ?? 0;
    if (f.functionName === '(idle)') return;
    const pkg = packageOf(f.url);
    const layer = LAYERS.find(([, test]) => test(f, pkg))?.[0] ?? OTHER;
    if (layer.startsWith('start-up')) return;
    busy += dt;
    byLayer.set(layer, (byLayer.get(layer) ?? 0) + dt);
    const name = functionName(f);
    byFunction.set(name, (byFunction.get(name) ?? 0) + dt);
  });
  const shares = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).map(([k, t]) => ({ k, share: busy > 0 ? t / busy : 0 }));
  return {
    busyMs: busy / 1000,
    layers: shares(byLayer).map(({ k, share }) => ({ layer: k, share })),
    functions: shares(byFunction)
      .slice(0, TOP_FUNCTIONS)
      .map(({ k, share }) => ({ name: k, share })),
  };
}

interface SamplingNode {
  callFrame: CallFrame;
  selfSize: number;
  children: SamplingNode[];
}

/** The bytes allocated over a run, and the functions that allocated most (their own allocations). */
interface Allocations {
  bytes: number;
  functions: { name: string; bytes: number }[];
}

/**
 * Starts V8's sampling heap profiler in the process whose inspector listens on `port`, counting objects
 * the collector has already freed as well (Node's `--heap-prof` keeps only what is still alive); `stop`
 * ends it and sums the samples by allocating function.
 */
async function sampleAllocations(port: number): Promise<{ stop(): Promise<Allocations> }> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const pending = new Map<number, { resolve: (result: unknown) => void; reject: (e: Error) => void }>();
  // A service that dies mid-run fails the commands waiting on it instead of leaving them hanging.
  const failAll = (e: Error) => {
    for (const p of pending.values()) p.reject(e);
    pending.clear();
  };
  ws.on('error', failAll).on('close', () => failAll(new Error('the inspector closed its connection')));
  ws.on('message', (data) => {
    const message = JSON.parse(String(data)) as { id?: number; result?: unknown; error?: { message: string } };
    const waiting = message.id === undefined ? undefined : pending.get(message.id);
    if (!waiting) return;
    pending.delete(message.id!);
    if (message.error) waiting.reject(new Error(`inspector: ${message.error.message}`));
    else waiting.resolve(message.result);
  });
  let id = 0;
  const send = (method: string, params: object = {}) =>
    new Promise<unknown>((resolve, reject) => {
      pending.set(++id, { resolve, reject });
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send('HeapProfiler.enable');
  await send('HeapProfiler.startSampling', {
    samplingInterval: 16_384,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  return {
    async stop() {
      const { profile } = (await send('HeapProfiler.stopSampling')) as { profile: { head: SamplingNode } };
      ws.close();
      const byFunction = new Map<string, number>();
      let bytes = 0;
      const visit = (n: SamplingNode) => {
        bytes += n.selfSize;
        const name = functionName(n.callFrame);
        if (n.selfSize > 0) byFunction.set(name, (byFunction.get(name) ?? 0) + n.selfSize);
        n.children.forEach(visit);
      };
      visit(profile.head);
      const functions = [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, TOP_FUNCTIONS);
      return { bytes, functions: functions.map(([name, b]) => ({ name, bytes: b })) };
    },
  };
}

interface ProfiledScenario {
  id: string;
  title: string;
  rps: number;
  p50: number;
  p99: number;
  cpuMsPerRequest: number;
  /** Bytes allocated per request over the measured run (sampled), and the functions allocating most. */
  allocatedKbPerRequest: number;
  allocations: { name: string; kbPerRequest: number }[];
  /** Kept with BENCH_KEEP. */
  profileFile?: string;
  summary: Summary;
}

await runMain('profile', async () => {
  const log = (line: string) => console.log(line);
  const start = startCommand(log);
  const workDir = await makeWorkDir('ssdi-bench-profile-', log);
  const bench = await createBenchDatabase(process.env['DATABASE_URL']);
  onCleanup('bench database', () => bench.dispose());
  const handle = await bench.open();
  try {
    await migrateToLatest(handle.db);
    // The lists call no provider: a data source on a closed port is enough.
    const seeded = await seedTenant(handle.db, { subjects: SUBJECTS, providerUrl: 'http://127.0.0.1:9' });
    log(`database: ${bench.kind}, seeded ${seeded.subjects} subjects in ${seeded.seconds.toFixed(1)} s`);
  } finally {
    await handle.close();
  }
  await pinSelf(LOAD_CORE);

  // Only the list scenarios, which read nothing of the context the capture phase finds for the others.
  const scenarios = buildScenarios({ deepCursor: '', subjectId: '', pageCursors: [null], upsertStart: 0 }).filter(
    (s: Scenario) => LIST_SCENARIOS.includes(s.id) && ONLY.includes(s.id),
  );
  if (scenarios.length === 0) throw new Error(`BENCH_PROFILE_SCENARIOS names none of ${LIST_SCENARIOS.join(', ')}`);
  const results: ProfiledScenario[] = [];
  for (const sc of scenarios) {
    const dir = path.join(workDir, sc.id);
    const inspector = await freePort();
    const profiled = start.replace(/^node /, `node --cpu-prof --cpu-prof-dir=${dir} --inspect=127.0.0.1:${inspector} `);
    const svc = await startService(profiled, bench, { name: `service (${sc.id})`, logFile: path.join(workDir, `${sc.id}.log`) });
    const headers = {
      ...(await bearer(svc.url, TENANT_KEY, CLIENT)),
      ...(sc.method === 'POST' ? { 'content-type': 'application/json' } : {}),
    };
    const spec = { url: svc.url, method: sc.method, path: sc.path, headers, connections: CONNECTIONS, checkGraphqlErrors: sc.graphql };
    const opts = { core: LOAD_CORE, repoRoot: REPO, workDir, env: baseEnv() };
    await runLoad({ ...spec, ...(sc.body ? { body: sc.body } : {}), durationSec: WARMUP, warmupSec: 0 }, opts);
    await drain(svc.url);
    const before = cpuMs(svc.pid);
    const load = await runLoad({ ...spec, ...(sc.body ? { body: sc.body } : {}), durationSec: DURATION, warmupSec: 0 }, opts);
    const cpu = cpuMs(svc.pid) - before;
    // Allocations over a run of their own: the sampler's stack walks would count in the CPU above.
    await drain(svc.url);
    const sampling = await sampleAllocations(inspector);
    const sampled = await runLoad({ ...spec, ...(sc.body ? { body: sc.body } : {}), durationSec: ALLOCATION_RUN, warmupSec: 0 }, opts);
    const allocations = await sampling.stop();
    const sampledRequests = Math.max(1, sampled.requests);
    // SIGTERM to node itself (the group's `sh` would end first, and the group's stop then kills what is
    // left): the service drains and exits, and Node writes the profile on the way out.
    process.kill(svc.pid, 'SIGTERM');
    for (let i = 0; existsSync(`/proc/${svc.pid}`) && i < 300; i++) await sleep(100);
    await svc.proc.stop();
    const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
    if (!file) throw new Error(`${sc.id}: no profile written in ${dir}`);
    const summary = summarise(JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as CpuProfile);
    const requests = Math.max(1, load.requests);
    results.push({
      id: sc.id,
      title: sc.title,
      rps: load.rps,
      p50: load.p50,
      p99: load.p99,
      cpuMsPerRequest: cpu / requests,
      allocatedKbPerRequest: allocations.bytes / 1024 / sampledRequests,
      allocations: allocations.functions.map((f) => ({ name: f.name, kbPerRequest: f.bytes / 1024 / sampledRequests })),
      ...(process.env['BENCH_KEEP'] ? { profileFile: path.join(dir, file) } : {}),
      summary,
    });
    log(
      `${sc.id}: ${Math.round(load.rps)} req/s, ${(cpu / requests).toFixed(3)} ms CPU and ${(allocations.bytes / 1024 / sampledRequests).toFixed(0)} KB allocated per request`,
    );
  }

  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const layers = [...new Set(results.flatMap((r) => r.summary.layers.map((l) => l.layer)))];
  console.log(`\n| layer (share of busy CPU) | ${results.map((r) => r.id).join(' | ')} |`);
  console.log(`| --- | ${results.map(() => '--:').join(' | ')} |`);
  console.log(`| req/s | ${results.map((r) => Math.round(r.rps)).join(' | ')} |`);
  console.log(`| CPU ms per request | ${results.map((r) => r.cpuMsPerRequest.toFixed(3)).join(' | ')} |`);
  console.log(`| KB allocated per request | ${results.map((r) => r.allocatedKbPerRequest.toFixed(0)).join(' | ')} |`);
  for (const layer of layers) {
    console.log(`| ${layer} | ${results.map((r) => pct(r.summary.layers.find((l) => l.layer === layer)?.share ?? 0)).join(' | ')} |`);
  }
  for (const r of results) {
    console.log(`\n${r.title} (${r.id}): the functions with the most self time\n`);
    for (const f of r.summary.functions) console.log(`  ${pct(f.share).padStart(6)}  ${f.name}`);
    console.log(`\n${r.title} (${r.id}): the functions allocating most, KB per request\n`);
    for (const a of r.allocations) console.log(`  ${a.kbPerRequest.toFixed(1).padStart(6)}  ${a.name}`);
  }
  const report = {
    date: new Date().toISOString().slice(0, 10),
    label: process.env['BENCH_LABEL'] || undefined,
    database: bench.kind,
    machine: machineFacts(0),
    settings: { subjects: SUBJECTS, durationSec: DURATION, warmupSec: WARMUP, connections: CONNECTIONS },
    scenarios: results,
  };
  log(`\nwritten: ${await writeReport(path.join(REPO, 'bench/results'), report, 'profile')}`);
});
