/** Why an attempt at a provider failed: the answer (not 200), the answer's content, the network, its time limit, its token; or none made, the circuit being open. */
export type ProviderFault = 'http_error' | 'invalid_answer' | 'unreachable' | 'timeout' | 'token_error' | 'refused';

/** What a request to a data source's token endpoint came to. */
export type TokenOutcome = 'ok' | 'http_error' | 'rejected' | 'unreachable' | 'timeout';

/**
 * What the provider client tells the instance's metrics: each attempt at get-data-points (a page, a
 * retry, a probe) and each token request, by data source key, with how long it took. Refused attempts
 * (`refused`) reached no provider.
 */
export interface ProviderMeter {
  call(dataSource: string, outcome: 'ok' | ProviderFault, seconds: number): void;
  token(dataSource: string, outcome: TokenOutcome, seconds: number): void;
}
