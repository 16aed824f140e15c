// Drill-down: a child's line (the one nearest the pointer) or its legend entry makes that child the selected
// entity, so its own children become the lines; the breadcrumb leads back up. The selection is the entity
// picker's value, so the address and a reload keep it.
import { byId, field } from '../shared/dom.js';
import { controls, state } from './state.js';

const plot = byId('dash-plot');
const crumbs = byId('dash-crumbs');

/** Selects the entity (as if picked), which reloads the page's data. */
export function select(entityKey: string): void {
  const picker = field<HTMLSelectElement>(controls, 'entity');
  if (picker.value === entityKey || ![...picker.options].some((o) => o.value === entityKey)) return;
  picker.value = entityKey;
  picker.dispatchEvent(new Event('change', { bubbles: true }));
}

/** The series index the pointer is nearest (uPlot's focus), if any. */
let focused: number | null = null;

/** The chart's hooks that follow its focus, so a click on the plot picks the line under the pointer. */
export const focusHooks: uPlot.Hooks.Arrays = {
  setSeries: [
    (_u, index) => {
      focused = index ?? null;
    },
  ],
};

// Capturing: uPlot's own legend click (show/hide a series) never sees a click that drills.
plot.addEventListener(
  'click',
  (event) => {
    const target = event.target as HTMLElement;
    const row = target.closest('.u-legend .u-series');
    let index: number | null = null;
    if (row) index = [...(row.parentElement?.children ?? [])].indexOf(row);
    else if (target.closest('.u-over')) index = focused;
    // Index 0 is the day, 1 the selected entity's own total: only a child drills.
    if (index === null || index < 2) return;
    const key = state.seriesKeys[index - 1];
    if (!key) return;
    event.preventDefault();
    event.stopPropagation();
    select(key);
  },
  true,
);

/** The selected entity's ancestors and itself, each a link up (the last, the selection, is plain text). */
export function renderCrumbs(entityKey: string): void {
  const byKey = new Map(state.entities.map((e) => [e.key, e]));
  const path = [];
  for (let e = byKey.get(entityKey); e; e = e.parentKey ? byKey.get(e.parentKey) : undefined) path.unshift(e);
  crumbs.replaceChildren(
    ...path.map((e, i) => {
      const last = i === path.length - 1;
      const el = document.createElement(last ? 'span' : 'button');
      el.textContent = e.displayName;
      el.dataset['entity'] = e.key;
      if (last) el.setAttribute('aria-current', 'page');
      else {
        (el as HTMLButtonElement).type = 'button';
        el.addEventListener('click', () => select(e.key));
      }
      return el;
    }),
  );
  const children = state.entities.filter((e) => e.parentKey === entityKey).length;
  const hint = document.createElement('small');
  hint.textContent = children ? ' — click a line or its legend entry to drill down' : '';
  crumbs.append(hint);
}
