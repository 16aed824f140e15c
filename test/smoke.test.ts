import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
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

  // P147: npm scripts find the registry's Node first on PATH, whatever Node the machine has.
  it('runs on the Node that package.json pins, the one `node` names in npm scripts', () => {
    const pinned = JSON.parse(readFileSync('package.json', 'utf8')).dependencies.node as string;
    expect(process.versions.node).toBe(pinned);
    expect(execFileSync('node', ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim()).toBe(pinned);
  });
});
