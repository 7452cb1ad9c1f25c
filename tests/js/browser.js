// Headless Chromium for the explorer's browser tests: Debian's /usr/bin/chromium driven by
// playwright-core. SKIP_REASON says why the tests cannot run here (false when they can).

import { existsSync } from "node:fs";

export const CHROMIUM = "/usr/bin/chromium";

let playwright;
try {
  ({ chromium: playwright } = await import("playwright-core"));
} catch {
  playwright = undefined;
}

/** playwright-core's Chromium launcher, when installed. */
export const chromium = playwright;

export const SKIP_REASON = !existsSync(CHROMIUM)
  ? `${CHROMIUM} is absent: the explorer's browser tests need Debian's chromium (apt-get install chromium)`
  : !chromium
    ? "playwright-core is not installed: run `npm ci` in tests/js"
    : false;
