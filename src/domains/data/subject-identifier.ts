import type { Db, SubjectRow } from '../../db/tables.js';
import { firstText } from '../subject/subject-values.js';
import { type SubjectConfig, findSubjectId, findSubjectIdsByFirstValue } from '../subject/subject.repository.js';

/**
 * A data source's `subjectIdentifier` (D3) says what the provider's SubjectIdentifier means: `ExternalId`
 * (default), `Id` (the service's subject UUID) or a subject field key (its first value's text).
 */
export function identifierOf(mode: string, subject: SubjectRow, config: SubjectConfig): string | null {
  if (mode === 'ExternalId') return subject.external_id;
  if (mode === 'Id') return subject.id;
  const field = config.byKey.get(mode);
  return field ? firstText(field.dataType, subject.values[mode]) : null;
}

/** The subjects a provider's identifier names under `mode` (usually one; a non-unique field may give more). */
export async function subjectsByIdentifier(
  db: Db,
  tenantId: string,
  mode: string,
  identifier: string,
  config: SubjectConfig,
): Promise<string[]> {
  if (mode === 'Id') {
    const id = await findSubjectId(db, tenantId, identifier);
    return id ? [id] : [];
  }
  const fieldKey = mode === 'ExternalId' ? config.externalIdKey : config.byKey.has(mode) ? mode : undefined;
  if (!fieldKey) return [];
  // The first value, as identifierOf reads it.
  return findSubjectIdsByFirstValue(db, tenantId, fieldKey, identifier);
}
