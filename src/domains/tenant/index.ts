// The tenant domain's door: a tenant's versions and the configuration-version cache.
export { configVersionCache } from './config-version-cache.js';
export { queryDataVersion } from './data-version.js';
export {
  type TenantPart,
  applyTenant,
  bumpDataVersion,
  findTenantId,
  hasTenants,
  readDataVersion,
  recordReadFloor,
} from './tenant.repository.js';
