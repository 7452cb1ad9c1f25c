// Queue and topic behaviour through the unmodified public @azure/service-bus 7.9.5 API.
//
// Every test owns the queue (or topic) named in it, configured in QUEUES below, so tests are
// independent of order. Rule IDs refer to /work/shared/SEMANTICS.md; wire details to
// /work/shared/protocol/azure-sdk-wire-contract.md (cited as "contract §N").

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { isServiceBusError } from "@azure/service-bus";
import {
  assertNearNow,
  assertNothingToReceive,
  assertServiceBusError,
  noRetryClient,
  queuesToml,
  receiveExactly,
  sequenceNumbersOf,
  toNumber,
  topicToml,
  uniqueId,
  useBroker,
  withClient,
} from "./harness.js";

// @azure/service-bus is a CommonJS package; its logger is the CommonJS build of @azure/logger,
// so the test must load that same instance to see the SDK's log lines.
const { AzureLogger, setLogLevel, getLogLevel } = createRequire(import.meta.url)("@azure/logger");

// name -> overrides of harness.QUEUE_DEFAULTS; one queue per test.
const QUEUES = {
  "js-send-single": {},
  "js-sequence": {},
  "js-message-id-assigned": {},
  "js-message-id-assigned-properties": {},
  "js-receive-and-delete": {},
  "js-subscribe": {},
  "js-abandon": {},
  "js-defer-hidden": {},
  "js-dead-letter": {},
  "js-max-delivery": { max_delivery_count: 3 },
  "js-lock-expiry": { lock_duration: "2s" },
  "js-message-too-large": { max_message_size_in_kilobytes: 64 },
  "js-batch-size": { max_message_size_in_kilobytes: 64 },
  "js-drain-empty": {},
  "js-drain-keeps-lock": {},
  "js-in-flight-full": { max_size_in_megabytes: 1 },
};
const TOPIC = "js-topic";
const TOPIC_SUBSCRIPTIONS = ["audit", "billing"];

const { broker, brokerTest } = useBroker(queuesToml(QUEUES) + topicToml(TOPIC, TOPIC_SUBSCRIPTIONS));

// Receivers that must not renew locks behind the test's back (JS auto-renews for 5 min by default).
const NO_AUTO_RENEW = { maxAutoLockRenewalDurationInMs: 0 };

