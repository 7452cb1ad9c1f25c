// Child process of transports.test.js: the SDK as a user runs it against the cloud's shape of
// connection string (no UseDevelopmentEmulator: TLS), trusting the broker's development CA
// through NODE_EXTRA_CA_CERTS, which Node reads only at process start.
//
// Input (environment): FERROBUS_CONNECTION_STRING, FERROBUS_ENDPOINT (customEndpointAddress),
// FERROBUS_QUEUE, NODE_EXTRA_CA_CERTS. Output: one JSON line on stdout; errors on stderr, exit 1.

import { ServiceBusClient } from "@azure/service-bus";

const { FERROBUS_CONNECTION_STRING, FERROBUS_ENDPOINT, FERROBUS_QUEUE, NODE_EXTRA_CA_CERTS } = process.env;
if (!FERROBUS_CONNECTION_STRING || !FERROBUS_ENDPOINT || !FERROBUS_QUEUE || !NODE_EXTRA_CA_CERTS) {
  console.error("needs FERROBUS_CONNECTION_STRING, FERROBUS_ENDPOINT, FERROBUS_QUEUE and NODE_EXTRA_CA_CERTS");
  process.exit(2);
}

const client = new ServiceBusClient(FERROBUS_CONNECTION_STRING, {
  customEndpointAddress: FERROBUS_ENDPOINT,
  retryOptions: { maxRetries: 0, timeoutInMs: 20_000 },
});
try {
  const sender = client.createSender(FERROBUS_QUEUE);
  await sender.sendMessages([{ body: "tls-0" }, { body: "tls-1" }, { body: "tls-2" }]);
  await sender.close();
  const receiver = client.createReceiver(FERROBUS_QUEUE);
  const bodies = [];
  const deadline = Date.now() + 15_000;
  while (bodies.length < 3 && Date.now() < deadline) {
    for (const message of await receiver.receiveMessages(3 - bodies.length, { maxWaitTimeInMs: 5_000 })) {
      bodies.push(message.body);
      await receiver.completeMessage(message);
    }
  }
  const left = await receiver.peekMessages(10);
  await receiver.close();
  console.log(JSON.stringify({ bodies: bodies.sort(), left: left.length }));
} catch (error) {
  console.error(`${error?.name}: ${error?.message} (code ${error?.code})`);
  process.exitCode = 1;
} finally {
  await client.close();
}
