/**
 * What the bench's entry points (run.ts, noisy-neighbour.ts) share about the service under test: the
 * environment variables they read, the children's environment, the code state, and starting the service
 * as `npm start` does, pinned to a core, with a token for a tenant's client.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Spawned, freePort, spawnPinned, waitForHttp, workerNodePid } from './processes.js';
import type { BenchDatabase } from './seed.js';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const SERVER_CORE = 0;
export const LOAD_CORE = 1;

/** A non-negative number from the environment variable `name`, `fallback` when unset or empty. */
export function envNumber(name: string, fallback: number): number {
  const v = process.env[name];
  const n = v === undefined || v === '' ? fallback : Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got '${v}'`);
  return n;
}

/** The environment children get: the basics only, so a developer's service settings do not leak in. */
export function baseEnv(): NodeJS.ProcessEnv {
  const keep = ['PATH', 'HOME', 'TMPDIR', 'LANG', 'LC_ALL', 'TZ', 'USER'];
  const env: NodeJS.ProcessEnv = {};
  for (const k of keep) if (process.env[k] !== undefined) env[k] = process.env[k];
  env['PATH'] = `${path.join(REPO, 'node_modules/.bin')}:${env['PATH'] ?? ''}`;
  return env;
}

/** Output of `git args` in the repository ('' when git fails). */
function git(args: string[]): string {
  try {
    return execFileSync('git', args, { cwd: REPO, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], maxBuffer: 256 * 2 ** 20 }).trim();
  } catch {
    return '';
  }
}

/** HEAD plus a digest of the uncommitted changes under src/ and db/ (untracked files included). */
function codeState(): string {
  const diff = git(['diff', 'HEAD', '--', 'src', 'db']) + git(['ls-files', '--others', '--exclude-standard', '--', 'src', 'db']);
  return `${git(['rev-parse', 'HEAD'])} ${createHash('sha256').update(diff).digest('hex')}`;
}

export interface CodeFacts {
  commit: string;
  /** Uncommitted changes under src/, db/ or package.json at the end of the run. */
  dirty: boolean;
  /** HEAD or the uncommitted changes under src/ or db/ differed between the start and the end of the run. */
  codeChangedDuringRun: boolean;
}

/**
 * Notes the working tree's code now (the bench measures the working tree, which may change while it
 * runs); the function returned gives the facts at the end, and warns when the code changed meanwhile.
 */
export function watchCode(log: (line: string) => void): () => CodeFacts {
  const atStart = codeState();
  return () => {
    const codeChangedDuringRun = codeState() !== atStart;
    if (codeChangedDuringRun)
      log('warning: the commit or the uncommitted changes under src/ or db/ changed during the run: the numbers may mix two versions');
    return {
      commit: git(['rev-parse', 'HEAD']),
      dirty: git(['status', '--porcelain', '--', 'src', 'db', 'package.json']) !== '',
      codeChangedDuringRun,
    };
  };
}

/**
 * package.json's `scripts.start`. When it runs the build output, `npm run build` runs first, so what
 * starts is the working tree's code (run.ts's capture phase runs the sources; both must be the same).
 */
export function startCommand(log: (line: string) => void): string {
  const pkg = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  const start = pkg.scripts['start'];
  if (!start) throw new Error('package.json has no scripts.start');
  if (/\bdist\//.test(start) && pkg.scripts['build']) {
    log('building (scripts.start runs the build output): npm run build');
    execFileSync('npm', ['run', '--silent', 'build'], { cwd: REPO, stdio: ['ignore', 'inherit', 'inherit'] });
  }
  return start;
}

export interface RunningService {
  proc: Spawned;
  url: string;
  /** The node process that serves (for peak RSS). */
  pid: number;
}

/**
 * Starts the service with `start` (see `startCommand`) through `sh -c`, pinned to SERVER_CORE, on the
 * bench database, with PORT, HOST, NODE_ENV=production, LOG_LEVEL=warn and nothing else from the
 * caller's environment (so every other setting is the service's default) but `opts.env`; resolves once
 * /readyz answers.
 */
export async function startService(
  start: string,
  db: BenchDatabase,
  opts: { name: string; logFile: string; env?: NodeJS.ProcessEnv },
): Promise<RunningService> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...baseEnv(),
    PORT: String(port),
    HOST: '127.0.0.1',
    NODE_ENV: 'production',
    LOG_LEVEL: 'warn',
    ...(db.databaseUrl ? { DATABASE_URL: db.databaseUrl } : { DATA_DIR: db.dataDir }),
    ...opts.env,
  };
  const proc = spawnPinned(opts.name, SERVER_CORE, ['sh', '-c', start], { cwd: REPO, env, logFile: opts.logFile });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/readyz`, proc);
  return { proc, url, pid: workerNodePid(proc.pid) };
}

