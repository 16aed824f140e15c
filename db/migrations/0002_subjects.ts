import { type Kysely, sql } from 'kysely';

// Frozen once landed. Subjects keep their canonical values in `subject.values` (what every read returns)
// and, maintained in the same transaction by every write, one `subject_value` row per value for the
// indexes: exact filters (value_text), typo-tolerant search (trigram over searchable values) and ordering.
// Ordering: each (subject, field) has an ordinal-0 row even when the field is empty, whose `sort_key`
// is an order-preserving text encoding of the typed value ('0' || encoding) or '1' when missing, so ONE
// btree (tenant_id, field_key, sort_key, subject_id) orders by any field of any type, missing values
// last, and keyset predicates are plain row comparisons.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('subject')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('id', 'uuid', (c) => c.notNull().defaultTo(sql`gen_random_uuid()`))
    .addColumn('external_id', sql`text COLLATE "C"`)
    // sha256 of the matching fields' canonical values (subject-values.ts matchingKeyOf): unique per tenant (D7).
    .addColumn('matching_key', 'text', (c) => c.notNull())
    .addColumn('values', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('subject_pk', ['tenant_id', 'id'])
    .addUniqueConstraint('subject_matching_uq', ['tenant_id', 'matching_key'])
    .execute();

  await db.schema
    .createTable('subject_value')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('subject_id', 'uuid', (c) => c.notNull())
    .addColumn('field_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('ordinal', 'integer', (c) => c.notNull())
    .addColumn('value_text', sql`text COLLATE "C"`)
    .addColumn('sort_key', sql`text COLLATE "C"`)
    .addColumn('searchable', 'boolean', (c) => c.notNull().defaultTo(false))
    .addPrimaryKeyConstraint('subject_value_pk', ['tenant_id', 'subject_id', 'field_key', 'ordinal'])
    .addForeignKeyConstraint('subject_value_subject_fk', ['tenant_id', 'subject_id'], 'subject', ['tenant_id', 'id'], (c) =>
      c.onDelete('cascade'),
    )
    .execute();
  await sql`CREATE INDEX subject_value_sort_idx ON subject_value (tenant_id, field_key, sort_key, subject_id) WHERE ordinal = 0`.execute(
    db,
  );
  // md5: a value can be longer than a btree entry may be; the filter compares md5 and then the text.
  await sql`CREATE INDEX subject_value_filter_idx ON subject_value (tenant_id, field_key, md5(value_text), subject_id) WHERE value_text IS NOT NULL`.execute(
    db,
  );
  await sql`CREATE INDEX subject_value_search_idx ON subject_value USING gin (value_text gin_trgm_ops) WHERE searchable`.execute(db);

  await db.schema
    .createTable('subject_location')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('subject_id', 'uuid', (c) => c.notNull())
    .addColumn('structural_entity_id', 'bigint', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('subject_location_pk', ['tenant_id', 'subject_id', 'structural_entity_id'])
    .addForeignKeyConstraint('subject_location_subject_fk', ['tenant_id', 'subject_id'], 'subject', ['tenant_id', 'id'], (c) =>
      c.onDelete('cascade'),
    )
    .addForeignKeyConstraint('subject_location_entity_fk', ['tenant_id', 'structural_entity_id'], 'structural_entity', ['tenant_id', 'id'])
    .execute();
  await db.schema
    .createIndex('subject_location_entity_idx')
    .on('subject_location')
    .columns(['tenant_id', 'structural_entity_id', 'subject_id'])
    .execute();

  // Bumped in the same transaction as every write that can change a subject list (subjects, locations,
  // the entity tree): cached TotalCounts are keyed by it, so a count is reused only while still exact.
  await db.schema
    .alterTable('tenant')
    .addColumn('data_version', 'bigint', (c) => c.notNull().defaultTo(0))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('tenant').dropColumn('data_version').execute();
  await db.schema.dropTable('subject_location').execute();
  await db.schema.dropTable('subject_value').execute();
  await db.schema.dropTable('subject').execute();
}
