import { isDeepStrictEqual } from 'node:util';
import { type SqlBool, sql } from 'kysely';
import type { Db } from '../../db/tables.js';
import { inTransaction } from '../../db/transaction.js';
import { ConflictError, ValidationError } from '../../core/errors.js';
import { hashSecret, verifySecret } from '../auth/secrets.js';
import type { SecretBox } from '../data/secret-box.js';
import { flagExtract, notifyInvalidation } from '../data/data.repository.js';
import { upsertStructuralEntity } from '../structural-entity/structural-entity.service.js';
import { reindexSubjects } from '../subject/subject.service.js';
import { type KnownKeys, type TenantConfig, type TenantFile, fileRules, jsonPath, referenceRules, tenantFileSchema } from './tenant-file.js';

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
  const tenant = typeof tenantKey === 'string' ? await db.selectFrom('tenant').select('id').where('key', '=', tenantKey).executeTakeFirst() : undefined;
  if (!tenant) return { subjectFields: new Set(), structureTypes: new Set(), structuralEntities: new Set(), groups: new Set(), dataSources: new Set() };
  const keys = async (table: 'subject_field' | 'structure_type' | 'structural_entity' | 'user_group' | 'data_source') =>
    new Set((await db.selectFrom(table).select('key').where('tenant_id', '=', tenant.id).execute()).map((r) => r.key));
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
  const tenants = typeof doc === 'object' && doc !== null && Array.isArray((doc as { tenants?: unknown }).tenants) ? (doc as { tenants: unknown[] }).tenants : [];
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
  const fields = await db.selectFrom('subject_field').select(['key', 'data_type', 'is_array']).where('tenant_id', '=', tenantId).orderBy('key').execute();
  const t = await db.selectFrom('tenant').select(['matching_field_keys', 'external_id_field_key']).where('id', '=', tenantId).executeTakeFirstOrThrow();
  return { fields: new Map(fields.map((f) => [f.key, f])), signature: JSON.stringify([fields, t.matching_field_keys, t.external_id_field_key]) };
}

async function fieldHasValues(db: Db, tenantId: string, key: string): Promise<boolean> {
  const r = await db.selectFrom('subject_value').select('ordinal').where('tenant_id', '=', tenantId).where('field_key', '=', key).where('value_text', 'is not', null).limit(1).execute();
  return r.length > 0;
}

