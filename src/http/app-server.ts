import { IncomingMessage, type Server, ServerResponse, createServer } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Express } from 'express';

/** Who takes over a connection asking to upgrade (a WebSocket): the requests it `accepts` go to `handle`. */
export interface UpgradeHandler {
  accepts(req: IncomingMessage): boolean;
  handle(req: IncomingMessage, socket: Duplex, head: Buffer): void;
}

/** An HTTP server, and the way to hand it the Express app that answers its requests. */
export interface AppServer {
  server: Server;
  /** From now on requests are born with `app`'s request and response prototypes and go to `handle` (the app). */
  serve(app: Express, handle?: (req: IncomingMessage, res: ServerResponse) => void): void;
  /**
   * From now on an upgrade request that `upgrades` accepts goes to it; any other (and every one before)
   * is answered as a plain request.
   */
  upgrade(upgrades: UpgradeHandler): void;
}

/** Before `serve`, by default: not ready, 503 without a body. */
function notReady(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(503).end();
}

/**
 * A Node HTTP server whose requests and responses are constructed with the Express app's request and
 * response prototypes (P74). Express gives every request and response its app's prototypes with
 * `Object.setPrototypeOf`; measured on a bare Express route, that made what a request allocated survive
 * the next scavenge and be promoted (6.4 KB per request; 1.1 KB once they are born with them). When
 * they are, Express's switch changes nothing. Until `serve`, requests go to `starting` (by default a bare
 * 503) with Node's own prototypes.
 */
export function createAppServer(starting: (req: IncomingMessage, res: ServerResponse) => void = notReady): AppServer {
  // Functions, not classes: `new` on them makes a Node IncomingMessage or ServerResponse whose prototype
  // is their `prototype` property, which `serve` points at the app's (a class's cannot be reassigned).
  function AppRequest(...args: ConstructorParameters<typeof IncomingMessage>): IncomingMessage {
    return Reflect.construct(IncomingMessage, args, AppRequest) as IncomingMessage;
  }
  AppRequest.prototype = IncomingMessage.prototype;
  function AppResponse(...args: ConstructorParameters<typeof ServerResponse>): ServerResponse {
    return Reflect.construct(ServerResponse, args, AppResponse) as ServerResponse;
  }
  AppResponse.prototype = ServerResponse.prototype;
  let handler = starting;
  let upgrades: UpgradeHandler | undefined;
  const server = createServer(
    {
      IncomingMessage: AppRequest as unknown as typeof IncomingMessage,
      ServerResponse: AppResponse as unknown as typeof ServerResponse,
      shouldUpgradeCallback: (req) => upgrades?.accepts(req) ?? false,
    },
    (req, res) => handler(req, res),
  );
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => upgrades?.handle(req, socket, head));
  return {
    server,
    serve(app, handle = app) {
      AppRequest.prototype = app.request;
      AppResponse.prototype = app.response;
      handler = handle;
    },
    upgrade(u) {
      upgrades = u;
    },
  };
}
