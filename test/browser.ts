import { existsSync } from 'node:fs';
import puppeteer, { type Browser, type HTTPRequest, type Page } from 'puppeteer-core';

/** Debian's chromium, which .ci/run installs; the browser tests are skipped (with a warning) without it. */
export const CHROMIUM = '/usr/bin/chromium';

/** Whether the browser is there; warns once for `file` when it is not. */
export function browserAvailable(file: string): boolean {
  const there = existsSync(CHROMIUM);
  // CI (.ci/run) installs it: there a missing browser is a failure, not a skip.
  if (!there && process.env['REQUIRE_BROWSER']) throw new Error(`${file}: no browser at ${CHROMIUM}, and REQUIRE_BROWSER is set.`);
  if (!there)
    console.warn(
      `${file}: the browser test is skipped: no browser at ${CHROMIUM} (install it with: apt-get install -y chromium; .ci/run does).`,
    );
  return there;
}

/**
 * A headless Chromium and a page that may reach only 127.0.0.1 (and data: and blob: URLs of it): any
 * other request is aborted and its URL pushed to `outside`. `seen` is shown every request first.
 */
export async function loopbackPage(outside: string[], seen?: (request: HTTPRequest) => void): Promise<{ browser: Browser; page: Page }> {
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  page.setDefaultTimeout(15_000);
  await page.setRequestInterception(true);
  page.on('request', (request) => {
    seen?.(request);
    const url = request.url();
    if (onLoopback(url)) void request.continue();
    else {
      outside.push(url);
      void request.abort();
    }
  });
  return { browser, page };
}

/** A URL on 127.0.0.1 (a blob: URL by its origin); data: URLs make no request. */
function onLoopback(raw: string): boolean {
  if (raw.startsWith('data:')) return true;
  try {
    return new URL(raw.startsWith('blob:') ? raw.slice('blob:'.length) : raw).hostname === '127.0.0.1';
  } catch {
    return false;
  }
}
