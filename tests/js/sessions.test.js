// Session queues through the unmodified public @azure/service-bus 7.9.5 API (`acceptSession`,
// `acceptNextSession`, ServiceBusSessionReceiver).
//
// Every test owns the queue named in it, configured in QUEUES below (all `requires_session`), so
// tests are independent of order. Rule IDs refer to /work/shared/SEMANTICS.md; wire details to
// /work/shared/protocol/azure-sdk-wire-contract.md (§3.5 session filter and lock, §6.4 session
// management operations).

import assert from "node:assert/strict";
import { ServiceBusClient, isServiceBusError } from "@azure/service-bus";
import {
  TEST_RETRY_OPTIONS,
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

// name -> overrides of harness.QUEUE_DEFAULTS; one queue per test, every one session-enabled.
const QUEUES = {
  "js-ses-interleaved": {},
  "js-ses-next": {},
  "js-ses-locked": {},
  "js-ses-empty": {},
  "js-ses-state": {},
  "js-ses-renew": { lock_duration: "5s" },
  "js-ses-subscribe": {},
  "js-ses-settle": {},
  "js-ses-deferred": {},
  "js-ses-peek": {},
  "js-ses-no-id": {},
  "js-ses-lock-expiry": { lock_duration: "2s" },
  "js-ses-release": {},
};
const SESSION_QUEUES = Object.fromEntries(
  Object.entries(QUEUES).map(([name, overrides]) => [name, { requires_session: true, ...overrides }]),
);

const { broker, brokerTest } = useBroker(queuesToml(SESSION_QUEUES));

// Session receivers that must not renew the session lock behind the test's back (JS auto-renews
// for 5 min by default).
const NO_AUTO_RENEW = { maxAutoLockRenewalDurationInMs: 0 };

/** Sends `count` messages of `sessionId` with ids `<sessionId>-<n>`, one send each. */
function sessionMessages(sessionId, count, extra = {}) {
  return Array.from({ length: count }, (_, index) => ({
    messageId: `${sessionId}-${index}`,
    sessionId,
    body: `${sessionId} #${index}`,
    ...extra,
  }));
}

brokerTest("acceptSession receives only its session's messages, in order, from interleaved sessions", async () => {
  // rule SES-1; contract §3.5 (session filter = plain string, echoed in the attach reply)
  const queue = "js-ses-interleaved";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    const a = sessionMessages("A", 4);
    const b = sessionMessages("B", 4);
    // Interleaved: A0 B0 A1 B1 ... (one message per send, all sessions in one queue).
    for (let index = 0; index < 4; index += 1) {
      await sender.sendMessages(a[index]);
      await sender.sendMessages(b[index]);
    }

    const receiverA = await client.acceptSession(queue, "A", NO_AUTO_RENEW);
    assert.equal(receiverA.sessionId, "A");
    assertNearNow(receiverA.sessionLockedUntilUtc, 60_000, "sessionLockedUntilUtc");
    assert.ok(receiverA.sessionLockedUntilUtc.getTime() > Date.now(), "the session lock is held");
    const fromA = await receiveExactly(receiverA, 4);
    assert.deepEqual(
      fromA.map((message) => message.messageId),
      a.map((message) => message.messageId),
    );
    assert.deepEqual(
      fromA.map((message) => message.sessionId),
      ["A", "A", "A", "A"],
    );
    assert.deepEqual(sequenceNumbersOf(fromA), [1, 3, 5, 7], "sequence numbers are per queue, in arrival order");
    for (const message of fromA) await receiverA.completeMessage(message);
    await assertNothingToReceive(receiverA);

    const receiverB = await client.acceptSession(queue, "B", NO_AUTO_RENEW);
    const fromB = await receiveExactly(receiverB, 4);
    assert.deepEqual(
      fromB.map((message) => message.messageId),
      b.map((message) => message.messageId),
    );
    assert.deepEqual(sequenceNumbersOf(fromB), [2, 4, 6, 8]);
  });
});

