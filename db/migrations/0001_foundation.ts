import { type Kysely, sql } from 'kysely';

// Frozen: never edit after it has landed; add a new numbered migration instead.
// Every tenant-owned table leads its primary, unique and foreign keys with tenant_id (D2), so the
// schema can later be distributed by tenant. Text keys use the "C" collation: keys are case-sensitive
// and lists order by code point (D6), whatever the server's locale.

const DATA_TYPES = `'Boolean','String','Integer','Decimal','DateTime','Date','Time','UserIdentifier'`;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`CREATE EXTENSION IF NOT EXISTS pg_trgm`.execute(db);

  await db.schema
    .createTable('signing_key')
    .addColumn('kid', 'text', (c) => c.primaryKey())
    .addColumn('alg', 'text', (c) => c.notNull())
    .addColumn('private_jwk', 'jsonb', (c) => c.notNull())
    .addColumn('public_jwk', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('retired_at', 'timestamptz')
    .execute();
  // At most one active key, so instances starting together cannot both create one.
  await sql`CREATE UNIQUE INDEX signing_key_one_active ON signing_key ((true)) WHERE retired_at IS NULL`.execute(db);

  // Service-wide secrets (the key that encrypts outbound provider secrets when SECRETS_KEY is unset).
  await db.schema
    .createTable('service_secret')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('value', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('tenant')
    .addColumn('id', 'uuid', (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull().unique())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('matching_field_keys', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('external_id_field_key', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('client')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('client_id', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    .addColumn('scopes', sql`text[]`, (c) => c.notNull())
    .addColumn('permissions', sql`text[]`, (c) => c.notNull())
    .addPrimaryKeyConstraint('client_pk', ['tenant_id', 'client_id'])
    .execute();

  await db.schema
    .createTable('subject_field')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('data_type', 'text', (c) => c.notNull().check(sql.raw(`data_type IN (${DATA_TYPES})`)))
    .addColumn('type_label', 'text', (c) => c.notNull())
    .addColumn('required', 'boolean', (c) => c.notNull())
    .addColumn('is_array', 'boolean', (c) => c.notNull())
    .addColumn('position', 'integer', (c) => c.notNull())
    .addPrimaryKeyConstraint('subject_field_pk', ['tenant_id', 'key'])
    .execute();

  await db.schema
    .createTable('structure_type')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('subject_assignable', 'boolean', (c) => c.notNull())
    .addPrimaryKeyConstraint('structure_type_pk', ['tenant_id', 'key'])
    .execute();

  await db.schema
    .createTable('structure_type_field')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('structure_type_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('data_type', 'text', (c) => c.notNull().check(sql.raw(`data_type IN (${DATA_TYPES})`)))
    .addColumn('type_label', 'text', (c) => c.notNull())
    .addColumn('required', 'boolean', (c) => c.notNull())
    .addColumn('position', 'integer', (c) => c.notNull())
    .addPrimaryKeyConstraint('structure_type_field_pk', ['tenant_id', 'structure_type_key', 'key'])
    .addForeignKeyConstraint(
      'structure_type_field_type_fk',
      ['tenant_id', 'structure_type_key'],
      'structure_type',
      ['tenant_id', 'key'],
      (c) => c.onDelete('cascade'),
    )
    .execute();

  // `path` holds the ids of the ancestors, root first: descendants of X are `path @> {X}`
  // (GIN), a move rewrites the prefix of the subtree's paths in one UPDATE, and depth is its length + 1.
  await db.schema
    .createTable('structural_entity')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('id', 'bigint', (c) => c.notNull().generatedAlwaysAsIdentity())
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('display_name', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('structure_type_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('parent_key', sql`text COLLATE "C"`)
    .addColumn('path', sql`bigint[]`, (c) => c.notNull())
    .addColumn('depth', 'integer', (c) =>
      c
        .notNull()
        .generatedAlwaysAs(sql`cardinality(path) + 1`)
        .stored(),
    )
    .addColumn('custom_values', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('structural_entity_pk', ['tenant_id', 'id'])
    .addUniqueConstraint('structural_entity_key_uq', ['tenant_id', 'key'])
    .addForeignKeyConstraint('structural_entity_type_fk', ['tenant_id', 'structure_type_key'], 'structure_type', ['tenant_id', 'key'])
    .addForeignKeyConstraint('structural_entity_parent_fk', ['tenant_id', 'parent_key'], 'structural_entity', ['tenant_id', 'key'])
    .execute();
  await db.schema.createIndex('structural_entity_parent_idx').on('structural_entity').columns(['tenant_id', 'parent_key', 'key']).execute();
  await db.schema.createIndex('structural_entity_path_idx').on('structural_entity').using('gin').column('path').execute();
  await db.schema.createIndex('structural_entity_name_idx').on('structural_entity').columns(['tenant_id', 'display_name', 'key']).execute();
  // SearchTerm (D8): `ILIKE` and `<%` on key and on display name.
  await sql`CREATE INDEX structural_entity_key_search_idx ON structural_entity USING gin (key gin_trgm_ops)`.execute(db);
  await sql`CREATE INDEX structural_entity_name_search_idx ON structural_entity USING gin (display_name gin_trgm_ops)`.execute(db);

  await db.schema
    .createTable('user_group')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('user_group_pk', ['tenant_id', 'key'])
    .execute();

  await db.schema
    .createTable('user_group_structural_entity')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('group_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('structural_entity_id', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('user_group_structural_entity_pk', ['tenant_id', 'group_key', 'structural_entity_id'])
    .addForeignKeyConstraint('ugse_group_fk', ['tenant_id', 'group_key'], 'user_group', ['tenant_id', 'key'], (c) => c.onDelete('cascade'))
    .addForeignKeyConstraint('ugse_entity_fk', ['tenant_id', 'structural_entity_id'], 'structural_entity', ['tenant_id', 'id'], (c) =>
      c.onDelete('cascade'),
    )
    .execute();

  await db.schema
    .createTable('app_user')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('id', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('display_name', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('email', 'text')
    .addColumn('active', 'boolean', (c) => c.notNull())
    .addPrimaryKeyConstraint('app_user_pk', ['tenant_id', 'id'])
    .execute();

  await db.schema
    .createTable('app_user_group')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('user_id', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('group_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addPrimaryKeyConstraint('app_user_group_pk', ['tenant_id', 'user_id', 'group_key'])
    .addForeignKeyConstraint('aug_user_fk', ['tenant_id', 'user_id'], 'app_user', ['tenant_id', 'id'], (c) => c.onDelete('cascade'))
    .addForeignKeyConstraint('aug_group_fk', ['tenant_id', 'group_key'], 'user_group', ['tenant_id', 'key'], (c) => c.onDelete('cascade'))
    .execute();

  await db.schema
    .createTable('portal_config')
    .addColumn('tenant_id', 'uuid', (c) => c.primaryKey().references('tenant.id').onDelete('cascade'))
    .addColumn('self_access_enabled', 'boolean', (c) => c.notNull())
    .addColumn('third_party_access_enabled', 'boolean', (c) => c.notNull())
    .addColumn('email_field_key', 'text')
    .addColumn('display_name_field_key', 'text')
    .addColumn('invitation_field_keys', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .execute();

  await db.schema
    .createTable('data_source')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull().references('tenant.id').onDelete('cascade'))
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('get_data_points_url', 'text', (c) => c.notNull())
    .addColumn('token_url', 'text')
    .addColumn('client_id', 'text')
    // Outbound secret: sent to the provider, so it cannot be a hash; stored encrypted (JWE).
    .addColumn('client_secret_enc', 'text')
    .addColumn('scope', 'text')
    .addColumn('subject_identifier', 'text', (c) => c.notNull().defaultTo('ExternalId'))
    .addColumn('inbound_client_ids', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addPrimaryKeyConstraint('data_source_pk', ['tenant_id', 'key'])
    .execute();

  await db.schema
    .createTable('data_extract')
    .addColumn('tenant_id', 'uuid', (c) => c.notNull())
    .addColumn('key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('data_source_key', sql`text COLLATE "C"`, (c) => c.notNull())
    .addColumn('options', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addPrimaryKeyConstraint('data_extract_pk', ['tenant_id', 'key'])
    .addForeignKeyConstraint('data_extract_source_fk', ['tenant_id', 'data_source_key'], 'data_source', ['tenant_id', 'key'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of [
    'data_extract',
    'data_source',
    'portal_config',
    'app_user_group',
    'app_user',
    'user_group_structural_entity',
    'user_group',
    'structural_entity',
    'structure_type_field',
    'structure_type',
    'subject_field',
    'client',
    'tenant',
    'service_secret',
    'signing_key',
  ]) {
    await db.schema.dropTable(t).execute();
  }
}
