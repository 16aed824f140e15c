import { z } from 'zod';
import type { Db, PortalConfigRow, PortalUserRow, SubjectRow } from '../../db/tables.js';
import { inTransaction } from '../../db/transaction.js';
import { ConflictError, ErrorCollector, NotFoundError, ValidationError } from '../../core/errors.js';
import { type Permission, requirePermission } from '../../core/permissions.js';
import type { Context } from '../../graphql/context.js';
import { type SubjectConfig, firstText, loadSubjectConfig, lockSubjectById } from '../subject/index.js';
import { type InvitationTemplate, invitationValues, renderInvitation } from './invitation-mail.js';
import { type NewMail, cancelMails, enqueueMails, reviveDeadMails } from './outbox.repository.js';
import {
  deletePortalUsers,
  findPortalUsersByEmail,
  findSelfAccessUser,
  findTenantName,
  insertPortalUser,
  loadPortalConfig,
  updatePortalUser,
  upsertPortalConfig,
} from './portal.repository.js';

/** E-mails one call may name (as a page, D6). */
export const MAX_EMAILS = 1000;

const EMAIL = z.email().max(254);
const NOT_FOUND = 'No subject has this id.';

/** Whether `s` is an e-mail address the service accepts (D9: anything else is 400, or 409 for a subject's own). */
export function isEmail(s: string): boolean {
  return EMAIL.safeParse(s).success;
}

const emailKey = (email: string) => email.toLowerCase();

const hasValue = (v: unknown) => v !== undefined && v !== null && v !== '' && !(Array.isArray(v) && v.length === 0);

/** D3: the subject's display name from `displayNameFieldKey`, its ExternalId when that is absent or empty. */
function subjectDisplayName(subject: SubjectRow, portal: PortalConfigRow, fields: SubjectConfig): string {
  const key = portal.display_name_field_key;
  const def = key ? fields.byKey.get(key) : undefined;
  const name = def ? firstText(def.dataType, subject.values[def.key]) : null;
  return name?.trim() ? name : (subject.external_id ?? subject.id);
}

/** The subject, locked for the call (portal writes of one subject run one after the other), or 404. */
async function lockSubject(trx: Db, tenantId: string, subjectId: string): Promise<SubjectRow> {
  const subject = await lockSubjectById(trx, tenantId, subjectId);
  if (!subject) throw new NotFoundError(NOT_FOUND);
  return subject;
}

/** D9 409s: the portal is configured and the access kind the call needs is enabled. */
function requireAccessKind(portal: PortalConfigRow | undefined, thirdParty: boolean): PortalConfigRow {
  if (!portal) throw new ConflictError('The subject portal is not configured for this tenant.');
  if (thirdParty && !portal.third_party_access_enabled)
    throw new ConflictError('Third-party access to the subject portal is not enabled for this tenant.');
  if (!thirdParty && !portal.self_access_enabled)
    throw new ConflictError('Self access to the subject portal is not enabled for this tenant.');
  return portal;
}

interface MailContext {
  template: InvitationTemplate;
  tenantName: string;
  subjectName: string;
}

function invitationMail(user: PortalUserRow, ctx: MailContext): NewMail {
  const rendered = renderInvitation(
    ctx.template,
    invitationValues({
      displayName: user.display_name,
      email: user.email,
      subjectName: ctx.subjectName,
      tenantName: ctx.tenantName,
      inviteMethod: user.invite_method,
    }),
  );
  return { portalUserId: user.id, recipient: user.email, ...rendered };
}

/** Checks the permission (403 first), then runs `fn` in one transaction with the subject locked (404 when unknown). */
function onLockedSubject<T>(
  ctx: Pick<Context, 'db' | 'principal'>,
  permission: Permission,
  subjectId: string,
  fn: (trx: Db, tenantId: string, subject: SubjectRow) => Promise<T>,
): Promise<T> {
  requirePermission(ctx.principal, permission);
  const tenantId = ctx.principal.tenantId;
  return inTransaction(ctx.db, async (trx) => fn(trx, tenantId, await lockSubject(trx, tenantId, subjectId)));
}

