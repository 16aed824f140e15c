import SchemaBuilder from '@pothos/core';
import ComplexityPlugin from '@pothos/plugin-complexity';
import DataloaderPlugin from '@pothos/plugin-dataloader';
import RelayPlugin from '@pothos/plugin-relay';
import ScopeAuthPlugin from '@pothos/plugin-scope-auth';
import type { Context } from './context.js';
import { type Permission, hasPermission, isNodeType, requireNodePermission } from '../core/permissions.js';
import { ForbiddenError, ValidationError } from '../core/errors.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from '../db/paging.js';

/** nodes(ids) takes at most this many ids (its cost counts them all). */
export const MAX_NODE_IDS = 100;

/** The schema's type parameters, exported for helpers that take Pothos builders of this schema. */
export interface SchemaTypeParams {
  Context: Context;
  AuthScopes: { permission: Permission };
  Scalars: {
    JSON: { Input: unknown; Output: unknown };
    ID: { Input: string; Output: string };
  };
  // Every connection carries a lazy count (D6 TotalCount), read only when the field is asked for.
  Connection: { totalCount: () => Promise<number> };
  DefaultEdgesNullability: false;
  DefaultNodeNullability: false;
  DefaultFieldNullability: false;
}

export type Types = PothosSchemaTypes.ExtendDefaultTypes<SchemaTypeParams>;

/** The one Pothos builder. Domains add their types in `src/domains/<domain>/*.schema.ts`. */
export const builder = new SchemaBuilder<SchemaTypeParams>({
  plugins: [ScopeAuthPlugin, RelayPlugin, DataloaderPlugin, ComplexityPlugin],
  // Non-null by default; fields guarded by a permission are declared nullable, so that a FORBIDDEN
  // error nulls only that field and the rest of the query is still answered (D4).
  defaultFieldNullability: false,
  scopeAuth: {
    authScopes: (ctx) => ({ permission: (p: Permission) => hasPermission(ctx.principal, p) }),
    // A subscription field's scopes are checked once, when it is subscribed to (not per event).
    authorizeOnSubscribe: true,
    // D4: a missing permission is a FORBIDDEN error on that field only.
    unauthorizedError: (_parent, _ctx, _info, result) => new ForbiddenError(result.message),
  },
  // Cost of a query (limited per request in http/graphql-limits.ts): every field costs 1; connections multiply their
  // selection by their page size (connections.ts). Numbers, not functions, elsewhere: a function makes the
  // rule decode a field's arguments during validation (a bad global id would then fail the whole request).
  complexity: { defaultComplexity: 1, defaultListMultiplier: 1 },
  // Descriptions of what the relay plugin generates: the contract's paging words (D6).
  relay: {
    clientMutationId: 'omit',
    cursorType: 'String',
    nodeTypeOptions: { description: 'An object with a global id, fetchable by node and nodes.' },
    idFieldOptions: { description: 'Global id: opaque and stable; node and nodes take it.' },
    defaultConnectionTypeOptions: { description: 'One page of a list, and where it lies in the list.' },
    defaultEdgeTypeOptions: { description: 'One item of a page, with its cursor.' },
    edgesFieldOptions: { nullable: false, description: "The page's items, in the list's order." },
    pageInfoFieldOptions: { description: 'Where the page lies in the list.' },
    nodeFieldOptions: { nullable: false, description: 'The item.' },
    cursorFieldOptions: { description: "Opaque position of the item in the list's ordering; after and before take it." },
    pageInfoTypeOptions: { description: 'Where a page lies in its list.' },
    hasNextPageFieldOptions: { description: 'Whether items follow the page (exact, whichever way it was paged).' },
    hasPreviousPageFieldOptions: { description: 'Whether items precede the page (exact, whichever way it was paged).' },
    startCursorFieldOptions: { description: "The first item's cursor; null on an empty page." },
    endCursorFieldOptions: { description: "The last item's cursor; null on an empty page." },
    firstArgOptions: {
      description: `Take the first this many items (0–${MAX_PAGE_SIZE}); ${DEFAULT_PAGE_SIZE} when neither first nor last is given.`,
    },
    lastArgOptions: { description: `Take the last this many items (0–${MAX_PAGE_SIZE}).` },
    afterArgOptions: { description: 'Cursor: items after this one.' },
    beforeArgOptions: { description: 'Cursor: items before this one.' },
    nodeQueryOptions: {
      description: 'The node with this global id; null when there is none.',
      args: { id: { description: 'A global id.' } },
      // A global id of a type that is not a node answers like an unknown id: null.
      resolve: (_root, { id }, ctx, _info, resolveNode) => {
        if (!isNodeType(id.typename)) return null;
        requireNodePermission(ctx.principal, id.typename);
        return resolveNode(id);
      },
    },
    nodesQueryOptions: {
      description: `Nodes by global id, at most ${MAX_NODE_IDS}.`,
      args: { ids: { description: `Global ids, at most ${MAX_NODE_IDS}.` } },
      complexity: { field: 1, multiplier: MAX_NODE_IDS },
      // Per item: an id of no node type is null, a forbidden one an error at that item (an Error as a
      // list item), never a failure of the whole list.
      resolve: async (_root, args, ctx, _info, resolveNodes) => {
        const { ids } = args;
        if (ids.length > MAX_NODE_IDS) throw ValidationError.at('ids', `At most ${MAX_NODE_IDS} ids.`);
        const denied = ids.map((id) => {
          if (!isNodeType(id.typename)) return null;
          try {
            requireNodePermission(ctx.principal, id.typename);
            return undefined;
          } catch (e) {
            return e as Error;
          }
        });
        const allowed = ids.filter((_, i) => denied[i] === undefined);
        // Pothos's resolveNodes ignores its argument and loads `args.ids`: narrow that instead.
        args.ids = allowed;
        const resolved = allowed.length > 0 ? await resolveNodes(allowed) : [];
        let next = 0;
        return ids.map((_, i) => (denied[i] === undefined ? resolved[next++] : denied[i]));
      },
    },
  },
});

builder.queryType({ description: 'Reads.' });
builder.mutationType({ description: 'Writes.' });
builder.subscriptionType({ description: 'Live updates.' });
