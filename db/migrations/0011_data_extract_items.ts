import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Issue 32: an extract describes the items of its data points ({ key, name, unit, dataType } each, as the
// tenant file or createDataExtract declares them), so a dashboard can label a value with its unit.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('data_extract')
    .addColumn('items', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('data_extract').dropColumn('items').execute();
}
