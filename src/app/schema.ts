import { lexicographicSortSchema, printSchema } from 'graphql';
import { builder } from '../graphql/builder.js';
import { schemaDirectives } from '../graphql/directives.js';
import { sliceEdgeNodes } from '../graphql/slices.js';
import '../graphql/scalars.js';
import '../graphql/connections.js';
import '../domains/custom-field/custom-field.schema.js';
import '../domains/structural-entity/structural-entity.schema.js';
import '../domains/subject/subject.schema.js';
import '../domains/data/index.js';
import '../domains/portal/portal.schema.js';
import '../domains/user/user.schema.js';

/** The executable schema, built once from every domain's types. */
export const schema = sliceEdgeNodes(builder.toSchema({ sortSchema: true, directives: schemaDirectives }));

/** `schema.graphql` as checked in: the sorted SDL. */
export function printedSchema(): string {
  return `${printSchema(lexicographicSortSchema(schema))}\n`;
}
