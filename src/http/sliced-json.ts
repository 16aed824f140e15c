import { setImmediate as nextTurn } from 'node:timers/promises';

/** After this long, a turn of serialising lets the event loop serve others; checked after each run, so turns last about 2 ms (P73). */
const TURN_MS = 1.5;
/** An array this long is serialised in runs of RUN items (a run of a large page's edges takes about a millisecond). */
const LONG = 8;
const RUN = 32;

/**
 * `JSON.stringify(value)`, the same text, produced over as many turns of the event loop as it needs at
 * about TURN_MS each (P65, P73): a response of a megabyte takes several milliseconds to serialise, and other
 * requests wait for no longer than a turn. Objects and arrays are walked down to the first long array
 * (LONG items or more), whose items are serialised by `JSON.stringify` RUN at a time; anything that is
 * not a plain object or array (a Date, an object with `toJSON`) is left to `JSON.stringify` whole too.
 */
export async function slicedJson(value: unknown): Promise<string> {
  const out: string[] = [];
  const clock = { since: performance.now() };
  const parts = write(value, out, clock);
  while (!parts.next().done) {
    await nextTurn();
    clock.since = performance.now();
  }
  return out.join('');
}

type Container = Record<string, unknown> | unknown[];

function isContainer(v: unknown): v is Container {
  if (v === null || typeof v !== 'object' || typeof (v as { toJSON?: unknown }).toJSON === 'function') return false;
  if (Array.isArray(v)) return true;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Writes `v` to `out`, yielding whenever the turn has run TURN_MS. */
function* write(v: unknown, out: string[], clock: { since: number }): Generator<undefined, void> {
  if (!isContainer(v)) {
    // Top level: JSON.stringify(undefined) is undefined; the caller's body is then empty, as before.
    const text = JSON.stringify(v);
    if (text !== undefined) out.push(text);
    return;
  }
  if (Array.isArray(v)) {
    out.push('[');
    if (v.length >= LONG) {
      // Runs of items serialised by one JSON.stringify each, without their brackets.
      for (let i = 0; i < v.length; i += RUN) {
        const run = JSON.stringify(v.slice(i, i + RUN));
        out.push(i > 0 ? ',' : '', run.slice(1, -1));
        if (performance.now() - clock.since > TURN_MS) yield;
      }
    } else {
      for (let i = 0; i < v.length; i++) {
        if (i > 0) out.push(',');
        const item: unknown = v[i];
        // In an array, what JSON cannot represent (undefined, a function, a symbol) is null.
        if (!isContainer(item)) out.push(JSON.stringify(item) ?? 'null');
        else yield* write(item, out, clock);
        if (performance.now() - clock.since > TURN_MS) yield;
      }
    }
    out.push(']');
    return;
  }
  out.push('{');
  let first = true;
  for (const key of Object.keys(v)) {
    const item = v[key];
    if (isContainer(item)) {
      out.push(first ? '' : ',', JSON.stringify(key), ':');
      yield* write(item, out, clock);
    } else {
      // In an object, a member JSON cannot represent is left out.
      const text = JSON.stringify(item);
      if (text === undefined) continue;
      out.push(first ? '' : ',', JSON.stringify(key), ':', text);
    }
    first = false;
  }
  out.push('}');
}
