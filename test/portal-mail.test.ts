import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app/app.js';
import { loadConfig } from '../src/core/config.js';
import { type DatabaseHandle, openDatabase } from '../src/db/database.js';
import { eventually } from './fake-provider.js';
import { ApiClient, type TestApp, type TestTenant, createTenant, openTestDatabase } from './helpers.js';
import { SmtpSink } from './smtp-sink.js';

// D9 delivery: every invitation goes through the outbox (written with its portal user) to a real SMTP
// server on loopback (the smtp-server package). Survives the SMTP server being down, restarts and
// several instances on one database without losing or duplicating a mail; removal before sending
// cancels it; a dead letter after MAIL_MAX_ATTEMPTS is kept and logged. docs/portal-outbox.md.

const PORTAL = {
  selfAccessEnabled: true,
  thirdPartyAccessEnabled: true,
  emailFieldKey: 'email',
  displayNameFieldKey: 'fullName',
  invitationFieldKeys: ['email'],
};
const FROM = 'Acme Portal <portal@mail.example.test>';
const MESSAGE_ID = /^<[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}@mail\.example\.test>$/;
/** Short backoff and polling so retries happen within a test (the mechanism is the production one). */
const MAIL_ENV = { MAIL_FROM: FROM, MAIL_BACKOFF_MS: '20', MAIL_BACKOFF_MAX_MS: '200', MAIL_POLL_MS: '50', MAIL_MAX_ATTEMPTS: '100' };
const WAIT = 20_000;

type Db = DatabaseHandle & { url?: string; dispose(): Promise<void> };
type Instance = TestApp & { logs: Record<string, any>[] };

/**
 * One service instance over `db` (a restart is closing one and starting another on the same database).
 * On PostgreSQL with `ownPool` it has its own pool and listener, as a separate process would. Its logs are
 * kept. `publicUrl`: instances behind one public URL accept each other's tokens.
 */
async function startInstance(db: Db, env: Record<string, string>, opts: { publicUrl?: string; ownPool?: boolean } = {}): Promise<Instance> {
  const handle = opts.ownPool && db.url ? await openDatabase({ databaseUrl: db.url, dataDir: '', poolSize: 5, onPoolError: () => {} }) : db;
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'info',
    PUBLIC_URL: opts.publicUrl ?? url,
    DATA_DIR: '/nonexistent',
    ...MAIL_ENV,
    ...env,
  });
  const logs: Record<string, any>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line)) });
  const built = await buildApp({ config, db: handle.db, logger, listen: handle.listen });
  server.on('request', built.app);
  return {
    url,
    config,
    handle,
    tokens: built.tokens,
    logs,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await built.close();
      if (handle !== db) await handle.close();
    },
  };
}

const invitePath = (id: string) => `/api/v1/subject/${id}/invite`;
const sv = (key: string, value: string) => ({ Key: key, Value: { String: { Value: value } } });

async function subject(api: ApiClient, no: string, name: string, email: string): Promise<string> {
  const r = await api.post('/api/v2/messaging/subject', {
    CustomFieldValues: [sv('employeeNumber', no), sv('fullName', name), sv('email', email)],
  });
  expect([200, 201], JSON.stringify(r.body)).toContain(r.status);
  return r.body.internalId as string;
}

async function invite(api: ApiClient, id: string, emails?: string[]) {
  const r = await api.post(invitePath(id), emails);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as { id: string; email: string }[];
}

const OUTBOX = `{ mailOutbox { pending retrying dead sent cancelled lastError
  messages(first: 1000) { edges { node { id portalUserId recipient subject status attempts messageId lastError sentAt } } } } }`;

/** The tenant's outbox through GraphQL (operations view). */
async function outbox(api: ApiClient) {
  const r = await api.gql(OUTBOX);
  expect(r.body.errors, JSON.stringify(r.body.errors)).toBeUndefined();
  const o = r.body.data.mailOutbox;
  return { ...o, messages: (o.messages.edges as any[]).map((e) => e.node) };
}

