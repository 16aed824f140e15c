import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { type ExecutionArgs, type ExecutionResult, GraphQLError, type GraphQLFormattedError, parse } from 'graphql';
import { CloseCode, type Context, type FormattedExecutionResult, type SubscribePayload, handleProtocols, makeServer } from 'graphql-ws';
import type { Logger } from 'pino';
import { WebSocket, WebSocketServer } from 'ws';
import { AppError } from '../core/errors.js';
import { atInstant } from '../core/timers.js';
import type { Principal } from '../core/permissions.js';
import { expectedErrorOf } from '../db/faults.js';
import type { ResponseLike } from './admission.js';
import type { UpgradeHandler } from './app-server.js';
import { errorLogLevel, graphqlRendering, isRefusal, maskedError } from './errors.js';
import { resultAsSent } from './graphql-plugins.js';

/** How long a connection may wait before its `connection_init` (graphql-ws closes it with 4408). */
export const CONNECTION_INIT_TIMEOUT_MS = 3_000;
/**
 * A ping this often; a client that has not answered the previous one by the next is gone (terminated),
 * unless it is still taking the output queued before that ping.
 */
export const KEEP_ALIVE_MS = 12_000;
/**
 * After a token expires, how long its connection stays open: its subscriptions end with UNAUTHENTICATED
 * at the expiry itself (as over SSE), and those ends go out before the connection closes (4403).
 */
export const EXPIRY_CLOSE_DELAY_MS = 1_000;

/** The close codes of P136 beside graphql-ws's own (4400, 4406, 4408, 4409, 4429, 4500). */
export const WS_CLOSE = {
  /** No valid token in `connectionParams` (missing, invalid, expired, unknown client): not retried by graphql-ws clients. */
  unauthorized: CloseCode.Unauthorized,
  /** A token without the scope, or a connection whose token expired: graphql-ws clients retry (fresh `connectionParams`). */
  forbidden: CloseCode.Forbidden,
  /** The database unavailable or the client over its rate at `connection_init` (the same 503/429 as HTTP): retried. */
  tryAgainLater: 1013,
  /**
   * The client did not read what it was sent (SLOW_CONSUMER): not retried by graphql-ws clients, on purpose, as
   * events were missed; the application reads its data again before it reconnects.
   */
  slowConsumer: 1008,
  /** The instance is shutting down: connect again (elsewhere). */
  goingAway: 1001,
} as const;

export interface GraphqlWebSocketOptions {
  /** The path it answers on (the upgrade of any other is not taken). */
  path: string;
  /** The bearer token check of an HTTP request, admission's gate included (rejects with the AppError it would answer). */
  verify(authorization: string | undefined): Promise<Principal>;
  /**
   * Runs one operation as Yoga runs an HTTP request's parameters (every plugin: limits, permissions,
   * admission, shared subscription results, metrics) for `req`; `res` stands for the response: it closes
   * when the operation is done or its connection closes.
   */
  run(
    params: SubscribePayload,
    req: { principal: Principal; id: string },
    res: ResponseLike,
  ): Promise<ExecutionResult | AsyncIterable<ExecutionResult>> | ExecutionResult | AsyncIterable<ExecutionResult>;
  /** The largest message a client may send (ws closes with 1009 past it). */
  maxPayload: number;
  /** Output waiting for a client past this many bytes: the client is not reading, the connection is closed (1008). */
  maxBufferedBytes: number;
  /** Output not taken within this long ends the connection (P78's write deadline; 0: none). */
  writeTimeoutMs: number;
  /** Operations a connection may have under way at once; one more is refused (429). */
  maxOperations: number;
  logger: Logger;
  /** Told when a connection is cut because its client did not read. */
  onCut?: () => void;
}

/** graphql-ws on an upgrade path: the upgrades it takes, and the shutdown drain. */
export interface GraphqlWebSocket extends UpgradeHandler {
  /** Refuses new connections (503) and closes the open ones (1001) once what was written to them is out. */
  drain(): void;
}

/** What stands for an HTTP response for one operation over a connection (admission, endWhenClientGoes). */
class OperationEnd extends EventEmitter implements ResponseLike {
  closed = false;
  setHeader(): void {}
  end(): void {
    if (this.closed) return;
    this.closed = true;
    this.emit('close');
  }
}

