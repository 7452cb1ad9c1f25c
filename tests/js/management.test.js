// `$management` request/response operations through the public @azure/service-bus 7.9.5 API:
// peek, schedule/cancel, renew-lock, receive-by-sequence-number, update-disposition, and their
// error replies.
//
// Every test owns the queue named in it (QUEUES below). Rule IDs refer to
// /work/shared/SEMANTICS.md; wire details to /work/shared/protocol/azure-sdk-wire-contract.md
// (cited as "contract §N"). Error-path tests use a client with no retries and a 20 s operation
// timeout, so a missing broker reply surfaces as `ServiceTimeout` instead of a hang.

import assert from "node:assert/strict";
import Long from "long";
import {
  assertNearNow,
  assertNothingToReceive,
  assertServiceBusError,
  delay,
  noRetryClient,
  queuesToml,
  receiveExactly,
  sequenceNumbersOf,
  toNumber,
  useBroker,
  withClient,
} from "./harness.js";

const QUEUES = {
  "js-peek-active": {},
  "js-peek-empty": {},
  "js-peek-deferred": {},
  "js-peek-dead-letter": {},
  "js-schedule": {},
  "js-schedule-on-send": {},
  "js-schedule-cancel": {},
  "js-renew-lock": { lock_duration: "3s" },
  "js-renew-stale": { lock_duration: "1s" },
  "js-renew-completed": {},
  "js-deferred-receive": {},
  "js-deferred-unknown": {},
  "js-deferred-abandon": {},
  "js-deferred-dead-letter": {},
};

const { broker, brokerTest } = useBroker(queuesToml(QUEUES));

const NO_AUTO_RENEW = { maxAutoLockRenewalDurationInMs: 0 };
// How far in the future scheduled messages are placed.
const SCHEDULE_DELAY_MS = 2_500;
const FROM_FIRST = { fromSequenceNumber: Long.fromNumber(1) };

function summary(messages) {
  return messages.map((message) => ({
    messageId: message.messageId,
    sequenceNumber: toNumber(message.sequenceNumber),
    state: message.state,
  }));
}

async function withNoRetryClient(fn) {
  const client = noRetryClient(broker.connectionString);
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

// ---------------------------------------------------------------------------------------------
// peek-message

brokerTest("peekMessages returns active messages in sequence order without locking them", async () => {
  // contract §6.4 peek-message; rules SEQ-1, LCK-1 (peek is not a delivery)
  const queue = "js-peek-active";
  await withClient(broker.connectionString, async (client) => {
    const ids = ["peek-1", "peek-2", "peek-3"];
    await client.createSender(queue).sendMessages(
      ids.map((messageId, index) => ({ messageId, body: { index }, applicationProperties: { index } })),
    );
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);

    const peeked = await receiver.peekMessages(10, FROM_FIRST);
    assert.deepEqual(summary(peeked), [
      { messageId: "peek-1", sequenceNumber: 1, state: "active" },
      { messageId: "peek-2", sequenceNumber: 2, state: "active" },
      { messageId: "peek-3", sequenceNumber: 3, state: "active" },
    ]);
    assert.deepEqual(
      peeked.map((message) => message.body),
      [{ index: 0 }, { index: 1 }, { index: 2 }],
    );
    assert.deepEqual(peeked[1].applicationProperties, { index: 1 });
    for (const message of peeked) {
      assert.equal(message.lockToken, undefined, "peeked messages carry no lock");
      assertNearNow(message.enqueuedTimeUtc, 10_000, "peeked enqueuedTimeUtc");
    }

    const fromSecond = await receiver.peekMessages(10, { fromSequenceNumber: Long.fromNumber(2) });
    assert.deepEqual(sequenceNumbersOf(fromSecond), [2, 3], "fromSequenceNumber is inclusive");
    const limited = await receiver.peekMessages(2, FROM_FIRST);
    assert.deepEqual(sequenceNumbersOf(limited), [1, 2], "maxMessageCount is honoured");

    const received = await receiveExactly(receiver, 3);
    assert.deepEqual(
      received.map((message) => message.deliveryCount),
      [0, 0, 0],
      "peeking did not count as a delivery",
    );
    for (const message of received) await receiver.completeMessage(message);
    assert.deepEqual(await receiver.peekMessages(10, FROM_FIRST), [], "completed messages are gone from peek");
  });
});

