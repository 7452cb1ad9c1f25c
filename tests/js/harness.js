// Harness for the JavaScript compatibility suite: starts the real ferrobus binary on 127.0.0.1:0
// and hands out connection strings for the unmodified @azure/service-bus SDK.
//
// Mirrors tests/python/conftest.py:
// - The binary comes from FERROBUS_BIN, else <repo>/target/release/ferrobus.
// - It is started with `--config FILE --listen 127.0.0.1:0`; the port is parsed from the
//   `listening on 127.0.0.1:PORT` line on stderr (10 s timeout). stderr is drained for the whole
//   life of the process into a log file and a ring buffer whose tail is attached to the error of
//   every failing test.
// - Stopped with SIGTERM (SIGKILL after a grace period).
//
// One broker per test file (`useBroker(configText)`); every test owns its queue(s), so tests never
// see each other's messages and may leave messages behind.
//
// Authorization mode: FERROBUS_TEST_AUTH=keys gives every broker started here (unless its config
// already has [[auth.keys]]) the connection strings' key, name RootManageSharedAccessKey with the
// Manage right, so the SDK's CBS tokens are validated and checked on every link and $management
// operation. `none` (the default) starts brokers without keys: any token is accepted (emulator
// behaviour). scripts/test runs the suite once per mode. A test of one mode's behaviour passes
// `{ skip: KEYS_MODE ? false : "reason" }` to `brokerTest`.

import { spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient, isServiceBusError } from "@azure/service-bus";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const DEFAULT_BINARY = path.join(REPO_ROOT, "target", "release", "ferrobus");
const STARTUP_TIMEOUT_MS = 10_000;
const SHUTDOWN_TIMEOUT_MS = 5_000;
const LISTENING_PATTERN = /listening on 127\.0\.0\.1:(\d+)/;
// eslint-disable-next-line no-control-regex
const ANSI_ESCAPE_PATTERN = /\x1b\[[0-9;]*[A-Za-z]/g;
const LOG_TAIL_LINES = 400;

// The key every connection string carries. Without [[auth.keys]] the broker accepts any token.
export const SAS_KEY_NAME = "RootManageSharedAccessKey";
export const SAS_KEY_VALUE = "SAS_KEY_VALUE";

// FERROBUS_TEST_AUTH: "none" (default, any token accepted) or "keys" (see the header).
export const AUTH_MODE = process.env.FERROBUS_TEST_AUTH || "none";
if (!["none", "keys"].includes(AUTH_MODE)) {
  throw new Error(`FERROBUS_TEST_AUTH must be 'none' or 'keys', not '${AUTH_MODE}'`);
}
export const KEYS_MODE = AUTH_MODE === "keys";

/** `[[auth.keys]]` table. */
export function authKeyToml(name, key, rights) {
  return `[[auth.keys]]\nname = ${tomlValue(name)}\nkey = ${tomlValue(key)}\nrights = [${rights.map(tomlValue).join(", ")}]\n`;
}

/** The config a broker starts with: in keys mode the connection strings' key is added, unless the
 * test configures keys itself. */
export function withTestAuth(configText) {
  if (!KEYS_MODE || configText.includes("[[auth.keys]]")) return configText;
  return configText + "\n" + authKeyToml(SAS_KEY_NAME, SAS_KEY_VALUE, ["Manage"]);
}

// Every test gets this timeout, so a hang fails the test instead of the run.
export const TEST_TIMEOUT_MS = 60_000;
const HANG_TIMEOUT_MS = TEST_TIMEOUT_MS - 5_000;

// Per-queue defaults; a test's queue overrides only what its rule needs.
export const QUEUE_DEFAULTS = {
  lock_duration: "30s",
  max_delivery_count: 10,
  max_size_in_megabytes: 64,
  max_message_size_in_kilobytes: 256,
};

function tomlValue(value) {
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

/** `[[queues]]` table for `name`, with QUEUE_DEFAULTS overridden by `overrides`. */
export function queueToml(name, overrides = {}) {
  const settings = { ...QUEUE_DEFAULTS, ...overrides };
  const lines = ["[[queues]]", `name = ${tomlValue(name)}`];
  for (const [key, value] of Object.entries(settings)) lines.push(`${key} = ${tomlValue(value)}`);
  return lines.join("\n") + "\n";
}

/** `[[topics]]` table with one `[[topics.subscriptions]]` per entry of `subscriptions`. */
export function topicToml(name, subscriptions, subscriptionOverrides = {}) {
  const lines = ["[[topics]]", `name = ${tomlValue(name)}`];
  for (const subscription of subscriptions) {
    lines.push("[[topics.subscriptions]]", `name = ${tomlValue(subscription)}`);
    for (const [key, value] of Object.entries(subscriptionOverrides)) {
      lines.push(`${key} = ${tomlValue(value)}`);
    }
  }
  return lines.join("\n") + "\n";
}

/** Builds a whole config from `{ queueName: overrides }`. */
export function queuesToml(queues) {
  return Object.entries(queues)
    .map(([name, overrides]) => queueToml(name, overrides))
    .join("");
}

export function connectionString(port, keyName = SAS_KEY_NAME, key = SAS_KEY_VALUE) {
  return (
    `Endpoint=sb://127.0.0.1:${port};SharedAccessKeyName=${keyName};` +
    `SharedAccessKey=${key};UseDevelopmentEmulator=true`
  );
}

export function brokerBinary() {
  return process.env.FERROBUS_BIN || DEFAULT_BINARY;
}

/** Every broker's config and log directory, removed when the test file's process exits
 * (failures carry the log's tail); FERROBUS_KEEP_TEST_DIRS=1 keeps them. */
const workDirs = new Set();
process.on("exit", () => {
  if (process.env.FERROBUS_KEEP_TEST_DIRS) return;
  for (const dir of workDirs) rmSync(dir, { recursive: true, force: true });
});

/** A directory of the test's own under the temporary directory, removed with the brokers'. */
export function scratchDir(prefix) {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  workDirs.add(dir);
  return dir;
}

/** One ferrobus process with its own config file and log file. */
export class Broker {
  /** `dataDir`: a data directory of the test's own (durability tests restart on it). */
  constructor(configText, dataDir = undefined) {
    this.configText = withTestAuth(configText);
    this.dataDir = dataDir;
    this.workDir = mkdtempSync(path.join(tmpdir(), "ferrobus-js-"));
    workDirs.add(this.workDir);
    this.configPath = path.join(this.workDir, "ferrobus.toml");
    this.logPath = path.join(this.workDir, "ferrobus.stderr.log");
    this.port = undefined;
    this.process = undefined;
    this.exitCode = undefined;
    this._tail = [];
  }

  get connectionString() {
    assert.ok(this.port, "broker not started");
    return connectionString(this.port);
  }

  isRunning() {
    return this.process !== undefined && this.exitCode === undefined;
  }

  logTail(lines = 80) {
    return this._tail.slice(-lines).join("\n") + (this.isRunning() ? "" : "\n[broker process has exited]");
  }

  async start() {
    const binary = brokerBinary();
    if (!existsSync(binary)) {
      throw new Error(
        `ferrobus binary not found at ${binary}: build it with \`cargo build --release\` ` +
          "or point FERROBUS_BIN at it",
      );
    }
    writeFileSync(this.configPath, this.configText);
    const logFile = createWriteStream(this.logPath);
    // FERROBUS_TEST_STORAGE=durable runs the broker on a data directory of its own (every
    // reply waits for its fsync); the default is --memory.
    const storage = this.dataDir
      ? ["--data-dir", this.dataDir]
      : process.env.FERROBUS_TEST_STORAGE === "durable"
        ? ["--data-dir", path.join(this.workDir, "data")]
        : ["--memory"];
    const child = spawn(binary, ["--config", this.configPath, "--listen", "127.0.0.1:0", ...storage], {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, NO_COLOR: "1" },
    });
    this.process = child;

    const listening = new Promise((resolve, reject) => {
      let pending = "";
      const timer = setTimeout(() => {
        reject(
          new Error(
            `ferrobus printed no 'listening on 127.0.0.1:PORT' within ${STARTUP_TIMEOUT_MS} ms:\n` +
              this.logTail(),
          ),
        );
      }, STARTUP_TIMEOUT_MS);
      // Keep draining stderr for the life of the process so the pipe never fills.
      child.stderr.setEncoding("utf8");
      child.stderr.on("data", (chunk) => {
        pending += chunk;
        const lines = pending.split("\n");
        pending = lines.pop();
        for (const rawLine of lines) {
          const line = rawLine.replace(ANSI_ESCAPE_PATTERN, "");
          logFile.write(line + "\n");
          this._tail.push(line);
          if (this._tail.length > LOG_TAIL_LINES) this._tail.shift();
          if (this.port === undefined) {
            const match = LISTENING_PATTERN.exec(line);
            if (match) {
              this.port = Number(match[1]);
              clearTimeout(timer);
              resolve();
            }
          }
        }
      });
      child.on("error", (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.on("exit", (code, signal) => {
        this.exitCode = code ?? signal;
        logFile.end();
        clearTimeout(timer);
        reject(new Error(`ferrobus exited with ${code ?? signal} before listening:\n${this.logTail()}`));
      });
    });
    try {
      await listening;
    } catch (error) {
      await this.stop();
      throw error;
    }
    return this;
  }

  /** SIGKILL (kill -9): no shutdown, no flush. */
  async kill() {
    const child = this.process;
    if (!child || this.exitCode !== undefined) return this.exitCode;
    const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal)));
    child.kill("SIGKILL");
    return exited;
  }

  /** SIGTERM, then SIGKILL after a grace period. Resolves with the exit code or signal. */
  async stop() {
    const child = this.process;
    if (!child || this.exitCode !== undefined) return this.exitCode;
    const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal)));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), SHUTDOWN_TIMEOUT_MS);
    const result = await exited;
    clearTimeout(timer);
    return result;
  }
}

/**
 * Starts one broker for the calling test file (in `before`) and stops it (in `after`).
 * Returns `{ broker, brokerTest }`: `brokerTest(name, fn, { skip })` registers a test with
 * TEST_TIMEOUT_MS whose failure message carries the broker's stderr tail (`skip`: false, or the
 * reason to skip it).
 */