/**
 * POST /api/v1/subject/{id}/invite (D9). `emails` absent or null: self access, the subject's own e-mail
 * (portal.emailFieldKey); a list: third-party access for those addresses. Idempotent per (subject,
 * e-mail, compared case-insensitively): a user already invited is returned as is (a dead invitation
 * mail of theirs is queued again), and only new users get a mail, queued in the same transaction.
 * Order of checks: 403, 404, 400 (malformed e-mails, each by index), then the 409s.
 */
export async function inviteToPortal(
  ctx: Pick<Context, 'db' | 'principal'>,
  subjectId: string,
  emails: readonly string[] | null | undefined,
): Promise<PortalUserRow[]> {
  return onLockedSubject(ctx, 'Create:SubjectAccessInvite', subjectId, async (trx, tenantId, subject) => {
    const thirdParty = emails !== null && emails !== undefined;
    if (thirdParty) {
      if (emails.length > MAX_EMAILS) throw ValidationError.at('emails', `At most ${MAX_EMAILS} e-mail addresses at once.`);
      const errors = new ErrorCollector();
      emails.forEach((e, i) => {
        if (!isEmail(e)) errors.add(`emails[${i}]`, `'${e}' is not a valid e-mail address.`);
      });
      errors.throwIfAny();
    }
    const portal = requireAccessKind(await loadPortalConfig(trx, tenantId), thirdParty);
    const missing = portal.invitation_field_keys.filter((k) => !hasValue(subject.values[k]));
    if (missing.length > 0) {
      throw new ConflictError(
        `The subject has no value for ${missing.map((k) => `'${k}'`).join(', ')}, which an invitation requires (portal.invitationFieldKeys).`,
      );
    }
    const fields = await loadSubjectConfig(trx, tenantId);
    const mail: MailContext = {
      template: { subject: portal.invitation_subject, text: portal.invitation_text, html: portal.invitation_html },
      tenantName: await findTenantName(trx, tenantId),
      subjectName: subjectDisplayName(subject, portal, fields),
    };
    return thirdParty
      ? inviteThirdParties(trx, tenantId, subject, emails, mail)
      : [await inviteSelf(trx, tenantId, subject, portal, fields, mail)];
  });
}

async function inviteThirdParties(
  trx: Db,
  tenantId: string,
  subject: SubjectRow,
  emails: readonly string[],
  mail: MailContext,
): Promise<PortalUserRow[]> {
  // One user per address, in the order first named, spelled as first named.
  const wanted = new Map<string, string>();
  for (const e of emails) if (!wanted.has(emailKey(e))) wanted.set(emailKey(e), e);
  const existing = new Map((await findPortalUsersByEmail(trx, tenantId, subject.id, [...wanted.keys()])).map((u) => [u.email_key, u]));
  const users: PortalUserRow[] = [];
  const mails: NewMail[] = [];
  for (const [key, email] of wanted) {
    let user = existing.get(key);
    if (!user) {
      // A third party's display name is its e-mail (D3).
      user = await insertPortalUser(trx, tenantId, { subjectId: subject.id, email, displayName: email, inviteMethod: 'ThirdParty' });
      if (!user) throw new ConflictError('The portal users of this subject changed concurrently; retry the request.');
      mails.push(invitationMail(user, mail));
    }
    users.push(user);
  }
  await reviveDeadMails(
    trx,
    tenantId,
    [...existing.values()].map((u) => u.id),
  );
  await enqueueMails(trx, tenantId, mails);
  return users;
}

/**
 * The subject's own user: its e-mail from portal.emailFieldKey, its display name the subject's (D3). When
 * the subject's e-mail changed since an earlier invitation, the previous self-access user is replaced
 * (its unsent mail cancelled); a third-party user of the same address becomes the self-access user.
 */
