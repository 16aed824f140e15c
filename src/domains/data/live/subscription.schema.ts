import type { Response } from 'express';
import { builder } from '../../../graphql/builder.js';
import type { Context } from '../../../graphql/context.js';
import { NotFoundError, ValidationError } from '../../../core/errors.js';
import { findEntitiesByKeys } from '../../structural-entity/index.js';
import { subjectUuid } from '../../subject/index.js';
import { CHANGE_KINDS } from './events.js';
import type { DataPointsChangeOut, Delivery } from './feed.js';
import { findExtracts } from '../model/index.js';

/**
 * Ends a subscription's deliveries when its client goes away (frees its place under
 * SUBSCRIPTIONS_PER_CLIENT), at once if it went while the subscription was being opened.
 */
export function endWhenClientGoes(ctx: Context, deliveries: AsyncIterator<unknown>): void {
  const res = (ctx as Context & { res?: Response }).res;
  if (res?.closed) void deliveries.return?.();
  else res?.once('close', () => void deliveries.return?.());
}

/** subjectIds of one subscription: at most this many. */
export const MAX_SUBSCRIBED_SUBJECTS = 1_000;

const DataPointsChangeKindEnum = builder.enumType('DataPointsChangeKind', {
  description: 'What happened to the data points.',
  values: {
    CHANGED: {
      value: 'CHANGED',
      description: 'A provider reported created or updated data points, or a background re-fetch stored other data than was cached.',
    },
    REMOVED: { value: 'REMOVED', description: 'A provider reported data points removed.' },
    REFRESHED: { value: 'REFRESHED', description: 'The extract was refreshed or its options changed (every subject).' },
  } as const satisfies Record<(typeof CHANGE_KINDS)[number], { value: (typeof CHANGE_KINDS)[number]; description: string }>,
});

const DataPointsChangeRef = builder.objectRef<DataPointsChangeOut>('DataPointsChange').implement({
  description: "Some subjects' data points of one extract changed: read them again.",
  fields: (t) => ({
    extractKey: t.exposeString('extractKey', { description: 'Key of the extract.' }),
    subjectIds: t.exposeIDList('subjectIds', {
      description: 'The subjects (UUIDs) whose data points changed; empty: every subject of the extract.',
    }),
    kind: t.field({ type: DataPointsChangeKindEnum, description: 'What happened.', resolve: (c) => c.kind }),
    at: t.exposeString('at', { description: 'When the change was made (ISO 8601).' }),
  }),
});

builder.subscriptionField('dataPointsChanged', (t) =>
  t.field({
    type: DataPointsChangeRef,
    nullable: true,
    authScopes: { permission: 'View:DataExtract' },
    description:
      "Live: an event whenever data points of the tenant's extracts change (a change report, a removal, a refresh, or a " +
      'background re-fetch that got other data), whichever instance took the change. Each argument narrows it. The stream ' +
      'ends with an error when the token expires (UNAUTHENTICATED), when the subscriber falls too far behind (SLOW_CONSUMER) ' +
      'or when the instance can no longer hear changes (SERVICE_UNAVAILABLE): then subscribe again and reload.',
    args: {
      extractKey: t.arg.string({ description: 'Only this extract.' }),
      subjectIds: t.arg.idList({ description: `Only these subjects (UUIDs or global ids, at most ${MAX_SUBSCRIBED_SUBJECTS}).` }),
      structuralEntityKey: t.arg.string({
        description: 'Only subjects located at this structural entity or below it (as located when a change arrives).',
      }),
    },
    subscribe: async (_root, args, ctx) => {
      const { tenantId } = ctx.principal;
      if (args.subjectIds && args.subjectIds.length > MAX_SUBSCRIBED_SUBJECTS)
        throw ValidationError.at('subjectIds', `At most ${MAX_SUBSCRIBED_SUBJECTS} subjects.`);
      if (typeof args.extractKey === 'string' && (await findExtracts(ctx.db, tenantId, [args.extractKey])).length === 0)
        throw new NotFoundError(`No data extract has the key '${args.extractKey}'.`);
      if (
        typeof args.structuralEntityKey === 'string' &&
        (await findEntitiesByKeys(ctx.db, tenantId, [args.structuralEntityKey])).length === 0
      )
        throw new NotFoundError(`No structural entity has the key '${args.structuralEntityKey}'.`);
      const deliveries = ctx.dataChanges.open(ctx.principal, {
        extractKey: args.extractKey ?? undefined,
        subjectIds: args.subjectIds ? new Set(args.subjectIds.map((id) => subjectUuid(String(id)))) : undefined,
        structuralEntityKey: args.structuralEntityKey ?? undefined,
      });
      endWhenClientGoes(ctx, deliveries);
      return deliveries;
    },
    resolve: (d: Delivery) => {
      if ('end' in d) throw d.end;
      return d.change;
    },
  }),
);
