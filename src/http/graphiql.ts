import type { GraphiQLOptions } from 'graphql-yoga';

/** The query GraphiQL opens with (when the browser holds no earlier tabs): it runs on the demo tenant. */
export const EXAMPLE_QUERY = `# Get a token above, then press ▶
{
  subjects(first: 3) {
    totalCount
    edges {
      node {
        externalId
        customFieldValues {
          field {
            key
          }
          values {
            valueText
          }
        }
      }
    }
  }
}
`;

/**
 * The demo tenant's API client (config/demo.tenant.json). Not a secret: `npm start` prints it on the
 * embedded database outside production, so the form offers it as its default there.
 */
const DEMO_CLIENT = { tenantKey: 'demo', clientId: 'demo-client', clientSecret: 'demo-client-secret' };

/** The scope the form asks for: the one `/graphql` requires. */
const SCOPE = 'ServiceApi';

/** Where the form posts its client credentials (the app's own token endpoint). */
const TOKEN_PATH = '/connect/token';

const TITLE = 'SSDI GraphiQL';

/** Yoga's page calls this to mount GraphiQL; the form's script takes the call over (see CLIENT_SCRIPT). */
const RENDER_CALL = 'YogaGraphiQL.renderYogaGraphiQL(';

/** The `graphiql` and `renderGraphiQL` options of `createYoga`. */
export interface GraphiQLYogaOptions {
  graphiql: GraphiQLOptions | false;
  renderGraphiQL?: (options: GraphiQLOptions) => Promise<string>;
}

/**
 * GraphiQL for `createYoga`: its scripts, styles and workers come from the installed
 * `@graphql-yoga/render-graphiql` (inlined in the page, nothing from a CDN), it opens with
 * {@link EXAMPLE_QUERY}, and a form above it gets a token from `/connect/token` (client credentials,
 * scope ServiceApi).
 *
 * How the token reaches GraphiQL: the form keeps the token in the tab's `sessionStorage` and reloads;
 * on load the page mounts GraphiQL with Yoga's `additionalHeaders` option set to
 * `Authorization: Bearer <token>`, which GraphiQL's fetcher sends with every request (introspection
 * included), merged with the headers editor's. Without a (current) token GraphiQL is mounted with
 * `schema: null`, so it does not introspect (which would only answer 401) and the form says to get a token.
 *
 * @param enabled whether the page is served at all (`false`: no page, as in production).
 * @param demoDefaults pre-fill the form with the demo tenant's public client (outside production only).
 */
export function graphiqlOptions({ enabled, demoDefaults }: { enabled: boolean; demoDefaults: boolean }): GraphiQLYogaOptions {
  if (!enabled) return { graphiql: false };
  const defaults = demoDefaults ? DEMO_CLIENT : { tenantKey: '', clientId: '', clientSecret: '' };
  // The page (about 9 MB: GraphiQL's bundle inlined) is the same for the same options: built once.
  const pages = new Map<string, Promise<string>>();
  return {
    graphiql: { title: TITLE, defaultQuery: EXAMPLE_QUERY },
    // Imported on the first page view: the renderer holds GraphiQL's whole bundle (about 50 MB resident),
    // which an instance that never serves the page should not carry (issue 8).
    renderGraphiQL: (options) => {
      const key = JSON.stringify(options);
      let page = pages.get(key);
      if (!page) {
        page = import('@graphql-yoga/render-graphiql').then((m) => withTokenForm(m.renderGraphiQL(options), defaults));
        pages.set(key, page);
        page.catch(() => pages.delete(key));
      }
      return page;
    },
  };
}

/** Inserts the token form (and its styles and script) into the page Yoga's renderer produced. */
function withTokenForm(page: string, defaults: typeof DEMO_CLIENT): string {
  const head = page.indexOf('</head>');
  const root = page.indexOf('<div id="root"></div>', head);
  const call = page.lastIndexOf(RENDER_CALL);
  if (head < 0 || root < 0 || call < root) {
    throw new Error('The GraphiQL page of @graphql-yoga/render-graphiql changed: the token form cannot be added to it.');
  }
  const config = { tokenPath: TOKEN_PATH, scope: SCOPE };
  const form = `<form id="ssdi-token" autocomplete="off">
  <strong>Token</strong>
  <label>Tenant key <input name="tenant_key" autocomplete="off" required value="${escapeHtml(defaults.tenantKey)}" placeholder="${escapeHtml(DEMO_CLIENT.tenantKey)}"></label>
  <label>Client id <input name="client_id" autocomplete="off" required value="${escapeHtml(defaults.clientId)}" placeholder="${escapeHtml(DEMO_CLIENT.clientId)}"></label>
  <label>Client secret <input name="client_secret" type="password" autocomplete="off" required value="${escapeHtml(defaults.clientSecret)}"></label>
  <span class="ssdi-scope">scope ${escapeHtml(SCOPE)}</span>
  <button type="submit">Get token</button>
  <button type="button" id="ssdi-forget" hidden>Forget token</button>
  <output id="ssdi-status" role="status">Get a token to load the schema.</output>
</form>
<script>${CLIENT_SCRIPT.replace('__CONFIG__', () => scriptJson(config))}</script>
`;
  return (
    page.slice(0, head) +
    `<style>${STYLE}</style>\n` +
    page.slice(head, root) +
    form +
    page.slice(root, call) +
    `ssdiGraphiQL.render(YogaGraphiQL.renderYogaGraphiQL, ` +
    page.slice(call + RENDER_CALL.length)
  );
}

