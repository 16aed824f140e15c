import type { CodegenConfig } from '@graphql-codegen/cli';

// Typed documents for the operations the REST routes execute, and the answer types of the demo dashboard's
// queries (web/dashboard/queries.ts): `npm run codegen`; CI fails when stale.
const config: CodegenConfig = {
  schema: 'schema.graphql',
  documents: ['src/domains/**/*.routes.ts', 'web/dashboard/queries.ts'],
  ignoreNoDocuments: true,
  importExtension: '.js',
  generates: {
    'src/generated/': {
      preset: 'client',
      presetConfig: { fragmentMasking: false },
      config: {
        useTypeImports: true,
        enumsAsTypes: true,
        scalars: { JSON: 'unknown' },
        avoidOptionals: { field: true },
      },
    },
  },
};

export default config;
