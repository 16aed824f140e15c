import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import nodemailer, { type NodemailerError, type Transporter } from 'nodemailer';
import type { Logger } from 'pino';
import type { Config } from '../../core/config.js';
import { detached } from '../../core/tracing.js';
import type { Db, MailOutboxRow } from '../../db/tables.js';
import { errorLogLevel } from '../../http/errors.js';
import type { EventBus, Unsubscribe } from '../../db/event-bus.js';
import { MAIL_QUEUED, claimDueMails, markFailed, markSent, msUntilNextDue, releaseClaims, stillClaimed } from './outbox.repository.js';

/** Mails claimed (and sent in parallel) at once by one instance. */
const CONCURRENCY = 4;
/**
 * How long a claim holds. Far longer than one SMTP exchange can take (bounded by the timeouts below), so
 * a live sender never loses its claim mid-send; a dead one's claims lapse after it.
 */
const LEASE_SECONDS = 300;
const SMTP_TIMEOUTS = { connectionTimeout: 30_000, greetingTimeout: 30_000, socketTimeout: 60_000 };
/** Errors of reaching the SMTP server, whose messages name its address. */
const NETWORK_ERRORS = new Set(['ESOCKET', 'ECONNECTION', 'ETIMEDOUT', 'EDNS', 'ETLS', 'EPROXY']);
/** Retries of the "sent" record after the SMTP server accepted (a database hiccup must not cause a resend). */
const MARK_SENT_RETRIES = [100, 500, 2_000];

/** The domain of the MAIL_FROM address: the right side of every Message-ID. */
export function messageIdDomain(mailFrom: string): string {
  const address = /<([^>]+)>/.exec(mailFrom)?.[1] ?? mailFrom;
  return address.slice(address.lastIndexOf('@') + 1).trim() || 'localhost';
}

/**
 * The delivery side of the invitation outbox (D9, docs/portal-outbox.md), one per service instance,
 * started by buildApp and stopped by App.close(). It claims due mails (FOR UPDATE SKIP LOCKED plus a
 * lease, so several instances never send one mail twice), sends each with nodemailer over SMTP (or logs
 * it when SMTP_URL is unset), marks it sent only once the server accepted it, and otherwise schedules a
 * retry with exponential backoff, keeping it as a dead letter after MAIL_MAX_ATTEMPTS. It is woken by
 * NOTIFY when any instance queues a mail, and polls for retries and lapsed claims.
 */
