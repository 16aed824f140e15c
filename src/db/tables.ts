import type { ColumnType, Generated, GeneratedAlways, Insertable, Kysely, Selectable } from 'kysely';

// int8 (count(*), bigint ids) arrive as strings from both databases; ids stay strings, counts are
// converted where read.

export type DataTypeName = 'Boolean' | 'String' | 'Integer' | 'Decimal' | 'DateTime' | 'Date' | 'Time' | 'UserIdentifier';

export interface SigningKeyTable {
  kid: string;
  alg: string;
  private_jwk: unknown;
  public_jwk: unknown;
  created_at: Generated<Date>;
  retired_at: Date | null;
}

export interface ServiceSecretTable {
  name: string;
  value: string;
}

export interface TenantTable {
  id: Generated<string>;
  key: string;
  name: string;
  matching_field_keys: string[];
  external_id_field_key: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
  data_version: Generated<string>;
  /** Bumped by every tenant apply: the key of cached clients and subject configuration. */
  config_version: Generated<string>;
  /** pg_lsn: the primary's WAL position after the tenant's latest write committed (read replicas). */
  read_floor: string | null;
}

export interface ClientTable {
  tenant_id: string;
  client_id: string;
  secret_hash: string;
  scopes: string[];
  permissions: string[];
}

export interface SubjectFieldTable {
  tenant_id: string;
  key: string;
  name: string;
  data_type: DataTypeName;
  type_label: string;
  required: boolean;
  is_array: boolean;
  position: number;
}

export interface StructureTypeTable {
  tenant_id: string;
  key: string;
  name: string;
  subject_assignable: boolean;
}

export interface StructureTypeFieldTable {
  tenant_id: string;
  structure_type_key: string;
  key: string;
  name: string;
  data_type: DataTypeName;
  type_label: string;
  required: boolean;
  position: number;
}

