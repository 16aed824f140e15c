// The tenant domain's door: a tenant's versions and the configuration-version cache.
export { configVersionCache } from './config-version-cache.js';
export { bumpDataVersion, readDataVersion } from './tenant.repository.js';
