import { z } from 'zod';
import { DATA_TYPES } from '../custom-field/index.js';
import type { DataTypeName } from '../../db/tables.js';
import { PERMISSIONS, SCOPES } from '../../core/permissions.js';
import { isSecretHash } from '../auth/index.js';
import { INVITATION_PLACEHOLDERS, unknownPlaceholders } from '../portal/index.js';
import { MAX_KEY_LENGTH, MAX_LIST_ITEMS, MAX_NAME_LENGTH, canonicalKeys, isBlank } from '../../core/input.js';
import { MAX_UNIT_LENGTH, POINT_TYPES } from '../data/index.js';

const key = z
  .string()
  .min(1, 'must not be empty')
  .max(MAX_KEY_LENGTH, `must be at most ${MAX_KEY_LENGTH} characters`)
  // A blank key names nothing (P87): a blank matching field would identify subjects by blank values.
  .refine((k) => !isBlank(k), 'must not be only white space');
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
    clientId: z.string().min(1).max(MAX_KEY_LENGTH),
    clientSecret: z.string().min(8, 'must be at least 8 characters').optional(),
    clientSecretHash: z
      .string()
      .refine(isSecretHash, 'must be a scrypt$N$r$p$salt$hash string (N a power of two, 1024 to 2^20)')
      .optional(),
    scopes: z.array(z.enum(SCOPES)).min(1),
    permissions: z.array(z.union([z.enum(PERMISSIONS), z.literal('*')])),
  })
  .refine((c) => (c.clientSecret === undefined) !== (c.clientSecretHash === undefined), {
    message: 'give exactly one of clientSecret and clientSecretHash',
    path: ['clientSecret'],
  });

const sentValueShape = z.strictObject({ key: z.string(), value: z.unknown() });
// D3: an entity's values take the REST upsert's sent shape, its names bound as REST binds them (D5):
// `{"Key": ..., "Value": ...}` as well as `{"key": ..., "value": ...}`. One binder for both.
const sentValue = z.preprocess((v) => canonicalKeys(v, sentValueShape), sentValueShape);

const template = z
  .string()
  .min(1, 'must not be empty')
  .superRefine((t, ctx) => {
    for (const name of unknownPlaceholders(t)) {
      ctx.addIssue({
        code: 'custom',
        message: `unknown placeholder {${name}}; use ${INVITATION_PLACEHOLDERS.map((p) => `{${p}}`).join(', ')}`,
      });
    }
  });

const tenant = z.strictObject({
  key: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'must be 1-64 letters, digits, dots, dashes or underscores'),
  name: z.string().min(1),
  clients: z.array(client).default([]),
  subjectFields: z.array(subjectField).default([]),
  matchingFieldKeys: z.array(key).min(1, 'at least one matching field identifies a subject').optional(),
  externalIdFieldKey: key.optional(),
  structureTypes: z
    .array(
      z.strictObject({
        key,
        name: z.string().min(1),
        subjectAssignable: z.boolean().default(true),
        customFields: z.array(structureField).default([]),
      }),
    )
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
      // D9 invitation mail; placeholders as in portal/invitation-mail.ts, unset parts take the bundled default.
      invitationSubject: template.optional(),
      invitationText: template.optional(),
      invitationHtml: template.optional(),
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
        subjectIdentifier: key.default('ExternalId'),
        inboundClientIds: z.array(z.string().min(1)).default([]),
      }),
    )
    .default([]),
  dataExtracts: z
    .array(
      z.strictObject({
        key,
        name: z.string().min(1),
        dataSourceKey: key,
        options: z.record(z.string(), z.unknown()).default({}),
        // What its data points hold, to label their values (a dashboard's axis and readouts).
        items: z
          .array(
            z.strictObject({
              key,
              // Blank is refused as the API refuses it.
              name: z
                .string()
                .max(MAX_NAME_LENGTH)
                .refine((t) => !isBlank(t), 'must not be blank'),
              unit: z
                .string()
                .max(MAX_UNIT_LENGTH)
                .refine((t) => !isBlank(t), 'must not be blank')
                .optional(),
              dataType: z.enum(POINT_TYPES).optional(),
            }),
          )
          .max(MAX_LIST_ITEMS)
          .default([]),
      }),
    )
    .default([]),
});

