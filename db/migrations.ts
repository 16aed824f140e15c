import type { Migration } from 'kysely/migration';
import * as m0001 from './migrations/0001_foundation.js';
import * as m0002 from './migrations/0002_subjects.js';
import * as m0003 from './migrations/0003_data_cache.js';
import * as m0004 from './migrations/0004_users.js';
import * as m0005 from './migrations/0005_portal.js';
import * as m0006 from './migrations/0006_config_version.js';
import * as m0007 from './migrations/0007_subject_list_key.js';
import * as m0008 from './migrations/0008_data_cache_point.js';
import * as m0009 from './migrations/0009_data_point_instants.js';
import * as m0010 from './migrations/0010_data_cache_measure.js';
import * as m0011 from './migrations/0011_data_extract_items.js';
import * as m0012 from './migrations/0012_tenant_read_floor.js';

/**
 * Every migration, by name (applied in name order). Listed statically so they load the same under tsx,
 * vitest and any bundler; a test checks that every file in db/migrations/ is listed here.
 */
export const migrations: Record<string, Migration> = {
  '0001_foundation': m0001,
  '0002_subjects': m0002,
  '0003_data_cache': m0003,
  '0004_users': m0004,
  '0005_portal': m0005,
  '0006_config_version': m0006,
  '0007_subject_list_key': m0007,
  '0008_data_cache_point': m0008,
  '0009_data_point_instants': m0009,
  '0010_data_cache_measure': m0010,
  '0011_data_extract_items': m0011,
  '0012_tenant_read_floor': m0012,
};
