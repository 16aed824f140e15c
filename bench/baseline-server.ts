/**
 * The baselines, each run as its own process pinned to the server core:
 *  - B0 (`b0`): node:http answering each scenario's real answer (captured from the service) as a fixed
 *    body: the ceiling of Node's HTTP layer for an answer of that size;
 *  - B1 (`b1`): node:http plus the database (pg, or PGlite opened through the service's openDatabase)
 *    replaying the data statements the service emitted for the scenario and shaping the same JSON
 *    (b1-shape.ts), without authentication, validation, GraphQL or Express.
 * One process serves every scenario at `/<scenario id>`; `/readyz` answers once it can.
 * Usage: `node --import tsx bench/baseline-server.ts <b0|b1> <spec.json>` with PORT, and for b1
 * DATABASE_URL or DATA_DIR (BASELINE_POOL_SIZE, default 10 as the service's DATABASE_POOL_SIZE).
 */
import { readFileSync } from 'node:fs';
import { type IncomingMessage, type ServerResponse, createServer } from 'node:http';
import { CompiledQuery } from 'kysely';
import { type DatabaseHandle, openDatabase } from '../src/db/database.js';
import { namedStatement } from '../src/db/prepared.js';
import { type Expected, type ShapeConfig, type StructureTypeConfig, shapeAnswer } from './b1-shape.js';

/** What each scenario answers (written by run.ts from the capture phase). */
export interface BaselineSpec {
  tenantId: string;
  scenarios: Record<
    string,
    {
      /** The service's real answer (B0 sends it as is). */
      body: string;
      shape?: string;
      pageSize?: number;
      /** The data statements B1 replays, in the service's order; `named`: as the service runs it (P71). */
      statements?: { sql: string; parameters: unknown[]; named?: boolean }[];
      expected: Expected;
    }
  >;
}

const [mode, specFile] = process.argv.slice(2);
if ((mode !== 'b0' && mode !== 'b1') || !specFile) {
  console.error('usage: baseline-server.ts <b0|b1> <spec.json>');
  process.exit(2);
}
const spec = JSON.parse(readFileSync(specFile, 'utf8')) as BaselineSpec;
const port = Number(process.env['PORT'] ?? 0);

let handle: DatabaseHandle | undefined;
let config: ShapeConfig | undefined;

async function loadShapeConfig(h: DatabaseHandle): Promise<ShapeConfig> {
  const fields = await h.db.selectFrom('subject_field').selectAll().where('tenant_id', '=', spec.tenantId).orderBy('position').execute();
  const types = await h.db.selectFrom('structure_type').selectAll().where('tenant_id', '=', spec.tenantId).execute();
  const typeFields = await h.db
    .selectFrom('structure_type_field')
    .selectAll()
    .where('tenant_id', '=', spec.tenantId)
    .orderBy('position')
    .execute();
  const byKey = new Map<string, StructureTypeConfig>(
    types.map((t) => [
      t.key,
      {
        key: t.key,
        name: t.name,
        subjectAssignable: t.subject_assignable,
        fields: typeFields
          .filter((f) => f.structure_type_key === t.key)
          .map((f) => ({ key: f.key, name: f.name, dataType: f.data_type, typeLabel: f.type_label, required: f.required })),
      },
    ]),
  );
  return {
    fields: fields.map((f) => ({
      key: f.key,
      name: f.name,
      dataType: f.data_type,
      typeLabel: f.type_label,
      required: f.required,
      isArray: f.is_array,
    })),
    types: byKey,
  };
}

if (mode === 'b1') {
  const databaseUrl = process.env['DATABASE_URL'];
  const dataDir = process.env['DATA_DIR'];
  if (!databaseUrl && !dataDir) throw new Error('b1 needs DATABASE_URL or DATA_DIR');
  // B1 replays data statements as the service runs them: named and prepared where the service names them
  // (P71: the unfiltered subject page, P167), unnamed otherwise.
  for (const s of Object.values(spec.scenarios)) for (const st of s.statements ?? []) if (st.named) namedStatement(st.sql);
  handle = await openDatabase({
    databaseUrl,
    dataDir: dataDir ?? '',
    poolSize: Number(process.env['BASELINE_POOL_SIZE'] ?? 10),
  });
  config = await loadShapeConfig(handle);
}
const bodies = new Map(Object.entries(spec.scenarios).map(([id, s]) => [id, Buffer.from(s.body)]));

async function answerB1(id: string): Promise<Buffer> {
  const s = spec.scenarios[id]!;
  const results: Record<string, unknown>[][] = [];
  // Sequentially, in the service's order: one request's statements depend on each other there too.
  for (const st of s.statements ?? []) {
    const r = await handle!.db.executeQuery<Record<string, unknown>>(CompiledQuery.raw(st.sql, st.parameters));
    results.push(r.rows);
  }
  return Buffer.from(JSON.stringify(shapeAnswer(s.shape!, config!, results, s.pageSize ?? 20, s.expected)));
}

function send(res: ServerResponse, status: number, body: Buffer) {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': body.length });
  res.end(body);
}

const server = createServer((req: IncomingMessage, res: ServerResponse) => {
  // Read the request body like a real server would, then answer.
  req.on('data', () => {});
  req.on('end', () => {
    const id = (req.url ?? '/').split('?')[0]!.slice(1);
    if (id === 'readyz') {
      // Like the service's: through the database, so it queues behind the work in progress (drain).
      const ready = handle ? handle.db.executeQuery(CompiledQuery.raw('select 1', [])) : Promise.resolve();
      return void ready.then(
        () => send(res, 200, Buffer.from('{"status":"ok"}')),
        () => send(res, 503, Buffer.from('{"status":503}')),
      );
    }
    const fixed = bodies.get(id);
    if (!fixed) return send(res, 404, Buffer.from('{"status":404}'));
    if (mode === 'b0') return send(res, 200, fixed);
    answerB1(id).then(
      (body) => send(res, 200, body),
      (e: unknown) => send(res, 500, Buffer.from(JSON.stringify({ status: 500, error: (e as Error).message }))),
    );
  });
});
server.keepAliveTimeout = 30_000;
server.listen(port, '127.0.0.1');

const stop = () => {
  server.close();
  server.closeAllConnections();
  void (handle ? handle.close() : Promise.resolve()).finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
