// The explorer's cluster card on a three-node cluster (harness.js ClusterBroker), driven in
// headless Chromium (playwright-core with Debian's /usr/bin/chromium): opened through a
// follower, it lists the three nodes with the leader marked and every node caught up; "Make
// leader" on another node's row moves the leadership there (the card, and every node's /health,
// then name it); a message the unmodified @azure/service-bus SDK sent before the move is
// received after it. Both auth modes (FERROBUS_TEST_AUTH=keys: the browser context answers the
// Basic challenge with the connection string's key). docs/explorer.md, docs/cluster.md.
//
// Skipped (with the reason) when /usr/bin/chromium or playwright-core is not installed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ClusterBroker, KEYS_MODE, SAS_KEY_NAME, SAS_KEY_VALUE, eventually, queueToml, receiveExactly, withClient } from "./harness.js";
import { CHROMIUM, SKIP_REASON, chromium } from "./browser.js";


const QUEUE = "orders";
const WAIT_MS = 20_000;

test("the explorer's cluster card moves the leadership", { skip: SKIP_REASON, timeout: 120_000 }, async () => {
  const broker = new ClusterBroker(queueToml(QUEUE));
  await broker.start();
  let browser;
  const pageErrors = [];
  try {
    const first = broker.leader;
    await withClient(broker.connectionString, async (client) => {
      const sender = client.createSender(QUEUE);
      await sender.sendMessages({ body: "before the move", messageId: "before-move" });
      await sender.close();
    });

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"], headless: true });
    const context = await browser.newContext({
      httpCredentials: KEYS_MODE ? { username: SAS_KEY_NAME, password: SAS_KEY_VALUE } : undefined,
    });
    const page = await context.newPage();
    page.on("pageerror", (error) => pageErrors.push(`page error: ${error.message}`));
    await page.goto(`http://${broker.host}:${broker.port}/explorer/`);
    await page.locator("#cluster-card").waitFor({ state: "visible", timeout: WAIT_MS });
    const rows = page.locator("#cluster-nodes tbody tr");
    await eventually("three nodes, the leader marked, every follower caught up", async () => {
      assert.equal(await rows.count(), 3);
      const roles = await rows.locator("td:nth-child(2)").allTextContents();
      const lags = await rows.locator("td:nth-child(4)").allTextContents();
      assert.deepEqual(roles.toSorted(), ["leader", "voter", "voter"]);
      assert.deepEqual(lags, ["0", "0", "0"]);
      assert.equal(await page.locator(`#cluster-nodes tr[data-key="${first}"] td:nth-child(2)`).textContent(), "leader");
    }, WAIT_MS);
    assert.ok(
      await page.locator(`#cluster-nodes button[data-cluster-action="leader"][data-node="${first}"]`).isHidden(),
      "the leader has no Make leader button",
    );

    const target = [1, 2, 3].find((node) => node !== first);
    await page.locator(`#cluster-nodes button[data-cluster-action="leader"][data-node="${target}"]`).click();
    await eventually("the notice names the new leader", async () => {
      assert.match(await page.locator("#notice").textContent(), new RegExp(`node ${target}`));
    }, WAIT_MS);
    const leader = await broker.waitForLeader(WAIT_MS, first);
    assert.equal(leader, target, "every node names the node chosen in the page");
    await eventually("the card names the new leader", async () => {
      assert.match(await page.locator("#cluster-summary").textContent(), new RegExp(`node ${target} leads`));
    }, WAIT_MS);

    // Nothing acknowledged is lost with the move.
    await broker.waitServing();
    await withClient(broker.connectionString, async (client) => {
      const receiver = client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
      const received = await receiveExactly(receiver, 1, WAIT_MS);
      assert.deepEqual(
        received.map((message) => message.messageId),
        ["before-move"],
      );
      await receiver.close();
    });
    assert.deepEqual(pageErrors, []);
  } catch (error) {
    error.message = `${error.message}\n${broker.nodeLogs(30)}`;
    throw error;
  } finally {
    await browser?.close();
    await broker.stop();
  }
});