brokerTest("acceptNextSession picks a session that has messages and sets receiver.sessionId", async () => {
  // rule SES-2 (next available: the unlocked session with the oldest available message); contract §3.5
  const queue = "js-ses-next";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    await sender.sendMessages(sessionMessages("first", 2));
    await sender.sendMessages(sessionMessages("second", 1));

    const receiver = await client.acceptNextSession(queue, NO_AUTO_RENEW);
    assert.equal(receiver.sessionId, "first", "the session with the oldest message comes first");
    assert.equal(typeof receiver.sessionId, "string", "plain string in the attach reply's session filter");
    assert.ok(receiver.sessionLockedUntilUtc instanceof Date);
    const received = await receiveExactly(receiver, 2);
    assert.deepEqual(
      received.map((message) => message.messageId),
      ["first-0", "first-1"],
    );

    // "first" is locked by `receiver`, so the next one is "second".
    const next = await client.acceptNextSession(queue, NO_AUTO_RENEW);
    assert.equal(next.sessionId, "second");
    const [only] = await receiveExactly(next, 1);
    assert.equal(only.messageId, "second-0");
    assert.equal(only.sessionId, "second");
  });
});

brokerTest("acceptSession for a session locked by another receiver fails with SessionCannotBeLocked", async () => {
  // rule SES-2; contract §3.5 (detach com.microsoft:session-cannot-be-locked)
  const queue = "js-ses-locked";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages(sessionMessages("S", 1));
    const holder = await client.acceptSession(queue, "S", NO_AUTO_RENEW);

    const started = Date.now();
    await assertServiceBusError(client.acceptSession(queue, "S", NO_AUTO_RENEW), "SessionCannotBeLocked");
    assert.ok(Date.now() - started < 10_000, "refused promptly");

    // Also from a second connection.
    await withClient(broker.connectionString, async (other) => {
      await assertServiceBusError(other.acceptSession(queue, "S", NO_AUTO_RENEW), "SessionCannotBeLocked");
    });

    // The holder is unaffected.
    const [message] = await receiveExactly(holder, 1);
    assert.equal(message.messageId, "S-0");
    await holder.completeMessage(message);
  });
});

brokerTest("acceptNextSession on an empty queue fails promptly with ServiceTimeout", async () => {
  // rule SES-2 (waits up to the client's timeout); contract §3.5 (detach com.microsoft:timeout)
  const queue = "js-ses-empty";
  const timeoutInMs = 3_000;
  const client = new ServiceBusClient(broker.connectionString, {
    retryOptions: { ...TEST_RETRY_OPTIONS, timeoutInMs },
  });
  try {
    const started = Date.now();
    const error = await assertServiceBusError(client.acceptNextSession(queue, NO_AUTO_RENEW), "ServiceTimeout");
    const elapsed = Date.now() - started;
    assert.ok(elapsed < timeoutInMs + 5_000, `acceptNextSession took ${elapsed} ms with timeoutInMs ${timeoutInMs}`);
    assert.ok(elapsed >= 1_000, `the broker should wait for a session before giving up (took ${elapsed} ms)`);
    assert.ok(error.message, "the error has a message");

    // A session that appears later is then found.
    await client.createSender(queue).sendMessages(sessionMessages("late", 1));
    const receiver = await client.acceptNextSession(queue, NO_AUTO_RENEW);
    assert.equal(receiver.sessionId, "late");
  } finally {
    await client.close();
  }
});

brokerTest("setSessionState / getSessionState round-trip strings, JSON, Buffers and null", async () => {
  // rule SES-2 (state kept per session, also without messages); contract §6.4 set/get-session-state
  const queue = "js-ses-state";
  await withClient(broker.connectionString, async (client) => {
    const receiver = await client.acceptSession(queue, "stateful", NO_AUTO_RENEW);
    assert.equal(await receiver.getSessionState(), null, "a new session has no state");

    await receiver.setSessionState("state1");
    assert.equal(await receiver.getSessionState(), "state1");

    const json = { step: 3, items: ["a", "b"], done: false };
    await receiver.setSessionState(json);
    assert.deepEqual(await receiver.getSessionState(), json);

    const bytes = Buffer.from([0x00, 0xff, 0x10, 0x80, 0x7f]);
    await receiver.setSessionState(bytes);
    const readBack = await receiver.getSessionState();
    assert.ok(Buffer.isBuffer(readBack), `binary state comes back as a Buffer, got ${typeof readBack}`);
    assert.deepEqual([...readBack], [...bytes]);

    // State is per session and survives releasing the session.
    await receiver.close();
    const again = await client.acceptSession(queue, "stateful", NO_AUTO_RENEW);
    assert.deepEqual([...(await again.getSessionState())], [...bytes]);
    const other = await client.acceptSession(queue, "other", NO_AUTO_RENEW);
    assert.equal(await other.getSessionState(), null);

    await again.setSessionState(null);
    assert.equal(await again.getSessionState(), null, "setting null clears the state");
  });
});

