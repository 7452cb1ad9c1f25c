// Time semantics through the unmodified public @azure/service-bus 7.9.5 API: time to live,
// expiry, deferral past the TTL, scheduled enqueue time on a plain send, duplicate detection and
// auto-delete on idle. Mirrors tests/python/test_sdk_time.py where the JS SDK can observe the rule.
//
// Every test owns the queue named in it (QUEUES below); the auto-delete-on-idle test starts its
// own broker, because an entity's idle clock runs from broker start-up. Rule IDs refer to
// /work/shared/SEMANTICS.md.
//
// Durations are short and configured (1–3 s). `delay` is used only where the passage of time is
// the behaviour under test (expiry, a window closing, idleness); everything else waits with
// `maxWaitTimeInMs` or uses peek, which answers at once.
//
// Note: the JS SDK computes `expiresAtUtc` itself as `enqueuedTimeUtc + header.ttl` (it does not
// read absolute-expiry-time), so TTL-1/TTL-2 are observed through the delivered `timeToLive`
// (header.ttl) and the broker-stamped `enqueuedTimeUtc`.

import assert from "node:assert/strict";
import Long from "long";
import {
  Broker,
  assertNearNow,
  assertNothingToReceive,
  assertServiceBusError,
  delay,
  noRetryClient,
  queueToml,
  queuesToml,
  receiveExactly,
  toNumber,
  uniqueId,
  useBroker,
  withClient,
} from "./harness.js";

// name -> overrides of harness.QUEUE_DEFAULTS; one queue per test.
const QUEUES = {
  "js-time-ttl-stamp": {},
  "js-time-default-ttl": { default_message_time_to_live: "2s" },
  "js-time-expire-dead-letter": { dead_lettering_on_message_expiration: true },
  "js-time-expire-drop": {},
  "js-time-expire-while-locked": { lock_duration: "5s", dead_lettering_on_message_expiration: true },
  "js-time-deferred-expiry": { dead_lettering_on_message_expiration: true },
  "js-time-schedule-on-send": {},
  "js-time-schedule-earlier": {},
  "js-time-duplicates": {
    requires_duplicate_detection: true,
    duplicate_detection_history_time_window: "3s",
  },
};

const { broker, brokerTest } = useBroker(queuesToml(QUEUES));

// Receivers that must not renew locks behind the test's back (JS auto-renews for 5 min by default).
const NO_AUTO_RENEW = { maxAutoLockRenewalDurationInMs: 0 };
const FROM_FIRST = { fromSequenceNumber: Long.fromNumber(1) };
// How far in the future scheduled messages are placed.
const SCHEDULE_DELAY_MS = 2_500;

/** No message at all (active, deferred or scheduled); peek answers at once. */
async function assertNothingToPeek(receiver, what = "entity") {
  const peeked = await receiver.peekMessages(10, FROM_FIRST);
  assert.deepEqual(
    peeked.map((message) => [message.messageId, toNumber(message.sequenceNumber), message.state]),
    [],
    `expected the ${what} to hold no message`,
  );
}

// ---------------------------------------------------------------------------------------------
// Time to live

brokerTest("expiresAtUtc is enqueuedTimeUtc plus the message's timeToLive", async () => {
  // rule TTL-1
  const queue = "js-time-ttl-stamp";
  const ttlMs = 90_000;
  await withClient(broker.connectionString, async (client) => {
    const messageId = uniqueId("ttl");
    await client.createSender(queue).sendMessages({ messageId, body: "ttl", timeToLive: ttlMs });
    const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    const [message] = await receiveExactly(receiver, 1);
    assert.equal(message.messageId, messageId);
    assert.equal(message.timeToLive, ttlMs, "the TTL comes back in header.ttl as sent");
    assertNearNow(message.enqueuedTimeUtc, 5_000, "enqueuedTimeUtc");
    assert.ok(message.expiresAtUtc instanceof Date, `expiresAtUtc should be a Date, got ${message.expiresAtUtc}`);
    assert.equal(message.expiresAtUtc.getTime() - message.enqueuedTimeUtc.getTime(), ttlMs);
  });
});

