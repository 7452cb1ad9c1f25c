// SQL filter and action parameters (issue 45) through the unmodified @azure/service-bus 7.9.5.
//
// The administration client sends `sqlParameters` in the ATOM rule description
// (KeyValueOfstringanyType entries; every JavaScript number as `double`, Dates as `dateTime`) and
// reads them back typed. The AMQP rule manager (`ServiceBusRuleManager`, `$management` add-rule /
// enumerate-rules) sends only a filter's expression: 7.9.5 drops `sqlParameters` on the way out
// and reads only the expression back (wire contract §6.4). So a rule manager's rule that uses a
// parameter is refused, naming it (as the service refuses an undefined parameter), and a
// parametrized rule made through the admin client lists through the rule manager and filters
// what its receivers get.
//
// Every test starts its own broker on a temporary data directory (the admin client trusts the
// development CA written there); both auth modes apply.

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { ServiceBusAdministrationClient } from "@azure/service-bus";
import { Broker, TEST_TIMEOUT_MS, receiveExactly, uniqueId, withClient } from "./harness.js";

const HANG_TIMEOUT_MS = TEST_TIMEOUT_MS - 5_000;
const MARKER = "marker";

/** Registers a test with a durable broker of its own: `fn({ broker, admin })`. */
function parametersTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async () => {
    const root = mkdtempSync(path.join(tmpdir(), "ferrobus-js-parameters-"));
    const dataDir = path.join(root, "data");
    const broker = new Broker("", dataDir);
    let hangTimer;
    try {
      await broker.start();
      const caPath = path.join(dataDir, "dev-ca.pem");
      assert.ok(existsSync(caPath), "the development CA is written to <data_dir>/dev-ca.pem");
      const admin = new ServiceBusAdministrationClient(broker.connectionString, {
        tlsOptions: { ca: readFileSync(caPath, "utf8") },
        retryOptions: { maxRetries: 0 },
      });
      const hang = new Promise((_, reject) => {
        hangTimer = setTimeout(
          () => reject(new Error(`test body did not finish within ${HANG_TIMEOUT_MS} ms (an operation hung)`)),
          HANG_TIMEOUT_MS,
        );
      });
      await Promise.race([fn({ broker, admin }), hang]);
    } catch (error) {
      if (error && typeof error === "object") {
        try {
          error.message = `${error.message}\n--- ferrobus stderr tail (port ${broker.port}) ---\n${broker.logTail(40)}`;
        } catch {
          // a read-only message is reported unchanged
        }
      }
      throw error;
    } finally {
      clearTimeout(hangTimer);
      await broker.stop();
      rmSync(root, { recursive: true, force: true });
    }
  });
}

/** A new topic with one subscription "sub" whose `$Default` rule is gone. */
async function topicWithSubscription(admin) {
  const topic = uniqueId("js-params");
  await admin.createTopic(topic);
  await admin.createSubscription(topic, "sub");
  await admin.deleteRule(topic, "sub", "$Default");
  return topic;
}

const withMarker = (expression) => `(${expression}) OR marker = 1`;

/**
 * Sends `messages` and then a marker every rule here passes; receives up to and including the
 * marker. A subscription keeps the topic's order, so what arrives before the marker is exactly
 * what the rules let through.
 */
async function publishAndReceive(client, topic, messages, expected) {
  const sender = client.createSender(topic);
  await sender.sendMessages([...messages, { body: MARKER, messageId: MARKER, applicationProperties: { marker: 1 } }]);
  const receiver = client.createReceiver(topic, "sub", { receiveMode: "receiveAndDelete" });
  const received = await receiveExactly(receiver, expected + 1);
  assert.equal(received.at(-1).messageId, MARKER, `the marker comes last: ${received.map((m) => m.messageId)}`);
  return received.slice(0, -1);
}

async function collect(iterator) {
  const items = [];
  for await (const item of iterator) {
    // @azure/core-paging yields `undefined` for an empty first page (an SDK quirk).
    if (item !== undefined) items.push(item);
  }
  return items;
}

const AT = new Date("2024-05-06T07:08:09.123Z");
const FILTER_PARAMETERS = { "@color": "red", "@n": 3, "@ratio": 0.25, "@on": true, "@at": AT };
const FILTER_EXPRESSION = "color = @color AND n = @n AND ratio = @ratio AND on = @on AND at = @at";