brokerTest("peekMessages on an empty queue returns []", async () => {
  // contract §6.4 peek-message: 204 when there is nothing (JS dereferences body.messages otherwise)
  await withNoRetryClient(async (client) => {
    const receiver = client.createReceiver("js-peek-empty");
    assert.deepEqual(await receiver.peekMessages(10), []);
    assert.deepEqual(await receiver.peekMessages(10, FROM_FIRST), []);
  });
});

brokerTest("a deferred message shows in peek with state deferred", async () => {
  // rule LCK-4; contract §4.3 x-opt-message-state = 1
  const queue = "js-peek-deferred";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages([
      { messageId: "stays-active", body: 1 },
      { messageId: "gets-deferred", body: 2 },
    ]);
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const received = await receiveExactly(receiver, 2);
    const toDefer = received.find((message) => message.messageId === "gets-deferred");
    const toAbandon = received.find((message) => message.messageId === "stays-active");
    await receiver.deferMessage(toDefer);
    await receiver.abandonMessage(toAbandon);

    const peeked = await receiver.peekMessages(10, FROM_FIRST);
    assert.deepEqual(summary(peeked), [
      { messageId: "stays-active", sequenceNumber: 1, state: "active" },
      { messageId: "gets-deferred", sequenceNumber: 2, state: "deferred" },
    ]);
  });
});

brokerTest("the dead-letter queue can be peeked and shows the dead-letter reason", async () => {
  // rules DLQ-2, DLQ-4
  const queue = "js-peek-dead-letter";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "peek-dead", body: "x" });
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [message] = await receiveExactly(receiver, 1);
    await receiver.deadLetterMessage(message, { deadLetterReason: "Peekable", deadLetterErrorDescription: "see DLQ" });

    assert.deepEqual(await receiver.peekMessages(10, FROM_FIRST), [], "the parent queue no longer shows it");
    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter" });
    const peeked = await deadLetters.peekMessages(10, FROM_FIRST);
    assert.deepEqual(
      peeked.map((dead) => [dead.messageId, dead.deadLetterReason, dead.deadLetterErrorDescription]),
      [["peek-dead", "Peekable", "see DLQ"]],
    );
  });
});

// ---------------------------------------------------------------------------------------------
// schedule-message / cancel-scheduled-message

