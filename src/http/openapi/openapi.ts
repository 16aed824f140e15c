import { z } from 'zod';
import { PERMISSIONS } from '../../core/permissions.js';

import { unwrap } from '../../core/input.js';
import type { RouteDef } from '../rest/route.js';
import { documentedType, problemExample } from './documented.js';

type JsonSchema = Record<string, unknown>;

const FieldErrorsSchema = z
  .record(z.string(), z.array(z.string()))
  .meta({ description: "Each offending location, as sent in the contract's casing (`$` for the body itself), with its messages." });

const problemShape = {
  type: z.string().meta({ description: 'A URI reference naming the problem type (the RFC 9110 section of the status).' }),
  title: z.string().meta({ description: "The status's reason phrase." }),
  status: z.int().min(400).max(599).meta({ description: 'The HTTP status.' }),
  detail: z.string().optional().meta({ description: 'What went wrong, for a human.' }),
  traceId: z.string().meta({ description: 'The request id (also in the X-Request-Id answer header), to find the request in the logs.' }),
  otelTraceId: z
    .string()
    .optional()
    .meta({ description: "The request's OpenTelemetry trace id, when the service exports traces: to find its trace." }),
};

/** RFC 9457 problem details, as every error leaves the service (D5). */
export const ProblemDetailsSchema = z
  .looseObject(problemShape)
  .meta({ id: 'ProblemDetails', description: 'RFC 9457 problem details (application/problem+json).' });

/** A 400 answer: problem details with the offending locations (ASP.NET's ValidationProblemDetails). */
export const ValidationProblemDetailsSchema = z
  .looseObject({
    ...problemShape,
    errors: FieldErrorsSchema.optional().meta({
      description: 'The offending locations with their messages; absent only when the body is not JSON at all.',
    }),
  })
  .meta({ id: 'ValidationProblemDetails', description: 'RFC 9457 problem details of a 400 answer, naming each offending location (D5).' });

/** Every tag an operation uses, with its description. */
const TAGS: Record<string, string> = {
  Subjects:
    "Subjects (D7): list with paging, search and filters, get by id, upsert by the tenant's matching fields, update, and the structural entities a subject is located at.",
  'Subject portal':
    'The subject portal (D9): invite the subject itself (self access) or third parties by e-mail, list and remove its portal users.',
  'Structural entities': "The tenant's organisation tree (D8): list with paging and filters, get by key, upsert.",
  Users: "The tenant's users (D9), e.g. those with access to a subject.",
  'Data sets': "Data extracts served from the tenant's data providers (D10).",
  'Data change (data providers)':
    "Called by a data provider (an inbound client of one of the tenant's data sources) when a subject's data changed: the matching cached entries are flagged and re-fetched.",
};

// Problem examples: what the service answers (src/http/errors.ts `problem`), with one request id.
const WWW_AUTHENTICATE_401 = {
  description:
    'The Bearer challenge (RFC 6750): `Bearer` without a token, with `error="invalid_token"` and a description for a token that is not valid.',
  schema: { type: 'string' },
  example: 'Bearer error="invalid_token", error_description="The access token is malformed."',
};
const wwwAuthenticate403 = (scopes: readonly string[]) => ({
  description: 'Present when the token lacks the scope: `Bearer error="insufficient_scope"` with the scope(s) accepted.',
  schema: { type: 'string' },
  example: `Bearer error="insufficient_scope", scope="${scopes.join(' ')}"`,
});

/**
 * The named component schemas: zod's own conversion extracts every schema carrying `.meta({ id })` into
 * `$defs`; they move to `components.schemas` and every reference follows them there.
 */
class Components {
  readonly schemas: Record<string, JsonSchema> = {};

