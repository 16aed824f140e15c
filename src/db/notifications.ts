import pg from 'pg';

/** What a LISTEN connection reports: each payload, and when it (re)connects or drops. */
export interface NotificationHandlers {
  message(payload: string): void;
  connected(): void;
  disconnected(): void;
}

/** An open LISTEN. */
export interface Listener {
  close(): Promise<void>;
  /**
   * Resolves once every notification committed before the call has been handed to `message`: a round trip
   * on the LISTEN connection, whose answer PostgreSQL sends after the notifications pending for it. Absent
   * where notifications arrive in-process at the commit (PGlite).
   */
  sync?(): Promise<void>;
}

/** Listens on a channel until closed. */
export type Listen = (channel: string, handlers: NotificationHandlers) => Promise<Listener>;

/**
 * LISTEN on a connection of its own (a pooled one would be handed to other queries). After a drop it
 * reconnects with backoff; `disconnected` tells the caller that notifications may have been missed.
 */
export async function listenPostgres(url: string, channel: string, h: NotificationHandlers): Promise<Listener> {
  let current: pg.Client | undefined;
  /** Ends `current` as dropped (its handlers below): set while connected. */
  let dropCurrent: (() => void) | undefined;
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  const connect = async () => {
    // keepAlive and a periodic query detect a connection that died silently (an idle timeout on the
    // way): an unnoticed dead listener would leave the in-process cache on without invalidations.
    const client = new pg.Client({
      connectionString: url,
      application_name: 'ssdi-listener',
      keepAlive: true,
      query_timeout: LISTENER_PROBE_TIMEOUT_MS,
    });
    // A FATAL (a terminated backend) arriving with no statement under way is an 'error' event, which
    // without a listener ends the process: from the start on, before `drop` listens after LISTEN.
    client.on('error', () => {});
    client.on('notification', (n) => {
      if (n.channel === channel) h.message(n.payload ?? '');
    });
    const failed = () => {
      client.removeAllListeners();
      client.on('error', () => {});
      client.end().catch(() => {});
    };
    try {
      await client.connect();
      await client.query(`LISTEN ${client.escapeIdentifier(channel)}`);
    } catch (e) {
      failed();
      throw e;
    }
    if (closed) return void client.end().catch(() => {});
    // Handlers for a drop only once connected, so a failed attempt schedules exactly one retry.
    let probe: NodeJS.Timeout | undefined;
    const drop = () => {
      if (current !== client) return;
      current = undefined;
      dropCurrent = undefined;
      clearInterval(probe);
      failed();
      h.disconnected();
      if (!closed) retry(250);
    };
    client.on('error', drop);
    client.on('end', drop);
    probe = setInterval(() => void client.query('SELECT 1').catch(drop), LISTENER_PROBE_MS);
    probe.unref();
    current = client;
    dropCurrent = drop;
    h.connected();
  };
  const retry = (delay: number) => {
    timer = setTimeout(() => connect().catch(() => !closed && retry(Math.min(delay * 2, 5000))), delay);
    timer.unref();
  };
  // A database that is away now (it may have dropped right after start-up's migrations) is waited for
  // like a dropped connection: the caller works without notifications until `connected`.
  await connect().catch(() => retry(250));
  return {
    // A connection that failed is dropped by its handlers above, which tells the caller to trust nothing it
    // heard. One that does not answer in time (a hung network path, a stopped peer) is dropped here: every
    // request waits for this round trip, so it may not wait for the probe's longer time-out.
    sync: async () => {
      const client = current;
      const drop = dropCurrent;
      if (!client) return;
      let answered = false;
      const answer = client.query('SELECT 1').then(
        () => void (answered = true),
        () => void (answered = true),
      );
      let timer: NodeJS.Timeout | undefined;
      const late = await Promise.race([
        answer.then(() => false),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), LISTENER_SYNC_TIMEOUT_MS))),
      ]);
      clearTimeout(timer);
      if (!late) return;
      // An event loop blocked past the time-out runs the timer before it reads an answer already waiting
      // on the socket: the answer is read (poll phase) before this checks (check phase).
      await new Promise((resolve) => setImmediate(resolve));
      if (!answered) drop?.();
    },
    close: async () => {
      closed = true;
      clearTimeout(timer);
      const c = current;
      current = undefined;
      if (c) {
        c.removeAllListeners();
        c.on('error', () => {});
        await c.end().catch(() => {});
      }
    },
  };
}

const LISTENER_PROBE_MS = 15_000;
const LISTENER_PROBE_TIMEOUT_MS = 5_000;
/** The bus's round trip before a request (P161): well above a loaded event loop's lag, well below a client's patience. */
const LISTENER_SYNC_TIMEOUT_MS = 1_000;