brokerTest("scheduleMessages returns sequence numbers and the message appears only at its time", async () => {
  // rules SCH-1, SCH-2, SCH-3; contract §6.4 schedule-message
  const queue = "js-schedule";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const scheduledTime = new Date(Date.now() + SCHEDULE_DELAY_MS);
    const sequenceNumbers = await sender.scheduleMessages(
      [{ messageId: "scheduled-1", body: "on time", applicationProperties: { kind: "scheduled" } }],
      scheduledTime,
    );
    assert.equal(sequenceNumbers.length, 1);
    const scheduledSequenceNumber = toNumber(sequenceNumbers[0]);
    assert.ok(scheduledSequenceNumber >= 1, `schedule returned sequence number ${scheduledSequenceNumber}`);

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const peeked = await receiver.peekMessages(10, FROM_FIRST);
    assert.deepEqual(summary(peeked), [
      { messageId: "scheduled-1", sequenceNumber: scheduledSequenceNumber, state: "scheduled" },
    ]);
    assert.ok(peeked[0].scheduledEnqueueTimeUtc instanceof Date, "peek shows scheduledEnqueueTimeUtc");
    assert.ok(
      Math.abs(peeked[0].scheduledEnqueueTimeUtc.getTime() - scheduledTime.getTime()) < 1_000,
      `peeked scheduledEnqueueTimeUtc ${peeked[0].scheduledEnqueueTimeUtc.toISOString()} != ${scheduledTime.toISOString()}`,
    );

    const early = await receiver.receiveMessages(1, {
      maxWaitTimeInMs: Math.max(scheduledTime.getTime() - Date.now() - 500, 100),
    });
    assert.deepEqual(early.map((message) => message.messageId), [], "received before its scheduled time");

    const [message] = await receiveExactly(receiver, 1, SCHEDULE_DELAY_MS + 10_000);
    assert.ok(Date.now() >= scheduledTime.getTime() - 100, "received before its scheduled time");
    assert.equal(message.messageId, "scheduled-1");
    assert.equal(message.body, "on time");
    assert.deepEqual(message.applicationProperties, { kind: "scheduled" });
    assert.equal(message.state, "active");
    assert.equal(message.deliveryCount, 0);
    assert.ok(
      message.enqueuedTimeUtc.getTime() >= scheduledTime.getTime() - 1_000,
      `enqueuedTimeUtc ${message.enqueuedTimeUtc.toISOString()} is before the scheduled time (rule SCH-3)`,
    );
    await receiver.completeMessage(message);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("a message sent with scheduledEnqueueTimeUtc is held until its time", async () => {
  // rules SCH-1, SCH-2 (x-opt-scheduled-enqueue-time on a normal transfer)
  const queue = "js-schedule-on-send";
  await withClient(broker.connectionString, async (client) => {
    const scheduledTime = new Date(Date.now() + SCHEDULE_DELAY_MS);
    await client
      .createSender(queue)
      .sendMessages({ messageId: "send-scheduled", body: "later", scheduledEnqueueTimeUtc: scheduledTime });

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const peeked = await receiver.peekMessages(10, FROM_FIRST);
    assert.deepEqual(
      peeked.map((message) => [message.messageId, message.state]),
      [["send-scheduled", "scheduled"]],
    );
    const early = await receiver.receiveMessages(1, {
      maxWaitTimeInMs: Math.max(scheduledTime.getTime() - Date.now() - 500, 100),
    });
    assert.deepEqual(early.map((message) => message.messageId), [], "received before its scheduled time");

    const [message] = await receiveExactly(receiver, 1, SCHEDULE_DELAY_MS + 10_000);
    assert.ok(Date.now() >= scheduledTime.getTime() - 100, "received before its scheduled time");
    assert.equal(message.messageId, "send-scheduled");
    await receiver.completeMessage(message);
  });
});

brokerTest("cancelScheduledMessages removes a scheduled message before it activates", async () => {
  // rule SCH-4; contract §6.4 cancel-scheduled-message
  const queue = "js-schedule-cancel";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const scheduledTime = new Date(Date.now() + SCHEDULE_DELAY_MS);
    const [cancelled, kept] = await sender.scheduleMessages(
      [
        { messageId: "cancel-me", body: "cancelled" },
        { messageId: "keep-me", body: "kept" },
      ],
      scheduledTime,
    );
    assert.notEqual(toNumber(cancelled), toNumber(kept), "each scheduled message has its own sequence number");
    await sender.cancelScheduledMessages(cancelled);

    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const peeked = await receiver.peekMessages(10, FROM_FIRST);
    assert.deepEqual(summary(peeked), [
      { messageId: "keep-me", sequenceNumber: toNumber(kept), state: "scheduled" },
    ]);

    // The kept message proves the scheduled time has passed; the cancelled one must not follow.
    const [message] = await receiveExactly(receiver, 1, SCHEDULE_DELAY_MS + 10_000);
    assert.equal(message.messageId, "keep-me");
    await receiver.completeMessage(message);
    await assertNothingToReceive(receiver);
  });
});

// ---------------------------------------------------------------------------------------------
// renew-lock

