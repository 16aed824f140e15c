// The provider client: calls, tokens and the resilience policies (timeout, breaker, retries).
export {
  type BreakerState,
  CircuitOpenError,
  ProviderClient,
  ProviderError,
  type ProviderPolicy,
  type ProviderSource,
} from './provider-client.js';
export type { ProviderFault, ProviderMeter, TokenOutcome } from './meter.js';
