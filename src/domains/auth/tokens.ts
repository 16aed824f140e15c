import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import {
  type JWK,
  type JWTPayload,
  SignJWT,
  calculateJwkThumbprint,
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeJwt,
  exportJWK,
  generateKeyPair,
  importJWK,
  jwtVerify,
} from 'jose';
import type { Config } from '../../core/config.js';
import type { Db } from '../../db/tables.js';
import { inTransaction } from '../../db/transaction.js';
import { findActiveKey, insertActiveKey, listPublishedKeys, retireActiveKey } from './auth.repository.js';

const ALG = 'ES256';

export interface IssuedToken {
  accessToken: string;
  expiresIn: number;
  scope: string;
}

/** What a verified token says; the caller turns it into a Principal with the tenant's stored client. */
export interface VerifiedClaims {
  tenantKey: string;
  clientId: string;
  scopes: string[];
  /** The token's `exp` in ms since the epoch; undefined when it has none. */
  expiresAt?: number | undefined;
}

export class InvalidTokenError extends Error {}

/**
 * Issues and verifies access tokens (D4). Keys live in the database so every instance signs and verifies
 * alike; a rotated-out key stays published for one token lifetime, so tokens it signed stay valid.
 */
export class TokenService {
  private keySet: ReturnType<typeof createLocalJWKSet> | undefined;
  private keysLoadedAt = 0;
  private readonly remote: ReturnType<typeof createRemoteJWKSet> | undefined;
  // Verified tokens until they expire (P48: a signature check per request was 8% of a list's CPU).
  // Keyed by the whole token, so only the very string that verified hits; a key retired by rotation
  // keeps verifying until its tokens expire anyway.
  private readonly verified = new LRUCache<string, VerifiedClaims & { expiresAt: number }>({ max: 10_000 });

  constructor(
    private readonly db: Db,
    private readonly config: Pick<
      Config,
      'publicUrl' | 'TOKEN_TTL_SECONDS' | 'AUTH_ISSUER' | 'AUTH_JWKS_URL' | 'AUTH_TENANT_CLAIM' | 'AUTH_AUDIENCE' | 'AUTH_EXTERNAL_AUDIENCE'
    >,
  ) {
    this.remote = config.AUTH_JWKS_URL ? createRemoteJWKSet(new URL(config.AUTH_JWKS_URL)) : undefined;
  }

  get issuer(): string {
    return this.config.publicUrl;
  }

  /** The resource identifier of this service: the `aud` of the tokens it issues (RFC 9068). */
  get audience(): string {
    return this.config.AUTH_AUDIENCE ?? this.config.publicUrl;
  }

  /** Creates the first signing key if there is none (idempotent across concurrent instances). */
  async ensureSigningKey(): Promise<void> {
    if (await findActiveKey(this.db)) return;
    await insertActiveKey(this.db, await newKey());
  }

  /** Makes a new key the signing key; the old one keeps verifying until its tokens expire. */
  async rotate(): Promise<string> {
    const key = await newKey();
    await inTransaction(this.db, async (trx) => {
      await retireActiveKey(trx);
      await insertActiveKey(trx, key);
    });
    this.keySet = undefined;
    return key.kid;
  }

  /** The public keys for /.well-known/jwks.json. */
  async publicJwks(): Promise<{ keys: JWK[] }> {
    const rows = await listPublishedKeys(this.db, this.config.TOKEN_TTL_SECONDS + 60);
    return { keys: rows.map((r) => r.public_jwk as JWK) };
  }

  async issue(tenantKey: string, clientId: string, scopes: string[]): Promise<IssuedToken> {
    const active = await findActiveKey(this.db);
    if (!active) throw new Error('No active signing key');
    const scope = scopes.join(' ');
    const ttl = this.config.TOKEN_TTL_SECONDS;
    // RFC 9068 §2.2: iss, exp, aud, sub, client_id, iat, jti (sub is the client: no user is involved).
    const accessToken = await new SignJWT({ tenant: tenantKey, scope, client_id: clientId })
      .setProtectedHeader({ alg: ALG, kid: active.kid, typ: 'at+jwt' })
      .setIssuer(this.issuer)
      .setAudience(this.audience)
      .setSubject(clientId)
      .setIssuedAt()
      .setExpirationTime(`${ttl}s`)
      .setJti(randomUUID())
      .sign(await importJWK(active.private_jwk as JWK, ALG));
    return { accessToken, expiresIn: ttl, scope };
  }