/** One authenticated connection. */
interface Connection {
  id: string;
  authorization: string;
  principal: Principal;
  /** By the subscribe message's payload: an id the client reuses once an operation completed names another. */
  operations: Map<SubscribePayload, OperationEnd>;
  /** Cancels the close at the token's expiry. */
  cancelExpiry: () => void;
}

interface Extra {
  socket: WebSocket;
  request: IncomingMessage;
}

/** graphql-ws runs what onSubscribe hands it: every operation is `run` (this document only says "not a subscription"). */
const RUN_DOCUMENT = parse('{ __typename }');
type RunArgs = ExecutionArgs & { rootValue: () => ReturnType<GraphqlWebSocketOptions['run']> };

/**
 * GraphQL over WebSocket (graphql-ws's `graphql-transport-ws` protocol) on `path`, one implementation
 * behind every transport (P136): each operation is run through Yoga as an HTTP request's is. The token is
 * the `connectionParams`' `Authorization` (`Bearer …`) or `token`, checked at `connection_init` as an HTTP
 * request's header is (refused: the connection closes with 4401, 4403 or 1013 and the reason) and again
 * for every operation (an expired or revoked token, the rate limit). Nothing waits without a deadline: the
 * `connection_init` (CONNECTION_INIT_TIMEOUT_MS), a silent peer (KEEP_ALIVE_MS), output the client does not
 * take (`maxBufferedBytes`, `writeTimeoutMs`), a connection past its token's expiry.
 */
