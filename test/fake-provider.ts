import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { type ApiClient, type TestApp, type TestTenant, createTenant } from './helpers.js';

/** One scripted answer of the fake provider instead of its data. */
export interface Fault {
  status?: number;
  headers?: Record<string, string>;
  /** Raw body (default: a problem text). */
  body?: string;
  /** Delay before answering (with or without a fault status). */
  delayMs?: number;
  /** Answers only once this settles (a gate the test opens), before the delay. */
  until?: Promise<unknown>;
}

export interface ProviderCall {
  body: any;
  authorization: string | undefined;
  /** The W3C trace context the service sent (P141). */
  traceparent: string | undefined;
}

/**
 * A data provider on loopback that counts calls (test double of the contract's get-data-points and a
 * client-credentials token endpoint). Each subject has three points; `version` changes their values;
 * `faults` are consumed one per get-data-points call, `always` applies to every call while set.
 */
export class FakeProvider {
  url = '';
  calls: ProviderCall[] = [];
  tokenRequests: URLSearchParams[] = [];
  faults: Fault[] = [];
  always: Fault | undefined;
  version = 0;
  pageSize = 2;
  tokenDelayMs = 0;
  tokenTtlSeconds = 3600;
  /** Tokens the provider stops accepting (401), as after a rotation. */
  revoked = new Set<string>();
  /** Point ids the provider no longer returns. */
  hidden = new Set<string>();
  /** get-data-points calls being answered now, and the most there were at once. */
  inFlight = 0;
  maxInFlight = 0;
  /** When set, a subject's points of an extract come from here instead of the three generated ones. */
  data: ((identifier: string, extractKey: string) => any[]) | undefined;
  private issued = new Set<string>();
  private server: Server | undefined;

  get tokenUrl() {
    return `${this.url}/token`;
  }
  get getDataPointsUrl() {
    return `${this.url}/get-data-points`;
  }

  /** Calls that started a fetch (first pages), optionally of one extract. */
  fetches(extractKey?: string): ProviderCall[] {
    return this.calls.filter(
      (c) => c.body?.PagingRequest?.After === null && (extractKey === undefined || c.body?.DataExtract?.Key === extractKey),
    );
  }

