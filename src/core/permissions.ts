import { ForbiddenError } from './errors.js';

/** The contract's permission strings (D4), plus the ones D4 adds. */
export const PERMISSIONS = [
  'List:Subject',
  'View:Subject',
  'Edit:Subject',
  'Create:Subject',
  'Create:SubjectLocation',
  'Delete:SubjectLocation',
  'View:SubjectAccessInvite',
  'Create:SubjectAccessInvite',
  'Delete:SubjectAccessInvite',
  'List:User',
  'List:StructuralEntity',
  'View:StructuralEntity',
  'Create:StructuralEntity',
  'Edit:StructuralEntity',
  'Refresh:DataSet',
  'View:DataExtract',
  'Create:DataExtract',
  'Edit:DataExtract',
] as const;

export type Permission = (typeof PERMISSIONS)[number];

export const SCOPES = ['ServiceApi', 'ServiceDataProviderApi'] as const;
export type Scope = (typeof SCOPES)[number];

/** Who is calling: always derived from a verified token (D2: the tenant never comes from the request). */
export interface Principal {
  tenantId: string;
  tenantKey: string;
  clientId: string;
  scopes: ReadonlySet<string>;
  permissions: ReadonlySet<string>;
  /** The tenant's configuration version when the request began: the key of its cached configuration. */
  configVersion: string;
  /**
   * The tenant's data version when the request began (cached TotalCounts of queries); undefined when the
   * principal came from the instance's cache (issue 35), which never holds it: read where it is needed.
   */
  dataVersion?: string | undefined;
  /**
   * The tenant's read floor when the request began (a pg_lsn as text): a read replica that has replayed it
   * holds the tenant's own writes. Null: none recorded; undefined: not read (work outside a request).
   */
  readFloor?: string | null | undefined;
  /** When the token expires (ms since the epoch); undefined: no expiry (a token without `exp`, or no token). Ends subscriptions. */
  expiresAt?: number | undefined;
}

/** `*` in a client's configuration grants every permission. */
export function hasPermission(principal: Principal, permission: Permission): boolean {
  return principal.permissions.has(permission) || principal.permissions.has('*');
}

/** Throws FORBIDDEN naming the permission (for checks that depend on data, like create-or-edit). */
export function requirePermission(principal: Principal, permission: Permission): void {
  if (!hasPermission(principal, permission)) throw new ForbiddenError(`The client lacks the permission ${permission}.`);
}

/** node(id)/nodes(ids) demand the permission of the type's own root field (D4: as its REST twin). */
export const NODE_VIEW_PERMISSION: Record<string, Permission> = {
  StructuralEntity: 'View:StructuralEntity',
  Subject: 'View:Subject',
  DataExtract: 'View:DataExtract',
};

/** Whether `typename` is a Node type (the keys above): other global ids name nothing. */
export function isNodeType(typename: string): boolean {
  return Object.hasOwn(NODE_VIEW_PERMISSION, typename);
}

/** Throws FORBIDDEN unless the principal may view nodes of `typename`. */
export function requireNodePermission(principal: Principal, typename: string): void {
  const p = NODE_VIEW_PERMISSION[typename];
  if (p) requirePermission(principal, p);
}
