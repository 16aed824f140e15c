import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { type Server, createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';

// A runnable data provider for the contract's "get data points" endpoint: deterministic synthetic daily
// series per subject, OAuth2 client credentials, Relay-style paging, and a small admin API for demos.

export type DataType = 'String' | 'Decimal' | 'Integer' | 'DateTime' | 'Date' | 'Time' | 'Boolean';
export type ItemValue = string | number | boolean | null;

export interface DataPointItem {
  Key: string;
  Value: { DataType: DataType; Value: ItemValue };
}

export interface DataPoint {
  Id: string;
  SubjectIdentifier: string;
  DataPointItems: DataPointItem[];
}

export interface GetDataPointsResponse {
  PageInfo: { HasNextPage: boolean; HasPreviousPage: boolean; StartCursor: string | null; EndCursor: string | null; TotalCount: number };
  Edges: { Node: DataPoint; Cursor: string }[];
}

export const METRICS = ['steps', 'heartRate', 'sleep'] as const;
export type Metric = (typeof METRICS)[number];

/** The item keys each metric produces, in the order they appear in `DataPointItems`. */
export const ITEM_KEYS: Record<Metric, readonly string[]> = {
  steps: ['date', 'recordedAt', 'measuredAt', 'value', 'distanceKm', 'goalMet', 'unit', 'note'],
  heartRate: ['date', 'recordedAt', 'measuredAt', 'value', 'peak', 'goalMet', 'unit', 'note'],
  sleep: ['date', 'recordedAt', 'wakeTime', 'value', 'awakenings', 'goalMet', 'unit', 'note'],
};

export interface ReferenceProviderOptions {
  clientId?: string;
  clientSecret?: string;
  tokenTtlSeconds?: number;
  /** Most edges one answer holds; callers follow EndCursor for the rest. */
  pageSize?: number;
  /** Delay added to every get-data-points call. */
  latencyMs?: number;
  /** `yyyy-MM-dd`, the last day of every series. Default: today in UTC, at each call. */
  anchorDate?: string;
  /** Subject identifiers that get no points. */
  missingSubjects?: string[];
  logger?: (line: string) => void;
}

export interface ProviderStats {
  getDataPointsCalls: number;
  tokenRequests: number;
}

export interface RunningProvider {
  url: string;
  close(): Promise<void>;
}

export interface ReferenceProvider {
  /** The express application, to mount elsewhere if needed. */
  app: Express;
  listen(port?: number, host?: string): Promise<RunningProvider>;
  /** Changes every value of the subject's series (deterministically); returns the new revision. */
  bumpRevision(subjectIdentifier: string): number;
  /** Hides these point ids of the subject from now on; returns them (each once). */
  removePoints(subjectIdentifier: string, ids: string[]): string[];
  /** Whether the subject gets no points at all (as if the provider did not know it). */
  setMissing(subjectIdentifier: string, missing?: boolean): void;
  stats(): ProviderStats;
}

const DATE = /^\d{4}-\d{2}-\d{2}$/;

/** Whether some series of this provider could hold `id` for `subject`: `<subject>:<metric>:<a date up to today>`. */
function servable(subject: string, id: string, today: string): boolean {
  if (!id.startsWith(`${subject}:`)) return false;
  const [metric, date, ...rest] = id.slice(subject.length + 1).split(':');
  return (
    rest.length === 0 &&
    (METRICS as readonly string[]).includes(metric!) &&
    DATE.test(date ?? '') &&
    addDays(date!, 0) === date &&
    date! <= today
  );
}
const MAX_PAGE = 1000;
/** Bounds one request's work: subjects × days points are generated and sorted in memory. */
const MAX_SUBJECTS = 1000;

const pagingSchema = z
  .object({
    After: z.string().nullable(),
    Before: z.string().nullable(),
    First: z.int().min(0).max(MAX_PAGE).nullable(),
    Last: z.int().min(0).max(MAX_PAGE).nullable(),
    OrderBy: z.string().nullable(),
    OrderDirection: z.enum(['Ascending', 'Descending']).nullable(),
  })
  .refine((p) => p.First === null || p.Last === null, { message: 'First and Last cannot be used together.', path: ['Last'] });

const optionsSchema = z.looseObject({
  metric: z.enum(METRICS).default('steps'),
  period: z.looseObject({ days: z.int().min(1).max(366).default(7) }).prefault({}),
});

const requestSchema = z.object({
  SubjectIdentifiers: z.array(z.string()).max(MAX_SUBJECTS),
  PagingRequest: pagingSchema,
  DataExtract: z.object({ Key: z.string(), Options: optionsSchema }),
});

type Direction = 'Ascending' | 'Descending';

interface Position {
  v: ItemValue;
  id: string;
}

/** `{ "PagingRequest.After": [...], "SubjectIdentifiers[2]": [...] }` from zod issues. */
function fieldErrors(issues: readonly z.core.$ZodIssue[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const issue of issues) {
    const path = issue.path.reduce<string>((p, s) => (typeof s === 'number' ? `${p}[${s}]` : p ? `${p}.${String(s)}` : String(s)), '');
    (out[path || '$'] ??= []).push(issue.message);
  }
  return out;
}

function badRequest(res: Response, errors: Record<string, string[]>) {
  res.status(400).json({ title: 'One or more validation errors occurred.', status: 400, errors });
}

function addDays(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * 86_400_000).toISOString().slice(0, 10);
}

