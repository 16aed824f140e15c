import { sql } from 'kysely';
import type { Db, InviteMethod, PortalConfigRow, PortalUserRow } from '../../db/tables.js';

/** The tenant's portal block (D9: no row = the portal is not configured). */
export async function loadPortalConfig(db: Db, tenantId: string): Promise<PortalConfigRow | undefined> {
  return db.selectFrom('portal_config').selectAll().where('tenant_id', '=', tenantId).executeTakeFirst();
}

export async function findTenantName(db: Db, tenantId: string): Promise<string> {
  return (await db.selectFrom('tenant').select('name').where('id', '=', tenantId).executeTakeFirstOrThrow()).name;
}

/** A subject's portal users with these e-mails (compared case-insensitively: `emailKeys` are lower case). */
export async function findPortalUsersByEmail(db: Db, tenantId: string, subjectId: string, emailKeys: readonly string[]): Promise<PortalUserRow[]> {
  if (emailKeys.length === 0) return [];
  return db
    .selectFrom('portal_user')
    .selectAll()
    .where('tenant_id', '=', tenantId)
    .where('subject_id', '=', subjectId)
    .where('email_key', 'in', emailKeys)
    .execute();
}

export async function findSelfAccessUser(db: Db, tenantId: string, subjectId: string): Promise<PortalUserRow | undefined> {
  return db
    .selectFrom('portal_user')
    .selectAll()
    .where('tenant_id', '=', tenantId)
    .where('subject_id', '=', subjectId)
    .where('invite_method', '=', 'SelfAccess')
    .executeTakeFirst();
}

/** Inserts a portal user unless the subject has one with this e-mail (then `undefined`). */
export async function insertPortalUser(
  db: Db,
  tenantId: string,
  u: { subjectId: string; email: string; displayName: string; inviteMethod: InviteMethod },
): Promise<PortalUserRow | undefined> {
  return db
    .insertInto('portal_user')
    .values({ tenant_id: tenantId, subject_id: u.subjectId, email: u.email, display_name: u.displayName, invite_method: u.inviteMethod })
    .onConflict((oc) => oc.columns(['tenant_id', 'subject_id', 'email_key']).doNothing())
    .returningAll()
    .executeTakeFirst();
}

export async function updatePortalUser(db: Db, tenantId: string, id: string, set: { displayName: string; inviteMethod: InviteMethod }): Promise<PortalUserRow> {
  return db
    .updateTable('portal_user')
    .set({ display_name: set.displayName, invite_method: set.inviteMethod, updated_at: sql<Date>`now()` })
    .where('tenant_id', '=', tenantId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Deletes a subject's portal users of one invite method (those of `emailKeys` only, when given). */
export async function deletePortalUsers(
  db: Db,
  tenantId: string,
  subjectId: string,
  inviteMethod: InviteMethod,
  emailKeys?: readonly string[],
): Promise<PortalUserRow[]> {
  if (emailKeys?.length === 0) return [];
  let q = db.deleteFrom('portal_user').where('tenant_id', '=', tenantId).where('subject_id', '=', subjectId).where('invite_method', '=', inviteMethod);
  if (emailKeys) q = q.where('email_key', 'in', emailKeys);
  return q.returningAll().execute();
}

/** A subject's portal users as `p`; the caller orders and pages (D6). */
export function portalUserListQuery(db: Db, tenantId: string, subjectId: string) {
  return db.selectFrom('portal_user as p').selectAll('p').where('p.tenant_id', '=', tenantId).where('p.subject_id', '=', subjectId);
}

export async function countPortalUsers(db: Db, tenantId: string, subjectId: string): Promise<number> {
  const r = await db
    .selectFrom('portal_user')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('tenant_id', '=', tenantId)
    .where('subject_id', '=', subjectId)
    .executeTakeFirstOrThrow();
  return Number(r.n);
}