brokerTest("renewSessionLock moves sessionLockedUntilUtc forward", async () => {
  // rule SES-2 (the lock can be renewed); contract §6.4 renew-session-lock (lock_duration = 5s)
  const queue = "js-ses-renew";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages(sessionMessages("R", 1));
    const receiver = await client.acceptSession(queue, "R", NO_AUTO_RENEW);
    const initial = receiver.sessionLockedUntilUtc;
    assert.ok(initial instanceof Date);
    const initialRemaining = initial.getTime() - Date.now();
    assert.ok(
      initialRemaining > 2_000 && initialRemaining <= 6_000,
      `the session lock reflects lock_duration 5s (remaining ${initialRemaining} ms)`,
    );

    await delay(1_500);
    const renewed = await receiver.renewSessionLock();
    assert.ok(renewed instanceof Date, `renewSessionLock returns a Date, got ${renewed}`);
    assert.ok(
      renewed.getTime() >= initial.getTime() + 1_000,
      `renewed ${renewed.toISOString()} should be later than initial ${initial.toISOString()}`,
    );
    assert.equal(receiver.sessionLockedUntilUtc.getTime(), renewed.getTime(), "the receiver tracks the renewed lock");

    // Renewing keeps the session: after the original lock time has passed it is still usable.
    await delay(Math.max(0, initial.getTime() - Date.now()) + 1_000);
    await receiver.renewSessionLock();
    const [message] = await receiveExactly(receiver, 1);
    assert.equal(message.messageId, "R-0");
    await receiver.completeMessage(message);
  });
});

brokerTest("subscribe on a session receiver delivers the session's messages in order", async () => {
  // rule SES-1; contract §3.6 (streaming receiver credit)
  const queue = "js-ses-subscribe";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    await sender.sendMessages(sessionMessages("other", 2));
    const expected = sessionMessages("mine", 3);
    await sender.sendMessages(expected);

    const receiver = await client.acceptSession(queue, "mine", NO_AUTO_RENEW);
    const seen = [];
    const errors = [];
    let allSeen;
    const done = new Promise((resolve) => {
      allSeen = resolve;
    });
    const subscription = receiver.subscribe(
      {
        async processMessage(message) {
          seen.push(message.messageId);
          await receiver.completeMessage(message);
          if (seen.length === expected.length) allSeen();
        },
        async processError(args) {
          errors.push(`${args.errorSource}: ${args.error?.code ?? ""} ${args.error?.message}`);
        },
      },
      { autoCompleteMessages: false },
    );
    await done;
    await delay(500); // anything from another session would show up here
    await subscription.close();
    assert.deepEqual(
      seen,
      expected.map((message) => message.messageId),
    );
    assert.deepEqual(errors, [], "processError was called");
    // SDK: a session receiver stays "already receiving" after its subscription is closed, so the
    // leftovers are checked by peeking.
    assert.deepEqual(await receiver.peekMessages(10), [], "every message of the session was completed");
    const other = await client.acceptSession(queue, "other", NO_AUTO_RENEW);
    assert.deepEqual(
      (await other.peekMessages(10)).map((message) => message.messageId),
      ["other-0", "other-1"],
      "the other session's messages are untouched",
    );
  });
});

