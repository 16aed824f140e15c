/**
 * Child processes of the bench: spawning pinned to a core, stopping them (and everything they started),
 * finding the node processes of a tree, their peak RSS, and one cleanup list run on exit, on errors and
 * on Ctrl-C.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { openSync, closeSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

type Cleanup = { name: string; run: () => Promise<void> | void };
const cleanups: Cleanup[] = [];
let cleaning: Promise<void> | undefined;

/** Registers work to undo at the end (run last-registered first); returns a function that unregisters it. */
export function onCleanup(name: string, run: () => Promise<void> | void): () => void {
  const entry = { name, run };
  cleanups.push(entry);
  return () => {
    const i = cleanups.indexOf(entry);
    if (i >= 0) cleanups.splice(i, 1);
  };
}

/** Runs every registered cleanup once, newest first; errors are printed, not thrown. */
export function runCleanups(): Promise<void> {
  cleaning ??= (async () => {
    while (cleanups.length > 0) {
      const c = cleanups.pop()!;
      try {
        await c.run();
      } catch (e) {
        console.error(`cleanup ${c.name} failed: ${(e as Error).message}`);
      }
    }
  })();
  return cleaning;
}

/**
 * Runs an entry point's `main` with the signal handlers installed, prints its error (unless a signal is
 * stopping it), runs every cleanup, and exits (1 on error).
 */
export async function runMain(name: string, main: () => Promise<void>): Promise<never> {
  installSignalHandlers();
  try {
    await main();
  } catch (e) {
    if (!stoppingSignal()) console.error(`\n${name} failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    process.exitCode = 1;
  } finally {
    await runCleanups();
  }
  process.exit(process.exitCode ?? 0);
}

/** A new temp dir for a run's logs and specs, removed at the end unless BENCH_KEEP is set. */
export async function makeWorkDir(prefix: string, log: (line: string) => void): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  if (process.env['BENCH_KEEP']) log(`work dir (kept: BENCH_KEEP): ${dir}`);
  else onCleanup('work dir', () => rm(dir, { recursive: true, force: true }));
  return dir;
}

let stoppedBy: NodeJS.Signals | undefined;

/** The signal that is stopping the bench, if any (the run's own errors after it are consequences). */
export const stoppingSignal = () => stoppedBy;

/**
 * Ctrl-C / SIGTERM: clean up, then exit with the conventional code. Handlers stay installed: Ctrl-C
 * reaches this process twice (from the terminal and relayed by tsx), and a second signal without a
 * handler would kill it in the middle of its cleanup.
 */
export function installSignalHandlers(): void {
  const handler = (signal: NodeJS.Signals) => {
    if (stoppedBy) return;
    stoppedBy = signal;
    console.error(`\n${signal}: stopping child processes and removing temporary data...`);
    void runCleanups().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}

export interface Spawned {
  child: ChildProcess;
  pid: number;
  /** Resolves with the exit code (or signal name) once the process has ended. */
  exited: Promise<number | string>;
  /** SIGTERM to the process group, SIGKILL after `graceMs`; resolves once it has ended. */
  stop(graceMs?: number): Promise<void>;
  logFile: string;
}

/**
 * Spawns `command` pinned to `core` (taskset) in its own process group, output to `logFile`, and
 * registers its stop as a cleanup. `taskset` execs the command, so the pid is the command's.
 */
export function spawnPinned(
  name: string,
  core: number,
  command: string[],
  opts: { env: NodeJS.ProcessEnv; cwd: string; logFile: string },
): Spawned {
  // Once the cleanup has begun nothing new starts: it could outlive the harness.
  if (cleaning) throw new Error(`not starting ${name}: the bench is stopping`);
  const fd = openSync(opts.logFile, 'a');
  // detached: its own process group, so one signal reaches everything it starts (tsx spawns a child node).
  const child = spawn('taskset', ['-c', String(core), ...command], {
    cwd: opts.cwd,
    env: opts.env,
    detached: true,
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  const pid = child.pid;
  if (pid === undefined) throw new Error(`cannot start ${name}`);
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  let done = false;
  void exited.then(() => (done = true));
  const stop = async (graceMs = 10_000) => {
    if (done) return;
    const signal = (s: NodeJS.Signals) => {
      try {
        process.kill(-pid, s);
      } catch {
        // already gone
      }
    };
    signal('SIGTERM');
    const killed = await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)]);
    if (!killed) {
      signal('SIGKILL');
      await exited;
    }
    // Descendants that outlived the group leader (none expected): one more SIGKILL to the group.
    signal('SIGKILL');
  };
  const unregister = onCleanup(name, () => stop(3000));
  return {
    child,
    pid,
    exited,
    stop: async (graceMs) => {
      await stop(graceMs);
      unregister();
    },
    logFile: opts.logFile,
  };
}

/** Last lines of a log file (for error messages). */
export function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** A TCP port free on loopback right now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Polls `url` until it answers 200, the process exits, or `timeoutMs` passes. */
export async function waitForHttp(url: string, proc: Spawned, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited: number | string | undefined;
  void proc.exited.then((c) => (exited = c));
  while (Date.now() < deadline) {
    if (exited !== undefined) throw new Error(`process exited (${exited}) before ${url} answered:\n${tail(proc.logFile)}`);
    try {
      const res = await fetch(url);
      await res.arrayBuffer();
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs / 1000} s:\n${tail(proc.logFile)}`);
}

/**
 * Waits until the server has worked off what a load run left queued (requests cut off at the end keep
 * their database work running): `/readyz` runs `select 1` behind that work, so it answers quickly only
 * once the backlog is gone. Without this a run's leftovers would be measured in the next run.
 */
export async function drain(baseUrl: string, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const t0 = performance.now();
    try {
      const res = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())) });
      await res.arrayBuffer();
    } catch {
      // timed out or refused: the loop's deadline decides
    }
    if (performance.now() - t0 < 250) return;
  }
  throw new Error(`${baseUrl} still busy ${timeoutMs / 1000} s after a load run`);
}

