// The tenant-apply domain's door: applying a tenant configuration file.
export { TenantConfigError, applyTenantFile, parseTenantFile, validateTenantFile } from './tenant-apply.service.js';
