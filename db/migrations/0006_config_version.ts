import type { Kysely } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Issue 8: every tenant apply bumps `config_version`; instances cache a tenant's clients and subject
// configuration under it, and read it once per request (with `data_version`), so a change to a client's
// scopes or permissions takes effect on the next request on every instance.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('tenant')
    .addColumn('config_version', 'bigint', (c) => c.notNull().defaultTo(1))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('tenant').dropColumn('config_version').execute();
}
