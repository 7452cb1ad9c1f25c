// Batch delete (issue 15, item 5): the newest @azure/service-bus's receiver.deleteMessages and
// purgeMessages call com.microsoft:batch-delete-messages on $management. The pinned SDK has no
// such call: these tests run when the SDK in node_modules has it — scripts/test runs the whole
// suite once more against the newest SDK (scripts/test-newest-sdks), where they do.

import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import {
  queueToml,
  receiveExactly,
  sequenceNumbersOf,
  toNumber,
  useBroker,
  withClient,
} from "./harness.js";

// A client connects only when used: this one just shows what the SDK's receivers offer.
const probe = new ServiceBusClient(
  "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=probe;SharedAccessKey=probe;UseDevelopmentEmulator=true",
);
const probeReceiver = probe.createReceiver("probe");
const HAS_DELETE =
  typeof probeReceiver.deleteMessages === "function" && typeof probeReceiver.purgeMessages === "function";
await probe.close();
const SKIP = HAS_DELETE ? false : "this @azure/service-bus has no deleteMessages (the newest does)";

const { broker, brokerTest } = useBroker(
  queueToml("js-delete") +
    queueToml("js-purge") +
    queueToml("js-delete-locked") +
    queueToml("js-delete-sessions", { requires_session: true }),
);

async function send(client, queue, bodies, extra = {}) {
  const sender = client.createSender(queue);
  await sender.sendMessages(bodies.map((body) => ({ body, ...extra })));
  await sender.close();
}

brokerTest(
  "deleteMessages removes the oldest messages up to the count, before the given time",
  async () => {
    await withClient(broker.connectionString, async (client) => {
      await send(client, "js-delete", ["a", "b", "c", "d", "e"]);
      const receiver = client.createReceiver("js-delete");
      // Nothing was enqueued before the epoch.
      assert.equal(await receiver.deleteMessages({ maxMessageCount: 10, beforeEnqueueTime: new Date(0) }), 0);
      assert.equal(await receiver.deleteMessages({ maxMessageCount: 3 }), 3);
      const left = await receiver.peekMessages(10);
      assert.deepEqual(
        left.map((message) => message.body),
        ["d", "e"],
        "the three oldest went",
      );
      assert.deepEqual(sequenceNumbersOf(left), [4, 5]);
      await receiver.close();
    });
  },
  { skip: SKIP },
);

brokerTest(
  "purgeMessages empties the queue past the SDK's batch size",
  async () => {
    await withClient(broker.connectionString, async (client) => {
      // More than one batch of 500 (the SDK asks again while a batch comes back full).
      const sender = client.createSender("js-purge");
      for (let start = 0; start < 1200; start += 300) {
        await sender.sendMessages(
          Array.from({ length: 300 }, (_, index) => ({ body: `m${start + index}` })),
        );
      }
      await sender.close();
      const receiver = client.createReceiver("js-purge");
      assert.equal(await receiver.purgeMessages(), 1200);
      assert.equal((await receiver.peekMessages(10)).length, 0);
      await receiver.close();
    });
  },
  { skip: SKIP },
);

brokerTest(
  "a message another receiver holds locked is not deleted",
  async () => {
    await withClient(broker.connectionString, async (client) => {
      await send(client, "js-delete-locked", ["held", "free"]);
      const holder = client.createReceiver("js-delete-locked");
      const [held] = await receiveExactly(holder, 1);
      assert.equal(held.body, "held");
      const deleter = client.createReceiver("js-delete-locked");
      assert.equal(await deleter.deleteMessages({ maxMessageCount: 10 }), 1);
      await holder.completeMessage(held);
      assert.equal((await deleter.peekMessages(10)).length, 0);
      await holder.close();
      await deleter.close();
    });
  },
  { skip: SKIP },
);

brokerTest(
  "a session receiver deletes its own session's messages only",
  async () => {
    await withClient(broker.connectionString, async (client) => {
      await send(client, "js-delete-sessions", ["a1", "a2"], { sessionId: "a" });
      await send(client, "js-delete-sessions", ["b1"], { sessionId: "b" });
      const session = await client.acceptSession("js-delete-sessions", "a");
      assert.equal(await session.deleteMessages({ maxMessageCount: 10 }), 2);
      await session.close();
      const other = await client.acceptSession("js-delete-sessions", "b");
      const [left] = await receiveExactly(other, 1);
      assert.equal(left.body, "b1");
      assert.ok(toNumber(left.sequenceNumber) > 0);
      await other.completeMessage(left);
      await other.close();
    });
  },
  { skip: SKIP },
);
