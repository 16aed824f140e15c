import { loadConfig } from '../core/config.js';
import { TokenService } from '../domains/auth/index.js';
import { openMigratedDatabase } from '../app/runtime.js';

// `npm run keys:rotate`: a new signing key; tokens signed by the old one stay valid until they expire.
try {
  const config = loadConfig();
  const handle = await openMigratedDatabase(config);
  console.log(`new signing key ${await new TokenService(handle.db, config).rotate()}`);
  await handle.close();
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
}
