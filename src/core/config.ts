import { z } from 'zod';

const bool = z.enum(['true', 'false', '1', '0', 'yes', 'no']).transform((v) => v === 'true' || v === '1' || v === 'yes');

const envSchema = z
  .object({
    NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
    HOST: z.string().min(1).default('127.0.0.1'),
    PORT: z.coerce.number().int().min(0).max(65535).default(8080),
    /** Public base URL: the token issuer and the printed URLs. Defaults to http://HOST:PORT. */
    PUBLIC_URL: z.url().optional(),
    DATABASE_URL: z
      .string()
      .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL')
      .optional(),
    DATABASE_POOL_SIZE: z.coerce.number().int().min(1).max(200).default(10),
    /** PostgreSQL only: a statement running longer is cancelled (503); 0 = no limit. */
    DATABASE_STATEMENT_TIMEOUT_MS: z.coerce.number().int().min(0).default(30_000),
    /**
     * PostgreSQL only: a table is analyzed (fresh planner statistics) once this many of its rows plus 10%
     * of its live rows were written since its last ANALYZE, checked every second (P89); 0: left to autovacuum.
     */
    ANALYZE_AFTER_ROWS: z.coerce.number().int().min(0).default(1000),
    /** PostgreSQL only: how long a request waits for a pool connection (or a new one to open) before it answers 503. */
    DATABASE_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
    /**
     * PostgreSQL only: run the fixed statements of the hot paths (authentication, subject writes) as
     * prepared statements (P71). Turn off behind a pooler that does not keep them per client (PgBouncer
     * in transaction mode before 1.21, or without max_prepared_statements).
     */
    DATABASE_PREPARED_STATEMENTS: bool.default(true),
    /**
     * PostgreSQL only: `transaction` when DATABASE_URL is a pooler in transaction mode (PgBouncer): the
     * pooled connections then carry no session state (no prepared statements, no startup options; the
     * session settings are the role's, P148) and LISTEN runs on DATABASE_LISTEN_URL.
     */
    DATABASE_POOLER: z.enum(['none', 'transaction']).default('none'),
    /**
     * PostgreSQL only: a direct (session) connection to the primary for LISTEN; default DATABASE_URL. With
     * DATABASE_POOLER=transaction also start-up's role settings and migrations (P148, P150).
     */
    DATABASE_LISTEN_URL: z
      .string()
      .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL')
      .optional(),
    /**
     * PostgreSQL only: streaming replicas (hot standbys), comma-separated postgres URLs. Read-only
     * operations read from one that has replayed the tenant's read floor (its own writes), else from the
     * primary; a replica further behind than DATABASE_REPLICA_MAX_LAG_MS, or unreachable, is left out.
     * DATABASE_REPLICA_PROBE_MS: how often each instance reads each replica's replay position.
     */
    DATABASE_REPLICA_URL: z
      .string()
      .transform((v) =>
        v
          .split(',')
          .map((u) => u.trim())
          .filter((u) => u !== ''),
      )
      .pipe(z.array(z.string().regex(/^postgres(ql)?:\/\//, 'must be postgres:// URLs, comma-separated')))
      .optional(),
    /** Connections of each replica's pool (default: DATABASE_POOL_SIZE). */
    DATABASE_REPLICA_POOL_SIZE: z.coerce.number().int().min(1).max(200).optional(),
    DATABASE_REPLICA_MAX_LAG_MS: z.coerce.number().int().min(0).max(3_600_000).default(10_000),
    DATABASE_REPLICA_PROBE_MS: z.coerce.number().int().min(10).max(60_000).default(250),
    /** PostgreSQL only: how long start-up waits for the database (retrying with backoff) before it gives up. */
    STARTUP_TIMEOUT_MS: z.coerce.number().int().min(0).default(120_000),
    /**
     * Admission control (P52): units of database work one instance runs at once (default: the pool
     * size); a tenant, and a client, may hold at most this share of them; requests past that wait, fairly
     * across tenants, in a queue of at most ADMISSION_QUEUE_LIMIT per tenant for at most
     * ADMISSION_QUEUE_TIMEOUT_MS, else 429 with Retry-After.
     */
    ADMISSION_CAPACITY: z.coerce.number().int().min(1).max(10_000).optional(),
    ADMISSION_TENANT_SHARE: z.coerce.number().gt(0).max(1).default(0.5),
    ADMISSION_CLIENT_SHARE: z.coerce.number().gt(0).max(1).default(0.5),
    ADMISSION_QUEUE_LIMIT: z.coerce.number().int().min(0).max(100_000).default(100),
    ADMISSION_QUEUE_TIMEOUT_MS: z.coerce.number().int().min(0).max(600_000).default(5_000),
    /** GraphQL cost (the D11 cost rule's) that weighs one unit of admission; a search costs 2,000. */
    ADMISSION_COST_PER_UNIT: z.coerce.number().int().min(1).default(1_000),
    /** Optional request-rate limit per client: at most RATE_LIMIT_REQUESTS per RATE_LIMIT_WINDOW_SECONDS (0: off). */
    RATE_LIMIT_REQUESTS: z.coerce.number().int().min(0).default(0),
    RATE_LIMIT_WINDOW_SECONDS: z.coerce.number().int().min(1).max(86_400).default(60),
    /**
     * The token endpoint's client-secret verifications (scrypt) run at once per instance (P80;
     * default: half the cores, at most 2); TOKEN_VERIFY_QUEUE_LIMIT more may wait, past that 503.
     */
    TOKEN_VERIFY_CONCURRENCY: z.coerce.number().int().min(1).max(64).optional(),
    TOKEN_VERIFY_QUEUE_LIMIT: z.coerce.number().int().min(0).max(10_000).default(16),
    /**
     * Failed client authentications of one client from one address, and distinct clients failing from one
     * address (0: off, e.g. behind a proxy), in 15 min before further attempts get 429 with a doubling
     * Retry-After (P81).
     */
    TOKEN_FAILURE_LIMIT: z.coerce.number().int().min(1).max(10_000).default(10),
    TOKEN_ADDRESS_FAILURE_LIMIT: z.coerce.number().int().min(0).max(1_000_000).default(20),
    /**
     * When set, V8 collects the old generation again once it has grown this many percent past what the
     * last full collection kept (P66): bounds memory by the live heap, at the cost of more full
     * collections (each a pause of 5-25 ms). 0: V8's own factor, which on a large host lets garbage grow
     * RSS to several times the live heap, and within a container follows its memory limit.
     */
    HEAP_GROWING_PERCENT: z.coerce.number().int().min(0).max(1_000).default(0),
    DATA_DIR: z.string().min(1).default('./.data'),
    TENANT_CONFIG: z.string().min(1).optional(),
    TOKEN_TTL_SECONDS: z.coerce.number().int().min(60).max(86400).default(3600),
    AUTH_ISSUER: z.string().min(1).optional(),
    AUTH_JWKS_URL: z.url().optional(),
    AUTH_TENANT_CLAIM: z.string().min(1).default('tenant'),
    // RFC 9068: the resource identifier issued tokens name as their audience (default PUBLIC_URL), and the
    // audience an external issuer's tokens must name (unchecked when unset).
    AUTH_AUDIENCE: z.string().min(1).optional(),
    AUTH_EXTERNAL_AUDIENCE: z.string().min(1).optional(),
    MAX_BODY_BYTES: z.coerce
      .number()
      .int()
      .min(1024)
      .default(1024 * 1024),
    GRAPHQL_MAX_DEPTH: z.coerce.number().int().min(15).max(100).default(20),
    GRAPHQL_MAX_COST: z.coerce.number().int().min(100).default(50000),
    GRAPHQL_MAX_BREADTH: z.coerce.number().int().min(50).default(1000),
    /** Open GraphQL subscriptions one client (tenant and client id) may hold on one instance; past it, TOO_MANY_REQUESTS. */
    SUBSCRIPTIONS_PER_CLIENT: z.coerce.number().int().min(1).max(100_000).default(100),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** Unset: pretty lines on a terminal outside production, JSON lines elsewhere (src/app/pretty-logs.ts). */
    LOG_FORMAT: z.enum(['json', 'pretty']).optional(),
    /**
     * How long an idle kept-alive connection stays open. Longer than the idle timeouts of the proxies in
     * front (60 s is common), so a proxy never reuses a connection the service is closing that moment.
     */
    HTTP_KEEP_ALIVE_TIMEOUT_MS: z.coerce.number().int().min(0).max(600_000).default(65_000),
    /**
     * How long output written to a client may wait to be taken (P78): a response or stream part
     * not drained within it ends the connection; 0: no deadline.
     */
    RESPONSE_WRITE_TIMEOUT_MS: z.coerce.number().int().min(0).max(3_600_000).default(30_000),
    /**
     * Output waiting for a GraphQL WebSocket client past this many bytes: it is not reading, and the
     * connection is closed (1008, P136). Above the largest single answer (a large page is ~10 MB).
     */
    WEBSOCKET_MAX_BUFFERED_BYTES: z.coerce
      .number()
      .int()
      .min(64 * 1024)
      .default(32 * 1024 * 1024),
    /**
     * Operations one GraphQL WebSocket connection may have under way at once (its subscriptions included):
     * one more is refused (TOO_MANY_REQUESTS) before its token is checked (P136).
     */
    WEBSOCKET_MAX_OPERATIONS: z.coerce.number().int().min(1).max(100_000).default(200),
    /** On SIGTERM: /readyz answers 503 and responses carry `Connection: close` for this long before the listener closes. */
    SHUTDOWN_DRAIN_MS: z.coerce.number().int().min(0).max(600_000).default(5_000),
    /** After the drain: in-flight requests get this long to finish before connections are cut. */
    SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).default(10000),
    GRAPHIQL: bool.optional(),
    /** Serve the demo dashboard on GET /dashboard (default: outside production). */
    DASHBOARD: bool.optional(),
    /** Serve Prometheus metrics on GET /metrics (no token). */
    METRICS: bool.default(true),
    /** base64url of 32 bytes: encrypts outbound provider secrets at rest. Unset: a key kept in the database. */
    SECRETS_KEY: z
      .string()
      .regex(/^[A-Za-z0-9_-]{43}$/, 'must be 32 bytes in base64url (43 characters)')
      .optional(),
    /** D10: one provider attempt's time limit, and retries after the first attempt (1 + N in all). */
    PROVIDER_TIMEOUT_MS: z.coerce.number().int().min(1).max(600_000).default(10_000),
    PROVIDER_RETRIES: z.coerce.number().int().min(0).max(10).default(2),
    /** First retry delay; doubled per retry with jitter (a Retry-After answer overrides it). */
    PROVIDER_BACKOFF_MS: z.coerce.number().int().min(0).max(60_000).default(200),
    /** Subject identifiers per provider call. */
    PROVIDER_BATCH_SIZE: z.coerce.number().int().min(1).max(1000).default(100),
    /** Pages followed per provider call before the answer counts as a failure (a provider looping). */
    PROVIDER_MAX_PAGES: z.coerce.number().int().min(1).max(10_000).default(100),
    /**
     * A data source's circuit opens when, within PROVIDER_BREAKER_WINDOW_MS, at least
     * PROVIDER_BREAKER_FAILURES calls were made and PROVIDER_BREAKER_THRESHOLD of them failed. It probes
     * after PROVIDER_BREAKER_PROBE_MS, a delay doubled while probes fail, up to PROVIDER_BREAKER_OPEN_MS
     * (1.5 s: reads with older data see a recovered provider within it, P88). A read with nothing cached
     * probes at once.
     */
    PROVIDER_BREAKER_FAILURES: z.coerce.number().int().min(1).default(5),
    PROVIDER_BREAKER_THRESHOLD: z.coerce.number().gt(0).max(1).default(0.5),
    PROVIDER_BREAKER_WINDOW_MS: z.coerce.number().int().min(100).max(3_600_000).default(10_000),
    PROVIDER_BREAKER_PROBE_MS: z.coerce.number().int().min(0).max(3_600_000).default(1_000),
    PROVIDER_BREAKER_OPEN_MS: z.coerce.number().int().min(0).default(1_500),
    /**
     * Provider calls in flight at once per data source and instance, readers and background re-fetches
     * together (one request's chunks are also started at most this many at a time); a Retry-After pauses
     * them all (P112). Replaces PROVIDER_READ_CONCURRENCY, which bounded each request alone.
     */
    PROVIDER_CONCURRENCY: z.coerce.number().int().min(1).max(100).default(8),
    /** Provider calls in flight at once for background re-fetches (per instance). */
    PROVIDER_REFETCH_CONCURRENCY: z.coerce.number().int().min(1).max(100).default(4),
    CACHE_TTL_SECONDS: z.coerce.number().int().min(1).default(86_400),
    /** The in-process cache's bound, counted as the entries' JSON length. */
    CACHE_MAX_BYTES: z.coerce
      .number()
      .int()
      .min(0)
      .default(64 * 1024 * 1024),
    /** D9: invitations go out over SMTP (smtp:// or smtps://, credentials in the URL); unset: they are logged. */
    SMTP_URL: z
      .string()
      .regex(/^smtps?:\/\/[^/?#\s]+/, 'must be an smtp:// or smtps:// URL')
      .optional(),
    /** The From of invitation mails; its domain also names the Message-IDs. */
    MAIL_FROM: z
      .string()
      .min(3)
      .regex(/@[^@\s>]+>?\s*$/, 'must be an e-mail address, optionally as "Name <address>"')
      .default('Subject portal <no-reply@localhost>'),
    /** Delivery attempts of one invitation before it is kept as a dead letter. */
    MAIL_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100).default(10),
    /** First retry delay, doubled per failed attempt (with jitter), at most MAIL_BACKOFF_MAX_MS. */
    MAIL_BACKOFF_MS: z.coerce.number().int().min(1).max(86_400_000).default(60_000),
    MAIL_BACKOFF_MAX_MS: z.coerce
      .number()
      .int()
      .min(1)
      .max(7 * 86_400_000)
      .default(3_600_000),
    /** How often a sender looks for due invitations without being woken (retries, other instances' rows). */
    MAIL_POLL_MS: z.coerce.number().int().min(10).max(3_600_000).default(5_000),
  })
  .refine((e) => e.DATABASE_POOLER === 'none' || e.DATABASE_URL !== undefined, {
    message: 'transaction needs DATABASE_URL (the pooler)',
    path: ['DATABASE_POOLER'],
  })
  // A pooler in transaction mode hands a connection to other clients after each transaction: LISTEN would be lost.
  .refine((e) => e.DATABASE_POOLER === 'none' || e.DATABASE_LISTEN_URL !== undefined, {
    message: 'required with DATABASE_POOLER=transaction: a direct connection to PostgreSQL for LISTEN (not through the pooler)',
    path: ['DATABASE_LISTEN_URL'],
  })
  .refine((e) => (e.AUTH_ISSUER === undefined) === (e.AUTH_JWKS_URL === undefined), {
    message: 'AUTH_ISSUER and AUTH_JWKS_URL must be set together',
    path: ['AUTH_JWKS_URL'],
  })
  // Replicas of the embedded database do not exist.
  .refine((e) => !e.DATABASE_REPLICA_URL?.length || e.DATABASE_URL !== undefined, {
    message: 'needs DATABASE_URL (the primary)',
    path: ['DATABASE_REPLICA_URL'],
  });

export type Config = z.infer<typeof envSchema> & { publicUrl: string };

/** Raised for an invalid environment; its message is the one line to print. */
export class ConfigError extends Error {}

/**
 * Parses the environment once, at start-up. A bad value throws a ConfigError whose message names the
 * variable, so the process can stop with one clear line.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // Empty strings mean "unset", as in most shells' `VAR= cmd`.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new ConfigError(`Invalid environment variable ${String(issue.path[0] ?? '')}: ${issue.message}`);
  }
  const c = parsed.data;
  const host = c.HOST.includes(':') ? `[${c.HOST}]` : c.HOST;
  return { ...c, publicUrl: (c.PUBLIC_URL ?? `http://${host}:${c.PORT}`).replace(/\/$/, '') };
}