brokerTest("single message round trip keeps the sender's fields and gets broker annotations", async () => {
  // rules SEQ-1, SEQ-3, LCK-1
  const queue = "js-send-single";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const sent = {
      messageId: uniqueId("single"),
      body: { greeting: "hello", list: [1, 2, 3] },
      subject: "greetings",
      contentType: "application/json",
      correlationId: "correlation-1",
      timeToLive: 600_000,
      applicationProperties: { color: "blue", count: 7, ratio: 1.5, flag: true },
    };
    const sentAt = Date.now();
    await sender.sendMessages(sent);

    const receiver = client.createReceiver(queue);
    const [message] = await receiveExactly(receiver, 1);
    assert.equal(message.messageId, sent.messageId);
    assert.deepEqual(message.body, sent.body);
    assert.equal(message.subject, sent.subject);
    assert.equal(message.contentType, sent.contentType);
    assert.equal(message.correlationId, sent.correlationId);
    assert.equal(message.timeToLive, sent.timeToLive, "header.ttl is kept on delivery (contract §4.3)");
    assert.deepEqual(message.applicationProperties, sent.applicationProperties);
    assert.equal(toNumber(message.sequenceNumber), 1, "the first message of an entity has sequence number 1");
    assertNearNow(message.enqueuedTimeUtc, 10_000, "enqueuedTimeUtc");
    assert.ok(message.enqueuedTimeUtc.getTime() >= sentAt - 2_000, "enqueued after it was sent (allowing clock skew)");
    assert.equal(message.deliveryCount, 0, "first delivery reports deliveryCount 0");
    assert.equal(message.state, "active");
    assert.match(message.lockToken ?? "", /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.ok(message.lockedUntilUtc instanceof Date, "peek-lock delivery carries x-opt-locked-until");
    assert.ok(message.lockedUntilUtc.getTime() > Date.now(), "the lock is still held");

    await receiver.completeMessage(message);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("sequence numbers start at 1 and are gapless across single, array and batch sends", async () => {
  // rules SEQ-1, SEQ-2; contract §4.2 (batch envelope 0x80013700 is split into its messages)
  const queue = "js-sequence";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const ids = Array.from({ length: 7 }, (_, index) => `sequence-${index}`);
    await sender.sendMessages({ messageId: ids[0], body: 0 });
    await sender.sendMessages([1, 2, 3].map((index) => ({ messageId: ids[index], body: index })));
    const batch = await sender.createMessageBatch();
    for (const index of [4, 5, 6]) {
      assert.ok(batch.tryAddMessage({ messageId: ids[index], body: index }), `message ${index} fits the batch`);
    }
    assert.equal(batch.count, 3);
    await sender.sendMessages(batch);

    const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    const received = await receiveExactly(receiver, 7);
    assert.deepEqual(sequenceNumbersOf(received), [1, 2, 3, 4, 5, 6, 7]);
    assert.deepEqual(
      received.map((message) => message.messageId),
      ids,
      "messages arrive in send order",
    );
    assert.deepEqual(
      received.map((message) => message.body),
      [0, 1, 2, 3, 4, 5, 6],
    );
  });
});

brokerTest("messages sent without a messageId are delivered with one", async () => {
  // contract §4.3: message-id always present on delivery (JS batch items carry none)
  const queue = "js-message-id-assigned";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    await sender.sendMessages({ body: "no id, single" });
    await sender.sendMessages([{ body: "no id, array 1" }, { body: "no id, array 2" }]);

    const receiver = client.createReceiver(queue);
    const received = await receiveExactly(receiver, 3);
    for (const message of received) {
      assert.ok(
        message.messageId !== undefined && message.messageId !== null && message.messageId !== "",
        `message ${toNumber(message.sequenceNumber)} has no messageId`,
      );
    }
    assert.equal(new Set(received.map((message) => String(message.messageId))).size, 3, "messageIds are distinct");
    // The id is the broker's (kept as 16 bytes, written on the way out: issue 16): the
    // same when peeked and when delivered again, beside the properties that were sent.
    const idOf = (message) => `${toNumber(message.sequenceNumber)}=${String(message.messageId)}`;
    const ids = received.map(idOf).sort();
    const peeked = await receiver.peekMessages(3, { fromSequenceNumber: received[0].sequenceNumber });
    assert.deepEqual(peeked.map(idOf).sort(), ids, "peeked with the same ids");
    for (const message of received) await receiver.abandonMessage(message);
    const again = await receiveExactly(receiver, 3);
    assert.deepEqual(again.map(idOf).sort(), ids, "delivered again with the same ids");
    // Completing needs the messageId (the SDK's lock renewer is keyed by it).
    for (const message of again) await receiver.completeMessage(message);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("a batch item without a messageId keeps its properties beside the id it is given", async () => {
  // contract §4.3; issue 16: the id goes in front of the properties the sender set
  const queue = "js-message-id-assigned-properties";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const batch = await sender.createMessageBatch();
    assert.ok(
      batch.tryAddMessage({
        body: "batched",
        subject: "created",
        contentType: "text/plain",
        correlationId: "corr-1",
        applicationProperties: { n: 7 },
      }),
    );
    await sender.sendMessages(batch);
    const receiver = client.createReceiver(queue);
    const [message] = await receiveExactly(receiver, 1);
    assert.match(String(message.messageId), /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(message.subject, "created");
    assert.equal(message.contentType, "text/plain");
    assert.equal(message.correlationId, "corr-1");
    assert.equal(message.applicationProperties.n, 7);
    await receiver.completeMessage(message);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("receiveAndDelete removes the message on delivery and exposes no lock", async () => {
  // rule LCK-5
  const queue = "js-receive-and-delete";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "rad-1", body: "once" });

    const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    const [message] = await receiveExactly(receiver, 1);
    assert.equal(message.messageId, "rad-1");
    assert.equal(message.lockToken, undefined);
    await receiver.close();

    const peekLock = client.createReceiver(queue);
    await assertNothingToReceive(peekLock);
  });
});

brokerTest("subscribe delivers every message to processMessage and reports no error", async () => {
  // rule LCK-1; contract §3.6 (streaming receiver credit: addCredit(1) after each message)
  const queue = "js-subscribe";
  await withClient(broker.connectionString, async (client) => {
    const ids = ["stream-1", "stream-2", "stream-3"];
    await client.createSender(queue).sendMessages(ids.map((messageId) => ({ messageId, body: messageId })));

    const receiver = client.createReceiver(queue);
    const seen = [];
    const errors = [];
    let allSeen;
    const done = new Promise((resolve) => {
      allSeen = resolve;
    });
    const subscription = receiver.subscribe(
      {
        async processMessage(message) {
          await receiver.completeMessage(message);
          seen.push(message.messageId);
          if (seen.length === ids.length) allSeen();
        },
        async processError(args) {
          errors.push(`${args.errorSource}: ${args.error?.code ?? ""} ${args.error?.message}`);
        },
      },
      { autoCompleteMessages: false },
    );
    await done;
    await subscription.close();
    assert.deepEqual(seen, ids);
    assert.deepEqual(errors, [], "processError was called");

    await assertNothingToReceive(client.createReceiver(queue));
  });
});

brokerTest("abandon with propertiesToModify redelivers with deliveryCount 1 and the new properties", async () => {
  // rules LCK-1, LCK-2; contract §5.1 (modified{message-annotations=propertiesToModify})
  const queue = "js-abandon";
  await withClient(broker.connectionString, async (client) => {
    await client
      .createSender(queue)
      .sendMessages({ messageId: "abandon-1", body: "retry me", applicationProperties: { original: "kept", note: "old" } });

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [first] = await receiveExactly(receiver, 1);
    assert.equal(first.deliveryCount, 0);
    await receiver.abandonMessage(first, { note: "abandoned once", attempt: 1 });

    const [second] = await receiveExactly(receiver, 1);
    assert.equal(second.messageId, "abandon-1");
    assert.equal(toNumber(second.sequenceNumber), toNumber(first.sequenceNumber), "same message, same sequence number");
    assert.equal(second.deliveryCount, 1, "abandon increments the delivery count");
    assert.deepEqual(second.applicationProperties, { original: "kept", note: "abandoned once", attempt: 1 });
    await receiver.completeMessage(second);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("a deferred message is no longer receivable from the queue", async () => {
  // rule LCK-4 (retrieval by sequence number is in management.test.js)
  const queue = "js-defer-hidden";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "defer-1", body: "later" });
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [message] = await receiveExactly(receiver, 1);
    await receiver.deferMessage(message);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("deadLetterMessage moves the message to the DLQ with reason, description and properties", async () => {
  // rules DLQ-1, DLQ-2, DLQ-4; contract §5.1 (rejected{com.microsoft:dead-letter, info})
  const queue = "js-dead-letter";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({
      messageId: "dead-1",
      body: { order: 42 },
      applicationProperties: { original: "kept" },
    });

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [message] = await receiveExactly(receiver, 1);
    await receiver.deadLetterMessage(message, {
      deadLetterReason: "InvalidOrder",
      deadLetterErrorDescription: "order 42 has no lines",
      customNote: "added on dead-letter",
    });
    await assertNothingToReceive(receiver);

    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", ...NO_AUTO_RENEW });
    const [dead] = await receiveExactly(deadLetters, 1);
    assert.equal(dead.messageId, "dead-1");
    assert.deepEqual(dead.body, { order: 42 });
    assert.equal(toNumber(dead.sequenceNumber), toNumber(message.sequenceNumber));
    assert.equal(dead.deadLetterReason, "InvalidOrder");
    assert.equal(dead.deadLetterErrorDescription, "order 42 has no lines");
    assert.equal(dead.applicationProperties.original, "kept");
    assert.equal(dead.applicationProperties.customNote, "added on dead-letter");
    await deadLetters.completeMessage(dead);
    await assertNothingToReceive(deadLetters);
  });
});

brokerTest("reaching max_delivery_count dead-letters with MaxDeliveryCountExceeded", async () => {
  // rules LCK-2, DLQ-3 (max_delivery_count = 3)
  const queue = "js-max-delivery";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "poison-1", body: "poison" });

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const deliveryCounts = [];
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const [message] = await receiveExactly(receiver, 1);
      deliveryCounts.push(message.deliveryCount);
      await receiver.abandonMessage(message);
    }
    assert.deepEqual(deliveryCounts, [0, 1, 2]);
    await assertNothingToReceive(receiver);

    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", receiveMode: "receiveAndDelete" });
    const [dead] = await receiveExactly(deadLetters, 1);
    assert.equal(dead.messageId, "poison-1");
    assert.equal(dead.deadLetterReason, "MaxDeliveryCountExceeded");
  });
});

