"""Harness for the Python compatibility suite: starts the real ferrobus binary on 127.0.0.1:0.

The broker binary comes from ``FERROBUS_BIN``, else ``<repo>/target/release/ferrobus``. It is
started with ``--config FILE --listen 127.0.0.1:0``; the bound port is parsed from the
``listening on 127.0.0.1:PORT`` line the broker logs on stderr. stderr is drained for the whole
life of the process (so the pipe never fills) into a log file and a ring buffer whose tail is
attached to the report of every failing test.

Queues: the session-scoped ``broker`` serves every queue in ``SHARED_QUEUES``. Each test owns
its queue(s), so tests never see each other's messages and may leave messages behind. Tests that
need a special broker configuration (auth keys) start a dedicated one with ``start_broker``.

Authorization mode: ``FERROBUS_TEST_AUTH=keys`` gives every broker this harness starts (unless
its config already has ``[[auth.keys]]``) the connection strings' key, name
``RootManageSharedAccessKey`` with the Manage right, so the SDKs' CBS tokens are validated and
checked on every link and ``$management`` operation. ``none`` (the default) starts brokers
without keys, where any token is accepted (emulator behaviour). ``scripts/test`` runs the suite
once per mode. Tests of no-keys behaviour are marked ``requires_no_keys``.

Cluster mode: ``FERROBUS_TEST_CLUSTER=3`` makes every broker this harness starts (the shared one
and each dedicated one) a three-node cluster (``ClusterBroker``): nodes 1-3 on 127.0.0.1-3,
each with the test's configuration plus a ``[cluster]`` table, durable storage in a data
directory of its own, and every listener (AMQP, HTTP, AMQPS, WebSockets, peers) on the same
port on each node, picked free at start (a follower forwards a client's connection to the
leader's host at the port the client reached). TLS on every node presents one certificate for
localhost and 127.0.0.1-3 made with openssl; its CA is written to ``<data_dir>/dev-ca.pem``,
where the tests look for the development CA. The connection string names a follower, chosen
once the nodes' ``/health`` agree on a leader and term, that leader logged that it leads in that
term, and a connection through the follower is answered (``wait_for_leader``,
``wait_serving``). ``kill()`` and ``stop()`` act on all three
nodes; a cluster started again on the same data directory takes the same ports. Tests that
cannot make sense on a cluster are marked ``skip_in_cluster(reason)``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BINARY = REPO_ROOT / "target" / "release" / "ferrobus"
STARTUP_TIMEOUT_SECONDS = 10.0
SHUTDOWN_TIMEOUT_SECONDS = 5.0
LISTENING_PATTERN = re.compile(r"listening on 127\.0\.0\.\d+:(\d+)")
ANSI_ESCAPE_PATTERN = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# The key every connection string carries. Without [[auth.keys]] the broker accepts any token.
SAS_KEY_NAME = "RootManageSharedAccessKey"
SAS_KEY_VALUE = "SAS_KEY_VALUE"

# FERROBUS_TEST_AUTH: "none" (default, any token accepted) or "keys" (see the module doc).
AUTH_MODE = os.environ.get("FERROBUS_TEST_AUTH", "none")
if AUTH_MODE not in ("none", "keys"):
    raise RuntimeError(f"FERROBUS_TEST_AUTH must be 'none' or 'keys', not {AUTH_MODE!r}")
KEYS_MODE = AUTH_MODE == "keys"

# Marks a test of behaviour that only exists without keys (e.g. "any key is accepted").
requires_no_keys = pytest.mark.skipif(
    KEYS_MODE, reason="tests the no-keys (emulator) behaviour; FERROBUS_TEST_AUTH=keys configures keys"
)

# Per-queue defaults; a test's queue overrides only what its rule needs.
QUEUE_DEFAULTS = {
    "lock_duration": "30s",
    "max_delivery_count": 10,
    "max_size_in_megabytes": 64,
    "max_message_size_in_kilobytes": 256,
}

# name -> overrides. One (or a few) queues per test; see each test for why it needs its settings.
SHARED_QUEUES: Dict[str, Dict[str, object]] = {
    # test_sdk_queues.py
    "sdk-send-single": {},
    "sdk-send-list": {},
    "sdk-send-batch": {},
    "sdk-peek-lock-complete": {},
    "sdk-receive-and-delete": {},
    "sdk-abandon": {},
    "sdk-dead-letter": {},
    "sdk-max-delivery": {"max_delivery_count": 3},
    "sdk-lock-expiry": {"lock_duration": "2s"},
    "sdk-lock-lost-broker": {"lock_duration": "2s"},
    "sdk-defer": {},
    "sdk-defer-by-sequence": {},
    "sdk-sequence": {},
    "sdk-enqueued-time": {},
    "sdk-properties": {},
    "sdk-locked-until": {"lock_duration": "20s"},
    "sdk-dlq-not-sendable": {},
    "sdk-message-too-large": {"max_message_size_in_kilobytes": 64},
    "sdk-queue-full": {"max_size_in_megabytes": 1, "max_message_size_in_kilobytes": 256},
    "sdk-many-messages": {},
    "sdk-large-backlog": {},
    "sdk-any-key": {},
    # test_generic_amqp.py
    "amqp-anonymous": {},
    "amqp-no-sasl": {},
    "amqp-released": {},
    "amqp-settled-range": {},
    "amqp-modified": {},
    "amqp-rejected": {},
    "amqp-annotations": {},
    "amqp-lock-lost": {"lock_duration": "1s"},
    "amqp-settle-second-accepted": {},
    "amqp-settle-second-modified": {},
    "amqp-settle-second-rejected": {},
    # test_transactions.py
    "txn-commit-in": {},
    "txn-commit-out": {},
    "txn-abort-in": {"lock_duration": "1s"},
    "txn-abort-out": {},
    "txn-plain": {},
}


def queue_toml(name: str, **overrides: object) -> str:
    settings = {**QUEUE_DEFAULTS, **overrides}
    lines = ["[[queues]]", f'name = "{name}"']
    for key, value in settings.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {str(value).lower()}")
        else:
            lines.append(f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}")
    return "\n".join(lines) + "\n"


def auth_key_toml(name: str, key: str, rights: List[str]) -> str:
    rights_list = ", ".join(f'"{right}"' for right in rights)
    return f'[[auth.keys]]\nname = "{name}"\nkey = "{key}"\nrights = [{rights_list}]\n'


def with_test_auth(config_text: str) -> str:
    """The config a broker is started with: in keys mode, the connection strings' key is added
    unless the test configures keys itself."""
    if not KEYS_MODE or "[[auth.keys]]" in config_text:
        return config_text
    return config_text + "\n" + auth_key_toml(SAS_KEY_NAME, SAS_KEY_VALUE, ["Manage"])


def connection_string(
    port: int, key_name: str = SAS_KEY_NAME, key: str = SAS_KEY_VALUE, host: str = "127.0.0.1"
) -> str:
    return (
        f"Endpoint=sb://{host}:{port};SharedAccessKeyName={key_name};"
        f"SharedAccessKey={key};UseDevelopmentEmulator=true"
    )


def broker_binary() -> Path:
    return Path(os.environ.get("FERROBUS_BIN") or DEFAULT_BINARY)


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """One ferrobus process with its own config file and log file."""

    def __init__(
        self, config_text: str, work_dir: Path, data_dir: Optional[Path] = None, cluster_node: bool = False
    ) -> None:
        # A cluster node's configuration comes whole from ClusterBroker (listener, storage).
        self.cluster_node = cluster_node
        self.config_text = config_text if cluster_node else with_test_auth(config_text)
        self.work_dir = work_dir
        # A data directory of the test's own (durability tests restart on it).
        self.data_dir = data_dir
        self.config_path = work_dir / "ferrobus.toml"
        self.log_path = work_dir / "ferrobus.stderr.log"
        # The address clients reach it at (a ClusterBroker names a follower's).
        self.host = "127.0.0.1"
        self.port: Optional[int] = None
        self._log_tail: collections.deque = collections.deque(maxlen=400)
        self._port_found = threading.Event()
        self._process: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None

    @property
    def connection_string(self) -> str:
        assert self.port is not None, "broker not started"
        return connection_string(self.port)

    def connection_string_with(self, key_name: str, key: str) -> str:
        assert self.port is not None, "broker not started"
        return connection_string(self.port, key_name, key)

    @property
    def amqp_url(self) -> str:
        assert self.port is not None, "broker not started"
        return f"amqp://127.0.0.1:{self.port}"

    def start(self) -> "Broker":
        self.launch()
        self.wait_listening()
        return self

    def launch(self) -> None:
        """Starts the process (see `wait_listening`)."""
        binary = broker_binary()
        if not binary.is_file():
            raise BrokerStartError(
                f"ferrobus binary not found at {binary}: build it with `cargo build --release` "
                "or point FERROBUS_BIN at it"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text)
        environment = dict(os.environ, NO_COLOR="1")
        # FERROBUS_TEST_STORAGE=durable runs the broker on a data directory of its own (every
        # reply waits for its fsync); the default is --memory.
        if self.cluster_node:
            storage = []
        elif self.data_dir is not None:
            storage = ["--data-dir", str(self.data_dir)]
        elif os.environ.get("FERROBUS_TEST_STORAGE", "memory") == "durable":
            storage = ["--data-dir", str(self.work_dir / "data")]
        else:
            storage = ["--memory"]
        listen = [] if self.cluster_node else ["--listen", "127.0.0.1:0"]
        self._process = subprocess.Popen(
            [str(binary), "--config", str(self.config_path), *listen, *storage],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=environment,
        )
        self._reader = threading.Thread(target=self._drain_stderr, name="ferrobus-stderr", daemon=True)
        self._reader.start()

    def wait_listening(self) -> None:
        """Waits for the `listening on` line (the port); stops the process on failure."""
        assert self._process is not None and self._reader is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while not self._port_found.wait(timeout=0.05):
            if self._process.poll() is not None:
                self._reader.join(timeout=1)
                raise BrokerStartError(
                    f"ferrobus exited with {self._process.returncode} before listening:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerStartError(
                    f"ferrobus printed no 'listening on 127.0.0.1:PORT' within "
                    f"{STARTUP_TIMEOUT_SECONDS} s:\n{self.log_tail()}"
                )

    def _drain_stderr(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        with open(self.log_path, "w", encoding="utf-8") as log_file:
            for raw_line in iter(self._process.stderr.readline, b""):
                line = ANSI_ESCAPE_PATTERN.sub("", raw_line.decode("utf-8", "replace")).rstrip("\n")
                log_file.write(line + "\n")
                log_file.flush()
                self._log_tail.append(line)
                if self.port is None:
                    match = LISTENING_PATTERN.search(line)
                    if match:
                        self.port = int(match.group(1))
                        self._port_found.set()

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(list(self._log_tail)[-lines:])

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL (kill -9): no shutdown, no flush."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=SHUTDOWN_TIMEOUT_SECONDS)
        if self._reader is not None:
            self._reader.join(timeout=2)

    def stop(self) -> Optional[int]:
        """SIGTERM, then SIGKILL after a grace period. Returns the exit code."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=SHUTDOWN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=SHUTDOWN_TIMEOUT_SECONDS)
        if self._reader is not None:
            self._reader.join(timeout=2)
        return self._process.returncode


