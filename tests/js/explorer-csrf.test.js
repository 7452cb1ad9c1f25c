// A web page must not be able to drive the broker (issue 41, section 2): a hostile page on
// another site (`hostile.example`, which Chromium's host resolver maps to 127.0.0.1, where a
// node HTTP server serves it) tries, in headless Chromium (playwright-core with Debian's
// /usr/bin/chromium), what a page can do without the broker's consent — a
// `fetch(…, {mode: "no-cors"})` purge with `Content-Type: text/plain`, a form-encoded send, a
// `<form enctype="text/plain">` that creates a queue, a preflighted JSON purge, a WebSocket
// to the AMQP path — and a DNS-rebound name (`rebound.example`, mapped the same way) reads
// the explorer's API. The @azure/service-bus SDK and the explorer's own API then check that
// the queue still holds its messages and that no queue was created.
//
// In keys mode the browser holds the explorer's credentials for the broker's origin (as a user
// logged into the explorer in another tab would), so the forged requests carry them.
//
// Skipped (with the reason) when /usr/bin/chromium or playwright-core is not installed.

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { KEYS_MODE, SAS_KEY_NAME, SAS_KEY_VALUE, delay, queueToml, useBroker, withClient } from "./harness.js";
import { CHROMIUM, SKIP_REASON, chromium } from "./browser.js";

const REBOUND = "rebound.example";
// The hostile pages' site (Chromium's host resolver maps it to 127.0.0.1, where the test serves
// them): another site, not a page on the developer's own machine.
const HOSTILE = "hostile.example";


const QUEUE = "orders";
const CREATED = "csrf-created";
const MESSAGES = 20;
// A forged request is refused with 403 for its foreign Origin (checked first; browsers always
// send one on a POST) or 415 for a body that is not declared JSON.
const REFUSED = [403, 415];

if (SKIP_REASON) {
  test("the explorer refuses cross-site requests in headless Chromium", { skip: SKIP_REASON }, () => {});
} else {
  scenario();
}

function scenario() {
  const { broker, brokerTest } = useBroker(queueToml(QUEUE));
  let browser;
  let context;
  let hostile;
  let hostileBase;
  let base;
  let httpPortNumber;

  before(async () => {
    httpPortNumber = await httpPort(broker);
    base = `http://127.0.0.1:${httpPortNumber}`;
    hostile = http.createServer((request, response) => {
      const page = PAGES[new URL(request.url, "http://x").pathname];
      if (!page) {
        response.writeHead(404).end();
        return;
      }
      response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" }).end(page(base));
    });
    await new Promise((resolve) => hostile.listen(0, "127.0.0.1", resolve));
    hostileBase = `http://${HOSTILE}:${hostile.address().port}`;
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--no-sandbox", `--host-resolver-rules=MAP ${REBOUND} 127.0.0.1, MAP ${HOSTILE} 127.0.0.1`],
      headless: true,
    });
    context = await browser.newContext({
      httpCredentials: KEYS_MODE
        ? { username: SAS_KEY_NAME, password: SAS_KEY_VALUE, origin: base, send: "always" }
        : undefined,
    });
    await withClient(broker.connectionString, async (client) => {
      const sender = client.createSender(QUEUE);
      await sender.sendMessages(Array.from({ length: MESSAGES }, (_, index) => ({ body: `order ${index}` })));
    });
  });

  after(async () => {
    await browser?.close();
    await new Promise((resolve) => (hostile ? hostile.close(resolve) : resolve()));
  });

  /** Opens a hostile page, waits for `brokerAnswers` responses from the broker (and, with
   * `report`, for the page's own report), and returns both. */
  async function visit(pagePath, { brokerAnswers = 1, report = true } = {}) {
    const page = await context.newPage();
    const answers = [];
    page.on("response", (response) => {
      if (response.url().startsWith(base)) answers.push({ url: response.url(), status: response.status() });
    });
    try {
      await page.goto(`${hostileBase}${pagePath}`);
      const deadline = Date.now() + 10_000;
      let seen;
      for (;;) {
        seen = report ? await page.evaluate(() => window.report).catch(() => undefined) : undefined;
        const finished = answers.length >= brokerAnswers && (!report || seen?.done);
        if (finished || Date.now() > deadline) break;
        await delay(50);
      }
      // A late request would show here.
      await delay(200);
      return { answers, report: seen };
    } finally {
      await page.close();
    }
  }

  async function explorerApi(route) {
    const headers = { Accept: "application/json" };
    if (KEYS_MODE) {
      headers.Authorization = `Basic ${Buffer.from(`${SAS_KEY_NAME}:${SAS_KEY_VALUE}`).toString("base64")}`;
    }
    const response = await fetch(`${base}/explorer/api/${route}`, { headers });
    return { status: response.status, body: await response.json() };
  }

  /** The queue's messages as the SDK peeks them, and whether the forged queue exists. */
  async function brokerState() {
    const peeked = await withClient(broker.connectionString, async (client) => {
      const receiver = client.createReceiver(QUEUE);
      return receiver.peekMessages(MESSAGES + 10);
    });
    const created = await explorerApi(`entity?path=${CREATED}`);
    return { messages: peeked.length, created: created.status !== 404 };
  }

  brokerTest("a no-cors text/plain purge and a form-encoded send from another origin change nothing", async () => {
    const { answers, report } = await visit("/fetches", { brokerAnswers: 2 });
    assert.ok(report?.done, `the hostile page ran its fetches: ${JSON.stringify(report)}`);
    assert.equal(answers.length, 2, JSON.stringify(answers));
    for (const answer of answers) {
      assert.ok(REFUSED.includes(answer.status), `refused: ${JSON.stringify(answers)}`);
    }
    assert.deepEqual(await brokerState(), { messages: MESSAGES, created: false });
  });

  brokerTest('a <form enctype="text/plain"> from another origin does not create a queue', async () => {
    const { answers } = await visit("/form", { report: false });
    assert.equal(answers.length, 1, JSON.stringify(answers));
    assert.ok(REFUSED.includes(answers[0].status), JSON.stringify(answers));
    assert.deepEqual(await brokerState(), { messages: MESSAGES, created: false });
  });

  brokerTest("a preflighted JSON purge from another origin is not allowed by the browser", async () => {
    const { report } = await visit("/preflighted", { brokerAnswers: 0 });
    assert.ok(report?.done, JSON.stringify(report));
    assert.match(report.outcome, /^rejected:/, "the CORS preflight is not granted");
    assert.deepEqual(await brokerState(), { messages: MESSAGES, created: false });
  });

  brokerTest("a page on another site cannot open the AMQP WebSocket", async () => {
    const { answers, report } = await visit("/websocket", { brokerAnswers: 0 });
    assert.ok(report?.done, JSON.stringify(report));
    assert.equal(report.outcome, "refused", JSON.stringify({ report, answers }));
  });

  brokerTest("a DNS-rebound name gets nothing from the explorer or the admin API", async () => {
    const page = await context.newPage();
    try {
      for (const target of [
        `/explorer/api/entities`,
        `/explorer/`,
        `/$Resources/Queues?api-version=2021-05`,
        `/metrics`,
      ]) {
        const response = await page.goto(`http://${REBOUND}:${httpPortNumber}${target}`);
        const text = await response.text();
        assert.equal(response.status(), 403, `${target}: ${text}`);
        assert.doesNotMatch(text, new RegExp(QUEUE), target);
      }
      // /health answers any name (container health checks).
      const health = await page.goto(`http://${REBOUND}:${httpPortNumber}/health`);
      assert.equal(health.status(), 200);
    } finally {
      await page.close();
    }
    // The page's own origin still works.
    const own = await explorerApi("entities");
    assert.equal(own.status, 200);
  });
}

