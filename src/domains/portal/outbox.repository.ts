import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db, MailOutboxRow, MailStatus } from '../../db/tables.js';
import { defineTopic, publish } from '../../db/event-bus.js';
import { type Connection, type PageArgs, type SortKey, paginate, countRows } from '../../db/paging.js';

/** Wakes every instance's sender when an invitation is queued (delivered on commit). */
export const MAIL_QUEUED = defineTopic<null>('portal.mail.queued', () => null);

export interface NewMail {
  portalUserId: string;
  recipient: string;
  subject: string;
  text: string;
  html: string;
}

/**
 * Queues mails inside the caller's transaction (D9: with the portal users they invite), and wakes the
 * senders of every instance once it commits.
 */
export async function enqueueMails(db: Db, tenantId: string, mails: readonly NewMail[]): Promise<void> {
  if (mails.length === 0) return;
  await db
    .insertInto('mail_outbox')
    .values(
      mails.map((m) => ({
        tenant_id: tenantId,
        id: randomUUID(),
        portal_user_id: m.portalUserId,
        recipient: m.recipient,
        message_id: null,
        subject: m.subject,
        text_body: m.text,
        html_body: m.html,
        claimed_until: null,
        claim_token: null,
        last_error: null,
        last_attempt_at: null,
        sent_at: null,
      })),
    )
    .execute();
  await publish(db, MAIL_QUEUED, null);
}

/**
 * Cancels the not yet sent mails of removed portal users. The claim token is kept: a send already in
 * progress that the SMTP server accepts is still recorded as sent.
 */
export async function cancelMails(db: Db, tenantId: string, portalUserIds: readonly string[]): Promise<number> {
  if (portalUserIds.length === 0) return 0;
  const r = await db
    .updateTable('mail_outbox')
    .set({ status: 'cancelled', claimed_until: null })
    .where('tenant_id', '=', tenantId)
    .where('portal_user_id', 'in', portalUserIds)
    .where('status', '=', 'pending')
    .executeTakeFirst();
  return Number(r.numUpdatedRows);
}

/** Queues the dead letters of these portal users again, from a first attempt (a repeated invitation). */
export async function reviveDeadMails(db: Db, tenantId: string, portalUserIds: readonly string[]): Promise<number> {
  if (portalUserIds.length === 0) return 0;
  const r = await db
    .updateTable('mail_outbox')
    .set({ status: 'pending', attempts: 0, next_attempt_at: sql<Date>`now()`, claimed_until: null, claim_token: null })
    .where('tenant_id', '=', tenantId)
    .where('portal_user_id', 'in', portalUserIds)
    .where('status', '=', 'dead')
    .executeTakeFirst();
  const n = Number(r.numUpdatedRows);
  if (n > 0) await publish(db, MAIL_QUEUED, null);
  return n;
}

/**
 * Claims up to `limit` due mails of every tenant for one sender: rows another sender is claiming at this
 * moment are skipped (FOR UPDATE SKIP LOCKED), and a claim holds for `leaseSeconds` (a sender that died
 * lets it lapse). The attempt is counted here, so a mail that crashes its sender still runs out of
 * attempts. The first claim fixes the Message-ID.
 */
export async function claimDueMails(
  db: Db,
  opts: { limit: number; leaseSeconds: number; token: string; messageIdDomain: string },
): Promise<MailOutboxRow[]> {
  const rows = await db
    .updateTable('mail_outbox as o')
    .set({
      claimed_until: sql<Date>`now() + make_interval(secs => ${opts.leaseSeconds})`,
      claim_token: opts.token,
      attempts: sql<number>`o.attempts + 1`,
      last_attempt_at: sql<Date>`now()`,
      message_id: sql<string>`coalesce(o.message_id, '<' || o.id::text || '@' || ${opts.messageIdDomain}::text || '>')`,
    })
    .where(({ eb, refTuple, selectFrom }) =>
      eb(
        refTuple('o.tenant_id', 'o.id'),
        'in',
        selectFrom('mail_outbox as d')
          .select(['d.tenant_id', 'd.id'])
          .where('d.status', '=', 'pending')
          .where('d.next_attempt_at', '<=', sql<Date>`now()`)
          .where((w) => w.or([w('d.claimed_until', 'is', null), w('d.claimed_until', '<', sql<Date>`now()`)]))
          .orderBy('d.next_attempt_at')
          .limit(opts.limit)
          .forUpdate()
          .skipLocked() as never,
      ),
    )
    .returningAll()
    .execute();
  return rows.sort((a, b) => a.next_attempt_at.getTime() - b.next_attempt_at.getTime());
}

/** Whether a claimed mail is still to be sent (not cancelled, the claim not lost) just before sending it. */
export async function stillClaimed(db: Db, m: Pick<MailOutboxRow, 'tenant_id' | 'id'>, token: string): Promise<boolean> {
  const r = await db
    .selectFrom('mail_outbox')
    .select('status')
    .where('tenant_id', '=', m.tenant_id)
    .where('id', '=', m.id)
    .where('claim_token', '=', token)
    .executeTakeFirst();
  return r?.status === 'pending';
}

/**
 * Records that the SMTP server accepted the mail; false when the claim was lost meanwhile. A mail cancelled
 * while its send was in progress stays cancelled (found by the fuzz suite): `sent_at` tells it went out.
 */
