// The web explorer (/explorer/, contract in docs/explorer.md) driven in headless Chromium
// (playwright-core with Debian's /usr/bin/chromium), with the unmodified @azure/service-bus
// SDK on the other side: the SDK makes messages and dead letters, the page must show them with
// the right counts, resubmit the dead letters (the SDK receives them again as new messages),
// send a message with application properties (the SDK receives them), purge after typing the
// path, and show the API's errors. Runs in both auth modes (FERROBUS_TEST_AUTH=keys: the
// browser context answers the Basic challenge with the connection string's key).
//
// EXPLORER_SCREENSHOTS=1 also writes docs/images/explorer-entities.png and
// docs/images/explorer-messages.png for docs/explorer.md.
//
// Skipped (with the reason) when /usr/bin/chromium or playwright-core is not installed.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import {
  KEYS_MODE,
  SAS_KEY_NAME,
  SAS_KEY_VALUE,
  delay,
  eventually,
  queueToml,
  receiveExactly,
  toNumber,
  topicToml,
  useBroker,
  withClient,
} from "./harness.js";
import { CHROMIUM, SKIP_REASON, chromium } from "./browser.js";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const SCREENSHOTS = process.env.EXPLORER_SCREENSHOTS === "1";
const IMAGES = path.join(REPO_ROOT, "docs", "images");


const QUEUE = "orders";
const TOPIC = "events";
const SUBSCRIPTION = `${TOPIC}/Subscriptions/all`;
const CONFIG =
  queueToml(QUEUE, { max_delivery_count: 1 }) +
  queueToml("invoices", { requires_session: true }) +
  queueToml("payments") +
  topicToml(TOPIC, ["all", "audit"]);

// What the SDK puts into the broker before the page looks (test 1).
const SENT = 6; // order-0 … order-5
const DEAD = 3; // order-0 … order-2: received and abandoned once (max_delivery_count 1)
const DEFERRED = 1; // order-3
const SCHEDULED = 1; // order-later, an hour ahead
const ACTIVE = SENT - DEAD - DEFERRED; // order-4, order-5
// The active count includes deferred messages, as Service Bus counts them.
const ACTIVE_COUNT = ACTIVE + DEFERRED;
const EVENTS = 4;

// An operation waited for in the page (2 s polls) fails after this long.
const WAIT_MS = 10_000;
const NO_AUTO_RENEW = { maxAutoLockRenewalDurationInMs: 0 };

if (SKIP_REASON) {
  test("explorer in headless Chromium", { skip: SKIP_REASON }, () => {});
} else {
  scenario();
}