/** The outbox row of one recipient, straight from the database (also when no instance is running). */
async function row(db: Db, recipient: string) {
  return db.db.selectFrom('mail_outbox').selectAll().where('recipient', '=', recipient).executeTakeFirstOrThrow();
}

describe('delivery over SMTP (D9)', () => {
  let db: Db;
  let sink: SmtpSink;
  let inst: Instance;
  let t: TestTenant;
  let api: ApiClient;

  beforeAll(async () => {
    db = await openTestDatabase();
    sink = await new SmtpSink().start();
    inst = await startInstance(db, { SMTP_URL: sink.url });
    t = await createTenant(inst, { name: 'Acme Care', portal: PORTAL });
    api = await t.client();
  });
  afterAll(async () => {
    await inst?.close();
    await sink?.stop();
    await db?.dispose();
  });

  it("the invitation arrives with the right recipient, subject, text and HTML, under the outbox's Message-ID", async () => {
    const id = await subject(api, 'E-1', 'John Carpenter', 'john@care.example');
    const [user] = await invite(api, id);
    await eventually(() => sink.to('john@care.example').length > 0, WAIT);
    const [mail] = sink.to('john@care.example');
    expect(mail!.envelopeTo).toEqual(['john@care.example']);
    expect(mail!.to).toContain('john@care.example');
    expect(mail!.from).toBe('Acme Portal <portal@mail.example.test>');
    expect(mail!.subject).toBe('Your invitation to the Acme Care portal');
    expect(mail!.text).toContain('Hello John Carpenter,');
    expect(mail!.text).toContain('invited to the Acme Care subject portal, with access to your own record.');
    expect(mail!.text).toContain('This invitation was sent to john@care.example.');
    expect(mail!.html).toContain('<p>Hello John Carpenter,</p>');
    expect(mail!.messageId).toMatch(MESSAGE_ID);

    await eventually(async () => (await outbox(api)).sent === 1, WAIT);
    const o = await outbox(api);
    expect(o).toMatchObject({ pending: 0, dead: 0, sent: 1, lastError: null });
    expect(o.messages[0]).toMatchObject({
      portalUserId: user!.id,
      recipient: 'john@care.example',
      status: 'SENT',
      attempts: 1,
      messageId: mail!.messageId,
    });
  });

  it("a third party is invited to the subject's record, and the HTML part escapes what the subject's name holds", async () => {
    const id = await subject(api, 'E-2', "Ann <b>O'Hara</b> & Co", 'ann@care.example');
    await invite(api, id, ['Kid@Relatives.example']);
    await eventually(() => sink.to('kid@relatives.example').length > 0, WAIT);
    const [mail] = sink.to('kid@relatives.example');
    expect(mail!.envelopeTo.map((a) => a.toLowerCase())).toEqual(['kid@relatives.example']);
    expect(mail!.to).toContain('Kid@');
    expect(mail!.text).toContain('Hello Kid@Relatives.example,');
    expect(mail!.text).toContain("with access to the record of Ann <b>O'Hara</b> & Co.");
    expect(mail!.html).toContain('the record of Ann &#60;b&#62;O&#39;Hara&#60;/b&#62; &#38; Co.');
    expect(mail!.html).not.toContain('<b>');
  });

  // P44: invitation mails are rendered from the tenant's templates, HTML-escaped.
  it("a tenant's template (subject, text, HTML) fills every placeholder, escaping values in the HTML", async () => {
    const custom = await createTenant(inst, {
      name: 'Care & Co',
      portal: {
        ...PORTAL,
        invitationSubject: '{tenantName}: access for {displayName}',
        invitationText:
          'Dear {displayName} <{email}>, you may now see {subjectName} ({inviteMethod}), that is {invitedTo}. {unknown is not a placeholder}',
        invitationHtml: '<h1>{tenantName}</h1><p>{subjectName} ({inviteMethod}) for {email}</p>',
      },
    });
    const capi = await custom.client();
    const id = await subject(capi, 'C-1', 'Bob <Builder>', 'bob@custom.example');
    await invite(capi, id);
    await eventually(() => sink.to('bob@custom.example').length > 0, WAIT);
    const [mail] = sink.to('bob@custom.example');
    expect(mail!.subject).toBe('Care & Co: access for Bob <Builder>');
    expect(mail!.text).toBe(
      'Dear Bob <Builder> <bob@custom.example>, you may now see Bob <Builder> (SelfAccess), that is your own record. {unknown is not a placeholder}',
    );
    expect(mail!.html).toBe('<h1>Care &#38; Co</h1><p>Bob &#60;Builder&#62; (SelfAccess) for bob@custom.example</p>');
  });

  it('a tenant file with an unknown placeholder is rejected, naming the property (D3)', async () => {
    await expect(createTenant(inst, { portal: { ...PORTAL, invitationText: 'Hi {firstName}' } })).rejects.toThrow(
      /tenants\[0\]\.portal\.invitationText: unknown placeholder \{firstName\}/,
    );
  });

  it('with the SMTP server down the invitation stays queued, and is delivered once it is back', async () => {
    await sink.stop();
    const id = await subject(api, 'E-3', 'Dan Down', 'dan@care.example');
    await invite(api, id);
    await eventually(async () => (await outbox(api)).retrying === 1, WAIT);
    const waiting = await outbox(api);
    expect(waiting).toMatchObject({
      pending: 1,
      retrying: 1,
      dead: 0,
      lastError: expect.stringMatching(/ECONNREFUSED|ESOCKET|ECONNECTION/),
    });
    expect(waiting.messages.find((m: any) => m.recipient === 'dan@care.example')).toMatchObject({
      status: 'PENDING',
      attempts: expect.any(Number),
    });
    // The tenant sees what failed, not the relay's address (that is in the logs).
    expect(waiting.lastError).not.toContain(String(sink.port));
    expect(sink.to('dan@care.example')).toEqual([]);

    await sink.start();
    await eventually(async () => (await outbox(api)).pending === 0, WAIT);
    const done = await outbox(api);
    const m = done.messages.find((x: any) => x.recipient === 'dan@care.example');
    expect(m).toMatchObject({ status: 'SENT', lastError: null });
    expect(m.attempts).toBeGreaterThan(1);
    expect(sink.to('dan@care.example').map((x) => x.messageId)).toEqual([m.messageId]);
    expect(done.lastError).toBeNull();
  });

  it('removing access before the mail was sent cancels it: it is never sent', async () => {
    await sink.stop();
    const id = await subject(api, 'E-4', 'Carla Cancel', 'carla@care.example');
    await invite(api, id, ['gone@relatives.example', 'stays@relatives.example']);
    expect((await api.delete(`${invitePath(id)}?thirdPartyUserEmails=gone@relatives.example`)).status).toBe(200);
    let o = await outbox(api);
    expect(o.messages.find((m: any) => m.recipient === 'gone@relatives.example').status).toBe('CANCELLED');
    expect(o.cancelled).toBe(1);

    await sink.start();
    await eventually(() => sink.to('stays@relatives.example').length > 0, WAIT);
    await eventually(async () => (await outbox(api)).pending === 0, WAIT);
    o = await outbox(api);
    expect(o.messages.find((m: any) => m.recipient === 'gone@relatives.example').status).toBe('CANCELLED');
    expect(sink.to('gone@relatives.example')).toEqual([]);
  });

  it('access removed while the mail is being sent: the mail stays cancelled, sent_at says it went out', async () => {
    // Found by the fuzz suite: the send finishing after the cancellation recorded the mail as sent, so a
    // later request's digest changed although that request had failed.
    const id = await subject(api, 'E-6', 'Rita Race', 'rita@care.example');
    let release!: () => void;
    sink.hold = new Promise<void>((r) => (release = r));
    const held = new Promise<void>((r) => (sink.onHeld = r));
    await invite(api, id, ['racing@relatives.example']);
    await held; // the SMTP server has the message and has not answered yet
    expect((await api.delete(`${invitePath(id)}?thirdPartyUserEmails=racing@relatives.example`)).status).toBe(200);
    sink.hold = undefined;
    release();
    await eventually(async () => (await row(db, 'racing@relatives.example')).sent_at !== null, WAIT);
    expect(await row(db, 'racing@relatives.example')).toMatchObject({ status: 'cancelled' });
    expect(sink.to('racing@relatives.example')).toHaveLength(1);
  });

  it('inviting an already invited user again sends nothing new (D9 idempotency)', async () => {
    const id = await subject(api, 'E-5', 'Ivy Idem', 'ivy@care.example');
    await invite(api, id, ['idem@relatives.example']);
    await eventually(() => sink.to('idem@relatives.example').length > 0, WAIT);
    await invite(api, id, ['IDEM@relatives.example']);
    await eventually(async () => (await outbox(api)).pending === 0, WAIT);
    expect((await outbox(api)).messages.filter((m: any) => m.recipient.toLowerCase() === 'idem@relatives.example')).toHaveLength(1);
    expect(sink.to('idem@relatives.example')).toHaveLength(1);
  });
});

