import type { GraphiQLOptions } from 'graphql-yoga';
import { tokenForm, webFile } from './web-files.js';

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

const TITLE = 'SSDI GraphiQL';

/** Yoga's page calls this to mount GraphiQL; the form's script takes the call over (web/graphiql/token-form.ts). */
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
 * The form, its script and its style are web/graphiql/ (bundled into dist/web/ at build time), read here
 * at start-up and inlined in the page as Yoga inlines GraphiQL's own.
 *
 * @param enabled whether the page is served at all (`false`: no page, as in production).
 * @param demoDefaults pre-fill the form with the demo tenant's public client (outside production only).
 */
export function graphiqlOptions({ enabled, demoDefaults }: { enabled: boolean; demoDefaults: boolean }): GraphiQLYogaOptions {
  if (!enabled) return { graphiql: false };
  const form = inlinedTokenForm(demoDefaults);
  // The page (about 9 MB: GraphiQL's bundle inlined) is the same for the same options: built once.
  const pages = new Map<string, Promise<string>>();
  return {
    graphiql: { title: TITLE, defaultQuery: EXAMPLE_QUERY },
    // Imported on the first page view: the renderer holds GraphiQL's whole bundle (about 50 MB resident),
    // which an instance that never serves the page should not carry (P66: loading less helps at rest).
    renderGraphiQL: (options) => {
      const key = JSON.stringify(options);
      let page = pages.get(key);
      if (!page) {
        page = import('@graphql-yoga/render-graphiql').then((m) => withTokenForm(m.renderGraphiQL(options), form));
        pages.set(key, page);
        page.catch(() => pages.delete(key));
      }
      return page;
    },
  };
}

/** The token form with its style and script, to go inside Yoga's page. */
interface TokenForm {
  head: string;
  body: string;
}

function inlinedTokenForm(demoDefaults: boolean): TokenForm {
  const style = webFile('graphiql/token-form.css');
  const script = webFile('graphiql/token-form.js');
  // Inlined: an end tag inside would end the element early.
  if (/<\/style/i.test(style) || /<\/script/i.test(script)) throw new Error('dist/web/graphiql/token-form.* closes its own element');
  return {
    head: `<style>${style}</style>\n`,
    body: `${tokenForm('Token', 'Get a token to load the schema.', demoDefaults)}<script>${script}</script>\n`,
  };
}

/** Inserts the token form (and its styles and script) into the page Yoga's renderer produced. */
function withTokenForm(page: string, form: TokenForm): string {
  const head = page.indexOf('</head>');
  const root = page.indexOf('<div id="root"></div>', head);
  const call = page.lastIndexOf(RENDER_CALL);
  if (head < 0 || root < 0 || call < root) {
    throw new Error('The GraphiQL page of @graphql-yoga/render-graphiql changed: the token form cannot be added to it.');
  }
  return (
    page.slice(0, head) +
    form.head +
    page.slice(head, root) +
    form.body +
    page.slice(root, call) +
    `ssdiGraphiQL.render(YogaGraphiQL.renderYogaGraphiQL, ` +
    page.slice(call + RENDER_CALL.length)
  );
}
