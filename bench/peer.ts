/**
 * The peer in the bench (issue 19): PostGraphile 5 serving the bench database's `public` schema, asked
 * the same list as the service (20 subjects of the bench tenant, without and with totalCount), measured
 * in the same run with the same load generator, connections, durations and core as the service.
 *
 * PostGraphile lives in bench/peers, an npm package of its own (`npm ci --prefix bench/peers`), and runs
 * as a child process (bench/peers/postgraphile.mjs): nothing here imports it, so the service's
 * dependencies, type-check and lint never need it. Without it installed, or on PGlite, the peer is
 * skipped with one line saying why.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { LoadSpec } from './load.js';
import { freePort, peakRss, resetPeakRss, spawnPinned, waitForHttp, workerNodePid } from './processes.js';
import { type Measured, type PeerResult, type PeersReport, type SameInformation, failures } from './report.js';
import type { BenchDatabase } from './seed.js';
import { REPO, SERVER_CORE, baseEnv } from './service.js';

export const PEERS_DIR = path.join(REPO, 'bench/peers');
const POSTGRAPHILE = path.join(PEERS_DIR, 'node_modules/postgraphile/package.json');

/** The issue's PostGraphile lists: `allSubjects(first: 20, condition: {tenantId})` with pageInfo and the row's ids and values. */
export function peerRequests(tenantId: string): Omit<PeerResult, 'measured' | 'answerBytes'>[] {
  const list = (count: boolean) =>
    `{ allSubjects(first: 20, condition: { tenantId: ${JSON.stringify(tenantId)} }) { ${count ? 'totalCount ' : ''}` +
    'pageInfo { hasNextPage hasPreviousPage startCursor endCursor } nodes { rowId externalId values } } }';
  return [
    {
      id: 'pg-list',
      title: 'PostGraphile allSubjects(first: 20), no totalCount',
      query: list(false),
      compareWith: ['gql-20-same', 'gql-20-nocount'],
    },
    {
      id: 'pg-list-count',
      title: 'PostGraphile allSubjects(first: 20) with totalCount',
      query: list(true),
      compareWith: ['gql-20', 'rest-list'],
    },
  ];
}

/** Why the peer cannot run in this run, or undefined when it can. */
export function peerUnavailable(db: BenchDatabase): string | undefined {
  if (db.kind !== 'postgres') return 'PostGraphile needs PostgreSQL, this run is on PGlite (set DATABASE_URL)';
  if (!existsSync(POSTGRAPHILE)) return 'bench/peers is not installed (to include PostGraphile: npm ci --prefix bench/peers)';
  return undefined;
}

const post = async (url: string, query: string) => {
  const res = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query }),
  });
  return { status: res.status, text: await res.text() };
};

/**
 * One request of each list before measuring: 20 nodes of the bench tenant (asked for their tenantId
 * too), each with its ids and values, and a totalCount of at least the seeded subjects. A broken peer
 * fails here instead of being measured answering errors. Resolves with the measured request's answer size.
 */
async function checkAnswer(url: string, query: string, tenantId: string, subjects: number): Promise<number> {
  const checked = await post(url, query.replace('nodes { rowId', 'nodes { tenantId rowId'));
  let list: any;
  try {
    const body = JSON.parse(checked.text);
    list = body?.errors ? undefined : body?.data?.allSubjects;
  } catch {
    list = undefined;
  }
  const nodes: any[] = Array.isArray(list?.nodes) ? list.nodes : [];
  const ok =
    checked.status === 200 &&
    nodes.length === 20 &&
    typeof list?.pageInfo?.hasNextPage === 'boolean' &&
    nodes.every((n) => n.tenantId === tenantId && typeof n.rowId === 'string' && n.externalId === n.values?.employeeNumber) &&
    (!query.includes('totalCount') || list.totalCount >= subjects);
  if (!ok) throw new Error(`its answer is not 20 subjects of the bench tenant: ${checked.status} ${checked.text.slice(0, 400)}`);
  const measured = await post(url, query);
  if (measured.status !== 200 || measured.text.includes('"errors":')) throw new Error(`${measured.status} ${measured.text.slice(0, 400)}`);
  return Buffer.byteLength(measured.text);
}

/** A page's subjects as the information both servers carry: ids, and each field key's value texts in order. */
type Info = { rowId: string; externalId: string | null; values: Record<string, string[]> };

/** The service's `gql-20-same` answer read as Info (its value texts are D7's canonical `String(value)`). */
function serviceInfo(answer: string): Info[] {
  const edges: any[] = JSON.parse(answer)?.data?.subjects?.edges ?? [];
  return edges.map(({ node }) => ({
    rowId: node.subjectId,
    externalId: node.externalId,
    values: Object.fromEntries(
      (node.customFieldValues as any[])
        .filter((v) => v.values.length > 0)
        .map((v) => [v.field.key, v.values.map((x: { valueText: string }) => x.valueText)]),
    ),
  }));
}

