// dataPointAggregates: its schema (registered by importing this door), the statistics and the memory of answers.
import './aggregate.schema.js';

export { AggregateMemory, MAX_AGGREGATE_SUBJECTS } from './aggregate.service.js';
