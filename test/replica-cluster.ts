import { execFile } from 'node:child_process';
import { chown, mkdtemp, rm } from 'node:fs/promises';
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
  close(): Promise<void>;
}

/** initdb, pg_ctl and pg_basebackup refuse root: as root they run as the postgres user (as .ci/pg-start). */
async function asPostgres(cmd: string, args: string[]): Promise<string> {
  const [file, argv] = process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
  return (await run(file, argv)).stdout;
}

async function query<R>(url: string, text: string): Promise<R> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text)).rows[0] as R;
  } finally {
    await client.end();
  }
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
    close: async () => {
      await stop(replica);
      await stop(primary);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