brokerTest("an expired lock redelivers the message and completing the stale copy fails with MessageLockLost", async () => {
  // rules LCK-2 (lock expiry increments deliveryCount), LCK-3 (lock_duration = 2s)
  const queue = "js-lock-expiry";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "lock-1", body: "slow consumer" });

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [stale] = await receiveExactly(receiver, 1);
    const lockDurationMs = stale.lockedUntilUtc.getTime() - stale.enqueuedTimeUtc.getTime();
    assert.ok(lockDurationMs <= 5_000, `lockedUntilUtc reflects the 2 s lock_duration (got ${lockDurationMs} ms)`);

    // Waits for the redelivery itself, which can only happen once the lock has expired.
    const [redelivered] = await receiveExactly(receiver, 1, 15_000);
    assert.equal(redelivered.messageId, "lock-1");
    assert.equal(redelivered.deliveryCount, 1);
    assert.ok(Date.now() >= stale.lockedUntilUtc.getTime() - 250, "not redelivered before the lock expired");
    assert.notEqual(redelivered.lockToken, stale.lockToken, "a new delivery carries a new lock token");

    await assertServiceBusError(receiver.completeMessage(stale), "MessageLockLost");
    await receiver.completeMessage(redelivered);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("sending to an unknown queue fails with MessagingEntityNotFound", async () => {
  // contract §3.4 (null terminus + detach amqp:not-found "The messaging entity ... could not be found")
  const client = noRetryClient(broker.connectionString);
  try {
    const sender = client.createSender("js-no-such-queue");
    await assertServiceBusError(sender.sendMessages({ body: "lost" }), "MessagingEntityNotFound");
  } finally {
    await client.close();
  }
});

