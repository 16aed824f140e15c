import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// D9: the subject portal's users and the outbox their invitations are delivered from (docs/portal-outbox.md).
// A portal user is unique per (subject, e-mail compared case-insensitively); a subject has at most one
// self-access user. An invitation is written to `mail_outbox` in the same transaction as its user, and
// a sender claims due rows (FOR UPDATE SKIP LOCKED plus a lease) and marks them sent only once the SMTP
// server accepted them. Rows are never deleted by the service: sent, dead and cancelled rows stay.

export async function up(db: Kysely<any>): Promise<void> {
  // The tenant's mail template (D3 portal block); null: the bundled default.
  await db.schema
    .alterTable('portal_config')
    .addColumn('invitation_subject', 'text')
    .addColumn('invitation_text', 'text')
    .addColumn('invitation_html', 'text')
    .execute();

  await db.schema
    .createTable('portal_user')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('id', 'uuid', (c) => c.notNull().defaultTo(sql`gen_random_uuid()`))
    .addColumn('subject_id', 'uuid', (c) => c.notNull())
    // As first sent; `email_key` is what identifies and orders (lower case, code-point order).
    .addColumn('email', 'text', (c) => c.notNull())
    .addColumn('email_key', sql`text COLLATE "C"`, (c) =>
      c
        .notNull()
        .generatedAlwaysAs(sql`lower(email)`)
        .stored(),
    )
    .addColumn('display_name', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('invite_method', 'text', (c) => c.notNull().check(sql`invite_method IN ('SelfAccess', 'ThirdParty')`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('portal_user_pk', ['tenant_id', 'id'])
    // Idempotent invitations; also the index of the list ordered by e-mail (D6).
    .addUniqueConstraint('portal_user_email_uq', ['tenant_id', 'subject_id', 'email_key'])
    .addForeignKeyConstraint('portal_user_subject_fk', ['tenant_id', 'subject_id'], 'subject', ['tenant_id', 'id'], (c) =>
      c.onDelete('cascade'),
    )
    .execute();
  await sql`CREATE UNIQUE INDEX portal_user_self_uq ON portal_user (tenant_id, subject_id) WHERE invite_method = 'SelfAccess'`.execute(db);
  await db.schema
    .createIndex('portal_user_name_idx')
    .on('portal_user')
    .columns(['tenant_id', 'subject_id', 'display_name', 'id'])
    .execute();

  await db.schema
    .createTable('mail_outbox')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('id', 'uuid', (c) => c.notNull())
    // The portal user invited; no foreign key: the row (its delivery record) outlives a removed user.
    .addColumn('portal_user_id', 'uuid')
    .addColumn('recipient', 'text', (c) => c.notNull())
    // `<id@domain of MAIL_FROM>`, set by the first claim and kept: every attempt, on any instance, sends
    // the same message (rendered when queued) under the same Message-ID.
    .addColumn('message_id', 'text')
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('text_body', 'text', (c) => c.notNull())
    .addColumn('html_body', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('pending')
        .check(sql`status IN ('pending', 'sent', 'dead', 'cancelled')`),
    )
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    // A sender's claim: until then no other sender takes the row (an instance that died lets it lapse).
    .addColumn('claimed_until', 'timestamptz')
    .addColumn('claim_token', 'uuid')
    .addColumn('last_error', 'text')
    .addColumn('last_attempt_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('sent_at', 'timestamptz')
    .addPrimaryKeyConstraint('mail_outbox_pk', ['tenant_id', 'id'])
    .execute();
  // The senders' claim looks for due rows of every tenant.
  await sql`CREATE INDEX mail_outbox_due_idx ON mail_outbox (next_attempt_at) WHERE status = 'pending'`.execute(db);
  await db.schema.createIndex('mail_outbox_user_idx').on('mail_outbox').columns(['tenant_id', 'portal_user_id']).execute();
  // Operations: a tenant's backlog and dead letters, by status in queue order.
  await db.schema.createIndex('mail_outbox_status_idx').on('mail_outbox').columns(['tenant_id', 'status', 'created_at', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('mail_outbox').execute();
  await db.schema.dropTable('portal_user').execute();
  await db.schema
    .alterTable('portal_config')
    .dropColumn('invitation_subject')
    .dropColumn('invitation_text')
    .dropColumn('invitation_html')
    .execute();
}
