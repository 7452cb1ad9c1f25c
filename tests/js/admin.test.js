// The administration REST API (ATOM/XML) through the unmodified ServiceBusAdministrationClient of
// @azure/service-bus 7.9.5, against the data-plane connection string's host and port: the AMQP
// port answers HTTPS with a development certificate signed by the CA a durable broker writes to
// <data_dir>/dev-ca.pem. The client trusts it through its `tlsOptions.ca` option (the JS
// equivalent of Python's `connection_verify`); one test runs the client in a child process that
// trusts it through NODE_EXTRA_CA_CERTS instead, the way a user's unmodified program would.
//
// Mirrors tests/python/test_sdk_admin.py. Every test starts its own broker on a temporary data
// directory (so the CA exists) with an empty configuration and creates what it uses. Runs in
// both auth modes: without keys any token is accepted; with keys (FERROBUS_TEST_AUTH=keys) the
// SDK's SAS token is checked and a wrong key is refused with 401.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { ServiceBusAdministrationClient } from "@azure/service-bus";
import {
  Broker,
  KEYS_MODE,
  SAS_KEY_NAME,
  TEST_TIMEOUT_MS,
  assertNothingToReceive,
  assertServiceBusError,
  receiveExactly,
  uniqueId,
  withClient,
} from "./harness.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
// The SDK version in use (the suite also runs against the newest: scripts/test-newest-sdks).
const SDK_VERSION = JSON.parse(
  readFileSync(path.join(HERE, "node_modules", "@azure", "service-bus", "package.json"), "utf8"),
).version;
const HANG_TIMEOUT_MS = TEST_TIMEOUT_MS - 5_000;
// No entities in the configuration file: every test creates what it uses.
const EMPTY_CONFIG = "";

/** An administration client that trusts the broker's development CA; no retries, so the first
 * failure is the one reported. */
function adminClient(connectionStringValue, caPath) {
  return new ServiceBusAdministrationClient(connectionStringValue, {
    tlsOptions: { ca: readFileSync(caPath, "utf8") },
    retryOptions: { maxRetries: 0 },
  });
}

/**
 * Registers a test with a broker of its own: durable, on a temporary data directory, stopped at
 * the end. `fn({ broker, caPath, admin })`. A failure carries the broker's stderr tail.
 */
