import { lexicographicSortSchema, printSchema } from 'graphql';
import { builder } from '../graphql/builder.js';
import { schemaDirectives } from '../graphql/directives.js';
import { sliceEdgeNodes } from '../graphql/slices.js';
import '../graphql/scalars.js';
import '../graphql/connections.js';
// Importing a domain's door registers its GraphQL types.
import '../domains/custom-field/index.js';
import '../domains/structural-entity/index.js';
import '../domains/subject/index.js';
import '../domains/data/index.js';
import '../domains/portal/index.js';
import '../domains/user/index.js';

/** The executable schema, built once from every domain's types. */
export const schema = sliceEdgeNodes(builder.toSchema({ sortSchema: true, directives: schemaDirectives }));

/** `schema.graphql` as checked in: the sorted SDL. */
export function printedSchema(): string {
  return `${printSchema(lexicographicSortSchema(schema))}\n`;
}
