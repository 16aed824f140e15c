import {
  BREAK,
  type DocumentNode,
  type ExecutionArgs,
  type ExecutionResult,
  GraphQLError,
  type Source,
  Kind,
  createSourceEventStream,
  execute,
  getOperationAST,
  visit,
} from 'graphql';
import { type Plugin, isAsyncIterable } from 'graphql-yoga';
import { type CompiledQuery, compileQuery, isCompiledQuery } from 'graphql-jit';
import { LRUCache } from 'lru-cache';
import { AppError } from '../core/errors.js';
import { graphqlRendering, isRefusal, problemAnswer, withExtensions } from './errors.js';
import { problemResponse } from './problem.js';
import { type Context, operationDone, operationKind, operationKnown } from '../graphql/context.js';
import { type SharedEvent, isSharedEvent } from '../graphql/shared-events.js';
import type { Admission, ResponseLike } from './admission.js';
import { slicedJson } from './sliced-json.js';
import { streamTransport } from './accept.js';

// The Yoga plugins of /graphql: how errors answer (D4, P27, P50), what a result carries (D10 stale data),
// admission, and compilation of repeated documents. The D11 limits are in graphql-limits.ts. A result may be
// a stream (a subscription's events, the parts of a @defer/@stream query): each of its items is treated
// as a single result would be.

/**
 * Expected errors carry `extensions.http.status` for the REST mapping, but Yoga would answer a whole
 * GraphQL response with the highest such status. Over GraphQL an expected error belongs to its field and
 * the response is 200 with the other fields' data (D4); the status stays visible as `extensions.status`.
 * Except when the service could not run the operation at all (P50, P52): no field has data and every
 * error says the database is unavailable (503) or the client is over its share (429); then the response
 * carries that status and its Retry-After, as the REST answer would. A result without `data` is a request
 * error (nothing executed) and answers as GraphQL over HTTP says (P62, `requestErrorRendering`).
 */
export const graphqlErrorsAnswer200: Plugin = {
  onExecutionResult({ result, setResult }) {
    if (!result || !('errors' in result) || !result.errors?.length) return;
    // No `data` and no error at a field: nothing executed (a parse, validation or variable coercion error, a
    // refusal). Those are request errors and answer as GraphQL over HTTP says (P62), not as D4's field
    // errors; a subscription whose field fails at subscribe has no `data` either, but its error has a path.
    if (!('data' in result) && result.errors.every((e) => !e.path)) {
      return void setResult({ ...result, errors: result.errors.map(requestErrorRendering) });
    }
    const whole = wholeOperationRefusal(result);
    setResult({
      ...result,
      ...(whole ? { extensions: { ...result.extensions, http: whole } } : {}),
      errors: result.errors.map(graphqlRendering),
    });
  },
  // A stream's items (the status is already sent): every error rendered as D4 says, the later parts of a
  // @defer/@stream query included.
  onExecute: () => ({ onExecuteDone: ({ result }) => (isAsyncIterable(result) ? { onNext: renderItemErrors } : undefined) }),
  onSubscribe: () => ({ onSubscribeResult: ({ result }) => (isAsyncIterable(result) ? { onNext: renderItemErrors } : undefined) }),
};

/**
 * A request error (nothing executed) keeps its `extensions.http` for Yoga, which answers with its status
 * (P62): 400 for a parse, validation or variable coercion error, 405 with `Allow: POST` for a mutation over
 * GET, a refusal's 429 or 503. The spec's own request errors (`http.spec`) answer 200 to an `Accept:
 * application/json` request, as the GraphQL over HTTP spec asks for legacy clients. An error graphql-js
 * returns without a status (variable coercion, an unknown operation name) is such a 400; an unexpected
 * (masked) one is left alone. The body shows the status as `extensions.status`, like a field error's.
 */
function requestErrorRendering(e: GraphQLError): GraphQLError {
  const extensions = e.extensions as { http?: { status?: number }; unexpected?: unknown; status?: unknown };
  if (extensions.unexpected || (e.originalError && !(e.originalError instanceof GraphQLError))) return e;
  const http = extensions.http ?? { status: 400, spec: true };
  if (extensions.http && extensions.status === http.status) return e;
  return withExtensions(e, { ...e.extensions, http, status: http.status });
}

