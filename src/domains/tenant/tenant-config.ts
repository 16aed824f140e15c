import { z } from 'zod';
import { DATA_TYPES } from '../../custom-fields.js';
import type { DataTypeName } from '../../db.js';
import { PERMISSIONS, SCOPES } from '../auth/permissions.js';
import { SECRET_HASH_PATTERN } from '../auth/secrets.js';

const key = z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters');
const dataType = z.enum(DATA_TYPES as [DataTypeName, ...DataTypeName[]]);

const subjectField = z.strictObject({
  key,
  name: z.string().min(1),
  dataType,
  type: z.string().min(1).optional(),
  required: z.boolean().default(false),
  isArray: z.boolean().default(false),
});

const structureField = subjectField.omit({ isArray: true });

const client = z
  .strictObject({
    clientId: z.string().min(1).max(200),
    clientSecret: z.string().min(8, 'must be at least 8 characters').optional(),
    clientSecretHash: z.string().regex(SECRET_HASH_PATTERN, 'must be a scrypt$N$r$p$salt$hash string').optional(),
    scopes: z.array(z.enum(SCOPES)).min(1),
    permissions: z.array(z.union([z.enum(PERMISSIONS), z.literal('*')])),
  })
  .refine((c) => (c.clientSecret === undefined) !== (c.clientSecretHash === undefined), {
    message: 'give exactly one of clientSecret and clientSecretHash',
    path: ['clientSecret'],
  });

const sentValue = z.strictObject({ key: z.string(), value: z.unknown() });

const tenant = z.strictObject({
  key: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'must be 1-64 letters, digits, dots, dashes or underscores'),
  name: z.string().min(1),
  clients: z.array(client).default([]),
  subjectFields: z.array(subjectField).default([]),
  matchingFieldKeys: z.array(key).optional(),
  externalIdFieldKey: key.optional(),
  structureTypes: z
    .array(z.strictObject({ key, name: z.string().min(1), subjectAssignable: z.boolean().default(true), customFields: z.array(structureField).default([]) }))
    .default([]),
  structuralEntities: z
    .array(
      z.strictObject({
        key,
        displayName: z.string().min(1),
        structureTypeKey: key,
        parentKey: key.nullable().optional(),
        customFieldValues: z.array(sentValue).optional(),
      }),
    )
    .default([]),
  groups: z.array(z.strictObject({ key, name: z.string().min(1), structuralEntityKeys: z.array(key).default([]) })).default([]),
  users: z
    .array(
      z.strictObject({
        id: key,
        displayName: z.string().min(1),
        email: z.email().optional(),
        active: z.boolean().default(true),
        groupKeys: z.array(key).default([]),
      }),
    )
    .default([]),
  portal: z
    .strictObject({
      selfAccessEnabled: z.boolean().default(false),
      thirdPartyAccessEnabled: z.boolean().default(false),
      emailFieldKey: key.optional(),
      displayNameFieldKey: key.optional(),
      invitationFieldKeys: z.array(key).default([]),
    })
    .optional(),
  dataSources: z
    .array(
      z.strictObject({
        key,
        name: z.string().min(1),
        getDataPointsUrl: z.url(),
        tokenUrl: z.url().optional(),
        clientId: z.string().min(1).optional(),
        clientSecret: z.string().min(1).optional(),
        scope: z.string().min(1).optional(),
        subjectIdentifier: z.string().min(1).default('ExternalId'),
        inboundClientIds: z.array(z.string().min(1)).default([]),
      }),
    )
    .default([]),
  dataExtracts: z
    .array(z.strictObject({ key, name: z.string().min(1), dataSourceKey: key, options: z.record(z.string(), z.unknown()).default({}) }))
    .default([]),
});

/** Finds keys listed twice in one array, reporting the later ones. */
function unique<T>(items: T[], keyOf: (t: T) => string, path: (i: number) => (string | number)[], ctx: z.RefinementCtx, what: string) {
  const seen = new Set<string>();
  items.forEach((item, i) => {
    const k = keyOf(item);
    if (seen.has(k)) ctx.addIssue({ code: 'custom', path: path(i), message: `duplicate ${what} '${k}'` });
    seen.add(k);
  });
}

/** D3: the tenant configuration file. Cross-references inside one tenant are checked here too. */
export const tenantFileSchema = z
  .strictObject({ tenants: z.array(tenant).min(1) })
  .superRefine((file, ctx) => {
    unique(file.tenants, (t) => t.key, (i) => ['tenants', i, 'key'], ctx, 'tenant key');
    file.tenants.forEach((t, ti) => {
      const at = (...p: (string | number)[]) => ['tenants', ti, ...p];
      unique(t.clients, (c) => c.clientId, (i) => at('clients', i, 'clientId'), ctx, 'clientId');
      unique(t.subjectFields, (f) => f.key, (i) => at('subjectFields', i, 'key'), ctx, 'field key');
      unique(t.structureTypes, (s) => s.key, (i) => at('structureTypes', i, 'key'), ctx, 'structure type key');
      unique(t.structuralEntities, (s) => s.key, (i) => at('structuralEntities', i, 'key'), ctx, 'structural entity key');
      unique(t.groups, (g) => g.key, (i) => at('groups', i, 'key'), ctx, 'group key');
      unique(t.users, (u) => u.id, (i) => at('users', i, 'id'), ctx, 'user id');
      unique(t.dataSources, (d) => d.key, (i) => at('dataSources', i, 'key'), ctx, 'data source key');
      unique(t.dataExtracts, (d) => d.key, (i) => at('dataExtracts', i, 'key'), ctx, 'data extract key');
      t.structureTypes.forEach((st, si) => unique(st.customFields, (f) => f.key, (i) => at('structureTypes', si, 'customFields', i, 'key'), ctx, 'field key'));
      t.dataSources.forEach((d, di) => {
        if (d.tokenUrl && (!d.clientId || !d.clientSecret)) {
          ctx.addIssue({ code: 'custom', path: at('dataSources', di, 'clientId'), message: 'clientId and clientSecret are required with tokenUrl' });
        }
      });
    });
  });

export type TenantFile = z.infer<typeof tenantFileSchema>;
export type TenantConfig = TenantFile['tenants'][number];

/** `tenants[0].clients[1].clientId` from a zod path. */
export function jsonPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>((acc, seg) => (typeof seg === 'number' ? `${acc}[${seg}]` : acc ? `${acc}.${String(seg)}` : String(seg)), '') || '$';
}
