// Authorization with [[auth.keys]] configured, through the unmodified public @azure/service-bus
// 7.9.5 API. The SDK puts one token per link entity on the shared $cbs link: a dead-letter
// receiver's is for `<endpoint><entity>/$DeadLetterQueue`, a management client's for
// `<endpoint><entity>/$management`. $management operations are checked per operation, like
// Service Bus: Send to schedule, Listen to peek and for the rule manager ("requires only Listen
// claims"); a refusal is status 401 with amqp:unauthorized-access, the SDK's `UnauthorizedAccess`.
//
// This file's broker configures its keys itself, so it runs the same in both
// FERROBUS_TEST_AUTH modes (see harness.js).

import assert from "node:assert/strict";
import {
  SAS_KEY_NAME,
  SAS_KEY_VALUE,
  assertServiceBusError,
  authKeyToml,
  noRetryClient,
  queueToml,
  receiveExactly,
  topicToml,
  uniqueId,
  useBroker,
  withClient,
} from "./harness.js";

const QUEUE = "js-auth-dead-letters";
const GUARDED = "js-auth-guarded";
const TOPIC = "js-auth-topic";
const SUBSCRIPTION = "all";
const RULES_TOPIC = "js-auth-rules";

const { broker, brokerTest } = useBroker(
  authKeyToml(SAS_KEY_NAME, SAS_KEY_VALUE, ["Manage"]) +
    authKeyToml("listener", "listen-secret", ["Listen"]) +
    authKeyToml("sender", "send-secret", ["Send"]) +
    queueToml(QUEUE) +
    queueToml(GUARDED) +
    topicToml(TOPIC, [SUBSCRIPTION]) +
    topicToml(RULES_TOPIC, [SUBSCRIPTION]),
);

/** Runs `fn` with a no-retry client whose connection string carries `keyName`/`key`. */
async function withKey(keyName, key, fn) {
  const client = noRetryClient(broker.connectionStringWith(keyName, key));
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

brokerTest("dead-letter receivers are served with their dead-letter token", async () => {
  const messageId = uniqueId("dead");
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(QUEUE).sendMessages({ messageId, body: "poison" });
    await client.createSender(TOPIC).sendMessages({ messageId, body: "poison" });
    for (const receiver of [client.createReceiver(QUEUE), client.createReceiver(TOPIC, SUBSCRIPTION)]) {
      const [received] = await receiveExactly(receiver, 1);
      await receiver.deadLetterMessage(received, { deadLetterReason: "bad", deadLetterErrorDescription: "on purpose" });
    }
  });
  // A fresh client (one connection per client): its only tokens are the dead-letter ones.
  await withClient(broker.connectionString, async (client) => {
    for (const deadLetters of [
      client.createReceiver(QUEUE, { subQueueType: "deadLetter" }),
      client.createReceiver(TOPIC, SUBSCRIPTION, { subQueueType: "deadLetter" }),
    ]) {
      const [dead] = await receiveExactly(deadLetters, 1);
      assert.equal(dead.messageId, messageId);
      assert.equal(dead.deadLetterReason, "bad");
      await deadLetters.completeMessage(dead);
    }
  });
});

brokerTest("a Send key may schedule but not peek: the peek is refused with UnauthorizedAccess", async () => {
  await withKey("sender", "send-secret", async (client) => {
    const [sequenceNumber] = await client
      .createSender(GUARDED)
      .scheduleMessages({ body: "later" }, new Date(Date.now() + 3_600_000));
    assert.ok(sequenceNumber !== undefined, "scheduled");
    await assertServiceBusError(client.createReceiver(GUARDED).peekMessages(1), "UnauthorizedAccess");
  });
});

brokerTest("a Listen key may peek but not schedule: the schedule is refused with UnauthorizedAccess", async () => {
  await withKey("listener", "listen-secret", async (client) => {
    const peeked = await client.createReceiver(GUARDED).peekMessages(1);
    assert.ok(Array.isArray(peeked), "peeked");
    await assertServiceBusError(
      client.createSender(GUARDED).scheduleMessages({ body: "never" }, new Date(Date.now() + 3_600_000)),
      "UnauthorizedAccess",
    );
  });
});

brokerTest("the rule manager needs Listen: a Listen key changes rules, a Send key is refused", async () => {
  await withKey("listener", "listen-secret", async (client) => {
    const rules = client.createRuleManager(RULES_TOPIC, SUBSCRIPTION);
    await rules.createRule("by-listener", { sqlExpression: "1 = 1" });
    await rules.deleteRule("by-listener");
  });
  await withKey("sender", "send-secret", async (client) => {
    const rules = client.createRuleManager(RULES_TOPIC, SUBSCRIPTION);
    await assertServiceBusError(rules.createRule("by-sender", { sqlExpression: "1 = 1" }), "UnauthorizedAccess");
  });
});