/**
 * GraphQL over HTTP: `operationName`, when given, is a string; anything else is a request that is not
 * well-formed, 400 whatever the Accept (P62). Yoga checks `query`, `variables` and `extensions` itself.
 */
export const operationNameIsString: Plugin = {
  onParams({ params }) {
    const name: unknown = params.operationName;
    if (name !== undefined && name !== null && typeof name !== 'string') {
      throw new AppError(
        400,
        'BAD_REQUEST',
        `Expected "operationName" to be a string, but given ${Array.isArray(name) ? 'array' : typeof name}.`,
      );
    }
  },
};

interface StreamItem {
  errors?: readonly GraphQLError[];
  incremental?: readonly { errors?: readonly GraphQLError[] }[];
}

function renderItemErrors({ result, setResult }: { result: unknown; setResult: (r: never) => void }): void {
  const item = result as StreamItem;
  const rendered = (errors: readonly GraphQLError[] | undefined) => (errors?.length ? { errors: errors.map(graphqlRendering) } : {});
  if (!item.errors?.length && !item.incremental?.some((i) => i.errors?.length)) return;
  setResult({
    ...item,
    ...rendered(item.errors),
    ...(item.incremental ? { incremental: item.incremental.map((i) => ({ ...i, ...rendered(i.errors) })) } : {}),
  } as never);
}

/** The HTTP status and headers of a result in which nothing ran because the service refused it, if so. */
export function wholeOperationRefusal(result: {
  data?: unknown;
  errors?: readonly GraphQLError[];
}): { status: number; headers: Record<string, string> } | undefined {
  const data = result.data as Record<string, unknown> | null | undefined;
  if (data && Object.values(data).some((v) => v !== null)) return undefined;
  const https = (result.errors ?? []).map((e) =>
    isRefusal(e.extensions?.['code']) ? (e.extensions['http'] as { status: number; headers?: Record<string, string> }) : undefined,
  );
  if (https.length === 0 || https.some((h) => !h)) return undefined;
  const first = https[0]!;
  return { status: first.status, headers: first.headers ?? {} };
}

/**
 * Every GraphQL error leaves with a code (D4, P47): graphql-js's own syntax and validation errors and
 * a relay id that does not decode carry none of their own.
 */
export const everyErrorCoded: Plugin = {
  onResultProcess({ result, setResult }) {
    if (Array.isArray(result) || !result || typeof result !== 'object' || !('errors' in result) || !result.errors?.length) return;
    const errors = result.errors as GraphQLError[];
    if (errors.every((e) => e.extensions?.['code'])) return;
    setResult({ ...result, errors: errors.map(coded) });
  },
};

function coded(e: GraphQLError): GraphQLError {
  if (e.extensions?.['code']) return e;
  const code = e.message.startsWith('Syntax Error') ? 'GRAPHQL_PARSE_FAILED' : e.path ? 'BAD_REQUEST' : 'GRAPHQL_VALIDATION_FAILED';
  return withExtensions(e, { ...e.extensions, code });
}

/**
 * A result as Yoga writes it over HTTP, for the transports whose messages are written here (graphql-ws,
 * Apollo's multipart subscriptions): every error coded (`everyErrorCoded`), without what Yoga keeps for
 * itself (`extensions.http`, an error's `http` and `unexpected`).
 */
export function resultAsSent(result: ExecutionResult): Record<string, unknown> {
  const { errors, extensions, ...rest } = result;
  const { http: _http, ...kept } = extensions ?? {};
  return {
    ...rest,
    ...(errors?.length
      ? {
          errors: errors.map((e) => {
            const json = coded(e).toJSON();
            const { http: _h, unexpected: _u, ...ext } = json.extensions ?? {};
            return { ...json, extensions: ext };
          }),
        }
      : {}),
    ...(Object.keys(kept).length ? { extensions: kept } : {}),
  };
}

