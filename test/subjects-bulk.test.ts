import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../src/core/errors.js';
import { clientPrincipal } from '../src/domains/auth/index.js';
import { SecretBox } from '../src/domains/data/index.js';
import { createSubjects, subjectCaches } from '../src/domains/subject/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import { failure, openTestDatabase, tenantConfig } from './helpers.js';

type UpsertSubjectInput = Parameters<typeof createSubjects>[1][number];

// createSubjects (the demo organisation at start-up, P133) checks each subject as the upsert checks a new one.
describe('creating subjects in bulk (P133)', () => {
  let handle: Awaited<ReturnType<typeof openTestDatabase>>;
  let t: ReturnType<typeof tenantConfig>;
  const text = (v: string) => ({ String: { Value: v } });
  const subject = (n: string, more: Partial<UpsertSubjectInput> = {}): UpsertSubjectInput => ({
    customFieldValues: [
      { key: 'employeeNumber', value: text(n) },
      { key: 'fullName', value: text(`Person ${n}`) },
    ],
    ...more,
  });
  const create = async (inputs: UpsertSubjectInput[]) => {
    const principal = (await clientPrincipal(handle.db, t.key, 'full'))!;
    await createSubjects({ db: handle.db, principal, subjects: subjectCaches() }, inputs);
  };
  const problem = async (inputs: UpsertSubjectInput[]) => {
    const e = (await failure(() => create(inputs))) as AppError;
    expect(e).toBeInstanceOf(AppError);
    return { status: e.status, errors: e.fieldErrors };
  };
  const count = async () =>
    (
      await sql<{ n: number }>`SELECT count(*)::int AS n FROM subject s JOIN tenant t ON t.id = s.tenant_id WHERE t.key = ${t.key}`.execute(
        handle.db,
      )
    ).rows[0]!.n;

  beforeAll(async () => {
    handle = await openTestDatabase();
    t = tenantConfig({
      structuralEntities: [
        { key: 'acme', displayName: 'Acme', structureTypeKey: 'company' },
        { key: 'dept-a', displayName: 'Department A', structureTypeKey: 'department', parentKey: 'acme' },
      ],
    });
    await applyTenantFile(handle.db, new SecretBox(handle.db, undefined), { tenants: [t] });
  }, 60_000);

  afterAll(() => handle.dispose());

  it('names each problem under the subject it is in, as the upsert words it, and creates none', async () => {
    const { status, errors } = await problem([
      subject('B-1'),
      { customFieldValues: [{ key: 'fullName', value: text('No number') }] },
      subject('B-3', {
        customFieldValues: [
          { key: 'employeeNumber', value: null },
          { key: 'fullName', value: null },
        ],
      }),
      { customFieldValues: [{ key: 'employeeNumber', value: text('B-4') }] },
      subject('B-5', {
        customFieldValues: [
          { key: 'employeeNumber', value: text('B-5') },
          { key: 'fullName', value: { Integer: { Value: 5 } } },
        ],
      }),
    ]);
    expect(status).toBe(400);
    expect(errors).toEqual({
      'subjects[1].customFieldValues': ["The matching field 'employeeNumber' is required."],
      // A required field sent as null is reported once, where it was sent.
      'subjects[2].customFieldValues[0].value': [expect.stringMatching(/employeeNumber/)],
      'subjects[2].customFieldValues[1].value': [expect.stringMatching(/fullName.*cannot be cleared/)],
      'subjects[2].customFieldValues': ["The matching field 'employeeNumber' cannot be null."],
      'subjects[3].customFieldValues': ["The required field 'fullName' is missing."],
      // A required field sent with a bad value is reported once, where it was sent.
      'subjects[4].customFieldValues[1].value': [expect.any(String)],
    });
    expect(await count()).toBe(0);
  });

  it('reports an unknown structural entity key under its subject', async () => {
    const { status, errors } = await problem([subject('C-1', { structuralEntityKeys: ['dept-a', 'nowhere'] })]);
    expect(status).toBe(400);
    expect(errors).toEqual({ 'subjects[0].structuralEntityKeys[1]': ["Unknown structural entity 'nowhere'."] });
  });

  it('answers 409 for two subjects of one batch with the same matching value, and creates none', async () => {
    const { status } = await problem([subject('D-1'), subject('D-2'), subject('D-1')]);
    expect(status).toBe(409);
    expect(await count()).toBe(0);
  });

  it('creates every subject with its locations', async () => {
    await create([subject('E-1', { structuralEntityKeys: ['dept-a'] }), subject('E-2')]);
    expect(await count()).toBe(2);
    // D7: a matching value another subject holds is a conflict.
    expect((await problem([subject('E-2')])).status).toBe(409);
  });
});