/** Text for an HTML attribute or element. */
function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** JSON safe inside a `<script>` element (no `</script>`, no line separators). */
function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

const STYLE = `
html, body { height: 100%; }
body { display: flex; flex-direction: column; }
#root { flex: 1; min-height: 0; }
#root .graphiql-container { height: 100%; width: 100%; }
#ssdi-token { display: flex; flex-wrap: wrap; align-items: center; gap: 6px 12px; padding: 6px 12px;
  font: 13px system-ui, sans-serif; color: #333; background: #f3f4f6; border-bottom: 1px solid #ddd; }
#ssdi-token input { font: inherit; padding: 2px 4px; width: 11em; }
#ssdi-token button { font: inherit; padding: 2px 10px; cursor: pointer; }
#ssdi-token .ssdi-scope { color: #666; }
#ssdi-status.ssdi-error { color: #b00020; }
#ssdi-status.ssdi-ok { color: #1a7f37; }
`;

/**
 * Runs before Yoga's script. `ssdiGraphiQL.render` receives Yoga's mount function and its options and
 * adds the stored token as `additionalHeaders` (or `schema: null` without one). Text from the token
 * endpoint is set with `textContent` only.
 */
const CLIENT_SCRIPT = `
(function () {
  var config = __CONFIG__;
  var KEY = 'ssdi.graphiql.token';
  var form = document.getElementById('ssdi-token');
  var status = document.getElementById('ssdi-status');
  var forget = document.getElementById('ssdi-forget');

  function stored() {
    try {
      var t = JSON.parse(sessionStorage.getItem(KEY) || 'null');
      if (t && typeof t.accessToken === 'string' && t.expiresAt > Date.now()) return t;
    } catch (e) {}
    sessionStorage.removeItem(KEY);
    return null;
  }
  function show(text, kind) {
    status.textContent = text;
    status.className = kind ? 'ssdi-' + kind : '';
  }

  var token = stored();
  if (token) {
    form.elements.tenant_key.value = token.tenantKey;
    form.elements.client_id.value = token.clientId;
    show('Token for ' + token.tenantKey + ' / ' + token.clientId + ' until ' + new Date(token.expiresAt).toLocaleTimeString() + ': sent as the Authorization header.', 'ok');
    forget.hidden = false;
    setTimeout(function () {
      show('The token has expired: get a new one.', 'error');
    }, token.expiresAt - Date.now());
  }
  forget.addEventListener('click', function () {
    sessionStorage.removeItem(KEY);
    location.reload();
  });

  form.addEventListener('submit', function (event) {
    event.preventDefault();
    var tenantKey = form.elements.tenant_key.value.trim();
    var clientId = form.elements.client_id.value.trim();
    var body = new URLSearchParams({
      grant_type: 'client_credentials',
      tenant_key: tenantKey,
      client_id: clientId,
      client_secret: form.elements.client_secret.value,
      scope: config.scope,
    });
    show('Requesting a token…');
    // Without credentials: the endpoint's 401 (WWW-Authenticate: Basic) must not make the browser prompt for a password.
    fetch(config.tokenPath, { method: 'POST', credentials: 'omit', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: body })
      .then(function (res) {
        return res.json().then(
          function (json) { return { res: res, json: json }; },
          function () { return { res: res, json: null }; }
        );
      })
      .then(function (r) {
        var json = r.json || {};
        if (!r.res.ok || typeof json.access_token !== 'string') {
          show(json.error_description || json.error || 'The token request failed (HTTP ' + r.res.status + ').', 'error');
          return;
        }
        var expiresIn = typeof json.expires_in === 'number' ? json.expires_in : 300;
        sessionStorage.setItem(KEY, JSON.stringify({
          accessToken: json.access_token,
          expiresAt: Date.now() + expiresIn * 1000,
          tenantKey: tenantKey,
          clientId: clientId,
        }));
        location.reload();
      })
      .catch(function (e) {
        show('The token request failed: ' + (e && e.message ? e.message : e), 'error');
      });
  });

  window.ssdiGraphiQL = {
    render: function (mount, root, options) {
      var o = Object.assign({}, options);
      // Yoga mounts GraphiQL without an initial query when defaultQuery is set; GraphiQL then matches no
      // stored tab on a reload (as after getting a token) and adds an empty one each time. As the initial
      // query (a ?query= in the address still wins), the example selects its stored tab instead.
      if (o.query == null && o.defaultQuery) o.query = o.defaultQuery;
      if (token) o.additionalHeaders = Object.assign({}, options.additionalHeaders, { Authorization: 'Bearer ' + token.accessToken });
      else o.schema = null;
      mount(root, o);
    },
  };
})();
`;