function adminTest(name, fn, { skip = false } = {}) {
  test(name, { timeout: TEST_TIMEOUT_MS, skip }, async () => {
    const root = mkdtempSync(path.join(tmpdir(), "ferrobus-js-admin-"));
    const dataDir = path.join(root, "data");
    const broker = new Broker(EMPTY_CONFIG, dataDir);
    let hangTimer;
    try {
      await broker.start();
      const caPath = path.join(dataDir, "dev-ca.pem");
      assert.ok(existsSync(caPath), "the development CA is written to <data_dir>/dev-ca.pem at start");
      const hang = new Promise((_, reject) => {
        hangTimer = setTimeout(
          () => reject(new Error(`test body did not finish within ${HANG_TIMEOUT_MS} ms (an operation hung)`)),
          HANG_TIMEOUT_MS,
        );
      });
      await Promise.race([fn({ broker, caPath, admin: adminClient(broker.connectionString, caPath) }), hang]);
    } catch (error) {
      if (error && typeof error === "object") {
        try {
          error.message =
            `${error.message}\n--- ferrobus stderr tail (port ${broker.port}, full log ${broker.logPath}) ---\n` +
            broker.logTail(40);
        } catch {
          // some error objects have a read-only message; report them unchanged
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

/** Awaits `promise`, asserting it rejects with a RestError of `statusCode` and `code`. */
async function assertRestError(promise, statusCode, code) {
  let caught;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  assert.ok(caught, `expected a RestError ${statusCode} ${code}, but the operation succeeded`);
  assert.ok(
    caught?.name === "RestError",
    `expected a RestError ${statusCode} ${code}, got ${caught?.name}: ${caught?.message}`,
  );
  assert.equal(caught.statusCode, statusCode, `wrong status; message: ${caught.message}`);
  assert.equal(caught.code, code, `wrong code; message: ${caught.message}`);
  return caught;
}

async function collect(iterator) {
  const items = [];
  for await (const item of iterator) items.push(item);
  return items;
}

async function queueNames(admin) {
  return (await collect(admin.listQueues())).map((queue) => queue.name);
}

adminTest("queues: create with options, get, list, update, exists, delete, 409 and 404", async ({ admin }) => {
  const name = uniqueId("adminq");
  const created = await admin.createQueue(name, {
    maxDeliveryCount: 4,
    lockDuration: "PT30S",
    defaultMessageTimeToLive: "PT1H",
    deadLetteringOnMessageExpiration: true,
  });
  assert.equal(created.name, name);
  assert.equal(created.maxDeliveryCount, 4);
  assert.equal(created.lockDuration, "PT30S");
  assert.equal(created.defaultMessageTimeToLive, "PT1H");
  assert.equal(created.deadLetteringOnMessageExpiration, true);
  assert.equal(created.status, "Active");

  const fetched = await admin.getQueue(name);
  assert.equal(fetched.name, name);
  assert.equal(fetched.maxDeliveryCount, 4);
  assert.equal(fetched.lockDuration, "PT30S");
  assert.equal(fetched.defaultMessageTimeToLive, "PT1H");
  assert.equal(fetched.deadLetteringOnMessageExpiration, true);
  assert.equal(fetched.requiresSession, false);

  const existing = await assertRestError(admin.createQueue(name), 409, "MessageEntityAlreadyExistsError");
  assert.ok(existing.message.length > 0);
  await assertRestError(admin.getQueue(uniqueId("missing")), 404, "MessageEntityNotFoundError");
  assert.equal(await admin.queueExists(name), true);
  assert.equal(await admin.queueExists(uniqueId("missing")), false);

  const other = uniqueId("adminq-other");
  await admin.createQueue(other);
  assert.deepEqual((await queueNames(admin)).sort(), [name, other].sort(), "the async iterator lists every queue");
  const pageNames = [];
  for await (const page of admin.listQueues().byPage()) pageNames.push(...page.map((queue) => queue.name));
  assert.deepEqual(pageNames.sort(), [name, other].sort(), "byPage() lists every queue");

  fetched.maxDeliveryCount = 7;
  fetched.lockDuration = "PT45S";
  const updated = await admin.updateQueue(fetched);
  assert.equal(updated.maxDeliveryCount, 7);
  assert.equal(updated.lockDuration, "PT45S");
  const reread = await admin.getQueue(name);
  assert.equal(reread.maxDeliveryCount, 7);
  assert.equal(reread.lockDuration, "PT45S");
  assert.equal(reread.defaultMessageTimeToLive, "PT1H", "an update keeps what it did not change");
  assert.equal(reread.deadLetteringOnMessageExpiration, true);

  await admin.deleteQueue(name);
  assert.equal(await admin.queueExists(name), false);
  await assertRestError(admin.getQueue(name), 404, "MessageEntityNotFoundError");
  await assertRestError(admin.deleteQueue(name), 404, "MessageEntityNotFoundError");
  assert.deepEqual(await queueNames(admin), [other]);
});

adminTest("listQueues().byPage follows the feed's next link to the last page", async ({ admin }) => {
  const names = [uniqueId("pageq"), uniqueId("pageq"), uniqueId("pageq")].sort();
  for (const name of names) await admin.createQueue(name);
  const pages = [];
  for await (const page of admin.listQueues().byPage({ maxPageSize: 2 })) {
    pages.push(page.map((queue) => queue.name));
  }
  assert.deepEqual(
    pages.map((page) => page.length),
    [2, 1],
    `byPage({ maxPageSize: 2 }) over three queues gives pages of 2 and 1, got ${JSON.stringify(pages)}`,
  );
  assert.deepEqual(pages.flat().sort(), names);
  // A page started at a continuation token (the SDK's $skip) holds the rest.
  const rest = [];
  for await (const page of admin.listQueues().byPage({ maxPageSize: 2, continuationToken: "2" })) {
    rest.push(...page.map((queue) => queue.name));
  }
  assert.equal(rest.length, 1);
  assert.ok(names.includes(rest[0]));
});

adminTest("queue runtime properties follow sends, schedules, completions and dead-lettering", async ({ broker, admin }) => {
  const name = uniqueId("runtimeq");
  await admin.createQueue(name);
  const empty = await admin.getQueueRuntimeProperties(name);
  assert.equal(empty.name, name);
  assert.equal(empty.activeMessageCount, 0);
  assert.equal(empty.totalMessageCount, 0);

  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(name);
    await sender.sendMessages([0, 1, 2, 3, 4].map((index) => ({ body: `m${index}`, messageId: `m${index}` })));
    await sender.scheduleMessages({ body: "later" }, new Date(Date.now() + 3_600_000));
    const receiver = client.createReceiver(name, { maxAutoLockRenewalDurationInMs: 0 });
    const [first, second] = await receiveExactly(receiver, 2);
    await receiver.completeMessage(first);
    await receiver.deadLetterMessage(second, { deadLetterReason: "bad", deadLetterErrorDescription: "test" });
  });

  const runtime = await admin.getQueueRuntimeProperties(name);
  assert.equal(runtime.name, name);
  assert.equal(runtime.activeMessageCount, 3);
  assert.equal(runtime.deadLetterMessageCount, 1);
  assert.equal(runtime.scheduledMessageCount, 1);
  assert.equal(runtime.transferMessageCount, 0);
  assert.equal(runtime.transferDeadLetterMessageCount, 0);
  assert.equal(runtime.totalMessageCount, 5);
  assert.ok(runtime.sizeInBytes > 0, `sizeInBytes ${runtime.sizeInBytes}`);
  assert.ok(runtime.createdAt instanceof Date, `createdAt ${runtime.createdAt}`);
  assert.ok(runtime.createdAt <= runtime.modifiedAt, "createdAt <= modifiedAt");

  const listed = await collect(admin.listQueuesRuntimeProperties());
  const mine = listed.find((queue) => queue.name === name);
  assert.ok(mine, `listQueuesRuntimeProperties lists ${name}: ${JSON.stringify(listed.map((q) => q.name))}`);
  assert.equal(mine.activeMessageCount, 3);
  assert.equal(mine.deadLetterMessageCount, 1);
  assert.equal(mine.scheduledMessageCount, 1);
});

adminTest("topics, subscriptions and rules: created, listed, filtering, deleted", async ({ broker, admin }) => {
  const topic = uniqueId("admint");
  const createdTopic = await admin.createTopic(topic, { defaultMessageTimeToLive: "PT30M" });
  assert.equal(createdTopic.name, topic);
  assert.equal(createdTopic.defaultMessageTimeToLive, "PT30M");
  assert.equal(await admin.topicExists(topic), true);

  const red = await admin.createSubscription(topic, "red", { maxDeliveryCount: 3 });
  assert.equal(red.topicName, topic);
  assert.equal(red.subscriptionName, "red");
  assert.equal(red.maxDeliveryCount, 3);
  await admin.createSubscription(topic, "all");
  const blue = await admin.createSubscription(topic, "blue", {
    defaultRuleOptions: { name: "only-blue", filter: { sqlExpression: "color = 'blue'" } },
  });
  assert.equal(blue.subscriptionName, "blue");
  await assertRestError(admin.createSubscription(topic, "all"), 409, "MessageEntityAlreadyExistsError");

  const subscriptions = await collect(admin.listSubscriptions(topic));
  assert.deepEqual(subscriptions.map((s) => s.subscriptionName).sort(), ["all", "blue", "red"]);
  assert.ok(subscriptions.every((s) => s.topicName === topic));
  const fetchedRed = await admin.getSubscription(topic, "red");
  assert.equal(fetchedRed.subscriptionName, "red");
  assert.equal(fetchedRed.maxDeliveryCount, 3);
  assert.equal(await admin.subscriptionExists(topic, "red"), true);
  assert.equal(await admin.subscriptionExists(topic, "nope"), false);

  // The subscription made with defaultRuleOptions has that rule instead of $Default.
  const blueRules = await collect(admin.listRules(topic, "blue"));
  assert.deepEqual(blueRules.map((rule) => rule.name), ["only-blue"]);
  assert.equal(blueRules[0].filter.sqlExpression, "color = 'blue'");

  const defaultRule = await admin.getRule(topic, "all", "$Default");
  assert.equal(defaultRule.name, "$Default");
  assert.equal(defaultRule.filter.sqlExpression, "1=1", "the default rule is the true filter");

  await admin.deleteRule(topic, "red", "$Default");
  await assertRestError(admin.getRule(topic, "red", "$Default"), 404, "MessageEntityNotFoundError");
  const sqlRule = await admin.createRule(
    topic,
    "red",
    "sql",
    { sqlExpression: "color = 'red'" },
    { sqlExpression: "SET sys.Label = 'painted'" },
  );
  assert.equal(sqlRule.name, "sql");
  assert.equal(sqlRule.filter.sqlExpression, "color = 'red'");
  assert.equal(sqlRule.action.sqlExpression, "SET sys.Label = 'painted'");
  const correlationRule = await admin.createRule(topic, "red", "corr", {
    subject: "crimson",
    applicationProperties: { shade: "dark" },
  });
  assert.equal(correlationRule.name, "corr");
  assert.equal(correlationRule.filter.subject, "crimson");
  assert.deepEqual(correlationRule.filter.applicationProperties, { shade: "dark" });
  await assertRestError(
    admin.createRule(topic, "red", "sql", { sqlExpression: "1=1" }),
    409,
    "MessageEntityAlreadyExistsError",
  );
  const doomed = await admin.createRule(topic, "red", "doomed", { sqlExpression: "1=1" });
  assert.equal(doomed.name, "doomed");

  const rules = Object.fromEntries((await collect(admin.listRules(topic, "red"))).map((rule) => [rule.name, rule]));
  assert.deepEqual(Object.keys(rules).sort(), ["corr", "doomed", "sql"]);
  assert.equal(rules.sql.filter.sqlExpression, "color = 'red'");
  assert.equal(rules.sql.action.sqlExpression, "SET sys.Label = 'painted'");
  assert.equal(rules.corr.filter.subject, "crimson");
  assert.deepEqual(rules.corr.filter.applicationProperties, { shade: "dark" });
  const fetchedCorr = await admin.getRule(topic, "red", "corr");
  assert.equal(fetchedCorr.filter.subject, "crimson");
  assert.deepEqual(fetchedCorr.filter.applicationProperties, { shade: "dark" });
  assert.equal(await admin.ruleExists(topic, "red", "doomed"), true);
  await admin.deleteRule(topic, "red", "doomed");
  assert.equal(await admin.ruleExists(topic, "red", "doomed"), false);
  await assertRestError(admin.deleteRule(topic, "red", "doomed"), 404, "MessageEntityNotFoundError");

  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(topic);
    await sender.sendMessages([
      { body: "r", messageId: "r", applicationProperties: { color: "red" } },
      { body: "b", messageId: "b", applicationProperties: { color: "blue" } },
      { body: "c", messageId: "c", subject: "crimson", applicationProperties: { shade: "dark" } },
      { body: "x", messageId: "x", subject: "crimson", applicationProperties: { shade: "light" } },
    ]);
    const redReceiver = client.createReceiver(topic, "red", { receiveMode: "receiveAndDelete" });
    const gotRed = Object.fromEntries((await receiveExactly(redReceiver, 2)).map((m) => [m.messageId, m]));
    assert.deepEqual(Object.keys(gotRed).sort(), ["c", "r"]);
    assert.equal(gotRed.r.subject, "painted", "the SQL rule's action set sys.Label");
    assert.equal(gotRed.c.subject, "crimson", "the correlation rule has no action");
    await assertNothingToReceive(redReceiver);
    const blueReceiver = client.createReceiver(topic, "blue", { receiveMode: "receiveAndDelete" });
    const gotBlue = await receiveExactly(blueReceiver, 1);
    assert.deepEqual(gotBlue.map((m) => m.messageId), ["b"]);
    await assertNothingToReceive(blueReceiver, 500);
  });

  const allRuntime = await admin.getSubscriptionRuntimeProperties(topic, "all");
  assert.equal(allRuntime.topicName, topic);
  assert.equal(allRuntime.subscriptionName, "all");
  assert.equal(allRuntime.activeMessageCount, 4);
  assert.equal(allRuntime.totalMessageCount, 4);
  const redRuntime = await admin.getSubscriptionRuntimeProperties(topic, "red");
  assert.equal(redRuntime.activeMessageCount, 0);
  const listedRuntime = await collect(admin.listSubscriptionsRuntimeProperties(topic));
  assert.deepEqual(listedRuntime.map((s) => s.subscriptionName).sort(), ["all", "blue", "red"]);
  const topicRuntime = await admin.getTopicRuntimeProperties(topic);
  assert.equal(topicRuntime.name, topic);
  assert.equal(topicRuntime.subscriptionCount, 3);
  assert.ok((await collect(admin.listTopics())).some((t) => t.name === topic));
  assert.equal((await admin.getTopic(topic)).defaultMessageTimeToLive, "PT30M");

  await admin.deleteSubscription(topic, "all");
  await assertRestError(admin.getSubscription(topic, "all"), 404, "MessageEntityNotFoundError");
  assert.equal((await admin.getTopicRuntimeProperties(topic)).subscriptionCount, 2);
  await admin.deleteTopic(topic);
  assert.equal(await admin.topicExists(topic), false);
  await assertRestError(admin.getTopic(topic), 404, "MessageEntityNotFoundError");
  await assertRestError(admin.getSubscription(topic, "red"), 404, "MessageEntityNotFoundError");
  await assertRestError(admin.createSubscription(topic, "s"), 404, "MessageEntityNotFoundError");
});

adminTest("namespace properties are named after the connection string's host", async ({ broker, caPath, admin }) => {
  const properties = await admin.getNamespaceProperties();
  assert.equal(properties.name, broker.host);
  assert.equal(properties.messagingSku, "Standard");
  assert.ok(properties.createdAt instanceof Date, `createdAt ${properties.createdAt}`);

  const untrusting = new ServiceBusAdministrationClient(broker.connectionString, { retryOptions: { maxRetries: 0 } });
  if (SDK_VERSION.startsWith("7.9.")) {
    // 7.9 calls https://host:port even for the emulator: without trusting the development CA
    // the TLS handshake is refused by the client; the tlsOptions above make the other calls work.
    await assert.rejects(untrusting.getNamespaceProperties(), (error) => {
      assert.match(`${error.code} ${error.message}`, /certificate|CERT/i);
      return true;
    });
  } else {
    // Newer SDKs call http://host:port when the connection string says
    // UseDevelopmentEmulator=true: the same port answers plain HTTP too.
    assert.equal((await untrusting.getNamespaceProperties()).name, broker.host);
  }
  assert.ok(existsSync(caPath));
});

adminTest("a client trusting the CA through NODE_EXTRA_CA_CERTS works (child process)", async ({ broker, caPath }) => {
  const name = uniqueId("childq");
  const { stdout } = await new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [path.join(HERE, "admin-scenarios.mjs")],
      {
        cwd: HERE,
        timeout: 30_000,
        env: {
          ...process.env,
          NODE_EXTRA_CA_CERTS: caPath,
          FERROBUS_ADMIN_CONNECTION_STRING: broker.connectionString,
          FERROBUS_ADMIN_QUEUE: name,
        },
      },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`admin-scenarios.mjs failed (${error.code ?? error.signal}): ${stderr}${stdout}`));
        else resolve({ stdout, stderr });
      },
    );
  });
  assert.deepEqual(JSON.parse(stdout.trim()), {
    namespaceName: broker.host,
    messagingSku: "Standard",
    createdName: name,
    createdMaxDeliveryCount: 6,
    existsAfterCreate: true,
    existsAfterDelete: false,
  });
});