/**
 * A result whose nodes were executed in slices (P65) is serialised in slices as well: Yoga would call
 * `JSON.stringify` on it in one piece. Its text is made here, over several turns of the event loop, and
 * handed to Yoga as the result's `stringify`. Only a complete result without errors or HTTP extensions:
 * Yoga strips those before serialising, and a later hook that replaced the result gets the plain
 * `JSON.stringify` (the text belongs to this very object). Registered last, after every hook that
 * changes a result.
 */
export const slicedResults: Plugin = {
  async onExecutionResult({ result, setResult, context }) {
    // The context Yoga passes is the one our context factory returned, merged into its own.
    if (
      !(context as Partial<Context>).slices?.sliced ||
      // No HTTP response (graphql-ws): the message that carries the result is serialised whole there.
      !(context as { req?: { headers?: unknown } }).req?.headers ||
      !result ||
      isAsyncIterable(result) ||
      result.errors?.length ||
      result.extensions?.http
    )
      return;
    const text = await slicedJson(result);
    const sliced: typeof result = { ...result, stringify: (r) => (r === sliced ? text : JSON.stringify(r)) };
    setResult(sliced);
  },
};

/** Yoga's log arguments for pino: an Error (its original cause if wrapped) as `err`, the rest as `details`. */
export function logArgs(args: unknown[]): Record<string, unknown> {
  const error = args.find((a): a is Error => a instanceof Error);
  const cause = error && (error as GraphQLError).originalError ? (error as GraphQLError).originalError : error;
  const details = args.filter((a) => a !== error);
  return { ...(cause ? { err: cause } : {}), ...(details.length ? { details } : {}) };
}

/** What `staleDataExtension` reads of a context: the stale data a domain recorded, by key (D10). */
interface StaleDataHolder {
  staleData?: ReadonlyMap<string, unknown>;
}

/**
 * D10: stale data served in this response, as `extensions.staleData`; in a @defer/@stream query's parts,
 * each part lists what was served stale since the part before it.
 */
export const staleDataExtension: Plugin = {
  onExecute({ args }) {
    return {
      onExecuteDone({ result, setResult }) {
        const stale = (args.contextValue as StaleDataHolder).staleData;
        if (isAsyncIterable(result)) {
          const told = new Set<string>();
          return {
            onNext({ result: part, setResult: setPart }) {
              const fresh = [...(stale ?? [])].filter(([k]) => !told.has(k));
              if (fresh.length === 0) return;
              for (const [k] of fresh) told.add(k);
              setPart({ ...part, extensions: { ...part.extensions, staleData: fresh.map(([, v]) => v) } });
            },
          };
        }
        if (!stale?.size || !('data' in result || 'errors' in result)) return;
        setResult({ ...result, extensions: { ...result.extensions, staleData: [...stale.values()] } });
      },
    };
  },
};

/** Context.operation: the kind of operation that runs, for the domains that cache only in a query. */
export const operationInContext: Plugin = {
  onExecute({ args }) {
    const ctx = args.contextValue as unknown as Context;
    operationKnown(ctx, operationKind(args.document, args.operationName));
    if (ctx.operation !== 'mutation' || !ctx.replicas) return;
    // Before the answer (its first part) is sent: a read that follows it sees the write (P152).
    return { onExecuteDone: () => operationDone(ctx) };
  },
  onSubscribe({ args }) {
    operationKnown(args.contextValue as unknown as Context, operationKind(args.document, args.operationName));
  },
};

/**
 * An operation runs once admitted (P52): weighed by its cost from the D11 rule (queryLimits), in
 * the tenant's and client's share of the instance. Refused, the whole operation answers 429 or 503 with
 * Retry-After (graphqlErrorsAnswer200). Subscriptions do not pass here: they hold no database work. The
 * units go back when execution is done, before the result is serialised and written (P77); a
 * @defer/@stream query's when its last part has been produced (a reader that does not drain the parts
 * stalls them, and the write deadline cuts it).
 */
export function admissionControl(admission: Admission): Plugin {
  return {
    onExecute({ args, setResultAndStopExecution }) {
      // `res`: the HTTP response, or what stands for it over a WebSocket (one per operation).
      const ctx = args.contextValue as unknown as Context & { cost?: number; res?: ResponseLike };
      if (!ctx.res || !ctx.principal) return;
      return admission.admit({ tenant: ctx.principal.tenantKey, client: ctx.principal.clientId }, ctx.cost ?? 1, ctx.res).then(
        (release) => ({
          onExecuteDone: ({ result }) => {
            if (!isAsyncIterable(result)) return void release();
            return { onEnd: release };
          },
        }),
        (e: AppError) => {
          setResultAndStopExecution({ errors: [e] });
        },
      );
    },
  };
}

