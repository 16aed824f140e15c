import { createContextCache } from '@pothos/core';
import { builder } from '../../graphql/builder.js';
import { orderArgs, pageComplexity } from '../../graphql/connections.js';
import type { Context } from '../../graphql/context.js';
import type { MailOutboxRow, MailStatus, PortalUserRow } from '../../db/tables.js';
import { NotFoundError, ValidationError } from '../../core/errors.js';
import { type PageArgs, paginateLoaded } from '../../db/paging.js';
import { SubjectRef, findSubjectsByIds, subjectUuid } from '../subject/index.js';
import { outboxStats, pageOutboxMails } from './outbox.repository.js';
import { type PortalUserOrder, loadPortalConfig, pagePortalUsers, portalUserList } from './portal.repository.js';
import { inviteToPortal, removePortalAccess } from './portal.service.js';

export const PortalUserRef = builder.objectRef<PortalUserRow>('PortalUser').implement({
  description: 'A user with access to a subject through the subject portal (D9).',
  fields: (t) => ({
    id: t.exposeID('id', { description: 'Identifier of the portal user.' }),
    displayName: t.exposeString('display_name', {
      description: "Self access: the subject's display name; third party: the e-mail address.",
    }),
    email: t.exposeString('email', { description: 'An e-mail address.' }),
    inviteMethod: t.exposeString('invite_method', { description: 'SelfAccess or ThirdParty.' }),
  }),
});

const PortalUserConnection = builder.connectionObject({ type: PortalUserRef, name: 'PortalUserConnection' });

/** The tenant's portal block, read once per request. */
const portalConfig = createContextCache((ctx: Context) => loadPortalConfig(ctx.db, ctx.principal.tenantId));

/** D6 for portal users: by e-mail (default, compared case-insensitively) or DisplayName; ties by id. */
function portalUserOrder(orderBy: string | null | undefined): PortalUserOrder {
  const name = (orderBy ?? 'Email').toLowerCase();
  if (name === 'email') return 'Email';
  if (name === 'displayname') return 'DisplayName';
  throw ValidationError.at('orderBy', `Unknown OrderBy '${orderBy}'. Use Email or DisplayName.`);
}

/** One page of a subject's portal users (D9: an empty page when the portal is not configured). */
async function portalUsersPage(ctx: Context, subjectId: string, args: PageArgs) {
  const order = portalUserOrder(args.orderBy);
  if (!(await portalConfig(ctx))) {
    return paginateLoaded<PortalUserRow>({
      list: portalUserList(subjectId),
      sortName: order,
      items: [],
      position: (u) => ({ v: u.email_key, i: u.id }),
      args,
    });
  }
  return pagePortalUsers(ctx.db, ctx.principal.tenantId, subjectId, order, args);
}

builder.objectField(SubjectRef, 'portalUsers', (t) =>
  t.connection(
    {
      type: PortalUserRef,
      nullable: true,
      complexity: pageComplexity,
      description: 'Users with access to the subject through the subject portal, by e-mail (D9).',
      authScopes: { permission: 'View:SubjectAccessInvite' },
      args: orderArgs(t.arg),
      resolve: (subject, args, ctx) => portalUsersPage(ctx, subject.id, args),
    },
    PortalUserConnection,
  ),
);

const MailStatusEnum = builder.enumType('MailStatus', {
  description: 'Delivery state of an invitation mail.',
  values: {
    PENDING: { value: 'pending', description: 'Queued or waiting for its next attempt.' },
    SENT: { value: 'sent', description: 'Accepted by the SMTP server (or logged, without SMTP_URL).' },
    DEAD: { value: 'dead', description: 'Not delivered after MAIL_MAX_ATTEMPTS attempts (or refused for good); kept.' },
    CANCELLED: { value: 'cancelled', description: 'Access was removed before the mail was sent.' },
  } as const,
});

