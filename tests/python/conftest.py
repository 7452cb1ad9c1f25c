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
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BINARY = REPO_ROOT / "target" / "release" / "ferrobus"
STARTUP_TIMEOUT_SECONDS = 10.0
SHUTDOWN_TIMEOUT_SECONDS = 5.0
LISTENING_PATTERN = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
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


def connection_string(port: int, key_name: str = SAS_KEY_NAME, key: str = SAS_KEY_VALUE) -> str:
    return (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName={key_name};"
        f"SharedAccessKey={key};UseDevelopmentEmulator=true"
    )


def broker_binary() -> Path:
    return Path(os.environ.get("FERROBUS_BIN") or DEFAULT_BINARY)


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """One ferrobus process with its own config file and log file."""

    def __init__(self, config_text: str, work_dir: Path, data_dir: Optional[Path] = None) -> None:
        self.config_text = with_test_auth(config_text)
        self.work_dir = work_dir
        # A data directory of the test's own (durability tests restart on it).
        self.data_dir = data_dir
        self.config_path = work_dir / "ferrobus.toml"
        self.log_path = work_dir / "ferrobus.stderr.log"
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
        if self.data_dir is not None:
            storage = ["--data-dir", str(self.data_dir)]
        elif os.environ.get("FERROBUS_TEST_STORAGE", "memory") == "durable":
            storage = ["--data-dir", str(self.work_dir / "data")]
        else:
            storage = ["--memory"]
        self._process = subprocess.Popen(
            [str(binary), "--config", str(self.config_path), "--listen", "127.0.0.1:0", *storage],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=environment,
        )
        self._reader = threading.Thread(target=self._drain_stderr, name="ferrobus-stderr", daemon=True)
        self._reader.start()
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
        return self

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


# Brokers alive in this test run, for the failure report.
_RUNNING_BROKERS: List[Broker] = []


def _start(config_text: str, work_dir: Path, data_dir: Optional[Path] = None) -> Broker:
    broker = Broker(config_text, work_dir, data_dir)
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