  convert(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
    const converted = z.toJSONSchema(schema, {
      io,
      unrepresentable: 'any',
      reused: 'inline',
      // A nested schema bound loosely but documented typed (`documentedAs`, e.g. a sent custom field value)
      // shows its documented type; its named parts become components like any other.
      override: (ctx) => {
        const documented = documentedType(ctx.zodSchema as unknown as z.ZodType);
        if (documented === (ctx.zodSchema as unknown)) return;
        for (const key of Object.keys(ctx.jsonSchema)) delete (ctx.jsonSchema as Record<string, unknown>)[key];
        Object.assign(ctx.jsonSchema, this.convert(documented, io));
      },
    }) as JsonSchema & {
      $defs?: Record<string, JsonSchema>;
    };
    const { $schema: _, $defs, ...root } = converted;
    for (const [id, def] of Object.entries($defs ?? {})) {
      const component = componentRefs(def);
      const known = this.schemas[id];
      // One name, one schema: two schemas with one id, or a named schema used as input and as output where
      // the two differ, would make the document lie about one of them.
      if (known !== undefined && JSON.stringify(known) !== JSON.stringify(component)) {
        throw new Error(`OpenAPI: the component schema ${id} has two different definitions (${io} conversion).`);
      }
      this.schemas[id] = component;
    }
    return componentRefs(root);
  }
}

function componentRefs<T>(value: T): T {
  if (Array.isArray(value)) return value.map(componentRefs) as T;
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      k === '$ref' && typeof v === 'string' ? v.replace(/^#\/\$defs\//, '#/components/schemas/') : componentRefs(v),
    ]),
  ) as T;
}

const statusOrder = (a: [string, unknown], b: [string, unknown]) => Number(a[0]) - Number(b[0]);

/**
 * OpenAPI 3.1 for the REST contract, generated from the route table (the same zod schemas that bind
 * requests; a query parameter bound from text is shown as the contract's type, see `documentedAs`), with
 * the OAuth 2.0 client-credentials scheme and bearer tokens.
 */
export function openApiDocument(routes: readonly RouteDef[], baseUrl: string) {
  const components = new Components();
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const path = r.path.replace(/:(\w+)/g, '{$1}');
    const parameters: unknown[] = [];
    const shapeOf = (s: z.ZodType | undefined) => (s && (unwrap(s) as unknown as { shape?: Record<string, z.ZodType> }).shape) ?? {};
    const parameter = (name: string, at: 'path' | 'query', s: z.ZodType) => {
      const documented = documentedType(s);
      const { description, examples, ...schema } = components.convert(documented, 'input');
      return {
        name,
        in: at,
        required: at === 'path' || !documented.safeParse(undefined).success,
        ...(typeof description === 'string' ? { description } : {}),
        schema,
        ...(schema['type'] === 'array' ? { style: 'form', explode: true } : {}),
        ...(Array.isArray(examples) && examples.length > 0 ? { example: examples[0] } : {}),
      };
    };
    for (const [name, s] of Object.entries(shapeOf(r.params))) parameters.push(parameter(name, 'path', s));
    for (const [name, s] of Object.entries(shapeOf(r.query))) parameters.push(parameter(name, 'query', s));

    const scopes = r.scopes ?? ['ServiceApi'];
    const responses: Record<string, unknown> = {};
    for (const [status, res] of Object.entries(r.responses).sort(statusOrder)) {
      if (Number(status) >= 400) continue;
      responses[status] = {
        description: res.description,
        ...(res.schema
          ? {
              content: {
                'application/json': {
                  schema: components.convert(res.schema, 'output'),
                  ...(res.example !== undefined ? { example: res.example } : {}),
                },
              },
            }
          : {}),
      };
    }
    for (const [status, res] of Object.entries(problemAnswers(r)).sort(statusOrder)) {
      responses[status] = {
        description: res.description,
        ...(status === '401' ? { headers: { 'WWW-Authenticate': WWW_AUTHENTICATE_401 } } : {}),
        ...(status === '403' ? { headers: { 'WWW-Authenticate': wwwAuthenticate403(scopes) } } : {}),
        content: {
          'application/problem+json': {
            schema: components.convert(status === '400' ? ValidationProblemDetailsSchema : ProblemDetailsSchema, 'output'),
            example: res.example,
          },
        },
      };
    }

    (paths[path] ??= {})[r.method] = {
      operationId: r.operationId,
      summary: r.summary,
      description: `${r.description ? `${r.description}\n\n` : ''}Requires the permission ${r.permissions}.`,
      tags: [r.tag],
      // The scopes are OAuth 2.0's; a bearer requirement lists none (OpenAPI 3.0's rule, which Spectral keeps).
      security: [...scopes.map((s) => ({ oauth2: [s] })), { bearer: [] }],
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(r.body
        ? {
            requestBody: {
              required: r.body.required,
              content: {
                'application/json': {
                  schema: components.convert(r.body.schema, 'input'),
                  ...(r.body.example !== undefined ? { example: r.body.example } : {}),
                },
              },
            },
          }
        : {}),
      responses,
    };
  }

  const tags = [...new Set(routes.map((r) => r.tag))].map((name) => {
    const description = TAGS[name];
    if (!description) throw new Error(`OpenAPI: the tag '${name}' has no description.`);
    return { name, description };
  });
  const schemas = Object.fromEntries(Object.entries(components.schemas).sort(([a], [b]) => a.localeCompare(b)));
  return {
    openapi: '3.1.0',
    info: {
      title: 'Subject and Structured Data Integration Interface',
      version: '1.0.0',
      description:
        'REST integration API. Get an access token from `/connect/token` (OAuth 2.0 client credentials, with `tenant_key`), ' +
        'then send it as `Authorization: Bearer <token>`. Property and parameter names are matched case-insensitively; ' +
        `errors are RFC 9457 problem details. Permissions: ${PERMISSIONS.join(', ')}.`,
      // Whoever runs a deployment answers for it: the contact is the deployment itself.
      contact: { name: 'The operator of this deployment', url: baseUrl },
      // As LICENSE and package.json.
      license: { name: 'MIT', identifier: 'MIT' },
    },
    servers: [{ url: baseUrl }],
    tags,
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
        bearer: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description: "An access token from /connect/token, carrying a scope the operation's oauth2 requirement names.",
        },
      },
      schemas,
    },
  };
}