/** What `sharedSubscriptionResults` reports: an execution of a shared event, a shared result handed to a subscriber. */
export interface SharedEventCounts {
  executed(): void;
  delivered(): void;
}

/**
 * A subscription's events executed once for all their subscribers (P129). For a subscription field
 * whose schema extensions say `sharedEvents` (its events may be `SharedEvent`s: their publisher hands the
 * one object only to subscribers who may see the same), a shared event is executed once per document,
 * operation name and variables, and every such subscriber gets the same result, whose JSON text is made
 * once too (Yoga serialises each stream item with the result's `stringify`). Its other events are
 * executed per subscriber; other fields, and documents with @defer or @stream, keep Yoga's executor. The
 * results live as long as their event and document (WeakMaps; Yoga's parser cache hands out one
 * DocumentNode per query text): a publisher keeps only its latest event. `counts` hears each execution
 * of a shared event and each result handed out (`/metrics`).
 */
export function sharedSubscriptionResults(counts?: SharedEventCounts): Plugin {
  const results = new WeakMap<SharedEvent, WeakMap<DocumentNode, Map<string, Promise<ExecutionResult>>>>();
  return {
    onSubscribe({ args, setSubscribeFn }) {
      if (!sharesEvents(args.schema, args.document, args.operationName) || usesIncrementalDelivery(args.document)) return;
      setSubscribeFn(async (a: ExecutionArgs) => {
        const source = await createSourceEventStream(a);
        if (!isAsyncIterable(source)) return source;
        // What a shared result is keyed by beside its event and document: the operation and variables.
        const key = `${a.operationName ?? ''}\u0001${JSON.stringify(a.variableValues ?? {})}`;
        const run = (event: unknown) => execute({ ...a, rootValue: event }) as Promise<ExecutionResult> | ExecutionResult;
        return mapEvents(source, (event) => {
          if (!isSharedEvent(event)) return run(event);
          let byDocument = results.get(event);
          if (!byDocument) results.set(event, (byDocument = new WeakMap()));
          let byRequest = byDocument.get(a.document);
          if (!byRequest) byDocument.set(a.document, (byRequest = new Map()));
          let shared = byRequest.get(key);
          if (!shared) {
            counts?.executed();
            byRequest.set(key, (shared = Promise.resolve(run(event)).then(onceSerialised)));
          }
          counts?.delivered();
          return shared;
        });
      });
    },
  };
}

/** Whether the operation's subscription field declares `extensions: { sharedEvents: true }`. */
function sharesEvents(schema: ExecutionArgs['schema'], document: DocumentNode, operationName: string | null | undefined): boolean {
  const operation = getOperationAST(document, operationName);
  const field = operation?.selectionSet.selections.find((s) => s.kind === Kind.FIELD);
  if (operation?.operation !== 'subscription' || field?.kind !== Kind.FIELD) return false;
  return schema.getSubscriptionType()?.getFields()[field.name.value]?.extensions['sharedEvents'] === true;
}

/** The result with a `stringify` that makes its JSON text once, for the very object (a copy is serialised anew). */
function onceSerialised(result: ExecutionResult): ExecutionResult {
  let text: string | undefined;
  const once: ExecutionResult & { stringify: (r: unknown) => string } = {
    ...result,
    stringify: (r) => (r === once ? (text ??= JSON.stringify(r)) : JSON.stringify(r)),
  };
  return once;
}

/** Each event of `source` mapped by `fn`, in order; ending it ends the source. */
function mapEvents<T, R>(source: AsyncIterable<T>, fn: (event: T) => R | Promise<R>): AsyncIterableIterator<R> {
  const it = source[Symbol.asyncIterator]();
  const done = { value: undefined, done: true } as IteratorReturnResult<undefined>;
  return {
    async next() {
      const r = await it.next();
      return r.done ? done : { value: await fn(r.value), done: false };
    },
    async return() {
      await it.return?.();
      return done;
    },
    async throw(e: unknown) {
      await it.return?.();
      throw e;
    },
    [Symbol.asyncIterator]() {
      return this;
    },
  };
}

