/**
 * The bench tenant's data as pure functions (no imports from src/): the seeder, the scenarios and the
 * load generator (which must stay light) all derive the same subjects and keys from here.
 */

export const TENANT_KEY = 'bench';
export const CLIENT = { clientId: 'bench', clientSecret: 'bench-secret' };
export const EXTRACT_KEY = 'steps-week';
/** The extract's options: 7 daily points per subject. */
export const EXTRACT_OPTIONS = { metric: 'steps', period: { days: 7 } };
export const POINTS_PER_SUBJECT = 7;

export const FIRST_NAMES = ['John', 'Mary', 'Ahmed', 'Li', 'Olga', 'Pedro', 'Aiko', 'Fatima', 'Lars', 'Noor'];
export const LAST_NAMES = ['Carpenter', 'Smith', 'Okafor', 'Nguyen', 'Ivanova', 'Garcia', 'Tanaka', 'Haddad', 'Berg', 'Khan'];
const SKILLS = [
  'sql',
  'negotiation',
  'welding',
  'first-aid',
  'forklift',
  'excel',
  'python',
  'spanish',
  'accounting',
  'driving',
  'sales',
  'coaching',
  'safety',
];

/**
 * The entity tree: 2,000 entities over 4 levels. Level 1 has 2 companies with 20 divisions each, so a
 * `ParentKey` list of a company is one full page of 20; subjects sit in the level-4 teams.
 */
export const LEVELS = [
  { type: 'company', count: 2 },
  { type: 'division', count: 40 },
  { type: 'department', count: 400 },
  { type: 'team', count: 1558 },
] as const;

/** `E0000042`: the employee number (matching field and ExternalId) of subject i. */
export const employeeNumber = (i: number) => `E${String(i).padStart(7, '0')}`;
/** Key of entity j of a level (1-based level). */
export const entityKey = (level: number, j: number) => `${LEVELS[level - 1]!.type}-${String(j).padStart(4, '0')}`;

/** The canonical stored values of subject i (what the service would store for the same upsert). */
export function subjectValues(i: number): Record<string, unknown> {
  const day = 1 + (i % 28);
  return {
    employeeNumber: employeeNumber(i),
    fullName: `${FIRST_NAMES[i % 10]} ${LAST_NAMES[Math.floor(i / 10) % 10]} ${i}`,
    ...(i % 7 !== 0 ? { grade: i % 100 } : {}),
    salary: 30000 + ((i * 37) % 90000) + (i % 4) * 0.25,
    hired: `20${String(10 + (i % 15))}-${String(1 + (i % 12)).padStart(2, '0')}-${String(day).padStart(2, '0')}`,
    lastReview: new Date(Date.UTC(2024, i % 12, day, 8 + (i % 10), (i * 7) % 60, 0)).toISOString(),
    active: i % 10 !== 0,
    skills: [SKILLS[i % SKILLS.length]!, SKILLS[(i * 7 + 3) % SKILLS.length]!].filter((s, k, a) => a.indexOf(s) === k),
  };
}

/** The same subject as a REST upsert body's CustomFieldValues (sent shape, D7). */
export function sentSubjectValues(i: number): { Key: string; Value: unknown }[] {
  const v = subjectValues(i);
  const one = (type: string, value: unknown) => ({ [type]: { Value: value } });
  return [
    { Key: 'employeeNumber', Value: one('String', v['employeeNumber']) },
    { Key: 'fullName', Value: one('String', v['fullName']) },
    ...(v['grade'] !== undefined ? [{ Key: 'grade', Value: one('Integer', v['grade']) }] : []),
    { Key: 'salary', Value: one('Decimal', v['salary']) },
    { Key: 'hired', Value: one('Date', v['hired']) },
    { Key: 'lastReview', Value: one('DateTime', v['lastReview']) },
    { Key: 'active', Value: one('Boolean', v['active']) },
    { Key: 'skills', Value: (v['skills'] as string[]).map((s) => one('String', s)) },
  ];
}