# ---------------------------------------------------------------------------------------------
# Cluster mode: FERROBUS_TEST_CLUSTER=3 (see the module doc).

CLUSTER_SIZE = int(os.environ.get("FERROBUS_TEST_CLUSTER", "0") or "0")
if CLUSTER_SIZE not in (0, 3):
    raise RuntimeError(f"FERROBUS_TEST_CLUSTER must be unset or 3, not {CLUSTER_SIZE!r}")
CLUSTER_MODE = CLUSTER_SIZE == 3
CLUSTER_SECRET = "ferrobus-test-cluster-secret"
# How long a fresh cluster may take to agree on a leader (a new group's election, or the
# lowest member's initialize wait when it is slow to start).
CLUSTER_LEADER_TIMEOUT_SECONDS = 20.0


def skip_in_cluster(reason: str):
    """Marks a test that cannot make sense against a three-node cluster, saying why."""
    return pytest.mark.skipif(CLUSTER_MODE, reason=f"FERROBUS_TEST_CLUSTER=3: {reason}")


def node_host(node: int) -> str:
    """Node N of a test cluster listens on 127.0.0.N (Linux routes all of 127/8 to loopback)."""
    return f"127.0.0.{node}"


def _port_free_on_every_node(port: int) -> bool:
    for node in range(2, CLUSTER_SIZE + 1):
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.bind((node_host(node), port))
        except OSError:
            return False
        finally:
            probe.close()
    return True


