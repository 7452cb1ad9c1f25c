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
//
// Cluster mode: FERROBUS_TEST_CLUSTER=3 makes every broker started here a three-node cluster
// (`ClusterBroker`, exported as `Broker`): nodes 1-3 on 127.0.0.1-3, each with the test's
// configuration plus a [cluster] table, durable storage in a data directory of its own, and
// every listener (AMQP, HTTP, AMQPS, WebSockets, peers) on the same port on each node, picked
// free at start (a follower forwards a client's connection to the leader's host at the port the
// client reached). TLS on every node presents one certificate for localhost and 127.0.0.1-3 made
// with openssl; its CA is written to <dataDir>/dev-ca.pem, where the tests look for the
// development CA. The connection string names a follower, chosen once the nodes' /health agree
// on a leader and term, that leader logged that it leads in that term, and a connection through
// the follower is answered (waitForLeader, waitServing). kill() and stop() act on all three nodes; a cluster started again on the same
// data directory takes the same ports. A test that cannot make sense on a cluster passes
// `{ skip: skipInCluster("reason") }`. Mirrors tests/python/conftest.py. A test about the
// cluster itself makes a `ClusterBroker` in either mode.

import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
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
const LISTENING_PATTERN = /listening on 127\.0\.0\.\d+:(\d+)/;
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