const OutboxMailRef = builder.objectRef<MailOutboxRow>('OutboxMail').implement({
  description: 'One invitation mail in the outbox.',
  fields: (t) => ({
    id: t.exposeID('id', { description: 'Identifier of the mail.' }),
    portalUserId: t.exposeID('portal_user_id', {
      nullable: true,
      description: 'The invited portal user (who may have been removed since).',
    }),
    recipient: t.exposeString('recipient', { description: 'E-mail address the mail goes to.' }),
    subject: t.exposeString('subject', { description: "The mail's subject line." }),
    status: t.field({ type: MailStatusEnum, description: 'Delivery state.', resolve: (m) => m.status }),
    attempts: t.exposeInt('attempts', { description: 'Delivery attempts made so far.' }),
    messageId: t.exposeString('message_id', {
      nullable: true,
      description: 'Fixed by the first attempt; every later attempt sends the same.',
    }),
    lastError: t.exposeString('last_error', { nullable: true, description: 'Error of the latest failed attempt.' }),
    createdAt: t.string({ description: 'When the mail was queued (ISO 8601, UTC).', resolve: (m) => m.created_at.toISOString() }),
    lastAttemptAt: t.string({
      nullable: true,
      description: 'When the latest attempt ran (ISO 8601, UTC).',
      resolve: (m) => m.last_attempt_at?.toISOString() ?? null,
    }),
    nextAttemptAt: t.string({
      nullable: true,
      description: 'When a pending mail is next tried (ISO 8601, UTC); null unless pending.',
      resolve: (m) => (m.status === 'pending' ? m.next_attempt_at.toISOString() : null),
    }),
    sentAt: t.string({
      nullable: true,
      description: 'When the mail was sent (ISO 8601, UTC).',
      resolve: (m) => m.sent_at?.toISOString() ?? null,
    }),
  }),
});

const OutboxMailConnection = builder.connectionObject({ type: OutboxMailRef, name: 'OutboxMailConnection' });

const stats = createContextCache((ctx: Context) => outboxStats(ctx.db, ctx.principal.tenantId));

const MailOutboxRef = builder.objectRef<{ tenantId: string }>('MailOutbox').implement({
  description: "The tenant's invitation outbox: backlog, failures and dead letters (D9 operations).",
  fields: (t) => ({
    pending: t.int({
      description: 'Mails not yet sent (queued or waiting for a retry).',
      resolve: async (_o, _a, ctx) => (await stats(ctx)).pending,
    }),
    retrying: t.int({
      description: 'Pending mails that failed at least once.',
      resolve: async (_o, _a, ctx) => (await stats(ctx)).retrying,
    }),
    dead: t.int({
      description: 'Dead letters: kept, never dropped; inviting the user again queues them again.',
      resolve: async (_o, _a, ctx) => (await stats(ctx)).dead,
    }),
    sent: t.int({ description: 'Mails sent.', resolve: async (_o, _a, ctx) => (await stats(ctx)).sent }),
    cancelled: t.int({
      description: 'Mails cancelled because access was removed before sending.',
      resolve: async (_o, _a, ctx) => (await stats(ctx)).cancelled,
    }),
    oldestPendingAt: t.string({
      nullable: true,
      description: 'When the oldest pending mail was queued (ISO 8601, UTC); null when none is pending.',
      resolve: async (_o, _a, ctx) => (await stats(ctx)).oldestPendingAt?.toISOString() ?? null,
    }),
    lastError: t.string({
      nullable: true,
      description: 'The latest error of a mail still pending or dead.',
      resolve: async (_o, _a, ctx) => (await stats(ctx)).lastError,
    }),
    lastErrorAt: t.string({
      nullable: true,
      description: 'When lastError happened (ISO 8601, UTC).',
      resolve: async (_o, _a, ctx) => (await stats(ctx)).lastErrorAt?.toISOString() ?? null,
    }),
    messages: t.connection(
      {
        type: OutboxMailRef,
        complexity: pageComplexity,
        description: 'The mails in queue order (orderBy: CreatedAt), of one status when given.',
        args: { status: t.arg({ type: MailStatusEnum, description: 'Only mails in this state.' }), ...orderArgs(t.arg) },
        resolve: (o, args, ctx) => {
          if (args.orderBy && args.orderBy.toLowerCase() !== 'createdat')
            throw ValidationError.at('orderBy', `Unknown OrderBy '${args.orderBy}'. Use CreatedAt.`);
          return pageOutboxMails(ctx.db, o.tenantId, args.status as MailStatus | null | undefined, args);
        },
      },
      OutboxMailConnection,
    ),
  }),
});

