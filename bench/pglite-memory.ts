/**
 * The embedded default's memory: `npm start` on a new DATA_DIR (the template load, the demo tenant), then
 * again on that directory (a reopen), each idle once ready, as resident memory from /proc. The RSS is split
 * by mapping (smaps): PGlite's WASM linear memory is one anonymous mapping of several GiB of address space
 * (reserved with its guard region, resident only as far as PostgreSQL touched it), the rest is Node's
 * (V8 heaps, code, native buffers, the mapped binary).
 *
 *   npm run bench:pglite-memory                           # BENCH_PGLITE_IDLE=5: seconds idle before each sample
 *   BENCH_PGLITE_NODE_FLAGS=--liftoff-only npm run bench:pglite-memory   # node flags added to `npm start`'s
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort, makeWorkDir, onCleanup, runMain, spawnPinned, tail, waitForHttp, workerNodePid } from './processes.js';
import { REPO, SERVER_CORE, baseEnv, envNumber, startCommand } from './service.js';

const IDLE_S = envNumber('BENCH_PGLITE_IDLE', 5);
const MB = 1024 * 1024;
/** V8 reserves a WASM memory's whole 32-bit space and a guard region: at least this much address space. */
const WASM_RESERVATION = BigInt(4 * 1024 * MB);

interface Sample {
  peak: number;
  idle: number;
  wasm: number;
  otherAnon: number;
  file: number;
}

/** VmRSS/VmHWM of `pid` in bytes. */
function status(pid: number): { rss: number; hwm: number } {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/**
 * Resident bytes by kind of mapping: WASM linear memory (its accessible part, an anonymous mapping followed
 * at once by the inaccessible rest of its reservation of several GiB), other anonymous memory (V8's heap
 * pages, malloc's arenas), file-backed (the node binary, libraries).
 */
function smaps(pid: number): { wasm: number; otherAnon: number; file: number } {
  const maps: { start: bigint; end: bigint; inaccessible: boolean; anonymous: boolean; rss: number }[] = [];
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const header = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)/.exec(line);
    if (header) {
      // The inode: 0 for anonymous memory (named or not: [heap], [anon:…]).
      const [start, end] = [BigInt(`0x${header[1]}`), BigInt(`0x${header[2]}`)];
      maps.push({ start, end, inaccessible: header[3] === '---p', anonymous: header[4] === '0', rss: 0 });
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && maps.length) maps.at(-1)!.rss = Number(rss[1]) * 1024;
  }
  const out = { wasm: 0, otherAnon: 0, file: 0 };
  maps.forEach((m, i) => {
    const next = maps[i + 1];
    const wasm = m.anonymous && next?.inaccessible && next.start === m.end && next.end - next.start >= WASM_RESERVATION;
    if (wasm) out.wasm += m.rss;
    else if (m.anonymous) out.otherAnon += m.rss;
    else out.file += m.rss;
  });
  return out;
}

/** `npm start`'s command on `dataDir` until ready with the demo, idle IDLE_S, then the sample; stopped after. */
async function measure(start: string, dataDir: string, name: string, logDir: string): Promise<Sample> {
  const port = await freePort();
  const logFile = path.join(logDir, `${name}.log`);
  const env = { ...baseEnv(), PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  const proc = spawnPinned(name, SERVER_CORE, ['sh', '-c', start], { cwd: REPO, env, logFile });
  let pid: number | undefined;
  try {
    const url = `http://127.0.0.1:${port}`;
    await waitForHttp(`${url}/readyz`, proc);
    // Printed once the demo tenant is there (created or found) and the app serves.
    for (let i = 0; !/Demo tenant/.test(tail(logFile, 200)); i++) {
      if (i > 300) throw new Error(`${name}: no demo tenant printed:\n${tail(logFile)}`);
      await sleep(100);
    }
    await sleep(IDLE_S * 1000);
    pid = workerNodePid(proc.pid);
    const { rss, hwm } = status(pid);
    return { peak: hwm, idle: rss, ...smaps(pid) };
  } finally {
    await proc.stop();
    // `sh` may end before the node process it started (which drains, then closes the database): the
    // reopen must not find the data directory still locked.
    while (pid !== undefined && existsSync(`/proc/${pid}`)) await sleep(100);
  }
}

await runMain('pglite-memory', async () => {
  const log = (line: string) => console.log(line);
  const flags = process.env['BENCH_PGLITE_NODE_FLAGS'];
  const start = flags ? startCommand(log).replace(/^node /, `node ${flags} `) : startCommand(log);
  const work = await makeWorkDir('ssdi-pglite-memory-', log);
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ssdi-pglite-memory-data-'));
  onCleanup('data dir', () => rm(dataDir, { recursive: true, force: true }));
  log(`start: ${start}\nDATA_DIR: ${dataDir}, idle ${IDLE_S} s before each sample`);
  const rows: [string, Sample][] = [];
  rows.push(['first start', await measure(start, dataDir, 'first-start', work)]);
  rows.push(['reopen', await measure(start, dataDir, 'reopen', work)]);
  const mb = (n: number) => `${Math.round(n / MB)} MB`;
  console.log('\n| run | peak RSS (VmHWM) | idle RSS (VmRSS) | of it: WASM memory | other anonymous | file-backed |');
  console.log('|---|---|---|---|---|---|');
  for (const [name, s] of rows)
    console.log(`| ${name} | ${mb(s.peak)} | ${mb(s.idle)} | ${mb(s.wasm)} | ${mb(s.otherAnon)} | ${mb(s.file)} |`);
});