adminTest(
  "a wrong key is refused with 401",
  async ({ broker, caPath, admin }) => {
    const wrong = adminClient(broker.connectionStringWith(SAS_KEY_NAME, "not-the-key"), caPath);
    const name = uniqueId("nope");
    const refused = await assertRestError(wrong.createQueue(name), 401, "UnauthorizedRequestError");
    assert.match(refused.message, /signature/i, "refused for its signature, not for anything else");
    await assertRestError(wrong.getNamespaceProperties(), 401, "UnauthorizedRequestError");
    // The right key is accepted on the same broker, and the refused request created nothing.
    await assertRestError(admin.getQueue(name), 404, "MessageEntityNotFoundError");
  },
  { skip: KEYS_MODE ? false : "without keys any token is accepted" },
);

adminTest("a sender of a queue deleted through the admin client gets MessagingEntityNotFound", async ({ broker, admin }) => {
  const name = uniqueId("goneq");
  await admin.createQueue(name);
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(name);
    await sender.sendMessages({ body: "before" });
    assert.equal((await admin.getQueueRuntimeProperties(name)).activeMessageCount, 1);
    await admin.deleteQueue(name);
    await assertServiceBusError(sender.sendMessages({ body: "after" }), "MessagingEntityNotFound");
    const receiver = client.createReceiver(name);
    await assertServiceBusError(receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 }), "MessagingEntityNotFound");
  });
});