  /** Verifies signature, algorithm, issuer and expiry; throws InvalidTokenError with a short reason. */
  async verify(token: string): Promise<VerifiedClaims> {
    const hit = this.verified.get(token);
    if (hit && hit.expiresAt > Date.now()) return hit;
    let unverified: JWTPayload;
    try {
      unverified = decodeJwt(token);
    } catch {
      throw new InvalidTokenError('The access token is malformed.');
    }
    const external = this.remote && this.config.AUTH_ISSUER && unverified.iss === this.config.AUTH_ISSUER;
    let payload: JWTPayload;
    try {
      if (external) {
        ({ payload } = await jwtVerify(token, this.remote!, {
          issuer: this.config.AUTH_ISSUER!,
          ...(this.config.AUTH_EXTERNAL_AUDIENCE ? { audience: this.config.AUTH_EXTERNAL_AUDIENCE } : {}),
          algorithms: ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'],
        }));
      } else {
        payload = await this.verifyLocal(token);
      }
    } catch (e) {
      if (e instanceof InvalidTokenError) throw e;
      const code = (e as { code?: string }).code;
      throw new InvalidTokenError(code === 'ERR_JWT_EXPIRED' ? 'The access token expired.' : 'The access token is invalid.');
    }
    const tenantClaim = external ? this.config.AUTH_TENANT_CLAIM : 'tenant';
    const tenantKey = payload[tenantClaim];
    const clientId = external ? (payload['client_id'] ?? payload['azp'] ?? payload.sub) : payload.sub;
    if (typeof tenantKey !== 'string' || typeof clientId !== 'string') {
      throw new InvalidTokenError('The access token lacks the tenant or client.');
    }
    const scope = payload['scope'] ?? payload['scp'];
    const scopes = Array.isArray(scope) ? scope.map(String) : typeof scope === 'string' ? scope.split(' ').filter(Boolean) : [];
    const expiresAt = typeof payload.exp === 'number' ? payload.exp * 1000 : undefined;
    const claims = { tenantKey, clientId, scopes, expiresAt };
    // Without an expiry (an external issuer may omit it) a token is verified every time.
    if (expiresAt !== undefined) this.verified.set(token, { ...claims, expiresAt }, { ttl: Math.max(1, expiresAt - Date.now()) });
    return claims;
  }

  private async verifyLocal(token: string): Promise<JWTPayload> {
    const options = { issuer: this.issuer, algorithms: [ALG], typ: 'at+jwt' };
    let payload: JWTPayload;
    try {
      payload = (await jwtVerify(token, await this.localKeys(false), options)).payload;
    } catch (e) {
      // A key created by another instance's rotation: reload once (at most every 5 s) and retry.
      if ((e as { code?: string }).code !== 'ERR_JWKS_NO_MATCHING_KEY' || Date.now() - this.keysLoadedAt < 5000) throw e;
      payload = (await jwtVerify(token, await this.localKeys(true), options)).payload;
    }
    // RFC 9068: a token for another resource is refused. Tokens issued before `aud` and `client_id` were
    // added carry neither and stay valid until they expire (at most TOKEN_TTL_SECONDS).
    const aud = payload.aud;
    if (aud !== undefined && !(Array.isArray(aud) ? aud : [aud]).includes(this.audience)) {
      throw new InvalidTokenError('The access token is for another audience.');
    }
    if (payload['client_id'] !== undefined && payload['client_id'] !== payload.sub)
      throw new InvalidTokenError('The access token is invalid.');
    return payload;
  }

  private async localKeys(reload: boolean) {
    if (!this.keySet || reload) {
      this.keySet = createLocalJWKSet(await this.publicJwks());
      this.keysLoadedAt = Date.now();
    }
    return this.keySet;
  }
}

async function newKey() {
  const { privateKey, publicKey } = await generateKeyPair(ALG, { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(publicJwk);
  return {
    kid,
    alg: ALG,
    private_jwk: { ...(await exportJWK(privateKey)), kid, alg: ALG },
    public_jwk: { ...publicJwk, kid, alg: ALG, use: 'sig' },
  };
}