async function applyTenant(db: Db, secrets: SecretBox, t: TenantConfig, at: string): Promise<void> {
  const problems: { path: string; message: string }[] = [];
  const problem = (path: string, message: string) => problems.push({ path: `${at}.${path}`, message });

  // The subject configuration before this apply: a change re-indexes the tenant's subjects (P24).
  const previous = await db.selectFrom('tenant').select('id').where('key', '=', t.key).executeTakeFirst();
  const before = previous ? await subjectConfigSignature(db, previous.id) : { fields: new Map(), signature: '' };
  const tenant = await db
    .insertInto('tenant')
    .values({ key: t.key, name: t.name, matching_field_keys: t.matchingFieldKeys ?? [], external_id_field_key: t.externalIdFieldKey ?? null })
    .onConflict((oc) =>
      oc.column('key').doUpdateSet((eb) => ({
        name: eb.ref('excluded.name'),
        ...(t.matchingFieldKeys ? { matching_field_keys: eb.ref('excluded.matching_field_keys') } : {}),
        ...(t.externalIdFieldKey ? { external_id_field_key: eb.ref('excluded.external_id_field_key') } : {}),
        updated_at: sql<Date>`now()`,
        config_version: sql<string>`tenant.config_version + 1`,
      })),
    )
    .returning('id')
    .executeTakeFirstOrThrow();
  const tenantId = tenant.id;

  for (const c of t.clients) {
    const existing = await db.selectFrom('client').select('secret_hash').where('tenant_id', '=', tenantId).where('client_id', '=', c.clientId).executeTakeFirst();
    const secretHash =
      c.clientSecretHash ?? (existing && (await verifySecret(c.clientSecret!, existing.secret_hash)) ? existing.secret_hash : await hashSecret(c.clientSecret!));
    await db
      .insertInto('client')
      .values({ tenant_id: tenantId, client_id: c.clientId, secret_hash: secretHash, scopes: c.scopes, permissions: c.permissions })
      .onConflict((oc) =>
        oc.columns(['tenant_id', 'client_id']).doUpdateSet((eb) => ({
          secret_hash: eb.ref('excluded.secret_hash'),
          scopes: eb.ref('excluded.scopes'),
          permissions: eb.ref('excluded.permissions'),
        })),
      )
      .execute();
  }

  for (const [i, f] of t.subjectFields.entries()) {
    const was = before.fields.get(f.key);
    if (was && (was.data_type !== f.dataType || was.is_array !== f.isArray) && (await fieldHasValues(db, tenantId, f.key))) {
      problem(`subjectFields[${i}].dataType`, `subjects hold values of '${f.key}': its data type and isArray cannot change`);
    }
    await db
      .insertInto('subject_field')
      .values({ tenant_id: tenantId, key: f.key, name: f.name, data_type: f.dataType, type_label: f.type ?? f.dataType, required: f.required, is_array: f.isArray, position: i })
      .onConflict((oc) =>
        oc.columns(['tenant_id', 'key']).doUpdateSet((eb) => ({
          name: eb.ref('excluded.name'),
          data_type: eb.ref('excluded.data_type'),
          type_label: eb.ref('excluded.type_label'),
          required: eb.ref('excluded.required'),
          is_array: eb.ref('excluded.is_array'),
          position: eb.ref('excluded.position'),
        })),
      )
      .execute();
  }
  // References to keys (fields, types, parents, groups, sources) were checked before the transaction
  // (validateTenantFile); what remains here are the rules that need the stored data.
  if (problems.length === 0 && (await subjectConfigSignature(db, tenantId)).signature !== before.signature) {
    try {
      await reindexSubjects(db, tenantId);
    } catch (e) {
      if (!(e instanceof ConflictError)) throw e;
      // The transaction is aborted on PostgreSQL: stop here, the apply rolls back.
      throw new TenantConfigError([{ path: `${at}.matchingFieldKeys`, message: 'two existing subjects would share the same matching values' }]);
    }
  }

  for (const [si, st] of t.structureTypes.entries()) {
    // Stored entity values are typed by their field: a field holding values keeps its data type.
    const oldFields = await db.selectFrom('structure_type_field').select(['key', 'data_type']).where('tenant_id', '=', tenantId).where('structure_type_key', '=', st.key).execute();
    for (const [fi, f] of st.customFields.entries()) {
      const old = oldFields.find((o) => o.key === f.key);
      if (old && old.data_type !== f.dataType) {
        const held = await db
          .selectFrom('structural_entity')
          .select('id')
          .where('tenant_id', '=', tenantId)
          .where('structure_type_key', '=', st.key)
          .where(sql<SqlBool>`custom_values ? ${f.key}`)
          .limit(1)
          .execute();
        if (held.length > 0) problem(`structureTypes[${si}].customFields[${fi}].dataType`, `entities hold values of '${f.key}': its data type cannot change`);
      }
    }
    await db
      .insertInto('structure_type')
      .values({ tenant_id: tenantId, key: st.key, name: st.name, subject_assignable: st.subjectAssignable })
      .onConflict((oc) =>
        oc.columns(['tenant_id', 'key']).doUpdateSet((eb) => ({ name: eb.ref('excluded.name'), subject_assignable: eb.ref('excluded.subject_assignable') })),
      )
      .execute();
    // The file's field list is the type's definition (P9). Values of a field it drops are removed, so a
    // field re-added later under the same key (perhaps with another data type) starts empty.
    await db.deleteFrom('structure_type_field').where('tenant_id', '=', tenantId).where('structure_type_key', '=', st.key).execute();
    if (st.customFields.length > 0) {
      await db
        .insertInto('structure_type_field')
        .values(
          st.customFields.map((f, i) => ({
            tenant_id: tenantId,
            structure_type_key: st.key,
            key: f.key,
            name: f.name,
            data_type: f.dataType,
            type_label: f.type ?? f.dataType,
            required: f.required,
            position: i,
          })),
        )
        .execute();
    }
    await db
      .updateTable('structural_entity')
      .set({
        custom_values: sql`coalesce((SELECT jsonb_object_agg(k, v) FROM jsonb_each(custom_values) AS f(k, v) WHERE k = ANY(${st.customFields.map((f) => f.key)}::text[])), '{}'::jsonb)`,
      })
      .where('tenant_id', '=', tenantId)
      .where('structure_type_key', '=', st.key)
      .execute();
  }

  // Users before structural entities: an entity's UserIdentifier value may name a user of the file.
  // Their group memberships come after the groups, below.
  for (const u of t.users) {
    await db
      .insertInto('app_user')
      .values({ tenant_id: tenantId, id: u.id, display_name: u.displayName, email: u.email ?? null, active: u.active })
      .onConflict((oc) =>
        oc.columns(['tenant_id', 'id']).doUpdateSet((eb) => ({ display_name: eb.ref('excluded.display_name'), email: eb.ref('excluded.email'), active: eb.ref('excluded.active') })),
      )
      .execute();
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
        db,
        tenantId,
        { key: e.key, displayName: e.displayName, structureTypeKey: e.structureTypeKey, ...(e.parentKey !== undefined ? { parentKey: e.parentKey } : {}), customFieldValues: e.customFieldValues ?? [] },
        { pathPrefix: `${at}.structuralEntities[${i}].` },
      );
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      for (const [path, messages] of Object.entries(err.fieldErrors ?? {})) for (const m of messages) problems.push({ path, message: m });
    }
  }

  const entityIds = async (keys: string[]) =>
    new Map(
      keys.length === 0
        ? []
        : (await db.selectFrom('structural_entity').select(['key', 'id']).where('tenant_id', '=', tenantId).where('key', 'in', keys).execute()).map((r) => [r.key, r.id]),
    );
  for (const g of t.groups) {
    await db
      .insertInto('user_group')
      .values({ tenant_id: tenantId, key: g.key, name: g.name })
      .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet((eb) => ({ name: eb.ref('excluded.name') })))
      .execute();
    const ids = await entityIds(g.structuralEntityKeys);
    await db.deleteFrom('user_group_structural_entity').where('tenant_id', '=', tenantId).where('group_key', '=', g.key).execute();
    if (ids.size > 0) {
      await db
        .insertInto('user_group_structural_entity')
        .values([...ids.values()].map((id) => ({ tenant_id: tenantId, group_key: g.key, structural_entity_id: id })))
        .execute();
    }
  }

  for (const u of t.users) {
    await db.deleteFrom('app_user_group').where('tenant_id', '=', tenantId).where('user_id', '=', u.id).execute();
    if (u.groupKeys.length > 0) {
      await db.insertInto('app_user_group').values([...new Set(u.groupKeys)].map((k) => ({ tenant_id: tenantId, user_id: u.id, group_key: k }))).execute();
    }
  }

  if (t.portal) {
    const p = t.portal;
    const row = {
      tenant_id: tenantId,
      self_access_enabled: p.selfAccessEnabled,
      third_party_access_enabled: p.thirdPartyAccessEnabled,
      email_field_key: p.emailFieldKey ?? null,
      display_name_field_key: p.displayNameFieldKey ?? null,
      invitation_field_keys: p.invitationFieldKeys,
      invitation_subject: p.invitationSubject ?? null,
      invitation_text: p.invitationText ?? null,
      invitation_html: p.invitationHtml ?? null,
    };
    await db
      .insertInto('portal_config')
      .values(row)
      .onConflict((oc) => oc.column('tenant_id').doUpdateSet(row))
      .execute();
  }

  // D3: an apply never deletes cached data; what it changes about a provider flags its entries stale.
  const changedSources = new Set<string>();
  for (const d of t.dataSources) {
    const before = await db
      .selectFrom('data_source')
      .select(['get_data_points_url', 'token_url', 'client_id', 'scope', 'subject_identifier'])
      .where('tenant_id', '=', tenantId)
      .where('key', '=', d.key)
      .executeTakeFirst();
    const after = { get_data_points_url: d.getDataPointsUrl, token_url: d.tokenUrl ?? null, client_id: d.clientId ?? null, scope: d.scope ?? null, subject_identifier: d.subjectIdentifier };
    if (before && !isDeepStrictEqual(before, after)) changedSources.add(d.key);
    const row = {
      tenant_id: tenantId,
      key: d.key,
      name: d.name,
      get_data_points_url: d.getDataPointsUrl,
      token_url: d.tokenUrl ?? null,
      client_id: d.clientId ?? null,
      client_secret_enc: d.clientSecret ? await sealedSecret(db, secrets, tenantId, d.key, d.clientSecret) : null,
      scope: d.scope ?? null,
      subject_identifier: d.subjectIdentifier,
      inbound_client_ids: d.inboundClientIds,
    };
    await db
      .insertInto('data_source')
      .values(row)
      .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet(row))
      .execute();
  }
  for (const x of t.dataExtracts) {
    const row = { tenant_id: tenantId, key: x.key, name: x.name, data_source_key: x.dataSourceKey, options: x.options };
    const before = await db.selectFrom('data_extract').select(['data_source_key', 'options']).where('tenant_id', '=', tenantId).where('key', '=', x.key).executeTakeFirst();
    if (before && (before.data_source_key !== x.dataSourceKey || !isDeepStrictEqual(before.options, x.options) || changedSources.has(before.data_source_key))) {
      // The cached sets answered another question: stale (served only if the provider fails) and
      // re-fetched, on every instance (P37).
      await flagExtract(db, tenantId, x.key);
      await notifyInvalidation(db, JSON.stringify({ t: tenantId, x: x.key, s: null }));
    }
    await db
      .insertInto('data_extract')
      .values(row)
      .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet(row))
      .execute();
  }
  if (problems.length > 0) throw new TenantConfigError(problems);
}

/** The stored sealed secret when it still opens to `secret` (idempotent apply, D3), else a new seal. */
async function sealedSecret(db: Db, secrets: SecretBox, tenantId: string, sourceKey: string, secret: string): Promise<string> {
  const row = await db.selectFrom('data_source').select('client_secret_enc').where('tenant_id', '=', tenantId).where('key', '=', sourceKey).executeTakeFirst();
  if (row?.client_secret_enc) {
    const stored = await secrets.open(row.client_secret_enc).catch(() => undefined);
    if (stored === secret) return row.client_secret_enc;
  }
  return secrets.seal(secret);
}

/** Whether any tenant exists (the demo is applied only to an empty embedded database, D1). */
export async function hasTenants(db: Db): Promise<boolean> {
  return (await db.selectFrom('tenant').select('id').limit(1).execute()).length > 0;
}