/**
 * graphql-jit for the documents a client repeats (a dashboard sends the same few): a document is compiled
 * on its second execution, so a stream of one-off documents costs no compilation; both the counts and the
 * compiled functions are bounded LRUs. Yoga's parser cache hands out one DocumentNode per query text. A
 * document compiles per operation (P165: a plugin keyed by the document alone ran the operation compiled
 * first whichever `operationName` asked). graphql-jit implements neither @defer nor @stream (it would
 * inline the one and fail on the other) and subscriptions gain nothing from it: those run on Yoga's own
 * executor, and so does a document graphql-jit cannot compile (it answers as the interpreted run does).
 */
export function compiledRepeatedDocuments(): Plugin {
  const seen = new LRUCache<DocumentNode, true>({ max: 1000 });
  const compiled = new LRUCache<DocumentNode, Map<string, CompiledQuery | undefined>>({ max: 500 });
  const compile = (args: ExecutionArgs): CompiledQuery | undefined => {
    const name = args.operationName ?? '';
    let operations = compiled.get(args.document);
    if (operations?.has(name)) return operations.get(name);
    if (!operations) compiled.set(args.document, (operations = new Map()));
    const result = compileQuery(args.schema, args.document, args.operationName ?? undefined);
    const query = isCompiledQuery(result) ? result : undefined;
    operations.set(name, query);
    return query;
  };
  return {
    onPluginInit({ addPlugin }) {
      addPlugin({
        onExecute({ args, setExecuteFn }) {
          if (usesIncrementalDelivery(args.document) || getOperationAST(args.document, args.operationName)?.operation === 'subscription')
            return;
          if (!seen.has(args.document)) return void seen.set(args.document, true);
          const query = compile(args);
          if (query) setExecuteFn(((a: ExecutionArgs) => query.query(a.rootValue, a.contextValue, a.variableValues)) as typeof execute);
        },
      });
      addPlugin(compiledErrorsLocated);
    },
  };
}

/**
 * One answer per document (P62): graphql-jit's errors carry `locations` as a plain property, with no
 * source positions or nodes, so every later rendering (ours, Yoga's serialiser), which rebuilds an error from
 * its source and positions as graphql-js does, dropped them. Placed back in the document's source here, a
 * compiled document's errors read exactly as the interpreted run's.
 */
const compiledErrorsLocated: Plugin = {
  onExecute({ args }) {
    return {
      onExecuteDone({ result, setResult }) {
        if (isAsyncIterable(result) || !result.errors?.some(unplaced)) return;
        const source = args.document.loc?.source;
        if (!source) return;
        setResult({ ...result, errors: result.errors.map((e) => (unplaced(e) ? placed(e, source) : e)) });
      },
    };
  },
};

/** An error with locations but neither source positions nor nodes (graphql-jit's). */
function unplaced(e: GraphQLError): boolean {
  return Array.isArray(e.locations) && e.locations.length > 0 && !e.positions?.length && !e.nodes?.length;
}

/** The same error as a graphql-js GraphQLError, its locations as positions in the document's source. */
function placed(e: GraphQLError, source: Source): GraphQLError {
  const lineStarts = [0];
  for (const m of source.body.matchAll(/\r\n|[\n\r]/g)) lineStarts.push(m.index + m[0].length);
  const positions = e.locations!.map(({ line, column }) => (lineStarts[line - 1] ?? 0) + column - 1);
  return new GraphQLError(e.message, {
    source,
    positions,
    path: e.path ?? null,
    originalError: e.originalError ?? null,
    ...(e.extensions ? { extensions: e.extensions } : {}),
  });
}

/** HTTP requests whose subscription was refused (406), answered as problem+json. */
const refusedSubscriptions = new WeakMap<Request, AppError>();