export interface StructuralEntityTable {
  tenant_id: string;
  id: GeneratedAlways<string>;
  key: string;
  display_name: string;
  structure_type_key: string;
  parent_key: string | null;
  path: string[];
  depth: GeneratedAlways<number>;
  /** field key → canonical typed JSON value (see domains/custom-field/custom-field.ts). */
  custom_values: Record<string, unknown>;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

export interface UserGroupTable {
  tenant_id: string;
  key: string;
  name: string;
}

export interface UserGroupStructuralEntityTable {
  tenant_id: string;
  group_key: string;
  structural_entity_id: string;
}

export interface AppUserTable {
  tenant_id: string;
  id: string;
  display_name: string;
  email: string | null;
  active: boolean;
}

export interface AppUserGroupTable {
  tenant_id: string;
  user_id: string;
  group_key: string;
}

export interface PortalConfigTable {
  tenant_id: string;
  self_access_enabled: boolean;
  third_party_access_enabled: boolean;
  email_field_key: string | null;
  display_name_field_key: string | null;
  invitation_field_keys: string[];
  /** D9 invitation mail template (null: the bundled default); see domains/portal/invitation-mail.ts. */
  invitation_subject: string | null;
  invitation_text: string | null;
  invitation_html: string | null;
}

export type InviteMethod = 'SelfAccess' | 'ThirdParty';

export interface PortalUserTable {
  tenant_id: string;
  id: Generated<string>;
  subject_id: string;
  email: string;
  /** lower(email): what identifies (per subject) and orders portal users. */
  email_key: GeneratedAlways<string>;
  display_name: string;
  invite_method: InviteMethod;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

export type MailStatus = 'pending' | 'sent' | 'dead' | 'cancelled';

export interface MailOutboxTable {
  tenant_id: string;
  id: string;
  portal_user_id: string | null;
  recipient: string;
  /** `<id@domain>`, set by the first claim (docs/portal-outbox.md). */
  message_id: string | null;
  subject: string;
  text_body: string;
  html_body: string;
  status: Generated<MailStatus>;
  attempts: Generated<number>;
  next_attempt_at: Generated<Date>;
  claimed_until: Date | null;
  claim_token: string | null;
  last_error: string | null;
  last_attempt_at: Date | null;
  created_at: Generated<Date>;
  sent_at: Date | null;
}

export interface DataSourceTable {
  tenant_id: string;
  key: string;
  name: string;
  get_data_points_url: string;
  token_url: string | null;
  client_id: string | null;
  client_secret_enc: string | null;
  scope: string | null;
  subject_identifier: string;
  inbound_client_ids: string[];
}

export interface DataExtractTable {
  tenant_id: string;
  key: string;
  name: string;
  data_source_key: string;
  options: unknown;
  cache_epoch: Generated<string>;
  /** What the extract's data points hold, as declared; written as JSON text (a JS array would be sent as a PostgreSQL array). */
  items: ColumnType<DataExtractItem[], string | undefined, string>;
}

/** One item an extract's data points hold: its key in DataPointItems, a name and unit to show it with. */
export interface DataExtractItem {
  key: string;
  name: string;
  unit?: string;
  dataType?: string;
}

export interface SubjectTable {
  tenant_id: string;
  id: Generated<string>;
  external_id: string | null;
  matching_key: string;
  /** field key → canonical value, or array of them for an array field (see domains/custom-field/custom-field.ts). */
  values: Record<string, unknown>;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

export interface SubjectValueTable {
  tenant_id: string;
  subject_id: string;
  field_key: string;
  ordinal: number;
  value_text: string | null;
  sort_key: string | null;
  searchable: Generated<boolean>;
  /** The subject's ExternalId sort key, on each of its rows (migration 0007: filter pages in that order). */
  list_key: string | null;
}

export interface SubjectLocationTable {
  tenant_id: string;
  subject_id: string;
  structural_entity_id: string;
  created_at: Generated<Date>;
}

export interface DataCacheTable {
  tenant_id: string;
  extract_key: string;
  subject_id: string;
  subject_identifier: string | null;
  /** The provider's data points for the subject (see data-points.ts); null: nothing fetched yet. */
  points: unknown[] | null;
  fetched_at: Date | null;
  stale: Generated<boolean>;
  version: Generated<string>;
  removed_ids: Generated<string[]>;
  refetch_claimed_until: Date | null;
}

/**
 * Every point of `data_cache.points` as a row (migration 0008), written with it (data.repository.ts): what
 * aggregates read (docs/data-cache.md).
 */
export interface DataCachePointTable {
  tenant_id: string;
  extract_key: string;
  subject_id: string;
  /** The point's position in `data_cache.points` (1-based). */
  ordinal: number;
  /** `data_point_items(point)`: the items by key (first wins, nulls absent; DateTime {t}, Date {d}, Time {h}). */
  items: Record<string, unknown>;
}

/** A pair of a numeric item and a time item of one cached point (`data_point_measures`, migration 0010). */
export interface DataCacheMeasureTable {
  tenant_id: string;
  extract_key: string;
  subject_id: string;
  value_key: string;
  time_key: string;
  ordinal: number;
  /** The numeric item's exact value. */
  v: string;
  /** The time item as epoch milliseconds (DateTime) or as days since 1970-01-01 (Date); the other null. */
  ms: string | null;
  day: number | null;
}

/** The data types one subject's cached points hold under each item key (`data_point_kinds`, migration 0010). */
export interface DataCacheKindTable {
  tenant_id: string;
  extract_key: string;
  subject_id: string;
  key: string;
  kind: string;
}

/** The one Kysely schema of the service. */
export interface Database {
  signing_key: SigningKeyTable;
  service_secret: ServiceSecretTable;
  tenant: TenantTable;
  client: ClientTable;
  subject_field: SubjectFieldTable;
  structure_type: StructureTypeTable;
  structure_type_field: StructureTypeFieldTable;
  structural_entity: StructuralEntityTable;
  user_group: UserGroupTable;
  user_group_structural_entity: UserGroupStructuralEntityTable;
  app_user: AppUserTable;
  app_user_group: AppUserGroupTable;
  portal_config: PortalConfigTable;
  data_source: DataSourceTable;
  data_extract: DataExtractTable;
  subject: SubjectTable;
  subject_value: SubjectValueTable;
  subject_location: SubjectLocationTable;
  data_cache: DataCacheTable;
  data_cache_point: DataCachePointTable;
  data_cache_measure: DataCacheMeasureTable;
  data_cache_kind: DataCacheKindTable;
  portal_user: PortalUserTable;
  mail_outbox: MailOutboxTable;
}

export type StructureType = Selectable<StructureTypeTable>;
/**
 * `columns` qualified by a table alias, as Kysely selects them: `qualified('s', SUBJECT_COLUMNS)`.
 */
export const qualified = <A extends string, C extends string>(alias: A, columns: readonly C[]) =>
  columns.map((c) => `${alias}.${c}` as const);

/**
 * What the API's structural entity fields resolve from (P72): lists, loaders and a page's locations
 * select these; the path and the timestamps are read only where a write needs them.
 */
export const ENTITY_COLUMNS = [
  'tenant_id',
  'id',
  'key',
  'display_name',
  'structure_type_key',
  'parent_key',
  'depth',
  'custom_values',
] as const;
export type StructuralEntityRow = Pick<Selectable<StructuralEntityTable>, (typeof ENTITY_COLUMNS)[number]>;
/** A structural entity with its ancestry path, as an upsert reads it (the existing one, its new parent). */
export type StructuralEntityRecord = Selectable<StructuralEntityTable>;
export type SigningKey = Selectable<SigningKeyTable>;
/** What the API's subject fields resolve from (P72): lists and the loader select these, nothing else. */
export const SUBJECT_COLUMNS = ['tenant_id', 'id', 'external_id', 'values'] as const;
export type SubjectRow = Pick<Selectable<SubjectTable>, (typeof SUBJECT_COLUMNS)[number]>;
export type NewSubjectValue = Insertable<SubjectValueTable>;
/** A row of `table` as the tenant apply writes it: every column but the tenant's id, which the function adds. */
export type NewRow<T> = Omit<Insertable<T>, 'tenant_id'>;
export type AppUserRow = Selectable<AppUserTable>;
export type DataSourceRow = Selectable<DataSourceTable>;
export type DataExtractRow = Selectable<DataExtractTable>;
export type DataCacheRow = Selectable<DataCacheTable>;
export type PortalConfigRow = Selectable<PortalConfigTable>;
export type PortalUserRow = Selectable<PortalUserTable>;
export type MailOutboxRow = Selectable<MailOutboxTable>;

export type Db = Kysely<Database>;