const pad = (n: number) => String(n).padStart(2, '0');
const NOTES = ['manual entry', 'device synced late', 'travel day', 'estimated'];

/**
 * One day of one metric for one subject, with an item of every data type (see ITEM_KEYS); every value
 * derives from sha256(subject, metric, date, revision).
 */
export function generatePoint(subjectIdentifier: string, metric: Metric, date: string, revision = 0): DataPoint {
  const h = createHash('sha256')
    .update(JSON.stringify([subjectIdentifier, metric, date, revision]))
    .digest();
  const u = (i: number, n: number) => h.readUInt32BE(i * 4) % n;
  const clock = (fromMinute: number, spanMinutes: number, i: number) => {
    const m = fromMinute + u(i, spanMinutes);
    return `${pad(Math.floor(m / 60))}:${pad(m % 60)}:${pad(u(i + 1, 60))}`;
  };
  let value: DataPointItem;
  let extra: DataPointItem;
  let goalMet: boolean;
  let unit: string;
  let time: DataPointItem;
  if (metric === 'steps') {
    const steps = 2000 + u(0, 14000);
    value = { Key: 'value', Value: { DataType: 'Integer', Value: steps } };
    extra = { Key: 'distanceKm', Value: { DataType: 'Decimal', Value: Math.round(steps * 0.075) / 100 } };
    [goalMet, unit] = [steps >= 8000, 'steps'];
    time = { Key: 'measuredAt', Value: { DataType: 'Time', Value: clock(6 * 60, 4 * 60, 1) } };
  } else if (metric === 'heartRate') {
    const bpm = (520 + u(0, 240)) / 10;
    value = { Key: 'value', Value: { DataType: 'Decimal', Value: bpm } };
    extra = { Key: 'peak', Value: { DataType: 'Integer', Value: 110 + u(7, 70) } };
    [goalMet, unit] = [bpm < 65, 'bpm'];
    time = { Key: 'measuredAt', Value: { DataType: 'Time', Value: clock(3 * 60, 3 * 60, 1) } };
  } else {
    const hours = (500 + u(0, 450)) / 100;
    value = { Key: 'value', Value: { DataType: 'Decimal', Value: hours } };
    extra = { Key: 'awakenings', Value: { DataType: 'Integer', Value: u(7, 7) } };
    [goalMet, unit] = [hours >= 7, 'h'];
    time = { Key: 'wakeTime', Value: { DataType: 'Time', Value: clock(5 * 60 + 30, 3 * 60 + 30, 1) } };
  }
  const recordedAt = new Date(`${date}T${clock(20 * 60, 4 * 60, 3)}.000Z`).toISOString();
  return {
    Id: `${subjectIdentifier}:${metric}:${date}`,
    SubjectIdentifier: subjectIdentifier,
    DataPointItems: [
      { Key: 'date', Value: { DataType: 'Date', Value: date } },
      { Key: 'recordedAt', Value: { DataType: 'DateTime', Value: recordedAt } },
      time,
      value,
      extra,
      { Key: 'goalMet', Value: { DataType: 'Boolean', Value: goalMet } },
      { Key: 'unit', Value: { DataType: 'String', Value: unit } },
      { Key: 'note', Value: { DataType: 'String', Value: u(5, 5) === 0 ? NOTES[u(6, NOTES.length)]! : null } },
    ],
  };
}