describe('restarts between queueing and sending deliver exactly once', () => {
  let db: Db;
  let sink: SmtpSink;
  let first: Instance | undefined;
  let second: Instance | undefined;

  beforeAll(async () => {
    db = await openTestDatabase();
    sink = await new SmtpSink().start();
  });
  afterAll(async () => {
    await first?.close();
    await second?.close();
    await sink?.stop();
    await db?.dispose();
  });

  it('queued while the SMTP server is down, the instance stops; the next instance sends it once, same Message-ID', async () => {
    await sink.stop();
    first = await startInstance(db, { SMTP_URL: sink.url });
    const t = await createTenant(first, { portal: PORTAL });
    const api = await t.client();
    const id = await subject(api, 'R-1', 'Rick Restart', 'rick@restart.example');
    await invite(api, id);
    await eventually(
      async () => (await row(db, 'rick@restart.example')).attempts >= 1 && (await row(db, 'rick@restart.example')).last_error !== null,
      WAIT,
    );
    await first.close();
    first = undefined;
    const queued = await row(db, 'rick@restart.example');
    expect(queued).toMatchObject({ status: 'pending', claim_token: null, sent_at: null });
    expect(queued.message_id).toMatch(MESSAGE_ID);

    await sink.start();
    second = await startInstance(db, { SMTP_URL: sink.url });
    await eventually(async () => (await row(db, 'rick@restart.example')).status === 'sent', WAIT);
    await second.close(); // no sender left: nothing more can be sent
    second = undefined;
    expect(sink.to('rick@restart.example').map((m) => m.messageId)).toEqual([queued.message_id]);
  });

  it('an instance stopping while its send is in progress finishes it and records it; the next one does not send it again', async () => {
    first = await startInstance(db, { SMTP_URL: sink.url });
    const firstUrl = first.url;
    const t = await createTenant(first, { portal: PORTAL });
    const api = await t.client();
    const id = await subject(api, 'R-2', 'Hal Held', 'hal@restart.example');
    let release!: () => void;
    sink.hold = new Promise<void>((r) => (release = r));
    const held = new Promise<void>((r) => (sink.onHeld = r));
    await invite(api, id);
    await held; // the SMTP server has the message and has not answered yet
    const closing = first.close();
    sink.hold = undefined;
    release();
    await closing;
    first = undefined;
    expect(await row(db, 'hal@restart.example')).toMatchObject({ status: 'sent', attempts: 1 });

    second = await startInstance(db, { SMTP_URL: sink.url }, { publicUrl: firstUrl });
    // The second instance has looked at the outbox once it delivered a newer invitation.
    const api2 = new ApiClient(second.url, api.token);
    await invite(api2, id, ['later@restart.example']);
    await eventually(() => sink.to('later@restart.example').length === 1, WAIT);
    await second.close();
    second = undefined;
    expect(sink.to('hal@restart.example')).toHaveLength(1);
  });

  it('a claim left by an instance that died lapses, and the mail is then sent once', async () => {
    await sink.stop();
    first = await startInstance(db, { SMTP_URL: sink.url });
    const t = await createTenant(first, { portal: PORTAL });
    const api = await t.client();
    const id = await subject(api, 'R-3', 'Lea Lapse', 'lea@restart.example');
    await invite(api, id);
    await eventually(async () => (await row(db, 'lea@restart.example')).attempts >= 1, WAIT);
    await first.close();
    first = undefined;
    // As if an instance had claimed the mail and died mid-send: its claim holds for a moment longer.
    const claimedUntil = (
      await sql<{
        until: Date;
      }>`UPDATE mail_outbox SET claim_token = gen_random_uuid(), claimed_until = now() + interval '1 second', next_attempt_at = now()
        WHERE recipient = 'lea@restart.example' RETURNING claimed_until AS until`.execute(db.db)
    ).rows[0]!.until;

    await sink.start();
    second = await startInstance(db, { SMTP_URL: sink.url });
    await eventually(async () => (await row(db, 'lea@restart.example')).status === 'sent', WAIT);
    await second.close();
    second = undefined;
    const sent = await row(db, 'lea@restart.example');
    // Sent by the second instance only after the dead one's claim lapsed.
    expect(sent.last_attempt_at!.getTime()).toBeGreaterThanOrEqual(claimedUntil.getTime());
    expect(sink.to('lea@restart.example')).toHaveLength(1);
  });
});

