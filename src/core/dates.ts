/** A real calendar date from year 1 (PostgreSQL has no year 0); setUTCFullYear keeps years below 100. */
export function validDate(y: number, m: number, d: number): boolean {
  if (y < 1) return false;
  const date = new Date(0);
  date.setUTCFullYear(y, m - 1, d);
  return date.getUTCFullYear() === y && date.getUTCMonth() === m - 1 && date.getUTCDate() === d;
}