/** The problem+json answers of a route: the service's own (as they apply) and the route's documented ones. */
function problemAnswers(r: RouteDef): Record<string, { description: string; example: unknown }> {
  const answers: Record<string, { description: string; example: unknown }> = {};
  if (r.query || r.body) {
    const firstQuery = Object.keys((unwrap(r.query ?? z.object({})) as unknown as { shape?: Record<string, unknown> }).shape ?? {})[0];
    answers[400] = {
      description: 'The request is invalid; `errors` names each offending location.',
      example:
        r.body || !firstQuery
          ? problemExample(400, 'The request body is not valid JSON.')
          : problemExample(400, 'One or more validation errors occurred.', {
              [firstQuery]: ['Must not contain the NUL character (U+0000).'],
            }),
    };
  }
  answers[401] = { description: 'The access token is missing or not valid.', example: problemExample(401, 'An access token is required.') };
  const permission = /\b\w+:\w+/.exec(r.permissions)?.[0];
  answers[403] = {
    description: 'The token lacks the scope, or the client the permission.',
    example: problemExample(
      403,
      permission
        ? `The client lacks the permission ${permission}.`
        : `The access token lacks the scope ${(r.scopes ?? ['ServiceApi']).join(' or ')}.`,
    ),
  };
  if (r.body) {
    answers[413] = {
      description: 'The body is larger than the limit (MAX_BODY_BYTES).',
      example: problemExample(413, 'The request body is larger than 1048576 bytes.'),
    };
    answers[415] = {
      description: 'The body is not application/json.',
      example: problemExample(415, 'The request body must be application/json.'),
    };
  }
  answers[500] = {
    description: 'An unexpected error (logged under the traceId).',
    example: problemExample(500, 'An unexpected error occurred.'),
  };
  for (const [status, res] of Object.entries(r.responses)) {
    if (Number(status) < 400) continue;
    answers[status] = {
      description: res.description,
      example: res.example ?? answers[status]?.example ?? problemExample(Number(status), res.description),
    };
  }
  return answers;
}
