// Bundles the browser code of web/ into dist/web/, which src/http/web-files.ts serves: part of `npm run build`
// (so of `npm ci`, `npm start`'s prestart and the tests' global setup) and of `npm run dev`.
import { build } from 'esbuild';

await build({
  entryPoints: [
    'web/dashboard/index.html',
    'web/dashboard/app.ts',
    'web/dashboard/app.css',
    'web/graphiql/token-form.ts',
    'web/graphiql/token-form.css',
    'web/shared/token-form.html',
  ],
  outbase: 'web',
  outdir: 'dist/web',
  bundle: true,
  // A classic script's shape: GraphiQL's glue is inlined in Yoga's page and must run before Yoga's script.
  format: 'iife',
  target: 'es2022',
  charset: 'utf8',
  legalComments: 'none',
  // The pages are templates the service fills in (src/http/web-files.ts): copied as they are.
  loader: { '.html': 'copy' },
  logLevel: 'warning',
});
