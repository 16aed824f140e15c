// The token form both pages share (#ssdi-token): client credentials posted to the form's data-token-path
// for its data-scope, the token kept in the tab's sessionStorage. Text from the endpoint is set with
// `textContent` only.
import { byId, field, messageOf } from './dom.js';

/** A token as a page keeps it. */
export interface Token {
  accessToken: string;
  /** Epoch milliseconds. */
  expiresAt: number;
  tenantKey: string;
  clientId: string;
}

const form = byId<HTMLFormElement>('ssdi-token');
const status = byId<HTMLOutputElement>('ssdi-status');
const forget = byId<HTMLButtonElement>('ssdi-forget');

/** The token stored under `key`, unless absent, unreadable or expired (then removed). */
export function storedToken(key: string): Token | null {
  try {
    const t = JSON.parse(sessionStorage.getItem(key) ?? 'null') as Partial<Token> | null;
    if (t && typeof t.accessToken === 'string' && (t.expiresAt ?? 0) > Date.now()) return t as Token;
  } catch {
    // unreadable: removed below
  }
  sessionStorage.removeItem(key);
  return null;
}

/** The form's status line. */
export function show(text: string, kind?: 'ok' | 'error'): void {
  status.textContent = text;
  status.className = kind ? `ssdi-${kind}` : '';
}

/** Shows a held token in the form (its tenant and client) and offers to forget it. */
export function showHeld(token: Token, text: string): void {
  field(form, 'tenant_key').value = token.tenantKey;
  field(form, 'client_id').value = token.clientId;
  show(text, 'ok');
  forget.hidden = false;
}

/**
 * Wires the form: a submit gets a token, stores it under `key` and hands it to `onToken`; "Forget token"
 * removes it and reloads the page.
 */
export function handleTokenForm(key: string, onToken: (token: Token) => void): void {
  forget.addEventListener('click', () => {
    sessionStorage.removeItem(key);
    location.reload();
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const tenantKey = field(form, 'tenant_key').value.trim();
    const clientId = field(form, 'client_id').value.trim();
    const body = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: tenantKey,
      client_id: clientId,
      client_secret: field(form, 'client_secret').value,
      scope: form.dataset['scope'] ?? '',
    });
    show('Requesting a token…');
    try {
      // Without credentials: the endpoint's 401 (WWW-Authenticate: Basic) must not make the browser prompt.
      const res = await fetch(form.dataset['tokenPath'] ?? '', {
        method: 'POST',
        credentials: 'omit',
        headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
        body,
      });
      const json = ((await res.json().catch(() => null)) ?? {}) as {
        access_token?: unknown;
        expires_in?: unknown;
        error?: string;
        error_description?: string;
      };
      if (!res.ok || typeof json.access_token !== 'string') {
        show(json.error_description || json.error || `The token request failed (HTTP ${res.status}).`, 'error');
        return;
      }
      const expiresIn = typeof json.expires_in === 'number' ? json.expires_in : 300;
      const token: Token = { accessToken: json.access_token, expiresAt: Date.now() + expiresIn * 1000, tenantKey, clientId };
      sessionStorage.setItem(key, JSON.stringify(token));
      onToken(token);
    } catch (e) {
      show(`The token request failed: ${messageOf(e)}`, 'error');
    }
  });
}
