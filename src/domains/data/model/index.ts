// The data domain's model: data points as the provider sends them, exact JSON, subject identifiers,
// the SQL of the data tables, and the secret box sealing outbound secrets. Imports no other data subsystem.
export * from './points.js';
export * from './exact-json.js';
export * from './subject-identifier.js';
export * from './data.repository.js';
export { SecretBox } from './secret-box.js';
