/** setTimeout's longest delay: a later instant is reached by re-arming. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `fn` at the instant `at` (ms since the epoch), however far off; the timer never keeps the process
 * alive. Returns what cancels it.
 */
export function atInstant(at: number, fn: () => void): () => void {
  let timer: NodeJS.Timeout;
  const arm = () => {
    timer = setTimeout(() => (Date.now() < at ? arm() : fn()), Math.max(0, Math.min(at - Date.now(), MAX_TIMER_MS)));
    timer.unref();
  };
  arm();
  return () => clearTimeout(timer);
}
