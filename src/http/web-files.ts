import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// The browser code (web/) as `npm run build` bundles it into dist/web/ (web/build.js, esbuild). The routes
// read it once at start-up: a missing file stops the service there, not at the first request.

/** dist/web/: beside the built module (dist/src/http/), or the build's from the sources (tsx, vitest). */
const WEB_DIR = new URL(import.meta.url.endsWith('.ts') ? '../../dist/web/' : '../../web/', import.meta.url);

/** The demo tenant's API client (config/demo.tenant.json): not a secret, `npm start` prints it outside production. */
const DEMO_CLIENT: FormDefaults = { tenantKey: 'demo', clientId: 'demo-client', clientSecret: 'demo-client-secret' };

/** What the token form is filled with. */
interface FormDefaults {
  tenantKey: string;
  clientId: string;
  clientSecret: string;
}

/** A built file of dist/web/, e.g. `dashboard/app.js`. */
export function webFile(name: string): string {
  const file = fileURLToPath(new URL(name, WEB_DIR));
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`${file} cannot be read (${(e as Error).message}): run \`npm run build\`, which bundles web/ into dist/web/`, {
      cause: e,
    });
  }
}

/**
 * A page or fragment of dist/web/ with the token form's `{{tenantKey}}`, `{{clientId}}` and
 * `{{clientSecret}}` filled in (the demo client outside production, else empty).
 */
export function tokenFormPage(name: string, demoDefaults: boolean): string {
  const defaults = demoDefaults ? DEMO_CLIENT : { tenantKey: '', clientId: '', clientSecret: '' };
  let filled = webFile(name);
  for (const [key, value] of Object.entries(defaults)) {
    const slot = `{{${key}}}`;
    if (!filled.includes(slot)) throw new Error(`dist/web/${name} has no ${slot} for the token form`);
    filled = filled.replaceAll(slot, () => escapeHtml(value));
  }
  return filled;
}

/** Text for an HTML attribute or element. */
function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
