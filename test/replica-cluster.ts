import { execFile } from 'node:child_process';
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './helpers.js';

const BIN = '/usr/lib/postgresql/15/bin';
const run = promisify(execFile);

/** A primary and a streaming replica (hot standby) of their own, on loopback. */
export interface ReplicaCluster {
  primaryUrl: string;
  replicaUrl: string;
  /** Stops replaying WAL on the replica (it keeps receiving it): lag from here on. */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Until the replica has replayed the primary's position of now. */
  caughtUp(): Promise<void>;
  /** Stops the replica at once (`-m immediate`: its connections die, as in a crash). */
  stopReplica(): Promise<void>;
  /** Starts the stopped replica again (replaying, not paused). */
  startReplica(): Promise<void>;
  /** SIGSTOPs the replica's postmaster and its backends: it hangs, its connections stay open and answer nothing. */
  freezeReplica(): Promise<void>;
  /** SIGCONTs what freezeReplica stopped. */
  thawReplica(): Promise<void>;
  /** Runs a statement on the primary directly (no floor raised), its rows returned. */
  onPrimary<R>(text: string, values?: unknown[]): Promise<R[]>;
  close(): Promise<void>;
}

/** initdb, pg_ctl and pg_basebackup refuse root: as root they run as the postgres user (as .ci/pg-start). */
async function asPostgres(cmd: string, args: string[]): Promise<string> {
  const [file, argv] = process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
  return (await run(file, argv)).stdout;
}

async function rows<R>(url: string, text: string, values?: unknown[]): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows as R[];
  } finally {
    await client.end();
  }
}

const query = async <R>(url: string, text: string): Promise<R> => (await rows<R>(url, text))[0]!;

/** The postmaster of a data directory (postmaster.pid's first line) and its children. */
async function processesOf(data: string): Promise<number[]> {
  const postmaster = Number((await readFile(path.join(data, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  const children = await run('pgrep', ['-P', String(postmaster)]).then(
    (r) => r.stdout.split('\n').filter(Boolean).map(Number),
    () => [],
  );
  return [postmaster, ...children];
}

/** Starts a primary (initdb --auth=trust) and a replica of it (pg_basebackup -R), each on a free loopback port. */
export async function startReplicaCluster(): Promise<ReplicaCluster> {
  const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-replicas-'));
  if (process.getuid?.() === 0) {
    const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
    await chown(dir, uid, uid);
  }
  const [primaryPort, replicaPort] = [await freePort(), await freePort()];
  const primary = path.join(dir, 'primary');
  const replica = path.join(dir, 'replica');
  const start = (data: string, port: number) =>
    asPostgres(`${BIN}/pg_ctl`, [
      ...['-D', data, '-l', `${data}.log`, '-w', 'start'],
      ...['-o', `-p ${port} -c listen_addresses=127.0.0.1 -k ${dir} -c fsync=off -c max_connections=100`],
    ]);
  await asPostgres(`${BIN}/initdb`, ['-D', primary, '-U', 'app', '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8']);
  await start(primary, primaryPort);
  await asPostgres(`${BIN}/createdb`, ['-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'app', 'app']);
  // -R: standby.signal and primary_conninfo, so it starts as a streaming hot standby; -c fast: not a spread checkpoint's minutes.
  await asPostgres(`${BIN}/pg_basebackup`, [
    '-D',
    replica,
    '-R',
    '-X',
    'stream',
    '-c',
    'fast',
    '-h',
    '127.0.0.1',
    '-p',
    String(primaryPort),
    '-U',
    'app',
  ]);
  await start(replica, replicaPort);
  const primaryUrl = `postgres://app@127.0.0.1:${primaryPort}/app`;
  const replicaUrl = `postgres://app@127.0.0.1:${replicaPort}/app`;
  let frozen: number[] = [];
  const stop = (data: string) => asPostgres(`${BIN}/pg_ctl`, ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => '');
  return {
    primaryUrl,
    replicaUrl,
    pauseReplay: async () => void (await query(replicaUrl, 'SELECT pg_wal_replay_pause()')),
    resumeReplay: async () => void (await query(replicaUrl, 'SELECT pg_wal_replay_resume()')),
    caughtUp: async () => {
      const { lsn } = await query<{ lsn: string }>(primaryUrl, 'SELECT pg_current_wal_lsn()::text AS lsn');
      for (;;) {
        const { done } = await query<{ done: boolean }>(replicaUrl, `SELECT pg_last_wal_replay_lsn() >= '${lsn}'::pg_lsn AS done`);
        if (done) return;
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    stopReplica: async () => void (await stop(replica)),
    startReplica: async () => void (await start(replica, replicaPort)),
    freezeReplica: async () => {
      frozen = await processesOf(replica);
      for (const pid of frozen) process.kill(pid, 'SIGSTOP');
    },
    thawReplica: async () => {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
      frozen = [];
    },
    onPrimary: <R>(text: string, values?: unknown[]) => rows<R>(primaryUrl, text, values),
    close: async () => {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
      await stop(replica);
      await stop(primary);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
