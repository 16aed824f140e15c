import { createComplexityRule } from '@pothos/plugin-complexity';
import express, { type NextFunction, type Request, type Response } from 'express';
import {
  type DocumentNode,
  GraphQLError,
  Kind,
  Lexer,
  type SelectionNode,
  Source,
  TokenKind,
  type ValidationRule,
  parse,
  specifiedRules,
  validate,
} from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { AppError } from '../core/errors.js';
import { graphqlErrorBody } from './errors.js';
import { boundsProblem, textProblem } from '../core/input.js';
import { incrementalDeliveryRule, incrementalDeliveryVariablesRule } from '../graphql/directives.js';

/** Tokens a document may have, and how deeply its braces, parentheses and brackets may nest. */
export const MAX_DOCUMENT_TOKENS = 20_000;
export const MAX_DOCUMENT_NESTING = 150;

const OPEN = new Set<string>([TokenKind.BRACE_L, TokenKind.PAREN_L, TokenKind.BRACKET_L]);
const CLOSE = new Set<string>([TokenKind.BRACE_R, TokenKind.PAREN_R, TokenKind.BRACKET_R]);

/**
 * Parses with bounds checked first by the lexer, which is iterative: graphql-js's parser recurses per
 * nesting level, so a document nested a few thousand levels would exhaust the stack before any depth
 * rule ran (P47). Too long or too deep is a GraphQL error with a code, never a crash.
 */
export function boundedParse(source: string | Source) {
  const src = typeof source === 'string' ? new Source(source) : source;
  const text = textProblem(src.body);
  if (text) throw limitError(`The document: ${text}`);
  const lexer = new Lexer(src);
  let tokens = 0;
  let depth = 0;
  for (let t = lexer.advance(); t.kind !== TokenKind.EOF; t = lexer.advance()) {
    if (++tokens > MAX_DOCUMENT_TOKENS) throw limitError(`The document has more than ${MAX_DOCUMENT_TOKENS} tokens.`);
    if (OPEN.has(t.kind) && ++depth > MAX_DOCUMENT_NESTING)
      throw limitError(`The document nests deeper than ${MAX_DOCUMENT_NESTING} levels.`);
    if (CLOSE.has(t.kind)) depth--;
  }
  return parse(src, { maxTokens: MAX_DOCUMENT_TOKENS });
}

function limitError(message: string): GraphQLError {
  return new GraphQLError(message, { extensions: { code: 'BAD_REQUEST', http: { status: 400 } } });
}

/** Yoga plugin: every document is parsed through `boundedParse`. */
export const boundedParser: Plugin = {
  onParse({ setParseFn }) {
    setParseFn((source) => boundedParse(source));
  },
};

/**
 * Variables nested too deeply, or holding a lone surrogate (which the database driver would silently
 * replace): refused before execution, naming the variable's path (P47). U+0000 stays a field error
 * (P3), raised where the argument is used.
 */
function variablesProblem(variables: unknown): string | undefined {
  const bounds = boundsProblem(variables);
  if (bounds) return `Variable $${bounds.at ? `.${bounds.at}` : ''}: ${bounds.message}`;
  const stack: [unknown, string][] = [[variables, '$']];
  while (stack.length > 0) {
    const [v, at] = stack.pop()!;
    if (typeof v === 'string') {
      const p = loneSurrogate(v);
      if (p) return `Variable ${at}: ${p}`;
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, child] of Object.entries(v)) {
        const p = loneSurrogate(k);
        if (p) return `Variable ${at}: a property name: ${p}`;
        stack.push([child, Array.isArray(v) ? `${at}[${k}]` : `${at}.${k}`]);
      }
    }
  }
  return undefined;
}

function loneSurrogate(s: string): string | undefined {
  return textProblem(s.replaceAll('\u0000', ''));
}

/**
 * Yoga plugin (P47): variables over the limits are refused (400 BAD_REQUEST) before anything runs, on
 * every transport (HTTP, graphql-ws), as Yoga hands each its parameters.
 */
export const variableLimits: Plugin = {
  onParams({ params, setResult }) {
    const problem = variablesProblem(params.variables);
    if (problem) setResult({ errors: [new AppError(400, 'BAD_REQUEST', problem)] });
  },
};

/** A GraphQL-shaped 400 for a request Yoga would otherwise fail on unexpectedly. */
function badRequest(res: Response, message: string) {
  res.status(400).json(graphqlErrorBody(new AppError(400, 'BAD_REQUEST', message)));
}

/**
 * Request-level checks before Yoga (P47): a JSON body is read with the service's MAX_BODY_BYTES (413
 * like REST; Yoga's own limit is 25 MB), and GET's `variables`/`extensions` must be JSON objects (the
 * variables' own limits are variableLimits').
 */
export function graphqlRequestLimits(maxBodyBytes: number) {
  const json = express.json({ limit: maxBodyBytes, type: 'application/json' });
  return (req: Request, res: Response, next: NextFunction) => {
    if (Number(req.headers['content-length'] ?? 0) > maxBodyBytes) {
      const e = Object.assign(new Error('too large'), { type: 'entity.too.large' });
      return next(e);
    }
    if (req.method === 'GET') {
      const url = new URL(req.originalUrl, 'http://x');
      for (const name of ['variables', 'extensions']) {
        const raw = url.searchParams.get(name);
        if (raw === null || raw === '') continue;
        let parsed: unknown;
        try {
          parsed = JSON.parse(raw);
        } catch {
          return badRequest(res, `The ${name} parameter is not valid JSON.`);
        }
        if (parsed !== null && (typeof parsed !== 'object' || Array.isArray(parsed)))
          return badRequest(res, `The ${name} parameter must be a JSON object.`);
      }
      return next();
    }
    // Parsed here with the service's limit; Yoga takes a body already parsed.
    json(req, res, (err?: unknown) => {
      if (err) return next(err);
      const body = (req as { body?: unknown }).body;
      // An empty body or `{}` would reach Yoga as "no body" and be answered "invalid JSON" (a body of
      // another type is left for the 415 after this).
      if (req.is('application/json') && (typeof body !== 'object' || body === null || Object.keys(body).length === 0)) {
        return badRequest(res, 'The request body must be a JSON object with a query.');
      }
      next();
    });
  };
}

