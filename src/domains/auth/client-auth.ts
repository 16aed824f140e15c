import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { availableParallelism } from 'node:os';
import ipaddr from 'ipaddr.js';
import { LRUCache } from 'lru-cache';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { verifySecret } from './secrets.js';

export interface ClientAuthOptions {
  /** Secret verifications (scrypt, on libuv's threadpool) running at once; default: see defaultConcurrency. */
  concurrency?: number | undefined;
  /** Verifications that may wait for one of those; past it 503. */
  queueLimit: number;
  /** Failed attempts of one client from one address before backoff. */
  failureLimit: number;
  /** Distinct (client, address) pairs failing from one address before its backoff; 0: off (behind a proxy). */
  addressFailureLimit: number;
}

/** The answer to a client authentication: the client, a plain failure (401), or a refusal before hashing. */
export type ClientAuthOutcome<C> =
  { kind: 'ok'; client: C } | { kind: 'failed' } | { kind: 'throttled' | 'busy'; retryAfterSeconds: number; reason: string };

/** Failures are counted per key for this long (fixed window from the first failure). */
const WINDOW_SECONDS = 15 * 60;
/** Backoff doubles from 1 s per failure from the limit on, up to this. */
const MAX_BLOCK_SECONDS = 5 * 60;
/** A client with this many times `failureLimit` failures (from any addresses) in a window is under attack. */
const UNDER_ATTACK_FACTOR = 10;

/** Half the cores, and at most half of libuv's threadpool (which file and DNS work share): 1 on 2 cores. */
function defaultConcurrency(): number {
  const threadpool = Number(process.env['UV_THREADPOOL_SIZE']) || 4;
  return Math.max(1, Math.min(Math.floor(availableParallelism() / 2), Math.floor(threadpool / 2)));
}

/**
 * The address an attempt is counted and queued under: IPv4 as is (an IPv4-mapped IPv6 address is its
 * IPv4 address), IPv6 by its /64, which one host usually holds whole: per /128, one attacker would
 * escape the address throttle and take many turns in the pool.
 */
export function addressKey(address: string): string {
  if (!ipaddr.isValid(address)) return address;
  const ip = ipaddr.process(address);
  if (ip.kind() === 'ipv4') return ip.toString();
  return `${new ipaddr.IPv6([...(ip as ipaddr.IPv6).parts.slice(0, 4), 0, 0, 0, 0]).toString()}/64`;
}

interface Closable {
  readonly closed: boolean;
  once(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
}

interface Waiter {
  settle(outcome: 'run' | 'over' | 'gone'): void;
}

/**
 * At most `concurrency` secret verifications at once, and a bounded queue behind them served in turn
 * by remote address (round robin, like admission's turns by tenant). When the queue is full, an attempt
 * takes the place of the newest waiter of the address holding the most places, so one address flooding
 * the endpoint delays another's attempt by about one verification, and fills no more than what is free.
 */
class VerificationPool {
  private running = 0;
  private queued = 0;
  private readonly waiting = new Map<string, Waiter[]>();
  /** Addresses with waiters, in turn order. */
  private readonly turns: string[] = [];

  constructor(
    private readonly concurrency: number,
    private readonly queueLimit: number,
  ) {}

  /**
   * Runs `work` when a place is free. 'over': the queue is full and this address already waits in it (or
   * its waiter gave its place to another address); 'full': the queue is full of others' attempts.
   */
  async run<T>(address: string, res: Closable, work: () => Promise<T>): Promise<{ value: T } | 'over' | 'full' | 'gone'> {
    const slot = await this.acquire(address, res);
    if (slot !== 'run') return slot;
    try {
      return { value: await work() };
    } finally {
      this.release();
    }
  }

  private acquire(address: string, res: Closable): Promise<'run' | 'over' | 'full' | 'gone'> {
    if (res.closed) return Promise.resolve('gone');
    if (this.running < this.concurrency && this.queued === 0) {
      this.running++;
      return Promise.resolve('run');
    }
    if (this.queued >= this.queueLimit && !this.evictFor(address)) return Promise.resolve(this.waiting.has(address) ? 'over' : 'full');
    return new Promise((resolve) => {
      const onClose = () => {
        if (this.remove(address, waiter)) resolve('gone');
      };
      const waiter: Waiter = {
        settle: (outcome) => {
          res.off('close', onClose);
          resolve(outcome);
        },
      };
      let queue = this.waiting.get(address);
      if (!queue) {
        this.waiting.set(address, (queue = []));
        this.turns.push(address);
      }
      queue.push(waiter);
      this.queued++;
      res.once('close', onClose);
    });
  }

