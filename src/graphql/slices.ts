import { type GraphQLFieldResolver, type GraphQLSchema, isObjectType } from 'graphql';

/** A connection's first this many nodes are not held back: pages of the usual sizes run unsliced. */
export const UNSLICED_NODES = 100;
/**
 * Held-back nodes completed in one turn of the event loop: about 1.5 ms of a subject page with its custom
 * field values, so one large request holds the event loop about that long per turn (P73).
 */
export const SLICE_NODES = 40;

/**
 * The nodes of one request's large connections, handed to execution a slice at a time (P65). Completing
 * a node runs its fields' resolvers and builds its part of the result synchronously, in promise
 * continuations: a 900-subject page would otherwise hold the event loop for tens of milliseconds in one
 * piece, and every other request (another tenant's included) waits behind it whatever admission allows.
 * A connection's first UNSLICED_NODES nodes pass at once, so pages of the usual sizes, and the small
 * connections nested in them, run exactly as before; every further node waits for a later turn,
 * SLICE_NODES per turn (`setImmediate` runs after the poll phase, so the requests that arrived meanwhile
 * are read and served in between).
 */
export class Slices {
  private readonly waiting: (() => void)[] = [];
  private scheduled = false;
  /** Whether this request held nodes back: its result is large, and is serialised in slices too. */
  sliced = false;

  /** A promise of `value` that resolves in a later turn, SLICE_NODES per turn, in order. */
  hold<T>(value: T): Promise<T> {
    this.sliced = true;
    return new Promise<T>((resolve) => {
      this.waiting.push(() => resolve(value));
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(this.release);
      }
    });
  }

  private readonly release = (): void => {
    // Resolved in order: a node's continuation runs after this callback, before the next turn's.
    for (const resolve of this.waiting.splice(0, SLICE_NODES)) resolve();
    if (this.waiting.length > 0) setImmediate(this.release);
    else this.scheduled = false;
  };
}

/**
 * Routes the nodes of every connection's edges past the first UNSLICED_NODES through the request's `Slices`
 * (Pothos's relay plugin fixes that resolver to `edge.node`, so it is wrapped once here, on the built
 * schema; the edge's index is the path's previous key). Returns the same schema.
 */
export function sliceEdgeNodes<S extends GraphQLSchema>(schema: S): S {
  for (const type of Object.values(schema.getTypeMap())) {
    if (!isObjectType(type) || !type.name.endsWith('Edge')) continue;
    const node = type.getFields()['node'];
    if (!node) continue;
    const resolve: GraphQLFieldResolver<unknown, { slices: Slices }> = node.resolve ?? ((edge) => (edge as { node: unknown }).node);
    node.resolve = (edge, args, ctx: { slices: Slices }, info) => {
      const value = resolve(edge, args, ctx, info);
      const index = info.path.prev?.key;
      return typeof index === 'number' && index >= UNSLICED_NODES ? ctx.slices.hold(value) : value;
    };
  }
  return schema;
}
