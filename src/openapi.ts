import { z } from 'zod';
import { PERMISSIONS } from './domains/auth/permissions.js';
import { type RouteDef, unwrap } from './rest.js';

type JsonSchema = Record<string, unknown>;

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any', reused: 'inline' }) as JsonSchema;
  return rest;
}

const problemRef = { $ref: '#/components/schemas/ProblemDetails' };
const ERRORS: Record<number, string> = {
  400: 'The request is invalid; `errors` names each offending location.',
  401: 'The access token is missing or invalid.',
  403: 'The token lacks the scope, or the client the permission.',
  404: 'Not found (also for another tenant\'s resources).',
};

/**
 * OpenAPI 3.1 for the REST contract, generated from the route table (the same zod schemas that bind
 * requests), with the OAuth 2.0 client-credentials scheme.
 */
export function openApiDocument(routes: readonly RouteDef[], baseUrl: string) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const path = r.path.replace(/:(\w+)/g, '{$1}');
    const parameters: unknown[] = [];
    const shapeOf = (s: z.ZodType | undefined) => ((s && (unwrap(s) as unknown as { shape?: Record<string, z.ZodType> }).shape) ?? {});
    for (const [name, s] of Object.entries(shapeOf(r.params))) {
      parameters.push({ name, in: 'path', required: true, schema: jsonSchema(s, 'input') });
    }
    for (const [name, s] of Object.entries(shapeOf(r.query))) {
      const { description, ...schema } = jsonSchema(s, 'input');
      parameters.push({
        name,
        in: 'query',
        required: !s.safeParse(undefined).success,
        ...(description ? { description } : {}),
        schema,
        ...(schema['type'] === 'array' ? { style: 'form', explode: true } : {}),
      });
    }
    const responses: Record<string, unknown> = {};
    for (const [status, res] of Object.entries(r.responses)) {
      responses[status] = {
        description: res.description,
        ...(res.schema ? { content: { 'application/json': { schema: jsonSchema(res.schema, 'output') } } } : {}),
      };
    }
    const errors: Record<number, string> = { ...ERRORS };
    if (r.body) Object.assign(errors, { 413: 'The body is larger than the limit.', 415: 'The body is not application/json.' });
    for (const [status, description] of Object.entries(errors)) {
      responses[status] ??= { description, content: { 'application/problem+json': { schema: problemRef } } };
    }
    const scopes = r.scopes ?? ['ServiceApi'];
    (paths[path] ??= {})[r.method] = {
      operationId: r.operationId,
      summary: r.summary,
      description: `Requires the permission ${r.permissions}.`,
      tags: [r.tag],
      security: scopes.map((s) => ({ oauth2: [s] })),
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(r.body
        ? { requestBody: { required: r.body.required, content: { 'application/json': { schema: jsonSchema(r.body.schema, 'input') } } } }
        : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Subject and Structured Data Integration Interface',
      version: '1.0.0',
      description: `REST integration API. Permissions: ${PERMISSIONS.join(', ')}.`,
    },
    servers: [{ url: baseUrl }],
    tags: [...new Set(routes.map((r) => r.tag))].map((name) => ({ name })),
    paths,
    components: {
      securitySchemes: {
        oauth2: {
          type: 'oauth2',
          description: 'Client credentials; the token request also carries tenant_key.',
          flows: {
            clientCredentials: {
              tokenUrl: `${baseUrl}/connect/token`,
              scopes: {
                ServiceApi: 'The integration API (subjects, structural entities, users, data sets) and GraphQL.',
                ServiceDataProviderApi: 'The data-change endpoints for data providers.',
              },
            },
          },
        },
      },
      schemas: {
        ProblemDetails: {
          type: 'object',
          required: ['type', 'title', 'status', 'traceId'],
          properties: {
            type: { type: 'string' },
            title: { type: 'string' },
            status: { type: 'integer' },
            detail: { type: 'string' },
            traceId: { type: 'string' },
            errors: { type: 'object', additionalProperties: { type: 'array', items: { type: 'string' } } },
          },
        },
      },
    },
  };
}
