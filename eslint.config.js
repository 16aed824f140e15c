// ESLint (flat config): typescript-eslint's recommended rules, type-aware where it pays (promises that
// are neither awaited nor handled, promises passed where a callback's result is ignored). Formatting is
// Prettier's (`npm run format`); the layer rules are dependency-cruiser's (.dependency-cruiser.cjs).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/', 'src/generated/', 'bench/results/', '.data/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
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
);
