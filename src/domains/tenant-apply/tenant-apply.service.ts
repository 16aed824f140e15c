import type { Db } from '../../db/tables.js';
import { inTransaction } from '../../db/transaction.js';
import { ConflictError, ValidationError } from '../../core/errors.js';
import { hashSecret, verifySecret } from '../auth/index.js';
import { type SecretBox, applyDataSources } from '../data/index.js';
import { upsertStructuralEntity } from '../structural-entity/index.js';
import { reindexSubjects } from '../subject/index.js';
import {
  type KnownKeys,
  type TenantConfig,
  type TenantFile,
  fileRules,
  jsonPath,
  referenceRules,
  tenantFileSchema,
} from './tenant-file.js';
import {
  type KeyedTable,
  entitiesHoldCustomValue,
  entityIdsByKey,
  findClientSecretHash,
  findStructureTypeFields,
  findTenantId,
  listKeys,
  pruneEntityCustomValues,
  readSubjectIndexConfig,
  replaceGroupEntities,
  replaceStructureTypeFields,
  replaceUserGroups,
  subjectFieldHasValues,
  upsertClient,
  upsertGroup,
  upsertPortalConfig,
  upsertStructureType,
  upsertSubjectField,
  upsertTenant,
  upsertUser,
} from './tenant-apply.repository.js';

/** An invalid tenant file: every problem with its JSON path. Nothing was written. */
export class TenantConfigError extends Error {
  constructor(readonly problems: { path: string; message: string }[]) {
    super(`Invalid tenant configuration:\n${problems.map((p) => `  ${p.path}: ${p.message}`).join('\n')}`);
  }
}

type Problem = { path: string; message: string };

/** Shape problems and the rules spanning items, together (the refinements do not run on a bad shape). */
function shapeProblems(doc: unknown): { file: TenantFile | undefined; problems: Problem[] } {
  const r = tenantFileSchema.safeParse(doc);
  if (r.success) return { file: r.data, problems: [] };
  const issues = [...r.error.issues.map((i) => ({ path: i.path, message: i.message })), ...fileRules(doc)];
  return { file: undefined, problems: dedupe(issues.map((i) => ({ path: jsonPath(i.path), message: i.message }))) };
}

