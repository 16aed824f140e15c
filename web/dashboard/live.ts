// Live updates, two streams over SSE: the chart follows its own question (`chart`, dataPointAggregatesChanged:
// the service pushes the recomputed aggregate, computed once for every viewer of the same question), and
// `changes` (dataPointsChanged) says whose data changed, which re-reads the subjects list and the open
// subject's series only. The status line says what changed.
import { byId } from '../shared/dom.js';
import { followChart, plotNote } from './chart.js';
import { renderCrumbs } from './drill.js';
import { type GraphQLError, gqlStream } from './graphql.js';
import { type Change, type ChangesData, DASHBOARD_QUERIES as Q } from './queries.js';
import { loadSeries } from './series.js';
import { loadSubjects } from './subjects.js';
import { clearFailure, clock, fail, rangeProblem, setLive, settings, state } from './state.js';

const live = byId('dash-live');
const RECONNECT_MS = 2000;

/** Loads the list and the open subject's series; a call while loading runs them once more after. */
export function refresh(): Promise<void> {
  if (state.refreshing) {
    state.again = true;
    return state.refreshing;
  }
  state.refreshing = (async () => {
    do {
      state.again = false;
      const s = settings();
      await Promise.all([
        loadSubjects(s).catch((e: unknown) => fail('Subjects', e)),
        rangeProblem(s) ? null : loadSeries(s).catch((e: unknown) => fail('Subject', e)),
      ]);
    } while (state.again);
  })().finally(() => {
    state.refreshing = null;
  });
  return state.refreshing;
}

const expired = (e?: GraphQLError | null) => e?.extensions?.code === 'UNAUTHENTICATED' || (state.token?.expiresAt ?? 0) <= Date.now();

/** (Re)opens the chart's stream for the pickers' question; a custom range that cannot be asked is said instead. */
export function showChart(): void {
  state.chartStream?.abort();
  const ctl = new AbortController();
  state.chartStream = ctl;
  clearFailure();
  const s = settings();
  renderCrumbs(s.entity);
  const problem = rangeProblem(s);
  if (problem) {
    fail('Range', new Error(problem));
    state.chart?.destroy();
    state.chart = null;
    state.chartKey = '';
    byId('dash-plot').replaceChildren();
    plotNote(problem, 'error');
    return;
  }
  const again = (why: string) => {
    if (ctl.signal.aborted || expired()) return;
    setLive('error', `Live chart: disconnected (${why}); reconnecting…`);
    setTimeout(() => ctl.signal.aborted || showChart(), RECONNECT_MS);
  };
  followChart(s, ctl.signal).then(
    ({ refused }) => refused || again('the stream ended'),
    (e: unknown) => again(e instanceof Error ? e.message : String(e)),
  );
}

/** (Re)opens the changes stream for the pickers' extract and entity; reconnects after 2 s when it ends. */
export function subscribe(): void {
  state.stream?.abort();
  const ctl = new AbortController();
  state.stream = ctl;
  const s = settings();
  let lastError: GraphQLError | null = null;
  setLive('connecting', 'Live updates: connecting…');
  const ended = (e: unknown) => {
    if (ctl.signal.aborted) return;
    if (expired(lastError)) {
      setLive('error', 'Live updates ended: the token expired. Get a new one.');
      return;
    }
    const why = lastError ? lastError.message : e ? (e instanceof Error && e.message) || String(e) : 'the stream ended';
    setLive('error', `Live updates: disconnected (${why}); reconnecting…`);
    setTimeout(() => {
      if (ctl.signal.aborted) return;
      subscribe();
      void refresh(); // what changed meanwhile
    }, RECONNECT_MS);
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
