import { publishedAndHeard } from '../../db/event-bus.js';
import type { Listen } from '../../db/notifications.js';
import type { Db } from '../../db/tables.js';
import { inTransaction } from '../../db/transaction.js';
import { ConflictError } from '../../core/errors.js';
import { announcePrincipalsChanged, applyClients } from '../auth/index.js';
import { type SecretBox, applyDataSources, findDataSourceKeys } from '../data/index.js';
import { applyPortalConfig } from '../portal/index.js';
import { applyStructuralEntities, applyStructureTypes, findEntityKeys, findStructureTypeKeys } from '../structural-entity/index.js';
import { applySubjectFields, findSubjectFieldKeys, subjectIndexSnapshot } from '../subject/index.js';
import { applyTenant, findTenantId } from '../tenant/index.js';
import { applyGroups, applyUsers, findGroupKeys } from '../user/index.js';
import {
  type KnownKeys,
  type TenantConfig,
  type TenantFile,
  fileRules,
  jsonPath,
  referenceRules,
  tenantFileSchema,
} from './tenant-file.js';

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
  // Each domain reads its own table.
  const keys = async (read: (db: Db, tenantId: string) => Promise<string[]>) => new Set(await read(db, tenantId));
  return {
    subjectFields: await keys(findSubjectFieldKeys),
    structureTypes: await keys(findStructureTypeKeys),
    structuralEntities: await keys(findEntityKeys),
    groups: await keys(findGroupKeys),
    dataSources: await keys(findDataSourceKeys),
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
export async function applyTenantFile(
  db: Db,
  secrets: SecretBox,
  doc: unknown,
  opts: {
    /**
     * Waits, before resolving, until the apply's announcement reached every instance's event bus (P8: a
     * revoked permission holds on every instance's next request). Absent: inside a caller's transaction
     * (which commits later), or where no instance runs yet.
     */
    listen?: Listen | undefined;
  } = {},
): Promise<{ tenantKeys: string[] }> {
  const { file, problems } = await validateTenantFile(db, doc);
  if (!file || problems.length > 0) throw new TenantConfigError(problems);
  await secrets.ready();
  const apply = (mark?: string) =>
    inTransaction(db, async (trx) => {
      for (const [i, t] of file.tenants.entries()) await applyOneTenant(trx, secrets, t, `tenants[${i}]`, mark);
    });
  await (opts.listen ? publishedAndHeard(opts.listen, apply) : apply());
  return { tenantKeys: file.tenants.map((t) => t.key) };
}

/**
 * One tenant of the file, in the apply's transaction `db`: each domain writes its own tables, in the
 * order their references need (the tenant row first, users before the entities whose values may name
 * them, groups after the entities they grant). Every problem is reported at once; any rolls back all.
 */
async function applyOneTenant(db: Db, secrets: SecretBox, t: TenantConfig, at: string, mark: string | undefined): Promise<void> {
  const problems: Problem[] = [];
  const report = (found: Problem[]) => problems.push(...found.map((p) => ({ path: `${at}.${p.path}`, message: p.message })));

  // The subject configuration before this apply: a change re-indexes the tenant's subjects (P24).
  const before = await subjectIndexSnapshot(db, await findTenantId(db, t.key));
  const tenantId = await applyTenant(db, t);
  await applyClients(db, tenantId, t);
  // Every instance forgets the tenant's principals once this commits: new permissions, scopes, versions.
  await announcePrincipalsChanged(db, tenantId, mark);
  // References to keys (fields, types, parents, groups, sources) were checked before the transaction
  // (validateTenantFile); what remains in each domain are the rules that need the stored data.
  try {
    report(await applySubjectFields(db, tenantId, t, before));
  } catch (e) {
    if (!(e instanceof ConflictError)) throw e;
    // The transaction is aborted on PostgreSQL: stop here, the apply rolls back.
    throw new TenantConfigError([
      { path: `${at}.matchingFieldKeys`, message: 'two existing subjects would share the same matching values' },
    ]);
  }
  report(await applyStructureTypes(db, tenantId, t));
  await applyUsers(db, tenantId, t);
  if (problems.length > 0) throw new TenantConfigError(problems);
  report(await applyStructuralEntities(db, tenantId, t));
  await applyGroups(db, tenantId, t);
  await applyPortalConfig(db, tenantId, t);

  // D3: an apply never deletes cached data; what it changes about a provider flags its entries stale.
  await applyDataSources(db, secrets, tenantId, t);
  if (problems.length > 0) throw new TenantConfigError(problems);
}