export function connectionString(port, keyName = SAS_KEY_NAME, key = SAS_KEY_VALUE, host = "127.0.0.1") {
  return (
    `Endpoint=sb://${host}:${port};SharedAccessKeyName=${keyName};` +
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
class SingleBroker {
  /** `dataDir`: a data directory of the test's own (durability tests restart on it).
   * `node`: `{ workDir, number }` for a node of a ClusterBroker, whose configuration is whole
   * (listener and storage included). */
  constructor(configText, dataDir = undefined, node = undefined) {
    this.clusterNode = node !== undefined;
    this.configText = this.clusterNode ? configText : withTestAuth(configText);
    this.dataDir = dataDir;
    this.workDir = node ? node.workDir : mkdtempSync(path.join(tmpdir(), "ferrobus-js-"));
    workDirs.add(this.workDir);
    const name = node ? `node${node.number}` : "ferrobus";
    this.configPath = path.join(this.workDir, `${name}.toml`);
    this.logPath = path.join(this.workDir, `${name}.stderr.log`);
    // The address clients reach it at (a ClusterBroker names a follower's).
    this.host = "127.0.0.1";
    this.port = undefined;
    this.process = undefined;
    this.exitCode = undefined;
    this._tail = [];
  }

  get connectionString() {
    assert.ok(this.port, "broker not started");
    return connectionString(this.port);
  }

  /** The connection string with another key name and key. */
  connectionStringWith(keyName, key) {
    assert.ok(this.port, "broker not started");
    return connectionString(this.port, keyName, key, this.host);
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
    const storage = this.clusterNode
      ? []
      : this.dataDir
      ? ["--data-dir", this.dataDir]
      : process.env.FERROBUS_TEST_STORAGE === "durable"
        ? ["--data-dir", path.join(this.workDir, "data")]
        : ["--memory"];
    const listen = this.clusterNode ? [] : ["--listen", "127.0.0.1:0"];
    const child = spawn(binary, ["--config", this.configPath, ...listen, ...storage], {
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
          // stderr may still deliver lines after the process's exit event ended the file.
          if (!logFile.writableEnded) logFile.write(line + "\n");
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

// ---------------------------------------------------------------------------------------------
// Cluster mode: FERROBUS_TEST_CLUSTER=3 (see the header).

const CLUSTER_SIZE = Number(process.env.FERROBUS_TEST_CLUSTER || "0");
if (![0, 3].includes(CLUSTER_SIZE)) {
  throw new Error(`FERROBUS_TEST_CLUSTER must be unset or 3, not '${process.env.FERROBUS_TEST_CLUSTER}'`);
}
export const CLUSTER_MODE = CLUSTER_SIZE === 3;
const CLUSTER_SECRET = "ferrobus-test-cluster-secret";
// How long a fresh cluster may take to agree on a leader.
const CLUSTER_LEADER_TIMEOUT_MS = 20_000;

/** `skip` option of a test that cannot make sense against a three-node cluster. */
export function skipInCluster(reason) {
  return CLUSTER_MODE ? `FERROBUS_TEST_CLUSTER=3: ${reason}` : false;
}

/** Node N of a test cluster listens on 127.0.0.N (Linux routes all of 127/8 to loopback). */
export function nodeHost(node) {
  return `127.0.0.${node}`;
}

function listenOn(host, port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(undefined));
    server.listen({ host, port, exclusive: true }, () => {
      const bound = server.address().port;
      server.close(() => resolve(bound));
    });
  });
}

/** `count` distinct ports free on 127.0.0.1, .2 and .3 right now (every member serves the same
 * port numbers: a follower forwards to the leader's host at the port the client reached). */
async function clusterPorts(count, nodes = 3) {
  const ports = [];
  while (ports.length < count) {
    const port = await listenOn(nodeHost(1), 0);
    if (port === undefined || ports.includes(port)) continue;
    let free = true;
    for (let node = 2; node <= nodes && free; node++) {
      free = (await listenOn(nodeHost(node), port)) !== undefined;
    }
    if (free) ports.push(port);
  }
  return ports;
}

let testCertificate;

/** A CA and a server certificate for localhost and 127.0.0.1-3, made once per process with
 * openssl: every member presents the same identity, so a TLS client that reached any node
 * (forwarded to whichever leads) verifies it against one CA. */
function clusterCertificate() {
  if (testCertificate) return testCertificate;
  const dir = scratchDir("ferrobus-js-cluster-certificate-");
  const file = (name) => path.join(dir, name);
  const sans = ["DNS:localhost", ...[1, 2, 3].map((node) => `IP:${nodeHost(node)}`)].join(",");
  writeFileSync(
    file("server.ext"),
    `subjectAltName=${sans}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n` +
      "extendedKeyUsage=serverAuth\n",
  );
  const openssl = (...args) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl("req", "-x509", ...ec, "-keyout", file("ca-key.pem"), "-out", file("ca.pem"), "-days", "30", "-subj", "/CN=ferrobus test cluster CA");
  openssl("req", ...ec, "-keyout", file("server-key.pem"), "-out", file("server.csr"), "-subj", "/CN=ferrobus test cluster");
  openssl(
    "x509", "-req", "-in", file("server.csr"), "-CA", file("ca.pem"), "-CAkey", file("ca-key.pem"),
    "-CAcreateserial", "-out", file("server.pem"), "-days", "30", "-extfile", file("server.ext"),
  );
  testCertificate = { ca: file("ca.pem"), cert: file("server.pem"), key: file("server-key.pem") };
  return testCertificate;
}

/** `configText` with each key of `settings` ({ table: { key: TOML value } }) set: in the table's
 * existing header when the text has it (replacing the key's line), else in a new table at the
 * end. Line-based; enough for the configurations the tests write. */
export function withTables(configText, settings) {
  const lines = [];
  let current;
  const written = new Set();
  for (const line of configText.split("\n")) {
    const header = /^\s*\[([A-Za-z_][A-Za-z0-9_.]*)\]\s*(#.*)?$/.exec(line);
    if (header) current = header[1];
    else if (line.trimStart().startsWith("[[")) current = undefined;
    const key = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=/.exec(line);
    if (!header && key && settings[current] && key[1] in settings[current]) continue;
    lines.push(line);
    if (header && settings[current] && !written.has(current)) {
      for (const [name, value] of Object.entries(settings[current])) lines.push(`${name} = ${value}`);
      written.add(current);
    }
  }
  for (const [table, values] of Object.entries(settings)) {
    if (written.has(table)) continue;
    lines.push(`[${table}]`);
    for (const [name, value] of Object.entries(values)) lines.push(`${name} = ${value}`);
  }
  return lines.join("\n") + "\n";
}

// Ports a cluster on a given data directory used, so a restart on it uses them again.
const clusterPortsByDataDir = new Map();

/** Three ferrobus nodes on 127.0.0.1-3 with the test's configuration, durable storage and a
 * [cluster] table, all listeners on the same ports on each node. Same interface as the single
 * broker; `host` is a follower's address (the connection string names it), `leader` the node
 * the members agreed on at start. */
export class ClusterBroker {
  constructor(configText, dataDir = undefined) {
    this.configText = withTestAuth(configText);
    this.workDir = mkdtempSync(path.join(tmpdir(), "ferrobus-js-cluster-"));
    workDirs.add(this.workDir);
    // Node 1 keeps its data in the test's data directory (the CA the tests trust is written
    // there); nodes 2 and 3 in siblings of it.
    this.dataDir = dataDir;
    const base = dataDir ?? path.join(this.workDir, "data");
    this.nodeDataDirs = { 1: base, 2: `${base}-node2`, 3: `${base}-node3` };
    this.configPath = path.join(this.workDir, "node1.toml");
    this.logPath = path.join(this.workDir, "node1.stderr.log");
    this.host = nodeHost(1);
    this.port = undefined;
    this.leader = undefined;
    this.nodes = {};
    this.ports = undefined;
    // Connections through the follower that the cluster closed unanswered at start.
    this.refusedProbes = 0;
    // Whether start() has returned or failed. node:test runs a file's `before` hooks without
    // waiting for the one before to finish, and some tests find the HTTP port in the log:
    // logTail() shows nothing until then, as a single broker shows no listener line before it
    // serves.
    this.settled = false;
  }

  get connectionString() {
    assert.ok(this.port, "broker not started");
    return connectionString(this.port, SAS_KEY_NAME, SAS_KEY_VALUE, this.host);
  }

  /** The connection string with another key name and key. */
  connectionStringWith(keyName, key) {
    assert.ok(this.port, "broker not started");
    return connectionString(this.port, keyName, key, this.host);
  }

  nodeConfig(node) {
    const [amqp, http, tls, websocket, peer] = this.ports;
    const certificate = clusterCertificate();
    const host = nodeHost(node);
    const text = (value) => JSON.stringify(value);
    const members = [1, 2, 3].map((member) => `{ id = ${member}, address = "${nodeHost(member)}:${peer}" }`);
    return withTables(this.configText, {
      server: { listen: text(`${host}:${amqp}`) },
      http: { listen: text(`${host}:${http}`), tls_cert: text(certificate.cert), tls_key: text(certificate.key) },
      tls: { listen: text(`${host}:${tls}`), cert: text(certificate.cert), key: text(certificate.key) },
      websocket: { listen: text(`${host}:${websocket}`) },
      storage: { mode: text("durable"), data_dir: text(this.nodeDataDirs[node]) },
      cluster: {
        node_id: String(node),
        address: text(`${host}:${peer}`),
        secret: text(CLUSTER_SECRET),
        members: `[${members.join(", ")}]`,
      },
    });
  }

  isRunning() {
    const nodes = Object.values(this.nodes);
    return nodes.length > 0 && nodes.every((node) => node.isRunning());
  }

  logTail(lines = 80) {
    return this.settled ? this.nodeLogs(lines) : "";
  }

  /** Every node's log tail, under a header naming the node. */
  nodeLogs(lines = 80) {
    return Object.entries(this.nodes)
      .map(([node, member]) => `--- node ${node} (${nodeHost(node)}, ${member.logPath}) ---\n${member.logTail(lines)}`)
      .join("\n");
  }

  async start() {
    try {
      return await this.startWithFreePorts();
    } finally {
      this.settled = true;
    }
  }

  async startWithFreePorts() {
    // Ports are picked free, then bound by the nodes: another process may take one in between;
    // a fresh cluster then tries again with new ports.
    for (let attempt = 0; ; attempt++) {
      const fresh = !clusterPortsByDataDir.has(this.nodeDataDirs[1]);
      try {
        return await this.startOnce();
      } catch (error) {
        if (!fresh || !/in use/.test(String(error?.message)) || attempt === 2) throw error;
        clusterPortsByDataDir.delete(this.nodeDataDirs[1]);
        this.nodes = {};
      }
    }
  }

  async startOnce() {
    const certificate = clusterCertificate();
    for (const dir of Object.values(this.nodeDataDirs)) mkdirSync(dir, { recursive: true });
    // The tests trust <dataDir>/dev-ca.pem: here, the CA of the cluster's certificate.
    copyFileSync(certificate.ca, path.join(this.nodeDataDirs[1], "dev-ca.pem"));
    // A restart (a new ClusterBroker on the same data directory) keeps the ports: the members'
    // peer addresses are the same as before.
    this.ports = clusterPortsByDataDir.get(this.nodeDataDirs[1]) ?? (await clusterPorts(5));
    clusterPortsByDataDir.set(this.nodeDataDirs[1], this.ports);
    this.port = this.ports[0];
    for (let node = 1; node <= 3; node++) {
      this.nodes[node] = new SingleBroker(this.nodeConfig(node), undefined, { workDir: this.workDir, number: node });
    }
    try {
      await Promise.all(Object.values(this.nodes).map((node) => node.start()));
      this.leader = await this.waitForLeader();
      const followers = Object.keys(this.nodes)
        .map(Number)
        .filter((node) => node !== this.leader);
      this.host = nodeHost(followers[0] ?? 1);
      await this.waitServing();
    } catch (error) {
      await this.stop();
      throw error;
    }
    return this;
  }

  /** Whether one connection to `host` is answered: the SASL protocol header sent through the
   * follower comes back from the leader. */
  probe() {
    const header = Buffer.from([0x41, 0x4d, 0x51, 0x50, 3, 1, 0, 0]);
    return new Promise((resolve) => {
      const socket = net.connect({ host: this.host, port: this.port });
      let answer = Buffer.alloc(0);
      const done = (result) => {
        socket.destroy();
        resolve(result);
      };
      socket.setTimeout(2000, () => done(false));
      socket.on("connect", () => socket.write(header));
      socket.on("data", (chunk) => {
        answer = Buffer.concat([answer, chunk]);
        if (answer.length >= header.length) done(answer.subarray(0, header.length).equals(header));
      });
      socket.on("error", () => done(false));
      socket.on("close", () => done(false));
    });
  }

  /** Waits until a connection to `host` is answered by the leader. Right after the nodes agree
   * on a leader, a connection forwarded to it is sometimes closed at once; each such attempt is
   * counted in `refusedProbes` (and printed). */
  async waitServing(timeoutMs = CLUSTER_LEADER_TIMEOUT_MS) {
    const deadline = Date.now() + timeoutMs;
    while (!(await this.probe())) {
      this.refusedProbes += 1;
      console.error(`cluster on port ${this.port}: probe ${this.refusedProbes} through ${this.host} got no answer`);
      if (Date.now() > deadline) throw new Error(`no answer through ${this.host}:${this.port}:\n${this.nodeLogs()}`);
      await delay(100);
    }
  }

  /** Node `node`'s own /health answer (its view of the cluster), undefined if it gave none. */
  async health(node) {
    try {
      const response = await fetch(`http://${nodeHost(node)}:${this.port}/health`, { signal: AbortSignal.timeout(1000) });
      return await response.json();
    } catch {
      return undefined;
    }
  }

  /** Whether node `node` logged that it leads in `term` (and not, after that, that it stopped). */
  leads(node, term) {
    const lines = this.nodes[node]._tail.filter((line) => line.includes("leads the cluster"));
    const last = lines[lines.length - 1] ?? "";
    return last.includes("this node leads the cluster") && last.includes(`term=${term}`);
  }

  /** The leader every running node names in its /health, once they agree on it and on the term
   * and it logged that it leads in that term: after a restart of every node the members name the
   * leader of the term they stored at once, about 0.5 s before it serves, and a connection a
   * follower forwards while it learns of a new term is closed. */
  async waitForLeader(timeoutMs = CLUSTER_LEADER_TIMEOUT_MS, otherThan = undefined) {
    const deadline = Date.now() + timeoutMs;
    let views = {};
    while (Date.now() < deadline) {
      views = {};
      for (const [node, member] of Object.entries(this.nodes)) {
        if (member.isRunning()) {
          const cluster = (await this.health(node))?.cluster;
          views[node] = `${cluster?.leader ?? "none"} ${cluster?.term ?? "none"}`;
        }
      }
      const agreed = new Set(Object.values(views));
      const [leader, term] = [...agreed][0]?.split(" ").map(Number) ?? [];
      const known = agreed.size === 1 && Number.isInteger(leader) && leader !== otherThan;
      if (known && this.nodes[leader] && this.leads(leader, term)) return leader;
      await delay(100);
    }
    throw new Error(
      `the nodes agreed on no leader within ${timeoutMs} ms (views ${JSON.stringify(views)}):\n${this.nodeLogs()}`,
    );
  }

  /** SIGKILL to every node. */
  async kill() {
    const codes = await Promise.all(Object.values(this.nodes).map((node) => node.kill()));
    return codes[0];
  }

  /** SIGTERM to every node at once (SIGKILL after a grace period). Resolves with the first
   * non-zero exit code, else 0. */
  async stop() {
    const codes = await Promise.all(Object.values(this.nodes).map((node) => node.stop()));
    return codes.find((code) => code) ?? codes[0];
  }
}

/** A broker: one ferrobus process, or in cluster mode a three-node cluster. */
export const Broker = CLUSTER_MODE ? ClusterBroker : SingleBroker;

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

/** Runs `check` until it stops throwing, every `everyMs`; after `timeoutMs` its last error,
 * prefixed with `what` and the time waited. Returns what `check` returned. */
export async function eventually(what, check, timeoutMs = 10_000, everyMs = 100) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > deadline) {
        error.message = `${what} (waited ${timeoutMs} ms): ${error.message}`;
        throw error;
      }
    }
    await delay(everyMs);
  }
}
