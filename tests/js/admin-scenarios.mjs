// Child process of admin.test.js: the administration client as a user runs it, trusting the
// broker's development CA through NODE_EXTRA_CA_CERTS (which Node reads only at process start,
// so the test sets it in this process's environment) instead of a `tlsOptions.ca` client option.
//
// Input: FERROBUS_ADMIN_CONNECTION_STRING and FERROBUS_ADMIN_QUEUE in the environment.
// Output: one JSON line on stdout with what the client received; the parent asserts on it.
// Any error is printed on stderr and the exit status is 1.

import { ServiceBusAdministrationClient } from "@azure/service-bus";

const connectionString = process.env.FERROBUS_ADMIN_CONNECTION_STRING;
const queue = process.env.FERROBUS_ADMIN_QUEUE;
if (!connectionString || !queue || !process.env.NODE_EXTRA_CA_CERTS) {
  console.error("needs FERROBUS_ADMIN_CONNECTION_STRING, FERROBUS_ADMIN_QUEUE and NODE_EXTRA_CA_CERTS");
  process.exit(2);
}

try {
  const admin = new ServiceBusAdministrationClient(connectionString, { retryOptions: { maxRetries: 0 } });
  const namespace = await admin.getNamespaceProperties();
  const created = await admin.createQueue(queue, { maxDeliveryCount: 6 });
  const existsAfterCreate = await admin.queueExists(queue);
  await admin.deleteQueue(queue);
  const existsAfterDelete = await admin.queueExists(queue);
  console.log(
    JSON.stringify({
      namespaceName: namespace.name,
      messagingSku: namespace.messagingSku,
      createdName: created.name,
      createdMaxDeliveryCount: created.maxDeliveryCount,
      existsAfterCreate,
      existsAfterDelete,
    }),
  );
} catch (error) {
  console.error(`${error?.name}: ${error?.message} (code ${error?.code}, statusCode ${error?.statusCode})`);
  process.exit(1);
}
