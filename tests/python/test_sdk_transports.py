"""AMQP over TLS and over WebSockets with the official azure-servicebus SDK (issue 14), the way
it connects to the cloud service: no UseDevelopmentEmulator, TLS on the AMQPS listener or on
the main port (every listener tells TLS, AMQP, HTTP and WebSocket upgrades apart), WebSockets
(`TransportType.AmqpOverWebsocket`, wss with the development CA), also through an HTTP CONNECT
proxy, plus python-qpid-proton over amqps. Each broker runs on a data directory of its own:
the development CA is generated into it at start (`<data_dir>/dev-ca.pem`).

Both auth modes (FERROBUS_TEST_AUTH): with keys, the SDK's CBS tokens are checked over every
transport."""

from __future__ import annotations

import datetime
import re
import select
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    TransportType,
)
from azure.servicebus.exceptions import ServiceBusConnectionError, ServiceBusError

from conftest import SAS_KEY_NAME, SAS_KEY_VALUE, Broker, queue_toml, unique_id

TLS_PATTERN = re.compile(r"AMQPS \(AMQP over TLS\) on 127\.0\.0\.1:(\d+)")
WEBSOCKET_PATTERN = re.compile(r"WebSockets \(ws and wss at [^)]*\) on 127\.0\.0\.1:(\d+)")

CONFIG = (
    '[tls]\nlisten = "127.0.0.1:0"\n'
    '[websocket]\nlisten = "127.0.0.1:0"\n'
    + queue_toml("tls-q")
    + queue_toml("tls-main-port-q")
    + queue_toml("ws-q")
    + queue_toml("ws-session-q", requires_session=True)
    + queue_toml("proxy-q")
    + queue_toml("after-bad-client-q")
    + queue_toml("proton-q")
)

# The cloud's shape of connection string: TLS, no emulator flag; the host is replaced per test
# with custom_endpoint_address (any host name is accepted by the broker).
CLOUD_CONNECTION_STRING = (
    f"Endpoint=sb://localhost/;SharedAccessKeyName={SAS_KEY_NAME};SharedAccessKey={SAS_KEY_VALUE}"
)


class Listeners:
    def __init__(self, broker: Broker, data_dir: Path) -> None:
        self.broker = broker
        self.ca = str(data_dir / "dev-ca.pem")
        self.tls_port = self._port(TLS_PATTERN)
        self.websocket_port = self._port(WEBSOCKET_PATTERN)

    def _port(self, pattern: re.Pattern) -> int:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            match = pattern.search(self.broker.log_tail(400))
            if match:
                return int(match.group(1))
            time.sleep(0.05)
        raise AssertionError(f"no listener line {pattern.pattern!r} in:\n{self.broker.log_tail()}")

    def wait_for_ca(self) -> None:
        deadline = time.monotonic() + 10
        while not Path(self.ca).is_file():
            assert time.monotonic() < deadline, f"no development CA at {self.ca}:\n{self.broker.log_tail()}"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listeners]:
    from conftest import _start, _stop

    work_dir = tmp_path_factory.mktemp("ferrobus-transports")
    data_dir = work_dir / "data"
    broker = _start(CONFIG, work_dir, data_dir)
    found = Listeners(broker, data_dir)
    found.wait_for_ca()
    yield found
    _stop(broker)


def tls_client(port: int, ca: str, **options) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        CLOUD_CONNECTION_STRING,
        # A custom endpoint means WebSockets to the Python SDK unless the transport is named.
        transport_type=TransportType.Amqp,
        custom_endpoint_address=f"sb://localhost:{port}",
        connection_verify=ca,
        retry_total=0,
        **options,
    )


def websocket_client(port: int, ca: str, **options) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        CLOUD_CONNECTION_STRING,
        transport_type=TransportType.AmqpOverWebsocket,
        custom_endpoint_address=f"sb://localhost:{port}",
        connection_verify=ca,
        retry_total=0,
        **options,
    )


def round_trip(client: ServiceBusClient, queue: str, count: int = 5) -> List[str]:
    """Sends `count` messages, receives them peek-lock and completes them; returns bodies."""
    marker = unique_id(queue)
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(f"{marker}-{index}") for index in range(count)])
    got: List[str] = []
    with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            for message in receiver.receive_messages(max_message_count=count - len(got), max_wait_time=5):
                got.append(str(message))
                receiver.complete_message(message)
        assert receiver.peek_messages(max_message_count=10) == [], "completed messages are gone"
    return [body for body in got if body.startswith(marker)]


def test_send_receive_and_settle_over_tls_on_the_amqps_listener(listeners: Listeners) -> None:
    with tls_client(listeners.tls_port, listeners.ca) as client:
        bodies = round_trip(client, "tls-q")
    assert len(set(bodies)) == 5, bodies


def test_tls_on_the_main_port_is_told_apart_from_plain_amqp(listeners: Listeners) -> None:
    with tls_client(listeners.broker.port, listeners.ca) as client:
        assert len(round_trip(client, "tls-main-port-q", 3)) == 3


