import { type ChildProcess, spawn } from 'node:child_process';
import { chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './helpers.js';

// A real PgBouncer (Debian's, 1.18 here) on loopback in transaction mode, in front of one PostgreSQL server:
// the pooler tests, and the bench's scenario with several instances behind one pooler.

/** A running PgBouncer. */
export interface PgBouncer {
  /** The target URL with PgBouncer's host and port: the same database and user, pooled. */
  url: string;
  /** Ends it at once (SIGTERM: client and server connections are closed) and removes its directory. */
  stop(): Promise<void>;
  /** Ends it at once and starts it again on the same port after `downMs` (a pooler restarted under load). */
  restart(downMs?: number): Promise<void>;
  /** Server connections PgBouncer holds to PostgreSQL now, in use or idle (its console's SHOW SERVERS). */
  serverConnections(): Promise<number>;
}

export interface PgBouncerOptions {
  /** Server connections per database and user (`default_pool_size`); default 4. */
  poolSize?: number;
  /** Client connections accepted in all (`max_client_conn`); default 200. */
  maxClientConn?: number;
  /** Further `[pgbouncer]` settings, e.g. `{ query_wait_timeout: '2' }`. */
  settings?: Record<string, string>;
}

const PGBOUNCER = '/usr/sbin/pgbouncer';

/**
 * Starts PgBouncer in transaction mode on a free loopback port in front of `target` (a postgres:// URL on a
 * server that trusts its user): clients are not authenticated (`auth_type = any`) and every database name
 * is passed on to the target's server as the target's user. PgBouncer refuses to run as root: as root it
 * drops to the `postgres` user (its `user` setting), so its directory is that user's.
 */
export async function startPgBouncer(target: string, opts: PgBouncerOptions = {}): Promise<PgBouncer> {
  const t = new URL(target);
  const dir = await mkdtemp(path.join(tmpdir(), 'pgbouncer-'));
  const root = process.getuid?.() === 0;
  const logfile = path.join(dir, 'pgbouncer.log');
  const settings: Record<string, string> = {
    listen_addr: '127.0.0.1',
    // No Unix socket: several PgBouncers on one machine would share /tmp's.
    unix_socket_dir: '',
    auth_type: 'any',
    // The console (database `pgbouncer`) for SHOW SERVERS, and for PAUSE or SHUTDOWN in a test.
    admin_users: decodeURIComponent(t.username),
    pool_mode: 'transaction',
    default_pool_size: String(opts.poolSize ?? 4),
    max_client_conn: String(opts.maxClientConn ?? 200),
    logfile,
    ...(root ? { user: 'postgres' } : {}),
    ...opts.settings,
  };
  const server = `host=${t.hostname} port=${t.port || '5432'} user=${decodeURIComponent(t.username)}`;
  const file = path.join(dir, 'pgbouncer.ini');
  if (root) await chown(dir, await uid('postgres'), 0);
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  const admin = () => Object.assign(new URL(url), { pathname: '/pgbouncer' }).toString();

  let child: ChildProcess | undefined;
  /** Starts PgBouncer on url's port: false when another process holds that port. */
  const start = async (): Promise<boolean> => {
    const ini = { ...settings, listen_port: url.port };
    await writeFile(
      file,
      `[databases]\n* = ${server}\n\n[pgbouncer]\n${Object.entries(ini)
        .map(([k, v]) => `${k} = ${v}`)
        .join('\n')}\n`,
    );
    const proc = spawn(PGBOUNCER, [file], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child = proc;
    for (let i = 0; ; i++) {
      const c = new pg.Client({ connectionString: admin() });
      c.on('error', () => {});
      try {
        await c.connect();
        // Another PgBouncer (another test's) may have taken the port between freePort and the bind: its logfile is not ours.
        const { rows } = await c.query<{ key: string; value: string }>('SHOW CONFIG');
        if (rows.find((r) => r.key === 'logfile')?.value !== logfile) throw new Error('another PgBouncer answers on this port');
        return true;
      } catch (e) {
        if (proc.exitCode !== null || i > 100) {
          await end();
          const log = await readFile(logfile, 'utf8').catch(() => '');
          if (/Address already in use/.test(stderr + log)) return false;
          throw new Error(`PgBouncer did not start: ${(e as Error).message}\n${stderr}${log}`, { cause: e });
        }
        await new Promise((r) => setTimeout(r, 50));
      } finally {
        await c.end().catch(() => {});
      }
    }
  };
  // SIGKILL if SIGTERM has not ended it in 5 s. A declaration: start, above, ends a PgBouncer that did not come up.
  async function end() {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      const kill = setTimeout(() => proc.kill('SIGKILL'), 5000);
      proc.once('exit', () => {
        clearTimeout(kill);
        resolve();
      });
      proc.kill('SIGTERM');
    });
  }
  try {
    for (let attempt = 1; ; attempt++) {
      url.port = String(await freePort());
      if (await start()) break;
      if (attempt === 5) throw new Error('PgBouncer found no free port');
    }
  } catch (e) {
    await end();
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    url: url.toString(),
    stop: async () => {
      await end();
      await rm(dir, { recursive: true, force: true });
    },
    restart: async (downMs = 0) => {
      await end();
      await new Promise((r) => setTimeout(r, downMs));
      if (!(await start())) throw new Error(`PgBouncer cannot listen on ${url.port} again: another process took it`);
    },
    serverConnections: async () => {
      const c = new pg.Client({ connectionString: admin() });
      await c.connect();
      try {
        // The console speaks the simple query protocol only: a query without parameters.
        return (await c.query('SHOW SERVERS')).rows.length;
      } finally {
        await c.end();
      }
    },
  };
}

async function uid(user: string): Promise<number> {
  const line = (await readFile('/etc/passwd', 'utf8')).split('\n').find((l) => l.startsWith(`${user}:`));
  return Number(line?.split(':')[2]);
}
