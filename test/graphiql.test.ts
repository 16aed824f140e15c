import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserAvailable, loopbackPage } from './browser.js';
import { type ApiClient, type TestApp, type TestTenant, FULL_CLIENT, createTenant, startApp } from './helpers.js';
import { FakeProvider, eventually, providerDataSource } from './fake-provider.js';

// Issue 10 item 5: GraphiQL works offline (its assets come from the installed packages) and with a token
// (a form on the page gets one from /connect/token), and opens with an example query that runs.

const hasBrowser = browserAvailable('test/graphiql.test.ts');

describe('GET /graphql (GraphiQL) over HTTP', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(async () => {
    await app?.close();
  });

  it('loads no script, style or icon from outside the service: everything is inlined', async () => {
    const res = await fetch(`${app.url}/graphql`, { headers: { accept: 'text/html' } });
    expect(res.status).toBe(200);
    const html = await res.text();
    // GraphiQL's own scripts and styles are in the page, and the form is there.
    expect(html).toContain('YogaGraphiQL');
    expect(html).toContain('<form id="ssdi-token"');
    expect(html).not.toMatch(/<script\b[^>]*\bsrc\s*=/i);
    expect(html).not.toMatch(/<link\b[^>]*\bhref\s*=\s*["']?(https?:)?\/\//i);
    expect(html).not.toMatch(/unpkg\.com|jsdelivr|cdnjs|esm\.sh/i);
  });

  it('is not served with GRAPHIQL=false (as in production): a GET asking for HTML needs a token', async () => {
    const off = await startApp({ GRAPHIQL: 'false' });
    try {
      const res = await fetch(`${off.url}/graphql`, { headers: { accept: 'text/html' } });
      expect(res.status).toBe(401);
      expect(await res.text()).not.toContain('YogaGraphiQL');
    } finally {
      await off.close();
    }
  });
});

describe.skipIf(!hasBrowser)('GraphiQL in a headless browser', () => {
  let app: TestApp;
  let provider: FakeProvider;
  let tenant: TestTenant;
  let api: ApiClient;
  let browser: Browser;
  let page: Page;
  /** Requests the page made to anywhere but the service on loopback (aborted). */
  const outside: string[] = [];
  /** The Authorization header of every POST the page made to /graphql (GraphiQL's introspection and operations). */
  const graphqlRequests: (string | undefined)[] = [];

  beforeAll(async () => {
    app = await startApp();
    provider = await new FakeProvider().start();
    // An extract to subscribe to (its refresh is a live event).
    tenant = await createTenant(app, {
      dataSources: [providerDataSource(provider)],
      dataExtracts: [{ key: 'steps', name: 'Steps per day', dataSourceKey: 'wearables', options: { metric: 'steps' } }],
    });
    api = await tenant.client();
    for (const n of ['E-1', 'E-2']) {
      const r = await api.post('/api/v2/messaging/subject', {
        CustomFieldValues: [
          { Key: 'employeeNumber', Value: { String: { Value: n } } },
          { Key: 'fullName', Value: { String: { Value: `Person ${n}` } } },
        ],
        StructuralEntityKeys: [],
      });
      expect(r.status).toBe(201);
    }
    ({ browser, page } = await loopbackPage(outside, (request) => {
      if (request.url().startsWith(`${app.url}/graphql`) && request.method() === 'POST')
        graphqlRequests.push(request.headers()['authorization']);
    }));
  });
  afterAll(async () => {
    await browser?.close();
    await app?.close();
    await provider?.close();
  });

  it('renders GraphiQL with the example query and asks for a token instead of showing a 401', async () => {
    await page.goto(`${app.url}/graphql`);
    await page.waitForSelector('.graphiql-container .graphiql-query-editor ::-p-text(subjects)');
    await page.waitForSelector('.graphiql-execute-button');
    expect(await text('#ssdi-status')).toBe('Get a token to load the schema.');
    // Without a token GraphiQL does not introspect (it would be answered 401): the response pane is empty.
    expect(graphqlRequests).toEqual([]);
    expect((await text('.graphiql-response')).trim()).toBe('');
  });

  it("shows the token endpoint's error_description when the credentials are wrong", async () => {
    await fillForm(tenant.key, FULL_CLIENT.clientId, 'not-the-secret');
    await page.click('#ssdi-token button[type=submit]');
    await page.waitForSelector('#ssdi-status.ssdi-error');
    expect(await text('#ssdi-status')).toBe('Client authentication failed.');
  });

  it('gets a token with the form; GraphiQL then loads the schema and the docs explorer lists subjects', async () => {
    await fillForm(tenant.key, FULL_CLIENT.clientId, FULL_CLIENT.clientSecret);
    await Promise.all([page.waitForNavigation(), page.click('#ssdi-token button[type=submit]')]);
    await page.waitForSelector('#ssdi-status.ssdi-ok');
    expect(await text('#ssdi-status')).toContain(`Token for ${tenant.key} / ${FULL_CLIENT.clientId}`);
    // The reload kept the one tab holding the example query (no empty tab added).
    expect(await page.$$eval('.graphiql-tab', (tabs) => tabs.length)).toBe(1);

    await page.locator('.graphiql-sidebar button[aria-label="Show Documentation Explorer"]').click();
    await page.locator('.graphiql-doc-explorer-content ::-p-text(Query)').click();
    const field = await page.waitForSelector('.graphiql-doc-explorer-field-name ::-p-text(subjects)');
    await field!.scrollIntoView();
  });

  it('runs the example query: the response pane shows the result with totalCount', async () => {
    await page.waitForSelector('.graphiql-query-editor ::-p-text(subjects)');
    await page.click('.graphiql-execute-button');
    await page.waitForSelector('.graphiql-response ::-p-text(totalCount)');
    const response = (await text('.graphiql-response')).replace(/\s+/g, ' ');
    expect(response).toMatch(/"totalCount": 2/);
    expect(response).toContain('"externalId": "E-1"');
    expect(response).not.toContain('"errors"');
    // The introspection and the query carried the form's token.
    expect(graphqlRequests.length).toBeGreaterThanOrEqual(2);
    for (const auth of graphqlRequests) expect(auth).toMatch(/^Bearer ey/);
    await page.screenshot({ path: '/tmp/graphiql.png' });
  });

  it('runs a subscription (over SSE, the graphql-sse protocol): an event shows in the response pane', async () => {
    // Typed into the editor as a person would (its brackets close themselves and are typed over).
    await page.click('.graphiql-query-editor .view-lines');
    await page.keyboard.down('Control');
    await page.keyboard.press('KeyA');
    await page.keyboard.up('Control');
    await page.keyboard.press('Backspace');
    await page.keyboard.type('subscription { dataPointsChanged(extractKey: "steps") { extractKey kind } }');
    await page.waitForSelector('.graphiql-query-editor ::-p-text(dataPointsChanged)');
    await page.click('.graphiql-execute-button');
    // Refreshed until the event shows: the subscription may still be opening when the first refresh is made.
    await eventually(async () => {
      expect((await api.post('/api/v1/dataSet/steps/refresh')).status).toBe(200);
      await new Promise((r) => setTimeout(r, 200));
      return (await text('.graphiql-response')).includes('REFRESHED');
    }, 15_000);
    const response = (await text('.graphiql-response')).replace(/\s+/g, ' ');
    expect(response).toContain('"extractKey": "steps"');
    expect(response).not.toContain('"errors"');
    await page.screenshot({ path: '/tmp/graphiql-subscription.png' });
  });

  it('made no request outside the service on loopback', () => {
    expect(outside).toEqual([]);
  });

  /** The element's visible text (Monaco renders spaces as no-break spaces). */
  async function text(selector: string): Promise<string> {
    const s = await page.$eval(selector, (el) => (el as unknown as { innerText: string }).innerText);
    return s.replace(/\u00a0/g, ' ');
  }

  async function fillForm(tenantKey: string, clientId: string, clientSecret: string) {
    await page.locator('#ssdi-token input[name=tenant_key]').fill(tenantKey);
    await page.locator('#ssdi-token input[name=client_id]').fill(clientId);
    await page.locator('#ssdi-token input[name=client_secret]').fill(clientSecret);
  }
});
