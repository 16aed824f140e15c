// Live updates: the `changes` subscription over SSE; every change re-sends the chart's and the list's
// queries, and the status line says what changed.
import { byId } from '../shared/dom.js';
import { loadChart } from './chart.js';
import { type GraphQLError, gqlStream } from './graphql.js';
import { type Change, type ChangesData, DASHBOARD_QUERIES as Q } from './queries.js';
import { loadSubjects } from './subjects.js';
import { clearFailure, clock, fail, setLive, settings, state } from './state.js';

const live = byId('dash-live');

/** Loads the chart and the list; a call while loading runs them once more after. */
export function refresh(): Promise<void> {
  if (state.refreshing) {
    state.again = true;
    return state.refreshing;
  }
  state.refreshing = (async () => {
    do {
      state.again = false;
      clearFailure();
      const s = settings();
      await Promise.all([loadChart(s).catch((e: unknown) => fail('Chart', e)), loadSubjects(s).catch((e: unknown) => fail('Subjects', e))]);
    } while (state.again);
  })().finally(() => {
    state.refreshing = null;
  });
  return state.refreshing;
}

/** (Re)opens the subscription for the pickers' extract and entity; reconnects after 2 s when it ends. */
export function subscribe(): void {
  state.stream?.abort();
  const ctl = new AbortController();
  state.stream = ctl;
  const s = settings();
  let lastError: GraphQLError | null = null;
  setLive('connecting', 'Live updates: connecting…');
  const ended = (e: unknown) => {
    if (ctl.signal.aborted) return;
    if (lastError?.extensions?.code === 'UNAUTHENTICATED' || (state.token?.expiresAt ?? 0) <= Date.now()) {
      setLive('error', 'Live updates ended: the token expired. Get a new one.');
      return;
    }
    const why = lastError ? lastError.message : e ? (e instanceof Error && e.message) || String(e) : 'the stream ended';
    setLive('error', `Live updates: disconnected (${why}); reconnecting…`);
    setTimeout(() => {
      if (ctl.signal.aborted) return;
      subscribe();
      void refresh(); // what changed meanwhile
    }, 2000);
  };
  void gqlStream<ChangesData>(
    Q.changes,
    { extract: s.extract, entity: s.entity },
    {
      signal: ctl.signal,
      onOpen: () => setLive('open', `Live updates: listening since ${clock()}.`),
      onResult: (r) => {
        if (r.errors?.length) lastError = r.errors[0] ?? null;
        const change = r.data?.dataPointsChanged;
        if (change) void onChange(change);
      },
    },
  ).then(() => ended(null), ended);
}

async function onChange(change: Change): Promise<void> {
  state.lastChange = change;
  await refresh();
  const names = new Map(
    [...document.querySelectorAll<HTMLTableRowElement>('#dash-subjects tbody tr')].map((tr) => [
      tr.dataset['subjectId'],
      tr.dataset['subject'],
    ]),
  );
  const who = change.subjectIds.length ? change.subjectIds.map((id) => names.get(id) || id).join(', ') : 'every subject';
  live.dataset['updated'] = new Date().toISOString();
  setLive(
    'open',
    `Updated at ${clock()}: ${change.kind.toLowerCase()} ${change.extractKey} for ${who} (reported ${clock(new Date(change.at))}).`,
  );
  live.classList.add('dash-flash');
  setTimeout(() => live.classList.remove('dash-flash'), 1500);
}