brokerTest("receiving from an unknown queue fails with MessagingEntityNotFound", async () => {
  // contract §3.4
  const client = noRetryClient(broker.connectionString);
  try {
    const receiver = client.createReceiver("js-no-such-queue");
    await assertServiceBusError(receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 }), "MessagingEntityNotFound");
  } finally {
    await client.close();
  }
});

brokerTest("a message larger than max_message_size_in_kilobytes fails with MessageSizeExceeded", async () => {
  // contract §3.4, §5.5 (rejected amqp:link:message-size-exceeded); queue limit 64 KB
  const queue = "js-message-too-large";
  const client = noRetryClient(broker.connectionString);
  try {
    const sender = client.createSender(queue);
    await assertServiceBusError(
      sender.sendMessages({ messageId: "too-big", body: Buffer.alloc(100 * 1024, 0x61) }),
      "MessageSizeExceeded",
    );
    // The sender survives the rejection, and nothing of the big message was stored.
    await sender.sendMessages({ messageId: "small", body: Buffer.alloc(1024, 0x62) });
    const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    const received = await receiveExactly(receiver, 1);
    assert.deepEqual(received.map((message) => message.messageId), ["small"]);
    await assertNothingToReceive(receiver);
  } finally {
    await client.close();
  }
});

brokerTest("sends in flight at once to a filling queue are answered one by one", async () => {
  // Issue 16: the broker takes a connection's consecutive transfers to a queue in one batch;
  // each send must still get its own answer. Three hundred 4 KB sends in flight to a 1 MB
  // queue: those that fit are stored, the rest refused with QuotaExceeded, and exactly the
  // accepted ones are received, once each, in sequence order (rules SEQ-1, SEQ-2). (Whether
  // a batch mixes both outcomes depends on how the SDK's writes fall; the raw-frame test in
  // tests/integration/batched_sends.rs makes sure of it.)
  const queue = "js-in-flight-full";
  const texts = Array.from({ length: 300 }, (_, index) => `${String(index).padStart(3, "0")}-${"x".repeat(4 * 1024)}`);
  const client = noRetryClient(broker.connectionString);
  try {
    const sender = client.createSender(queue);
    const results = await Promise.allSettled(texts.map((text) => sender.sendMessages({ body: text })));
    const accepted = texts.filter((_, index) => results[index].status === "fulfilled");
    for (const result of results.filter((result) => result.status === "rejected")) {
      assert.ok(isServiceBusError(result.reason), String(result.reason));
      assert.equal(result.reason.code, "QuotaExceeded", result.reason.message);
    }
    // 1 MiB / 4 KiB = 256, less the per-message overhead the quota counts.
    assert.ok(accepted.length >= 200 && accepted.length < 256, `${accepted.length} of 300 accepted`);
    const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    const received = await receiveExactly(receiver, accepted.length);
    await assertNothingToReceive(receiver);
    const numbers = sequenceNumbersOf(received);
    assert.deepEqual(numbers, [...numbers].sort((a, b) => a - b));
    assert.deepEqual(received.map((message) => message.body).sort(), [...accepted].sort());
  } finally {
    await client.close();
  }
});

