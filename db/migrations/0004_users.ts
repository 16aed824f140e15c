import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// D9: the users list searches display names with the subjects' matching rule (ILIKE and `<%`).

export async function up(db: Kysely<any>): Promise<void> {
  await sql`CREATE INDEX app_user_name_search_idx ON app_user USING gin (display_name gin_trgm_ops)`.execute(db);
  await db.schema.createIndex('app_user_name_idx').on('app_user').columns(['tenant_id', 'display_name', 'id']).execute();
  // withAccessToSubjectId: the groups of an entity, then their users.
  await db.schema
    .createIndex('ugse_entity_idx')
    .on('user_group_structural_entity')
    .columns(['tenant_id', 'structural_entity_id', 'group_key'])
    .execute();
  await db.schema.createIndex('aug_group_idx').on('app_user_group').columns(['tenant_id', 'group_key', 'user_id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const i of ['aug_group_idx', 'ugse_entity_idx', 'app_user_name_idx', 'app_user_name_search_idx'])
    await db.schema.dropIndex(i).execute();
}
