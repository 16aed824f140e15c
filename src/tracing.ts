import { register } from 'node:module';
import { tracingWanted } from './core/tracing.js';

// OpenTelemetry traces (P139), started before the service's modules: `node --import ./dist/src/tracing.js
// dist/src/server.js`, as `npm start` runs it. An ESM program's imports are all loaded before any of its
// code runs, so the instrumentations must be in place first to patch `http` and `pg` as they load. The SDK
// reads OpenTelemetry's variables itself (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_*, OTEL_TRACES_SAMPLER, …);
// without them nothing of it is loaded.

if (tracingWanted()) {
  try {
    // Imports of `node:http` and `pg` from ESM reach the instrumentations through this loader hook
    // (OpenTelemetry's documented way for ESM); only those modules are wrapped.
    register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, { data: { include: ['http', 'pg', 'pg-pool'] } });
    const [{ NodeSDK }, { HttpInstrumentation }, { UndiciInstrumentation }, { PgInstrumentation }] = await Promise.all([
      import('@opentelemetry/sdk-node'),
      import('@opentelemetry/instrumentation-http'),
      import('@opentelemetry/instrumentation-undici'),
      import('@opentelemetry/instrumentation-pg'),
    ]);
    const probes = new Set(['/healthz', '/readyz', '/metrics']);
    new NodeSDK({
      instrumentations: [
        new HttpInstrumentation({
          // Server spans, accepting the caller's `traceparent`; the probes and scrapes are not traced.
          ignoreIncomingRequestHook: (req) => probes.has((req.url ?? '').split('?')[0]!),
          // A query's values are a client's data (GraphQL GET variables, REST search terms): its names only.
          startIncomingSpanHook: (req) => {
            const query = ('url' in req ? (req.url ?? '') : '').split('?')[1];
            return query ? { 'url.query': [...new URLSearchParams(query).keys()].map((k) => `${k}=REDACTED`).join('&') } : {};
          },
        }),
        // fetch: the provider calls and token requests, with `traceparent` sent.
        new UndiciInstrumentation(),
        // PostgreSQL's statements, within a trace only (not the migrations' at start-up). The embedded
        // database's are src/db/tracing.ts's, made alike.
        ...(process.env['DATABASE_URL'] ? [new PgInstrumentation({ requireParentSpan: true })] : []),
      ],
      // Traces only: the metrics are /metrics' (Prometheus), and the logs carry the trace id.
      metricReaders: [],
      logRecordProcessors: [],
    }).start();
  } catch (e) {
    // Traces are an aid: the service starts without them.
    process.stderr.write(`OpenTelemetry tracing could not start; the service runs untraced: ${(e as Error)?.stack ?? String(e)}\n`);
  }
}
