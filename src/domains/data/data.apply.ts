import { isDeepStrictEqual } from 'node:util';
import type { DataExtractItem, Db } from '../../db/tables.js';
import { invalidate } from './cache/index.js';
import {
  type SecretBox,
  findDataExtract,
  findDataSourceConnection,
  findSealedClientSecret,
  upsertDataExtract,
  upsertDataSource,
} from './model/index.js';

/** A tenant file's data sources and extracts (D3), as the data domain reads them. */
export interface DataSourcesPart {
  dataSources: readonly {
    key: string;
    name: string;
    getDataPointsUrl: string;
    tokenUrl?: string | undefined;
    clientId?: string | undefined;
    clientSecret?: string | undefined;
    scope?: string | undefined;
    subjectIdentifier: string;
    inboundClientIds: readonly string[];
  }[];
  dataExtracts: readonly {
    key: string;
    name: string;
    dataSourceKey: string;
    options: Record<string, unknown>;
    items: readonly DataExtractItem[];
  }[];
}

/**
 * Writes a tenant's data sources and extracts in the tenant apply's transaction `trx` (D3): upserts them,
 * never deletes cached data, and invalidates the cached sets of every extract whose question changed (its
 * data source or options, or how its source reaches the provider): they answered another question, so
 * they are stale (served only if the provider fails) and re-fetched, on every instance (P37).
 */
export async function applyDataSources(trx: Db, secrets: SecretBox, tenantId: string, part: DataSourcesPart): Promise<void> {
  const changedSources = new Set<string>();
  for (const d of part.dataSources) {
    const before = await findDataSourceConnection(trx, tenantId, d.key);
    const after = {
      get_data_points_url: d.getDataPointsUrl,
      token_url: d.tokenUrl ?? null,
      client_id: d.clientId ?? null,
      scope: d.scope ?? null,
      subject_identifier: d.subjectIdentifier,
    };
    if (before && !isDeepStrictEqual(before, after)) changedSources.add(d.key);
    await upsertDataSource(trx, tenantId, {
      key: d.key,
      name: d.name,
      ...after,
      client_secret_enc: d.clientSecret ? await sealedSecret(trx, secrets, tenantId, d.key, d.clientSecret) : null,
      inbound_client_ids: [...d.inboundClientIds],
    });
  }
  const changed: string[] = [];
  for (const x of part.dataExtracts) {
    const before = await findDataExtract(trx, tenantId, x.key);
    if (
      before &&
      (before.data_source_key !== x.dataSourceKey ||
        !isDeepStrictEqual(before.options, x.options) ||
        changedSources.has(before.data_source_key))
    )
      changed.push(x.key);
    // Its items only label its values: a change of them leaves the cached data as it is.
    await upsertDataExtract(trx, tenantId, {
      key: x.key,
      name: x.name,
      data_source_key: x.dataSourceKey,
      options: x.options,
      items: x.items,
    });
  }
  if (changed.length > 0)
    await invalidate(trx, { tenantId, extracts: changed.map((key) => ({ key, subjectIds: null })), kind: 'REFRESHED' });
}

/** The stored sealed secret when it still opens to `secret` (idempotent apply, D3), else a new seal. */
async function sealedSecret(db: Db, secrets: SecretBox, tenantId: string, sourceKey: string, secret: string): Promise<string> {
  const sealed = await findSealedClientSecret(db, tenantId, sourceKey);
  if (sealed) {
    const stored = await secrets.open(sealed).catch(() => undefined);
    if (stored === secret) return sealed;
  }
  return secrets.seal(secret);
}