  /** The points of one subject: Ids `<identifier>-<n>`, an Integer `value` (5, 40, 300 + version), a String, a Date. */
  pointsOf(identifier: string, extractKey: string): any[] {
    if (this.data) return this.data(identifier, extractKey).filter((p) => !this.hidden.has(p.Id));
    return [1, 2, 3]
      .map((n) => ({
        Id: `${identifier}-${n}`,
        SubjectIdentifier: identifier,
        DataPointItems: [
          { Key: 'value', Value: { DataType: 'Integer', Value: [5, 40, 300][n - 1]! + this.version } },
          { Key: 'label', Value: { DataType: 'String', Value: `${extractKey} v${this.version}` } },
          { Key: 'day', Value: { DataType: 'Date', Value: `2026-11-0${n}` } },
          { Key: 'note', Value: { DataType: 'String', Value: null } },
        ],
      }))
      .filter((p) => !this.hidden.has(p.Id));
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch(() => {
        res.statusCode = 500;
        res.end();
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse) {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    if (req.url === '/token') {
      const form = new URLSearchParams(raw);
      this.tokenRequests.push(form);
      await sleep(this.tokenDelayMs);
      if (
        form.get('client_id') !== 'service' ||
        form.get('client_secret') !== 'provider-secret' ||
        form.get('grant_type') !== 'client_credentials'
      ) {
        return json(res, 401, { error: 'invalid_client' });
      }
      const token = `tok-${this.tokenRequests.length}`;
      this.issued.add(token);
      return json(res, 200, { access_token: token, token_type: 'Bearer', expires_in: this.tokenTtlSeconds });
    }
    if (req.url !== '/get-data-points') return json(res, 404, {});
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      await this.answer(raw, req, res);
    } finally {
      this.inFlight--;
    }
  }

  private async answer(raw: string, req: IncomingMessage, res: ServerResponse) {
    const authorization = req.headers.authorization;
    const body = JSON.parse(raw);
    this.calls.push({ body, authorization, traceparent: req.headers.traceparent as string | undefined });
    const token = authorization?.replace(/^Bearer /, '') ?? '';
    if (!this.issued.has(token) || this.revoked.has(token)) return json(res, 401, { error: 'invalid_token' });
    const fault = this.faults.shift() ?? this.always;
    if (fault) {
      await fault.until;
      await sleep(fault.delayMs ?? 0);
      if (fault.status !== undefined || fault.body !== undefined) {
        res.writeHead(fault.status ?? 200, { 'content-type': 'application/json', ...fault.headers });
        return res.end(fault.body ?? 'provider trouble');
      }
    }
    const all = (body.SubjectIdentifiers as string[])
      .flatMap((id) => this.pointsOf(id, body.DataExtract.Key))
      .sort((a, b) => (a.Id < b.Id ? -1 : 1));
    const start = body.PagingRequest.After === null ? 0 : Number(Buffer.from(body.PagingRequest.After, 'base64url').toString()) + 1;
    const page = all.slice(start, start + this.pageSize);
    const cursor = (i: number) => Buffer.from(String(i)).toString('base64url');
    return json(res, 200, {
      PageInfo: {
        HasNextPage: start + page.length < all.length,
        HasPreviousPage: start > 0,
        StartCursor: page.length ? cursor(start) : null,
        EndCursor: page.length ? cursor(start + page.length - 1) : null,
        TotalCount: all.length,
      },
      Edges: page.map((node, i) => ({ Node: node, Cursor: cursor(start + i) })),
    });
  }
}

function json(res: ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** Polls `check` until it holds (background work), failing after `ms`. */
export async function eventually(check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('condition not reached in time');
    await sleep(20);
  }
}

export const PROVIDER_CLIENT = {
  clientId: 'provider',
  clientSecret: 'provider-client-secret',
  scopes: ['ServiceDataProviderApi'],
  permissions: [],
};
export const PROVIDER_CLIENT_2 = {
  clientId: 'provider-2',
  clientSecret: 'provider-client-2-secret',
  scopes: ['ServiceApi'],
  permissions: [],
};

export interface DataTenant {
  tenant: TestTenant;
  api: ApiClient;
  /** Subject UUIDs by ExternalId (E-01 …). */
  subjects: Map<string, string>;
  /** A change notification client (inbound, scope ServiceDataProviderApi). */
  provider: ApiClient;
}

/** The tenant file's data source `wearables` calling `provider` (client credentials, ExternalId as identifier). */
export function providerDataSource(provider: FakeProvider) {
  return {
    key: 'wearables',
    name: 'Wearables',
    getDataPointsUrl: provider.getDataPointsUrl,
    tokenUrl: provider.tokenUrl,
    clientId: 'service',
    clientSecret: 'provider-secret',
    scope: 'DataProviderApi',
    subjectIdentifier: 'ExternalId',
  };
}

/**
 * A tenant whose data source is `provider`, with extracts `steps` (metric steps, period.days 7) and `hr`
 * (metric heartRate) and `count` subjects E-01 … (ExternalId is the provider's identifier).
 */
export async function createDataTenant(
  app: TestApp,
  provider: FakeProvider,
  count = 10,
  overrides: Record<string, unknown> = {},
): Promise<DataTenant> {
  const tenant = await createTenant(app, {
    clients: [
      { clientId: 'full', clientSecret: 'full-client-secret', scopes: ['ServiceApi', 'ServiceDataProviderApi'], permissions: ['*'] },
      PROVIDER_CLIENT,
      PROVIDER_CLIENT_2,
      { clientId: 'reader', clientSecret: 'reader-client-secret', scopes: ['ServiceApi'], permissions: ['List:Subject', 'View:Subject'] },
    ],
    dataSources: [{ ...providerDataSource(provider), inboundClientIds: ['provider', 'provider-2'] }],
    dataExtracts: [
      { key: 'steps', name: 'Steps per day', dataSourceKey: 'wearables', options: { metric: 'steps', period: { days: 7 } } },
      { key: 'hr', name: 'Heart rate', dataSourceKey: 'wearables', options: { metric: 'heartRate', period: { days: 7 } } },
    ],
    ...overrides,
  });
  const api = await tenant.client({ scope: 'ServiceApi' });
  const subjects = new Map<string, string>();
  for (let i = 1; i <= count; i++) {
    const ext = `E-${String(i).padStart(2, '0')}`;
    const res = await api.post('/api/v2/messaging/subject', {
      CustomFieldValues: [
        { Key: 'employeeNumber', Value: { String: { Value: ext } } },
        { Key: 'fullName', Value: { String: { Value: `Person ${i}` } } },
      ],
    });
    if (res.status !== 201) throw new Error(`subject upsert failed: ${res.status} ${JSON.stringify(res.body)}`);
    subjects.set(ext, res.body.internalId);
  }
  const providerApi = await tenant.client({
    clientId: PROVIDER_CLIENT.clientId,
    clientSecret: PROVIDER_CLIENT.clientSecret,
    scope: 'ServiceDataProviderApi',
  });
  return { tenant, api, subjects, provider: providerApi };
}

/** GraphQL: the first `first` subjects (by ExternalId) with their data points of `extractKey`. */
export const SUBJECTS_WITH_POINTS = `query($first: Int, $extract: String!) {
  subjects(first: $first) { edges { node { externalId dataPoints(extractKey: $extract, first: 100) {
    totalCount edges { node { id subjectIdentifier items { key dataType value valueText } } } } } } }
}`;

/** A read of a subject's `steps` data points: their count and whether they were served stale (D10), or the error code. */
export async function readSteps(t: DataTenant, subject: string): Promise<{ count: number; stale: boolean } | string> {
  const r = await t.api.gql(`query($id: ID!) { subject(id: $id) { dataPoints(extractKey: "steps") { totalCount } } }`, {
    id: t.subjects.get(subject),
  });
  if (r.status !== 200) throw new Error(`read of ${subject}: HTTP ${r.status}`);
  return (
    r.body.errors?.[0]?.extensions?.code ?? {
      count: r.body.data.subject.dataPoints.totalCount,
      stale: r.body.extensions?.staleData !== undefined,
    }
  );
}
