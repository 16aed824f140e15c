import { type Server, type Socket, connect, createServer } from 'node:net';

/**
 * How a refusing proxy turns connections away: `close` accepts and closes at once (a load balancer or
 * pooler in front of a database that is away), `unlisten` stops listening (the port refuses: ECONNREFUSED).
 */
export type RefuseMode = 'close' | 'unlisten';

/**
 * A loopback TCP proxy a test controls, to put faults between the service and PostgreSQL (issue 15):
 * it listens on 127.0.0.1 and forwards every connection to `target` until told otherwise.
 */
export class TcpProxy {
  private listener: Server | undefined;
  private readonly pairs = new Set<{ client: Socket; upstream: Socket }>();
  private refusing: RefuseMode | undefined;
  /** Connections forwarded since the start. */
  accepted = 0;

  private constructor(
    private readonly target: { host: string; port: number },
    /** The port it listens on (kept across `refuse('unlisten')` and `restore()`). */
    public port: number,
  ) {}

  /** Starts forwarding from an ephemeral loopback port to `target`. */
  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const proxy = new TcpProxy(target, 0);
    await proxy.listen();
    return proxy;
  }

  /** A proxy to the server of a postgres:// URL. */
  static forUrl(databaseUrl: string): Promise<TcpProxy> {
    const u = new URL(databaseUrl);
    return TcpProxy.start({ host: u.hostname, port: Number(u.port || 5432) });
  }

  /** `databaseUrl` (same user, database and options) pointed at this proxy. */
  url(databaseUrl: string): string {
    const u = new URL(databaseUrl);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  /** Connections being forwarded now. */
  get open(): number {
    return this.pairs.size;
  }

  /** Drops every open connection abruptly (a reset towards the client, as a network failure would). */
  cut(): void {
    for (const pair of this.pairs) {
      pair.client.resetAndDestroy();
      pair.upstream.destroy();
    }
    this.pairs.clear();
  }

  /**
   * Open connections stay open but carry nothing more either way (a hung path, a stopped peer): the
   * service's side sees no reset and no answer. New connections are forwarded as before.
   */
  stall(): void {
    for (const { client, upstream } of this.pairs) {
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.pause();
      upstream.pause();
    }
  }

  /** New connections are turned away (see RefuseMode); open ones stay until cut(). */
  async refuse(mode: RefuseMode = 'close'): Promise<void> {
    this.refusing = mode;
    if (mode === 'unlisten' && this.listener) {
      const server = this.listener;
      this.listener = undefined;
      // close() stops accepting at once; its callback waits for open connections, which cut() owns.
      server.close();
    }
  }

  /** Forwards new connections again. */
  async restore(): Promise<void> {
    this.refusing = undefined;
    if (!this.listener) await this.listen();
  }

  /** Stops listening and drops every connection. */
  async close(): Promise<void> {
    this.refusing = 'unlisten';
    const server = this.listener;
    this.listener = undefined;
    this.cut();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private async listen(): Promise<void> {
    const server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.port = (server.address() as { port: number }).port;
    this.listener = server;
  }

  private accept(client: Socket): void {
    client.on('error', () => {});
    if (this.refusing) {
      client.destroy();
      return;
    }
    this.accepted++;
    const upstream = connect(this.target.port, this.target.host);
    const pair = { client, upstream };
    this.pairs.add(pair);
    // Either side ending or failing ends both: a half-open pair would hide a fault from the service.
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    upstream.on('error', end);
    client.on('error', end);
    upstream.on('close', end);
    client.on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  }
}
