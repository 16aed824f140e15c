import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateTenantFile } from '../src/domains/tenant-apply/index.js';
import { type ApiClient, type TestApp, createTenant, startApp, tenantConfig } from './helpers.js';

// P120: an extract declares the items of its data points (key, name, unit, dataType), in the tenant file or
// through createDataExtract/updateDataExtract; DataExtract.items returns them, so a dashboard labels a value
// with its unit. A GraphQL addition: the REST contract has no extract resource and is unchanged.

const SOURCE = {
  key: 'wearables',
  name: 'Wearables',
  getDataPointsUrl: 'http://127.0.0.1:9/get-data-points',
  subjectIdentifier: 'ExternalId',
};
const STEPS_ITEMS = [
  { key: 'date', name: 'Day', dataType: 'Date' },
  { key: 'value', name: 'Steps', unit: 'steps', dataType: 'Integer' },
  { key: 'distanceKm', name: 'Distance', unit: 'km', dataType: 'Decimal' },
];
const ITEMS = `items { key name unit dataType }`;

describe('data extract items and their units', () => {
  let app: TestApp;
  let api: ApiClient;
  beforeAll(async () => {
    app = await startApp();
    const t = await createTenant(app, {
      dataSources: [SOURCE],
      dataExtracts: [
        { key: 'steps', name: 'Steps per day', dataSourceKey: 'wearables', options: { metric: 'steps' }, items: STEPS_ITEMS },
        { key: 'plain', name: 'No items declared', dataSourceKey: 'wearables' },
      ],
    });
    api = await t.client();
  });
  afterAll(async () => {
    await app?.close();
  });

  const items = async (key: string) => {
    const r = await api.gql(`query($key: String!) { dataExtract(key: $key) { ${ITEMS} } }`, { key });
    expect(r.body.errors).toBeUndefined();
    return r.body.data.dataExtract.items as unknown[];
  };
  const full = (list: { key: string; name: string; unit?: string; dataType?: string }[]) =>
    list.map((i) => ({ unit: null, dataType: null, ...i }));

  it('returns the items a tenant file declares, in order, with their units; none declared is an empty list', async () => {
    expect(await items('steps')).toEqual(full(STEPS_ITEMS));
    expect(await items('plain')).toEqual([]);
  });

  it('createDataExtract stores the items sent; updateDataExtract replaces them, and keeps them when absent', async () => {
    const create = await api.gql(
      `mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key ${ITEMS} } } }`,
      { input: { key: 'sleep', name: 'Sleep', dataSourceKey: 'wearables', items: [{ key: 'value', name: 'Sleep', unit: 'h' }] } },
    );
    expect(create.body.errors).toBeUndefined();
    expect(create.body.data.createDataExtract.dataExtract.items).toEqual(full([{ key: 'value', name: 'Sleep', unit: 'h' }]));
    const UPDATE = `mutation($input: UpdateDataExtractInput!) { updateDataExtract(input: $input) { dataExtract { name ${ITEMS} } } }`;
    const renamed = await api.gql(UPDATE, { input: { key: 'sleep', name: 'Sleep per night' } });
    expect(renamed.body.data.updateDataExtract.dataExtract).toEqual({
      name: 'Sleep per night',
      items: full([{ key: 'value', name: 'Sleep', unit: 'h' }]),
    });
    const replaced = await api.gql(UPDATE, {
      input: { key: 'sleep', items: [{ key: 'value', name: 'Sleep', unit: 'min', dataType: 'Integer' }] },
    });
    expect(replaced.body.data.updateDataExtract.dataExtract.items).toEqual([
      { key: 'value', name: 'Sleep', unit: 'min', dataType: 'Integer' },
    ]);
  });

  it('refuses a repeated item key, an empty unit and an unknown dataType, naming each (BAD_REQUEST); nothing is created', async () => {
    const r = await api.gql(`mutation($input: CreateDataExtractInput!) { createDataExtract(input: $input) { dataExtract { key } } }`, {
      input: {
        key: 'bad',
        name: 'Bad',
        dataSourceKey: 'wearables',
        items: [
          { key: 'value', name: 'Steps', unit: 'steps' },
          { key: 'value', name: 'Again' },
          { key: 'x', name: 'X', unit: ' ' },
          { key: 'y', name: 'Y', dataType: 'Money' },
        ],
      },
    });
    expect(r.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    expect(Object.keys(r.body.errors[0].extensions.errors).sort()).toEqual(['items[1].key', 'items[2].unit', 'items[3].dataType']);
    expect((await api.gql(`{ dataExtract(key: "bad") { key } }`)).body.data?.dataExtract ?? null).toBeNull();
  });

  it('a tenant file with a repeated item key or an unknown dataType is refused before anything is applied', async () => {
    const doc = {
      tenants: [
        tenantConfig({
          dataSources: [SOURCE],
          dataExtracts: [
            {
              key: 'steps',
              name: 'Steps',
              dataSourceKey: 'wearables',
              items: [
                { key: 'value', name: 'Steps', unit: 'steps' },
                { key: 'value', name: 'Again', dataType: 'Money' },
              ],
            },
          ],
        }),
      ],
    };
    const { problems } = await validateTenantFile(app.handle.db, doc);
    expect(problems.map((p) => p.path).sort()).toEqual([
      'tenants[0].dataExtracts[0].items[1].dataType',
      'tenants[0].dataExtracts[0].items[1].key',
    ]);
  });
});