export function graphqlWebSocket(options: GraphqlWebSocketOptions): GraphqlWebSocket {
  const { path, verify, run, logger } = options;
  const wss = new WebSocketServer({ noServer: true, maxPayload: options.maxPayload, handleProtocols });
  const connections = new WeakMap<Context<Record<string, unknown>, Extra>, Connection>();
  let draining = false;

  const server = makeServer<Record<string, unknown>, Extra>({
    connectionInitWaitTimeout: CONNECTION_INIT_TIMEOUT_MS,
    execute: (args) => settled(args as RunArgs, logger),
    subscribe: (args) => settled(args as RunArgs, logger),
    onConnect: async (ctx) => {
      const { socket } = ctx.extra;
      const authorization = authorizationOf(ctx.connectionParams);
      let principal: Principal;
      try {
        principal = await verify(authorization);
      } catch (e) {
        const { code, reason } = refusal(e, logger);
        socket.close(code, reason);
        return false;
      }
      // The client may have gone during the check: nothing to keep for it.
      if (socket.readyState !== WebSocket.OPEN) return false;
      const cancelExpiry =
        principal.expiresAt === undefined
          ? () => undefined
          : atInstant(principal.expiresAt + EXPIRY_CLOSE_DELAY_MS, () =>
              socket.close(WS_CLOSE.forbidden, 'The access token expired: connect again with a new token.'),
            );
      const conn: Connection = { id: randomUUID(), authorization: authorization!, principal, operations: new Map(), cancelExpiry };
      connections.set(ctx, conn);
      return true;
    },
    onSubscribe: async (ctx, id, payload) => {
      const conn = connections.get(ctx)!;
      // Before the token check, whose database read each would cost.
      if (conn.operations.size >= options.maxOperations)
        return [
          new AppError(
            429,
            'TOO_MANY_REQUESTS',
            `This connection has ${options.maxOperations} operations under way (WEBSOCKET_MAX_OPERATIONS): complete one first.`,
          ),
        ];
      const end = new OperationEnd();
      conn.operations.set(payload, end);
      let principal: Principal;
      try {
        principal = await verify(conn.authorization);
      } catch (e) {
        conn.operations.delete(payload);
        return [operationError(e, logger, 'checking a token failed')];
      }
      // Closed during the check: graphql-ws sends nothing more, and nothing must run.
      if (ctx.extra.socket.readyState !== WebSocket.OPEN) return [new GraphQLError('The connection closed.')];
      const args: Partial<RunArgs> = {
        document: RUN_DOCUMENT,
        rootValue: () => run(payload, { principal, id: `${conn.id}/${id}` }, end),
      };
      return args as RunArgs;
    },
    onNext: (_ctx, _id, _payload, _args, result) => resultAsSent(result) as FormattedExecutionResult,
    // graphql-ws wraps what an operation's events threw in a GraphQLError of its own: the original is what is rendered.
    onError: (_ctx, _id, _payload, errors) => errors.map((e) => sentError(graphqlRendering(thrownError(e, logger)))),
    onComplete: (ctx, _id, payload) => {
      const conn = connections.get(ctx);
      conn?.operations.get(payload)?.end();
      conn?.operations.delete(payload);
    },
    onClose: (ctx, code, reason) => {
      const conn = connections.get(ctx);
      if (!conn) return;
      conn.cancelExpiry();
      for (const end of conn.operations.values()) end.end();
      logger.info({ tenant: conn.principal.tenantKey, client: conn.principal.clientId, code, reason }, 'graphql-ws connection closed');
    },
  });

  const cuts = new WeakSet<WebSocket>();
  /** Closes (1008) a connection whose client does not take what it is sent; at the write deadline, at once. */
  const cut = (socket: WebSocket, why: string, now: boolean) => {
    if (now) socket.terminate();
    if (cuts.has(socket)) return;
    cuts.add(socket);
    options.onCut?.();
    logger.info({ bufferedBytes: socket.bufferedAmount, why }, 'graphql-ws client not reading: connection closed');
    // Queued after what waits: a reader that resumes reads it; ws ends the connection if it does not (30 s).
    if (!now)
      socket.close(WS_CLOSE.slowConsumer, closeReason(`SLOW_CONSUMER: ${why}; events were missed: read the data again and reconnect.`));
  };

  const connected = (socket: WebSocket, raw: Duplex, request: IncomingMessage) => {
    socket.on('error', (err) => logger.info({ err: err.message }, 'graphql-ws: a client broke the protocol'));
    watchWrites(raw, options.writeTimeoutMs, () => cut(socket, `output not taken within ${options.writeTimeoutMs} ms`, true));
    let alive = true;
    let buffered = 0;
    socket.on('pong', () => (alive = true));
    const keepAlive = setInterval(() => {
      // A closing connection has ws's own deadline for the close handshake (30 s).
      if (socket.readyState !== WebSocket.OPEN) return;
      // The ping waits behind the output: a client still taking it is slow, not gone (a stall is the write deadline's).
      const taking = socket.bufferedAmount > 0 && socket.bufferedAmount < buffered;
      buffered = socket.bufferedAmount;
      if (!alive) return taking ? undefined : void socket.terminate();
      alive = false;
      socket.ping();
    }, KEEP_ALIVE_MS);
    keepAlive.unref();
    const closed = server.opened(
      {
        protocol: socket.protocol,
        send: (data) =>
          new Promise<void>((resolve) => {
            if (socket.readyState !== WebSocket.OPEN) return resolve();
            // A write that fails is a client gone: the socket's close ends the connection's operations.
            socket.send(data, (err) => {
              if (err) logger.debug({ err: err.message }, 'graphql-ws: a message was not sent');
              resolve();
            });
            if (socket.bufferedAmount > options.maxBufferedBytes)
              cut(socket, `more than ${options.maxBufferedBytes} bytes waited for the client`, false);
          }),
        close: (code, reason) => socket.close(code, reason),
        onMessage: (cb) =>
          socket.on('message', (data: Buffer) => {
            cb(data.toString('utf8')).catch((err: unknown) => {
              logger[errorLogLevel(err)]({ err }, 'graphql-ws: handling a message failed');
              socket.close(CloseCode.InternalServerError, 'Internal server error');
            });
          }),
      },
      { socket, request },
    );
    socket.once('close', (code, reason) => {
      clearInterval(keepAlive);
      closed(code, reason.toString('utf8')).catch((err: unknown) => logger.error({ err }, 'graphql-ws: closing a connection failed'));
    });
  };

  return {
    accepts: (req) => req.headers.upgrade?.toLowerCase() === 'websocket' && (req.url ?? '/').split('?')[0] === path,
    handle(req, socket, head) {
      if (draining) {
        // As ws's own refusals: the upgraded socket has no 'error' listener left, and a client gone
        // (ECONNRESET, EPIPE) would otherwise be an unhandled error.
        socket.on('error', () => undefined);
        socket.once('finish', () => socket.destroy());
        socket.end('HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
        return;
      }
      wss.handleUpgrade(req, socket, head, (ws) => connected(ws, socket, req));
    },
    drain() {
      draining = true;
      // After the turn in which the subscriptions were ended: their last messages go out first.
      setImmediate(() => {
        for (const ws of wss.clients) ws.close(WS_CLOSE.goingAway, 'The service instance is shutting down: connect again.');
      });
    },
  };
}

/** The Authorization of `connectionParams`: `Authorization` (any case) or `token` (`Bearer` added if missing). */
function authorizationOf(params: Readonly<Record<string, unknown>> | undefined): string | undefined {
  if (!params) return undefined;
  const key = Object.keys(params).find((k) => k.toLowerCase() === 'authorization');
  const value = key !== undefined ? params[key] : params['token'];
  if (typeof value !== 'string') return undefined;
  return key === undefined && !/^bearer /i.test(value) ? `Bearer ${value}` : value;
}

/** The close code and reason of a connection whose token was refused. */
function refusal(e: unknown, logger: Logger): { code: number; reason: string } {
  const expected: AppError | undefined = expectedErrorOf(e);
  if (!expected) {
    logger.error({ err: e }, 'graphql-ws: checking a token failed');
    return { code: CloseCode.InternalServerError, reason: 'Internal server error' };
  }
  logger[errorLogLevel(expected)]({ code: expected.code, reason: expected.message }, 'graphql-ws connection refused');
  const code =
    expected.status === 401
      ? WS_CLOSE.unauthorized
      : expected.status === 403
        ? WS_CLOSE.forbidden
        : isRefusal(expected.code)
          ? WS_CLOSE.tryAgainLater
          : CloseCode.BadRequest;
  return { code, reason: closeReason(`${expected.code}: ${expected.message}`) };
}

/** A close reason fits in 123 bytes (RFC 6455 §5.5). */
function closeReason(text: string): string {
  const bytes = Buffer.from(text);
  return bytes.length <= 123
    ? text
    : `${bytes
        .subarray(0, 118)
        .toString('utf8')
        .replace(/\uFFFD$/, '')}...`;
}

/** An operation whose run rejected (a hook that threw) answers its error: graphql-ws would close the whole connection (4500). */
async function settled(args: RunArgs, logger: Logger): Promise<ExecutionResult | AsyncIterable<ExecutionResult>> {
  try {
    return await args.rootValue();
  } catch (e) {
    return { errors: [operationError(e, logger, 'an operation failed')] };
  }
}

/** What an operation's client gets of `e` (its token refused, its run failed): expected errors as themselves, the rest masked and logged. */
function operationError(e: unknown, logger: Logger, what: string): GraphQLError {
  const expected = expectedErrorOf(e);
  if (expected) return expected;
  logger.error({ err: e }, `graphql-ws: ${what}`);
  return maskedError();
}

/** The error an operation threw, unwrapped from graphql-ws's GraphQLError. */
function thrownError(e: GraphQLError, logger: Logger): GraphQLError {
  if (e.originalError === undefined || e.originalError === null) return e;
  if (e.originalError instanceof GraphQLError) return e.originalError;
  return operationError(e.originalError, logger, 'an operation failed');
}

function sentError(e: GraphQLError): GraphQLFormattedError {
  return (resultAsSent({ errors: [e] }).errors as GraphQLFormattedError[])[0]!;
}

/**
 * P78's write deadline on a connection's socket: output left above the buffer's high-water mark and not
 * drained within `ms` calls `onStall`.
 */
function watchWrites(raw: Duplex, ms: number, onStall: () => void): void {
  if (ms <= 0) return;
  let timer: NodeJS.Timeout | undefined;
  const write = raw.write.bind(raw) as (...args: unknown[]) => boolean;
  (raw as { write: (...args: unknown[]) => boolean }).write = (...args) => {
    const ok = write(...args);
    if (!ok && !timer && !raw.destroyed) {
      timer = setTimeout(onStall, ms);
      timer.unref();
    }
    return ok;
  };
  const settled = () => {
    clearTimeout(timer);
    timer = undefined;
  };
  raw.on('drain', settled);
  raw.once('close', settled);
}