function scenario() {
  const { broker, brokerTest } = useBroker(CONFIG);
  let browser;
  let context;
  let page;
  let base;
  const pageErrors = [];
  // Sequence numbers of the dead letters as the SDK received them first, and the highest number
  // the queue had given out before the page did anything (test 1).
  let deadSequenceNumbers = [];
  let lastSequenceNumber = 0;

  before(async () => {
    base = `http://127.0.0.1:${await httpPort(broker)}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"], headless: true });
    context = await browser.newContext({
      viewport: { width: 1280, height: 800 },
      httpCredentials: KEYS_MODE ? { username: SAS_KEY_NAME, password: SAS_KEY_VALUE } : undefined,
    });
    page = await context.newPage();
    page.on("pageerror", (error) => pageErrors.push(`page error: ${error.message}`));
    page.on("console", (message) => {
      // 4xx answers the test provokes are logged by Chromium as failed resources; the page's own
      // script errors are what must not happen.
      if (message.type() === "error" && !/Failed to load resource/.test(message.text())) {
        pageErrors.push(`console error: ${message.text()}`);
      }
    });
  });

  after(async () => {
    await browser?.close();
  });

  // ------------------------------------------------------------------ page helpers

  const entityRow = (entityPath) => page.locator(`tr[data-testid="entity-row"][data-path="${entityPath}"]`);
  const messageRows = () => page.locator('tr[data-testid="message-row"]');

  async function countsOf(entityPath) {
    const row = entityRow(entityPath);
    const counts = {};
    for (const kind of ["active", "dead_letter", "scheduled", "deferred", "transfer_dead_letter"]) {
      counts[kind] = Number((await row.locator(`[data-testid="count-${kind}"]`).textContent({ timeout: 2000 })).trim());
    }
    return counts;
  }

  /** Waits until the entity row shows `expected` (a subset of the counts). */
  async function expectCounts(entityPath, expected) {
    await eventually(`counts of ${entityPath}`, async () => {
      const counts = await countsOf(entityPath);
      const shown = Object.fromEntries(Object.keys(expected).map((kind) => [kind, counts[kind]]));
      assert.deepEqual(shown, expected);
    });
  }

  async function expectText(selector, pattern) {
    await eventually(`${selector} shows ${pattern}`, async () => {
      const locator = page.locator(selector);
      if (!(await locator.isVisible())) {
        const error = page.locator("#error");
        const shown = (await error.isVisible())
          ? ` (#error shows '${(await page.locator("#error-text").textContent()).trim()}')`
          : "";
        assert.fail(`${selector} is not visible${shown}`);
      }
      const text = (await locator.textContent()).trim();
      assert.match(text, pattern);
      return text;
    });
    return (await page.locator(selector).textContent()).trim();
  }

  async function expectMessageRows(count) {
    await eventually(`${count} message rows`, async () => assert.equal(await messageRows().count(), count));
  }

  async function screenshot(name, options = {}) {
    if (!SCREENSHOTS) return;
    mkdirSync(IMAGES, { recursive: true });
    await page.screenshot({ path: path.join(IMAGES, `explorer-${name}.png`), ...options });
  }

  function assertNoPageErrors() {
    assert.deepEqual(pageErrors, [], "the page's script reported errors");
  }

  // ------------------------------------------------------------------ tests

  brokerTest("the entity list shows every entity with the counts the SDK produced", async () => {
    await withClient(broker.connectionString, async (client) => {
      const sender = client.createSender(QUEUE);
      await sender.sendMessages(
        Array.from({ length: SENT }, (_, index) => ({
          messageId: `order-${index}`,
          body: { order: index },
          contentType: "application/json",
          subject: "order",
          applicationProperties: { index, region: index % 2 ? "us" : "eu" },
        })),
      );
      const [scheduled] = await sender.scheduleMessages(
        { messageId: "order-later", body: "later" },
        new Date(Date.now() + 3_600_000),
      );
      lastSequenceNumber = toNumber(scheduled);
      const receiver = client.createReceiver(QUEUE, NO_AUTO_RENEW);
      const dying = await receiveExactly(receiver, DEAD);
      assert.deepEqual(
        dying.map((message) => message.messageId),
        ["order-0", "order-1", "order-2"],
      );
      deadSequenceNumbers = dying.map((message) => toNumber(message.sequenceNumber));
      for (const message of dying) await receiver.abandonMessage(message);
      const [deferred] = await receiveExactly(receiver, DEFERRED);
      assert.equal(deferred.messageId, "order-3");
      await receiver.deferMessage(deferred);

      const topicSender = client.createSender(TOPIC);
      await topicSender.sendMessages(Array.from({ length: EVENTS }, (_, index) => ({ body: `event-${index}` })));
      const sessions = client.createSender("invoices");
      await sessions.sendMessages([
        { body: "invoice 1", sessionId: "customer-17" },
        { body: "invoice 2", sessionId: "customer-42" },
      ]);
    });

    const response = await page.goto(`${base}/explorer/`);
    assert.equal(response.status(), 200);
    assert.equal(await page.title(), "ferrobus explorer");
    await expectCounts(QUEUE, {
      active: ACTIVE_COUNT,
      dead_letter: DEAD,
      scheduled: SCHEDULED,
      deferred: DEFERRED,
      transfer_dead_letter: 0,
    });
    await expectCounts(SUBSCRIPTION, { active: EVENTS, dead_letter: 0 });
    await expectCounts(`${TOPIC}/Subscriptions/audit`, { active: EVENTS });
    await expectCounts("invoices", { active: 2 });

    // Subscriptions follow their topic, indented.
    const order = await page.locator('tr[data-testid="entity-row"]').evaluateAll((rows) =>
      rows.map((row) => `${row.dataset.path}${row.classList.contains("subscription") ? " (sub)" : ""}`),
    );
    assert.deepEqual(order, [
      TOPIC,
      `${TOPIC}/Subscriptions/all (sub)`,
      `${TOPIC}/Subscriptions/audit (sub)`,
      "invoices",
      QUEUE,
      "payments",
    ]);
    const topicCell = await entityRow(SUBSCRIPTION).locator("td").first().boundingBox();
    const queueName = await entityRow(QUEUE).locator("td .name").boundingBox();
    const subscriptionName = await entityRow(SUBSCRIPTION).locator("td .name").boundingBox();
    assert.ok(topicCell && subscriptionName.x > queueName.x, "subscription rows are indented");

    // The filter narrows rows by path (a topic stays above its matching subscription).
    await page.fill("#filter", "audit");
    await eventually("filtered rows", async () =>
      assert.deepEqual(
        await page.locator('tr[data-testid="entity-row"]').evaluateAll((rows) => rows.map((row) => row.dataset.path)),
        [TOPIC, `${TOPIC}/Subscriptions/audit`],
      ),
    );
    await page.fill("#filter", "");
    await page.locator("#filter").blur();
    await eventually("all rows back", async () => assert.equal(await page.locator('tr[data-testid="entity-row"]').count(), 6));

    // Rates come from the totals' change between polls: messages sent now show as In/s.
    await withClient(broker.connectionString, async (client) => {
      await client.createSender("payments").sendMessages(Array.from({ length: 20 }, (_, index) => ({ body: `payment ${index}` })));
    });
    await expectCounts("payments", { active: 20 });
    await eventually("a send rate", async () => {
      const rate = Number((await entityRow("payments").locator("td.rate-in").textContent()).trim());
      assert.ok(rate > 0, `In/s of payments is ${rate}`);
    });
    assert.match((await entityRow(QUEUE).locator("td.rate-in").textContent()).trim(), /^\d+(\.\d)?$/);
    const entitiesCard = await page.locator('section.card[aria-labelledby="entities-title"]').boundingBox();
    await screenshot("entities", { clip: { x: 0, y: 0, width: 1280, height: Math.ceil(entitiesCard.y + entitiesCard.height + 10) } });
    assertNoPageErrors();
  });

  brokerTest("dead letters: reason and detail shown, resubmit brings them back as new messages", async () => {
    await entityRow(QUEUE).click();
    await expectText("#entity-path", new RegExp(`^${QUEUE}$`));
    await expectMessageRows(ACTIVE + DEFERRED + SCHEDULED);

    await page.selectOption("#queue", "dlq");
    await expectMessageRows(DEAD);
    const rows = await messageRows().evaluateAll((elements) =>
      elements.map((row) => ({
        seq: Number(row.dataset.seq),
        text: row.textContent,
        reason: row.querySelector('[data-testid="dead-letter-reason"]').textContent,
      })),
    );
    assert.deepEqual(
      rows.map((row) => row.seq),
      deadSequenceNumbers,
    );
    for (const row of rows) assert.equal(row.reason, "MaxDeliveryCountExceeded");
    assert.ok(await page.locator('[data-testid="dead-letter-reason"]').first().isVisible(), "the reason column is shown");
    assert.match(rows[0].text, /order-0/);

    // One message's detail: system and application properties, pretty JSON body, download.
    await page.locator(`tr[data-testid="message-row"][data-seq="${rows[0].seq}"] td.enqueued`).click();
    await expectText("#message-system", /DeadLetterReason\s*MaxDeliveryCountExceeded/);
    const system = await page.locator("#message-system").textContent();
    assert.match(system, /MessageId\s*order-0/);
    assert.match(system, /ContentType\s*application\/json/);
    const properties = await page.locator("#message-properties").textContent();
    assert.match(properties, /index\s*0/);
    assert.match(properties, /region\s*eu/);
    const body = await page.locator("#message-body").textContent();
    assert.deepEqual(JSON.parse(body), { order: 0 });
    assert.match(body, /\n {2}"order": 0\n/, "JSON bodies are pretty-printed");
    const href = await page.locator("#message-download").getAttribute("href");
    assert.match(href, new RegExp(`^api/message/body\\?path=${QUEUE}&queue=dlq&seq=${rows[0].seq}$`));
    const download = await page.request.get(new URL(href, page.url()).href);
    assert.equal(download.status(), 200);
    assert.match(download.headers()["content-disposition"] || "", /attachment/);
    assert.deepEqual(JSON.parse(await download.text()), { order: 0 });
    await screenshot("messages", { fullPage: true });

    // Resubmit every dead letter, chosen with the select-all box.
    await page.check("#select-all");
    assert.equal(await page.locator("input.select:checked").count(), DEAD);
    await expectText("#selection-count", new RegExp(`^${DEAD} selected$`));
    await page.click("#resubmit-selected");
    await expectText("#notice", new RegExp(`Resubmitted ${DEAD} messages to ${QUEUE}`));
    await expectMessageRows(0);
    await expectCounts(QUEUE, { dead_letter: 0, active: ACTIVE_COUNT + DEAD });

    await withClient(broker.connectionString, async (client) => {
      const receiver = client.createReceiver(QUEUE, NO_AUTO_RENEW);
      const received = await receiveExactly(receiver, ACTIVE + DEAD);
      const back = received.filter((message) => ["order-0", "order-1", "order-2"].includes(message.messageId));
      assert.equal(back.length, DEAD, `received ${received.map((message) => message.messageId)}`);
      assert.ok(lastSequenceNumber >= SENT + SCHEDULED, `the scheduled message's number is ${lastSequenceNumber}`);
      for (const message of back) {
        const index = Number(message.messageId.split("-")[1]);
        assert.deepEqual(message.body, { order: index });
        assert.equal(message.applicationProperties.index, index);
        assert.equal(message.deliveryCount, 0, "a resubmitted message is a new message");
        assert.equal(message.deadLetterReason, undefined);
        assert.ok(
          toNumber(message.sequenceNumber) > lastSequenceNumber,
          `a resubmitted message has a new sequence number (got ${toNumber(message.sequenceNumber)})`,
        );
      }
      for (const message of received) await receiver.completeMessage(message);
      const deadLetters = client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
      assert.equal((await deadLetters.peekMessages(10)).length, 0);
    });
    await expectCounts(QUEUE, { active: DEFERRED, dead_letter: 0, deferred: DEFERRED, scheduled: SCHEDULED });
    assertNoPageErrors();
  });

  brokerTest("the send form's message reaches an SDK receiver with its application properties", async () => {
    await page.click("#tab-send");
    await page.fill("#send-body", '{"hello": "explorer"}');
    await page.fill("#send-content-type", "application/json");
    await page.fill("#send-properties", '{"region": "eu", "priority": 3, "urgent": true}');
    await page.fill("#send-message-id", "from-the-page");
    await page.click("#send");
    await expectText("#notice", new RegExp(`^Sent 1 message to ${QUEUE}\\.( Sequence numbers \\d+\\.)?$`));

    await withClient(broker.connectionString, async (client) => {
      const receiver = client.createReceiver(QUEUE, NO_AUTO_RENEW);
      const [message] = await receiveExactly(receiver, 1);
      assert.equal(message.messageId, "from-the-page");
      assert.equal(message.contentType, "application/json");
      assert.deepEqual(
        { ...message.applicationProperties, priority: Number(message.applicationProperties.priority) },
        { region: "eu", priority: 3, urgent: true },
      );
      const body = Buffer.isBuffer(message.body) ? JSON.parse(message.body.toString("utf8")) : message.body;
      assert.deepEqual(body, { hello: "explorer" });
      await receiver.completeMessage(message);
    });

    // A count sends that many copies (left for the purge test).
    await page.fill("#send-properties", "");
    await page.fill("#send-message-id", "");
    await page.fill("#send-body", "bulk");
    await page.fill("#send-content-type", "text/plain");
    await page.fill("#send-count", "3");
    await page.click("#send");
    await expectText("#notice", new RegExp(`Sent 3 messages to ${QUEUE}`));
    await expectCounts(QUEUE, { active: 3 + DEFERRED, deferred: DEFERRED, scheduled: SCHEDULED });

    // A property text that is not a JSON object is refused by the page before sending.
    await page.fill("#send-properties", "[1, 2]");
    await page.click("#send");
    await expectText("#error", /must be a JSON object/);
    await page.fill("#send-properties", "");
    assertNoPageErrors();
  });

  brokerTest("purge asks for the path and empties the queue, deferred and scheduled messages included", async () => {
    await page.click("#tab-messages");
    await page.selectOption("#queue", "main");
    await expectMessageRows(3 + DEFERRED + SCHEDULED);
    const states = await page.locator('tr[data-testid="message-row"] td.state').allTextContents();
    assert.equal(states.filter((text) => text.startsWith("scheduled")).length, SCHEDULED);
    assert.equal(states.filter((text) => text === "deferred").length, DEFERRED);

    await page.click("#purge");
    await page.fill("#purge-confirm", "order");
    await page.click("#purge-go");
    await expectText("#error", /repeat the entity path/);
    await expectCounts(QUEUE, { active: 3 + DEFERRED });

    await page.fill("#purge-confirm", QUEUE);
    await page.click("#purge-go");
    const total = 3 + DEFERRED + SCHEDULED;
    await expectText("#notice", new RegExp(`Purged ${total} messages from ${QUEUE}`));
    assert.equal(await page.locator("#error").isVisible(), false, "a success clears the earlier error");
    await expectMessageRows(0);
    await expectCounts(QUEUE, { active: 0, dead_letter: 0, scheduled: 0, deferred: 0 });
    await withClient(broker.connectionString, async (client) => {
      assert.equal((await client.createReceiver(QUEUE).peekMessages(10)).length, 0);
    });
    assertNoPageErrors();
  });

  brokerTest("search, paging and the single-message actions (defer, dead-letter, resubmit all, receive, abandon, cancel scheduled)", async () => {
    const PAYMENTS = "payments"; // 20 messages from the first test: "payment 0" … "payment 19"
    await entityRow(PAYMENTS).click();
    await expectText("#entity-path", new RegExp(`^${PAYMENTS}$`));
    await page.selectOption("#queue", "main");
    await page.selectOption("#state", "all");
    await expectMessageRows(20);

    // Body search ("payment 1", "payment 10" … "payment 19").
    await page.fill("#search-body", "payment 1");
    await page.click("#search");
    await expectMessageRows(11);
    await page.click("#search-clear");
    await expectMessageRows(20);

    // Paging: 50 a page, #more continues from `next`.
    await page.click("#tab-send");
    await page.fill("#send-body", "filler");
    await page.fill("#send-content-type", "");
    await page.fill("#send-properties", '{"batch": "filler"}');
    await page.fill("#send-count", "40");
    await page.click("#send");
    await expectText("#notice", /Sent 40 messages to payments/);
    await page.click("#tab-messages");
    await expectMessageRows(50);
    assert.ok(await page.locator("#more").isVisible(), "#more is offered");
    await page.click("#more");
    await expectMessageRows(60);
    assert.equal(await page.locator("#more").isVisible(), false);

    // Property search.
    await page.fill("#search-property", "batch");
    await page.fill("#search-value", "filler");
    await page.click("#search");
    await expectMessageRows(40);
    await page.click("#search-clear");
    await expectMessageRows(50);

    const seqs = await messageRows().evaluateAll((rows) => rows.map((row) => Number(row.dataset.seq)));
    const pick = async (seq) => page.check(`tr[data-testid="message-row"][data-seq="${seq}"] input.select`);

    // Defer two, then dead-letter them from the deferred view.
    await pick(seqs[0]);
    await pick(seqs[1]);
    await page.click("#action-defer");
    await expectText("#notice", /Deferred 2 messages/);
    await expectCounts(PAYMENTS, { deferred: 2, active: 60 });
    await page.selectOption("#state", "deferred");
    await expectMessageRows(2);
    await page.check("#select-all");
    await page.click("#action-dead-letter");
    await expectText("#notice", /Dead-lettered 2 messages/);
    await expectCounts(PAYMENTS, { deferred: 0, dead_letter: 2, active: 58 });

    // Resubmit all dead letters to another entity.
    await page.selectOption("#state", "all");
    await page.selectOption("#queue", "dlq");
    await expectMessageRows(2);
    assert.deepEqual(
      await page.locator('[data-testid="dead-letter-reason"]').allTextContents(),
      ["ExplorerDeadLettered", "ExplorerDeadLettered"],
    );
    // A target that refuses them (a session queue, and they have no session id): they stay.
    await page.fill("#resubmit-target", "invoices");
    await page.click("#resubmit-all");
    await expectText("#error", /SessionId/);
    await page.click("#refresh-messages");
    await expectMessageRows(2);
    assert.equal(await page.locator('tr[data-testid="message-row"] td.locked:text("locked")').count(), 0);
    await expectCounts(PAYMENTS, { dead_letter: 2 });
    await page.fill("#resubmit-target", QUEUE);
    await page.click("#resubmit-all");
    await expectText("#notice", new RegExp(`Resubmitted 2 messages to ${QUEUE}`));
    await expectMessageRows(0);
    await expectCounts(PAYMENTS, { dead_letter: 0 });
    await expectCounts(QUEUE, { active: 2 });
    await page.fill("#resubmit-target", "");

    // Receive (and delete) one; abandon one (its delivery count goes up).
    await page.selectOption("#queue", "main");
    await expectMessageRows(50);
    await pick(seqs[2]);
    await page.click("#action-receive");
    await expectText("#notice", /Received and deleted 1 message\./);
    await expectCounts(PAYMENTS, { active: 57 });
    await pick(seqs[3]);
    await page.click("#action-abandon");
    await expectText("#notice", /Abandoned 1 message\./);
    await eventually("delivery count 1", async () =>
      assert.equal(
        (await page.locator(`tr[data-testid="message-row"][data-seq="${seqs[3]}"] td.delivery-count`).textContent()).trim(),
        "1",
      ),
    );

    // Schedule one through the send form and cancel it.
    await page.click("#tab-send");
    const inAnHour = await page.evaluate(() => {
      const at = new Date(Date.now() + 3_600_000);
      const pad = (number) => String(number).padStart(2, "0");
      return (
        `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T` +
        `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`
      );
    });
    await page.fill("#send-properties", "");
    await page.fill("#send-count", "1");
    await page.fill("#send-body", "later");
    await page.fill("#send-scheduled", inAnHour);
    await page.click("#send");
    await expectText("#notice", /Sent 1 message to payments\. Scheduled as \d+\./);
    await page.fill("#send-scheduled", "");
    await expectCounts(PAYMENTS, { scheduled: 1 });
    await page.click("#tab-messages");
    await page.selectOption("#state", "scheduled");
    await expectMessageRows(1);
    await page.check("#select-all");
    await page.click("#action-cancel-scheduled");
    await expectText("#notice", /Cancelled 1 message\./);
    await expectCounts(PAYMENTS, { scheduled: 0, active: 57 });
    await page.selectOption("#state", "all");
    assertNoPageErrors();
  });

  brokerTest("entity definitions: errors show in #error; create, change and delete (with the path typed)", async () => {
    await page.click("#new-entity");
    await page.fill("#definition", '[[queues]\nname = "broken');
    await page.click("#create");
    const error = await expectText("#error", /\S/);
    assert.ok(error.length > 10, `a readable error, got '${error}'`);

    await page.fill("#definition", '[[queues]]\nname = "created-by-page"\nmax_delivery_count = 5\n');
    await page.click("#create");
    await expectText("#notice", /Created created-by-page/);
    await eventually("new row", async () => assert.equal(await entityRow("created-by-page").count(), 1));
    await expectText("#entity-path", /^created-by-page$/);

    await page.click("#tab-definition");
    await eventually("definition loaded", async () =>
      assert.match(await page.inputValue("#entity-definition"), /max_delivery_count = 5/),
    );
    const definition = await page.inputValue("#entity-definition");
    await page.fill("#entity-definition", definition.replace("max_delivery_count = 5", "max_delivery_count = 7"));
    await delay(2500); // a poll while the definition is being edited leaves the editor alone
    assert.match(await page.inputValue("#entity-definition"), /max_delivery_count = 7/);
    await page.click("#save-entity");
    await expectText("#notice", /Saved created-by-page/);
    const saved = await page.evaluate(async () => (await fetch("api/entity?path=created-by-page")).json());
    assert.match(saved.definition, /max_delivery_count = 7/);

    // An invalid change is refused with the API's error, and the entity stays as it was.
    await page.fill("#entity-definition", '[[queues]]\nname = "renamed"\n');
    await page.click("#save-entity");
    await expectText("#error", /renamed/);

    await page.click("#delete-entity");
    await page.fill("#delete-confirm", "created");
    await page.click("#delete-go");
    await expectText("#error", /type its path/);
    assert.equal(await entityRow("created-by-page").count(), 1);
    await page.fill("#delete-confirm", "created-by-page");
    await page.click("#delete-go");
    await expectText("#notice", /Deleted created-by-page/);
    await eventually("row removed", async () => assert.equal(await entityRow("created-by-page").count(), 0));
    assert.equal(await page.locator("#entity-view").isVisible(), false);
    assertNoPageErrors();
  });

  brokerTest(
    "with keys configured the explorer asks for HTTP Basic credentials",
    async () => {
      const anonymous = await fetch(`${base}/explorer/api/entities`);
      assert.equal(anonymous.status, 401);
      assert.match(anonymous.headers.get("www-authenticate") || "", /^Basic /);
      assert.match((await anonymous.json()).error, /\S/);
      const wrong = await fetch(`${base}/explorer/`, {
        headers: { Authorization: `Basic ${Buffer.from(`${SAS_KEY_NAME}:not-the-key`).toString("base64")}` },
      });
      assert.equal(wrong.status, 401);

      // A key that stops working while the page is open: the API's own 401 answer (captured
      // above, without the challenge header, so Chromium does not answer it) shows in #error.
      const refusal = await (await fetch(`${base}/explorer/api/entities`)).text();
      const lapsed = await browser.newContext({
        httpCredentials: { username: SAS_KEY_NAME, password: SAS_KEY_VALUE },
      });
      try {
        const lapsedPage = await lapsed.newPage();
        await lapsedPage.route("**/explorer/api/**", (route) =>
          route.fulfill({ status: 401, headers: { "content-type": "application/json" }, body: refusal }),
        );
        await lapsedPage.goto(`${base}/explorer/`);
        await eventually("401 shown", async () => {
          assert.ok(await lapsedPage.locator("#error").isVisible());
          assert.equal((await lapsedPage.locator("#error-text").textContent()).trim(), JSON.parse(refusal).error);
          assert.match(await lapsedPage.locator("#status").textContent(), /Not authorized/);
        });
      } finally {
        await lapsed.close();
      }
    },
    { skip: KEYS_MODE ? false : "keys mode only (FERROBUS_TEST_AUTH=keys)" },
  );
}

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
