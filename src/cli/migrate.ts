import { loadConfig } from '../core/config.js';
import { openMigratedDatabase } from '../app/runtime.js';

// `npm run migrate`: brings the configured database to the latest migration.
try {
  const handle = await openMigratedDatabase(loadConfig());
  console.log(`migrated (${handle.kind})`);
  await handle.close();
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
}