brokerTest("renewMessageLock extends lockedUntilUtc past the original lock", async () => {
  // rule LCK-1 (the lock can be renewed); contract §6.4 renew-lock; lock_duration = 3s
  const queue = "js-renew-lock";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "renew-1", body: "long work" });
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [message] = await receiveExactly(receiver, 1);
    const originalLockedUntil = message.lockedUntilUtc.getTime();

    // The renewal is relative to the time of renewal, so let some of the lock elapse first.
    await delay(1_000);
    const renewedUntil = await receiver.renewMessageLock(message);
    assert.ok(renewedUntil instanceof Date);
    assert.ok(
      renewedUntil.getTime() >= originalLockedUntil + 500,
      `renewed lock ${renewedUntil.toISOString()} does not extend ${new Date(originalLockedUntil).toISOString()}`,
    );
    assertNearNow(renewedUntil, 10_000, "renewed lockedUntilUtc");
    assert.equal(message.lockedUntilUtc.getTime(), renewedUntil.getTime(), "the SDK updates message.lockedUntilUtc");

    // Outlive the original lock: the renewed lock still holds, so nothing is redelivered and
    // the message can be completed.
    const extra = await receiver.receiveMessages(1, {
      maxWaitTimeInMs: Math.max(originalLockedUntil + 700 - Date.now(), 100),
    });
    assert.deepEqual(extra.map((redelivered) => redelivered.messageId), [], "redelivered although the lock was renewed");
    await receiver.completeMessage(message);
    await assertNothingToReceive(receiver);
  });
});

brokerTest("renewMessageLock on an expired lock fails with MessageLockLost", async () => {
  // rule LCK-3; contract §6.3 (410 + com.microsoft:message-lock-lost); lock_duration = 1s
  const queue = "js-renew-stale";
  await withNoRetryClient(async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "stale-1", body: "too slow" });
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [stale] = await receiveExactly(receiver, 1);
    // The redelivery proves the first lock expired.
    const [redelivered] = await receiveExactly(receiver, 1, 10_000);
    assert.equal(redelivered.messageId, "stale-1");
    await assertServiceBusError(receiver.renewMessageLock(stale), "MessageLockLost");
    await receiver.completeMessage(redelivered);
  });
});

brokerTest("renewMessageLock after completing fails with MessageLockLost", async () => {
  // rule LCK-3 (unknown lock)
  const queue = "js-renew-completed";
  await withNoRetryClient(async (client) => {
    await client.createSender(queue).sendMessages({ messageId: "done-1", body: "done" });
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [message] = await receiveExactly(receiver, 1);
    await receiver.completeMessage(message);
    await assertServiceBusError(receiver.renewMessageLock(message), "MessageLockLost");
  });
});

// ---------------------------------------------------------------------------------------------
// receive-by-sequence-number / update-disposition

/** Sends `messages`, receives them all and defers them; returns their sequence numbers (Long). */
async function sendAndDefer(client, queue, messages) {
  await client.createSender(queue).sendMessages(messages);
  const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
  const received = await receiveExactly(receiver, messages.length);
  for (const message of received) await receiver.deferMessage(message);
  await receiver.close();
  return received.map((message) => message.sequenceNumber);
}

brokerTest("receiveDeferredMessages returns deferred messages that completeMessage settles", async () => {
  // rule LCK-4; contract §6.4 receive-by-sequence-number and update-disposition (completed)
  const queue = "js-deferred-receive";
  await withClient(broker.connectionString, async (client) => {
    const [first, second] = await sendAndDefer(client, queue, [
      { messageId: "deferred-1", body: "one" },
      { messageId: "deferred-2", body: "two" },
    ]);
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    await assertNothingToReceive(receiver);

    const deferred = await receiver.receiveDeferredMessages([first, second]);
    assert.deepEqual(
      deferred.map((message) => [message.messageId, toNumber(message.sequenceNumber), message.state]).sort(),
      [
        ["deferred-1", toNumber(first), "deferred"],
        ["deferred-2", toNumber(second), "deferred"],
      ],
    );
    for (const message of deferred) {
      assert.match(message.lockToken ?? "", /^[0-9a-f-]{36}$/, "a peek-lock deferred receive carries a lock token");
      assert.ok(message.lockedUntilUtc instanceof Date && message.lockedUntilUtc.getTime() > Date.now());
    }
    const byId = Object.fromEntries(deferred.map((message) => [message.messageId, message]));
    assert.equal(byId["deferred-1"].body, "one");

    await receiver.completeMessage(byId["deferred-1"]);
    const remaining = await receiver.peekMessages(10, FROM_FIRST);
    assert.deepEqual(summary(remaining), [
      { messageId: "deferred-2", sequenceNumber: toNumber(second), state: "deferred" },
    ]);
    await receiver.completeMessage(byId["deferred-2"]);
    assert.deepEqual(await receiver.peekMessages(10, FROM_FIRST), []);
  });
});

