// GraphQL over HTTP with the page's token: one JSON answer, or a stream of them (SSE, read from a fetch
// stream: an EventSource cannot send the Authorization header). Yoga answers `Accept: text/event-stream`
// with `event: next` / `event: complete`.
import { state } from './state.js';

export interface GraphQLError {
  message: string;
  extensions?: { code?: string };
}

/** A result, or (with @defer) a later part of one: `incremental` data for paths of the first. */
export interface Result<T> {
  data?: T | null;
  errors?: GraphQLError[];
  incremental?: { path?: (string | number)[]; data?: Record<string, unknown>; errors?: GraphQLError[] }[];
}

/** What a refused request answers: GraphQL errors, or a problem+json document. */
interface Refusal {
  errors?: GraphQLError[];
  detail?: string;
  title?: string;
}

type Variables = Record<string, unknown>;

function headers(accept: string): Record<string, string> {
  return { 'Content-Type': 'application/json', Accept: accept, Authorization: `Bearer ${state.token?.accessToken ?? ''}` };
}

function refusal(res: Response, body: Refusal | null): Error {
  const first = body?.errors?.[0];
  return new Error(first?.message || body?.detail || body?.title || `HTTP ${res.status}`);
}

/** One operation, one JSON answer ({ data, errors }). */
export async function gql<T>(query: string, variables: Variables): Promise<Result<T>> {
  const res = await fetch('/graphql', {
    method: 'POST',
    headers: headers('application/graphql-response+json'),
    body: JSON.stringify({ query, variables }),
  });
  const body = (await res.json().catch(() => null)) as (Result<T> & Refusal) | null;
  if (!body || (body.data === undefined && body.errors) || !res.ok) throw refusal(res, body);
  return body;
}

/**
 * An operation whose answer is a stream (a subscription, a query with @defer): calls onResult with each
 * result as it arrives, onOpen once the stream is open; resolves when the server completes it.
 */
export async function gqlStream<T>(
  query: string,
  variables: Variables,
  { signal, onResult, onOpen }: { signal?: AbortSignal; onResult: (result: Result<T>) => void; onOpen?: () => void },
): Promise<void> {
  const res = await fetch('/graphql', {
    method: 'POST',
    signal,
    headers: headers('text/event-stream'),
    body: JSON.stringify({ query, variables }),
  });
  if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream') || !res.body) {
    const body = (await res.json().catch(() => null)) as (Result<T> & Refusal) | null;
    if (res.ok && body && (body.data !== undefined || body.errors)) return onResult(body);
    throw refusal(res, body);
  }
  onOpen?.();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    for (let m = /\r?\n\r?\n/.exec(buffer); m; m = /\r?\n\r?\n/.exec(buffer)) {
      const block = buffer.slice(0, m.index);
      buffer = buffer.slice(m.index + m[0].length);
      let name = 'message';
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') name = text;
        else if (field === 'data') data.push(text);
      }
      if (name === 'complete') {
        await reader.cancel().catch(() => {});
        return;
      }
      if (name === 'next' && data.length) onResult(JSON.parse(data.join('\n')) as Result<T>);
    }
  }
}

/** Merges a @defer part ({ incremental: [{ path, data }] }) into the result it belongs to. */
export function merge<T>(result: Result<T>, part: Result<T>): void {
  for (const inc of part.incremental ?? []) {
    let node: unknown = result.data;
    for (const k of inc.path ?? []) node = node == null ? node : (node as Record<string | number, unknown>)[k];
    if (node && inc.data) Object.assign(node, inc.data);
    if (inc.errors) result.errors = (result.errors ?? []).concat(inc.errors);
  }
}
