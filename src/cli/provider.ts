import { z } from 'zod';
import { createReferenceProvider } from '../provider/reference-provider.js';

// `npm run provider`: the reference data provider on PROVIDER_HOST:PROVIDER_PORT, until SIGINT/SIGTERM.

const envSchema = z.object({
  PROVIDER_HOST: z.string().min(1).default('127.0.0.1'),
  PROVIDER_PORT: z.coerce.number().int().min(0).max(65535).default(9100),
  PROVIDER_CLIENT_ID: z.string().min(1).optional(),
  PROVIDER_CLIENT_SECRET: z.string().min(1).optional(),
  PROVIDER_PAGE_SIZE: z.coerce.number().int().min(1).max(1000).optional(),
  PROVIDER_LATENCY_MS: z.coerce.number().int().min(0).max(60_000).optional(),
});

// Empty strings mean "unset", as in `VAR= npm run provider`.
const present = Object.fromEntries(Object.entries(process.env).filter(([k, v]) => k.startsWith('PROVIDER_') && v !== ''));
const parsed = envSchema.safeParse(present);
if (!parsed.success) {
  const issue = parsed.error.issues[0]!;
  console.error(`Invalid environment variable ${String(issue.path[0] ?? '')}: ${issue.message}`);
  process.exit(1);
}
const env = parsed.data;

const provider = createReferenceProvider({
  ...(env.PROVIDER_CLIENT_ID !== undefined ? { clientId: env.PROVIDER_CLIENT_ID } : {}),
  ...(env.PROVIDER_CLIENT_SECRET !== undefined ? { clientSecret: env.PROVIDER_CLIENT_SECRET } : {}),
  ...(env.PROVIDER_PAGE_SIZE !== undefined ? { pageSize: env.PROVIDER_PAGE_SIZE } : {}),
  ...(env.PROVIDER_LATENCY_MS !== undefined ? { latencyMs: env.PROVIDER_LATENCY_MS } : {}),
  logger: (line) => console.log(line),
});

const { url, close } = await provider.listen(env.PROVIDER_PORT, env.PROVIDER_HOST).catch((e: unknown) => {
  console.error(`Cannot listen on ${env.PROVIDER_HOST}:${env.PROVIDER_PORT}: ${e instanceof Error ? e.message : String(e)}`);
  return process.exit(1);
});
console.log(`reference provider: token ${url}/connect/token, get data points ${url}/get-data-points, admin ${url}/admin`);
if (!['127.0.0.1', '::1', 'localhost'].includes(env.PROVIDER_HOST)) {
  console.error(`warning: the admin API has no authentication and ${env.PROVIDER_HOST} is not a loopback address`);
}

const stop = () => {
  close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
