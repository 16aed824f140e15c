import {
  DirectiveLocation,
  GraphQLBoolean,
  GraphQLDirective,
  GraphQLInt,
  GraphQLNonNull,
  GraphQLString,
  specifiedDirectives,
} from 'graphql';

// @defer and @stream as the incremental delivery proposal defines them (and Yoga's defer-stream plugin
// would add them). Declared in the schema itself so that `schema.graphql` shows what introspection
// shows and clients' tooling (codegen) validates documents that use them; the plugin finds them present
// and adds nothing. The executor reads their arguments by name.

const ifArgument = (description: string) => ({ type: new GraphQLNonNull(GraphQLBoolean), description, defaultValue: true });

const deferDirective = new GraphQLDirective({
  name: 'defer',
  description: 'Directs the executor to defer this fragment when the `if` argument is true or undefined.',
  locations: [DirectiveLocation.FRAGMENT_SPREAD, DirectiveLocation.INLINE_FRAGMENT],
  args: { if: ifArgument('Deferred when true or undefined.'), label: { type: GraphQLString, description: 'Unique name' } },
});

const streamDirective = new GraphQLDirective({
  name: 'stream',
  description: 'Directs the executor to stream plural fields when the `if` argument is true or undefined.',
  locations: [DirectiveLocation.FIELD],
  args: {
    if: ifArgument('Stream when true or undefined.'),
    label: { type: GraphQLString, description: 'Unique name' },
    initialCount: { type: GraphQLInt, description: 'Number of items to return immediately', defaultValue: 0 },
  },
});

/** The schema's directives: GraphQL's own, @defer and @stream. */
export const schemaDirectives = [...specifiedDirectives, deferDirective, streamDirective];
