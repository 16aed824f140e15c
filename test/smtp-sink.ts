import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

/** One message the sink accepted, parsed enough for assertions. */
export interface ReceivedMail {
  envelopeTo: string[];
  messageId: string;
  from: string;
  to: string;
  subject: string;
  text: string;
  html: string;
  raw: string;
}

/** An SMTP reply the sink gives instead of accepting (e.g. 451, a temporary failure). */
type Reply = { code: number; message: string };

/**
 * A real SMTP server on loopback (the `smtp-server` package, plain: no STARTTLS, no auth) that keeps what
 * it accepts. It can be stopped and started again on the same port, refuse DATA or recipients, and hold
 * DATA until released (a send in progress).
 */
export class SmtpSink {
  port = 0;
  received: ReceivedMail[] = [];
  /** DATA attempts seen (accepted or refused). */
  dataAttempts = 0;
  /** Refuse every DATA with this reply while set. */
  refuseData: Reply | undefined;
  /** Recipients refused for good (550). */
  refuseRecipients = new Set<string>();
  /** While set, DATA is answered only when the promise resolves. */
  hold: Promise<void> | undefined;
  /** Called when a held DATA arrives. */
  onHeld: (() => void) | undefined;
  private server: SMTPServer | undefined;

  get url(): string {
    return `smtp://127.0.0.1:${this.port}`;
  }

  async start(): Promise<this> {
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS', 'AUTH'],
      logger: false,
      closeTimeout: 500,
      onRcptTo: (address, _session, cb) => {
        if (this.refuseRecipients.has(address.address.toLowerCase()))
          return cb(Object.assign(new Error('No such user here'), { responseCode: 550 }));
        cb();
      },
      onData: (stream, session, cb) => {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          this.dataAttempts++;
          const finish = () => {
            if (this.refuseData) return cb(Object.assign(new Error(this.refuseData.message), { responseCode: this.refuseData.code }));
            const raw = Buffer.concat(chunks).toString('utf8');
            this.received.push({ ...parseMail(raw), envelopeTo: session.envelope.rcptTo.map((r) => r.address), raw });
            cb();
          };
          if (this.hold) {
            this.onHeld?.();
            void this.hold.then(finish);
          } else finish();
        });
      },
    });
    await new Promise<void>((resolve, reject) => {
      const s = server.listen(this.port, '127.0.0.1', () => resolve());
      s.once('error', reject);
    });
    this.port = (server.server.address() as AddressInfo).port;
    this.server = server;
    return this;
  }

  /** Stops listening (the port stays this sink's for a later start). */
  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  /** Accepted messages to an address (case-insensitive). */
  to(address: string): ReceivedMail[] {
    return this.received.filter((m) => m.envelopeTo.some((a) => a.toLowerCase() === address.toLowerCase()));
  }
}

function unfoldHeaders(head: string): Map<string, string> {
  const headers = new Map<string, string>();
  for (const line of head.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0) headers.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
  }
  return headers;
}

function decodeWords(value: string): string {
  return value
    .replace(/\?=\s+=\?/g, '?==?')
    .replace(/=\?([^?]+)\?([QqBb])\?([^?]*)\?=/g, (_m, _charset: string, enc: string, text: string) =>
      enc.toUpperCase() === 'B'
        ? Buffer.from(text, 'base64').toString('utf8')
        : Buffer.from(
            text.replace(/_/g, ' ').replace(/=([0-9A-F]{2})/gi, (_x, h: string) => String.fromCharCode(parseInt(h, 16))),
            'latin1',
          ).toString('utf8'),
    );
}

function decodeBody(body: string, encoding: string | undefined): string {
  const enc = (encoding ?? '7bit').toLowerCase();
  if (enc === 'base64') return Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
  if (enc === 'quoted-printable') {
    const bytes = body.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/gi, (_x, h: string) => String.fromCharCode(parseInt(h, 16)));
    return Buffer.from(bytes, 'latin1').toString('utf8');
  }
  return body;
}

/** The leaves of a MIME message: content type → decoded body. */
function leaves(raw: string, out: Map<string, string>): Map<string, string> {
  const at = raw.search(/\r?\n\r?\n/);
  const headers = unfoldHeaders(at < 0 ? raw : raw.slice(0, at));
  const body = at < 0 ? '' : raw.slice(at).replace(/^\r?\n\r?\n/, '');
  const type = headers.get('content-type') ?? 'text/plain';
  const boundary = /boundary="?([^";]+)"?/i.exec(type)?.[1];
  if (type.toLowerCase().startsWith('multipart/') && boundary) {
    const parts = body.split(`--${boundary}`).slice(1);
    for (const p of parts) {
      if (p.startsWith('--')) break;
      leaves(p.replace(/^\r?\n/, '').replace(/\r?\n$/, ''), out);
    }
  } else {
    out.set(type.split(';')[0]!.trim().toLowerCase(), decodeBody(body, headers.get('content-transfer-encoding')).replace(/\r\n/g, '\n'));
  }
  return out;
}

/** Headers and text/HTML bodies of a raw message (enough MIME for what nodemailer writes). */
export function parseMail(raw: string): Omit<ReceivedMail, 'envelopeTo' | 'raw'> {
  const at = raw.search(/\r?\n\r?\n/);
  const headers = unfoldHeaders(raw.slice(0, at));
  const parts = leaves(raw, new Map());
  return {
    messageId: headers.get('message-id') ?? '',
    from: decodeWords(headers.get('from') ?? ''),
    to: decodeWords(headers.get('to') ?? ''),
    subject: decodeWords(headers.get('subject') ?? ''),
    text: parts.get('text/plain') ?? '',
    html: parts.get('text/html') ?? '',
  };
}
