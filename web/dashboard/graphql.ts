// GraphQL over HTTP with the page's token: one JSON answer, or a stream of them (SSE, read from a fetch
// stream: an EventSource cannot send the Authorization header). Yoga answers `Accept: text/event-stream`
// with `event: next` / `event: complete`.
import { state } from './state.js';

export interface GraphQLError {
  message: string;
  /** A validation error's problems by field (D4). */
  extensions?: { code?: string; errors?: Record<string, string[]> };
}

/** What a GraphQL error says, in words: a validation error's problems themselves, else its message. */
export function words(error: GraphQLError): string {
  const problems = Object.values(error.extensions?.errors ?? {}).flat();
  return problems.length ? problems.join(' ') : error.message;
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
  return new Error((first && words(first)) || body?.detail || body?.title || `HTTP ${res.status}`);
}

/** Most times a request the service refused for now (429, busy: Retry-After) is sent again. */
const RETRIES = 5;

/** POSTs the operation; a 429 is retried after its Retry-After (the service is busy, e.g. filling its cache). */
async function post(query: string, variables: Variables, accept: string, signal?: AbortSignal): Promise<Response> {
  for (let attempt = 0; ; attempt++) {
    const res = await fetch('/graphql', { method: 'POST', signal, headers: headers(accept), body: JSON.stringify({ query, variables }) });
    if (res.status !== 429 || attempt === RETRIES) return res;
    const wait = Number(res.headers.get('retry-after')) || 1;
    await res.body?.cancel();
    await new Promise((r) => setTimeout(r, wait * 1000));
  }
}

/** One operation, one JSON answer ({ data, errors }). */
export async function gql<T>(query: string, variables: Variables): Promise<Result<T>> {
  const res = await post(query, variables, 'application/graphql-response+json');
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
  const res = await post(query, variables, 'text/event-stream', signal);
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