// The hostile pages. `window.report` tells the test what the page saw.
const PAGES = {
  "/fetches": (base) => `<!doctype html><script>
    window.report = { done: false };
    (async () => {
      const purge = fetch(${JSON.stringify(base)} + "/explorer/api/purge", {
        method: "POST", mode: "no-cors", credentials: "include",
        headers: { "Content-Type": "text/plain" },
        body: JSON.stringify({ path: ${JSON.stringify(QUEUE)}, queue: "main", confirm: ${JSON.stringify(QUEUE)} }),
      });
      const send = fetch(${JSON.stringify(base)} + "/explorer/api/send", {
        method: "POST", mode: "no-cors", credentials: "include",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: JSON.stringify({ path: ${JSON.stringify(QUEUE)}, body: "forged", count: 5 }),
      });
      const outcomes = await Promise.allSettled([purge, send]);
      window.report = { done: true, outcomes: outcomes.map((outcome) => outcome.status) };
    })();
  </script>`,
  "/form": (base) => {
    // text/plain form encoding writes `name=value`: the name opens the JSON, the value closes it.
    const name = `{"definition":"[[queues]]\\nname = \\"${CREATED}\\"\\n","pad":"`;
    const escape = (text) => text.replaceAll("&", "&amp;").replaceAll('"', "&quot;");
    return `<!doctype html>
      <form id="forged" method="post" enctype="text/plain" action="${base}/explorer/api/entities">
        <input type="hidden" name="${escape(name)}" value="&quot;}">
      </form>
      <script>document.getElementById("forged").submit();</script>`;
  },
  "/preflighted": (base) => `<!doctype html><script>
    window.report = { done: false };
    fetch(${JSON.stringify(base)} + "/explorer/api/purge", {
      method: "POST", credentials: "include",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ path: ${JSON.stringify(QUEUE)}, queue: "main", confirm: ${JSON.stringify(QUEUE)} }),
    }).then(
      (response) => { window.report = { done: true, outcome: "answered: " + response.status }; },
      (error) => { window.report = { done: true, outcome: "rejected: " + error.message }; },
    );
  </script>`,
};

PAGES["/websocket"] = (base) => `<!doctype html><script>
  window.report = { done: false };
  const socket = new WebSocket(${JSON.stringify(base.replace(/^http/, "ws"))} + "/$servicebus/websocket/", "AMQPWSB10");
  socket.onopen = () => { window.report = { done: true, outcome: "opened" }; socket.close(); };
  socket.onerror = () => { window.report = { done: true, outcome: "refused" }; };
</script>`;

/** The HTTP listener's port, from the broker's log line `HTTP (…) on 127.0.0.1:PORT`. */
async function httpPort(broker) {
  const pattern = /HTTP \([^)]*\) on 127\.0\.0\.1:(\d+)/;
  const deadline = Date.now() + 5000;
  for (;;) {
    const match = pattern.exec(broker.logTail(400));
    if (match) return Number(match[1]);
    if (Date.now() > deadline) {
      throw new Error(`no 'HTTP (…) on 127.0.0.1:PORT' line in the broker's log:\n${broker.logTail(20)}`);
    }
    await delay(50);
  }
}
