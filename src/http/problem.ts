import type { ServerResponse } from 'node:http';
import { type ProblemAnswer, problemAnswer } from './errors.js';

/**
 * Writes an error as problem+json (D5), rendered by errors.ts's `problemAnswer`: the one way the
 * service answers a problem, from Express handlers and from the bare handler used while starting.
 */
export function sendProblem(res: ServerResponse, err: unknown, traceId: string): void {
  writeProblem(res, problemAnswer(err, traceId));
}

const PROBLEM_TYPE = 'application/problem+json; charset=utf-8';

/** Writes a rendered problem answer. */
export function writeProblem(res: ServerResponse, answer: ProblemAnswer): void {
  const text = JSON.stringify(answer.body);
  for (const [k, v] of Object.entries(answer.headers)) res.setHeader(k, v);
  res.statusCode = answer.status;
  res.setHeader('Content-Type', PROBLEM_TYPE);
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}

/** A rendered problem answer as a fetch Response (what Yoga's result processors return). */
export function problemResponse(answer: ProblemAnswer, fetchAPI: { Response: typeof Response }): Response {
  return new fetchAPI.Response(JSON.stringify(answer.body), {
    status: answer.status,
    headers: { ...answer.headers, 'Content-Type': PROBLEM_TYPE },
  });
}
