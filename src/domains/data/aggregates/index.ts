// dataPointAggregates and its live twin: their schema (registered by importing this door), the statistics,
// the memory of answers and the instance's live aggregates.
import './aggregate.schema.js';
import './aggregate-subscription.schema.js';

export { type Admit, LiveAggregates } from './aggregate-subscription.js';
export { AggregateMemory, DEFAULT_AGGREGATE_SUBJECTS, MAX_AGGREGATE_SUBJECTS } from './aggregate.service.js';