brokerTest("complete, abandon and deadLetter work on session messages", async () => {
  // rules LCK-1, LCK-2, DLQ-4 on a session queue; rule SES-1 (abandoned message keeps its place)
  const queue = "js-ses-settle";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages(sessionMessages("settle", 3));
    const receiver = await client.acceptSession(queue, "settle", NO_AUTO_RENEW);

    const [first] = await receiveExactly(receiver, 1);
    assert.equal(first.messageId, "settle-0");
    await receiver.abandonMessage(first, { note: "abandoned" });
    const [again] = await receiveExactly(receiver, 1);
    assert.equal(again.messageId, "settle-0", "an abandoned session message is redelivered first");
    assert.equal(again.deliveryCount, 1);
    assert.equal(again.applicationProperties?.note, "abandoned");
    await receiver.completeMessage(again);

    const [second] = await receiveExactly(receiver, 1);
    assert.equal(second.messageId, "settle-1");
    await receiver.deadLetterMessage(second, {
      deadLetterReason: "SessionReason",
      deadLetterErrorDescription: "dead-lettered from a session",
    });

    const [third] = await receiveExactly(receiver, 1);
    assert.equal(third.messageId, "settle-2");
    await receiver.completeMessage(third);
    await assertNothingToReceive(receiver);

    // The DLQ of a session queue is not session-enabled (DLQ-1/2).
    const deadLetters = client.createReceiver(queue, { subQueueType: "deadLetter", receiveMode: "receiveAndDelete" });
    const [dead] = await receiveExactly(deadLetters, 1);
    assert.equal(dead.messageId, "settle-1");
    assert.equal(dead.sessionId, "settle", "the dead-lettered copy keeps its sessionId");
    assert.equal(dead.deadLetterReason, "SessionReason");
    assert.equal(dead.deadLetterErrorDescription, "dead-lettered from a session");
  });
});

brokerTest("deferred session messages are only retrievable through the session receiver by sequence number", async () => {
  // rule LCK-4 on a session queue; contract §6.4 receive-by-sequence-number (with session-id)
  const queue = "js-ses-deferred";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages(sessionMessages("def", 2));
    const receiver = await client.acceptSession(queue, "def", NO_AUTO_RENEW);

    const received = await receiveExactly(receiver, 2);
    await receiver.deferMessage(received[0]);
    await receiver.deferMessage(received[1], { deferredNote: "yes" });
    await assertNothingToReceive(receiver);

    const sequenceNumbers = received.map((message) => message.sequenceNumber);
    const deferred = await receiver.receiveDeferredMessages(sequenceNumbers);
    assert.deepEqual(
      deferred.map((message) => message.messageId).sort(),
      ["def-0", "def-1"],
    );
    for (const message of deferred) {
      assert.equal(message.sessionId, "def");
      assert.equal(message.state, "deferred");
      assert.ok(message.lockToken, "a deferred message received in peek-lock has a lock token");
    }
    const withNote = deferred.find((message) => message.messageId === "def-1");
    assert.equal(withNote.applicationProperties?.deferredNote, "yes");

    for (const message of deferred) await receiver.completeMessage(message);
    const gone = await receiver.receiveDeferredMessages(sequenceNumbers).then(
      (messages) => messages,
      (error) => error,
    );
    if (Array.isArray(gone)) {
      assert.deepEqual(gone, [], "completed deferred messages are gone");
    } else {
      assert.ok(isServiceBusError(gone), `${gone?.name}: ${gone?.message}`);
      assert.equal(gone.code, "MessageNotFound", gone.message);
    }
  });
});

brokerTest("peekMessages on a session receiver shows only its session", async () => {
  // rule SES-1; contract §6.4 peek-message (with session-id)
  const queue = "js-ses-peek";
  await withClient(broker.connectionString, async (client) => {
    const sender = client.createSender(queue);
    for (let index = 0; index < 3; index += 1) {
      await sender.sendMessages({ messageId: `P-${index}`, sessionId: "P", body: index });
      await sender.sendMessages({ messageId: `Q-${index}`, sessionId: "Q", body: index });
    }

    const receiver = await client.acceptSession(queue, "P", NO_AUTO_RENEW);
    const peeked = await receiver.peekMessages(10);
    assert.deepEqual(
      peeked.map((message) => message.messageId),
      ["P-0", "P-1", "P-2"],
    );
    assert.deepEqual(sequenceNumbersOf(peeked), [1, 3, 5]);
    for (const message of peeked) assert.equal(message.sessionId, "P");

    // Peeking does not lock or consume.
    const received = await receiveExactly(receiver, 3);
    assert.deepEqual(
      received.map((message) => message.messageId),
      ["P-0", "P-1", "P-2"],
    );
  });
});

