import { builder } from '../../../graphql/builder.js';
import { LIVE_AGGREGATE_MAX_DELAY_MS, LIVE_AGGREGATE_QUIET_MS, type AggregateDelivery } from './aggregate-subscription.js';
import { PARTIAL_ANSWER_EVERY_MS } from './partial-answers.js';
import {
  AGGREGATE_COST,
  DataPointAggregatesInputRef,
  DataPointAggregationRef,
  aggregateComplexity,
  requestedPercentiles,
} from './aggregate.schema.js';
import type { DataPointAggregatesInput } from './aggregate.service.js';

builder.subscriptionField('dataPointAggregatesChanged', (t) =>
  t.field({
    type: DataPointAggregationRef,
    nullable: true,
    authScopes: { permission: 'View:DataExtract' },
    description:
      'Live dataPointAggregates: the first event is the current answer to the question (as the query answers it), then a new ' +
      `event whenever data under it changes and the answer differs from the last one sent: computed ${LIVE_AGGREGATE_QUIET_MS} ms ` +
      `after the last change heard (at most ${LIVE_AGGREGATE_MAX_DELAY_MS} ms after the first of a burst), once for every subscriber ` +
      'of the same question, whichever instance took the change. A reader that falls behind gets only the latest answer. ' +
      "While the question's data is still being fetched from its provider, the current answer is preceded by partial answers " +
      `over the subjects located so far (coverage.pendingSubjectCount > 0: the first once the provider's first answer arrived, ` +
      `the next at most every ${PARTIAL_ANSWER_EVERY_MS} ms; none while at most one provider call's worth of subjects is missing), ` +
      'then the full one (pendingSubjectCount 0); a subscriber joining meanwhile gets the latest partial answer at once. No ' +
      'partial answer follows a full one; if the query refuses the full answer, the stream ends with that error. ' +
      "Refused as the query is (View:DataExtract and List:Subject, the input's bounds, the cost); counts under " +
      'SUBSCRIPTIONS_PER_CLIENT with dataPointsChanged. An event whose computation failed carries the error and the stream goes ' +
      'on; the stream ends with an error when the token expires (UNAUTHENTICATED) or when the instance can no longer hear ' +
      'changes (SERVICE_UNAVAILABLE): then subscribe again.',
    complexity: (args) => aggregateComplexity(args.input as DataPointAggregatesInput | undefined),
    args: {
      input: t.arg({
        type: DataPointAggregatesInputRef,
        required: true,
        description: 'What to aggregate, as dataPointAggregates takes it.',
      }),
    },
    // Its events are shared by the subscribers of one question: executed once for them (P129).
    extensions: { sharedEvents: true },
    subscribe: (_root, { input }, ctx, info) =>
      ctx.liveAggregates.open(ctx, input, requestedPercentiles(info), (ctx as { cost?: number }).cost ?? AGGREGATE_COST),
    resolve: (d: AggregateDelivery) => {
      if ('end' in d) throw d.end;
      if ('error' in d) throw d.error;
      return d.answer;
    },
  }),
);
