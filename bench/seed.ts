/**
 * The bench's database and tenant: a fresh PGlite directory or a fresh PostgreSQL database, and a
 * realistic tenant seeded in bulk (multi-row inserts in transactions), then VACUUM ANALYZE.
 *
 * Only long-standing exports of src/ are used (openDatabase, applyTenantFile, loadSubjectConfig,
 * valueRows, matchingKeyOf, SecretBox), so this file also runs against older checkouts for "before"
 * numbers.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { type DatabaseHandle, openDatabase } from '../src/db/database.js';
import type { Db } from '../src/db/tables.js';
import { SecretBox } from '../src/domains/data/index.js';
import { loadSubjectConfig, matchingKeyOf, valueRows } from '../src/domains/subject/index.js';
import { applyTenantFile } from '../src/domains/tenant-apply/index.js';
import {
  CLIENT,
  EXTRACT_KEY,
  EXTRACT_OPTIONS,
  FIRST_NAMES,
  LAST_NAMES,
  LEVELS,
  TENANT_KEY,
  employeeNumber,
  entityKey,
  subjectValues,
} from './tenant-data.js';

export interface BenchDatabase {
  kind: 'pglite' | 'postgres';
  /** PGlite: the data directory (the service's DATA_DIR). */
  dataDir?: string;
  /** PostgreSQL: the fresh database's URL (the service's DATABASE_URL). */
  databaseUrl?: string;
  /** Opens a handle on the bench database (PGlite: only one process at a time). */
  open(onQuery?: (sql: string, parameters: readonly unknown[], ms: number) => void): Promise<DatabaseHandle>;
  /** Removes the database (PGlite: the directory; PostgreSQL: DROP DATABASE). Idempotent. */
  dispose(): Promise<void>;
}

/**
 * A fresh, empty bench database: PGlite in a new temp dir, or with `databaseUrl` a new database
 * `ssdi_bench_<random>` created in that server (dropped by `dispose`).
 */
export async function createBenchDatabase(databaseUrl: string | undefined): Promise<BenchDatabase> {
  if (databaseUrl) {
    const name = `ssdi_bench_${randomBytes(4).toString('hex')}`;
    const admin = await openDatabase({ databaseUrl, dataDir: '' });
    try {
      await sql`CREATE DATABASE ${sql.id(name)}`.execute(admin.db);
    } finally {
      await admin.close();
    }
    const u = new URL(databaseUrl);
    u.pathname = `/${name}`;
    let disposed = false;
    return {
      kind: 'postgres',
      databaseUrl: u.toString(),
      open: (onQuery) => openDatabase({ databaseUrl: u.toString(), dataDir: '', ...(onQuery ? { onQuery } : {}) }),
      dispose: async () => {
        if (disposed) return;
        disposed = true;
        const a = await openDatabase({ databaseUrl, dataDir: '' });
        try {
          await sql`DROP DATABASE IF EXISTS ${sql.id(name)} WITH (FORCE)`.execute(a.db);
        } finally {
          await a.close();
        }
      },
    };
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'ssdi-bench-'));
  return {
    kind: 'pglite',
    dataDir: dir,
    open: (onQuery) => openDatabase({ dataDir: dir, ...(onQuery ? { onQuery } : {}) }),
    dispose: () => rm(dir, { recursive: true, force: true }),
  };
}

export interface SeedSummary {
  tenantId: string;
  subjects: number;
  entities: number;
  users: number;
  groups: number;
  seconds: number;
}

/**
 * Seeds a bench tenant (by default the bench's `TENANT_KEY` with its `CLIENT`; another key and client
 * give another tenant of the same data): the tenant file (client, 8 subject fields, 4 structure types,
 * the reference provider as data source with one extract; optionally an inbound client that may report
 * data changes), then in bulk 2,000 entities, 10 groups, 50 users and `subjects` subjects located in the
 * teams; then VACUUM ANALYZE.
 */
