/**
 * B1's shaping: the rows of the replayed statements → the scenario's JSON answer, the way a lean
 * hand-written server would build it. Result sets are recognised by their columns (the tables' own
 * column names), not by statement position, so a service that changes its SQL still gets shaped:
 *  - subject rows: `id`, `external_id`, `values` (optionally `__sv`/`__id`, the keyset position);
 *  - location rows: structural entity columns plus `subject_id`;
 *  - entity rows: `key`, `display_name`, `path`, `structure_type_key` (no `subject_id`);
 *  - a count: one row whose only column is `n` or `count`.
 * Configuration (subject fields, structure types) is loaded once at start, as a cache would hold it.
 * Page flags that only an existence check decides (HasPreviousPage) are taken from the service's own
 * answer; the check itself is replayed, so the database work is the same.
 */

export interface FieldConfig {
  key: string;
  name: string;
  dataType: string;
  typeLabel: string;
  required: boolean;
  isArray: boolean;
}

export interface StructureTypeConfig {
  key: string;
  name: string;
  subjectAssignable: boolean;
  fields: Omit<FieldConfig, 'isArray'>[];
}

export interface ShapeConfig {
  fields: FieldConfig[];
  types: Map<string, StructureTypeConfig>;
}

/** What the service answered, for what B1 does not derive from rows. */
export interface Expected {
  totalCount?: number;
  hasPreviousPage?: boolean;
}

type Row = Record<string, unknown>;

interface Sets {
  subjects: Row[];
  locations: Row[];
  entities: Row[];
  count: number | undefined;
}

/** Sorts the result sets of the statements by what they hold. */
export function classifyResults(results: Row[][]): Sets {
  const sets: Sets = { subjects: [], locations: [], entities: [], count: undefined };
  for (const rows of results) {
    const first = rows[0];
    if (!first) continue;
    const has = (c: string) => Object.hasOwn(first, c);
    const cols = Object.keys(first);
    if (has('values') && has('external_id') && has('id')) sets.subjects.push(...rows);
    else if (has('display_name') && has('subject_id')) sets.locations.push(...rows);
    else if (has('display_name') && has('structure_type_key')) sets.entities.push(...rows);
    else if (rows.length === 1 && cols.length === 1 && (cols[0] === 'n' || cols[0] === 'count')) sets.count = Number(first[cols[0]!]);
  }
  return sets;
}

const text = (dataType: string, v: unknown) => (dataType === 'Boolean' ? (v ? 'true' : 'false') : String(v));
const cursor = (parts: unknown[]) => Buffer.from(JSON.stringify(parts)).toString('base64url');

function restSubject(cfg: ShapeConfig, s: Row) {
  const values = (s['values'] ?? {}) as Record<string, unknown>;
  const out: unknown[] = [];
  for (const f of cfg.fields) {
    const v = values[f.key];
    if (v === undefined || v === null) continue;
    const list = (Array.isArray(v) ? v : [v]).map((x) => ({ DataType: f.dataType, ValueText: text(f.dataType, x) }));
    out.push({
      Field: { Key: f.key, Name: f.name, Type: f.typeLabel, Required: f.required, IsArray: f.isArray },
      Value: f.isArray ? list : list[0],
    });
  }
  return { Id: s['id'], ExternalId: s['external_id'] ?? null, CustomFieldValues: out };
}

function gqlSubject(cfg: ShapeConfig, s: Row) {
  const values = (s['values'] ?? {}) as Record<string, unknown>;
  const out: unknown[] = [];
  for (const f of cfg.fields) {
    const v = values[f.key];
    if (v === undefined || v === null) continue;
    out.push({
      field: { key: f.key, name: f.name, type: f.typeLabel, required: f.required, isArray: f.isArray },
      values: (Array.isArray(v) ? v : [v]).map((x) => ({ dataType: f.dataType, valueText: text(f.dataType, x) })),
    });
  }
  return { subjectId: s['id'], externalId: s['external_id'] ?? null, customFieldValues: out };
}