  /** Refuses the newest waiter of the address holding the most places, if it holds more than `address`. */
  private evictFor(address: string): boolean {
    let longest: string | undefined;
    for (const [a, q] of this.waiting) if (!longest || q.length > this.waiting.get(longest)!.length) longest = a;
    if (longest === undefined || longest === address) return false;
    if (this.waiting.get(longest)!.length <= (this.waiting.get(address)?.length ?? 0) + 1) return false;
    const victim = this.waiting.get(longest)!.at(-1)!;
    this.remove(longest, victim);
    victim.settle('over');
    return true;
  }

  private remove(address: string, waiter: Waiter): boolean {
    const queue = this.waiting.get(address);
    const i = queue ? queue.indexOf(waiter) : -1;
    if (i < 0) return false;
    queue!.splice(i, 1);
    this.queued--;
    if (queue!.length === 0) {
      this.waiting.delete(address);
      this.turns.splice(this.turns.indexOf(address), 1);
    }
    return true;
  }

  private release() {
    this.running--;
    const address = this.turns.shift();
    if (address === undefined) return;
    const queue = this.waiting.get(address)!;
    const next = queue.shift()!;
    this.queued--;
    if (queue.length > 0) this.turns.push(address);
    else this.waiting.delete(address);
    this.running++;
    next.settle('run');
  }
}

/** Failure counts per key and blocks with exponential backoff past a number of free failures. */
class FailureCounter {
  private readonly fails = new RateLimiterMemory({ points: 1, duration: WINDOW_SECONDS });
  private readonly blocks = new RateLimiterMemory({ points: 0, duration: MAX_BLOCK_SECONDS });

  /** Milliseconds the key stays blocked (0: not blocked). */
  async blockedMs(key: string): Promise<number> {
    const r = await this.blocks.get(key);
    return r && r.consumedPoints > 0 && r.msBeforeNext > 0 ? r.msBeforeNext : 0;
  }

  /** Failures of the key in its window. */
  async count(key: string): Promise<number> {
    return (await this.fails.get(key))?.consumedPoints ?? 0;
  }

  /** Counts a failure; from the `limit`-th on (the first if 0) the key is blocked for 1, 2, 4, … s (at most MAX_BLOCK_SECONDS). */
  async fail(key: string, limit: number): Promise<number> {
    const n = (await this.fails.penalty(key)).consumedPoints;
    const from = Math.max(1, limit);
    if (n >= from) await this.blocks.block(key, Math.min(MAX_BLOCK_SECONDS, 2 ** Math.min(20, n - from)));
    return n;
  }

  async forget(key: string): Promise<void> {
    await Promise.all([this.fails.delete(key), this.blocks.delete(key)]);
  }
}

/**
 * Client authentication at the token endpoint that a flood of wrong secrets cannot turn into CPU burn
 * (P80–P82): a secret verified once is recognised by a keyed digest without hashing again,
 * failed attempts are throttled per (client, address) and per address before any hashing, and the
 * hashing itself runs in a small pool with a bounded queue. One per app: nothing here is module state.
 */
export class ClientAuthenticator {
  private readonly pool: VerificationPool;
  private readonly counter = new FailureCounter();
  // HMAC with a key of this process: the cache holds no secret, nor anything to guess one from offline.
  private readonly digestKey = randomBytes(32);
  /** (tenant, client) → the stored hash a secret was verified against and that secret's digest. */
  private readonly verified = new LRUCache<string, { storedHash: string; digest: Buffer }>({ max: 10_000 });
  /** Address keys with an attempt in their slow lane (see `admission`). */
  private readonly slowLane = new Set<string>();

  constructor(private readonly opts: ClientAuthOptions) {
    this.pool = new VerificationPool(opts.concurrency ?? defaultConcurrency(), opts.queueLimit);
  }

