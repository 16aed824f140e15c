// The entity's subjects and their latest values (@defer: the list first, the provider's data after); a
// value a live change replaced is shown beside the new one.
import { byId } from '../shared/dom.js';
import { formatNumber } from './format.js';
import { type Result, gqlStream, merge } from './graphql.js';
import { DASHBOARD_QUERIES as Q, type Subject, type SubjectsData } from './queries.js';
import { type Settings, clampDays, fail, state } from './state.js';

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
  clampDays(earliestOf(result.data, s));
}

/** The earliest date of the listed subjects' data points (yyyy-MM-dd), if any: the extent of the data shown (the first 100 subjects'). */
function earliestOf(data: SubjectsData | null | undefined, s: Settings): string | null {
  const dates = (data?.subjects?.edges ?? [])
    .map(({ node }) => node.earliest?.edges[0]?.node.items.find((i) => i.key === s.timeItem)?.valueText?.slice(0, 10))
    .filter((d): d is string => !!d && /^\d{4}-\d\d-\d\d$/.test(d));
  return dates.length ? dates.reduce((a, b) => (a < b ? a : b)) : null;
}

/** The subject's latest value and time; value `undefined` while its deferred part has not arrived. */
function latestOf(node: Subject, s: Settings): { value: string | null | undefined; time: string | null } {
  const edge = node.dataPoints?.edges[0];
  if (!edge) return { value: node.dataPoints === undefined ? undefined : null, time: null };
  const item = (key: string) => edge.node.items.find((i) => i.key === key)?.valueText ?? null;
  return { value: item(s.valueItem), time: item(s.timeItem) };
}

function renderSubjects(data: SubjectsData | null | undefined, s: Settings): void {
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
      cell(known === undefined ? '…' : formatNumber(known), 'num dash-latest dash-pending');
      cell('');
    } else {
      if (known !== undefined && known !== latest.value) state.was.set(node.subjectId, known);
      state.latest.set(node.subjectId, latest.value);
      const td = cell(formatNumber(latest.value), 'num dash-latest');
      if (state.was.has(node.subjectId)) {
        tr.className = 'dash-changed';
        const was = document.createElement('span');
        was.className = 'dash-was';
        was.textContent = `was ${formatNumber(state.was.get(node.subjectId))}`;
        td.append(was);
      }
      cell(latest.time ?? '', 'dash-time');
    }
    return tr;
  });
  byId<HTMLTableElement>('dash-subjects').tBodies[0]?.replaceChildren(...rows);
}
