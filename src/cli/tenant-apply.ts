import { loadConfig } from '../core/config.js';
import { applyTenantFilePath, openMigratedDatabase } from '../app/runtime.js';

// `npm run tenant:apply -- FILE`: applies a tenant configuration file (D3) without serving.
const file = process.argv[2];
if (!file) {
  console.error('usage: npm run tenant:apply -- path/to/tenant.json');
  process.exit(2);
}
try {
  const config = loadConfig();
  const handle = await openMigratedDatabase(config);
  try {
    const { tenantKeys } = await applyTenantFilePath(handle, config, file);
    console.log(`applied: ${tenantKeys.join(', ')}`);
  } finally {
    await handle.close();
  }
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
}