function dedupe(problems: Problem[]): Problem[] {
  const seen = new Set<string>();
  return problems.filter((p) => {
    const id = `${p.path}\u0000${p.message}`;
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}

/** Validates a parsed JSON document against D3 (shape only), throwing TenantConfigError with every bad path. */
export function parseTenantFile(doc: unknown): TenantFile {
  const { file, problems } = shapeProblems(doc);
  if (!file) throw new TenantConfigError(problems);
  return file;
}

/** The keys a tenant already has (none for a new tenant): a file may refer to them without defining them. */
async function knownKeys(db: Db, tenantKey: unknown): Promise<KnownKeys> {
  const tenantId = typeof tenantKey === 'string' ? await findTenantId(db, tenantKey) : undefined;
  if (!tenantId)
    return {
      subjectFields: new Set(),
      structureTypes: new Set(),
      structuralEntities: new Set(),
      groups: new Set(),
      dataSources: new Set(),
    };
  const keys = async (table: KeyedTable) => new Set(await listKeys(db, tenantId, table));
  return {
    subjectFields: await keys('subject_field'),
    structureTypes: await keys('structure_type'),
    structuralEntities: await keys('structural_entity'),
    groups: await keys('user_group'),
    dataSources: await keys('data_source'),
  };
}

/**
 * Every problem of the document that can be found before writing, with its JSON path: its shape, the rules
 * spanning its items, and references to keys defined neither in the file nor in the database (D3: one
 * error names every problem, even when the shape is wrong too).
 */
export async function validateTenantFile(db: Db, doc: unknown): Promise<{ file: TenantFile | undefined; problems: Problem[] }> {
  const { file, problems } = shapeProblems(doc);
  const tenants =
    typeof doc === 'object' && doc !== null && Array.isArray((doc as { tenants?: unknown }).tenants)
      ? (doc as { tenants: unknown[] }).tenants
      : [];
  for (const [ti, t] of tenants.entries()) {
    const known = await knownKeys(db, typeof t === 'object' && t !== null ? (t as { key?: unknown }).key : undefined);
    for (const issue of referenceRules(t, ti, known)) problems.push({ path: jsonPath(issue.path), message: issue.message });
  }
  return { file, problems: dedupe(problems) };
}

/**
 * Applies a tenant file in one transaction (D3): upserts every section, never deletes subjects, entities
 * or cached data, and is idempotent (a secret whose stored hash already verifies keeps its hash, a sealed
 * outbound secret that still opens to the same value is kept). Every problem found before writing is
 * reported at once; any problem found while writing (custom field values, for example) rolls back
 * everything.
 */
export async function applyTenantFile(db: Db, secrets: SecretBox, doc: unknown): Promise<{ tenantKeys: string[] }> {
  const { file, problems } = await validateTenantFile(db, doc);
  if (!file || problems.length > 0) throw new TenantConfigError(problems);
  await secrets.ready();
  await inTransaction(db, async (trx) => {
    for (const [i, t] of file.tenants.entries()) await applyTenant(trx, secrets, t, `tenants[${i}]`);
  });
  return { tenantKeys: file.tenants.map((t) => t.key) };
}

/** What subject indexing depends on: field keys and types, matching fields, the ExternalId field. */
async function subjectConfigSignature(db: Db, tenantId: string) {
  const { fields, tenant: t } = await readSubjectIndexConfig(db, tenantId);
  return {
    fields: new Map(fields.map((f) => [f.key, f])),
    signature: JSON.stringify([fields, t.matching_field_keys, t.external_id_field_key]),
  };
}

async function applyTenant(db: Db, secrets: SecretBox, t: TenantConfig, at: string): Promise<void> {
  const problems: { path: string; message: string }[] = [];
  const problem = (path: string, message: string) => problems.push({ path: `${at}.${path}`, message });

  // The subject configuration before this apply: a change re-indexes the tenant's subjects (P24).
  const previousId = await findTenantId(db, t.key);
  const before = previousId ? await subjectConfigSignature(db, previousId) : { fields: new Map(), signature: '' };
  // Matching fields or an ExternalId field the file leaves out keep their stored values.
  const tenantId = await upsertTenant(db, {
    key: t.key,
    name: t.name,
    matchingFieldKeys: t.matchingFieldKeys,
    externalIdFieldKey: t.externalIdFieldKey,
  });

  for (const c of t.clients) {
    const existingHash = await findClientSecretHash(db, tenantId, c.clientId);
    const secretHash =
      c.clientSecretHash ??
      (existingHash !== undefined && (await verifySecret(c.clientSecret!, existingHash))
        ? existingHash
        : await hashSecret(c.clientSecret!));
    await upsertClient(db, tenantId, { client_id: c.clientId, secret_hash: secretHash, scopes: c.scopes, permissions: c.permissions });
  }

  for (const [i, f] of t.subjectFields.entries()) {
    const was = before.fields.get(f.key);
    if (was && (was.data_type !== f.dataType || was.is_array !== f.isArray) && (await subjectFieldHasValues(db, tenantId, f.key))) {
      problem(`subjectFields[${i}].dataType`, `subjects hold values of '${f.key}': its data type and isArray cannot change`);
    }
    await upsertSubjectField(db, tenantId, {
      key: f.key,
      name: f.name,
      data_type: f.dataType,
      type_label: f.type ?? f.dataType,
      required: f.required,
      is_array: f.isArray,
      position: i,
    });
  }
  // References to keys (fields, types, parents, groups, sources) were checked before the transaction
  // (validateTenantFile); what remains here are the rules that need the stored data.
  if (problems.length === 0 && (await subjectConfigSignature(db, tenantId)).signature !== before.signature) {
    try {
      await reindexSubjects({ db, principal: { tenantId } });
    } catch (e) {
      if (!(e instanceof ConflictError)) throw e;
      // The transaction is aborted on PostgreSQL: stop here, the apply rolls back.
      throw new TenantConfigError([
        { path: `${at}.matchingFieldKeys`, message: 'two existing subjects would share the same matching values' },
      ]);
    }
  }

  for (const [si, st] of t.structureTypes.entries()) {
    // Stored entity values are typed by their field: a field holding values keeps its data type.
    const oldFields = await findStructureTypeFields(db, tenantId, st.key);
    for (const [fi, f] of st.customFields.entries()) {
      const old = oldFields.find((o) => o.key === f.key);
      if (old && old.data_type !== f.dataType && (await entitiesHoldCustomValue(db, tenantId, st.key, f.key))) {
        problem(`structureTypes[${si}].customFields[${fi}].dataType`, `entities hold values of '${f.key}': its data type cannot change`);
      }
    }
    await upsertStructureType(db, tenantId, { key: st.key, name: st.name, subject_assignable: st.subjectAssignable });
    // The file's field list is the type's definition (P9). Values of a field it drops are removed, so a
    // field re-added later under the same key (perhaps with another data type) starts empty.
    await replaceStructureTypeFields(
      db,
      tenantId,
      st.key,
      st.customFields.map((f, i) => ({
        key: f.key,
        name: f.name,
        data_type: f.dataType,
        type_label: f.type ?? f.dataType,
        required: f.required,
        position: i,
      })),
    );
    await pruneEntityCustomValues(
      db,
      tenantId,
      st.key,
      st.customFields.map((f) => f.key),
    );
  }

  // Users before structural entities: an entity's UserIdentifier value may name a user of the file.
  // Their group memberships come after the groups, below.
  for (const u of t.users) {
    await upsertUser(db, tenantId, { id: u.id, display_name: u.displayName, email: u.email ?? null, active: u.active });
  }

  // Parents before children, so each entity's parent exists when it is upserted (cycles were rejected).
  const inFile = new Map(t.structuralEntities.map((e, i) => [e.key, i]));
  const order: number[] = [];
  const state = new Map<number, 'visiting' | 'done'>();
  const visit = (i: number): void => {
    if (state.has(i)) return;
    state.set(i, 'visiting');
    const parent = t.structuralEntities[i]!.parentKey;
    if (parent && inFile.has(parent)) visit(inFile.get(parent)!);
    state.set(i, 'done');
    order.push(i);
  };
  t.structuralEntities.forEach((_, i) => visit(i));
  if (problems.length > 0) throw new TenantConfigError(problems);
  for (const i of order) {
    const e = t.structuralEntities[i]!;
    try {
      await upsertStructuralEntity(
        { db, principal: { tenantId } },
        {
          key: e.key,
          displayName: e.displayName,
          structureTypeKey: e.structureTypeKey,
          ...(e.parentKey !== undefined ? { parentKey: e.parentKey } : {}),
          customFieldValues: e.customFieldValues ?? [],
        },
        { pathPrefix: `${at}.structuralEntities[${i}].` },
      );
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      for (const [path, messages] of Object.entries(err.fieldErrors ?? {})) for (const m of messages) problems.push({ path, message: m });
    }
  }

  for (const g of t.groups) {
    await upsertGroup(db, tenantId, { key: g.key, name: g.name });
    const ids = await entityIdsByKey(db, tenantId, g.structuralEntityKeys);
    await replaceGroupEntities(db, tenantId, g.key, [...ids.values()]);
  }

  for (const u of t.users) await replaceUserGroups(db, tenantId, u.id, [...new Set(u.groupKeys)]);

  if (t.portal) {
    const p = t.portal;
    await upsertPortalConfig(db, tenantId, {
      self_access_enabled: p.selfAccessEnabled,
      third_party_access_enabled: p.thirdPartyAccessEnabled,
      email_field_key: p.emailFieldKey ?? null,
      display_name_field_key: p.displayNameFieldKey ?? null,
      invitation_field_keys: p.invitationFieldKeys,
      invitation_subject: p.invitationSubject ?? null,
      invitation_text: p.invitationText ?? null,
      invitation_html: p.invitationHtml ?? null,
    });
  }

  // D3: an apply never deletes cached data; what it changes about a provider flags its entries stale.
  await applyDataSources(db, secrets, tenantId, t);
  if (problems.length > 0) throw new TenantConfigError(problems);
}
