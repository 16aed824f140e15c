import { writeFileSync } from 'node:fs';
import { printedSchema } from '../app/schema.js';

// `npm run schema`: rewrites schema.graphql from the Pothos schema (a test fails when it drifts).
writeFileSync(new URL('../../schema.graphql', import.meta.url), printedSchema());
console.log('schema.graphql written');