describe('two instances on one database deliver each invitation once', () => {
  let db: Db;
  let sink: SmtpSink;
  let a: Instance;
  let b: Instance;

  beforeAll(async () => {
    db = await openTestDatabase();
    sink = await new SmtpSink().start();
    a = await startInstance(db, { SMTP_URL: sink.url });
    b = await startInstance(db, { SMTP_URL: sink.url }, { publicUrl: a.url, ownPool: true });
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
    await sink?.stop();
    await db?.dispose();
  });

  it('40 invitations queued through both instances at once arrive once each (counted by Message-ID)', async () => {
    const t = await createTenant(a, { portal: PORTAL });
    const onA = await t.client();
    const onB = new ApiClient(b.url, onA.token);
    const ids = await Promise.all([1, 2, 3, 4].map((n) => subject(onA, `M-${n}`, `Multi ${n}`, `multi${n}@multi.example`)));
    await Promise.all(
      ids.flatMap((id, n) =>
        [0, 1].map((half) =>
          invite(
            half ? onB : onA,
            id,
            Array.from({ length: 5 }, (_, i) => `r${n}-${half}-${i}@multi.example`),
          ),
        ),
      ),
    );
    const ours = () => sink.received.filter((m) => m.envelopeTo[0]!.endsWith('@multi.example'));
    await eventually(() => ours().length >= 40, WAIT);
    await eventually(async () => (await outbox(onA)).sent === 40, WAIT);
    // Stop both senders: nothing can be sent after this, so the count is final.
    await b.close();
    await a.close();
    const rows = await db.db.selectFrom('mail_outbox').selectAll().execute();
    expect(rows).toHaveLength(40);
    const byMessageId = new Map<string, number>();
    for (const m of ours()) byMessageId.set(m.messageId, (byMessageId.get(m.messageId) ?? 0) + 1);
    expect(byMessageId.size).toBe(40);
    expect([...byMessageId.values()].every((n) => n === 1)).toBe(true);
    expect(new Set(rows.map((r) => r.message_id))).toEqual(new Set(byMessageId.keys()));
    // One claim per mail: no mail was ever claimed by both instances.
    expect(rows.every((r) => r.status === 'sent' && r.attempts === 1)).toBe(true);
  });
});

