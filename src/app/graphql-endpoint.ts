import type { Request, RequestHandler } from 'express';
import type { GraphQLError } from 'graphql';
import { createYoga, maskError } from 'graphql-yoga';
import { useDeferStream } from '@graphql-yoga/plugin-defer-stream';
import type { Logger } from 'pino';
import type { Config } from '../core/config.js';
import { AppError, NotFoundError } from '../core/errors.js';
import { expectedErrorOf } from '../db/faults.js';
import { createContext } from '../graphql/context.js';
import { acceptForYoga, acceptedGraphqlTypes } from '../http/accept.js';
import { errorLogLevel, graphqlErrorBody, isRefusal, locatedAs } from '../http/errors.js';
import { graphiqlOptions } from '../http/graphiql.js';
import { type GraphqlWebSocket, graphqlWebSocket } from '../http/graphql-ws.js';
import { boundedParser, graphqlRequestLimits, queryLimits, variableLimits } from '../http/graphql-limits.js';
import {
  admissionControl,
  compiledRepeatedDocuments,
  everyErrorCoded,
  graphqlErrorsAnswer200,
  logArgs,
  oneAnswerForJsonClients,
  operationInContext,
  operationNameIsString,
  sharedSubscriptionResults,
  slicedResults,
  staleDataExtension,
  streamsEndWithTheirClient,
} from '../http/graphql-plugins.js';
import { operationSpans } from '../http/tracing.js';
import { tracingOn } from '../core/tracing.js';
import { multipartSubscriptions } from '../http/multipart-subscriptions.js';
import type { ResponseLike } from '../http/admission.js';
import { schema } from './schema.js';
import type { Services } from './services.js';

export const GRAPHQL_PATH = '/graphql';

/** What Yoga is handed with an operation: who asks, and what stands for its response (HTTP's, or a WebSocket operation's end). */
interface ServerContext {
  req: Pick<Request, 'principal' | 'id'>;
  res: ResponseLike;
}

/**
 * Over a WebSocket every operation may stream (graphql-ws sends each part as a message): the Accept of the
 * request Yoga is handed says so (oneAnswerForJsonClients); nothing else of it is read.
 */
const WEBSOCKET_REQUEST_HEADERS = { accept: 'multipart/mixed, application/graphql-response+json', 'content-type': 'application/json' };

/**
 * The /graphql endpoint: Yoga with its plugins, error masking and logging, behind the middleware that
 * answers what Yoga would answer badly: authentication refused as GraphQL errors, the request limits,
 * Accept and Content-Type. Mounted at GRAPHQL_PATH; `webSocket` takes the upgrades of GRAPHQL_PATH
 * (graphql-ws), whose operations run through the same Yoga.
 */