async function inviteSelf(
  trx: Db,
  tenantId: string,
  subject: SubjectRow,
  portal: PortalConfigRow,
  fields: SubjectConfig,
  mail: MailContext,
): Promise<PortalUserRow> {
  const def = portal.email_field_key ? fields.byKey.get(portal.email_field_key) : undefined;
  const email = def ? firstText(def.dataType, subject.values[def.key])?.trim() : undefined;
  if (!email || !isEmail(email)) {
    throw new ConflictError(
      `The subject has no valid e-mail address in its field '${portal.email_field_key ?? ''}' (portal.emailFieldKey), which self access requires.`,
    );
  }
  const displayName = mail.subjectName;
  const [sameAddress] = await findPortalUsersByEmail(trx, tenantId, subject.id, [emailKey(email)]);
  const previous = await findSelfAccessUser(trx, tenantId, subject.id);
  if (previous && previous.id !== sameAddress?.id) {
    await deletePortalUsers(trx, tenantId, subject.id, 'SelfAccess');
    await cancelMails(trx, tenantId, [previous.id]);
  }
  if (sameAddress) {
    const user =
      sameAddress.invite_method === 'SelfAccess' && sameAddress.display_name === displayName
        ? sameAddress
        : await updatePortalUser(trx, tenantId, sameAddress.id, { displayName, inviteMethod: 'SelfAccess' });
    await reviveDeadMails(trx, tenantId, [user.id]);
    return user;
  }
  const user = await insertPortalUser(trx, tenantId, { subjectId: subject.id, email, displayName, inviteMethod: 'SelfAccess' });
  if (!user) throw new ConflictError('The portal users of this subject changed concurrently; retry the request.');
  await enqueueMails(trx, tenantId, [invitationMail(user, mail)]);
  return user;
}

/**
 * DELETE /api/v1/subject/{id}/invite (D9). `thirdPartyUserEmails` given: those third-party users go
 * (addresses matching none, malformed ones included, are ignored); absent or null: the self-access user.
 * Their invitation mails not yet sent are cancelled in the same transaction. Returns the removed users.
 */
export async function removePortalAccess(
  ctx: Pick<Context, 'db' | 'principal'>,
  subjectId: string,
  thirdPartyUserEmails: readonly string[] | null | undefined,
): Promise<PortalUserRow[]> {
  return onLockedSubject(ctx, 'Delete:SubjectAccessInvite', subjectId, async (trx, tenantId, subject) => {
    const thirdParty = thirdPartyUserEmails !== null && thirdPartyUserEmails !== undefined;
    requireAccessKind(await loadPortalConfig(trx, tenantId), thirdParty);
    const removed = thirdParty
      ? await deletePortalUsers(trx, tenantId, subject.id, 'ThirdParty', [...new Set(thirdPartyUserEmails.map(emailKey))])
      : await deletePortalUsers(trx, tenantId, subject.id, 'SelfAccess');
    await cancelMails(
      trx,
      tenantId,
      removed.map((u) => u.id),
    );
    return removed.sort((a, b) => (a.email_key < b.email_key ? -1 : a.email_key > b.email_key ? 1 : 0));
  });
}

/** A tenant file's portal block (D9); placeholders of the templates were checked with the file. */
export interface PortalPart {
  portal?:
    | {
        selfAccessEnabled: boolean;
        thirdPartyAccessEnabled: boolean;
        emailFieldKey?: string | undefined;
        displayNameFieldKey?: string | undefined;
        invitationFieldKeys: readonly string[];
        invitationSubject?: string | undefined;
        invitationText?: string | undefined;
        invitationHtml?: string | undefined;
      }
    | undefined;
}

/** Writes a tenant's portal configuration in the tenant apply's transaction `trx`; no block leaves it as stored. */
export async function applyPortalConfig(trx: Db, tenantId: string, part: PortalPart): Promise<void> {
  const p = part.portal;
  if (!p) return;
  await upsertPortalConfig(trx, tenantId, {
    self_access_enabled: p.selfAccessEnabled,
    third_party_access_enabled: p.thirdPartyAccessEnabled,
    email_field_key: p.emailFieldKey ?? null,
    display_name_field_key: p.displayNameFieldKey ?? null,
    invitation_field_keys: [...p.invitationFieldKeys],
    invitation_subject: p.invitationSubject ?? null,
    invitation_text: p.invitationText ?? null,
    invitation_html: p.invitationHtml ?? null,
  });
}
