import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Issue 8: a filter on one field value, in the default order (ExternalId), reads its page straight off
// one index. Every index row of a subject carries the subject's ExternalId sort key (`list_key`), and the
// filter index orders the rows of one value by it: a page is the index's first rows, whatever the number
// of matches, where it used to need every match's sort key and a sort.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('subject_value')
    .addColumn('list_key', sql`text COLLATE "C"`)
    .execute();
  await sql`
    UPDATE subject_value v SET list_key = o.sort_key
    FROM tenant t, subject_value o
    WHERE t.id = v.tenant_id
      AND o.tenant_id = v.tenant_id AND o.subject_id = v.subject_id AND o.ordinal = 0
      AND o.field_key = coalesce(t.external_id_field_key, t.matching_field_keys[1])`.execute(db);
  await sql`DROP INDEX subject_value_filter_idx`.execute(db);
  await sql`CREATE INDEX subject_value_filter_idx ON subject_value (tenant_id, field_key, md5(value_text), list_key, subject_id) WHERE value_text IS NOT NULL`.execute(
    db,
  );
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX subject_value_filter_idx`.execute(db);
  await sql`CREATE INDEX subject_value_filter_idx ON subject_value (tenant_id, field_key, md5(value_text), subject_id) WHERE value_text IS NOT NULL`.execute(
    db,
  );
  await db.schema.alterTable('subject_value').dropColumn('list_key').execute();
}
