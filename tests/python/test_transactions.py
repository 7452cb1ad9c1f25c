"""Transactions with Qpid Proton (issue 15, item 3; rules TXN-1, TXN-3): python-qpid-proton's
transaction API (a coordinator link, declare, transactional send and accept, commit/abort)
against the real broker, including send-via (a sender whose target is the entity received
from and whose ``com.microsoft:transfer-destination-address`` names the destination). No
Azure SDK for Python or JS exposes transactions; the .NET and Java SDKs speak this same
protocol. Both auth modes (SASL PLAIN with the key in keys mode).
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional

import pytest
from proton import Message, symbol
from proton.handlers import TransactionalClientHandler
from proton.reactor import Container, LinkOption
from proton.utils import BlockingConnection

from conftest import KEYS_MODE, SAS_KEY_NAME, SAS_KEY_VALUE

pytestmark = pytest.mark.timeout(60)

SCENARIO_TIMEOUT_SECONDS = 20


def connection_options() -> Dict[str, object]:
    if KEYS_MODE:
        return {
            "allowed_mechs": "PLAIN",
            "allow_insecure_mechs": True,
            "user": SAS_KEY_NAME,
            "password": SAS_KEY_VALUE,
        }
    return {"allowed_mechs": "ANONYMOUS"}


class Via(LinkOption):
    """A send-via sender: the messages go through the link's target to ``destination``."""

    def __init__(self, destination: str) -> None:
        self.destination = destination

    def apply(self, link) -> None:
        link.properties = {symbol("com.microsoft:transfer-destination-address"): self.destination}


class ReceiveProcessSend(TransactionalClientHandler):
    """Receives one message from ``source``, and in one transaction accepts it and sends a
    result through ``source`` to ``destination``; then commits or aborts."""

    def __init__(self, url: str, source: str, destination: str, commit: bool) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url = url
        self.source = source
        self.destination = destination
        self.commit = commit
        self.outcome: Optional[str] = None
        self.received: List[str] = []
        self.transaction = None
        self.connection = None
        self.receiver = None
        self.sender = None

    def on_start(self, event) -> None:
        self.connection = event.container.connect(self.url, **connection_options())
        self.sender = event.container.create_sender(
            self.connection, self.source, options=Via(self.destination)
        )
        event.container.declare_transaction(self.connection, handler=self)

    def on_transaction_declared(self, event) -> None:
        self.transaction = event.transaction
        self.receiver = event.container.create_receiver(self.connection, self.source)
        self.receiver.flow(1)

    def on_message(self, event) -> None:
        self.received.append(event.message.body)
        self.transaction.accept(event.delivery)
        self.transaction.send(self.sender, Message(body=f"result of {event.message.body}"))
        if self.commit:
            self.transaction.commit()
        else:
            self.transaction.abort()

    def on_transaction_committed(self, event) -> None:
        self.outcome = "committed"
        self.connection.close()

    def on_transaction_aborted(self, event) -> None:
        self.outcome = "aborted"
        self.connection.close()

    def on_transaction_commit_failed(self, event) -> None:
        self.outcome = "commit failed"
        self.connection.close()

    def on_transaction_declare_failed(self, event) -> None:
        self.outcome = "declare failed"
        self.connection.close()


def run(handler: ReceiveProcessSend) -> None:
    container = Container(handler)
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    thread.join(SCENARIO_TIMEOUT_SECONDS)
    assert not thread.is_alive(), f"the scenario did not finish: {handler.outcome}"


def send(url: str, address: str, bodies: List[str]) -> None:
    connection = BlockingConnection(url, timeout=10, **connection_options())
    sender = connection.create_sender(address)
    for body in bodies:
        sender.send(Message(body=body))
    connection.close()


def drain(url: str, address: str, expected: int, quiet: float = 0.5) -> List[str]:
    """Receives (and completes) ``expected`` messages, waiting up to 5 s for each, then
    whatever else arrives within ``quiet`` seconds."""
    connection = BlockingConnection(url, timeout=10, **connection_options())
    receiver = connection.create_receiver(address, credit=10)
    bodies = []
    try:
        while True:
            wait = 5 if len(bodies) < expected else quiet
            message = receiver.receive(timeout=wait)
            bodies.append(message.body)
            receiver.accept()
    except Exception:  # Timeout: nothing more
        pass
    connection.close()
    return bodies


def test_receive_complete_and_send_via_commit_together(broker) -> None:
    # rule TXN-1, TXN-3
    send(broker.amqp_url, "txn-commit-in", ["order-1"])
    handler = ReceiveProcessSend(broker.amqp_url, "txn-commit-in", "txn-commit-out", commit=True)
    run(handler)
    assert handler.outcome == "committed"
    assert handler.received == ["order-1"]
    assert drain(broker.amqp_url, "txn-commit-out", 1) == ["result of order-1"]
    assert drain(broker.amqp_url, "txn-commit-in", 0) == []


def test_an_aborted_transaction_sends_nothing_and_gives_the_message_back(broker) -> None:
    # rule TXN-1: the accept was part of the aborted transaction, so the message is still
    # locked by the receiver; it comes back when the lock lapses (1 s) or the link goes
    send(broker.amqp_url, "txn-abort-in", ["order-2"])
    handler = ReceiveProcessSend(broker.amqp_url, "txn-abort-in", "txn-abort-out", commit=False)
    run(handler)
    assert handler.outcome == "aborted"
    assert drain(broker.amqp_url, "txn-abort-in", 1) == ["order-2"]
    assert drain(broker.amqp_url, "txn-abort-out", 0) == []


class SendInTransaction(TransactionalClientHandler):
    """Sends ``count`` messages to ``address`` in one transaction and commits."""

    def __init__(self, url: str, address: str, count: int) -> None:
        super().__init__()
        self.url = url
        self.address = address
        self.count = count
        self.outcome: Optional[str] = None
        self.connection = None

    def on_start(self, event) -> None:
        self.connection = event.container.connect(self.url, **connection_options())
        self.sender = event.container.create_sender(self.connection, self.address)
        event.container.declare_transaction(self.connection, handler=self)

    def on_transaction_declared(self, event) -> None:
        for index in range(self.count):
            event.transaction.send(self.sender, Message(body=f"m{index}"))
        event.transaction.commit()

    def on_transaction_committed(self, event) -> None:
        self.outcome = "committed"
        self.connection.close()

    def on_transaction_commit_failed(self, event) -> None:
        self.outcome = "commit failed"
        self.connection.close()


def test_messages_sent_in_a_transaction_arrive_in_order_at_commit(broker) -> None:
    # rule TXN-1
    handler = SendInTransaction(broker.amqp_url, "txn-plain", 25)
    container = Container(handler)
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    thread.join(SCENARIO_TIMEOUT_SECONDS)
    assert handler.outcome == "committed"
    assert drain(broker.amqp_url, "txn-plain", 25) == [f"m{index}" for index in range(25)]
