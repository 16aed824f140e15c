import { sql } from 'kysely';
import type { Logger } from 'pino';
import type { Db } from './tables.js';

/** The high half of an ANALYZE's advisory lock key (the low half is the table's oid). */
const ANALYZE_LOCK = 0x5dd1a;

/**
 * Analyzes a table soon after many of its rows were written (P89). PostgreSQL counts the
 * rows written to each table since its last ANALYZE (`n_mod_since_analyze`); its autovacuum acts on
 * that count only after up to a minute (`autovacuum_naptime`), and until then a table bulk-written from
 * nearly empty is planned as if it were still small, a plan that can take minutes instead of
 * milliseconds. Every `intervalMs` this looks at that count, and analyzes each table past
 * `rows` + 10% of its live rows (autovacuum's scale factor), one table after another, on a pooled
 * connection of its own: outside any writer's transaction and off every request's path. A table is
 * analyzed by one instance at a time (an advisory lock; the others skip it). Off on PGlite, which
 * neither runs autovacuum nor counts writes before an ANALYZE.
 */
export class TableAnalyzer {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private closed = false;
  private readonly db: Db;

  constructor(
    db: Db,
    private readonly opts: { rows: number; intervalMs: number },
    private readonly log: Logger,
  ) {
    // Not a request's statements: the app's plugins (statement counters in tests) do not see them.
    this.db = db.withoutPlugins();
  }

  async start(): Promise<void> {
    if (this.opts.rows <= 0) return;
    const { rows } = await sql<{ pglite: boolean }>`SELECT version() LIKE '%PGlite%' AS pglite`.execute(this.db);
    if (rows[0]?.pglite) return;
    this.timer = setInterval(() => {
      this.running ??= this.check().finally(() => (this.running = undefined));
    }, this.opts.intervalMs);
    this.timer.unref();
  }

  /** Stops checking; waits for an ANALYZE in progress. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    await this.running;
  }

  private async check(): Promise<void> {
    try {
      const due = await sql<{ relid: string; table: string; changed: string }>`
        SELECT relid::text AS relid, relname AS table, n_mod_since_analyze AS changed FROM pg_stat_user_tables
        WHERE schemaname = current_schema() AND n_mod_since_analyze >= ${this.opts.rows} + 0.1 * n_live_tup
          -- Only tables this role may analyze: another's would warn, keep its count and come back every check.
          AND pg_has_role((SELECT relowner FROM pg_class WHERE oid = relid), 'USAGE')
        ORDER BY n_mod_since_analyze DESC`.execute(this.db);
      for (const t of due.rows) {
        if (this.closed) return;
        const started = Date.now();
        const done = await this.db.transaction().execute(async (trx) => {
          const lock = await sql<{
            got: boolean;
          }>`SELECT pg_try_advisory_xact_lock((${ANALYZE_LOCK}::int8 << 32) + ${t.relid}::int8) AS got`.execute(trx);
          if (!lock.rows[0]?.got) return false;
          await sql`ANALYZE ${sql.id(t.table)}`.execute(trx);
          return true;
        });
        if (done)
          this.log.debug({ table: t.table, changedRows: Number(t.changed), ms: Date.now() - started }, 'table analyzed after writes');
      }
    } catch (e) {
      // The next check tries again; a database that is away is reported by the requests and /readyz.
      this.log.warn({ err: e }, 'analyzing written tables failed');
    }
  }
}
