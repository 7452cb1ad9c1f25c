// AMQP over TLS and over WebSockets with the official @azure/service-bus (issue 14), as it
// connects to the cloud service: the connection string without UseDevelopmentEmulator (TLS),
// customEndpointAddress to reach the broker's port, the development CA trusted through
// NODE_EXTRA_CA_CERTS (a child process: Node reads it at start) or the `ws` package's `ca`
// option for WebSockets (webSocketOptions). Both auth modes.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import WebSocket from "ws";
import { readFileSync } from "node:fs";
import { Broker, SAS_KEY_NAME, SAS_KEY_VALUE, TEST_TIMEOUT_MS, delay, queueToml, receiveExactly, scratchDir } from "./harness.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const CLOUD_CONNECTION_STRING = `Endpoint=sb://localhost/;SharedAccessKeyName=${SAS_KEY_NAME};SharedAccessKey=${SAS_KEY_VALUE}`;
const CONFIG =
  '[tls]\nlisten = "127.0.0.1:0"\n[websocket]\nlisten = "127.0.0.1:0"\n' +
  queueToml("js-tls") +
  queueToml("js-tls-main") +
  queueToml("js-ws") +
  queueToml("js-ws-session", { requires_session: true });

const dataDir = path.join(scratchDir("ferrobus-js-transports-"), "data");
const broker = new Broker(CONFIG, dataDir);
const caPath = path.join(dataDir, "dev-ca.pem");
let tlsPort;
let websocketPort;

async function portFromLog(pattern) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const match = pattern.exec(broker.logTail(400));
    if (match) return Number(match[1]);
    if (Date.now() > deadline) throw new Error(`no ${pattern} in the broker's log:\n${broker.logTail(20)}`);
    await delay(50);
  }
}

before(async () => {
  await broker.start();
  tlsPort = await portFromLog(/AMQPS \(AMQP over TLS\) on 127\.0\.0\.1:(\d+)/);
  websocketPort = await portFromLog(/WebSockets \([^)]*\) on 127\.0\.0\.1:(\d+)/);
  const deadline = Date.now() + 10_000;
  while (!existsSync(caPath)) {
    if (Date.now() > deadline) throw new Error(`no development CA at ${caPath}`);
    await delay(50);
  }
});
after(async () => {
  await broker.stop();
});

function runScenario(port, queue) {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [path.join(HERE, "transports-scenario.mjs")],
      {
        cwd: HERE,
        timeout: 40_000,
        env: {
          ...process.env,
          NODE_EXTRA_CA_CERTS: caPath,
          FERROBUS_CONNECTION_STRING: CLOUD_CONNECTION_STRING,
          FERROBUS_ENDPOINT: `sb://localhost:${port}`,
          FERROBUS_QUEUE: queue,
        },
      },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`transports-scenario.mjs failed (${error.code ?? error.signal}): ${stderr}${stdout}`));
        else resolve(JSON.parse(stdout.trim()));
      },
    );
  });
}

test("send, receive and complete over TLS on the AMQPS listener (child trusting NODE_EXTRA_CA_CERTS)", { timeout: TEST_TIMEOUT_MS }, async () => {
  assert.deepEqual(await runScenario(tlsPort, "js-tls"), { bodies: ["tls-0", "tls-1", "tls-2"], left: 0 });
});

test("TLS on the main port is told apart from plain AMQP", { timeout: TEST_TIMEOUT_MS }, async () => {
  assert.deepEqual(await runScenario(broker.port, "js-tls-main"), { bodies: ["tls-0", "tls-1", "tls-2"], left: 0 });
});

function websocketClient(port) {
  const ca = readFileSync(caPath);
  return new ServiceBusClient(CLOUD_CONNECTION_STRING, {
    customEndpointAddress: `https://localhost:${port}`,
    webSocketOptions: { webSocket: WebSocket, webSocketConstructorOptions: { ca } },
    retryOptions: { maxRetries: 0, timeoutInMs: 20_000 },
  });
}

test("WebSockets (wss, the ws package) carry sends, receives, sessions and $management", { timeout: TEST_TIMEOUT_MS }, async () => {
  const client = websocketClient(websocketPort);
  try {
    const sender = client.createSender("js-ws");
    await sender.sendMessages([{ body: "w0" }, { body: "w1" }]);
    const [scheduled] = await sender.scheduleMessages({ body: "later" }, new Date(Date.now() + 3_600_000));
    const receiver = client.createReceiver("js-ws");
    const peeked = await receiver.peekMessages(10);
    assert.deepEqual(peeked.map((message) => message.body), ["w0", "w1", "later"]);
    const got = await receiveExactly(receiver, 2);
    assert.deepEqual(got.map((message) => message.body), ["w0", "w1"]);
    for (const message of got) await receiver.completeMessage(message);
    await sender.cancelScheduledMessages(scheduled);
    assert.equal((await receiver.peekMessages(10)).length, 0);
    await receiver.close();
    await sender.close();

    const sessionSender = client.createSender("js-ws-session");
    await sessionSender.sendMessages([{ body: "s0", sessionId: "a" }, { body: "s1", sessionId: "a" }]);
    await sessionSender.close();
    const session = await client.acceptNextSession("js-ws-session");
    assert.equal(session.sessionId, "a");
    await session.setSessionState("checkpoint");
    assert.equal(String(await session.getSessionState()), "checkpoint");
    const sessionMessages = await receiveExactly(session, 2);
    assert.deepEqual(sessionMessages.map((message) => message.body), ["s0", "s1"]);
    for (const message of sessionMessages) await session.completeMessage(message);
    await session.close();
  } finally {
    await client.close();
  }
});

test("the main port takes the WebSocket upgrade too", { timeout: TEST_TIMEOUT_MS }, async () => {
  const client = websocketClient(broker.port);
  try {
    const sender = client.createSender("js-ws");
    await sender.sendMessages({ body: "via-main-port" });
    await sender.close();
    const receiver = client.createReceiver("js-ws", { receiveMode: "receiveAndDelete" });
    const [message] = await receiveExactly(receiver, 1);
    assert.equal(message.body, "via-main-port");
    await receiver.close();
  } finally {
    await client.close();
  }
});
