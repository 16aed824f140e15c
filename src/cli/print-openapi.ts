import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../core/config.js';
import { openApiDocument } from '../http/openapi/openapi.js';
import { routes } from '../app/routes.js';

// Writes the document GET /openapi.json serves (PUBLIC_URL as its server) to the file named by the argument
// (default dist/openapi.json), for `npm run lint:openapi`.
const file = process.argv[2] ?? 'dist/openapi.json';
mkdirSync(path.dirname(file), { recursive: true });
writeFileSync(file, `${JSON.stringify(openApiDocument(routes, loadConfig().publicUrl), null, 2)}\n`);
