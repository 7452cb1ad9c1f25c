// Rules changed at run time through the unmodified @azure/service-bus ServiceBusRuleManager
// survive kill -9 of a durable broker (issue 11): the rule set after the restart is the one
// the client left, and messages are filtered by it. Run-time changes win over the rules in
// the configuration file (docs/storage.md).

import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import {
  Broker,
  TEST_TIMEOUT_MS,
  assertNothingToReceive,
  receiveExactly,
  scratchDir,
  topicToml,
  withClient,
} from "./harness.js";

const CONFIG = topicToml("js-durable-rules", ["filtered", "all"]);

async function ruleNames(client) {
  const names = [];
  for await (const rule of client.createRuleManager("js-durable-rules", "filtered").listRules()) {
    if (rule !== undefined) names.push(rule.name);
  }
  return names.sort();
}

test("rules changed by a rule manager survive kill -9", { timeout: TEST_TIMEOUT_MS }, async () => {
  const dataDir = path.join(scratchDir("ferrobus-js-durable-"), "data");
  let broker = new Broker(CONFIG, dataDir);
  await broker.start();
  try {
    await withClient(broker.connectionString, async (client) => {
      const rules = client.createRuleManager("js-durable-rules", "filtered");
      await rules.createRule("red", { sqlExpression: "color = 'red'" });
      await rules.createRule("order", { correlationId: "order-7", applicationProperties: { region: "eu" } });
      await rules.deleteRule("$Default");
      assert.deepEqual(await ruleNames(client), ["order", "red"]);
    });
    await broker.kill();
    broker = new Broker(CONFIG, dataDir);
    await broker.start();
    await withClient(broker.connectionString, async (client) => {
      assert.deepEqual(await ruleNames(client), ["order", "red"], "the rule set after the restart");
      const sender = client.createSender("js-durable-rules");
      await sender.sendMessages([
        { body: "red", messageId: "red", applicationProperties: { color: "red" } },
        { body: "blue", messageId: "blue", applicationProperties: { color: "blue" } },
        { body: "order", messageId: "order", correlationId: "order-7", applicationProperties: { region: "eu" } },
      ]);
      await sender.close();
      const filtered = client.createReceiver("js-durable-rules", "filtered", { receiveMode: "receiveAndDelete" });
      const got = await receiveExactly(filtered, 2);
      assert.deepEqual(got.map((message) => message.messageId).sort(), ["order", "red"]);
      await assertNothingToReceive(filtered);
      await filtered.close();
      // The other subscription kept its configured $Default rule.
      const all = client.createReceiver("js-durable-rules", "all", { receiveMode: "receiveAndDelete" });
      assert.equal((await receiveExactly(all, 3)).length, 3);
      await all.close();
    });
  } finally {
    await broker.stop();
  }
});