/** Every descendant of `pid` (children of each of its threads, recursively). */
export function descendants(pid: number): number[] {
  const out: number[] = [];
  const visit = (p: number) => {
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${p}/task`);
    } catch {
      return;
    }
    for (const tid of tids) {
      let children: string;
      try {
        children = readFileSync(`/proc/${p}/task/${tid}/children`, 'utf8');
      } catch {
        continue;
      }
      for (const c of children.split(/\s+/).filter(Boolean).map(Number)) {
        out.push(c);
        visit(c);
      }
    }
  };
  visit(pid);
  return out;
}

// By the executable: Node 24 names its main thread `MainThread`, so /proc/<pid>/comm no longer says node.
function isNode(pid: number): boolean {
  try {
    return path.basename(readlinkSync(`/proc/${pid}/exe`)) === 'node';
  } catch {
    return false;
  }
}

/**
 * The node process that does the work in the tree rooted at `pid`: the deepest node process (tsx's
 * CLI is a node process that spawns the real one; `sh -c` may sit on top).
 */
export function workerNodePid(pid: number): number {
  const tree = [pid, ...descendants(pid)].filter(isNode);
  const leaves = tree.filter((p) => !descendants(p).some(isNode));
  const found = leaves.at(-1) ?? tree.at(-1);
  if (found === undefined) throw new Error(`no node process under pid ${pid}`);
  return found;
}

/** User + system CPU time a process has used so far, in milliseconds (/proc/<pid>/stat, 100 ticks a second). */
export function cpuMs(pid: number): number {
  // Fields 14 and 15 of stat; 12 and 13 after the pid and the parenthesised command.
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** VmHWM (peak resident set size) of a process, in bytes. */
export function peakRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/^VmHWM:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? Number.NaN);
  return kb * 1024;
}

/** Resets VmHWM to the current RSS (`5` to clear_refs, Linux ≥ 4.0), so the next peak is a scenario's own. */
export function resetPeakRss(pid: number): void {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
  } catch (e) {
    console.error(`cannot reset the peak RSS of ${pid}: ${(e as Error).message}`);
  }
}

/**
 * Pins every thread of this process to `core` (the harness runs the provider and waits beside the load
 * generator); a string is taskset's list (`0-1`: every core of two). Children started later inherit it.
 */
export async function pinSelf(core: number | string): Promise<void> {
  const child = spawn('taskset', ['-a', '-p', '-c', String(core), String(process.pid)], { stdio: 'ignore' });
  await new Promise<void>((resolve) => child.once('exit', () => resolve()));
}
