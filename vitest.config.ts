import { configDefaults, defineConfig } from 'vitest/config';

// The same suite runs on PGlite (default) and on PostgreSQL (DATABASE_URL set): see test/global-setup.ts.
// Files that need a real PostgreSQL server (they terminate its sessions and cut its connections) are left
// out of the PGlite run, so it neither runs nor reports them as skipped.
const POSTGRES_ONLY = [
  'test/db-faults.test.ts',
  'test/fault-table-postgres.test.ts',
  'test/prepared-statements.test.ts',
  'test/hardening-plans.test.ts',
  'test/pgbouncer.test.ts',
  'test/replicas.test.ts',
];

export default defineConfig({
  // Node resolves `graphql` to its CommonJS build (no "exports" map); Vite would pick index.mjs for our code
  // while dependencies load the CommonJS one, giving two graphql realms. Resolve it as Node does.
  resolve: { alias: [{ find: /^graphql$/, replacement: 'graphql/index.js' }] },
  test: {
    include: ['test/**/*.test.ts'],
    exclude: [...configDefaults.exclude, ...(process.env['DATABASE_URL'] ? [] : POSTGRES_ONLY)],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
