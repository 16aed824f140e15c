import { type ArgBuilder, createContextCache } from '@pothos/core';
import DataLoader from 'dataloader';
import { type Types, builder } from '../../graphql/builder.js';
import { orderArgs, pageComplexity } from '../../graphql/connections.js';
import type { Context } from '../../graphql/context.js';
import { StructuralEntityRef } from '../structural-entity/index.js';
import { SubjectRef } from '../subject/index.js';
import { findEntityKeysOfGroups, findGroupsOfUsers, findUsersByIds } from './user.repository.js';
import { listUsers } from './user.service.js';

interface Group {
  key: string;
  name: string;
}

/** Groups of every user on a page in one query. */
const groupsLoader = createContextCache(
  (ctx: Context) =>
    new DataLoader<string, Group[]>(async (ids) => {
      const rows = await findGroupsOfUsers(ctx.db, ctx.principal.tenantId, ids);
      return ids.map((id) => rows.filter((r) => r.user_id === id).map(({ key, name }) => ({ key, name })));
    }),
);

/** Structural entity keys of every group asked for in one query. */
const groupEntitiesLoader = createContextCache(
  (ctx: Context) =>
    new DataLoader<string, string[]>(async (keys) => {
      const rows = await findEntityKeysOfGroups(ctx.db, ctx.principal.tenantId, keys);
      return keys.map((k) => rows.filter((r) => r.group_key === k).map((r) => r.key));
    }),
);

const UserGroupRef = builder.objectRef<Group>('UserGroup').implement({
  description: 'A user group; its structural entities decide what its users may see (D9).',
  fields: (t) => ({
    key: t.exposeString('key', { description: 'Unique key of the group.' }),
    name: t.exposeString('name', { description: 'Display name.' }),
    structuralEntities: t.field({
      type: [StructuralEntityRef],
      nullable: true,
      description: "The entities whose subjects (and those of every entity below them) the group's users may see (D9).",
      authScopes: { permission: 'List:StructuralEntity' },
      resolve: (g, _args, ctx) => groupEntitiesLoader(ctx).load(g.key),
    }),
  }),
});

export const UserRef = builder.loadableObject('User', {
  load: (ids: string[], ctx: Context) => findUsersByIds(ctx.db, ctx.principal.tenantId, ids),
  sort: (u) => u.id,
  description: 'A user of the tenant.',
  fields: (t) => ({
    id: t.exposeString('id', { description: "The user's identifier." }),
    displayName: t.exposeString('display_name', { description: 'Display name.' }),
    email: t.exposeString('email', { nullable: true, description: 'E-mail address, when known.' }),
    active: t.exposeBoolean('active', { description: 'False for an inactive user.' }),
    groups: t.field({
      type: [UserGroupRef],
      description: 'The groups the user belongs to.',
      resolve: (u, _args, ctx) => groupsLoader(ctx).load(u.id),
    }),
  }),
});

const UserConnection = builder.connectionObject({ type: UserRef, name: 'UserConnection' });

const userFilterArgs = (arg: ArgBuilder<Types>) => ({
  searchTerm: arg.string({ description: 'Case-insensitive, typo-tolerant, on the display name.' }),
  includeInactive: arg.boolean({ description: 'Inactive users too (default: active only).' }),
});

builder.queryFields((t) => ({
  users: t.connection(
    {
      type: UserRef,
      nullable: true,
      description: 'Users of the tenant, active only by default.',
      complexity: pageComplexity,
      authScopes: { permission: 'List:User' },
      args: {
        ...userFilterArgs(t.arg),
        withAccessToSubjectId: t.arg.id({
          description: "Only users of groups on one of the subject's locations or an ancestor of one (UUID or global id).",
        }),
        ...orderArgs(t.arg),
      },
      resolve: (_root, args, ctx) => listUsers(ctx, args, args),
    },
    UserConnection,
  ),
}));

builder.objectField(SubjectRef, 'usersWithAccess', (t) =>
  t.connection(
    {
      type: UserRef,
      nullable: true,
      complexity: pageComplexity,
      description: "Users of groups on one of the subject's locations or an ancestor of one (D9).",
      authScopes: { permission: 'List:User' },
      args: { ...userFilterArgs(t.arg), ...orderArgs(t.arg) },
      resolve: (s, args, ctx) => listUsers(ctx, { ...args, withAccessToSubjectId: s.id }, args),
    },
    UserConnection,
  ),
);
