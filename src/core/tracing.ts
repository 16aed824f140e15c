import {
  ROOT_CONTEXT,
  ProxyTracerProvider,
  type SpanContext,
  type Tracer,
  TraceFlags,
  context,
  isSpanContextValid,
  trace,
} from '@opentelemetry/api';

// OpenTelemetry as the service's code sees it: the API only. The SDK is started by src/tracing.ts, loaded
// before the service's modules; without it every span below is the API's no-op.

/**
 * The service's own spans: GraphQL operations, REST routes, admission, the data cache, PGlite statements.
 * Process-wide as the provider is: a ProxyTracer, which delegates to the SDK's once the preload registered it.
 */
export const tracer: Tracer = trace.getTracer('ssdi-service');

/**
 * Whether OpenTelemetry's variables ask for traces: an OTLP endpoint (or an exporter) named, the SDK not
 * disabled, and the exporter not `none` (as the SDK reads them).
 */
export function tracingWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env['OTEL_SDK_DISABLED']?.trim().toLowerCase() === 'true') return false;
  const exporter = env['OTEL_TRACES_EXPORTER']?.trim();
  if (exporter?.split(',')[0]?.trim() === 'none') return false;
  return Boolean(env['OTEL_EXPORTER_OTLP_ENDPOINT'] || env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] || exporter);
}

/** The SDK's tracer provider, registered by src/tracing.ts; absent when the process does not trace. */
function sdkProvider(): { shutdown(): Promise<void> } | undefined {
  const global = trace.getTracerProvider();
  const provider = global instanceof ProxyTracerProvider ? global.getDelegate() : global;
  return 'shutdown' in provider ? (provider as { shutdown(): Promise<void> }) : undefined;
}

/** Whether the process traces: src/tracing.ts started the SDK. */
export function tracingOn(): boolean {
  return sdkProvider() !== undefined;
}

/** Exports the spans still buffered and stops the SDK, waiting at most `ms`. */
export async function flushTracing(ms: number): Promise<void> {
  const provider = sdkProvider();
  if (!provider) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([provider.shutdown().catch(() => {}), new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

/**
 * Runs `fn` outside any trace: background work started by a request (a timer, a NOTIFY's subscribers)
 * would otherwise inherit its context, its spans joining a trace that ended and its log lines another
 * request's trace id.
 */
export function detached<T>(fn: () => T): T {
  return context.with(ROOT_CONTEXT, fn);
}

/** The active span's context if it is sampled: an unsampled trace is found nowhere, so it is not named. */
function sampledSpan(): SpanContext | undefined {
  const span = trace.getActiveSpan()?.spanContext();
  return span && isSpanContextValid(span) && span.traceFlags & TraceFlags.SAMPLED ? span : undefined;
}

/** The active span's trace id: what finds this request's trace in the tracing backend. */
export function activeTraceId(): string | undefined {
  return sampledSpan()?.traceId;
}

/** The active span's ids as a log line carries them (OpenTelemetry's log field names). */
export function traceLogFields(): { trace_id?: string; span_id?: string } {
  const span = sampledSpan();
  return span ? { trace_id: span.traceId, span_id: span.spanId } : {};
}
