import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// D10: the second level of the data point cache, per (tenant, data extract, subject), shared by every
// instance. `points` is the provider's full set for the subject (NULL: nothing fetched yet, a row that
// only carries a change notification's flag). `version` moves on every invalidation, so a provider fetch
// that started before one can never store its answer as fresh (the write-back is conditional on it).

export async function up(db: Kysely<any>): Promise<void> {
  // Moves on a refresh and on a change of the extract's options or data source: a fetch stores its answer
  // only if the extract is still at the epoch it read (a row version cannot guard subjects with no row).
  await db.schema
    .alterTable('data_extract')
    .addColumn('cache_epoch', 'bigint', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .createTable('data_cache')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('extract_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('subject_id', 'uuid', (c) => c.notNull())
    // The provider's identifier of the subject when fetched: a changed ExternalId makes the entry absent.
    .addColumn('subject_identifier', 'text')
    .addColumn('points', 'jsonb')
    .addColumn('fetched_at', 'timestamptz')
    // Flagged by a change notification, a removal or a refresh: served only as stale until re-fetched.
    .addColumn('stale', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('version', 'bigint', (c) => c.notNull().defaultTo(1))
    // Ids reported removed: kept out of every later answer until the provider stops returning them or
    // reports them created again ("ids reported removed never reappear").
    .addColumn('removed_ids', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    // A background re-fetch claims a flagged row until then, so one instance re-fetches it, not all.
    .addColumn('refetch_claimed_until', 'timestamptz')
    .addPrimaryKeyConstraint('data_cache_pk', ['tenant_id', 'extract_key', 'subject_id'])
    .addForeignKeyConstraint('data_cache_extract_fk', ['tenant_id', 'extract_key'], 'data_extract', ['tenant_id', 'key'], (c) =>
      c.onDelete('cascade'),
    )
    .addForeignKeyConstraint('data_cache_subject_fk', ['tenant_id', 'subject_id'], 'subject', ['tenant_id', 'id'], (c) =>
      c.onDelete('cascade'),
    )
    .execute();
  // The background re-fetch looks for flagged rows that hold data whose claim has lapsed: rows a failing
  // provider leaves claimed are skipped by the index, not rescanned.
  await sql`CREATE INDEX data_cache_flagged_idx ON data_cache ((coalesce(refetch_claimed_until, '-infinity'::timestamptz))) WHERE stale AND points IS NOT NULL`.execute(
    db,
  );
  // Subjects are deleted through their key; the cascade finds their rows by this index.
  await db.schema.createIndex('data_cache_subject_idx').on('data_cache').columns(['tenant_id', 'subject_id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('data_cache').execute();
  await db.schema.alterTable('data_extract').dropColumn('cache_epoch').execute();
}