/** A bearer token of a tenant's client (client credentials, scope ServiceApi unless given), as an authorization header. */
export async function bearer(
  url: string,
  tenantKey: string,
  client: { clientId: string; clientSecret: string },
  scope = 'ServiceApi',
): Promise<{ authorization: string }> {
  const res = await fetch(`${url}/connect/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: tenantKey,
      client_id: client.clientId,
      client_secret: client.clientSecret,
      scope,
    }),
  });
  const token = (await res.json()) as { access_token?: string };
  if (!token.access_token)
    throw new Error(`token request for ${tenantKey}/${client.clientId} failed: ${res.status} ${JSON.stringify(token)}`);
  return { authorization: `Bearer ${token.access_token}` };
}

/** The service's garbage collections so far, by kind: counts and milliseconds paused (its /metrics). */
export interface Collections {
  major: number;
  majorMs: number;
  minor: number;
  minorMs: number;
}

/**
 * Reads `Collections` from the service's /metrics: `nodejs_gc_runs_total` and
 * `nodejs_gc_pause_seconds_total` (P76), or where the service lacks them (an older commit) prom-client's
 * `nodejs_gc_duration_seconds`, which can miss a collection that came in the same turn as another.
 * Undefined when it answers neither.
 */
export async function collections(url: string): Promise<Collections | undefined> {
  try {
    const text = await (await fetch(`${url}/metrics`)).text();
    const [runs, seconds] = text.includes('# TYPE nodejs_gc_runs_total ')
      ? ['nodejs_gc_runs_total', 'nodejs_gc_pause_seconds_total']
      : text.includes('# TYPE nodejs_gc_duration_seconds ')
        ? ['nodejs_gc_duration_seconds_count', 'nodejs_gc_duration_seconds_sum']
        : [];
    if (!runs || !seconds) return undefined;
    // A kind that has not happened yet has no line: 0.
    const read = (metric: string, kind: string) => Number(new RegExp(`^${metric}\\{kind="${kind}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
    return {
      major: read(runs, 'major'),
      majorMs: read(seconds, 'major') * 1000,
      minor: read(runs, 'minor'),
      minorMs: read(seconds, 'minor') * 1000,
    };
  } catch {
    return undefined;
  }
}

/** What happened between two readings of `collections`. */
export function collectionsBetween(a: Collections | undefined, b: Collections | undefined): Collections | undefined {
  if (!a || !b) return undefined;
  return { major: b.major - a.major, majorMs: b.majorMs - a.majorMs, minor: b.minor - a.minor, minorMs: b.minorMs - a.minorMs };
}

/** Creates subject `i` (E-i, "Person i", optionally an e-mail) through the REST upsert, as an integrator would. */
export async function createSubject(url: string, authorization: string, i: number, email?: string): Promise<void> {
  const res = await fetch(`${url}/api/v2/messaging/subject`, {
    method: 'POST',
    headers: { authorization, 'content-type': 'application/json' },
    body: JSON.stringify({
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: `E-${i}` } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${i}` } } },
        ...(email ? [{ Key: 'email', Value: { String: { Value: email } } }] : []),
      ],
    }),
    signal: AbortSignal.timeout(60_000),
  });
  await res.arrayBuffer();
  if (res.status !== 201) throw new Error(`seeding subject ${i} answered ${res.status}`);
}

/**
 * The reference provider as a process of its own (provider-process.ts), on the load core when pinned, so
 * generating and sending points does not run on the event loop under test; resolves once it answers.
 */
export async function startBenchProvider(
  name: string,
  opts: { pin: boolean; workDir: string; latencyMs: number; pageSize: number; anchor: string },
): Promise<{ url: string; proc: Spawned }> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const proc = spawnPinned(
    name,
    opts.pin ? LOAD_CORE : 0,
    [process.execPath, '--import', 'tsx', path.join(REPO, 'bench/provider-process.ts')],
    {
      cwd: REPO,
      env: {
        ...baseEnv(),
        PORT: String(port),
        BENCH_PROVIDER_LATENCY_MS: String(opts.latencyMs),
        BENCH_PROVIDER_PAGE_SIZE: String(opts.pageSize),
        BENCH_PROVIDER_ANCHOR: opts.anchor,
      },
      logFile: path.join(opts.workDir, 'provider.log'),
    },
  );
  await waitForHttp(`${url}/bench/stats`, proc);
  return { url, proc };
}
