import express from 'express';
import { type TokenService, authRoutes } from '../domains/auth/index.js';
import type { DataCache } from '../domains/data/index.js';
import type { OutboxSender } from '../domains/portal/index.js';
import type { UpgradeHandler } from '../http/app-server.js';
import { dashboardRouter } from '../http/dashboard.js';
import { GRAPHQL_PATH, graphqlEndpoint } from './graphql-endpoint.js';
import { mountOperations } from './operations.js';
import { restAdapter, restFallbacks } from './rest.js';
import { type AppInit, startServices } from './services.js';

export interface App {
  app: express.Express;
  tokens: TokenService;
  data: DataCache;
  /** Delivers queued portal invitations (D9). */
  outbox: OutboxSender;
  /**
   * Starts the shutdown drain (P53): /readyz answers 503 from now on, so a load balancer stops
   * sending, and every response carries `Connection: close`, so kept-alive clients reconnect elsewhere.
   * Live subscriptions end at once (SERVICE_UNAVAILABLE: subscribe again) and new ones are refused: a
   * stream would hold its connection until the shutdown time-out cut it. WebSocket connections close
   * (1001) once those ends are sent, and new ones are refused (503).
   */
  drain(): void;
  /** Takes the upgrades of /graphql to WebSocket (graphql-ws): the HTTP server hands them over (AppServer.upgrade). */
  upgrade: UpgradeHandler;
  /** Stops background work (re-fetches, the invalidation listener, the outbox sender); the caller closes the database after. */
  close(): Promise<void>;
}

/**
 * Builds the HTTP application over an open, migrated database; `listen()` is the caller's (server.ts,
 * tests). `listen` (the database handle's) opens the instance's event bus, which carries cache
 * invalidations between instances (D10). The order of the middleware is the order of the steps below.
 */
export async function buildApp(init: AppInit): Promise<App> {
  const { config, db, logger } = init;
  const services = await startServices(init);
  const demo = config.NODE_ENV !== 'production';
  const graphiql = config.GRAPHIQL ?? demo;
  // The demo dashboard (README "Quick start"; P57): a page over the public GraphQL API, outside production like GraphiQL.
  const dashboard = config.DASHBOARD ?? demo;

  const app = express();
  // The drain, the write deadline, request ids, the access log, metrics, /healthz and /readyz.
  const operations = mountOperations(app, { config, db, logger, metrics: services.metrics });
  app.use(
    authRoutes(db, services.tokens, config.MAX_BODY_BYTES, {
      concurrency: config.TOKEN_VERIFY_CONCURRENCY,
      queueLimit: config.TOKEN_VERIFY_QUEUE_LIMIT,
      failureLimit: config.TOKEN_FAILURE_LIMIT,
      addressFailureLimit: config.TOKEN_ADDRESS_FAILURE_LIMIT,
    }),
  );
  app.get('/openapi.json', operations.openapi);
  if (dashboard) app.use(dashboardRouter({ demoDefaults: demo }));
  const graphql = graphqlEndpoint({ config, logger, graphiql }, services);
  app.use(GRAPHQL_PATH, graphql.handlers);
  app.use(restAdapter(config, services));
  app.use(restFallbacks({ metrics: services.metrics !== undefined, dashboard }));

  return {
    app,
    tokens: services.tokens,
    data: services.data,
    outbox: services.outbox,
    upgrade: graphql.webSocket,
    drain: () => {
      operations.drain();
      services.dataChanges.close();
      graphql.webSocket.drain();
    },
    close: () => services.close(),
  };
}