  /**
   * Authenticates `clientId` of `tenantKey` with `secret`, presented from `address`. `lookup` reads the
   * client (undefined when the tenant or client is unknown); `res` is the response, whose closing takes a
   * waiting attempt out of the queue. Unknown tenant, unknown client and wrong secret fail alike (D4).
   */
  async authenticate<C extends { secretHash: string }>(
    who: { tenantKey: string; clientId: string; secret: string; address: string },
    lookup: () => Promise<C | undefined>,
    res: Closable,
  ): Promise<ClientAuthOutcome<C>> {
    const cacheKey = `${who.tenantKey}\u0000${who.clientId}`;
    const digest = createHmac('sha256', this.digestKey).update(who.secret).digest();
    const known = this.verified.get(cacheKey);
    const recognised = known !== undefined && timingSafeEqual(known.digest, digest);
    const address = addressKey(who.address);
    const keys = {
      address: `a\u0000${address}`,
      slow: `s\u0000${address}`,
      client: `c\u0000${sha256(cacheKey)}`,
      pair: `p\u0000${sha256(`${cacheKey}\u0000${address}`)}`,
    };

    // A recognised secret skips the throttles: it proves itself without hashing, so a flood from the
    // same address, or against the same client, does not lock its holder out.
    if (recognised) {
      const client = await lookup();
      if (client && client.secretHash === known.storedHash) {
        await this.counter.forget(keys.pair);
        return { kind: 'ok', client };
      }
      // The stored secret changed (rotated in the tenant file): the old verification no longer counts.
      this.verified.delete(cacheKey);
    }
    const admission = await this.admission(keys);
    if (typeof admission === 'object') return admission;

    // A pair that has not failed takes its own turns in the pool, beside its address's failing ones: the
    // first attempt of a client behind a NAT does not wait behind its neighbours' retries. The client is
    // read in the pool too: a flood costs no more statements than verifications.
    const lane = admission === 'failing' ? address : `${address}\u0000new`;
    let result;
    try {
      result = await this.pool.run(lane, res, async () => {
        const client = await lookup();
        return { client, valid: await verifySecret(who.secret, client?.secretHash) };
      });
    } finally {
      if (admission === 'slow') this.slowLane.delete(keys.address);
    }
    // Like admission: an address over its share of the queue gets 429, one crowded out by others 503.
    if (result === 'over' || result === 'gone') {
      return {
        kind: 'throttled',
        retryAfterSeconds: 1,
        reason: 'Too many client authentications from this address are waiting; retry shortly.',
      };
    }
    if (result === 'full') {
      return { kind: 'busy', retryAfterSeconds: 1, reason: 'Too many client authentications are in progress; retry shortly.' };
    }
    const { client, valid } = result.value;
    if (valid && client) {
      this.verified.set(cacheKey, { storedHash: client.secretHash, digest });
      await this.counter.forget(keys.pair);
      return { kind: 'ok', client };
    }
    await this.failed(keys, admission === 'slow');
    return { kind: 'failed' };
  }

  /**
   * Refuses an attempt before any hashing, or says how it is verified: 'failing' (its pair has failed
   * before), 'new' (it has not), 'slow' (it has not, and its address is blocked: one such attempt at a
   * time per address, while its own failures allow; P81). A 'slow' attempt holds its address's lane.
   */
  private async admission(keys: {
    address: string;
    slow: string;
    pair: string;
  }): Promise<ClientAuthOutcome<never> | 'failing' | 'new' | 'slow'> {
    const pair = await this.counter.blockedMs(keys.pair);
    if (pair > 0) return throttled(pair, 'Too many failed authentications of this client from this address; retry later.');
    const own = await this.counter.count(keys.pair);
    const address = this.opts.addressFailureLimit > 0 ? await this.counter.blockedMs(keys.address) : 0;
    if (address === 0) return own > 0 ? 'failing' : 'new';
    // Other clients' failures from this address (a NAT's misconfigured neighbours, or an attacker) do not
    // lock out a client that has not failed from it: its attempts still get verified, slowly.
    const reason = 'Too many failed client authentications from this address; retry later.';
    if (own > 0) return throttled(address, reason);
    const slow = this.slowLane.has(keys.address) ? 0 : await this.counter.blockedMs(keys.slow);
    // The lane busy: its attempt ends within a verification or so.
    if (slow > 0 || this.slowLane.has(keys.address)) return throttled(Math.max(slow, 1_000), reason);
    this.slowLane.add(keys.address);
    return 'slow';
  }

  private async failed(keys: { address: string; slow: string; client: string; pair: string }, slow: boolean) {
    const { failureLimit, addressFailureLimit } = this.opts;
    // A client failing from many addresses is under attack: each address then has no free failures, while
    // an address that has not failed for it (its real holder, say) still gets its secret verified.
    const underAttack = (await this.counter.fail(keys.client, Number.MAX_SAFE_INTEGER)) > failureLimit * UNDER_ATTACK_FACTOR;
    const own = await this.counter.fail(keys.pair, underAttack ? 0 : failureLimit);
    // An address counts distinct failing clients, not failures: a neighbour retrying a wrong secret is
    // its pair's business; many clients failing from one address is spraying or enumeration.
    if (addressFailureLimit > 0 && own === 1) await this.counter.fail(keys.address, addressFailureLimit);
    // The slow lane admits only pairs that never failed, so only spraying fails in it: it has its own backoff.
    if (slow) await this.counter.fail(keys.slow, failureLimit);
  }
}

function throttled(ms: number, reason: string): ClientAuthOutcome<never> {
  return { kind: 'throttled', retryAfterSeconds: Math.max(1, Math.ceil(ms / 1000)), reason };
}

function sha256(s: string): string {
  return createHash('sha256').update(s).digest('base64url');
}