builder.queryFields((t) => ({
  subjectPortalUsers: t.connection(
    {
      type: PortalUserRef,
      nullable: true,
      complexity: pageComplexity,
      description: "A subject's portal users, by e-mail (D9); the twin of GET subjectAccessUsers, needing only View:SubjectAccessInvite.",
      authScopes: { permission: 'View:SubjectAccessInvite' },
      args: { subjectId: t.arg.id({ required: true, description: 'The subject UUID (or its global id).' }), ...orderArgs(t.arg) },
      resolve: async (_root, args, ctx) => {
        const [subject] = await findSubjectsByIds(ctx.db, ctx.principal.tenantId, [subjectUuid(args.subjectId)]);
        if (!subject) throw new NotFoundError('No subject has this id.');
        return portalUsersPage(ctx, subject.id, args);
      },
    },
    PortalUserConnection,
  ),
  mailOutbox: t.field({
    type: MailOutboxRef,
    nullable: true,
    description: "The tenant's invitation outbox (View:SubjectAccessInvite).",
    authScopes: { permission: 'View:SubjectAccessInvite' },
    resolve: (_root, _args, ctx) => ({ tenantId: ctx.principal.tenantId }),
  }),
}));

interface PortalPayload {
  subjectId: string;
  portalUsers: PortalUserRow[];
}

/**
 * The two portal access mutations differ in their permission, list argument and service: one table.
 * Each takes the subject (UUID or global id) and an optional list of e-mail addresses.
 */
const portalAccessMutations = [
  {
    field: 'inviteSubjectToPortal',
    description:
      'Invites to the subject portal (Create:SubjectAccessInvite): without emails the subject itself (self access), with emails those third parties (D9).',
    input: 'InviteSubjectToPortalInput',
    inputDescription: 'A subject and whom to invite to its portal.',
    list: 'emails',
    listDescription: 'Third-party e-mail addresses; absent or null: self access.',
    payload: 'InviteSubjectToPortalPayload',
    payloadTypeDescription: 'The result of inviteSubjectToPortal.',
    payloadDescription: 'The portal users the call concerns (new or already invited), in the order named.',
    run: inviteToPortal,
  },
  {
    field: 'removeSubjectPortalAccess',
    description:
      'Removes portal access (Delete:SubjectAccessInvite): those third-party users, or without thirdPartyUserEmails the self-access user (D9).',
    input: 'RemoveSubjectPortalAccessInput',
    inputDescription: 'A subject and whose portal access to remove.',
    list: 'thirdPartyUserEmails',
    listDescription: 'Third-party users to remove (unknown addresses are ignored); absent or null: the self-access user.',
    payload: 'RemoveSubjectPortalAccessPayload',
    payloadTypeDescription: 'The result of removeSubjectPortalAccess.',
    payloadDescription: 'The portal users the call removed, by e-mail.',
    run: removePortalAccess,
  },
] as const;

for (const m of portalAccessMutations) {
  const Payload = builder.objectRef<PortalPayload>(m.payload).implement({
    description: m.payloadTypeDescription,
    fields: (t) => ({
      portalUsers: t.field({ type: [PortalUserRef], description: m.payloadDescription, resolve: (p) => p.portalUsers }),
      subject: t.field({
        type: SubjectRef,
        nullable: true,
        description: 'The subject (View:Subject).',
        authScopes: { permission: 'View:Subject' },
        resolve: (p) => p.subjectId,
      }),
    }),
  });
  const Input = builder.inputType(m.input, {
    description: m.inputDescription,
    fields: (f) => ({
      subjectId: f.id({ required: true, description: 'The subject UUID (or its global id).' }),
      [m.list]: f.stringList({ description: m.listDescription }),
    }),
  });
  builder.mutationField(m.field, (t) =>
    t.field({
      type: Payload,
      nullable: true,
      description: m.description,
      args: { input: t.arg({ type: Input, required: true, description: 'The subject and e-mail addresses.' }) },
      resolve: async (_root, { input }, ctx) => {
        // The list's name is computed, so Pothos types the input as a record: its two fields as declared above.
        const sent = input as { subjectId: string } & Record<string, readonly string[] | null | undefined>;
        const subjectId = subjectUuid(sent.subjectId);
        return { subjectId, portalUsers: await m.run(ctx, subjectId, sent[m.list]) };
      },
    }),
  );
}
