declare module 'pg/lib/utils.js' {
  /** How `pg` turns a query parameter into its text (or bytes) on the wire; null for null and undefined. */
  export function prepareValue(value: unknown): string | Buffer | null;
}
