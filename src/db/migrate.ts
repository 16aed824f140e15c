import { Migrator } from 'kysely/migration';
import { migrations } from '../../db/migrations.js';
import type { Db } from './tables.js';

/** Runs pending migrations; throws naming the failing migration, with the driver's error as `cause`. */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error) {
    const why = error instanceof Error ? error.message : String(error);
    // No failed migration: the migrator could not start (no connection, the migration lock).
    throw new Error(
      failed ? `Migration ${failed.migrationName} failed: ${why}` : `Migrating the database failed before any migration ran: ${why}`,
      { cause: error },
    );
  }
  return (results ?? []).map((r) => r.migrationName);
}
