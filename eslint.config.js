// ESLint (flat config): typescript-eslint's recommended rules, type-aware where it pays (promises that
// are neither awaited nor handled, promises passed where a callback's result is ignored). Formatting is
// Prettier's (`npm run format`); the layer rules are dependency-cruiser's (.dependency-cruiser.cjs). schema.graphql
// has graphql-eslint's schema rules (the last block).
import js from '@eslint/js';
import graphql from '@graphql-eslint/eslint-plugin';
import tseslint from 'typescript-eslint';

const graphqlRecommended = graphql.configs['flat/schema-recommended'].rules;

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/', 'src/generated/', 'bench/results/', '.data/'] },
  {
    files: ['**/*.{ts,tsx,mts,cts,js,mjs,cjs}'],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: {
        // bench/peers/*.mjs: the PostGraphile peer, plain JavaScript outside tsconfig.json (bench/README.md, "Peers").
        // web/**/*.ts find web/tsconfig.json (the browser's globals: the DOM library, not Node's types).
        projectService: {
          allowDefaultProject: ['eslint.config.js', '.dependency-cruiser.cjs', 'bench/peers/*.mjs', 'scripts/*.mjs', 'web/build.js'],
        },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false, attributes: false } }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
      // A closure that reads a variable before its one assignment (the shutdown path) needs `let`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    // dependency-cruiser reads its configuration as CommonJS.
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { module: 'writable' } },
  },
  {
    // Plain ES modules that run on Node: the peer (bench/peers, its own package), scripts/ (run before the build).
    files: ['bench/peers/**/*.mjs', 'scripts/*.mjs'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
  {
    // Migrations take Kysely<any> (Kysely's convention: they are frozen, and must not import the app's
    // Database interface, which describes the latest schema only).
    files: ['db/migrations/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Tests and benches read arbitrary JSON answers of the service; typing each one adds nothing.
    files: ['test/**', 'bench/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The printed schema (`npm run schema`): graphql-eslint's recommended schema rules, and a description on
    // everything, arguments, input fields and enum values included (P135).
    files: ['schema.graphql'],
    languageOptions: { parser: graphql.parser, parserOptions: { graphQLConfig: { schema: 'schema.graphql' } } },
    plugins: { '@graphql-eslint': graphql },
    rules: {
      ...graphqlRecommended,
      '@graphql-eslint/require-description': [
        'error',
        {
          types: true,
          rootField: true,
          FieldDefinition: true,
          InputValueDefinition: true,
          EnumValueDefinition: true,
          DirectiveDefinition: true,
        },
      ],
      // StructureType (D8) and TypedValue keep their names: renaming a type breaks clients.
      '@graphql-eslint/naming-convention': [
        'error',
        { ...graphqlRecommended['@graphql-eslint/naming-convention'][1], 'ObjectTypeDefinition,ObjectTypeExtension': {} },
      ],
      // Subject.subjectId keeps its name: renaming a field breaks clients.
      '@graphql-eslint/no-typename-prefix': 'off',
      // Value objects (buckets, aggregates, items) have no identity, and users and data points carry `id: String!`:
      // an `ID!` on each would be invented or a breaking type change.
      '@graphql-eslint/strict-id-in-types': 'off',
      '@graphql-eslint/input-name': 'error',
      '@graphql-eslint/no-scalar-result-type-on-mutation': 'error',
      '@graphql-eslint/require-nullable-result-in-root': 'error',
    },
  },
);
