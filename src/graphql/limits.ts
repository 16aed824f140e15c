import express, { type NextFunction, type Request, type Response } from 'express';
import { GraphQLError, Lexer, Source, TokenKind, parse } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { boundsProblem, textProblem } from '../core/input.js';

/** Tokens a document may have, and how deeply its braces, parentheses and brackets may nest. */
export const MAX_DOCUMENT_TOKENS = 20_000;
export const MAX_DOCUMENT_NESTING = 150;

const OPEN = new Set<string>([TokenKind.BRACE_L, TokenKind.PAREN_L, TokenKind.BRACKET_L]);
const CLOSE = new Set<string>([TokenKind.BRACE_R, TokenKind.PAREN_R, TokenKind.BRACKET_R]);

/**
 * Parses with bounds checked first by the lexer, which is iterative: graphql-js's parser recurses per
 * nesting level, so a document nested a few thousand levels would exhaust the stack before any depth
 * rule ran (issue 9). Too long or too deep is a GraphQL error with a code, never a crash.
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
    if (OPEN.has(t.kind) && ++depth > MAX_DOCUMENT_NESTING) throw limitError(`The document nests deeper than ${MAX_DOCUMENT_NESTING} levels.`);
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
 * replace): refused before execution, naming the variable's path (issue 9). U+0000 stays a field error
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

/** A GraphQL-shaped 400 for a request Yoga would otherwise fail on unexpectedly. */
function badRequest(res: Response, message: string) {
  res.status(400).json({ errors: [{ message, extensions: { code: 'BAD_REQUEST' } }] });
}

/**
 * Request-level checks before Yoga (issue 9): a JSON body is read with the service's MAX_BODY_BYTES (413
 * like REST; Yoga's own limit is 25 MB), and GET's `variables`/`extensions` must be JSON objects.
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
        if (parsed !== null && (typeof parsed !== 'object' || Array.isArray(parsed))) return badRequest(res, `The ${name} parameter must be a JSON object.`);
        const problem = variablesProblem(parsed);
        if (problem) return badRequest(res, problem);
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
      const variables = typeof body === 'object' && body !== null ? (body as { variables?: unknown }).variables : undefined;
      const problem = variablesProblem(variables);
      if (problem) return badRequest(res, problem);
      next();
    });
  };
}
