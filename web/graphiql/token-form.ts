// GraphiQL's token form (web/shared/token-form.html), inlined in Yoga's page before Yoga's script, whose
// mount call src/http/graphiql.ts turns into `ssdiGraphiQL.render(YogaGraphiQL.renderYogaGraphiQL, root, options)`.
// With a (current) token, GraphiQL is mounted with it as `additionalHeaders`, which its fetcher sends with
// every request (introspection included); without one, with `schema: null`, so it does not introspect
// (which would only answer 401).
import { handleTokenForm, show, showHeld, storedToken } from '../shared/token.js';

/** The options of Yoga's `renderYogaGraphiQL` this script reads or sets. */
interface YogaGraphiQLOptions {
  query?: string | null;
  defaultQuery?: string;
  additionalHeaders?: Record<string, string>;
  schema?: null;
  [option: string]: unknown;
}

declare global {
  interface Window {
    ssdiGraphiQL: {
      render(mount: (root: HTMLElement, options: YogaGraphiQLOptions) => void, root: HTMLElement, options: YogaGraphiQLOptions): void;
    };
  }
}

const KEY = 'ssdi.graphiql.token';

const token = storedToken(KEY);
if (token) {
  showHeld(
    token,
    `Token for ${token.tenantKey} / ${token.clientId} until ${new Date(token.expiresAt).toLocaleTimeString()}: sent as the Authorization header.`,
  );
  setTimeout(() => show('The token has expired: get a new one.', 'error'), token.expiresAt - Date.now());
}
handleTokenForm(KEY, () => location.reload());

window.ssdiGraphiQL = {
  render(mount, root, options) {
    const o = { ...options };
    // Yoga mounts GraphiQL without an initial query when defaultQuery is set; GraphiQL then matches no
    // stored tab on a reload (as after getting a token) and adds an empty one each time. As the initial
    // query (a ?query= in the address still wins), the example selects its stored tab instead.
    if (o.query == null && o.defaultQuery) o.query = o.defaultQuery;
    if (token) o.additionalHeaders = { ...options.additionalHeaders, Authorization: `Bearer ${token.accessToken}` };
    else o.schema = null;
    mount(root, o);
  },
};