export function graphqlEndpoint(
  { config, logger, graphiql }: { config: Config; logger: Logger; graphiql: boolean },
  { metrics, admission, authenticate, verify, context }: Services,
): { handlers: RequestHandler[]; webSocket: GraphqlWebSocket } {
  const yoga = createYoga<ServerContext>({
    schema,
    graphqlEndpoint: GRAPHQL_PATH,
    ...graphiqlOptions({ enabled: graphiql, demoDefaults: config.NODE_ENV !== 'production' }),
    landingPage: false,
    maskedErrors: {
      // A driver error that stands for an expected one (an unavailable database, a statement time limit,
      // text PostgreSQL cannot store) is answered as that; anything else stays masked.
      maskError: (error, message, isDev) => {
        const e = error as GraphQLError;
        const expected = e.originalError instanceof AppError ? undefined : expectedErrorOf(e.originalError);
        return expected ? locatedAs(expected, e) : maskError(error, message, isDev);
      },
    },
    // Errors logged with their class, message and stack (the answer stays generic, D5).
    logging: {
      debug: (...a) => logger.debug(logArgs(a)),
      info: (...a) => logger.info(logArgs(a)),
      warn: (...a) => logger.warn(logArgs(a)),
      // Yoga logs every error it masks or replaces: one standing for a client's mistake (U+0000 in an
      // argument) or an unavailable database is logged at its own level.
      error: (...a) => {
        const args = logArgs(a);
        logger[errorLogLevel(args['err'])](args, 'graphql error');
      },
    },
    context: ({ req }) => createContext(context(req)),
    plugins: [
      // @defer and @stream (P56): incremental results over multipart/mixed or text/event-stream.
      useDeferStream(),
      oneAnswerForJsonClients,
      multipartSubscriptions(logger),
      // Traced (P141): a span per operation, around the others' work.
      ...(tracingOn() ? [operationSpans] : []),
      graphqlErrorsAnswer200,
      everyErrorCoded,
      operationNameIsString,
      boundedParser,
      variableLimits,
      ...(metrics ? [metrics.graphql()] : []),
      staleDataExtension,
      operationInContext,
      sharedSubscriptionResults(metrics?.sharedEvents()),
      compiledRepeatedDocuments(),
      admissionControl(admission),
      queryLimits(config.GRAPHQL_MAX_DEPTH, config.GRAPHQL_MAX_COST, config.GRAPHQL_MAX_BREADTH),
      // Last: it serialises the final result (P65).
      slicedResults,
      streamsEndWithTheirClient,
    ],
    // The limits depend on the variables (first: $n): queryLimits caches what it can itself.
    parserAndValidationCache: { validationCache: false },
  });
  const webSocket = graphqlWebSocket({
    path: GRAPHQL_PATH,
    verify: (authorization) => verify(authorization, ['ServiceApi']),
    run: async (params, req, res) => {
      const request = new yoga.fetchAPI.Request(`${config.publicUrl}${GRAPHQL_PATH}`, {
        method: 'POST',
        headers: WEBSOCKET_REQUEST_HEADERS,
      });
      const { query, operationName, variables, extensions } = params;
      const result = await yoga.getResultForParams(
        {
          params: {
            query,
            operationName: operationName ?? undefined,
            variables: variables ?? undefined,
            extensions: extensions ?? undefined,
          },
          request,
        },
        { req, res },
      );
      return result ?? { errors: [new AppError(500, 'INTERNAL_SERVER_ERROR', 'The operation gave no result.')] };
    },
    maxPayload: config.MAX_BODY_BYTES,
    maxBufferedBytes: config.WEBSOCKET_MAX_BUFFERED_BYTES,
    writeTimeoutMs: config.RESPONSE_WRITE_TIMEOUT_MS,
    maxOperations: config.WEBSOCKET_MAX_OPERATIONS,
    logger,
    onCut: () => metrics?.responseCut('stream'),
  });
  const graphqlAuth = authenticate(['ServiceApi']);
  const handlers: RequestHandler[] = [
    (req, res, next) => {
      // Only /graphql itself: a path below it is an unknown resource (404 problem+json), not Yoga's.
      if (req.path !== '/') {
        return next(new NotFoundError(`No resource at ${req.method} ${req.originalUrl.split('?')[0]}.`));
      }
      // The GraphiQL page itself needs no token (D4); every operation does.
      // Exactly Yoga's own test for rendering GraphiQL instead of executing (an Accept of text/* would
      // make Express prefer HTML while Yoga executes the query).
      if (graphiql && req.method === 'GET' && (req.headers.accept ?? '').includes('text/html')) return next();
      // A database that fails the token check, or admission refusing the request before it, is answered
      // as GraphQL clients read errors (P50, P52): SERVICE_UNAVAILABLE or TOO_MANY_REQUESTS with the
      // status and Retry-After; authentication's own refusals (401, 403) stay problem+json.
      graphqlAuth(req, res, (err?: unknown) => {
        const expected = err === undefined ? undefined : expectedErrorOf(err);
        if (!expected || !isRefusal(expected.code)) return next(err);
        const accept = req.headers.accept ?? 'application/graphql-response+json';
        const type =
          /application\/graphql-response\+json/i.test(accept) && acceptedGraphqlTypes(accept).includes('application/graphql-response+json')
            ? 'application/graphql-response+json'
            : 'application/json';
        res.status(expected.status).set(expected.headers).type(type).json(graphqlErrorBody(expected));
      });
    },
    graphqlRequestLimits(config.MAX_BODY_BYTES),
    (req, res, next) => {
      // What Yoga would refuse with an empty body gets a problem+json one: an Accept GraphQL cannot answer
      // (the GraphiQL page aside), a POST body that is not JSON.
      const accept = req.headers.accept;
      const page = graphiql && req.method === 'GET' && (accept ?? '').includes('text/html');
      const accepted = accept && !page ? acceptedGraphqlTypes(accept) : undefined;
      if (accepted?.length === 0) {
        return next(
          new AppError(
            406,
            'NOT_ACCEPTABLE',
            'GraphQL answers application/json or application/graphql-response+json (text/event-stream or multipart/mixed for subscriptions and @defer/@stream).',
          ),
        );
      }
      if (req.method === 'POST' && !req.is('application/json')) {
        return next(new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', 'A GraphQL request body must be application/json.'));
      }
      // GraphQL over HTTP (P62): a request without an Accept header is treated as accepting
      // application/graphql-response+json (the spec's default since 2025-01-01), so a request error answers 4xx.
      if (!accept) req.headers.accept = 'application/graphql-response+json';
      else if (accepted) req.headers.accept = acceptForYoga(accept, accepted);
      // Media types are case-insensitive (RFC 9110 §8.3.1) but Yoga compares them as written, and would
      // refuse `APPLICATION/JSON` with an empty 415.
      const type = req.headers['content-type'];
      if (type) req.headers['content-type'] = type.toLowerCase();
      next();
    },
    (req, res) => {
      void yoga.handle(req, res, { req, res });
    },
  ];
  return { handlers, webSocket };
}