brokerTest("sending a message without sessionId to a session queue fails", async () => {
  // rule SES-1 (a session entity refuses messages without a session id)
  const queue = "js-ses-no-id";
  const client = noRetryClient(broker.connectionString);
  try {
    const sender = client.createSender(queue);
    let caught;
    const started = Date.now();
    try {
      await sender.sendMessages({ messageId: "no-session", body: "x" });
    } catch (error) {
      caught = error;
    }
    assert.ok(caught, "the send succeeded");
    assert.ok(Date.now() - started < 10_000, "refused promptly");
    assert.ok(isServiceBusError(caught), `expected a ServiceBusError, got ${caught?.name}: ${caught?.message}`);
    // The broker refuses the transfer with amqp:not-allowed, which JS reports as GeneralError
    // with core-amqp's "InvalidOperationError: " prefix.
    assert.equal(caught.code, "GeneralError", `wrong error code; message: ${caught.message}`);
    assert.match(caught.message, /SessionId was not set/);
    assert.ok(!caught.retryable, `not retryable (code ${caught.code}: ${caught.message})`);

    // The refusal does not break the sender, and nothing was enqueued.
    await sender.sendMessages({ messageId: "with-session", sessionId: "ok", body: "y" });
    const receiver = await client.acceptNextSession(queue, NO_AUTO_RENEW);
    assert.equal(receiver.sessionId, "ok");
    const [message] = await receiveExactly(receiver, 1);
    assert.equal(message.messageId, "with-session");
    assert.equal(toNumber(message.sequenceNumber), 1, "the refused message took no sequence number");
  } finally {
    await client.close();
  }
});

brokerTest("an expired session lock makes completing a held message fail with SessionLockLost", async () => {
  // rule SES-2 (lock_duration = 2s, no auto-renew); contract §3.5 (detach com.microsoft:session-lock-lost)
  const queue = "js-ses-lock-expiry";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages(sessionMessages("E", 2));
    const receiver = await client.acceptSession(queue, "E", NO_AUTO_RENEW);
    const lockRemaining = receiver.sessionLockedUntilUtc.getTime() - Date.now();
    assert.ok(lockRemaining <= 3_000, `session lock reflects lock_duration 2s (remaining ${lockRemaining} ms)`);
    const [held] = await receiveExactly(receiver, 1);
    assert.equal(held.messageId, "E-0");

    await delay(3_000);
    assert.ok(receiver.isClosed, "the broker detached the session link (com.microsoft:session-lock-lost)");
    const started = Date.now();
    await assertServiceBusError(receiver.completeMessage(held), "SessionLockLost");
    assert.ok(Date.now() - started < 10_000, "fails promptly");

    // The session is free again: another receiver takes it, and the held message comes back
    // first with its delivery count incremented.
    const next = await client.acceptSession(queue, "E", NO_AUTO_RENEW);
    const [redelivered] = await receiveExactly(next, 1);
    assert.equal(redelivered.messageId, "E-0");
    assert.equal(redelivered.deliveryCount, 1, "the lost session's locked message counts a delivery");
    await next.completeMessage(redelivered);
  });
});

brokerTest("closing a session receiver releases the session for the next receiver", async () => {
  // rule SES-2 (closing the receiver releases the session)
  const queue = "js-ses-release";
  await withClient(broker.connectionString, async (client) => {
    await client.createSender(queue).sendMessages(sessionMessages("rel", 2));
    const first = await client.acceptSession(queue, "rel", NO_AUTO_RENEW);
    const [message] = await receiveExactly(first, 1);
    await first.completeMessage(message);
    await first.close();

    const second = await client.acceptSession(queue, "rel", NO_AUTO_RENEW);
    const [rest] = await receiveExactly(second, 1);
    assert.equal(rest.messageId, "rel-1");
  });
});
