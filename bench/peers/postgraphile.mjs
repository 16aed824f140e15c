/**
 * The bench's peer: PostGraphile 5 with the amber preset over the bench database's `public` schema,
 * served the way its docs serve it in production (no watch mode, no GraphiQL, no explain, NODE_ENV=production
 * set by the harness), on 127.0.0.1:PORT, connecting through DATABASE_URL.
 *
 * Plain .mjs run by node from this package (bench/peers, installed with `npm ci --prefix bench/peers`),
 * so the service's own tsconfig, lint and dependency tree never see PostGraphile; bench/run.ts spawns it
 * as a child process and measures it like B0, B1 and the service.
 *
 * Routes: POST /graphql (grafserv), GET /readyz (`select 1` through the same pool, so like the service's
 * and B1's it queues behind the queries in flight: the harness's drain between runs relies on that).
 */
// First: what Node 20 lacks of what PostGraphile 5 calls (see node20.mjs).
import './node20.mjs';
import { createServer } from 'node:http';
import pg from 'pg';
import { postgraphile } from 'postgraphile';
import { makePgService } from 'postgraphile/adaptors/pg';
import { grafserv } from 'postgraphile/grafserv/node';
import { PostGraphileAmberPreset } from 'postgraphile/presets/amber';

const databaseUrl = process.env['DATABASE_URL'];
const port = Number(process.env['PORT'] ?? 0);
if (!databaseUrl) {
  console.error('postgraphile.mjs needs DATABASE_URL');
  process.exit(2);
}

// pg's default pool size (10), the same as the service's DATABASE_POOL_SIZE default and B1's pool.
const pool = new pg.Pool({ connectionString: databaseUrl, max: Number(process.env['POOL_SIZE'] ?? 10) });
pool.on('error', (e) => console.error(`pg pool: ${e.message}`));

/** @type {GraphileConfig.Preset} */
const preset = {
  extends: [PostGraphileAmberPreset],
  pgServices: [makePgService({ pool, schemas: ['public'] })],
  grafserv: { watch: false, graphiql: false, graphqlOverGET: false, websockets: false },
  grafast: { explain: false },
};

const pgl = postgraphile(preset);
const serv = pgl.createServ(grafserv);
// Build the schema (introspection) before answering /readyz, so no measured request pays for it.
await pgl.getSchema();
// createHandler, not addTo: /readyz is answered here and everything else goes to grafserv (no websockets needed).
const graphql = serv.createHandler();

const server = createServer((req, res) => {
  if (req.url === '/readyz') {
    pool.query('select 1').then(
      () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}'),
      () => res.writeHead(503, { 'content-type': 'application/json' }).end('{"status":503}'),
    );
    return;
  }
  graphql(req, res);
});
server.keepAliveTimeout = 30_000;
server.listen(port, '127.0.0.1', () => console.log(`postgraphile listening on 127.0.0.1:${server.address().port}`));

const stop = () => {
  server.close();
  server.closeAllConnections();
  void Promise.resolve(pgl.release())
    .then(() => pool.end())
    .finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
