import type { Db } from '../../db/tables.js';
import { NotFoundError, ValidationError } from '../../core/errors.js';
import type { PageArgs } from '../../db/paging.js';
import type { Context } from '../../graphql/context.js';
import { findEntityIdsByKeys } from '../structural-entity/index.js';
import { SubjectRef, subjectUuid } from '../subject/index.js';
import {
  type UserFilters,
  type UserOrder,
  pageUsers,
  replaceGroupEntities,
  replaceUserGroups,
  upsertGroup,
  upsertUser,
} from './user.repository.js';

/** D9: by displayName (ordinal), ties by id; `Id` on request. */
function userOrder(orderBy: string | null | undefined): UserOrder {
  const name = (orderBy ?? 'DisplayName').toLowerCase();
  if (name === 'displayname') return 'DisplayName';
  if (name === 'id') return 'Id';
  throw ValidationError.at('orderBy', `Unknown OrderBy '${orderBy}'. Use DisplayName or Id.`);
}

/** One page of users: behind `users`, `Subject.usersWithAccess` and REST's list (D9). */
export async function listUsers(ctx: Context, input: UserFilters, args: PageArgs) {
  const order = userOrder(args.orderBy);
  const filters: UserFilters = { ...input };
  if (input.withAccessToSubjectId) {
    // An unknown id loads as null; a failure (the database away) is its own answer, not NOT_FOUND.
    const subject = await SubjectRef.getDataloader(ctx).load(subjectUuid(input.withAccessToSubjectId));
    if (!subject) throw new NotFoundError('No subject has this id.');
    filters.withAccessToSubjectId = subject.id;
  }
  return pageUsers(ctx.db, ctx.principal.tenantId, filters, order, args);
}

/** A tenant file's users (D9). */
export interface UsersPart {
  users: readonly { id: string; displayName: string; email?: string | undefined; active: boolean; groupKeys: readonly string[] }[];
}

/** A tenant file's groups and the entities each grants (D9). */
export interface GroupsPart extends UsersPart {
  groups: readonly { key: string; name: string; structuralEntityKeys: readonly string[] }[];
}

/**
 * Writes a tenant's users in the tenant apply's transaction `trx`, before its structural entities (an
 * entity's UserIdentifier value may name a user of the file); their memberships come with the groups.
 */
export async function applyUsers(trx: Db, tenantId: string, part: UsersPart): Promise<void> {
  for (const u of part.users) {
    await upsertUser(trx, tenantId, { id: u.id, display_name: u.displayName, email: u.email ?? null, active: u.active });
  }
}

/** Writes a tenant's groups, the entities each grants and the users' memberships, after its entities. */
export async function applyGroups(trx: Db, tenantId: string, part: GroupsPart): Promise<void> {
  for (const g of part.groups) {
    await upsertGroup(trx, tenantId, { key: g.key, name: g.name });
    const ids = g.structuralEntityKeys.length > 0 ? await findEntityIdsByKeys(trx, tenantId, g.structuralEntityKeys) : [];
    await replaceGroupEntities(trx, tenantId, g.key, ids);
  }
  for (const u of part.users) await replaceUserGroups(trx, tenantId, u.id, [...new Set(u.groupKeys)]);
}