function compareScalars(a: ItemValue, b: ItemValue): number {
  if (a === null || b === null) return a === b ? 0 : a === null ? 1 : -1; // missing last when ascending
  if (typeof a !== typeof b) return typeof a < typeof b ? -1 : 1; // only a forged cursor mixes types
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Ascending: by value (null last), then by Id in ordinal order. Descending is its exact reverse. */
function comparator(direction: Direction): (a: Position, b: Position) => number {
  const asc = (a: Position, b: Position) => compareScalars(a.v, b.v) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  return direction === 'Descending' ? (a, b) => asc(b, a) : asc;
}

// A cursor is base64url(JSON ['ref1', orderBy, direction, value, id]): decodable only for the ordering that issued it.
function encodeCursor(orderBy: string, direction: Direction, p: Position): string {
  return Buffer.from(JSON.stringify(['ref1', orderBy, direction, p.v, p.id])).toString('base64url');
}

function decodeCursor(cursor: string, orderBy: string, direction: Direction): Position | undefined {
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (!Array.isArray(parsed) || parsed.length !== 5) return undefined;
    const [tag, by, dir, v, id] = parsed as unknown[];
    const scalar = v === null || ['string', 'number', 'boolean'].includes(typeof v);
    if (tag !== 'ref1' || by !== orderBy || dir !== direction || !scalar || typeof id !== 'string') return undefined;
    return { v: v as ItemValue, id };
  } catch {
    return undefined;
  }
}

function sameSecret(a: string, b: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(a), digest(b));
}

function oauthError(res: Response, status: 400 | 401, error: string, description: string) {
  res.set('Cache-Control', 'no-store');
  if (status === 401) res.set('WWW-Authenticate', 'Basic realm="reference-provider"');
  res.status(status).json({ error, error_description: description });
}

/** Client id and secret from HTTP Basic (form-encoded, RFC 6749 §2.3.1) or from the form body. */
function clientCredentials(req: Request, form: Record<string, unknown>): { id: string; secret: string } | undefined {
  const basic = /^Basic +([A-Za-z0-9+/=]+) *$/i.exec(req.headers.authorization ?? '');
  if (basic) {
    const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return undefined;
    const unform = (s: string) => {
      try {
        return decodeURIComponent(s.replace(/\+/g, ' '));
      } catch {
        return s;
      }
    };
    return { id: unform(decoded.slice(0, colon)), secret: unform(decoded.slice(colon + 1)) };
  }
  const { client_id: id, client_secret: secret } = form;
  return typeof id === 'string' && typeof secret === 'string' ? { id, secret } : undefined;
}

/**
 * Creates a reference data provider: `POST /connect/token`, `POST /get-data-points` and the admin API
 * (`/admin/...`, unauthenticated: bind it to loopback). Nothing listens until `listen` is called.
 */