/**
 * D11: depth, cost and breadth (total selections, e.g. aliased fan-out) limits, checked during validation (before execution) with the request's variables,
 * so `first: $n` costs what `first: 1000` does. The cost model is the builder's `fieldComplexity`.
 *
 * Validation is split (P48): the rules that read only the document (graphql-js's, the introspection
 * fan-out, the literals of @defer/@stream) run once per parsed document, remembered by the DocumentNode
 * that Yoga's parse cache hands out for the same text; only the rules that read the variables (the cost,
 * @defer/@stream arguments given as variables) run per request.
 */
export function queryLimits(maxDepth: number, maxCost: number, maxBreadth: number): Plugin {
  const byDocument = new WeakMap<DocumentNode, readonly GraphQLError[]>();
  // Refusals are not kept: their errors are the request's own, and Yoga may add to them.
  const limitsOf = perVariables<{ cost: number; errors: readonly GraphQLError[] }>((v) => v.errors.length === 0);
  return {
    onValidate({ context, setValidationFn }) {
      const params = (context as { params?: { variables?: Record<string, unknown>; operationName?: string } }).params;
      setValidationFn((schema, document, rules, typeInfo, options) => {
        let fixed = byDocument.get(document);
        if (!fixed) {
          fixed = validate(
            schema,
            document,
            [...(rules ?? specifiedRules), introspectionFanOut, incrementalDeliveryRule],
            options,
            typeInfo,
          );
          byDocument.set(document, fixed);
        }
        if (fixed.length > 0) return fixed;
        const variableValues = params?.variables ?? {};
        const operationName = params?.operationName ?? null;
        const { cost, errors } = limitsOf(document, operationName, variableValues, () => {
          let cost = 0;
          const limits = createComplexityRule({
            context,
            variableValues,
            operationName,
            validate: (result, report) => {
              cost = result.complexity;
              if (result.depth > maxDepth) report(new GraphQLError(`The query depth ${result.depth} exceeds the limit of ${maxDepth}.`));
              if (result.complexity > maxCost)
                report(new GraphQLError(`The query cost ${result.complexity} exceeds the limit of ${maxCost}.`));
              if (result.breadth > maxBreadth)
                report(new GraphQLError(`The query selects ${result.breadth} fields, more than the limit of ${maxBreadth} (breadth).`));
            },
          });
          const errors = validate(schema, document, [limits, incrementalDeliveryVariablesRule(variableValues, operationName)], options);
          return { cost, errors };
        });
        // The operation's cost also weighs it at admission (P52).
        (context as { cost?: number }).cost = cost;
        return errors;
      });
    },
  };
}

/** Variables longer than this as JSON are measured every time rather than remembered. */
const MAX_REMEMBERED_VARIABLES = 1_024;
/** Variable sets remembered per document. */
const MAX_VARIABLE_SETS = 64;

/**
 * A result computed from a document, its operation name and its variables only (the D11 cost of an
 * operation: a full traversal of the document, P48), remembered per document for the variable sets
 * clients repeat, when `keep` says so. Documents are Yoga's cached parses (the same object for the same
 * text), so the map ends with them.
 */
export function perVariables<T>(
  keep: (value: T) => boolean = () => true,
): (document: DocumentNode, operationName: string | null | undefined, variables: Record<string, unknown>, compute: () => T) => T {
  const byDocument = new WeakMap<DocumentNode, Map<string, T>>();
  return (document, operationName, variables, compute) => {
    const key = JSON.stringify([operationName ?? null, variables]);
    if (key.length > MAX_REMEMBERED_VARIABLES) return compute();
    let known = byDocument.get(document);
    if (!known) byDocument.set(document, (known = new Map()));
    let value = known.get(key);
    if (value === undefined) {
      value = compute();
      if (!keep(value)) return value;
      if (known.size >= MAX_VARIABLE_SETS) known.clear();
      known.set(key, value);
    }
    return value;
  };
}

/** Introspection costs 1 to the complexity rule: at most two root `__schema`/`__type` fields. */
const MAX_INTROSPECTION_FIELDS = 2;
const introspectionFanOut: ValidationRule = (context) => ({
  OperationDefinition(operation) {
    let count = 0;
    const seen = new Set<string>();
    const visit = (selections: readonly SelectionNode[]) => {
      for (const s of selections) {
        if (s.kind === Kind.FIELD) count += s.name.value === '__schema' || s.name.value === '__type' ? 1 : 0;
        else if (s.kind === Kind.INLINE_FRAGMENT) visit(s.selectionSet.selections);
        else if (!seen.has(s.name.value)) {
          seen.add(s.name.value);
          const fragment = context.getFragment(s.name.value);
          if (fragment) visit(fragment.selectionSet.selections);
        }
      }
    };
    visit(operation.selectionSet.selections);
    if (count > MAX_INTROSPECTION_FIELDS) {
      context.reportError(
        new GraphQLError(`The query has ${count} introspection fields, more than the limit of ${MAX_INTROSPECTION_FIELDS} (breadth).`),
      );
    }
  },
});
