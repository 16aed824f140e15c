import type { Response } from 'express';
import { GraphQLError } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { type JITCache, useGraphQlJit } from '@envelop/graphql-jit';
import { LRUCache } from 'lru-cache';
import type { DocumentNode } from 'graphql';
import { type AppError, graphqlRendering, isRefusal } from '../core/errors.js';
import { type Context, dataVersionFor } from '../graphql/context.js';
import type { Admission } from './admission.js';

// The Yoga plugins of /graphql: how errors answer (D4, issue 15), what a result carries (D10 stale data),
// admission, and compilation of repeated documents. The D11 limits are in graphql-limits.ts.

/**
 * Expected errors carry `extensions.http.status` for the REST mapping, but Yoga would answer a whole
 * GraphQL response with the highest such status. Over GraphQL an expected error belongs to its field and
 * the response is 200 with the other fields' data (D4); the status stays visible as `extensions.status`.
 * Except when the service could not run the operation at all (issue 15): no field has data and every
 * error says the database is unavailable (503) or the client is over its share (429); then the response
 * carries that status and its Retry-After, as the REST answer would.
 */
export const graphqlErrorsAnswer200: Plugin = {
  onExecutionResult({ result, setResult }) {
    if (!result || !('errors' in result) || !result.errors?.length) return;
    const whole = wholeOperationRefusal(result);
    setResult({
      ...result,
      ...(whole ? { extensions: { ...result.extensions, http: whole } } : {}),
      errors: result.errors.map(graphqlRendering),
    });
  },
};

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
 * Every GraphQL error leaves with a code (issue 9): graphql-js's own syntax and validation errors and
 * a relay id that does not decode carry none of their own.
 */
export const everyErrorCoded: Plugin = {
  onResultProcess({ result, setResult }) {
    if (Array.isArray(result) || !result || typeof result !== 'object' || !('errors' in result) || !result.errors?.length) return;
    const errors = result.errors as GraphQLError[];
    if (errors.every((e) => e.extensions?.['code'])) return;
    setResult({
      ...result,
      errors: errors.map((e) => {
        if (e.extensions?.['code']) return e;
        const code = e.message.startsWith('Syntax Error') ? 'GRAPHQL_PARSE_FAILED' : e.path ? 'BAD_REQUEST' : 'GRAPHQL_VALIDATION_FAILED';
        return new GraphQLError(e.message, {
          nodes: e.nodes ?? null,
          source: e.source ?? null,
          positions: e.positions ?? null,
          path: e.path ?? null,
          extensions: { ...e.extensions, code },
        });
      }),
    });
  },
};

export const ACCEPTABLE = /application\/(?:graphql-response\+)?json|application\/\*|\*\/\*|text\/event-stream/i;

/** Yoga's log arguments for pino: an Error (its original cause if wrapped) as `err`, the rest as `details`. */
export function logArgs(args: unknown[]): Record<string, unknown> {
  const error = args.find((a): a is Error => a instanceof Error);
  const cause = error && (error as GraphQLError).originalError ? (error as GraphQLError).originalError : error;
  const details = args.filter((a) => a !== error);
  return { ...(cause ? { err: cause } : {}), ...(details.length ? { details } : {}) };
}

/** D10: stale data served in this response, as `extensions.staleData`. */
export const staleDataExtension: Plugin = {
  onExecute({ args }) {
    return {
      onExecuteDone({ result, setResult }) {
        const stale = (args.contextValue as Partial<Context>).staleData;
        if (!stale?.size || !('data' in result || 'errors' in result)) return;
        setResult({ ...result, extensions: { ...result.extensions, staleData: [...stale.values()] } });
      },
    };
  },
};

/** A query looks cached TotalCounts up under the data version read with its principal (Context.dataVersion). */
export const queryDataVersion: Plugin = {
  onExecute({ args }) {
    const ctx = args.contextValue as unknown as Context;
    ctx.dataVersion = dataVersionFor(ctx.principal, args.document, args.operationName);
  },
};

/**
 * An operation runs once admitted (issue 15): weighed by its cost from the D11 rule (queryLimits), in
 * the tenant's and client's share of the instance. Refused, the whole operation answers 429 or 503 with
 * Retry-After (graphqlErrorsAnswer200). Subscriptions do not pass here: they hold no database work.
 */
export function admissionControl(admission: Admission): Plugin {
  return {
    onExecute({ args, setResultAndStopExecution }) {
      const ctx = args.contextValue as unknown as Context & { cost?: number; res?: Response };
      if (!ctx.res || !ctx.principal) return;
      return admission
        .admit({ tenant: ctx.principal.tenantKey, client: ctx.principal.clientId }, ctx.cost ?? 1, ctx.res)
        .catch((e: AppError) => {
          setResultAndStopExecution({ errors: [e] });
        });
    },
  };
}

/**
 * graphql-jit for the documents a client repeats (a dashboard sends the same few): a document is compiled
 * on its second execution, so a stream of one-off documents costs no compilation; both the counts and the
 * compiled functions are bounded LRUs. Yoga's parser cache hands out one DocumentNode per query text.
 */
export function compiledRepeatedDocuments(): Plugin {
  const seen = new LRUCache<DocumentNode, true>({ max: 1000 });
  const compiled = new LRUCache<string, Parameters<JITCache['set']>[1]>({ max: 500 });
  return useGraphQlJit(
    {},
    {
      enableIf: ({ document }) => {
        if (seen.has(document)) return true;
        seen.set(document, true);
        return false;
      },
      cache: compiled,
    },
  ) as Plugin;
}
