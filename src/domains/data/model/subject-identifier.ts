import { isBlank } from '../../../core/input.js';
import type { Db, SubjectRow } from '../../../db/tables.js';
import { type SubjectConfig, findSubjectId, findSubjectIdsByFirstValue, firstText } from '../../subject/index.js';

/**
 * A data source's `subjectIdentifier` (D3) says what the provider's SubjectIdentifier means: `ExternalId`
 * (default), `Id` (the service's subject UUID) or a subject field key (its first value's text). An empty
 * or blank value is no identifier (P87): such a subject, stored before writes refused it, has no data
 * points and is never asked for, so it cannot fail a provider call shared with other subjects.
 */
export function identifierOf(mode: string, subject: SubjectRow, config: SubjectConfig): string | null {
  if (mode === 'Id') return subject.id;
  const text = mode === 'ExternalId' ? subject.external_id : fieldText(mode, subject, config);
  return text === null || isBlank(text) ? null : text;
}

/** The first value's text of the subject field `key`, or null (no such field, no value). */
function fieldText(key: string, subject: SubjectRow, config: SubjectConfig): string | null {
  const field = config.byKey.get(key);
  return field ? firstText(field.dataType, subject.values[key]) : null;
}

/** The subjects a provider's identifier names under `mode` (usually one; a non-unique field may give more). */
export async function subjectsByIdentifier(
  db: Db,
  tenantId: string,
  mode: string,
  identifier: string,
  config: SubjectConfig,
): Promise<string[]> {
  if (isBlank(identifier)) return [];
  if (mode === 'Id') {
    const id = await findSubjectId(db, tenantId, identifier);
    return id ? [id] : [];
  }
  const fieldKey = mode === 'ExternalId' ? config.externalIdKey : config.byKey.has(mode) ? mode : undefined;
  if (!fieldKey) return [];
  // The first value, as identifierOf reads it.
  return findSubjectIdsByFirstValue(db, tenantId, fieldKey, identifier);
}
