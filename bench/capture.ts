/**
 * The capture phase, in the harness process before the service starts: the app built in-process on the
 * seeded database (buildApp, as tests do) answers each scenario's request once after a warm-up, while
 * every statement it sends is recorded with its parameters (openDatabase's onQuery). That gives
 *  - the SQL statements per request (all of them, auth and configuration included);
 *  - the data statements B1 replays (classified by the tables they touch);
 *  - the real answer, whose bytes B0 sends;
 * and the facts the scenarios need (a cursor at 90%, a subject id, the data-points page cursors).
 */
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { CompiledQuery } from 'kysely';
import { pino } from 'pino';
import { createAppServer } from '../src/http/app-server.js';
import { buildApp } from '../src/app/app.js';
import { loadConfig } from '../src/core/config.js';
import type { DatabaseHandle } from '../src/db/database.js';
import { statementName } from '../src/db/prepared.js';
import { type Scenario, type ScenarioContext, DATA_POINTS_PAGE, buildScenarios, upsertBody } from './scenarios.js';
import { CLIENT, LEVELS, TENANT_KEY, employeeNumber, entityKey, sentSubjectValues } from './tenant-data.js';

export interface Statement {
  sql: string;
  parameters: readonly unknown[];
}

/** Records statements while `on`; passed to openDatabase as onQuery when the bench opens the database. */
export class Recorder {
  on = false;
  list: Statement[] = [];
  readonly record = (sql: string, parameters: readonly unknown[]) => {
    if (this.on) this.list.push({ sql, parameters });
  };
}

export type StatementKind = 'data' | 'auth/config' | 'transaction' | 'write';

export interface ClassifiedStatement extends Statement {
  tables: string[];
  kind: StatementKind;
  /** The service runs it as a named, prepared statement on PostgreSQL (P71): B1 replays it so too. */
  named: boolean;
}

export interface CapturedScenario {
  id: string;
  status: number;
  body: string;
  statements: ClassifiedStatement[];
  /** The data statements (kind `data`), replayed by B1. */
  kept: ClassifiedStatement[];
  providerCalls: number;
}

// The tables holding the answers' data. The others (client, tenant, subject_field, structure_type…)
// are authentication and configuration, which a lean server would cache.
const DATA_TABLES = new Set([
  'subject',
  'subject_value',
  'subject_location',
  'structural_entity',
  'data_cache',
  'app_user',
  'app_user_group',
  'user_group',
  'user_group_structural_entity',
  'portal_user',
]);

// Words that follow FROM/JOIN/UPDATE without naming a table (`do update set`, `from lateral`, functions).
const NOT_TABLES = new Set([
  'set',
  'lateral',
  'only',
  'select',
  'values',
  'unnest',
  'jsonb_each',
  'jsonb_array_elements',
  'jsonb_to_recordset',
  'generate_series',
]);
// Tables of authentication (the client lookup, signing keys): skipped even when they also read data versions.
const AUTH_TABLES = new Set(['client', 'signing_key', 'service_secret']);

/** The tables a statement names (Kysely quotes identifiers; raw fragments may not). */
export function tablesOf(sql: string): string[] {
  const out = new Set<string>();
  for (const m of sql.matchAll(/\b(?:from|join|into|update)\s+"?([a-z_][a-z0-9_]*)"?/gi)) {
    const name = m[1]!.toLowerCase();
    if (!NOT_TABLES.has(name)) out.add(name);
  }
  return [...out];
}

/** Data, auth/config, transaction control or write, by the statement's verb and tables. */
export function classify(s: Statement): ClassifiedStatement {
  const tables = tablesOf(s.sql);
  const verb = s.sql.trimStart().slice(0, 10).toLowerCase();
  let kind: StatementKind;
  if (/^(begin|commit|rollback|savepoint|release|start)/.test(verb)) kind = 'transaction';
  else if (/^(insert|update|delete)/.test(verb)) kind = 'write';
  else if (tables.some((t) => AUTH_TABLES.has(t))) kind = 'auth/config';
  // A data version read on its own is the key of a cached TotalCount: part of reading the answer.
  else if (tables.some((t) => DATA_TABLES.has(t)) || /\bdata_version\b/.test(s.sql)) kind = 'data';
  else kind = 'auth/config';
  return { ...s, parameters: [...s.parameters], tables, kind, named: statementName(s.sql) !== undefined };
}

