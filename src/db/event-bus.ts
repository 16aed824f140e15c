import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Logger } from 'pino';
import { detached } from '../core/tracing.js';
import type { Listen, Listener } from './notifications.js';
import type { Db } from './tables.js';

/**
 * The one channel of the bus: every topic travels on it, named in the payload, so that an instance holds
 * one LISTEN connection however many topics it follows.
 */
export const EVENT_CHANNEL = 'ssdi_events';

/** PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; the envelope counts. */
export const MAX_EVENT_BYTES = 7_999;
/**
 * Characters (JSON) a list of ids may take in one event, leaving the rest of MAX_EVENT_BYTES to the
 * envelope and the event's other fields: a publisher with a longer list names the whole set instead.
 */
export const MAX_EVENT_ID_LIST_CHARS = 6_000;

/** A kind of event: its name on the wire and how a received payload is read back. */
export interface Topic<T> {
  readonly name: string;
  /**
   * Turns a received payload (what JSON.parse gave) into a `T`, throwing when it is not one (another
   * version of the service may send another shape).
   */
  readonly decode: (data: unknown) => T;
}

/** Declares a topic; a domain defines its events' type and their check next to the code that sends them. */
export function defineTopic<T>(name: string, decode: (data: unknown) => T): Topic<T> {
  return { name, decode };
}

interface Envelope {
  topic: string;
  data: unknown;
}

/**
 * Publishes an event to every instance's subscribers of `topic`, this one's included. `db` should be the
 * transaction that makes the change the event describes: PostgreSQL delivers a NOTIFY only when its
 * transaction commits (and never after a rollback), so no instance hears of a change it cannot read yet.
 * Needs no EventBus: any code holding a transaction can publish.
 */
export async function publish<T>(db: Db, topic: Topic<T>, event: T): Promise<void> {
  const text = JSON.stringify({ topic: topic.name, data: event } satisfies Envelope);
  if (Buffer.byteLength(text) > MAX_EVENT_BYTES)
    throw new Error(`An event of topic '${topic.name}' is over ${MAX_EVENT_BYTES} bytes: NOTIFY would refuse it.`);
  await sql`SELECT pg_notify(${EVENT_CHANNEL}, ${text})`.execute(db);
}

/**
 * Runs `run` with a mark for the events it publishes (in its own transactions), and resolves once a LISTEN
 * of its own has heard one carrying that mark: PostgreSQL has then delivered them to every listening
 * connection, so every instance's subscribers have them before the writer answers. For writers that hold
 * no EventBus (a tenant apply from the command line). Gives up waiting after `waitMs`: the change is
 * committed; an instance that missed it has lost its LISTEN connection and trusts no cache meanwhile.
 */
export async function publishedAndHeard<T>(listen: Listen, run: (mark: string) => Promise<T>, waitMs = 2_000): Promise<T> {
  const mark = randomUUID();
  let heard!: () => void;
  let listening!: () => void;
  const wasHeard = new Promise<void>((resolve) => (heard = resolve));
  const isListening = new Promise<void>((resolve) => (listening = resolve));
  const listener = await listen(EVENT_CHANNEL, {
    message: (payload) => {
      if (payload.includes(mark)) heard();
    },
    connected: () => listening(),
    disconnected: () => undefined,
  });
  const timeout = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());
  try {
    await Promise.race([isListening, timeout(waitMs)]);
    const result = await run(mark);
    await Promise.race([wasHeard, timeout(waitMs)]);
    return result;
  } finally {
    await listener.close();
  }
}

/** What a subscriber hears besides its events. Each is optional. */
export interface SubscriptionHandlers {
  /** The bus listens (at subscribe, when it already does, and after every reconnection). */
  connected?(): void;
  /** The LISTEN connection dropped: events may be missed until `connected`. */
  disconnected?(): void;
  /** A message that may have been for this topic could not be read: treat it as missed. */
  unreadable?(): void;
}

/** Ends a subscription. */
export type Unsubscribe = () => void;

interface Subscriber {
  handler(event: unknown): void;
  on: SubscriptionHandlers;
}

/**
 * The instance's end of the event bus: one LISTEN connection on EVENT_CHANNEL (the database handle's
 * `listen`: reconnecting on PostgreSQL, in-process on PGlite), its messages handed to the subscribers of
 * their topic. Several subscribers per topic; a subscriber that throws is logged and does not stop the others.
 */