brokerTest("createMessageBatch is sized by the queue's max message size", async () => {
  // contract §3.4 (attach max-message-size sizes createMessageBatch); queue limit 64 KB
  const queue = "js-batch-size";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const batch = await sender.createMessageBatch();
    assert.ok(batch.maxSizeInBytes > 0, "a zero max-message-size makes every batch full");
    assert.ok(batch.maxSizeInBytes <= 64 * 1024, `batch limit ${batch.maxSizeInBytes} exceeds the 64 KB queue limit`);
    assert.equal(batch.tryAddMessage({ body: Buffer.alloc(100 * 1024) }), false, "an oversized message does not fit");
    assert.equal(batch.tryAddMessage({ messageId: "fits", body: Buffer.alloc(1024) }), true);
    await sender.sendMessages(batch);
    const received = await receiveExactly(client.createReceiver(queue, { receiveMode: "receiveAndDelete" }), 1);
    assert.equal(received[0].messageId, "fits");
  });
});

/** Records the SDK's warnings while `fn` runs (public @azure/logger API). */
async function captureSdkWarnings(fn) {
  const lines = [];
  const previousLog = AzureLogger.log;
  const previousLevel = getLogLevel();
  AzureLogger.log = (...args) => lines.push(args.map(String).join(" "));
  setLogLevel("warning");
  try {
    await fn();
  } finally {
    setLogLevel(previousLevel);
    AzureLogger.log = previousLog;
  }
  return lines;
}

brokerTest("receiveMessages on an empty queue returns [] promptly and the receiver keeps working", async () => {
  // contract §3.6: the broker answers flow(drain=true) with flow(drain=true, credit 0, delivery-count advanced)
  const queue = "js-drain-empty";
  await withClient(broker.connectionString, async (client) => {
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    let received;
    let elapsedMs;
    const warnings = await captureSdkWarnings(async () => {
      const started = Date.now();
      received = await receiver.receiveMessages(5, { maxWaitTimeInMs: 1_000 });
      elapsedMs = Date.now() - started;
    });
    assert.deepEqual(received, []);
    assert.ok(elapsedMs < 5_000, `receiveMessages took ${elapsedMs} ms on an empty queue`);
    assert.deepEqual(
      warnings.filter((line) => /drain/i.test(line)),
      [],
      "the SDK timed out waiting for the drain reply and closed the link",
    );

    await client.createSender(queue).sendMessages({ messageId: "after-drain", body: "still here" });
    const [message] = await receiveExactly(receiver, 1);
    assert.equal(message.messageId, "after-drain");
    assert.equal(message.deliveryCount, 0, "the drained credit did not count as a delivery");
    await receiver.completeMessage(message);
  });
});

brokerTest("a partial batch returns after the drain and keeps its locks", async () => {
  // contract §3.6: receiveMessages(5) with 1 message available drains the 4 unused credits 1 s
  // after the first message; without a drain reply the SDK closes the link and its locks are lost.
  const queue = "js-drain-keeps-lock";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "held", body: "held across a drain" });
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    let received;
    let elapsedMs;
    const warnings = await captureSdkWarnings(async () => {
      const started = Date.now();
      received = await receiver.receiveMessages(5, { maxWaitTimeInMs: 10_000 });
      elapsedMs = Date.now() - started;
    });
    assert.deepEqual(received.map((message) => message.messageId), ["held"]);
    assert.ok(elapsedMs < 5_000, `a partial batch took ${elapsedMs} ms (expected ~1 s after the first message)`);
    assert.deepEqual(
      warnings.filter((line) => /drain/i.test(line)),
      [],
      "the SDK timed out waiting for the drain reply and closed the link",
    );
    await receiver.completeMessage(received[0]);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("a message sent to a topic reaches every subscription", async () => {
  // rule DLQ-5 context: the topic holds nothing itself; each subscription gets its own copy
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(TOPIC).sendMessages({
      messageId: "fan-out-1",
      body: { event: "created" },
      applicationProperties: { kind: "order" },
    });
    for (const subscription of TOPIC_SUBSCRIPTIONS) {
      const receiver = client.createReceiver(TOPIC, subscription, NO_AUTO_RENEW);
      const [message] = await receiveExactly(receiver, 1);
      assert.equal(message.messageId, "fan-out-1", `subscription ${subscription}`);
      assert.deepEqual(message.body, { event: "created" });
      assert.deepEqual(message.applicationProperties, { kind: "order" });
      assert.equal(toNumber(message.sequenceNumber) >= 1, true);
      await receiver.completeMessage(message);
      await assertNothingToReceive(receiver);
    }
  });
});

brokerTest("receiving from an unknown subscription fails with MessagingEntityNotFound", async () => {
  // contract §3.4
  const client = noRetryClient(broker.connectionString);
  try {
    const receiver = client.createReceiver(TOPIC, "js-no-such-subscription");
    const error = await assertServiceBusError(
      receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 }),
      "MessagingEntityNotFound",
    );
    assert.ok(isServiceBusError(error));
  } finally {
    await client.close();
  }
});
