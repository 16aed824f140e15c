import { type ExecutionResult, GraphQLError } from 'graphql';
import type { Logger } from 'pino';
import { type Plugin, isAsyncIterable } from 'graphql-yoga';
import { streamTransport } from './accept.js';
import { errorLogLevel, expectedOrMasked } from './errors.js';
import { resultAsSent } from './graphql-plugins.js';

/** Apollo's multipart subscription protocol: the boundary, and the Content-Type of the answer. */
const BOUNDARY = 'graphql';
export const MULTIPART_SUBSCRIPTION_TYPE = `multipart/mixed;boundary="${BOUNDARY}";subscriptionSpec="1.0"`;
/** The protocol's heartbeat period: an empty part while no event comes (proxies keep the connection, a gone client is seen). */
export const HEARTBEAT_MS = 5_000;

/**
 * Subscriptions over Apollo's multipart HTTP protocol (P137; Apollo Client's HttpLink sends them with
 * `Accept: multipart/mixed;subscriptionSpec=1.0`): each event a part `{"payload": <result>}`, a heartbeat
 * part `{}` every HEARTBEAT_MS, `--graphql--` at the end. Yoga's own multipart answer is for @defer/@stream
 * only (it refuses a subscription one, and names no `subscriptionSpec`), so a subscription whose client
 * prefers multipart/mixed to text/event-stream is answered here; the operation itself ran through every
 * plugin as over SSE. The write deadline (P78) cuts a reader that does not take the parts.
 */
export function multipartSubscriptions(logger: Logger): Plugin {
  const subscriptions = new WeakSet<object>();
  return {
    onSubscribe({ args }) {
      const request = (args.contextValue as { request?: object }).request;
      if (request) subscriptions.add(request);
    },
    onResultProcess({ request, result, setResultProcessor }) {
      if (!subscriptions.has(request) || !isAsyncIterable(result)) return;
      if (streamTransport(request.headers.get('accept') ?? '') !== 'multipart') return;
      setResultProcessor(
        (r, fetchAPI) =>
          new fetchAPI.Response(multipartBody(r as AsyncIterable<ExecutionResult>, request.signal, logger, fetchAPI), { headers: HEADERS }),
        'multipart/mixed',
      );
    },
  };
}

const HEADERS = { 'Content-Type': MULTIPART_SUBSCRIPTION_TYPE, 'Cache-Control': 'no-cache', Connection: 'keep-alive' };

/**
 * The parts of `events`. Each part is followed at once by the next boundary, which is when a reader
 * knows the part is whole. The heartbeat stops when the response ends (`closed`, the request's signal):
 * the server adapter does not cancel a body it stopped sending (streamsEndWithTheirClient ends `events`).
 */
function multipartBody(
  events: AsyncIterable<ExecutionResult>,
  closed: AbortSignal,
  logger: Logger,
  fetchAPI: { ReadableStream: typeof ReadableStream; TextEncoder: typeof TextEncoder },
): ReadableStream<Uint8Array> {
  const encoder = new fetchAPI.TextEncoder();
  const part = (json: string) => encoder.encode(`\r\nContent-Type: application/json; charset=utf-8\r\n\r\n${json}\r\n--${BOUNDARY}`);
  const iterator = events[Symbol.asyncIterator]();
  let heartbeat: NodeJS.Timeout | undefined;
  // A cancelled body takes nothing more: enqueueing into it throws, and a client gone is not a failure.
  let cancelled = false;
  const stop = () => clearInterval(heartbeat);
  closed.addEventListener('abort', stop, { once: true });
  return new fetchAPI.ReadableStream<Uint8Array>({
    start(controller) {
      if (closed.aborted) return;
      controller.enqueue(encoder.encode(`\r\n--${BOUNDARY}`));
      heartbeat = setInterval(() => {
        // As Yoga's SSE pings: null is an errored stream; 0 a reader not taking what waits (none added to it).
        if (controller.desiredSize === null) stop();
        else if (controller.desiredSize > 0) controller.enqueue(part('{}'));
      }, HEARTBEAT_MS);
      // Never what keeps a stopping process alive: the shutdown ends subscriptions itself.
      heartbeat.unref();
    },
    async pull(controller) {
      try {
        const { done, value } = await iterator.next();
        if (cancelled || closed.aborted) return;
        if (done) {
          stop();
          controller.enqueue(encoder.encode('--\r\n'));
          controller.close();
          return;
        }
        controller.enqueue(part(`{"payload":${JSON.stringify(resultAsSent(value))}}`));
      } catch (e) {
        // The protocol's transport error: a last part without a payload, then the end.
        stop();
        if (cancelled || closed.aborted) return;
        logger[errorLogLevel(e)]({ err: e }, 'multipart subscription failed');
        controller.enqueue(part(JSON.stringify({ payload: null, ...resultAsSent({ errors: [codedError(e)] }) })));
        controller.enqueue(encoder.encode('--\r\n'));
        controller.close();
      }
    },
    async cancel() {
      cancelled = true;
      stop();
      await iterator.return?.();
    },
  });
}

/** What a failing stream's last part names: an expected error as itself, anything else masked. */
function codedError(e: unknown): GraphQLError {
  if (e instanceof GraphQLError && typeof e.extensions['code'] === 'string') return e;
  return expectedOrMasked(e);
}