export function useBroker(configText) {
  const broker = new Broker(configText);
  before(async () => {
    await broker.start();
  });
  after(async () => {
    await broker.stop();
  });
  function brokerTest(name, fn, { skip = false } = {}) {
    test(name, { timeout: TEST_TIMEOUT_MS, skip }, async (t) => {
      // Fails a hung test a little before node's own timeout, so the report still carries the
      // broker's log tail (node's timeout cancels the test without running its catch).
      let hangTimer;
      const hang = new Promise((_, reject) => {
        hangTimer = setTimeout(
          () => reject(new Error(`test body did not finish within ${HANG_TIMEOUT_MS} ms (an operation hung)`)),
          HANG_TIMEOUT_MS,
        );
      });
      try {
        await Promise.race([fn(t), hang]);
      } catch (error) {
        if (error && typeof error === "object") {
          try {
            error.message =
              `${error.message}\n--- ferrobus stderr tail (port ${broker.port}, full log ${broker.logPath}) ---\n` +
              broker.logTail(40);
          } catch {
            // some error objects have a read-only message; report them unchanged
          }
        }
        throw error;
      } finally {
        clearTimeout(hangTimer);
      }
    });
  }
  return { broker, brokerTest };
}

// ---------------------------------------------------------------------------------------------
// SDK helpers shared by the test files.

/**
 * Retry options of every test client. No retries: a retried operation that succeeds on its second
 * attempt would hide a broker failure on the first. Operation timeout 20 s instead of the SDK's
 * 60 s, so a broker reply that never comes (settlement, management, attach) fails as
 * `ServiceTimeout` well inside the test's own timeout instead of hanging it.
 */
export const OPERATION_TIMEOUT_MS = 20_000;
export const TEST_RETRY_OPTIONS = { maxRetries: 0, timeoutInMs: OPERATION_TIMEOUT_MS };

/** A client that surfaces the first error instead of retrying (error-case tests). */
export function noRetryClient(connectionStringValue) {
  return new ServiceBusClient(connectionStringValue, {
    retryOptions: TEST_RETRY_OPTIONS,
  });
}

/**
 * Opens a client for one test and closes it afterwards, whatever happens. Receivers and senders
 * created from it are closed with the client.
 */
export async function withClient(connectionStringValue, fn, options = {}) {
  const client = new ServiceBusClient(connectionStringValue, {
    ...options,
    retryOptions: { ...TEST_RETRY_OPTIONS, ...options.retryOptions },
  });
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/** `sequenceNumber` is a Long (or number); tests compare numbers. */
export function toNumber(value) {
  if (value === undefined || value === null) return value;
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  if (typeof value.toNumber === "function") return value.toNumber();
  return Number(value);
}

export function sequenceNumbersOf(messages) {
  return messages.map((message) => toNumber(message.sequenceNumber));
}

/** Receives until `count` messages arrived; fails if they don't within `timeoutMs`. */
export async function receiveExactly(receiver, count, timeoutMs = 10_000) {
  const received = [];
  const deadline = Date.now() + timeoutMs;
  while (received.length < count) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    const batch = await receiver.receiveMessages(count - received.length, { maxWaitTimeInMs: remaining });
    received.push(...batch);
  }
  assert.equal(
    received.length,
    count,
    `expected ${count} messages, received ${received.length} within ${timeoutMs} ms`,
  );
  return received;
}

/** How long a test waits to conclude that nothing (more) will be delivered. */
export const ABSENCE_WAIT_MS = 1_500;

export async function assertNothingToReceive(receiver, waitMs = ABSENCE_WAIT_MS) {
  const unexpected = await receiver.receiveMessages(10, { maxWaitTimeInMs: waitMs });
  assert.deepEqual(
    unexpected.map((message) => [message.messageId, toNumber(message.sequenceNumber)]),
    [],
    "expected no message to be receivable",
  );
}

/**
 * Awaits `promise`, asserting it rejects with a ServiceBusError of `code`. Returns the error.
 * The SDK's own timeouts are longer than a test's, so a missing broker reply shows up as the
 * test timeout rather than as a wrong code.
 */
export async function assertServiceBusError(promise, code) {
  let caught;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  assert.ok(caught, `expected a ServiceBusError with code ${code}, but the operation succeeded`);
  assert.ok(
    isServiceBusError(caught),
    `expected a ServiceBusError with code ${code}, got ${caught?.name}: ${caught?.message}`,
  );
  assert.equal(caught.code, code, `wrong error code; message: ${caught.message}`);
  return caught;
}

export function uniqueId(prefix) {
  return `${prefix}-${crypto.randomUUID()}`;
}

export function assertNearNow(date, toleranceMs = 10_000, what = "time") {
  assert.ok(date instanceof Date, `${what} should be a Date, got ${date}`);
  const skew = Math.abs(date.getTime() - Date.now());
  assert.ok(skew < toleranceMs, `${what} ${date.toISOString()} is ${skew} ms away from now`);
}

export const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