describe('dead letters', () => {
  let db: Db;
  let sink: SmtpSink;
  let inst: Instance;
  let api: ApiClient;
  let id: string;

  beforeAll(async () => {
    db = await openTestDatabase();
    sink = await new SmtpSink().start();
    inst = await startInstance(db, { SMTP_URL: sink.url, MAIL_MAX_ATTEMPTS: '3' });
    const t = await createTenant(inst, { portal: PORTAL });
    api = await t.client();
    id = await subject(api, 'D-1', 'Dora Dead', 'dora@dead.example');
  });
  afterAll(async () => {
    await inst?.close();
    await sink?.stop();
    await db?.dispose();
  });

  it('a mail refused temporarily (451) is retried MAIL_MAX_ATTEMPTS times, then kept as a dead letter and logged at error level', async () => {
    sink.refuseData = { code: 451, message: 'Try again later' };
    const [user] = await invite(api, id, ['retry@dead.example']);
    await eventually(async () => (await outbox(api)).dead === 1, WAIT);
    const o = await outbox(api);
    expect(o).toMatchObject({ pending: 0, dead: 1, sent: 0, lastError: expect.stringMatching(/451/) });
    expect(o.messages[0]).toMatchObject({
      portalUserId: user!.id,
      status: 'DEAD',
      attempts: 3,
      lastError: expect.stringMatching(/451 Try again later/),
    });
    expect(sink.dataAttempts).toBe(3);
    expect(sink.received).toEqual([]);
    const logged = inst.logs.filter((l) => l['level'] === 50 && /dead letter/.test(l['msg']));
    expect(logged).toEqual([expect.objectContaining({ outboxId: o.messages[0].id, attempt: 3, error: expect.stringMatching(/451/) })]);
    // Retries before that were warnings.
    expect(inst.logs.filter((l) => l['level'] === 40 && l['outboxId'] === o.messages[0].id)).toHaveLength(2);
  });

  it('inviting the user again queues the dead letter again, and it is delivered', async () => {
    sink.refuseData = undefined;
    await invite(api, id, ['retry@dead.example']);
    await eventually(() => sink.to('retry@dead.example').length === 1, WAIT);
    await eventually(async () => (await outbox(api)).sent === 1, WAIT);
    expect(await outbox(api)).toMatchObject({ pending: 0, dead: 0, sent: 1 });
  });

  // P45: a 5xx refusal is a dead letter at once; the rest is retried.
  it('a recipient refused for good (550) is a dead letter at once, without retries', async () => {
    sink.refuseRecipients.add('nobody@dead.example');
    await invite(api, id, ['nobody@dead.example']);
    await eventually(async () => (await outbox(api)).dead === 1, WAIT);
    const m = (await outbox(api)).messages.find((x: any) => x.recipient === 'nobody@dead.example');
    expect(m).toMatchObject({ status: 'DEAD', attempts: 1, lastError: expect.stringMatching(/550/) });
    // Issue 30, F12 (P94): an address refused for good is the tenant's to fix, logged at warn, not error.
    await eventually(() => inst.logs.some((l) => l['outboxId'] === m.id && /dead letter/.test(l['msg'])), WAIT);
    expect(inst.logs.filter((l) => l['outboxId'] === m.id && /dead letter/.test(l['msg'])).map((l) => l['level'])).toEqual([40]);
  });
});

describe('without SMTP_URL (D9: logged)', () => {
  let db: Db;
  let logged: Instance;
  beforeAll(async () => {
    db = await openTestDatabase();
    logged = await startInstance(db, { SMTP_URL: '' });
  });
  afterAll(async () => {
    await logged?.close();
    await db?.dispose();
  });

  it('an invitation is logged (recipient, subject, text) and counts as sent', async () => {
    const t = await createTenant(logged, { name: 'Log Care', portal: PORTAL });
    const lapi = await t.client();
    const sid = await subject(lapi, 'L-1', 'Leo Logged', 'leo@logged.example');
    await invite(lapi, sid);
    await eventually(() => logged.logs.some((l) => l['to'] === 'leo@logged.example'), WAIT);
    const entry = logged.logs.find((l) => l['to'] === 'leo@logged.example')!;
    expect(entry).toMatchObject({
      level: 30,
      subject: 'Your invitation to the Log Care portal',
      text: expect.stringContaining('Hello Leo Logged,'),
      messageId: expect.stringMatching(MESSAGE_ID),
    });
    await eventually(async () => (await outbox(lapi)).sent === 1, WAIT);
  });
});