/** PostGraphile's node read as Info: its `values` column is the stored JSON (arrays for array fields). */
const peerInfo = (node: any): Info => ({
  rowId: node.rowId,
  externalId: node.externalId,
  values: Object.fromEntries(
    Object.entries(node.values as Record<string, unknown>)
      .filter(([, v]) => v !== null && !(Array.isArray(v) && v.length === 0))
      .map(([k, v]) => [k, (Array.isArray(v) ? v : [v]).map(String)]),
  ),
});

/**
 * Whether the service's "same information" page carries what PostGraphile's list does for the same
 * subjects: PostGraphile orders its page by primary key, the service by ExternalId, so the service's 20
 * subjects are looked up in PostGraphile by primary key and compared field by field.
 */
async function checkSameInformation(url: string, tenantId: string, answer: string): Promise<SameInformation> {
  const theirs = serviceInfo(answer);
  const pageInfo = JSON.parse(answer)?.data?.subjects?.pageInfo;
  const lookups = theirs.map(
    (s, i) =>
      `s${i}: subjectByTenantIdAndRowId(tenantId: ${JSON.stringify(tenantId)}, rowId: ${JSON.stringify(s.rowId)}) { rowId externalId values }`,
  );
  const res = await post(url, `{ ${lookups.join(' ')} }`);
  const data = JSON.parse(res.text)?.data ?? {};
  const differing = theirs.filter((s, i) => !data[`s${i}`] || !isDeepStrictEqual(peerInfo(data[`s${i}`]), s));
  const holds = theirs.length === 20 && typeof pageInfo?.hasNextPage === 'boolean' && differing.length === 0;
  return {
    holds,
    subjects: theirs.length,
    detail: holds
      ? `the same ${theirs.length} subjects' ids and values, looked up in PostGraphile by primary key`
      : `${theirs.length} subjects, ${differing.length} differing from PostGraphile's (first: ${differing[0]?.rowId ?? 'none'})`,
    serviceBytes: Buffer.byteLength(answer),
  };
}

/**
 * Starts PostGraphile pinned to the server core on the bench database, checks each list's answer, and
 * measures each with `measure` (the harness's load run: same generator, connections and durations as
 * the service). Throws when the peer does not start or answers wrongly; the harness reports that.
 */
export async function runPeer(opts: {
  db: BenchDatabase;
  tenantId: string;
  subjects: number;
  logFile: string;
  measure: (spec: Pick<LoadSpec, 'url' | 'method' | 'path' | 'headers' | 'body' | 'checkGraphqlErrors'>) => Promise<Measured>;
  log: (line: string) => void;
  /** The service's `gql-20-same` answer from the capture, checked against PostGraphile's information. */
  sameInformationAnswer?: string;
}): Promise<PeersReport> {
  const version = (JSON.parse(readFileSync(POSTGRAPHILE, 'utf8')) as { version: string }).version;
  const server = `PostGraphile ${version} (amber preset, node ${process.version})`;
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...baseEnv(), PORT: String(port), NODE_ENV: 'production', DATABASE_URL: opts.db.databaseUrl };
  opts.log(`\n${server}: bench/peers/postgraphile.mjs on core ${SERVER_CORE}`);
  const proc = spawnPinned('postgraphile', SERVER_CORE, [process.execPath, path.join(PEERS_DIR, 'postgraphile.mjs')], {
    cwd: PEERS_DIR,
    env,
    logFile: opts.logFile,
  });
  try {
    const url = `http://127.0.0.1:${port}`;
    await waitForHttp(`${url}/readyz`, proc);
    const pid = workerNodePid(proc.pid);
    const results: PeerResult[] = [];
    let sameInformation: SameInformation | undefined;
    if (opts.sameInformationAnswer !== undefined) {
      sameInformation = await checkSameInformation(url, opts.tenantId, opts.sameInformationAnswer);
      opts.log(`  same information: ${sameInformation.holds ? 'yes' : 'NO'}: ${sameInformation.detail}`);
    }
    for (const req of peerRequests(opts.tenantId)) {
      const answerBytes = await checkAnswer(url, req.query, opts.tenantId, opts.subjects);
      resetPeakRss(pid);
      const measured = await opts.measure({
        url,
        method: 'POST',
        path: '/graphql',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query: req.query }),
        checkGraphqlErrors: true,
      });
      measured.peakRssBytes = peakRss(pid);
      results.push({ ...req, measured, answerBytes });
      const failed = failures(measured);
      opts.log(
        `  ${req.id.padEnd(18)} ${measured.rps.toFixed(0).padStart(7)} req/s  p50 ${measured.p50} ms  p99 ${measured.p99} ms  RSS ${(measured.peakRssBytes / 2 ** 20).toFixed(0)} MB  ${answerBytes} bytes${failed ? `  FAILED ${failed}` : ''}`,
      );
    }
    return { server, results, ...(sameInformation ? { sameInformation } : {}) };
  } finally {
    await proc.stop();
  }
}
