import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Issue 34: reads on streaming replicas. `read_floor` is the primary's WAL position after the tenant's
// latest write operation committed: a replica that has replayed it shows the tenant its own writes.
// Null: no write recorded since replicas were configured (any replica within the lag bound serves).

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('tenant')
    .addColumn('read_floor', sql`pg_lsn`)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('tenant').dropColumn('read_floor').execute();
}