def test_websockets_carry_sessions_and_management_operations(listeners: Listeners) -> None:
    with websocket_client(listeners.websocket_port, listeners.ca) as client:
        with client.get_queue_sender("ws-session-q") as sender:
            sender.send_messages([ServiceBusMessage(f"s{index}", session_id="ws-a") for index in range(3)])
            later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
            scheduled = sender.schedule_messages(ServiceBusMessage("later", session_id="ws-a"), later)
            assert len(scheduled) == 1
        with client.get_queue_receiver("ws-session-q", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as receiver:
            assert receiver.session.session_id == "ws-a"
            receiver.session.set_state(b"checkpoint-1")
            assert receiver.session.get_state() == b"checkpoint-1"
            peeked = receiver.peek_messages(max_message_count=10)
            assert [str(message) for message in peeked] == ["s0", "s1", "s2", "later"]
            got = receiver.receive_messages(max_message_count=3, max_wait_time=5)
            assert [str(message) for message in got] == ["s0", "s1", "s2"]
            for message in got:
                receiver.complete_message(message)
        with client.get_queue_sender("ws-session-q") as sender:
            sender.cancel_scheduled_messages(scheduled)
        with client.get_queue_receiver("ws-session-q", session_id="ws-a", max_wait_time=2) as receiver:
            assert receiver.peek_messages(max_message_count=10) == []
        # And a plain queue over the same transport.
        assert len(round_trip(client, "ws-q", 4)) == 4


def test_the_main_port_also_takes_the_websocket_upgrade(listeners: Listeners) -> None:
    with websocket_client(listeners.broker.port, listeners.ca) as client:
        assert len(round_trip(client, "ws-q", 2)) == 2


def test_an_untrusted_certificate_fails_in_the_client_and_the_broker_serves_on(
    listeners: Listeners, tmp_path: Path
) -> None:
    # A CA the broker's certificate does not chain to: the system's default store.
    with ServiceBusClient.from_connection_string(
        CLOUD_CONNECTION_STRING,
        transport_type=TransportType.Amqp,
        custom_endpoint_address=f"sb://localhost:{listeners.tls_port}",
        retry_total=0,
    ) as client:
        with pytest.raises((ServiceBusConnectionError, ServiceBusError, ssl.SSLError)) as failure:
            with client.get_queue_sender("tls-q") as sender:
                sender.send_messages(ServiceBusMessage("never"))
    assert "CERTIFICATE" in repr(failure.value).upper() or "SSL" in repr(failure.value).upper(), repr(
        failure.value
    )
    with tls_client(listeners.tls_port, listeners.ca) as client:
        assert len(round_trip(client, "after-bad-client-q", 1)) == 1


def test_an_unfinished_tls_handshake_does_not_stop_the_broker(listeners: Listeners) -> None:
    # The first bytes of a TLS ClientHello, then nothing; another client then a close.
    stalled = socket.create_connection(("127.0.0.1", listeners.tls_port))
    stalled.sendall(bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00]))
    half = socket.create_connection(("127.0.0.1", listeners.broker.port))
    half.sendall(bytes([0x16, 0x03, 0x01]))
    half.close()
    try:
        with tls_client(listeners.tls_port, listeners.ca) as client:
            assert len(round_trip(client, "after-bad-client-q", 2)) == 2
    finally:
        stalled.close()
    assert listeners.broker.is_running()


class ConnectProxy:
    """A minimal HTTP CONNECT proxy on 127.0.0.1:0 that records the targets it tunnelled."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.targets: List[str] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        request_line = head.split(b"\r\n", 1)[0].decode()
        method, target, _ = request_line.split(" ", 2)
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        self.targets.append(target)
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection(("127.0.0.1", int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        rest = head.split(b"\r\n\r\n", 1)[1]
        if rest:
            upstream.sendall(rest)
        sockets = [client, upstream]
        try:
            while not self._stop.is_set():
                readable, _, _ = select.select(sockets, [], [], 0.2)
                for source in readable:
                    data = source.recv(65536)
                    if not data:
                        return
                    (upstream if source is client else client).sendall(data)
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self._stop.set()
        self.server.close()


def test_websockets_through_an_http_connect_proxy(listeners: Listeners) -> None:
    proxy = ConnectProxy()
    try:
        with websocket_client(
            listeners.websocket_port,
            listeners.ca,
            http_proxy={"proxy_hostname": "127.0.0.1", "proxy_port": proxy.port},
        ) as client:
            assert len(round_trip(client, "proxy-q", 3)) == 3
    finally:
        proxy.close()
    assert any(target.endswith(f":{listeners.websocket_port}") for target in proxy.targets), proxy.targets


def proton_ssl_present() -> Tuple[bool, Optional[str]]:
    try:
        import proton
    except ImportError:
        return False, "python-qpid-proton is not installed"
    if not proton.SSL.present():
        return False, "this python-qpid-proton was built without TLS support"
    return True, None


def test_proton_over_amqps(listeners: Listeners) -> None:
    present, reason = proton_ssl_present()
    if not present:
        pytest.skip(reason)
    from proton import Message, SSLDomain
    from proton.utils import BlockingConnection

    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(listeners.ca)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    options = {}
    import os

    if os.environ.get("FERROBUS_TEST_AUTH", "none") == "keys":
        options = {"user": SAS_KEY_NAME, "password": SAS_KEY_VALUE, "allowed_mechs": "PLAIN"}
    else:
        options = {"allowed_mechs": "ANONYMOUS"}
    connection = BlockingConnection(
        f"amqps://localhost:{listeners.tls_port}", ssl_domain=domain, timeout=10, **options
    )
    try:
        sender = connection.create_sender("proton-q")
        sender.send(Message(body="over amqps"))
        receiver = connection.create_receiver("proton-q")
        message = receiver.receive(timeout=10)
        receiver.accept()
        assert message.body == "over amqps"
    finally:
        connection.close()
