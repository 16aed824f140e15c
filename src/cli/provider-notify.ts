import { parseArgs } from 'node:util';

// `npm run provider:notify -- --subject E-1001 [...]`: tells the service that a subject's data changed at
// the provider, as a data provider would (dataChange/creationOrUpdate or dataChange/removal).

const USAGE = `Usage: npm run provider:notify -- --subject ID [--remove ID ...] [--filter key=value ...] [--bump] [options]

Notifies the service that a subject's data changed at the provider. Without --remove it posts
dataChange/creationOrUpdate; with --remove it posts dataChange/removal (both, with --bump and --remove).

  --subject ID                   subject identifier at the provider (required)
  --filter KEY=VALUE             DataExtractsOptionsValuesFilter entry, repeatable; KEY is a property path
                                 (metric, period.days); an integer VALUE is sent as a number
  --remove ID                    removed data point id, repeatable; removed at the provider first
  --bump                         bump the subject's revision at the provider first, and send its new points
  --service URL                  service base URL (default http://127.0.0.1:8080)
  --tenant KEY                   tenant key (default demo)
  --client-id ID                 service client id (default demo-provider)
  --client-secret SECRET         service client secret (default demo-provider-secret)
  --provider URL                 reference provider base URL (default http://127.0.0.1:9100)
  --provider-client-id ID        client id to read the provider's data with --bump (default service)
  --provider-client-secret S     its secret (default provider-secret)
  -h, --help                     this text`;

class UsageError extends Error {}

type Json = string | number | boolean | null | Json[] | { [k: string]: Json };
type JsonObject = { [k: string]: Json };

/** `period.days=7` → `filter['period.days'] = 7`: the service matches dot-separated paths into an extract's options. */
function addFilter(filter: JsonObject, entry: string): void {
  const eq = entry.indexOf('=');
  const path = entry.slice(0, Math.max(eq, 0));
  if (eq <= 0 || path.split('.').some((s) => s === '')) throw new UsageError(`--filter expects key=value, got '${entry}'`);
  if (Object.hasOwn(filter, path)) throw new UsageError(`--filter sets '${path}' twice`);
  const raw = entry.slice(eq + 1);
  filter[path] = /^-?(0|[1-9]\d*)$/.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : raw;
}

/** The dataset options a filter describes (`{ 'period.days': 7 }` → `{ period: { days: 7 } }`), to ask the provider with. */
function filterToOptions(filter: JsonObject): JsonObject {
  const options = Object.create(null) as JsonObject;
  for (const [path, value] of Object.entries(filter)) {
    const segments = path.split('.');
    let node = options;
    for (const [i, segment] of segments.entries()) {
      const existing = Object.hasOwn(node, segment) ? node[segment] : undefined;
      const last = i === segments.length - 1;
      if (last && existing === undefined) node[segment] = value;
      else if (!last && existing === undefined) node = node[segment] = Object.create(null) as JsonObject;
      else if (!last && typeof existing === 'object' && existing !== null && !Array.isArray(existing)) node = existing;
      else throw new UsageError(`--filter '${segments.slice(0, i + 1).join('.')}' is both a value and an object`);
    }
  }
  return options;
}