/** One problem of a tenant file: its path in the document and what is wrong. */
export interface FileIssue {
  path: (string | number)[];
  message: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const prop = (v: unknown, name: string): unknown => (isObject(v) ? v[name] : undefined);
const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

/** Finds keys listed twice in one array, reporting the later ones. Items without a string key are skipped. */
function unique(items: unknown[], keyName: string, path: (i: number) => (string | number)[], what: string, out: FileIssue[]) {
  const seen = new Set<string>();
  items.forEach((item, i) => {
    const k = text(prop(item, keyName));
    if (k === undefined) return;
    if (seen.has(k)) out.push({ path: path(i), message: `duplicate ${what} '${k}'` });
    seen.add(k);
  });
}

/**
 * The rules that span items of the file (duplicate keys, a data source's credentials). They read the
 * document leniently, so they are reported together with shape problems, not only once the shape is valid.
 */
export function fileRules(doc: unknown): FileIssue[] {
  const out: FileIssue[] = [];
  const tenants = list(prop(doc, 'tenants'));
  unique(tenants, 'key', (i) => ['tenants', i, 'key'], 'tenant key', out);
  tenants.forEach((t, ti) => {
    const at = (...p: (string | number)[]) => ['tenants', ti, ...p];
    unique(list(prop(t, 'clients')), 'clientId', (i) => at('clients', i, 'clientId'), 'clientId', out);
    unique(list(prop(t, 'subjectFields')), 'key', (i) => at('subjectFields', i, 'key'), 'field key', out);
    unique(list(prop(t, 'structureTypes')), 'key', (i) => at('structureTypes', i, 'key'), 'structure type key', out);
    unique(list(prop(t, 'structuralEntities')), 'key', (i) => at('structuralEntities', i, 'key'), 'structural entity key', out);
    unique(list(prop(t, 'groups')), 'key', (i) => at('groups', i, 'key'), 'group key', out);
    unique(list(prop(t, 'users')), 'id', (i) => at('users', i, 'id'), 'user id', out);
    unique(list(prop(t, 'dataSources')), 'key', (i) => at('dataSources', i, 'key'), 'data source key', out);
    unique(list(prop(t, 'dataExtracts')), 'key', (i) => at('dataExtracts', i, 'key'), 'data extract key', out);
    list(prop(t, 'dataExtracts')).forEach((x, xi) =>
      unique(list(prop(x, 'items')), 'key', (i) => at('dataExtracts', xi, 'items', i, 'key'), 'item key', out),
    );
    list(prop(t, 'structureTypes')).forEach((st, si) =>
      unique(list(prop(st, 'customFields')), 'key', (i) => at('structureTypes', si, 'customFields', i, 'key'), 'field key', out),
    );
    list(prop(t, 'dataSources')).forEach((d, di) => {
      if (prop(d, 'tokenUrl') && (!prop(d, 'clientId') || !prop(d, 'clientSecret'))) {
        out.push({ path: at('dataSources', di, 'clientId'), message: 'clientId and clientSecret are required with tokenUrl' });
      }
    });
  });
  return out;
}

/** Keys a tenant already has in the database, which the file may refer to without defining them. */
export interface KnownKeys {
  subjectFields: ReadonlySet<string>;
  structureTypes: ReadonlySet<string>;
  structuralEntities: ReadonlySet<string>;
  groups: ReadonlySet<string>;
  dataSources: ReadonlySet<string>;
}

/**
 * References inside one tenant section (`tenants[ti]`) to keys defined neither in the file nor in the
 * database (`known`), and parent cycles inside the file. Lenient like fileRules.
 */
export function referenceRules(t: unknown, ti: number, known: KnownKeys): FileIssue[] {
  const out: FileIssue[] = [];
  const at = (...p: (string | number)[]) => ['tenants', ti, ...p];
  const keys = (section: string, keyName: string, stored: ReadonlySet<string>) =>
    new Set([
      ...stored,
      ...list(prop(t, section))
        .map((x) => text(prop(x, keyName)))
        .filter((k): k is string => k !== undefined),
    ]);
  const fields = keys('subjectFields', 'key', known.subjectFields);
  const types = keys('structureTypes', 'key', known.structureTypes);
  const entities = keys('structuralEntities', 'key', known.structuralEntities);
  const groups = keys('groups', 'key', known.groups);
  const sources = keys('dataSources', 'key', known.dataSources);
  const check = (value: unknown, set: Set<string>, what: string, ...path: (string | number)[]) => {
    const k = text(value);
    if (k !== undefined && !set.has(k)) out.push({ path: at(...path), message: `unknown ${what} '${k}'` });
  };

  list(prop(t, 'matchingFieldKeys')).forEach((k, i) => check(k, fields, 'subject field', 'matchingFieldKeys', i));
  check(prop(t, 'externalIdFieldKey'), fields, 'subject field', 'externalIdFieldKey');
  const portal = prop(t, 'portal');
  check(prop(portal, 'emailFieldKey'), fields, 'subject field', 'portal', 'emailFieldKey');
  check(prop(portal, 'displayNameFieldKey'), fields, 'subject field', 'portal', 'displayNameFieldKey');
  list(prop(portal, 'invitationFieldKeys')).forEach((k, i) => check(k, fields, 'subject field', 'portal', 'invitationFieldKeys', i));

  const fileEntities = list(prop(t, 'structuralEntities'));
  fileEntities.forEach((e, i) => {
    check(prop(e, 'structureTypeKey'), types, 'structure type', 'structuralEntities', i, 'structureTypeKey');
    check(prop(e, 'parentKey'), entities, 'parent', 'structuralEntities', i, 'parentKey');
  });
  // A parent cycle inside the file: reported once, at the entity that closes it.
  const index = new Map<string, number>();
  fileEntities.forEach((e, i) => {
    const k = text(prop(e, 'key'));
    if (k !== undefined && !index.has(k)) index.set(k, i);
  });
  const state = new Map<number, 'visiting' | 'done'>();
  const visit = (i: number): void => {
    if (state.get(i) === 'done') return;
    if (state.get(i) === 'visiting') {
      out.push({ path: at('structuralEntities', i, 'parentKey'), message: 'the parent keys in the file form a cycle' });
      return;
    }
    state.set(i, 'visiting');
    const parent = text(prop(fileEntities[i], 'parentKey'));
    if (parent !== undefined && index.has(parent)) visit(index.get(parent)!);
    state.set(i, 'done');
  };
  fileEntities.forEach((_, i) => visit(i));

  list(prop(t, 'groups')).forEach((g, gi) =>
    list(prop(g, 'structuralEntityKeys')).forEach((k, i) =>
      check(k, entities, 'structural entity', 'groups', gi, 'structuralEntityKeys', i),
    ),
  );
  list(prop(t, 'users')).forEach((u, ui) =>
    list(prop(u, 'groupKeys')).forEach((k, i) => check(k, groups, 'group', 'users', ui, 'groupKeys', i)),
  );
  // What the provider's SubjectIdentifier means (D3): ExternalId, Id or a subject field (P87).
  list(prop(t, 'dataSources')).forEach((d, di) => {
    const mode = text(prop(d, 'subjectIdentifier'));
    if (mode !== undefined && mode !== 'ExternalId' && mode !== 'Id' && !fields.has(mode)) {
      out.push({
        path: at('dataSources', di, 'subjectIdentifier'),
        message: `unknown subject field '${mode}'; use ExternalId, Id or a subject field key`,
      });
    }
  });
  list(prop(t, 'dataExtracts')).forEach((x, xi) =>
    check(prop(x, 'dataSourceKey'), sources, 'data source', 'dataExtracts', xi, 'dataSourceKey'),
  );
  return out;
}

/** D3: the tenant configuration file's shape, with the rules spanning its items (fileRules). */
export const tenantFileSchema = z.strictObject({ tenants: z.array(tenant).min(1) }).superRefine((file, ctx) => {
  for (const issue of fileRules(file)) ctx.addIssue({ code: 'custom', ...issue });
});

export type TenantFile = z.infer<typeof tenantFileSchema>;
export type TenantConfig = TenantFile['tenants'][number];

/** `tenants[0].clients[1].clientId` from a zod path. */
export function jsonPath(path: readonly PropertyKey[]): string {
  return (
    path.reduce<string>((acc, seg) => (typeof seg === 'number' ? `${acc}[${seg}]` : acc ? `${acc}.${String(seg)}` : String(seg)), '') || '$'
  );
}