function restEntity(cfg: ShapeConfig, e: Row) {
  const type = cfg.types.get(String(e['structure_type_key']));
  const values = (e['custom_values'] ?? {}) as Record<string, unknown>;
  const fields = type?.fields ?? [];
  return {
    Key: e['key'],
    DisplayName: e['display_name'],
    ParentKey: e['parent_key'] ?? null,
    Depth: Number(e['depth']),
    StructureType: {
      Name: type?.name,
      Key: type?.key,
      SubjectAssignable: type?.subjectAssignable,
      CustomFields: fields.map((f) => ({ Name: f.name, Key: f.key, Type: f.typeLabel, Required: f.required })),
    },
    CustomFieldValues: fields
      .filter((f) => values[f.key] !== undefined && values[f.key] !== null)
      .map((f) => ({
        Field: { Name: f.name, Key: f.key, Type: f.typeLabel, Required: f.required },
        Value: { $type: `${f.dataType}Value`, DataType: f.dataType, Value: values[f.key], ValueText: text(f.dataType, values[f.key]) },
      })),
  };
}

function page<T>(
  rows: Row[],
  size: number,
  map: (r: Row) => T,
  cursorOf: (r: Row) => string,
  expected: Expected,
  total: number | undefined,
) {
  const shown = rows.slice(0, size);
  const edges = shown.map((r) => ({ Node: map(r), Cursor: cursorOf(r) }));
  return {
    PageInfo: {
      HasNextPage: rows.length > size,
      HasPreviousPage: expected.hasPreviousPage ?? false,
      StartCursor: edges[0]?.Cursor ?? null,
      EndCursor: edges.at(-1)?.Cursor ?? null,
      TotalCount: total ?? expected.totalCount ?? 0,
    },
    Edges: edges,
  };
}

const subjectCursor = (r: Row) => cursor(['subject', 'ExternalId', r['__sv'] ?? r['external_id'], r['__id'] ?? r['id']]);

/** Builds the answer of one scenario from its statements' rows. */
export function shapeAnswer(kind: string, cfg: ShapeConfig, results: Row[][], pageSize: number, expected: Expected): unknown {
  const sets = classifyResults(results);
  // TotalCount: counted by a replayed statement, else the count the service served from its cache
  // (the replayed data_version read is that cache's key).
  const total = sets.count ?? expected.totalCount;
  switch (kind) {
    case 'restSubjectPage':
      return page(sets.subjects, pageSize, (r) => restSubject(cfg, r), subjectCursor, expected, total);
    case 'restEntityPage':
      return page(
        sets.entities,
        pageSize,
        (r) => restEntity(cfg, r),
        (r) => cursor(['structuralEntity', 'Key', r['key'], r['key']]),
        expected,
        total,
      );
    case 'restSubjectById': {
      const s = sets.subjects[0];
      if (!s) return { title: 'Not Found', status: 404 };
      const entities = sets.locations
        .filter((l) => l['subject_id'] === s['id'])
        .sort((a, b) => String(a['key']).localeCompare(String(b['key'])));
      return { ...restSubject(cfg, s), StructuralEntities: entities.map((e) => restEntity(cfg, e)) };
    }
    case 'gqlSubjects':
    case 'gqlSubjectsNoCount':
    case 'gqlSubjectsWithEntities': {
      const bySubject = new Map<unknown, Row[]>();
      for (const l of sets.locations) bySubject.set(l['subject_id'], [...(bySubject.get(l['subject_id']) ?? []), l]);
      const edges = sets.subjects.slice(0, pageSize).map((s) => {
        const node: Record<string, unknown> = gqlSubject(cfg, s);
        if (kind === 'gqlSubjectsWithEntities') {
          const located = (bySubject.get(s['id']) ?? []).sort((a, b) => String(a['key']).localeCompare(String(b['key']))).slice(0, 10);
          node['structuralEntities'] = {
            edges: located.map((e) => ({
              node: { key: e['key'], displayName: e['display_name'], parentKey: e['parent_key'] ?? null, depth: Number(e['depth']) },
            })),
          };
        }
        return { node };
      });
      return { data: { subjects: kind === 'gqlSubjectsNoCount' ? { edges } : { totalCount: total ?? 0, edges } } };
    }
    default:
      throw new Error(`unknown shape ${kind}`);
  }
}