brokerTest("the queue's default TTL applies to messages without one and caps a longer one", async () => {
  // rule TTL-2 (default_message_time_to_live = 2s; the message TTL is 1 h)
  const queue = "js-time-default-ttl";
  const defaultTtlMs = 2_000;
  await withClient(broker.connectionString, async (client) => {
    const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    await client.createSender(queue).sendMessages([
      { messageId: "no-ttl", body: "no ttl" },
      { messageId: "long-ttl", body: "1 h ttl", timeToLive: 3_600_000 },
    ]);
    // Received well inside the 2 s default TTL.
    const received = await receiveExactly(receiver, 2, 1_500);
    const byId = Object.fromEntries(received.map((message) => [message.messageId, message]));
    assert.deepEqual(Object.keys(byId).sort(), ["long-ttl", "no-ttl"]);
    for (const [messageId, message] of Object.entries(byId)) {
      // expiresAtUtc is computed from the wire's header.ttl ...
      assert.equal(
        message.expiresAtUtc.getTime() - message.enqueuedTimeUtc.getTime(),
        defaultTtlMs,
        `${messageId}: expiresAtUtc = enqueuedTimeUtc + 2 s`,
      );
      // ... while @azure/core-amqp derives timeToLive from absolute-expiry-time − creation-time
      // when the message carries both (the JS and Python senders set them with every TTL).
      const { absoluteExpiryTime, creationTime } = message._rawAmqpMessage.properties ?? {};
      assert.equal(
        message.timeToLive,
        defaultTtlMs,
        `${messageId}: the delivered timeToLive is the queue default (properties.absolute-expiry-time ` +
          `${absoluteExpiryTime} − creation-time ${creationTime?.valueOf?.() ?? creationTime})`,
      );
    }
  });
});

brokerTest("an expired message is dead-lettered with TTLExpiredException while no receiver is attached", async () => {
  // rules TTL-4, TTL-6 (dead_lettering_on_message_expiration = true). The DLQ is read first,
  // before anything touches the queue, so the broker must have expired it on its own timer.
  const queue = "js-time-expire-dead-letter";
  const messageId = uniqueId("expire-dlq");
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId, body: "short-lived", timeToLive: 1_000 });
    await delay(1_500); // the behaviour under test: the TTL passes with no receiver attached

    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", ...NO_AUTO_RENEW });
    const [dead] = await receiveExactly(deadLetters, 1, 3_000);
    assert.equal(dead.messageId, messageId);
    assert.equal(dead.deadLetterReason, "TTLExpiredException");
    assert.equal(dead.body, "short-lived");
    await deadLetters.completeMessage(dead);

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    await assertNothingToReceive(receiver);
    await assertNothingToPeek(receiver, "queue");
  });
});

brokerTest("an expired message without dead-lettering is dropped", async () => {
  // rules TTL-4, TTL-6 (dead_lettering_on_message_expiration off)
  const queue = "js-time-expire-drop";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: uniqueId("drop"), body: "dropped", timeToLive: 1_000 });
    await delay(1_500); // the behaviour under test: the TTL passes

    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", ...NO_AUTO_RENEW });
    await assertNothingToPeek(deadLetters, "DLQ");
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    await assertNothingToReceive(receiver);
    await assertNothingToPeek(receiver, "queue");
  });
});

