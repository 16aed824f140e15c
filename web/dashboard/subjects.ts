// The entity's subjects and their latest values (@defer: the list first, the provider's data after); a
// value a live change replaced is shown beside the new one. A row opens the subject's own series.
import { byId } from '../shared/dom.js';
import { formatValue, valueItem } from './format.js';
import { type Result, gqlStream, merge } from './graphql.js';
import { DASHBOARD_QUERIES as Q, type Subject, type SubjectsData } from './queries.js';
import { openSeries } from './series.js';
import { type Settings, clampRange, fail, settings, state } from './state.js';

const table = byId<HTMLTableElement>('dash-subjects');

/** Opens the subject of the row (clicked, or Enter on it). */
function pick(event: Event): void {
  const tr = (event.target as HTMLElement).closest('tr');
  if (!tr?.dataset['subjectId']) return;
  for (const row of table.tBodies[0]!.rows) row.classList.toggle('dash-picked', row === tr);
  void openSeries({ id: tr.dataset['subjectId'], label: tr.dataset['label'] || tr.dataset['subject'] || '' }, settings());
}
table.tBodies[0]?.addEventListener('click', pick);
table.tBodies[0]?.addEventListener('keydown', (event) => {
  if (event.key === 'Enter') pick(event);
});

export async function loadSubjects(s: Settings): Promise<void> {
  const result: Result<SubjectsData> = { data: null, errors: [] };
  await gqlStream<SubjectsData>(
    Q.subjects,
    { entity: s.entity, extract: s.extract, timeItem: s.timeItem },
    {
      onResult: (part) => {
        if (part.incremental) merge(result, part);
        else {
          result.data = part.data;
          result.errors = part.errors ?? [];
        }
        renderSubjects(result.data, s);
      },
    },
  );
  if (result.errors?.length) fail('Subjects', result.errors[0]);
  const edges = result.data?.subjects?.edges ?? [];
  const day = (c: { edges: { node: { items: { key: string; valueText: string | null }[] } }[] } | null | undefined) =>
    c?.edges[0]?.node.items.find((i) => i.key === s.timeItem)?.valueText?.slice(0, 10);
  clampRange(
    extreme(
      edges.map(({ node }) => day(node.earliest)),
      'first',
    ),
    extreme(
      edges.map(({ node }) => day(node.dataPoints)),
      'last',
    ),
  );
}

/** The first or last of some dates (yyyy-MM-dd), if any: the extent of the data shown (the first 100 subjects'). */
function extreme(dates: (string | undefined)[], which: 'first' | 'last'): string | null {
  const valid = dates.filter((d): d is string => !!d && /^\d{4}-\d\d-\d\d$/.test(d));
  return valid.length ? valid.reduce((a, b) => ((which === 'first' ? a < b : a > b) ? a : b)) : null;
}

/** The subject's latest value and time; value `undefined` while its deferred part has not arrived. */
function latestOf(node: Subject, s: Settings): { value: string | null | undefined; time: string | null } {
  const edge = node.dataPoints?.edges[0];
  if (!edge) return { value: node.dataPoints === undefined ? undefined : null, time: null };
  const item = (key: string) => edge.node.items.find((i) => i.key === key)?.valueText ?? null;
  return { value: item(s.valueItem), time: item(s.timeItem) };
}

function renderSubjects(data: SubjectsData | null | undefined, s: Settings): void {
  const { unit } = valueItem(s);
  const total = data?.subjects?.totalCount ?? 0;
  const shown = data?.subjects?.edges.length ?? 0;
  byId('dash-subjects-caption').textContent =
    total === 0 ? 'No subjects here' : shown < total ? `Subjects: the first ${shown} of ${total}` : `Subjects: ${total}`;
  const rows = (data?.subjects?.edges ?? []).map(({ node }) => {
    const field = (key: string) => {
      const v = node.customFieldValues.find((c) => c.field.key === key);
      return v?.values.length ? v.values.map((x) => x.valueText).join(', ') : '';
    };
    const place = node.structuralEntities.edges[0];
    const latest = latestOf(node, s);
    const tr = document.createElement('tr');
    tr.dataset['subject'] = node.externalId || node.subjectId;
    tr.dataset['subjectId'] = node.subjectId;
    tr.dataset['label'] = [node.externalId, field('fullName')].filter(Boolean).join(' ');
    tr.tabIndex = 0;
    if (state.subject?.id === node.subjectId) tr.classList.add('dash-picked');
    const cell = (text: string, cls?: string) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (cls) td.className = cls;
      tr.append(td);
      return td;
    };
    cell(node.externalId || node.subjectId);
    cell(field('fullName') || field('name') || field('displayName'));
    cell(place ? place.node.displayName : '');
    const known = state.latest.get(node.subjectId);
    if (latest.value === undefined) {
      // Not here yet (deferred): the value shown before, greyed.
      cell(known === undefined ? '…' : formatValue(known, unit), 'num dash-latest dash-pending');
      cell('');
    } else {
      if (known !== undefined && known !== latest.value) state.was.set(node.subjectId, known);
      state.latest.set(node.subjectId, latest.value);
      const td = cell(formatValue(latest.value, unit), 'num dash-latest');
      if (state.was.has(node.subjectId)) {
        tr.classList.add('dash-changed');
        const was = document.createElement('span');
        was.className = 'dash-was';
        was.textContent = `was ${formatValue(state.was.get(node.subjectId), unit)}`;
        td.append(was);
      }
      cell(latest.time ?? '', 'dash-time');
    }
    return tr;
  });
  table.tBodies[0]?.replaceChildren(...rows);
}