parametersTest("admin createRule with sqlParameters: read back typed by getRule and listRules, applied", async ({ broker, admin }) => {
  const topic = await topicWithSubscription(admin);
  const created = await admin.createRule(
    topic,
    "sub",
    "typed",
    { sqlExpression: withMarker(FILTER_EXPRESSION), sqlParameters: FILTER_PARAMETERS },
    { sqlExpression: "SET tag = @tag", sqlParameters: { "@tag": "routed" } },
  );
  assert.deepEqual(created.filter.sqlParameters, FILTER_PARAMETERS);
  const fetched = await admin.getRule(topic, "sub", "typed");
  assert.equal(fetched.filter.sqlExpression, withMarker(FILTER_EXPRESSION));
  assert.deepEqual(fetched.filter.sqlParameters, FILTER_PARAMETERS);
  assert.ok(fetched.filter.sqlParameters["@at"] instanceof Date, "a dateTime reads back as a Date");
  assert.equal(fetched.action.sqlExpression, "SET tag = @tag");
  assert.deepEqual(fetched.action.sqlParameters, { "@tag": "routed" });
  const [listed] = await collect(admin.listRules(topic, "sub"));
  assert.equal(listed.name, "typed");
  assert.deepEqual(listed.filter.sqlParameters, FILTER_PARAMETERS);

  await withClient(broker.connectionString, async (client) => {
    const matching = { color: "red", n: 3, ratio: 0.25, on: true, at: AT };
    const received = await publishAndReceive(
      client,
      topic,
      [
        { body: "match", messageId: "match", applicationProperties: matching },
        { body: "n", messageId: "n", applicationProperties: { ...matching, n: 4 } },
        { body: "color", messageId: "color", applicationProperties: { ...matching, color: "blue" } },
        {
          body: "at",
          messageId: "at",
          applicationProperties: { ...matching, at: new Date("2024-05-06T07:08:09.124Z") },
        },
      ],
      1,
    );
    assert.deepEqual(
      received.map((message) => message.messageId),
      ["match"],
    );
    assert.equal(received[0].applicationProperties.tag, "routed", "the action's parameter was applied");
  });
});

parametersTest("an undefined parameter is refused with a 400 naming it, by the admin client", async ({ admin }) => {
  const topic = await topicWithSubscription(admin);
  let caught;
  try {
    await admin.createRule(topic, "sub", "missing", { sqlExpression: "a = @missing", sqlParameters: { "@other": 1 } });
  } catch (error) {
    caught = error;
  }
  assert.ok(caught, "a rule using an undefined parameter is refused");
  assert.equal(caught.statusCode, 400, caught.message);
  assert.match(caught.message, /@missing/);
  assert.deepEqual(await collect(admin.listRules(topic, "sub")), []);
});

parametersTest("the AMQP rule manager: a parameter it cannot send is refused by name; admin-made parametrized rules list and filter", async ({ broker, admin }) => {
  const topic = await topicWithSubscription(admin);
  await withClient(broker.connectionString, async (client) => {
    const ruleManager = client.createRuleManager(topic, "sub");
    let refused;
    try {
      await ruleManager.createRule("by-amqp", {
        sqlExpression: withMarker("color = @color"),
        sqlParameters: { "@color": "red" },
      });
    } catch (error) {
      refused = error;
    }
    if (refused) {
      // 7.9.5 sends the expression alone: the broker names the parameter it lacks.
      assert.match(refused.message, /@color/);
    } else {
      // An SDK that sends `sql-parameters` gets the rule with its value.
      await ruleManager.deleteRule("by-amqp");
    }

    await admin.createRule(
      topic,
      "sub",
      "by-admin",
      { sqlExpression: withMarker("color = @color AND n > @n"), sqlParameters: { "@color": "red", "@n": 2 } },
      { sqlExpression: "SET tag = @tag", sqlParameters: { "@tag": "amqp-listed" } },
    );
    // enumerate-rules carries the parameters beside the expression; the SDK reads the expression.
    const rules = await collect(ruleManager.listRules());
    assert.deepEqual(
      rules.map((rule) => [rule.name, rule.filter.sqlExpression, rule.action.sqlExpression]),
      [["by-admin", withMarker("color = @color AND n > @n"), "SET tag = @tag"]],
    );
    const received = await publishAndReceive(
      client,
      topic,
      [
        { body: "big-red", messageId: "big-red", applicationProperties: { color: "red", n: 3 } },
        { body: "small-red", messageId: "small-red", applicationProperties: { color: "red", n: 2 } },
        { body: "big-blue", messageId: "big-blue", applicationProperties: { color: "blue", n: 3 } },
      ],
      1,
    );
    assert.deepEqual(
      received.map((message) => message.messageId),
      ["big-red"],
    );
    assert.equal(received[0].applicationProperties.tag, "amqp-listed");
  });
});