brokerTest("a locked message whose TTL passes while locked can still be completed", async () => {
  // rule TTL-5 (lock_duration = 5s, TTL 1 s, dead-lettering on expiration)
  const queue = "js-time-expire-while-locked";
  await withClient(broker.connectionString, async (client) => {
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    await client.createSender(queue).sendMessages({ messageId: uniqueId("locked"), body: "locked", timeToLive: 1_000 });
    const [locked] = await receiveExactly(receiver, 1, 900);
    await delay(1_500); // the behaviour under test: the TTL passes while the lock is held
    assert.ok(Date.now() > locked.expiresAtUtc.getTime(), "the TTL has passed");
    assert.ok(Date.now() < locked.lockedUntilUtc.getTime(), "the lock is still held");
    await receiver.completeMessage(locked); // MessageLockLost if the broker expired it
    await assertNothingToPeek(receiver, "queue");
    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", ...NO_AUTO_RENEW });
    await assertNothingToPeek(deadLetters, "DLQ");
  });
});

brokerTest("a deferred message is still returned by receiveDeferredMessages after its TTL", async () => {
  // rule TTL-7 (TTL 1 s, dead-lettering on expiration; retrieved 2 s after deferral)
  const queue = "js-time-deferred-expiry";
  await withClient(broker.connectionString, async (client) => {
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    await client.createSender(queue).sendMessages({ messageId: uniqueId("deferred"), body: "deferred", timeToLive: 1_000 });
    const [message] = await receiveExactly(receiver, 1, 900);
    const sequenceNumber = message.sequenceNumber;
    await receiver.deferMessage(message);
    await delay(2_000); // the behaviour under test: the TTL passes while deferred

    const deferred = await receiver.receiveDeferredMessages(sequenceNumber);
    assert.deepEqual(
      deferred.map((m) => [m.messageId, toNumber(m.sequenceNumber)]),
      [[message.messageId, toNumber(sequenceNumber)]],
    );
    assert.equal(deferred[0].body, "deferred");
    await receiver.completeMessage(deferred[0]);
    await assertNothingToPeek(receiver, "queue");
    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", ...NO_AUTO_RENEW });
    await assertNothingToPeek(deadLetters, "DLQ");
  });
});

// ---------------------------------------------------------------------------------------------
// Scheduled messages

brokerTest("scheduledEnqueueTimeUtc on a plain send arrives at its time with a new sequence number", async () => {
  // rules SCH-1, SCH-2, SCH-3
  const queue = "js-time-schedule-on-send";
  const messageId = uniqueId("scheduled-send");
  await withClient(broker.connectionString, async (client) => {
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const scheduledTime = new Date(Date.now() + SCHEDULE_DELAY_MS);
    await client.createSender(queue).sendMessages({ messageId, body: "later", scheduledEnqueueTimeUtc: scheduledTime });

    const peeked = await receiver.peekMessages(10, FROM_FIRST);
    assert.deepEqual(
      peeked.map((message) => [message.messageId, message.state]),
      [[messageId, "scheduled"]],
    );
    const schedulingNumber = toNumber(peeked[0].sequenceNumber);
    const early = await receiver.receiveMessages(1, {
      maxWaitTimeInMs: Math.max(scheduledTime.getTime() - Date.now() - 500, 100),
    });
    assert.deepEqual(early.map((message) => message.messageId), [], "received before its scheduled time");

    const [arrived] = await receiveExactly(receiver, 1, SCHEDULE_DELAY_MS + 5_000);
    assert.ok(Date.now() >= scheduledTime.getTime() - 100, "received before its scheduled time");
    assert.equal(arrived.messageId, messageId);
    assert.equal(arrived.state, "active");
    assert.ok(
      toNumber(arrived.sequenceNumber) > schedulingNumber,
      `activation assigns a new sequence number (scheduled as ${schedulingNumber}, arrived as ${toNumber(arrived.sequenceNumber)})`,
    );
    assert.ok(arrived.scheduledEnqueueTimeUtc instanceof Date, "the delivery carries scheduledEnqueueTimeUtc");
    assert.equal(arrived.scheduledEnqueueTimeUtc.getTime(), scheduledTime.getTime());
    await receiver.completeMessage(arrived);
    await assertNothingToPeek(receiver, "queue");
  });
});

