import type { Db } from '../../db/tables.js';
import type { Permission, Scope } from '../../core/permissions.js';
import { findClientSecretHash, upsertClient } from './auth.repository.js';
import { hashSecret, verifySecret } from './secrets.js';

/** A tenant file's API clients (D3): each with its secret in clear or as its hash (exactly one). */
export interface ClientsPart {
  clients: readonly {
    clientId: string;
    clientSecret?: string | undefined;
    clientSecretHash?: string | undefined;
    scopes: readonly Scope[];
    permissions: readonly (Permission | '*')[];
  }[];
}

/**
 * Writes a tenant's clients in the tenant apply's transaction `trx`. Idempotent: a stored hash that
 * already verifies the sent secret is kept.
 */
export async function applyClients(trx: Db, tenantId: string, part: ClientsPart): Promise<void> {
  for (const c of part.clients) {
    const existingHash = await findClientSecretHash(trx, tenantId, c.clientId);
    const secretHash =
      c.clientSecretHash ??
      (existingHash !== undefined && (await verifySecret(c.clientSecret!, existingHash))
        ? existingHash
        : await hashSecret(c.clientSecret!));
    await upsertClient(trx, tenantId, {
      client_id: c.clientId,
      secret_hash: secretHash,
      scopes: [...c.scopes],
      permissions: [...c.permissions],
    });
  }
}