function parse() {
  const { values } = parseArgs({
    options: {
      subject: { type: 'string' },
      filter: { type: 'string', multiple: true, default: [] },
      remove: { type: 'string', multiple: true, default: [] },
      bump: { type: 'boolean', default: false },
      service: { type: 'string', default: 'http://127.0.0.1:8080' },
      tenant: { type: 'string', default: 'demo' },
      'client-id': { type: 'string', default: 'demo-provider' },
      'client-secret': { type: 'string', default: 'demo-provider-secret' },
      provider: { type: 'string', default: 'http://127.0.0.1:9100' },
      'provider-client-id': { type: 'string', default: 'service' },
      'provider-client-secret': { type: 'string', default: 'provider-secret' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return undefined;
  if (!values.subject) throw new UsageError('--subject is required');
  for (const name of ['service', 'provider'] as const) {
    if (!URL.canParse(values[name]) || !/^https?:$/.test(new URL(values[name]).protocol)) {
      throw new UsageError(`--${name} must be an http(s) URL, got '${values[name]}'`);
    }
  }
  if (values.remove.some((id) => id === '')) throw new UsageError('--remove expects a data point id');
  const filter = Object.create(null) as JsonObject;
  for (const entry of values.filter) addFilter(filter, entry);
  const options = filterToOptions(filter); // checked now, used with --bump
  return {
    options,
    ...values,
    subject: values.subject,
    remove: [...new Set(values.remove)],
    filter,
    service: values.service.replace(/\/+$/, ''),
    provider: values.provider.replace(/\/+$/, ''),
  };
}

/** fetch that names the URL when the server cannot be reached. */
async function send(url: string, init: RequestInit): Promise<{ status: number; text: string }> {
  let res: globalThis.Response;
  try {
    res = await fetch(url, { ...init, signal: AbortSignal.timeout(30_000) });
  } catch (e) {
    const cause = e instanceof Error && e.cause instanceof Error ? e.cause.message : e instanceof Error ? e.message : String(e);
    throw new Error(`cannot reach ${url}: ${cause}`, { cause: e });
  }
  return { status: res.status, text: await res.text() };
}

const ok = (status: number) => status >= 200 && status < 300;
const jsonInit = (body: unknown, token?: string): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
  body: JSON.stringify(body),
});

/** POSTs, and fails with the status and body unless the answer is 2xx. */
async function must(what: string, url: string, init: RequestInit): Promise<unknown> {
  const { status, text } = await send(url, init);
  if (!ok(status)) throw new Error(`${what}: ${url} answered ${status} ${text}`);
  return text === '' ? undefined : (JSON.parse(text) as unknown);
}

async function clientCredentialsToken(tokenUrl: string, form: Record<string, string>): Promise<string> {
  const body = await must('token', tokenUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', ...form }).toString(),
  });
  const token = (body as { access_token?: unknown } | undefined)?.access_token;
  if (typeof token !== 'string') throw new Error(`token: ${tokenUrl} answered without an access_token`);
  return token;
}

/** The subject's current points at the provider for these options, following EndCursor to the end. */
async function providerPoints(args: NonNullable<ReturnType<typeof parse>>): Promise<unknown[]> {
  const token = await clientCredentialsToken(`${args.provider}/connect/token`, {
    client_id: args['provider-client-id'],
    client_secret: args['provider-client-secret'],
  });
  const points: unknown[] = [];
  let after: string | null = null;
  for (;;) {
    const request = {
      SubjectIdentifiers: [args.subject],
      PagingRequest: { After: after, Before: null, First: null, Last: null, OrderBy: null, OrderDirection: null },
      DataExtract: { Key: 'provider-notify', Options: args.options },
    };
    const page = (await must('get data points', `${args.provider}/get-data-points`, jsonInit(request, token))) as {
      PageInfo: { HasNextPage: boolean; EndCursor: string | null };
      Edges: { Node: unknown }[];
    };
    points.push(...page.Edges.map((e) => e.Node));
    if (!page.PageInfo.HasNextPage || page.PageInfo.EndCursor === null) return points;
    after = page.PageInfo.EndCursor;
  }
}

async function main(): Promise<number> {
  let args;
  try {
    args = parse();
  } catch (e) {
    console.error(`error: ${e instanceof Error ? e.message : String(e)}\n\n${USAGE}`);
    return 1;
  }
  if (!args) {
    console.log(USAGE);
    return 0;
  }
  const subjectPath = `${args.provider}/admin/subjects/${encodeURIComponent(args.subject)}`;
  if (args.bump) {
    const bumped = (await must('bump', `${subjectPath}/revision`, { method: 'POST' })) as { revision: number };
    console.log(`provider: ${args.subject} is now at revision ${bumped.revision}`);
  }
  if (args.remove.length > 0) {
    const answer = (await must('remove', `${subjectPath}/remove`, jsonInit({ ids: args.remove }))) as { neverServed?: string[] };
    console.log(`provider: removed ${args.remove.join(', ')}`);
    for (const id of answer.neverServed ?? [])
      console.log(
        `provider: note: '${id}' is no data point the provider ever served for ${args.subject} (its ids read ` +
          `${args.subject}:<steps|heartRate|sleep>:<yyyy-MM-dd up to today>); the removal is sent anyway and changes nothing`,
      );
  }
  const newPoints = args.bump ? await providerPoints(args) : [];

  const token = await clientCredentialsToken(`${args.service}/connect/token`, {
    tenant_key: args.tenant,
    client_id: args['client-id'],
    client_secret: args['client-secret'],
    scope: 'ServiceDataProviderApi',
  });
  const base = `${args.service}/connector-dataprovider/api/v1/dataChange`;
  const notifications: [string, Record<string, unknown>][] = [];
  if (args.bump || args.remove.length === 0) {
    notifications.push([
      `${base}/creationOrUpdate`,
      { SubjectIdentifier: args.subject, DataExtractsOptionsValuesFilter: args.filter, NewOrUpdatedDataPoints: newPoints },
    ]);
  }
  if (args.remove.length > 0) {
    notifications.push([
      `${base}/removal`,
      { SubjectIdentifier: args.subject, DataExtractsOptionsValuesFilter: args.filter, RemovedDataPointIdentifiers: args.remove },
    ]);
  }
  let code = 0;
  for (const [url, body] of notifications) {
    const { status, text } = await send(url, jsonInit(body, token));
    console.log(`POST ${url} -> ${status}${text ? `\n${text}` : ''}`);
    if (!ok(status)) code = 1;
  }
  return code;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(`error: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  },
);