export async function markSent(db: Db, m: Pick<MailOutboxRow, 'tenant_id' | 'id'>, token: string): Promise<boolean> {
  const r = await db
    .updateTable('mail_outbox')
    .set({
      status: sql<MailStatus>`CASE WHEN status = 'cancelled' THEN status ELSE 'sent' END`,
      sent_at: sql<Date>`now()`,
      claimed_until: null,
      claim_token: null,
      last_error: null,
    })
    .where('tenant_id', '=', m.tenant_id)
    .where('id', '=', m.id)
    .where('claim_token', '=', token)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

/** Records a failed attempt: retried after `retryInMs`, or kept as a dead letter (a cancelled mail stays cancelled). */
export async function markFailed(
  db: Db,
  m: Pick<MailOutboxRow, 'tenant_id' | 'id'>,
  token: string,
  f: { error: string; dead: boolean; retryInMs: number },
): Promise<void> {
  await db
    .updateTable('mail_outbox')
    .set({
      status: sql<MailStatus>`CASE WHEN status = 'pending' AND ${f.dead} THEN 'dead' ELSE status END`,
      last_error: f.error,
      next_attempt_at: sql<Date>`now() + make_interval(secs => ${f.retryInMs / 1000})`,
      claimed_until: null,
      claim_token: null,
    })
    .where('tenant_id', '=', m.tenant_id)
    .where('id', '=', m.id)
    .where('claim_token', '=', token)
    .execute();
}

/** Gives back claimed mails that were not attempted (a sender stopping), without counting an attempt. */
export async function releaseClaims(db: Db, token: string, mails: readonly Pick<MailOutboxRow, 'tenant_id' | 'id'>[]): Promise<void> {
  if (mails.length === 0) return;
  await db
    .updateTable('mail_outbox')
    .set({ claimed_until: null, claim_token: null, attempts: sql<number>`attempts - 1` })
    .where('claim_token', '=', token)
    .where(({ eb, refTuple, tuple }) =>
      eb(
        refTuple('tenant_id', 'id'),
        'in',
        mails.map((m) => tuple(m.tenant_id, m.id)),
      ),
    )
    .execute();
}

/** Milliseconds until the next pending mail is due (a live claim counts until it lapses); null: none pending. */
export async function msUntilNextDue(db: Db): Promise<number | null> {
  const r = await db
    .selectFrom('mail_outbox')
    .select(
      sql<string | null>`extract(epoch FROM min(greatest(next_attempt_at, coalesce(claimed_until, next_attempt_at))) - now()) * 1000`.as(
        'ms',
      ),
    )
    .where('status', '=', 'pending')
    .executeTakeFirstOrThrow();
  return r.ms === null ? null : Math.max(0, Math.ceil(Number(r.ms)));
}

export interface OutboxStats {
  pending: number;
  /** Pending mails that failed at least once and wait for their next attempt. */
  retrying: number;
  dead: number;
  sent: number;
  cancelled: number;
  oldestPendingAt: Date | null;
  lastError: string | null;
  lastErrorAt: Date | null;
}

/** One tenant's outbox at a glance (operations, D9). */
export async function outboxStats(db: Db, tenantId: string): Promise<OutboxStats> {
  const [counts, last] = await Promise.all([
    db
      .selectFrom('mail_outbox')
      .select([
        'status',
        (eb) => eb.fn.countAll<string>().as('n'),
        // Failed at least once: an attempt in flight has counted itself but not failed yet (CI caught the
        // count ahead of its lastError). A failure's error stays until the mail is sent.
        sql<string>`count(*) FILTER (WHERE last_error IS NOT NULL)`.as('tried'),
        (eb) => eb.fn.min('created_at').as('oldest'),
      ])
      .where('tenant_id', '=', tenantId)
      .groupBy('status')
      .execute(),
    db
      .selectFrom('mail_outbox')
      .select(['last_error', 'last_attempt_at'])
      .where('tenant_id', '=', tenantId)
      .where('status', 'in', ['pending', 'dead'])
      .where('last_error', 'is not', null)
      .orderBy('last_attempt_at', 'desc')
      .limit(1)
      .executeTakeFirst(),
  ]);
  const of = (s: MailStatus) => counts.find((c) => c.status === s);
  const pending = of('pending');
  return {
    pending: Number(pending?.n ?? 0),
    retrying: Number(pending?.tried ?? 0),
    dead: Number(of('dead')?.n ?? 0),
    sent: Number(of('sent')?.n ?? 0),
    cancelled: Number(of('cancelled')?.n ?? 0),
    oldestPendingAt: pending?.oldest ? new Date(pending.oldest as Date) : null,
    lastError: last?.last_error ?? null,
    lastErrorAt: last?.last_attempt_at ?? null,
  };
}

/** A tenant's outbox mails as `m` (of one status, when given); the caller orders and pages. */
export function outboxListQuery(db: Db, tenantId: string, status: MailStatus | null | undefined) {
  let q = db.selectFrom('mail_outbox as m').selectAll('m').where('m.tenant_id', '=', tenantId);
  if (status) q = q.where('m.status', '=', status);
  return q;
}

/** One page of a tenant's outbox mails (of one status, when given) in queue order (CreatedAt). */
export async function pageOutboxMails(
  db: Db,
  tenantId: string,
  status: MailStatus | null | undefined,
  args: PageArgs,
): Promise<Connection<MailOutboxRow>> {
  const query = outboxListQuery(db, tenantId, status);
  const count = () => countRows(query);
  const sort: SortKey = {
    name: 'CreatedAt',
    value: sql.ref('m.created_at'),
    type: 'timestamptz',
    nullable: false,
    id: sql.ref('m.id'),
    idType: 'uuid',
  };
  return paginate<MailOutboxRow>({ list: `outboxMail~${status ?? ''}`, query, count, sort, args });
}