export async function seedTenant(
  db: Db,
  opts: {
    subjects: number;
    providerUrl: string;
    tenantKey?: string;
    client?: { clientId: string; clientSecret: string };
    /** A client the data source accepts change reports from (scope ServiceDataProviderApi, no permissions). */
    inboundClient?: { clientId: string; clientSecret: string };
    progress?: (done: number) => void;
  },
): Promise<SeedSummary> {
  const t0 = performance.now();
  const tenantKey = opts.tenantKey ?? TENANT_KEY;
  const costCenter = [{ key: 'costCenter', name: 'Cost center', dataType: 'String' as const }];
  await applyTenantFile(db, new SecretBox(db, undefined), {
    tenants: [
      {
        key: tenantKey,
        name: tenantKey === TENANT_KEY ? 'Bench' : `Bench ${tenantKey}`,
        clients: [
          { ...(opts.client ?? CLIENT), scopes: ['ServiceApi'], permissions: ['*'] },
          ...(opts.inboundClient ? [{ ...opts.inboundClient, scopes: ['ServiceDataProviderApi' as const], permissions: [] }] : []),
        ],
        subjectFields: [
          { key: 'employeeNumber', name: 'Employee number', dataType: 'String', required: true },
          { key: 'fullName', name: 'Full name', dataType: 'String', required: true },
          { key: 'grade', name: 'Grade', dataType: 'Integer' },
          { key: 'salary', name: 'Salary', dataType: 'Decimal' },
          { key: 'hired', name: 'Hired', dataType: 'Date' },
          { key: 'lastReview', name: 'Last review', dataType: 'DateTime' },
          { key: 'active', name: 'Active', dataType: 'Boolean' },
          { key: 'skills', name: 'Skills', dataType: 'String', isArray: true },
        ],
        matchingFieldKeys: ['employeeNumber'],
        externalIdFieldKey: 'employeeNumber',
        structureTypes: [
          { key: 'company', name: 'Company', subjectAssignable: false },
          { key: 'division', name: 'Division', subjectAssignable: false, customFields: costCenter },
          { key: 'department', name: 'Department', subjectAssignable: true, customFields: costCenter },
          { key: 'team', name: 'Team', subjectAssignable: true, customFields: costCenter },
        ],
        dataSources: [
          {
            key: 'reference',
            name: 'Reference provider',
            getDataPointsUrl: `${opts.providerUrl}/get-data-points`,
            tokenUrl: `${opts.providerUrl}/connect/token`,
            clientId: 'service',
            clientSecret: 'provider-secret',
            scope: 'DataProviderApi',
            subjectIdentifier: 'ExternalId',
            ...(opts.inboundClient ? { inboundClientIds: [opts.inboundClient.clientId] } : {}),
          },
        ],
        dataExtracts: [{ key: EXTRACT_KEY, name: 'Steps per day, last week', dataSourceKey: 'reference', options: EXTRACT_OPTIONS }],
      },
    ],
  });
  const tenant = await db.selectFrom('tenant').select('id').where('key', '=', tenantKey).executeTakeFirstOrThrow();
  const tenantId = tenant.id;

  // Entities level by level: `path` holds the ancestors' ids (root first), so each level needs the
  // ids of the one above. Children are spread evenly over their parents.
  const levelIds: { key: string; id: string }[][] = [];
  const lineage = new Map<string, string[]>(); // key → ancestors' ids and its own
  await db.transaction().execute(async (trx) => {
    for (const [l, level] of LEVELS.entries()) {
      const parents = levelIds[l - 1];
      const rows = Array.from({ length: level.count }, (_, j) => {
        const parent = parents ? parents[j % parents.length]! : undefined;
        return {
          tenant_id: tenantId,
          key: entityKey(l + 1, j),
          display_name: `${level.type[0]!.toUpperCase()}${level.type.slice(1)} ${j}`,
          structure_type_key: level.type,
          parent_key: parent?.key ?? null,
          path: parent ? lineage.get(parent.key)! : [],
          custom_values: level.type === 'company' ? {} : { costCenter: `CC-${l + 1}${String(j).padStart(4, '0')}` },
        };
      });
      const inserted: { key: string; id: string }[] = [];
      for (let k = 0; k < rows.length; k += 1000) {
        inserted.push(
          ...(await trx
            .insertInto('structural_entity')
            .values(rows.slice(k, k + 1000))
            .returning(['key', 'id'])
            .execute()),
        );
      }
      const byKey = new Map(inserted.map((r) => [r.key, r.id]));
      for (const r of rows) lineage.set(r.key, [...r.path, byKey.get(r.key)!]);
      levelIds.push(inserted);
    }
  });
  const teams = levelIds[3]!;

  // 10 groups over the divisions, 50 users in one or two groups each (the portal/user domain's tables).
  const divisions = levelIds[1]!;
  const groups = Array.from({ length: 10 }, (_, g) => ({ key: `group-${g}`, name: `Group ${g}` }));
  const users = Array.from({ length: 50 }, (_, u) => ({
    tenant_id: tenantId,
    id: `user-${String(u).padStart(2, '0')}`,
    display_name: `${FIRST_NAMES[u % 10]} ${LAST_NAMES[(u * 3) % 10]}`,
    email: `user${u}@example.org`,
    active: u % 10 !== 9,
  }));
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto('user_group')
      .values(groups.map((g) => ({ tenant_id: tenantId, ...g })))
      .execute();
    await trx
      .insertInto('user_group_structural_entity')
      .values(divisions.map((d, j) => ({ tenant_id: tenantId, group_key: groups[j % groups.length]!.key, structural_entity_id: d.id })))
      .execute();
    await trx.insertInto('app_user').values(users).execute();
    await trx
      .insertInto('app_user_group')
      .values(
        users.flatMap((u, k) =>
          [...new Set([k % 10, (k * 3 + 1) % 10])].map((g) => ({ tenant_id: tenantId, user_id: u.id, group_key: groups[g]!.key })),
        ),
      )
      .execute();
  });

  // Subjects: 1,000 per transaction, their index rows in chunks of 5,000, one location each (a team).
  const config = await loadSubjectConfig(db, tenantId);
  const BATCH = 1000;
  for (let start = 0; start < opts.subjects; start += BATCH) {
    const subjects = Array.from({ length: Math.min(BATCH, opts.subjects - start) }, (_, j) => {
      const i = start + j;
      const values = subjectValues(i);
      return { tenant_id: tenantId, external_id: employeeNumber(i), matching_key: matchingKeyOf(config.matchingKeys, values), values };
    });
    await db.transaction().execute(async (trx) => {
      const inserted = await trx.insertInto('subject').values(subjects).returning(['id', 'values']).execute();
      // Searchable: String fields and the ExternalId field (as the service's writeSubjectValues).
      const rows = inserted.flatMap((s) =>
        valueRows(
          tenantId,
          s.id,
          config.fields,
          s.values,
          (f) => f.dataType === 'String' || f.key === config.externalIdKey,
          config.externalIdKey,
        ),
      );
      for (let k = 0; k < rows.length; k += 5000)
        await trx
          .insertInto('subject_value')
          .values(rows.slice(k, k + 5000))
          .execute();
      await trx
        .insertInto('subject_location')
        .values(
          inserted.map((s, j) => ({ tenant_id: tenantId, subject_id: s.id, structural_entity_id: teams[(start + j) % teams.length]!.id })),
        )
        .execute();
    });
    opts.progress?.(start + subjects.length);
  }
  // The steady state of a database in use: statistics, and the visibility map set (index-only scans
  // skip the heap), so autovacuum does not start on the fresh rows in the middle of a measurement.
  await sql`VACUUM ANALYZE`.execute(db);
  const entities = LEVELS.reduce((n, l) => n + l.count, 0);
  return {
    tenantId,
    subjects: opts.subjects,
    entities,
    users: users.length,
    groups: groups.length,
    seconds: (performance.now() - t0) / 1000,
  };
}