/**
 * A client that takes no stream (P138: its Accept names neither multipart/mixed nor text/event-stream, as
 * the middleware in front of Yoga left it) gets one answer. A query or mutation using @defer or @stream runs
 * without them: the deferred fields and streamed items are in the one result, as the incremental delivery
 * proposal lets a server choose (the directives are hints). A subscription, which has no single answer, is
 * refused before it opens: 406 problem+json naming what to send, as the middleware's other 406 (D5).
 * Requests without a `request` (none today) are left alone.
 */
export const oneAnswerForJsonClients: Plugin = {
  onExecute({ args, executeFn, setExecuteFn }) {
    if (!usesIncrementalDelivery(args.document) || takesStreams(args.contextValue)) return;
    const document = withoutIncrementalDelivery(args.document);
    setExecuteFn((a) => executeFn({ ...a, document }));
  },
  onSubscribe({ args, setResultAndStopExecution }) {
    if (takesStreams(args.contextValue)) return;
    const refusal = new AppError(
      406,
      'NOT_ACCEPTABLE',
      'A subscription answers a stream of events: send Accept: text/event-stream (SSE) or multipart/mixed ' +
        '(multipart subscriptions), or subscribe over a WebSocket on the same path (graphql-ws).',
    );
    refusedSubscriptions.set((args.contextValue as { request: Request }).request, refusal);
    setResultAndStopExecution({ errors: [refusal] });
  },
  onResultProcess({ request, serverContext, setResultProcessor }) {
    const refusal = refusedSubscriptions.get(request);
    if (!refusal) return;
    const traceId = String((serverContext as { req?: { id?: unknown } }).req?.id ?? '');
    setResultProcessor((_result, fetchAPI) => problemResponse(problemAnswer(refusal, traceId), fetchAPI), 'application/problem+json');
  },
};

/** Whether the request's Accept takes a stream of results (SSE or multipart/mixed). */
function takesStreams(context: unknown): boolean {
  const request = (context as { request?: { headers: { get(name: string): string | null } } }).request;
  return request === undefined || streamTransport(request.headers.get('accept') ?? '') !== undefined;
}

/**
 * A stream (a subscription, @defer/@stream parts) ends when its HTTP response does: the server adapter
 * neither cancels a body it stopped sending (a client gone, the write deadline) nor ends its events, so
 * the subscription would stay open (its feed, its place under SUBSCRIPTIONS_PER_CLIENT, the open gauge).
 * The request's signal aborts when the response closes; the results are returned then, on every HTTP
 * transport. Registered after every hook that wraps a result, so the whole chain is ended.
 */
export const streamsEndWithTheirClient: Plugin = {
  onExecutionResult({ request, result, setResult }) {
    if (!result || !isAsyncIterable(result)) return;
    const signal = request.signal;
    const iterator = result[Symbol.asyncIterator]();
    const end = () => void iterator.return?.().catch(() => undefined);
    if (signal.aborted) end();
    else signal.addEventListener('abort', end, { once: true });
    // The same iterator for every reader (graphql-ws returns the result itself).
    if ((iterator as unknown) !== result)
      setResult({
        next: () => iterator.next(),
        return: async () => (await iterator.return?.()) ?? { done: true, value: undefined },
        [Symbol.asyncIterator]() {
          return this;
        },
      } as AsyncIterableIterator<ExecutionResult>);
  },
};

const whole = new WeakMap<DocumentNode, DocumentNode>();

/** The document without its @defer and @stream directives (remembered per parsed document). */
function withoutIncrementalDelivery(document: DocumentNode): DocumentNode {
  let plain = whole.get(document);
  if (!plain) {
    plain = visit(document, {
      Directive: (node) => (node.name.value === 'defer' || node.name.value === 'stream' ? null : undefined),
    });
    whole.set(document, plain);
  }
  return plain;
}

const incremental = new WeakMap<DocumentNode, boolean>();

/** Whether a document uses @defer or @stream anywhere (remembered per parsed document). */
export function usesIncrementalDelivery(document: DocumentNode): boolean {
  let uses = incremental.get(document);
  if (uses === undefined) {
    uses = false;
    visit(document, {
      Directive(node) {
        if (node.name.value !== 'defer' && node.name.value !== 'stream') return undefined;
        uses = true;
        return BREAK;
      },
    });
    incremental.set(document, uses);
  }
  return uses;
}