brokerTest("a message scheduled after another but due before it arrives first, at its own time", async () => {
  // rules SCH-1, SCH-2: the entity's one timer moves to the earlier deadline (issue 16)
  const queue = "js-time-schedule-earlier";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const start = Date.now();
    const laterDue = new Date(start + 2 * SCHEDULE_DELAY_MS);
    const earlierDue = new Date(start + SCHEDULE_DELAY_MS);
    await sender.scheduleMessages({ messageId: "later", body: "later" }, laterDue);
    await sender.scheduleMessages({ messageId: "earlier", body: "earlier" }, earlierDue);
    // Streaming, so each arrival is seen when it happens (receiveMessages waits on after the
    // first message for more).
    const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    const arrivals = [];
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, 2 * SCHEDULE_DELAY_MS + 5_000);
      const subscription = receiver.subscribe({
        processMessage: async (message) => {
          arrivals.push([message.messageId, Date.now()]);
          if (arrivals.length === 2) {
            clearTimeout(timer);
            await subscription.close();
            resolve();
          }
        },
        processError: async (args) => reject(args.error),
      });
    });
    assert.deepEqual(arrivals.map(([id]) => id), ["earlier", "later"]);
    const [[, earlierAt], [, laterAt]] = arrivals;
    assert.ok(earlierAt >= earlierDue.getTime() - 100, "the earlier one came before its time");
    assert.ok(earlierAt < laterDue.getTime() - 500, `the earlier one waited for the later one's time (${earlierAt - start} ms)`);
    assert.ok(laterAt >= laterDue.getTime() - 100, "the later one came before its time");
  });
});

// ---------------------------------------------------------------------------------------------
// Duplicate detection

brokerTest("a duplicate messageId is dropped within the detection window and accepted after it", async () => {
  // duplicate detection (requires_duplicate_detection, duplicate_detection_history_time_window = 3s)
  const queue = "js-time-duplicates";
  const messageId = uniqueId("duplicate");
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    await sender.sendMessages({ messageId, body: "first" });
    await sender.sendMessages({ messageId, body: "second" }); // accepted by the sender, not enqueued
    const [first] = await receiveExactly(receiver, 1);
    assert.equal(first.body, "first");
    await receiver.completeMessage(first);
    await assertNothingToPeek(receiver, "queue"); // sends are acknowledged after enqueue: no 2nd copy

    await delay(3_500); // the behaviour under test: the detection window passes
    await sender.sendMessages({ messageId, body: "third" });
    const [third] = await receiveExactly(receiver, 1);
    assert.equal(third.messageId, messageId);
    assert.equal(third.body, "third");
    await receiver.completeMessage(third);
    await assertNothingToPeek(receiver, "queue");
  });
});

// ---------------------------------------------------------------------------------------------
// Auto-delete on idle (own broker: the idle clock starts when the broker starts)

brokerTest("a queue idle for longer than auto_delete_on_idle is deleted: sending fails with MessagingEntityNotFound", async () => {
  // rule IDL-1 (auto_delete_on_idle = 1s)
  const queue = "js-time-idle";
  const idleBroker = new Broker(queueToml(queue, { auto_delete_on_idle: "1s" }));
  await idleBroker.start();
  try {
    // The queue exists right after start-up.
    await withClient(idleBroker.connectionString, async (client) => {
      await client.createSender(queue).sendMessages({ messageId: "early", body: "early" });
    });
    await delay(2_000); // the behaviour under test: the queue stays idle for longer than 1 s

    const client = noRetryClient(idleBroker.connectionString);
    try {
      await assertServiceBusError(
        client.createSender(queue).sendMessages({ body: "too late" }),
        "MessagingEntityNotFound",
      );
    } finally {
      await client.close();
    }
  } catch (error) {
    if (error && typeof error === "object") {
      try {
        error.message += `\n--- idle broker stderr tail (full log ${idleBroker.logPath}) ---\n${idleBroker.logTail(40)}`;
      } catch {
        // read-only message
      }
    }
    throw error;
  } finally {
    await idleBroker.stop();
  }
});
