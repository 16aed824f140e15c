import type { Located } from '../cache/index.js';

/** While a cold aggregate's sets arrive, a partial answer starts at most this often (the first as soon as it may). */
export const PARTIAL_ANSWER_EVERY_MS = 1_000;

/**
 * Partial answers of one aggregate while its sets arrive (P131): follows DataCache.locate's `onProgress`
 * (first told once the provider's first chunk arrived) and computes an answer over what is located so
 * far, the first at once, the next only once the previous one ended, at most every PARTIAL_ANSWER_EVERY_MS
 * and at least as long after it as it took (partial answers take at most half the fill's time). None
 * starts while nothing new is located, nor while at most `batchSize` subjects are missing (one provider
 * call from the full answer: a question mostly cached gets only the full one); after `end` (the fill is
 * over: the full answer is next) none starts and none is delivered, so a partial answer never follows the
 * full one. A partial computation's failure is the full one's to report: `failed` only hears it.
 */
export function partialAnswers<A>(
  subjectCount: number,
  batchSize: number,
  compute: (located: ReadonlyMap<string, Located>) => Promise<A>,
  deliver: (answer: A) => void,
  failed: (err: unknown) => void,
): { progress: (located: ReadonlyMap<string, Located>) => void; end: () => void } {
  let latest: ReadonlyMap<string, Located> | undefined;
  /** How many subjects the last partial answer covered (none before the first: 0 is nothing to answer). */
  let computedSize = 0;
  let running = false;
  let over = false;
  let notBefore = 0;
  let timer: NodeJS.Timeout | undefined;
  const next = (): void => {
    timer = undefined;
    if (over || running || !latest || subjectCount - latest.size <= batchSize || latest.size === computedSize) return;
    const wait = notBefore - Date.now();
    if (wait > 0) {
      timer = setTimeout(next, wait);
      timer.unref();
      return;
    }
    running = true;
    const started = Date.now();
    const located = new Map(latest);
    computedSize = located.size;
    void compute(located)
      .then((answer) => !over && deliver(answer))
      .catch(failed)
      .finally(() => {
        running = false;
        const ended = Date.now();
        notBefore = Math.max(started + PARTIAL_ANSWER_EVERY_MS, ended + (ended - started));
        next();
      });
  };
  return {
    progress: (located) => {
      latest = located;
      if (!timer) next();
    },
    end: () => {
      over = true;
      clearTimeout(timer);
    },
  };
}
