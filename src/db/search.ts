import { type Expression, type SqlBool, sql } from 'kysely';
import { ValidationError } from '../core/errors.js';

// The search rule of D7 (subjects) and D8 (structural entities), in one place.

/**
 * Longest search term (P22, P47): trigram matching costs grow with the term, and nobody types more. Checked
 * here, where every list's search goes through, so REST and GraphQL lists share the bound.
 */
export const MAX_SEARCH_TERM = 200;

function checkTerm(term: string): void {
  if (term.length > MAX_SEARCH_TERM) throw ValidationError.at('searchTerm', `SearchTerm must be at most ${MAX_SEARCH_TERM} characters.`);
}

/** Escapes LIKE wildcards so a search term matches literally. */
function likeContains(term: string): string {
  return `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * The term occurs case-insensitively in `text`, or `word_similarity(term, text)` is at least 0.3. Spelled
 * `term <% text` (the threshold is set to 0.3 per connection in database.ts) so a trigram GIN index answers it.
 */
export function matchesTerm(term: string, text: Expression<string | null>): Expression<SqlBool> {
  checkTerm(term);
  return sql<SqlBool>`(${text} ILIKE ${likeContains(term)} OR ${term} <% ${text})`;
}

/** Relevance of `text` (D7 best match first): substring matches (1 + similarity) before similar ones. */
export function matchScore(term: string, text: Expression<string | null>): Expression<number> {
  checkTerm(term);
  return sql<number>`(CASE WHEN ${text} ILIKE ${likeContains(term)} THEN 1 ELSE 0 END + word_similarity(${term}, ${text}))`;
}