export function createReferenceProvider(opts: ReferenceProviderOptions = {}): ReferenceProvider {
  const clientId = opts.clientId ?? 'service';
  const clientSecret = opts.clientSecret ?? 'provider-secret';
  const ttl = opts.tokenTtlSeconds ?? 3600;
  const pageSize = opts.pageSize ?? 50;
  const latencyMs = opts.latencyMs ?? 0;
  if (opts.anchorDate !== undefined && !(DATE.test(opts.anchorDate) && addDays(opts.anchorDate, 0) === opts.anchorDate)) {
    throw new Error(`anchorDate must be a yyyy-MM-dd date, got '${opts.anchorDate}'`);
  }
  if (!Number.isInteger(pageSize) || pageSize < 1) throw new Error('pageSize must be a positive integer');

  const tokens = new Map<string, number>();
  const revisions = new Map<string, number>();
  const removed = new Map<string, Set<string>>();
  const missing = new Set(opts.missingSubjects ?? []);
  const counters: ProviderStats = { getDataPointsCalls: 0, tokenRequests: 0 };
  // The last few answers in order, by request: a caller paging through one (a year of 100 subjects is 37
  // pages of 1,000) costs one generation and sort, not one per page. Any change of a series empties it.
  const answers = new Map<string, { p: DataPoint; pos: Position }[]>();
  const ANSWERS_KEPT = 4;

  const bumpRevision = (s: string) => {
    answers.clear();
    const r = (revisions.get(s) ?? 0) + 1;
    revisions.set(s, r);
    return r;
  };
  const removePoints = (s: string, ids: string[]) => {
    answers.clear();
    const set = removed.get(s) ?? new Set<string>();
    removed.set(s, set);
    const unique = [...new Set(ids)];
    for (const id of unique) set.add(id);
    return unique;
  };
  const setMissing = (s: string, isMissing = true) => {
    answers.clear();
    if (isMissing) missing.add(s);
    else missing.delete(s);
  };

  function series(subject: string, metric: Metric, days: number, anchor: string): DataPoint[] {
    if (missing.has(subject)) return [];
    const hidden = removed.get(subject);
    const out: DataPoint[] = [];
    for (let i = days - 1; i >= 0; i--) {
      const p = generatePoint(subject, metric, addDays(anchor, -i), revisions.get(subject) ?? 0);
      if (!hidden?.has(p.Id)) out.push(p);
    }
    return out;
  }

  const app = express();
  app.disable('x-powered-by');
  app.use((req, res, next) => {
    const started = Date.now();
    res.on('finish', () => opts.logger?.(`${req.method} ${req.path} ${res.statusCode} ${Date.now() - started}ms`));
    next();
  });

  app.post('/connect/token', express.urlencoded({ extended: false, limit: '16kb' }), (req, res) => {
    counters.tokenRequests++;
    if (!req.is('application/x-www-form-urlencoded')) {
      return oauthError(res, 400, 'invalid_request', 'The body must be application/x-www-form-urlencoded.');
    }
    const form = (req.body ?? {}) as Record<string, unknown>;
    const repeated = Object.keys(form).find((k) => Array.isArray(form[k]));
    if (repeated) return oauthError(res, 400, 'invalid_request', `Parameter ${repeated} is repeated.`);
    if (typeof form['grant_type'] !== 'string' || form['grant_type'] === '')
      return oauthError(res, 400, 'invalid_request', 'grant_type is required.');
    if (form['grant_type'] !== 'client_credentials')
      return oauthError(res, 400, 'unsupported_grant_type', 'Only client_credentials is supported.');
    const creds = clientCredentials(req, form);
    // Both comparisons always run, so the answer time does not tell which one failed.
    const ok = creds !== undefined && [sameSecret(creds.id, clientId), sameSecret(creds.secret, clientSecret)].every(Boolean);
    if (!ok) return oauthError(res, 401, 'invalid_client', 'Client authentication failed.');

    const now = Date.now();
    for (const [t, exp] of tokens) if (exp <= now) tokens.delete(t);
    const token = randomBytes(32).toString('base64url');
    tokens.set(token, now + ttl * 1000);
    const scope = typeof form['scope'] === 'string' && form['scope'].trim() !== '' ? form['scope'].trim() : 'DataProviderApi';
    res.set('Cache-Control', 'no-store').json({ access_token: token, token_type: 'Bearer', expires_in: ttl, scope });
  });

  const requireToken = (req: Request, res: Response, next: NextFunction) => {
    counters.getDataPointsCalls++;
    const m = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i.exec(req.headers.authorization ?? '');
    const exp = m ? tokens.get(m[1]!) : undefined;
    if (exp !== undefined && exp > Date.now()) return next();
    res.set('WWW-Authenticate', m ? 'Bearer realm="reference-provider", error="invalid_token"' : 'Bearer realm="reference-provider"');
    res.status(401).json({ title: 'Unauthorized', status: 401 });
  };

  app.post('/get-data-points', requireToken, express.json({ limit: '1mb' }), async (req, res) => {
    if (latencyMs > 0) await sleep(latencyMs);
    if (!req.is('application/json')) return void res.status(415).json({ title: 'The body must be application/json.', status: 415 });
    const parsed = requestSchema.safeParse(req.body);
    if (!parsed.success) return badRequest(res, fieldErrors(parsed.error.issues));
    const { SubjectIdentifiers, PagingRequest: paging, DataExtract } = parsed.data;
    const { metric, period } = DataExtract.Options;

    const orderBy = paging.OrderBy ?? 'Id';
    if (orderBy !== 'Id' && !ITEM_KEYS[metric].includes(orderBy)) {
      return badRequest(res, { 'PagingRequest.OrderBy': [`Unknown key '${orderBy}'; one of: Id, ${ITEM_KEYS[metric].join(', ')}.`] });
    }
    const direction = paging.OrderDirection ?? 'Ascending';
    const cmp = comparator(direction);
    const cursorAt = (name: 'After' | 'Before') => {
      const c = paging[name];
      return c === null ? undefined : (decodeCursor(c, orderBy, direction) ?? null);
    };
    const after = cursorAt('After');
    const before = cursorAt('Before');
    if (after === null || before === null) {
      const errors: Record<string, string[]> = {};
      if (after === null) errors['PagingRequest.After'] = ['The cursor does not belong to this provider and ordering.'];
      if (before === null) errors['PagingRequest.Before'] = ['The cursor does not belong to this provider and ordering.'];
      return badRequest(res, errors);
    }

    const position = (p: DataPoint): Position => ({
      v: orderBy === 'Id' ? null : (p.DataPointItems.find((i) => i.Key === orderBy)?.Value.Value ?? null),
      id: p.Id,
    });
    const anchor = opts.anchorDate ?? new Date().toISOString().slice(0, 10);
    const subjects = [...new Set(SubjectIdentifiers)];
    const answerKey = JSON.stringify([subjects, metric, period.days, anchor, orderBy, direction]);
    let all = answers.get(answerKey);
    if (!all) {
      all = subjects
        .flatMap((s) => series(s, metric, period.days, anchor))
        .map((p) => ({ p, pos: position(p) }))
        .sort((a, b) => cmp(a.pos, b.pos));
      if (answers.size >= ANSWERS_KEPT) answers.delete(answers.keys().next().value!);
      answers.set(answerKey, all);
    }

    const firstIndex = (pred: (pos: Position) => boolean) => {
      const i = all.findIndex((e) => pred(e.pos));
      return i < 0 ? all.length : i;
    };
    const lo = after ? firstIndex((pos) => cmp(pos, after) > 0) : 0;
    const hi = Math.max(lo, before ? firstIndex((pos) => cmp(pos, before) >= 0) : all.length);
    const size = Math.min(paging.First ?? paging.Last ?? pageSize, pageSize);
    const [start, end] = paging.Last !== null ? [Math.max(lo, hi - size), hi] : [lo, Math.min(hi, lo + size)];

    const edges = all.slice(start, end).map(({ p, pos }) => ({ Node: p, Cursor: encodeCursor(orderBy, direction, pos) }));
    const body: GetDataPointsResponse = {
      PageInfo: {
        HasNextPage: end < all.length,
        HasPreviousPage: start > 0,
        StartCursor: edges[0]?.Cursor ?? null,
        EndCursor: edges.at(-1)?.Cursor ?? null,
        TotalCount: all.length,
      },
      Edges: edges,
    };
    res.json(body);
  });

  app.post('/admin/subjects/:subjectIdentifier/revision', (req, res) => {
    const subjectIdentifier = req.params['subjectIdentifier']!;
    res.json({ subjectIdentifier, revision: bumpRevision(subjectIdentifier) });
  });

  const removeSchema = z.object({ ids: z.array(z.string().min(1)).min(1) });
  app.post('/admin/subjects/:subjectIdentifier/remove', express.json(), (req, res) => {
    const parsed = removeSchema.safeParse(req.body);
    if (!parsed.success) return badRequest(res, fieldErrors(parsed.error.issues));
    const subject = req.params['subjectIdentifier']!;
    const removed = removePoints(subject, parsed.data.ids);
    // Hidden all the same (harmless), but named: a removal of an id no series holds is most likely a typo.
    const today = opts.anchorDate ?? new Date().toISOString().slice(0, 10);
    res.json({ removed, neverServed: removed.filter((id) => !servable(subject, id, today)) });
  });

  const missingSchema = z.object({ missing: z.boolean().default(true) }).prefault({});
  app.post('/admin/subjects/:subjectIdentifier/missing', express.json(), (req, res) => {
    const parsed = missingSchema.safeParse(req.body);
    if (!parsed.success) return badRequest(res, fieldErrors(parsed.error.issues));
    const subjectIdentifier = req.params['subjectIdentifier']!;
    setMissing(subjectIdentifier, parsed.data.missing);
    res.json({ subjectIdentifier, missing: parsed.data.missing });
  });

  app.get('/admin/stats', (_req, res) => void res.json({ ...counters }));

  app.use((_req: Request, res: Response) => void res.status(404).json({ title: 'Not Found', status: 404 }));
  app.use((err: { type?: string; status?: number }, _req: Request, res: Response, _next: NextFunction) => {
    if (err.type === 'entity.parse.failed') return badRequest(res, { $: ['The body is not valid JSON.'] });
    const status = typeof err.status === 'number' && err.status >= 400 && err.status < 500 ? err.status : 500;
    const title = status === 500 ? 'Internal Server Error' : status === 413 ? 'Payload Too Large' : 'Bad Request';
    res.status(status).json({ title, status });
  });

  async function listen(port = 0, host = '127.0.0.1'): Promise<RunningProvider> {
    const server: Server = createServer(app);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    const address = server.address();
    const bound = typeof address === 'object' && address ? address.port : port;
    const shownHost = host.includes(':') ? `[${host}]` : host;
    return {
      url: `http://${shownHost}:${bound}`,
      close: () =>
        new Promise<void>((resolve, reject) => {
          server.close((err) => (err ? reject(err) : resolve()));
          server.closeAllConnections(); // keep-alive sockets would hold close() open
        }),
    };
  }

  return { app, listen, bumpRevision, removePoints, setMissing, stats: () => ({ ...counters }) };
}