export class EventBus {
  private readonly topics = new Map<string, { topic: Topic<unknown>; subscribers: Set<Subscriber> }>();
  private listener: Listener | undefined;
  /** The round trip `sync` shares, and the one queued behind it. */
  private syncing: Promise<void> | undefined;
  private syncQueued: Promise<void> | undefined;
  private isConnected = false;

  private constructor(private readonly log: Logger) {}

  /** Starts listening; a database that is away is waited for (subscribers hear `connected` when it is back). */
  static async open(listen: Listen, log: Logger): Promise<EventBus> {
    const bus = new EventBus(log);
    bus.listener = await listen(EVENT_CHANNEL, {
      // Not in the context of whatever delivered it (PGlite's NOTIFY: the committing request's).
      message: (payload) => detached(() => bus.receive(payload)),
      connected: () => {
        bus.isConnected = true;
        bus.each((s) => s.on.connected?.());
      },
      disconnected: () => {
        bus.isConnected = false;
        bus.each((s) => s.on.disconnected?.());
      },
    });
    return bus;
  }

  /**
   * Resolves once every event committed before the call has reached the subscribers (the listener's
   * `sync`; at once where none is needed, or while not listening, when subscribers trust nothing they
   * heard). Concurrent calls share one round trip; a call made while one is under way waits for the next,
   * because the one under way may have begun before its events were sent.
   */
  sync(): Promise<void> {
    const sync = this.listener?.sync;
    if (!sync || !this.isConnected) return Promise.resolve();
    if (!this.syncing) {
      this.syncing = sync().finally(() => (this.syncing = undefined));
      return this.syncing;
    }
    this.syncQueued ??= this.syncing.then(() => {
      this.syncQueued = undefined;
      return this.sync();
    });
    return this.syncQueued;
  }

  /** Whether the LISTEN connection is up (events published now will be heard). */
  get connected(): boolean {
    return this.isConnected;
  }

  /**
   * Calls `handler` with every event of `topic` published by any instance after now. `on.connected` is
   * called at once when the bus already listens. Returns the function that ends the subscription.
   */
  subscribe<T>(topic: Topic<T>, handler: (event: T) => void, on: SubscriptionHandlers = {}): Unsubscribe {
    let entry = this.topics.get(topic.name);
    if (!entry) this.topics.set(topic.name, (entry = { topic: topic as Topic<unknown>, subscribers: new Set() }));
    else if (entry.topic !== topic) throw new Error(`Two topics are named '${topic.name}'.`);
    const subscriber: Subscriber = { handler: handler as (event: unknown) => void, on };
    entry.subscribers.add(subscriber);
    if (this.isConnected) this.call(() => on.connected?.());
    const subscribers = entry.subscribers;
    return () => {
      subscribers.delete(subscriber);
      if (subscribers.size === 0 && this.topics.get(topic.name)?.subscribers === subscribers) this.topics.delete(topic.name);
    };
  }

  /** Stops listening. Subscribers hear nothing more (not even `disconnected`). */
  async close(): Promise<void> {
    this.topics.clear();
    this.isConnected = false;
    await this.listener?.close();
  }

  private receive(payload: string): void {
    let envelope: Envelope;
    try {
      envelope = JSON.parse(payload) as Envelope;
      if (typeof envelope !== 'object' || envelope === null || typeof envelope.topic !== 'string') throw new Error('no topic');
    } catch {
      // Whose it was is unknown: every subscriber may have missed an event.
      this.log.warn('event bus: a message of unknown shape');
      this.each((s) => s.on.unreadable?.());
      return;
    }
    // A topic nobody here follows (another version's, or one this instance does not use): not ours.
    const entry = this.topics.get(envelope.topic);
    if (!entry) return;
    let event: unknown;
    try {
      event = entry.topic.decode(envelope.data);
    } catch {
      this.log.warn({ topic: envelope.topic }, 'event bus: an event of unknown shape');
      for (const s of [...entry.subscribers]) this.call(() => s.on.unreadable?.());
      return;
    }
    for (const s of [...entry.subscribers]) this.call(() => s.handler(event));
  }

  private each(fn: (s: Subscriber) => void): void {
    for (const { subscribers } of [...this.topics.values()]) for (const s of [...subscribers]) this.call(() => fn(s));
  }

  private call(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.log.error({ err: e }, 'event bus: a subscriber failed');
    }
  }
}
