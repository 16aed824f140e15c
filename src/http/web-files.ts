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
 * The token form (web/shared/token-form.html) headed `title`, its status line reading `status`, its fields
 * pre-filled with the demo client outside production (else empty).
 */
export function tokenForm(title: string, status: string, demoDefaults: boolean): string {
  const defaults = demoDefaults ? DEMO_CLIENT : { tenantKey: '', clientId: '', clientSecret: '' };
  const text = Object.entries({ title, status, ...defaults }).map(([key, value]) => [key, escapeHtml(value)]);
  return filled('shared/token-form.html', Object.fromEntries(text));
}

/** A page of dist/web/ with its `{{tokenForm}}` replaced by `form` (HTML, from `tokenForm`). */
export function tokenFormPage(name: string, form: string): string {
  return filled(name, { tokenForm: form });
}

/** A file of dist/web/ with each `{{key}}` replaced by its HTML. */
function filled(name: string, html: Record<string, string>): string {
  let page = webFile(name);
  for (const [key, value] of Object.entries(html)) {
    const slot = `{{${key}}}`;
    if (!page.includes(slot)) throw new Error(`dist/web/${name} has no ${slot}`);
    page = page.replaceAll(slot, () => value);
  }
  return page;
}

/** Text for an HTML attribute or element. */
function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