brokerTest("receiveDeferredMessages for an unknown sequence number fails with MessageNotFound", async () => {
  // contract §6.3 (404 + com.microsoft:message-not-found)
  await withNoRetryClient(async (client) => {
    const receiver = client.createReceiver("js-deferred-unknown");
    await assertServiceBusError(receiver.receiveDeferredMessages(Long.fromNumber(987_654)), "MessageNotFound");
    // The management link survives the error reply.
    assert.deepEqual(await receiver.peekMessages(10, FROM_FIRST), []);
  });
});

brokerTest("abandoning a deferred message keeps it deferred with the modified properties", async () => {
  // rules LCK-2, LCK-4; contract §6.4 update-disposition (abandoned, properties-to-modify)
  const queue = "js-deferred-abandon";
  await withClient(broker.connectionString, async (client) => {
    const [sequenceNumber] = await sendAndDefer(client, queue, [
      { messageId: "deferred-abandon", body: "x", applicationProperties: { original: "kept" } },
    ]);
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [first] = await receiver.receiveDeferredMessages(sequenceNumber);
    await receiver.abandonMessage(first, { note: "abandoned while deferred" });

    await assertNothingToReceive(receiver);
    const [again] = await receiver.receiveDeferredMessages(sequenceNumber);
    assert.equal(again.messageId, "deferred-abandon");
    assert.equal(again.state, "deferred");
    assert.deepEqual(again.applicationProperties, { original: "kept", note: "abandoned while deferred" });
    assert.equal(again.deliveryCount, first.deliveryCount + 1, "abandon increments the delivery count");
    await receiver.completeMessage(again);
  });
});

brokerTest("dead-lettering a deferred message records reason, description and properties", async () => {
  // rules DLQ-4, LCK-4; contract §6.4 update-disposition (suspended)
  const queue = "js-deferred-dead-letter";
  await withClient(broker.connectionString, async (client) => {
    const [sequenceNumber] = await sendAndDefer(client, queue, [
      { messageId: "deferred-dead", body: { id: 7 }, applicationProperties: { original: "kept" } },
    ]);
    const receiver = client.createReceiver(queue, NO_AUTO_RENEW);
    const [deferred] = await receiver.receiveDeferredMessages(sequenceNumber);
    await receiver.deadLetterMessage(deferred, {
      deadLetterReason: "DeferredTooLong",
      deadLetterErrorDescription: "nobody came back for it",
      note: "dead-lettered while deferred",
    });
    assert.deepEqual(await receiver.peekMessages(10, FROM_FIRST), [], "gone from the parent queue");

    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", receiveMode: "receiveAndDelete" });
    const [dead] = await receiveExactly(deadLetters, 1);
    assert.equal(dead.messageId, "deferred-dead");
    assert.deepEqual(dead.body, { id: 7 });
    assert.equal(dead.deadLetterReason, "DeferredTooLong");
    assert.equal(dead.deadLetterErrorDescription, "nobody came back for it");
    assert.equal(dead.applicationProperties.original, "kept");
    assert.equal(dead.applicationProperties.note, "dead-lettered while deferred");
  });
});
