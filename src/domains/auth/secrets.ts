import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';

const scryptAsync = promisify(scrypt) as (
  pw: string,
  salt: Buffer,
  len: number,
  opts: { N: number; r: number; p: number; maxmem: number },
) => Promise<Buffer>;

const N = 16384;
const R = 8;
const P = 1;
const LEN = 32;

/** Format of a stored secret: `scrypt$N$r$p$salt$hash` (base64url). Also accepted as `clientSecretHash`. */
const SECRET_HASH_PATTERN = /^scrypt\$(\d{1,8})\$(\d{1,2})\$(\d{1,2})\$[A-Za-z0-9_-]{16,}\$[A-Za-z0-9_-]{32,}$/;

/** The memory scrypt may use when verifying; a hash needing more is not accepted as configuration. */
const MAX_SCRYPT_MEMORY = 256 * 1024 * 1024;

/** A stored hash whose parameters scrypt accepts (N a power of two from 1024, within the memory bound). */
export function isSecretHash(s: string): boolean {
  const m = SECRET_HASH_PATTERN.exec(s);
  if (!m) return false;
  const [n, r, p] = [Number(m[1]), Number(m[2]), Number(m[3])];
  return n >= 1024 && (n & (n - 1)) === 0 && r >= 1 && p >= 1 && p <= 16 && 128 * n * r + 128 * r * p <= MAX_SCRYPT_MEMORY;
}

/** Salted scrypt hash of a client secret. */
export async function hashSecret(secret: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scryptAsync(secret, salt, LEN, { N, r: R, p: P, maxmem: 64 * 1024 * 1024 });
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

// Verifying against this when the client is unknown keeps the answer time the same (D4).
const DUMMY = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';

/** Compares a presented secret with a stored hash in constant time; a missing hash still costs a hash. */
export async function verifySecret(secret: string, stored: string | undefined): Promise<boolean> {
  const real = stored !== undefined && isSecretHash(stored);
  const parts = (real ? stored : DUMMY).split('$');
  const [, n, r, p, salt, hash] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(hash, 'base64url');
  const actual = await scryptAsync(secret, Buffer.from(salt, 'base64url'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: MAX_SCRYPT_MEMORY,
  });
  return timingSafeEqual(actual, expected) && real;
}
