import { buildPgliteTemplate } from '../db/pglite-template-build.js';

// The last step of `npm run build` (P133), best-effort: without a template `npm start` initialises the database.
await buildPgliteTemplate().then(
  (file) => console.log(`embedded database template: ${file}`),
  (e: Error) => console.warn(`embedded database template not built (npm start initialises the database instead): ${e.message}`),
);