def cluster_ports(count: int) -> List[int]:
    """`count` distinct ports free on 127.0.0.1, .2 and .3 right now (every member must serve
    the same port numbers: a follower forwards to the leader's host at the port reached)."""
    ports: List[int] = []
    while len(ports) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as first:
            first.bind((node_host(1), 0))
            port = first.getsockname()[1]
            if port not in ports and _port_free_on_every_node(port):
                ports.append(port)
    return ports


_TEST_CERTIFICATE: Dict[str, Path] = {}


def cluster_certificate(directory: Path) -> Dict[str, Path]:
    """A CA and a server certificate for localhost and 127.0.0.1-3, made once per process with
    openssl: every member presents the same identity, so a TLS client that reached any node
    (forwarded to whichever leads) verifies it against one CA."""
    if _TEST_CERTIFICATE:
        return _TEST_CERTIFICATE
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca-key.pem", directory / "ca.pem"
    key, request, cert = directory / "server-key.pem", directory / "server.csr", directory / "server.pem"
    extensions = directory / "server.ext"
    sans = ",".join(["DNS:localhost"] + [f"IP:{node_host(node)}" for node in range(1, CLUSTER_SIZE + 1)])
    extensions.write_text(
        f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    def openssl(*arguments: str) -> None:
        subprocess.run(["openssl", *arguments], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(ca_key), "-out", str(ca_cert), "-days", "30", "-subj", "/CN=ferrobus test cluster CA")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(request), "-subj", "/CN=ferrobus test cluster")
    openssl("x509", "-req", "-in", str(request), "-CA", str(ca_cert), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", "30", "-extfile", str(extensions))
    _TEST_CERTIFICATE.update(ca=ca_cert, cert=cert, key=key)
    return _TEST_CERTIFICATE


_TABLE_HEADER = re.compile(r"^\s*\[([A-Za-z_][A-Za-z0-9_.]*)\]\s*(#.*)?$")
_KEY_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")


def with_tables(config_text: str, settings: Dict[str, Dict[str, str]]) -> str:
    """`config_text` with each key of `settings` (table -> key -> TOML value) set: in the
    table's existing header when the text has it (replacing the key's line), else in a new
    table at the end. Line-based; enough for the configurations the tests write."""
    lines: List[str] = []
    current: Optional[str] = None
    written = set()
    for line in config_text.splitlines():
        header = _TABLE_HEADER.match(line)
        if header:
            current = header.group(1)
        elif line.lstrip().startswith("[["):
            current = None
        key = _KEY_LINE.match(line)
        if not header and key and current in settings and key.group(1) in settings[current]:
            continue
        lines.append(line)
        if header and current in settings and current not in written:
            lines.extend(f"{name} = {value}" for name, value in settings[current].items())
            written.add(current)
    for table, values in settings.items():
        if table not in written:
            lines.append(f"[{table}]")
            lines.extend(f"{name} = {value}" for name, value in values.items())
    return "\n".join(lines) + "\n"


def _toml_text(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# FERROBUS_TEST_CLUSTER_PLACEMENT=spread: every cluster's groups have leaders of their own
# (`[cluster] placement`, docs/cluster.md).
CLUSTER_EXTRA = (
    {"placement": _toml_text(os.environ["FERROBUS_TEST_CLUSTER_PLACEMENT"])}
    if os.environ.get("FERROBUS_TEST_CLUSTER_PLACEMENT")
    else {}
)


class ClusterBroker:
    """Three ferrobus nodes on 127.0.0.1-3 with the test's configuration, durable storage and a
    `[cluster]` table, all listeners on the same ports on each node. Same interface as
    `Broker`; `host` is a follower's address (the connection string names it), `leader` the
    node the members agreed on at start."""

    def __init__(self, config_text: str, work_dir: Path, data_dir: Optional[Path] = None) -> None:
        self.config_text = with_test_auth(config_text)
        self.work_dir = work_dir
        # Node 1 keeps its data in the test's data directory (the CA the tests trust is written
        # there); nodes 2 and 3 in siblings of it.
        self.data_dir = data_dir
        base = data_dir if data_dir is not None else work_dir / "data"
        self.node_data_dirs = {1: base, **{node: base.with_name(f"{base.name}-node{node}") for node in (2, 3)}}
        self.config_path = work_dir / "node1.toml"
        self.log_path = work_dir / "node1.stderr.log"
        self.host = node_host(1)
        self.port: Optional[int] = None
        self.leader: Optional[int] = None
        self.nodes: Dict[int, Broker] = {}
        self._ports: Optional[List[int]] = None
        # Connections through the follower that the cluster closed unanswered at start.
        self.refused_probes = 0
        # Whether this start picked the ports (else it reuses an earlier cluster's).
        self._fresh: Optional[bool] = None

    @property
    def connection_string(self) -> str:
        assert self.port is not None, "broker not started"
        return connection_string(self.port, host=self.host)

    def connection_string_with(self, key_name: str, key: str) -> str:
        assert self.port is not None, "broker not started"
        return connection_string(self.port, key_name, key, host=self.host)

    @property
    def amqp_url(self) -> str:
        assert self.port is not None, "broker not started"
        return f"amqp://{self.host}:{self.port}"

    def node_config(self, node: int) -> str:
        assert self._ports is not None
        amqp, http, tls, websocket, peer = self._ports
        certificate = cluster_certificate(self.work_dir.parent / "ferrobus-cluster-certificate")
        host = node_host(node)
        members = ", ".join(
            f'{{ id = {member}, address = "{node_host(member)}:{peer}" }}' for member in range(1, CLUSTER_SIZE + 1)
        )
        return with_tables(
            self.config_text,
            {
                "server": {"listen": f'"{host}:{amqp}"'},
                "http": {
                    "listen": f'"{host}:{http}"',
                    "tls_cert": _toml_text(str(certificate["cert"])),
                    "tls_key": _toml_text(str(certificate["key"])),
                },
                "tls": {
                    "listen": f'"{host}:{tls}"',
                    "cert": _toml_text(str(certificate["cert"])),
                    "key": _toml_text(str(certificate["key"])),
                },
                "websocket": {"listen": f'"{host}:{websocket}"'},
                "storage": {"mode": '"durable"', "data_dir": _toml_text(str(self.node_data_dirs[node]))},
                "cluster": {
                    "node_id": str(node),
                    "address": f'"{host}:{peer}"',
                    "secret": f'"{CLUSTER_SECRET}"',
                    "members": f"[{members}]",
                    **CLUSTER_EXTRA,
                },
            },
        )

    def start(self) -> "ClusterBroker":
        # Ports are picked free, then bound by the nodes: another process may take one in
        # between; a fresh cluster then tries again with new ports.
        for attempt in range(3):
            try:
                return self._start_once()
            except BrokerStartError as error:
                if not self._fresh or "in use" not in str(error) or attempt == 2:
                    raise
                _CLUSTER_PORTS.pop(self.node_data_dirs[1], None)
                self.nodes = {}
        raise AssertionError("unreachable")

    def _start_once(self) -> "ClusterBroker":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        certificate = cluster_certificate(self.work_dir.parent / "ferrobus-cluster-certificate")
        for directory in self.node_data_dirs.values():
            directory.mkdir(parents=True, exist_ok=True)
        # The tests trust <data_dir>/dev-ca.pem: here, the CA of the cluster's certificate.
        (self.node_data_dirs[1] / "dev-ca.pem").write_bytes(certificate["ca"].read_bytes())
        # A restart (a new ClusterBroker on the same data directory) keeps the ports: the
        # members' peer addresses are the same as before.
        self._fresh = self.node_data_dirs[1] not in _CLUSTER_PORTS
        self._ports = _CLUSTER_PORTS.get(self.node_data_dirs[1]) or cluster_ports(5)
        _CLUSTER_PORTS[self.node_data_dirs[1]] = self._ports
        self.port = self._ports[0]
        for node in range(1, CLUSTER_SIZE + 1):
            member = Broker(self.node_config(node), self.work_dir, cluster_node=True)
            member.config_path = self.work_dir / f"node{node}.toml"
            member.log_path = self.work_dir / f"node{node}.stderr.log"
            self.nodes[node] = member
        try:
            for member in self.nodes.values():
                member.launch()
            for member in self.nodes.values():
                member.wait_listening()
            self.leader = self.wait_for_leader()
            followers = [node for node in self.nodes if node != self.leader]
            self.host = node_host(followers[0] if followers else 1)
            self.wait_serving()
        except BrokerStartError:
            self.stop()
            raise
        return self

    def wait_serving(self, timeout: float = CLUSTER_LEADER_TIMEOUT_SECONDS) -> None:
        """Waits until a connection to `host` is answered by the leader: the SASL protocol
        header sent through the follower comes back. Right after the nodes agree on a leader,
        a connection forwarded to it is sometimes closed at once; each such attempt is
        counted in `refused_probes` (and printed)."""
        header = b"AMQP\x03\x01\x00\x00"
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=2) as probe:
                    probe.sendall(header)
                    answer = b""
                    while len(answer) < len(header):
                        chunk = probe.recv(len(header) - len(answer))
                        if not chunk:
                            break
                        answer += chunk
                if answer == header:
                    return
            except OSError:
                pass
            self.refused_probes += 1
            print(f"cluster on port {self.port}: probe {self.refused_probes} through {self.host} got no answer")
            if time.monotonic() > deadline:
                raise BrokerStartError(f"no answer through {self.host}:{self.port} within {timeout} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def health(self, node: int) -> Optional[dict]:
        """Node `node`'s own /health answer (its view of the cluster), None if it gave none."""
        request = urllib.request.Request(f"http://{node_host(node)}:{self.port}/health")
        try:
            with _NO_PROXY_OPENER.open(request, timeout=1) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            try:
                return json.loads(error.read())
            except ValueError:
                return None
        except (OSError, ValueError):
            return None

    def leads(self, node: int, term: object) -> bool:
        """Whether node `node` logged that it leads in `term` (and not, after that, that it
        stopped)."""
        lines = [line for line in self.nodes[node]._log_tail if "leads the cluster" in line]
        return bool(lines) and "this node leads the cluster" in lines[-1] and f"term={term}" in lines[-1]

    def wait_for_leader(self, timeout: float = CLUSTER_LEADER_TIMEOUT_SECONDS, other_than: Optional[int] = None) -> int:
        """The leader every running node names in its /health, once they agree on it and on
        the term and it logged that it leads in that term: after a restart of every node the
        members name the leader of the term they stored at once, about 0.5 s before it
        serves, and a connection a follower forwards while it learns of a new term is closed."""
        deadline = time.monotonic() + timeout
        views: Dict[int, object] = {}
        while time.monotonic() < deadline:
            views = {}
            for node, member in self.nodes.items():
                if member.is_running():
                    cluster = ((self.health(node) or {}).get("cluster")) or {}
                    views[node] = (cluster.get("leader"), cluster.get("term"))
            agreed = set(views.values())
            if len(agreed) == 1:
                leader, term = agreed.pop()
                # With spread placement every node serves from the start: no node logs that
                # it leads the cluster.
                serves = CLUSTER_EXTRA.get("placement") == '"spread"' or self.leads(leader, term)
                if leader is not None and leader != other_than and leader in self.nodes and serves:
                    return int(leader)
            time.sleep(0.1)
        raise BrokerStartError(f"the nodes agreed on no leader within {timeout} s (views {views}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(
            f"--- node {node} ({node_host(node)}, {member.log_path}) ---\n{member.log_tail(lines)}"
            + ("" if member.is_running() else "\n[node process has exited]")
            for node, member in self.nodes.items()
        )

    def is_running(self) -> bool:
        return bool(self.nodes) and all(member.is_running() for member in self.nodes.values())

    def kill_node(self, node: int) -> None:
        """SIGKILL to one node."""
        self.nodes[node].kill()

    def restart_node(self, node: int) -> None:
        """Starts node `node` again on its data directory, its output in a log file of its own."""
        assert not self.nodes[node].is_running(), f"node {node} still runs"
        starts = len(list(self.work_dir.glob(f"node{node}*.stderr.log")))
        member = Broker(self.node_config(node), self.work_dir, cluster_node=True)
        member.config_path = self.work_dir / f"node{node}.toml"
        member.log_path = self.work_dir / f"node{node}.start{starts + 1}.stderr.log"
        member.start()
        self.nodes[node] = member

    def kill(self) -> None:
        """SIGKILL to every node."""
        for member in self.nodes.values():
            if member._process is not None and member._process.poll() is None:
                member._process.kill()
        for member in self.nodes.values():
            member.kill()

    def stop(self) -> Optional[int]:
        """SIGTERM to every node at once, then each as `Broker.stop`. Returns the first
        non-zero exit code, else 0."""
        for member in self.nodes.values():
            if member._process is not None and member._process.poll() is None:
                member._process.send_signal(signal.SIGTERM)
        codes = [member.stop() for member in self.nodes.values()]
        return next((code for code in codes if code), codes[0] if codes else None)


# Ports a cluster on a given data directory used, so a restart on it uses them again.
_CLUSTER_PORTS: Dict[Path, List[int]] = {}
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# Brokers alive in this test run, for the failure report.
_RUNNING_BROKERS: List[Broker] = []


def _start(config_text: str, work_dir: Path, data_dir: Optional[Path] = None) -> Broker:
    """A broker (a `ClusterBroker` in cluster mode) started from `config_text`."""
    broker = ClusterBroker(config_text, work_dir, data_dir) if CLUSTER_MODE else Broker(config_text, work_dir, data_dir)
    try:
        broker.start()
    except BrokerStartError as error:
        pytest.fail(str(error), pytrace=False)
    _RUNNING_BROKERS.append(broker)
    return broker


def _stop(broker: Broker) -> None:
    broker.stop()
    if broker in _RUNNING_BROKERS:
        _RUNNING_BROKERS.remove(broker)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The shared broker: every queue in SHARED_QUEUES; keys only in keys mode (see the module doc)."""
    config = "".join(queue_toml(name, **overrides) for name, overrides in SHARED_QUEUES.items())
    shared = _start(config, tmp_path_factory.mktemp("ferrobus-shared"))
    yield shared
    _stop(shared)


@pytest.fixture
def start_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Broker]]:
    """Start a dedicated broker from TOML text; it is stopped when the test ends."""
    started: List[Broker] = []

    def start(config_text: str) -> Broker:
        dedicated = _start(config_text, tmp_path_factory.mktemp("ferrobus-dedicated"))
        started.append(dedicated)
        return dedicated

    yield start
    for dedicated in started:
        _stop(dedicated)


@pytest.fixture
def start_durable_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str, Path], Broker]]:
    """Start a broker from TOML text on the given data directory (durable, whatever
    FERROBUS_TEST_STORAGE says); stopped when the test ends."""
    started: List[Broker] = []

    def start(config_text: str, data_dir: Path) -> Broker:
        dedicated = _start(config_text, tmp_path_factory.mktemp("ferrobus-durable"), data_dir)
        started.append(dedicated)
        return dedicated

    yield start
    for dedicated in started:
        _stop(dedicated)


def unique_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for running in _RUNNING_BROKERS:
            report.sections.append(
                (
                    f"ferrobus stderr tail (port {running.port}, full log {running.log_path})",
                    running.log_tail() + ("" if running.is_running() else "\n[broker process has exited]"),
                )
            )
