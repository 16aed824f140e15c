import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { type Response, Router } from 'express';
import { tokenForm, tokenFormPage, webFile } from './web-files.js';

// The demo dashboard at GET /dashboard (README "Quick start"; outside production, like GraphiQL). One page over the
// public GraphQL API only, so it doubles as the example a dashboard builder copies: a token form (client
// credentials, as GraphiQL's), an extract's aggregate for a structural entity charted with one series per
// child entity and its unit (`dataPointAggregatesChanged` over SSE: the service pushes the recomputed answer,
// uPlot), drill-down to a child and to a subject's own series, the entity's subjects with their latest
// values (`subjects` with `dataPoints` under @defer, so the list shows before provider data; re-read on
// `dataPointsChanged`). The page is web/dashboard/ (bundled into
// dist/web/ at build time); nothing comes from the internet: the chart library is served from the
// installed `uplot` package.

/** The page and its assets, each answering GET (and HEAD) only. */
export const DASHBOARD_PATHS = [
  '/dashboard',
  '/dashboard/app.js',
  '/dashboard/app.css',
  '/dashboard/uplot.js',
  '/dashboard/uplot.css',
] as const;

/** Scripts, styles and requests from this origin only; no inline script or style, no frames, no form posts. */
const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** A file of an installed package. */
function packageFile(specifier: string): string {
  return readFileSync(createRequire(import.meta.url).resolve(specifier), 'utf8');
}

/**
 * The dashboard's routes: the page at `/dashboard` and its four assets below it, all read at start-up.
 *
 * @param demoDefaults pre-fill the token form with the demo tenant's public client (outside production only).
 */
export function dashboardRouter({ demoDefaults }: { demoDefaults: boolean }): Router {
  const files: Record<(typeof DASHBOARD_PATHS)[number], { type: string; body: string; cache: string }> = {
    '/dashboard': {
      type: 'text/html',
      body: tokenFormPage('dashboard/index.html', tokenForm('SSDI dashboard', 'Get a token to load the dashboard.', demoDefaults)),
      cache: 'no-store',
    },
    '/dashboard/app.js': { type: 'text/javascript', body: webFile('dashboard/app.js'), cache: 'no-cache' },
    '/dashboard/app.css': { type: 'text/css', body: webFile('dashboard/app.css'), cache: 'no-cache' },
    '/dashboard/uplot.js': { type: 'text/javascript', body: packageFile('uplot/dist/uPlot.iife.min.js'), cache: 'no-cache' },
    '/dashboard/uplot.css': { type: 'text/css', body: packageFile('uplot/dist/uPlot.min.css'), cache: 'no-cache' },
  };
  const secure = (res: Response) => res.set({ 'Content-Security-Policy': CSP, 'X-Content-Type-Options': 'nosniff' });

  const router = Router({ strict: true });
  for (const [path, file] of Object.entries(files)) {
    router.get(path, (_req, res) => {
      secure(res).set('Cache-Control', file.cache).type(file.type).send(file.body);
    });
  }
  return router;
}