export class OutboxSender {
  private readonly transport: Transporter;
  private readonly smtp: boolean;
  private readonly domain: string;
  /** SMTP_URL's password, kept out of stored and logged errors. */
  private readonly password: string;
  private unsubscribe: Unsubscribe | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Db,
    private readonly config: Config,
    private readonly log: Logger,
  ) {
    this.smtp = config.SMTP_URL !== undefined;
    this.transport = config.SMTP_URL
      ? nodemailer.createTransport({ url: config.SMTP_URL, ...SMTP_TIMEOUTS })
      : nodemailer.createTransport({ jsonTransport: true });
    this.domain = messageIdDomain(config.MAIL_FROM);
    let password = '';
    try {
      password = config.SMTP_URL ? decodeURIComponent(new URL(config.SMTP_URL).password) : '';
    } catch {
      // not a URL the WHATWG parser reads: nodemailer parses it on its own
    }
    this.password = password;
  }

  /** Listens for queued mails (every instance's; without a bus, polling only) and sends what is due. */
  start(bus?: EventBus): void {
    // Events may have been missed while disconnected, or unread: look for due mail then too.
    this.unsubscribe = bus?.subscribe(MAIL_QUEUED, () => this.kick(), { connected: () => this.kick(), unreadable: () => this.kick() });
    if (!this.smtp) this.log.info('SMTP_URL is unset: invitation mails are logged, not sent');
    this.kick();
  }

  /** Stops claiming, waits for the sends in progress (bounded by the SMTP timeouts) and stops listening. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.running;
    this.unsubscribe?.();
    this.transport.close();
  }

  /** Sends what is due now; a kick during a run makes it run again after. */
  kick(): void {
    if (this.closed) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    // Not in the trace of whatever kicked it.
    this.running = detached(() => this.drain())
      .catch((e: unknown) =>
        this.log[errorLogLevel(e)]({ err: e }, 'invitation outbox: a delivery run failed; retrying after MAIL_POLL_MS'),
      )
      .finally(() => {
        this.running = undefined;
        if (this.closed) return;
        if (this.again) {
          this.again = false;
          this.kick();
        } else void this.schedule();
      });
  }

  /** The next run: when the next mail is due (a retry, a lapsing claim), at the latest after MAIL_POLL_MS. */
  private async schedule(): Promise<void> {
    const due = await msUntilNextDue(this.db).catch(() => null);
    if (this.closed || this.running) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.kick(), Math.min(due ?? this.config.MAIL_POLL_MS, this.config.MAIL_POLL_MS));
    this.timer.unref();
  }

  private async drain(): Promise<void> {
    while (!this.closed) {
      const token = randomUUID();
      const mails = await claimDueMails(this.db, { limit: CONCURRENCY, leaseSeconds: LEASE_SECONDS, token, messageIdDomain: this.domain });
      if (mails.length === 0) return;
      // Settled, not Promise.all: a run (which close() waits for) ends only when every send of it has.
      const failure = (await Promise.allSettled(mails.map((m) => this.deliver(m, token)))).find((r) => r.status === 'rejected');
      if (failure) throw failure.reason;
    }
  }

  private async deliver(m: MailOutboxRow, token: string): Promise<void> {
    const at = { outboxId: m.id, tenantId: m.tenant_id, messageId: m.message_id, attempt: m.attempts };
    if (this.closed) {
      await releaseClaims(this.db, token, [m]);
      return;
    }
    // Access removed since it was claimed: cancelled, not sent (D9).
    if (!(await stillClaimed(this.db, m, token))) {
      this.log.info(at, 'invitation mail cancelled before sending');
      return;
    }
    try {
      await this.transport.sendMail({
        from: this.config.MAIL_FROM,
        to: m.recipient,
        subject: m.subject,
        text: m.text_body,
        html: m.html_body,
        messageId: m.message_id!,
        date: m.created_at,
      });
      if (!this.smtp) {
        this.log.info(
          { ...at, to: m.recipient, subject: m.subject, text: m.text_body },
          'invitation mail (SMTP_URL unset: logged, not sent)',
        );
      }
    } catch (e) {
      await this.failed(m, token, e as NodemailerError);
      return;
    }
    for (let i = 0; ; i++) {
      try {
        if (!(await markSent(this.db, m, token)))
          this.log.warn(at, 'invitation mail sent after its claim lapsed; another instance may send it again under the same Message-ID');
        else this.log.info(at, 'invitation mail sent');
        return;
      } catch (e) {
        if (i >= MARK_SENT_RETRIES.length) throw e;
        await sleep(MARK_SENT_RETRIES[i]);
      }
    }
  }

  private async failed(m: MailOutboxRow, token: string, e: NodemailerError): Promise<void> {
    // A recipient or message the server refuses for good (5xx, RFC 5321) fails again: no retries. A refused
    // login or a dropped connection is ours or the network's to fix, and is retried.
    const permanent = e.permanent === true && (e.code === 'EENVELOPE' || e.code === 'EMESSAGE');
    const dead = permanent || m.attempts >= this.config.MAIL_MAX_ATTEMPTS;
    const base = Math.min(this.config.MAIL_BACKOFF_MS * 2 ** Math.max(0, m.attempts - 1), this.config.MAIL_BACKOFF_MAX_MS);
    const retryInMs = Math.round(base * (0.8 + Math.random() * 0.4));
    const error = this.describe(e);
    await markFailed(this.db, m, token, { error, dead, retryInMs });
    // The log (operators) has the whole error; the stored one is what tenants see through mailOutbox.
    const at = {
      outboxId: m.id,
      tenantId: m.tenant_id,
      messageId: m.message_id,
      attempt: m.attempts,
      error,
      detail: this.redact(e.message ?? String(e)),
    };
    if (dead) {
      // A recipient or message refused for good is the tenant's data to fix (an address that does not
      // exist), not the service's fault: warn; attempts run out against a server that keeps failing: error.
      this.log[permanent ? 'warn' : 'error'](
        { ...at, permanent },
        `invitation mail is a dead letter after ${m.attempts} attempt(s); it is kept (mailOutbox in GraphQL) and is queued again when the user is invited again`,
      );
    } else this.log.warn({ ...at, retryInMs }, 'invitation mail not delivered; retrying');
  }

  /**
   * The failure as stored and shown to the tenant (mailOutbox.lastError): the error code and the SMTP
   * server's reply when there is one, otherwise only codes, so the relay's address stays internal.
   */
  private describe(e: NodemailerError): string {
    const code = e.code ?? 'ERROR';
    if (e.response) return this.redact(`${code}: ${e.response}`).slice(0, 500);
    if (!NETWORK_ERRORS.has(code)) return this.redact(`${code}: ${e.message ?? String(e)}`).slice(0, 500);
    const cause = [e.originalCode && e.originalCode !== code ? e.originalCode : undefined, e.timeoutType].filter(Boolean).join(', ');
    return `${code}${cause ? ` (${cause})` : ''}: the SMTP server could not be reached, or the connection failed`;
  }

  /** Never a credential in a stored or logged error. */
  private redact(text: string): string {
    const out = text.replace(/\/\/[^/@\s]*@/g, '//');
    return this.password ? out.split(this.password).join('***') : out;
  }
}
