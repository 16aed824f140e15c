import { sql } from 'kysely';
import type { Db, InviteMethod, NewRow, PortalConfigRow, PortalConfigTable, PortalUserRow } from '../../db/tables.js';
import { type Connection, type PageArgs, type SortKey, paginate } from '../../db/paging.js';

/** The tenant's portal block (D9: no row = the portal is not configured). */
export async function loadPortalConfig(db: Db, tenantId: string): Promise<PortalConfigRow | undefined> {
  return db.selectFrom('portal_config').selectAll().where('tenant_id', '=', tenantId).executeTakeFirst();
}

/** The tenant's display name (an invitation names it). */
export async function findTenantName(db: Db, tenantId: string): Promise<string> {
  return (await db.selectFrom('tenant').select('name').where('id', '=', tenantId).executeTakeFirstOrThrow()).name;
}

/** A subject's portal users with these e-mails (compared case-insensitively: `emailKeys` are lower case). */
export async function findPortalUsersByEmail(
  db: Db,
  tenantId: string,
  subjectId: string,
  emailKeys: readonly string[],
): Promise<PortalUserRow[]> {
  if (emailKeys.length === 0) return [];
  return db
    .selectFrom('portal_user')
    .selectAll()
    .where('tenant_id', '=', tenantId)
    .where('subject_id', '=', subjectId)
    .where('email_key', 'in', emailKeys)
    .execute();
}

/** A subject's self-access portal user, if it has one. */
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

/** Sets a portal user's display name and invite method. */
export async function updatePortalUser(
  db: Db,
  tenantId: string,
  id: string,
  set: { displayName: string; inviteMethod: InviteMethod },
): Promise<PortalUserRow> {
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
  let q = db
    .deleteFrom('portal_user')
    .where('tenant_id', '=', tenantId)
    .where('subject_id', '=', subjectId)
    .where('invite_method', '=', inviteMethod);
  if (emailKeys) q = q.where('email_key', 'in', emailKeys);
  return q.returningAll().execute();
}

/** A subject's portal users as `p`; the caller orders and pages (D6). */
export function portalUserListQuery(db: Db, tenantId: string, subjectId: string) {
  return db.selectFrom('portal_user as p').selectAll('p').where('p.tenant_id', '=', tenantId).where('p.subject_id', '=', subjectId);
}

/** How many portal users a subject has. */
export async function countPortalUsers(db: Db, tenantId: string, subjectId: string): Promise<number> {
  const r = await db
    .selectFrom('portal_user')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('tenant_id', '=', tenantId)
    .where('subject_id', '=', subjectId)
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

/** The cursor name of a subject's portal users: a cursor is not a position of another subject's list. */
export const portalUserList = (subjectId: string) => `portalUser~${subjectId}`;

/** The orderings of a subject's portal users (D6): by e-mail (compared case-insensitively) or display name; ties by id. */
export type PortalUserOrder = 'Email' | 'DisplayName';

/** One page of a subject's portal users. */
export async function pagePortalUsers(
  db: Db,
  tenantId: string,
  subjectId: string,
  order: PortalUserOrder,
  args: PageArgs,
): Promise<Connection<PortalUserRow>> {
  const common = { type: 'text' as const, nullable: false, id: sql.ref('p.id'), idType: 'uuid' as const };
  const sort: SortKey =
    order === 'Email'
      ? { name: 'Email', value: sql.ref('p.email_key'), ...common }
      : { name: 'DisplayName', value: sql.ref('p.display_name'), ...common };
  return paginate<PortalUserRow>({
    list: portalUserList(subjectId),
    query: portalUserListQuery(db, tenantId, subjectId),
    count: () => countPortalUsers(db, tenantId, subjectId),
    sort,
    args,
  });
}

/** Inserts or overwrites the tenant's portal configuration. */
export async function upsertPortalConfig(db: Db, tenantId: string, p: NewRow<PortalConfigTable>): Promise<void> {
  const row = { tenant_id: tenantId, ...p };
  await db
    .insertInto('portal_config')
    .values(row)
    .onConflict((oc) => oc.column('tenant_id').doUpdateSet(row))
    .execute();
}
