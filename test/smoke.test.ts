import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, type TestTenant, createTenant, startApp } from './helpers.js';

let app: TestApp;
let tenant: TestTenant;
beforeAll(async () => {
  app = await startApp();
  tenant = await createTenant(app, {
    structuralEntities: [{ key: 'root', displayName: 'Root', structureTypeKey: 'company' }],
  });
});
afterAll(() => app?.close());

describe('smoke', () => {
  it('serves health and a structural entity list with a real token', async () => {
    const api = await tenant.client();
    expect((await api.get('/healthz')).status).toBe(200);
    expect((await api.get('/readyz')).status).toBe(200);
    const list = await api.get('/api/v1/structuralEntity');
    expect(list.status).toBe(200);
    expect(list.body.Edges.map((e: any) => e.Node.Key)).toEqual(['root']);
    expect(list.body.PageInfo.TotalCount).toBe(1);
  });
});
