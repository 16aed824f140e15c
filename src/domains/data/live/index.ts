// Live updates: the data points change event, the instance's fan-out of it to subscriptions, and the
// dataPointsChanged field (registered by importing this door).
import './subscription.schema.js';

export { type ChangeKind, type DataPointsChange, newBurst, publishDataPointsChange } from './events.js';
export { DataChangeFeed, type Delivery, type LiveMeter, MAX_PENDING_BURSTS, MAX_PENDING_SUBJECTS, endAtTokenExpiry } from './feed.js';
export { endWhenClientGoes } from './subscription.schema.js';
