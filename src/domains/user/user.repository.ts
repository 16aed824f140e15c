import { type SqlBool, sql } from 'kysely';
import type { AppUserRow, AppUserTable, Db, NewRow } from '../../db/tables.js';
import { type Connection, type PageArgs, type SortKey, paginate } from '../../db/paging.js';
import { matchesTerm } from '../../db/search.js';

/** The keys of the tenant's groups (a tenant file may name them without defining them). */
export async function findGroupKeys(db: Db, tenantId: string): Promise<string[]> {
  return (await db.selectFrom('user_group').select('key').where('tenant_id', '=', tenantId).execute()).map((r) => r.key);
}

/** D9 filters of the users list. */
export interface UserFilters {
  searchTerm?: string | null | undefined;
  includeInactive?: boolean | null | undefined;
  /** A subject's UUID: users of groups on one of its locations or an ancestor of one. */
  withAccessToSubjectId?: string | null | undefined;
}

/** The tenant's users matching the filters, as `u`; the caller orders and pages. */
export function userListQuery(db: Db, tenantId: string, f: UserFilters) {
  let q = db.selectFrom('app_user as u').where('u.tenant_id', '=', tenantId);
  if (!f.includeInactive) q = q.where('u.active', '=', true);
  if (f.searchTerm) q = q.where(matchesTerm(f.searchTerm, sql.ref('u.display_name')));
  const subjectId = f.withAccessToSubjectId;
  if (subjectId) {
    // The subject's locations and all their ancestors (`path` holds the ancestors' ids), once.
    const reach = sql`array(
      SELECT r FROM subject_location l
      JOIN structural_entity e ON e.tenant_id = l.tenant_id AND e.id = l.structural_entity_id
      CROSS JOIN LATERAL unnest(e.path || e.id) AS r
      WHERE l.tenant_id = ${tenantId} AND l.subject_id = ${subjectId})`;
    q = q.where((eb) =>
      eb.exists(
        eb
          .selectFrom('app_user_group as ug')
          .innerJoin('user_group_structural_entity as g', (j) =>
            j.onRef('g.tenant_id', '=', 'ug.tenant_id').onRef('g.group_key', '=', 'ug.group_key'),
          )
          .select(sql`1`.as('one'))
          .whereRef('ug.tenant_id', '=', 'u.tenant_id')
          .whereRef('ug.user_id', '=', 'u.id')
          .where(sql<SqlBool>`g.structural_entity_id = ANY(${reach})`),
      ),
    );
  }
  return q;
}

/** How many of the tenant's users match the filters. */
export async function countUsers(db: Db, tenantId: string, f: UserFilters): Promise<number> {
  const r = await userListQuery(db, tenantId, f)
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

/** The orderings of the users list (D9): by display name (ordinal) or by id; ties by id. */
export type UserOrder = 'DisplayName' | 'Id';

/** One page of the tenant's users matching the filters. */
export async function pageUsers(
  db: Db,
  tenantId: string,
  filters: UserFilters,
  order: UserOrder,
  args: PageArgs,
): Promise<Connection<AppUserRow>> {
  const id = { id: sql.ref('u.id'), idType: 'text' as const, type: 'text' as const, nullable: false };
  const sort: SortKey =
    order === 'DisplayName'
      ? { name: 'DisplayName', value: sql.ref('u.display_name'), ...id }
      : { name: 'Id', value: sql.ref('u.id'), ...id };
  return paginate<AppUserRow>({
    list: 'user',
    query: userListQuery(db, tenantId, filters).selectAll('u'),
    count: () => countUsers(db, tenantId, filters),
    sort,
    args,
  });
}

/** Users by id, in no particular order (loaders sort). */
export async function findUsersByIds(db: Db, tenantId: string, ids: readonly string[]): Promise<AppUserRow[]> {
  if (ids.length === 0) return [];
  return db.selectFrom('app_user').selectAll().where('tenant_id', '=', tenantId).where('id', 'in', ids).execute();
}

/** The groups of several users in one query. */
export async function findGroupsOfUsers(db: Db, tenantId: string, userIds: readonly string[]) {
  if (userIds.length === 0) return [];
  return db
    .selectFrom('app_user_group as ug')
    .innerJoin('user_group as g', (j) => j.onRef('g.tenant_id', '=', 'ug.tenant_id').onRef('g.key', '=', 'ug.group_key'))
    .select(['ug.user_id', 'g.key', 'g.name'])
    .where('ug.tenant_id', '=', tenantId)
    .where('ug.user_id', 'in', userIds)
    .orderBy('g.key')
    .execute();
}

/** The structural entity keys of several groups in one query. */
export async function findEntityKeysOfGroups(db: Db, tenantId: string, groupKeys: readonly string[]) {
  if (groupKeys.length === 0) return [];
  return db
    .selectFrom('user_group_structural_entity as g')
    .innerJoin('structural_entity as e', (j) => j.onRef('e.tenant_id', '=', 'g.tenant_id').onRef('e.id', '=', 'g.structural_entity_id'))
    .select(['g.group_key', 'e.key'])
    .where('g.tenant_id', '=', tenantId)
    .where('g.group_key', 'in', groupKeys)
    .orderBy('e.key')
    .execute();
}

/** Inserts or updates a user by id (the tenant apply). */
export async function upsertUser(db: Db, tenantId: string, u: NewRow<AppUserTable>): Promise<void> {
  await db
    .insertInto('app_user')
    .values({ tenant_id: tenantId, ...u })
    .onConflict((oc) =>
      oc.columns(['tenant_id', 'id']).doUpdateSet((eb) => ({
        display_name: eb.ref('excluded.display_name'),
        email: eb.ref('excluded.email'),
        active: eb.ref('excluded.active'),
      })),
    )
    .execute();
}

/** Inserts or updates a group by key (the tenant apply). */
export async function upsertGroup(db: Db, tenantId: string, g: { key: string; name: string }): Promise<void> {
  await db
    .insertInto('user_group')
    .values({ tenant_id: tenantId, key: g.key, name: g.name })
    .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet((eb) => ({ name: eb.ref('excluded.name') })))
    .execute();
}

/** Replaces the entities a group grants by `entityIds` (one DELETE, one INSERT unless empty). */
export async function replaceGroupEntities(db: Db, tenantId: string, groupKey: string, entityIds: readonly string[]): Promise<void> {
  await db.deleteFrom('user_group_structural_entity').where('tenant_id', '=', tenantId).where('group_key', '=', groupKey).execute();
  if (entityIds.length > 0) {
    await db
      .insertInto('user_group_structural_entity')
      .values(entityIds.map((id) => ({ tenant_id: tenantId, group_key: groupKey, structural_entity_id: id })))
      .execute();
  }
}

/** Replaces a user's group memberships by `groupKeys`, distinct (one DELETE, one INSERT unless empty). */
export async function replaceUserGroups(db: Db, tenantId: string, userId: string, groupKeys: readonly string[]): Promise<void> {
  await db.deleteFrom('app_user_group').where('tenant_id', '=', tenantId).where('user_id', '=', userId).execute();
  if (groupKeys.length > 0) {
    await db
      .insertInto('app_user_group')
      .values(groupKeys.map((k) => ({ tenant_id: tenantId, user_id: userId, group_key: k })))
      .execute();
  }
}
