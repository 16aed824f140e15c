import {
  type ASTNode,
  type DirectiveNode,
  DirectiveLocation,
  GraphQLBoolean,
  GraphQLDirective,
  GraphQLError,
  GraphQLInt,
  GraphQLNonNull,
  GraphQLString,
  Kind,
  OperationTypeNode,
  type ValidationContext,
  type ValidationRule,
  type ValueNode,
  getOperationAST,
  specifiedDirectives,
  valueFromASTUntyped,
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

// The rules of their use that the executor would otherwise enforce by failing (a masked internal error,
// P93) or not at all (an incremental directive in a subscription opened a stream): request
// errors at validation. What a literal says is checked once per document (incrementalDeliveryRule); what
// a variable says, per request with its values (incrementalDeliveryVariablesRule).

type Value = { kind: 'literal'; node: ValueNode } | { kind: 'variable'; name: string };

function argumentOf(node: DirectiveNode, name: string): Value | undefined {
  const arg = node.arguments?.find((a) => a.name.value === name);
  if (!arg) return undefined;
  return arg.value.kind === Kind.VARIABLE ? { kind: 'variable', name: arg.value.name.value } : { kind: 'literal', node: arg.value };
}

/** What is wrong with an initialCount value, if anything (null: the executor's "must be a positive integer"). */
function initialCountProblem(value: unknown): string | undefined {
  if (value === null) return "@stream's initialCount must be a non-negative integer, not null (leave it out for 0).";
  if (typeof value === 'number' && value < 0) return `@stream's initialCount must be a non-negative integer, not ${value}.`;
  return undefined;
}

function notInSubscription(directive: string): string {
  const name = directive === 'defer' ? 'Defer' : 'Stream';
  // graphql-js 17's DeferStreamDirectiveOnValidOperationsRule's words: a subscription's events are sent whole.
  return `${name} directive not supported on subscription operations. Disable \`@${directive}\` by setting the \`if\` argument to \`false\`.`;
}

/** The fragments each subscription of a document uses (its directives are a subscription's wherever they are written). */
function subscriptionFragments(context: ValidationContext): Set<string> {
  const names = new Set<string>();
  for (const d of context.getDocument().definitions) {
    if (d.kind !== Kind.OPERATION_DEFINITION || d.operation !== OperationTypeNode.SUBSCRIPTION) continue;
    for (const f of context.getRecursivelyReferencedFragments(d)) names.add(f.name.value);
  }
  return names;
}

function inSubscription(ancestors: readonly (ASTNode | readonly ASTNode[])[], fragments: ReadonlySet<string>): boolean {
  const definition = ancestors[2];
  if (!definition || Array.isArray(definition)) return false;
  const d = definition as ASTNode;
  if (d.kind === Kind.OPERATION_DEFINITION) return d.operation === OperationTypeNode.SUBSCRIPTION;
  return d.kind === Kind.FRAGMENT_DEFINITION && fragments.has(d.name.value);
}

/**
 * The literals of @defer and @stream: an initialCount that is negative or null, and either directive in a
 * subscription unless `if` is `false` or a variable (then incrementalDeliveryVariablesRule decides).
 */
export const incrementalDeliveryRule: ValidationRule = (context) => {
  let fragments: Set<string> | undefined;
  return {
    Directive(node, _key, _parent, _path, ancestors) {
      const name = node.name.value;
      if (name !== 'defer' && name !== 'stream') return;
      const count = name === 'stream' ? argumentOf(node, 'initialCount') : undefined;
      if (count?.kind === 'literal') {
        const problem = initialCountProblem(valueFromASTUntyped(count.node));
        if (problem) context.reportError(new GraphQLError(problem, { nodes: count.node }));
      }
      fragments ??= subscriptionFragments(context);
      const on = argumentOf(node, 'if');
      const disabled = on?.kind === 'variable' || (on?.kind === 'literal' && on.node.kind === Kind.BOOLEAN && !on.node.value);
      if (!disabled && inSubscription(ancestors, fragments))
        context.reportError(new GraphQLError(notInSubscription(name), { nodes: node }));
    },
  };
};

/**
 * The same rules for arguments given as variables, with this request's values (a variable left out takes
 * its declared default, else the argument's own: `if` true, initialCount 0); only the operation that runs.
 */
export function incrementalDeliveryVariablesRule(variables: Record<string, unknown>, operationName: string | null): ValidationRule {
  return (context) => {
    const operation = getOperationAST(context.getDocument(), operationName);
    if (!operation) return {};
    const defaults = new Map<string, unknown>();
    for (const v of operation.variableDefinitions ?? [])
      if (v.defaultValue) defaults.set(v.variable.name.value, valueFromASTUntyped(v.defaultValue));
    const valueOf = (name: string, otherwise: unknown) =>
      Object.hasOwn(variables, name) ? variables[name] : defaults.has(name) ? defaults.get(name) : otherwise;
    const used = new Set(context.getRecursivelyReferencedFragments(operation).map((f) => f.name.value));
    const subscription = operation.operation === OperationTypeNode.SUBSCRIPTION;
    return {
      OperationDefinition: (node) => (node === operation ? undefined : false),
      FragmentDefinition: (node) => (used.has(node.name.value) ? undefined : false),
      Directive(node) {
        const name = node.name.value;
        if (name !== 'defer' && name !== 'stream') return;
        const count = name === 'stream' ? argumentOf(node, 'initialCount') : undefined;
        if (count?.kind === 'variable') {
          const problem = initialCountProblem(valueOf(count.name, 0));
          if (problem) context.reportError(new GraphQLError(`Variable $${count.name}: ${problem}`, { nodes: node }));
        }
        const on = argumentOf(node, 'if');
        if (subscription && on?.kind === 'variable' && valueOf(on.name, true) !== false)
          context.reportError(new GraphQLError(notInSubscription(name), { nodes: node }));
      },
    };
  };
}
