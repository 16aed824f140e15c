import Negotiator from 'negotiator';

/** What /graphql answers: JSON, and for subscriptions and @defer/@stream parts, SSE or multipart/mixed. */
export const GRAPHQL_MEDIA_TYPES = ['application/graphql-response+json', 'application/json', 'text/event-stream', 'multipart/mixed'];

/** A media range of an Accept header, with any quotes in its parameters (a comma inside them is not a separator). */
const MEDIA_RANGE = /(?:[^,"]|"(?:[^"\\]|\\.)*")+/g;
const QUALITY = /^\s*q\s*=\s*([0-9.]+)\s*$/i;

/**
 * The media types of GRAPHQL_MEDIA_TYPES an Accept header accepts, most preferred first (negotiator: the
 * most specific range decides, and q=0 means "not acceptable", RFC 9110 §12.5.1). Parameters other than
 * q are not compared, as Yoga compares none (`multipart/mixed;deferSpec=20220824` is multipart/mixed).
 */
export function acceptedGraphqlTypes(accept: string): string[] {
  const ranges = (accept.match(MEDIA_RANGE) ?? []).map((range) => {
    const [type = '', ...params] = range.split(';');
    const q = params.map((p) => QUALITY.exec(p)?.[1]).find((v) => v !== undefined);
    return q === undefined ? type.trim() : `${type.trim()};q=${q}`;
  });
  return new Negotiator({ headers: { accept: ranges.join(',') } }).mediaTypes(GRAPHQL_MEDIA_TYPES);
}

/**
 * The stream an HTTP client is answered with for a subscription or @defer/@stream (P137, P138): the one of
 * SSE and multipart/mixed its Accept prefers, undefined if it accepts neither (one JSON answer). What
 * serves the request, refuses it and counts it all read it here.
 */
export function streamTransport(accept: string): 'sse' | 'multipart' | undefined {
  const stream = acceptedGraphqlTypes(accept).find((t) => t === 'text/event-stream' || t === 'multipart/mixed');
  return stream === undefined ? undefined : stream === 'multipart/mixed' ? 'multipart' : 'sse';
}

/**
 * The Accept header Yoga should read. Yoga ignores q, so it would answer with a type the client refused
 * (`text/event-stream;q=0`); a header that refuses something is replaced by the types it accepts.
 */
export function acceptForYoga(accept: string, accepted: readonly string[]): string {
  const refuses = (accept.match(MEDIA_RANGE) ?? []).some((range) =>
    range
      .split(';')
      .slice(1)
      .some((p) => Number(QUALITY.exec(p)?.[1] ?? 1) === 0),
  );
  return refuses ? accepted.join(', ') : accept;
}
