import { defineConfig } from 'vitest/config';

// The same suite runs on PGlite (default) and on PostgreSQL (DATABASE_URL set): see test/global-setup.ts.
export default defineConfig({
  // Node resolves `graphql` to its CommonJS build (no "exports" map); Vite would pick index.mjs for our code
  // while dependencies load the CommonJS one, giving two graphql realms. Resolve it as Node does.
  resolve: { alias: [{ find: /^graphql$/, replacement: 'graphql/index.js' }] },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
