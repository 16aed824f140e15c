/**
 * A subscription event whose execution every subscriber it reaches may share (P129): whoever publishes it
 * hands the very same object only to subscribers who may see the same answer (one tenant, one permission
 * set), and the fields it resolves read nothing of a subscriber's context but that. The Yoga plugin
 * `sharedSubscriptionResults` then executes an operation's selection once per such event, document and
 * variables, and hands every subscriber the same result (and its JSON text).
 */
export const SHARED_EVENT: unique symbol = Symbol('shared subscription event');

export interface SharedEvent {
  readonly [SHARED_EVENT]: true;
}

export const isSharedEvent = (payload: unknown): payload is SharedEvent =>
  typeof payload === 'object' && payload !== null && SHARED_EVENT in payload;
