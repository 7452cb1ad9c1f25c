// The JavaScript Testcontainers recipe of docs/containers.md, run as written against podman's
// Docker-compatible API (scripts/test-container starts `podman system service` and sets
// DOCKER_HOST, and TESTCONTAINERS_RYUK_DISABLED=true: Ryuk's image cannot be pulled on these
// machines). Skipped without DOCKER_HOST.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GenericContainer, Wait } from "testcontainers";
import { ServiceBusClient } from "@azure/service-bus";

const image = process.env.FERROBUS_IMAGE ?? "localhost/ferrobus:latest";
// These virtual machines' rlimits (see tests/container/podman.py); not part of the recipe.
const ulimits = {
  nofile: { soft: 16384, hard: 16384 },
  nproc: { soft: 4096, hard: 4096 },
};

test("the Testcontainers recipe sends and receives", { skip: !process.env.DOCKER_HOST && "DOCKER_HOST is not set: run through scripts/test-container" }, async () => {
  // --- the recipe (docs/containers.md) ---
  const broker = await new GenericContainer(image)
    .withCommand(["--listen", "0.0.0.0:5672", "--memory"])
    .withExposedPorts(5672, 5671, 5300) // all three: podman's API lists every port the image exposes as one to bind
    .withWaitStrategy(Wait.forHttp("/health", 5300).forStatusCode(200))
    .withUlimits(ulimits) // this machine only
    .start();
  const connectionString =
    `Endpoint=sb://${broker.getHost()}:${broker.getMappedPort(5672)};` +
    "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true";
  // --- end of the recipe ---
  const client = new ServiceBusClient(connectionString);
  try {
    const sender = client.createSender("queue.1");
    await sender.sendMessages({ body: "from testcontainers" });
    const receiver = client.createReceiver("queue.1");
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    assert.equal(message.body, "from testcontainers");
    await receiver.completeMessage(message);
  } finally {
    await client.close();
    await broker.stop();
  }
});
