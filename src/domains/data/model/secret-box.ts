import { randomBytes } from 'node:crypto';
import { CompactEncrypt, compactDecrypt } from 'jose';
import type { Db } from '../../../db/tables.js';
import { findOrCreateServiceSecret } from './data.repository.js';

/**
 * Encrypts secrets the service must send on (a data source's client secret), so they cannot be hashed:
 * JWE `dir` + A256GCM. The key is SECRETS_KEY, or else one generated once and kept in the database
 * (which protects less: set SECRETS_KEY in production).
 */
export class SecretBox {
  private key: Promise<Uint8Array> | undefined;

  constructor(
    private readonly db: Db,
    private readonly configured: string | undefined,
  ) {}

  /** Loads (or creates) the key now; call before a transaction that seals, which may hold the only connection. */
  async ready(): Promise<void> {
    await this.getKey();
  }

  private getKey(): Promise<Uint8Array> {
    return (this.key ??= this.configured ? Promise.resolve(Buffer.from(this.configured, 'base64url')) : this.storedKey());
  }

  private async storedKey(): Promise<Uint8Array> {
    return Buffer.from(await findOrCreateServiceSecret(this.db, 'secret-box', randomBytes(32).toString('base64url')), 'base64url');
  }

  async seal(plaintext: string): Promise<string> {
    return new CompactEncrypt(new TextEncoder().encode(plaintext))
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM' })
      .encrypt(await this.getKey());
  }

  async open(sealed: string): Promise<string> {
    const { plaintext } = await compactDecrypt(sealed, await this.getKey());
    return new TextDecoder().decode(plaintext);
  }
}
