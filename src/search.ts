import { type Expression, type SqlBool, sql } from 'kysely';

// The search rule of D7 (subjects) and D8 (structural entities), in one place.

/** Escapes LIKE wildcards so a search term matches literally. */
function likeContains(term: string): string {
  return `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * The term occurs case-insensitively in `text`, or `word_similarity(term, text)` is at least 0.3. Spelled
 * `term <% text` (the threshold is set to 0.3 per connection in db.ts) so a trigram GIN index answers it.
 */
export function matchesTerm(term: string, text: Expression<string | null>): Expression<SqlBool> {
  return sql<SqlBool>`(${text} ILIKE ${likeContains(term)} OR ${term} <% ${text})`;
}

/** Relevance of `text` (D7 best match first): substring matches (1 + similarity) before similar ones. */
export function matchScore(term: string, text: Expression<string | null>): Expression<number> {
  return sql<number>`(CASE WHEN ${text} ILIKE ${likeContains(term)} THEN 1 ELSE 0 END + word_similarity(${term}, ${text}))`;
}