export interface CaptureResult {
  ctx: ScenarioContext;
  scenarios: Scenario[];
  captured: Map<string, CapturedScenario>;
}

const MAX_PAGES = 5000;

/**
 * Builds the app in-process on `handle`, discovers the scenario context, and captures each scenario's
 * statements and answer. `providerCalls` reads the reference provider's get-data-points counter.
 */
export async function capturePhase(
  handle: DatabaseHandle,
  recorder: Recorder,
  opts: {
    subjects: number;
    providerCalls: () => number;
    explain: boolean;
    log: (line: string) => void;
    /** Only these scenarios (`npm run bench:peers`: the lists); all when absent. */
    only?: readonly string[];
  },
): Promise<CaptureResult> {
  const { server, serve } = createAppServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // The outbox sender polls on a timer: a poll must not land inside a captured request.
  const config = loadConfig({
    LOG_LEVEL: 'silent',
    PUBLIC_URL: url,
    DATA_DIR: '/nonexistent',
    NODE_ENV: 'production',
    MAIL_POLL_MS: '3600000',
  });
  const app = await buildApp({ config, db: handle.db, logger: pino({ level: 'silent' }), listen: handle.listen });
  serve(app.app);
  try {
    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: TENANT_KEY,
      client_id: CLIENT.clientId,
      client_secret: CLIENT.clientSecret,
      scope: 'ServiceApi',
    });
    const tokenRes = await fetch(`${url}/connect/token`, { method: 'POST', body: form });
    const token = (await tokenRes.json()) as { access_token?: string };
    if (!token.access_token) throw new Error(`token request failed: ${tokenRes.status} ${JSON.stringify(token)}`);
    const headers = { authorization: `Bearer ${token.access_token}`, 'content-type': 'application/json' };

    const call = async (method: string, path: string, body?: string) => {
      const res = await fetch(`${url}${path}`, { method, headers, ...(body !== undefined ? { body } : {}) });
      return { status: res.status, text: await res.text() };
    };
    const json = async (method: string, path: string, body?: string): Promise<any> => {
      const r = await call(method, path, body);
      if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${r.text.slice(0, 500)}`);
      const parsed = JSON.parse(r.text);
      if (parsed.errors) throw new Error(`${path}: ${JSON.stringify(parsed.errors).slice(0, 500)}`);
      return parsed;
    };
    const bySubjectNumber = (i: number) =>
      json('GET', `/api/v2/subject?First=1&customFieldValueFilter.values[employeeNumber]=${employeeNumber(i)}`);

    // A cursor at 90% of the default ordering (ExternalId): the subject there, found by a filter, has
    // the cursor of its position (a cursor names the ordering and the position, not the filter).
    const at90 = Math.floor(opts.subjects * 0.9);
    let deepCursor: string = (await bySubjectNumber(at90)).Edges[0].Cursor;
    const check = await json('GET', `/api/v2/subject?First=1&After=${encodeURIComponent(deepCursor)}`);
    if (check.Edges[0]?.Node.ExternalId !== employeeNumber(at90 + 1)) {
      opts.log('the filtered cursor does not continue the full list; walking pages to 90% instead');
      let after: string | null = null;
      for (let seen = 0; seen <= at90;) {
        const take: number = Math.min(1000, at90 + 1 - seen);
        const p: any = await json('GET', `/api/v2/subject?First=${take}${after ? `&After=${encodeURIComponent(after)}` : ''}`);
        seen += p.Edges.length;
        after = p.PageInfo.EndCursor;
        if (!p.PageInfo.HasNextPage) break;
      }
      deepCursor = after!;
    }
    const subjectId: string = (await bySubjectNumber(Math.floor(opts.subjects / 2))).Edges[0].Node.Id;

    // The data-points pages: the cursor before each run of 50 subjects, read 1,000 at a time.
    const pageCursors: (string | null)[] = [null];
    const pages = Math.min(MAX_PAGES, Math.floor(opts.subjects / DATA_POINTS_PAGE));
    let after: string | null = null;
    let index = 0;
    while (pageCursors.length < pages) {
      const q = 'query($after: String) { subjects(first: 1000, after: $after) { pageInfo { hasNextPage endCursor } edges { cursor } } }';
      const d: any = await json('POST', '/graphql', JSON.stringify({ query: q, variables: { after } }));
      for (const e of d.data.subjects.edges as { cursor: string }[]) {
        index++;
        if (index % DATA_POINTS_PAGE === 0 && pageCursors.length < pages) pageCursors.push(e.cursor);
      }
      if (!d.data.subjects.pageInfo.hasNextPage) break;
      after = d.data.subjects.pageInfo.endCursor;
    }

    const ctx: ScenarioContext = { deepCursor, subjectId, pageCursors, upsertStart: opts.subjects };
    const scenarios = buildScenarios(ctx).filter((sc) => !opts.only || opts.only.includes(sc.id));
    const captured = new Map<string, CapturedScenario>();
    const teams = LEVELS[3].count;
    // The capture's upserts create subjects before B1 and the service run: they must not show in any
    // read scenario (i ≡ 55 mod 100: "Pedro Garcia …", grade 55, ExternalId sorting after every seeded one).
    const captureUpsert = (k: number) => 9_000_055 + 100 * (k + 3);

    for (const sc of scenarios) {
      // The request of the k-th warm-up (k < 0 … ) and of the captured one (k = 0).
      const request = (k: number): string | undefined => {
        if (sc.variant?.kind === 'upsert')
          return upsertBody(captureUpsert(k + (sc.connections ?? 0)), sentSubjectValues, (i) => entityKey(4, i % teams));
        if (sc.variant?.kind === 'pages') return JSON.stringify({ query: sc.variant.query, variables: { after: pageCursors.at(-1) } });
        return sc.body;
      };
      // A cache miss must stay a miss: no warm-up (the hit scenario before it warmed everything else).
      const warmups = sc.variant?.kind === 'pages' ? 0 : 3;
      for (let k = -warmups; k < 0; k++) await call(sc.method, sc.path, request(k));
      const calls0 = opts.providerCalls();
      recorder.list = [];
      recorder.on = true;
      const r = await call(sc.method, sc.path, request(0));
      await sleep(100); // statements the request leaves running after its answer count too
      recorder.on = false;
      const statements = recorder.list.map(classify);
      const kept = statements.filter((s) => s.kind === 'data');
      captured.set(sc.id, { id: sc.id, status: r.status, body: r.text, statements, kept, providerCalls: opts.providerCalls() - calls0 });
      const ok = r.status >= 200 && r.status < 300 && !(sc.graphql && r.text.includes('"errors":'));
      opts.log(
        `  ${sc.id.padEnd(18)} ${r.status} ${String(r.text.length).padStart(7)} B, ${String(statements.length).padStart(2)} statements` +
          (sc.shape ? `, B1 replays ${kept.length}: ${kept.map((s) => s.tables.join('+')).join(', ')}` : '') +
          (ok ? '' : `\n    ERROR: ${r.text.slice(0, 300)}`),
      );
      if (opts.explain && kept.length > 0 && sc.shape) {
        for (const s of kept) {
          const plan = await handle.db.executeQuery<{ 'QUERY PLAN': string }>(
            CompiledQuery.raw(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${s.sql}`, [...s.parameters]),
          );
          opts.log(
            `\n    ${s.sql}\n    ${JSON.stringify(s.parameters).slice(0, 300)}\n${plan.rows.map((p) => `      ${p['QUERY PLAN']}`).join('\n')}\n`,
          );
        }
      }
    }
    return { ctx, scenarios, captured };
  } finally {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    await app.close();
  }
}
