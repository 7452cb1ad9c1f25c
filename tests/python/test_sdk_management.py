"""$management operations through the Python SDK that the other files do not cover:
message lock renewal and the errors the SDK must raise for stale locks and unknown
sequence numbers (wire contract §6.4, rules LCK-1, LCK-3, LCK-4)."""

from __future__ import annotations

import datetime
from typing import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageLockLostError, MessageNotFoundError

from conftest import Broker, _start, _stop

pytestmark = pytest.mark.timeout(60)

CONFIG = """
[[queues]]
name = "renew"
lock_duration = "5s"

[[queues]]
name = "stale"
lock_duration = "30s"

[[queues]]
name = "deferred"
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Broker]:
    started = _start(CONFIG, tmp_path_factory.mktemp("ferrobus-management"))
    yield started
    _stop(started)


def client(broker: Broker) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0)


def test_renew_message_lock_extends_locked_until(broker):
    """rule LCK-1: renew-lock returns a later expiry and the SDK exposes it."""
    with client(broker) as sb:
        with sb.get_queue_sender("renew") as sender:
            sender.send_messages(ServiceBusMessage(b"keep me"))
        with sb.get_queue_receiver("renew", max_wait_time=5) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            first = message.locked_until_utc
            assert first is not None
            renewed = receiver.renew_message_lock(message)
            assert renewed > first - datetime.timedelta(milliseconds=1)
            assert message.locked_until_utc == renewed
            receiver.complete_message(message)


def test_renewing_a_settled_message_lock_raises_message_lock_lost(broker):
    """rule LCK-3: the broker answers 410 com.microsoft:message-lock-lost."""
    with client(broker) as sb:
        with sb.get_queue_sender("stale") as sender:
            sender.send_messages(ServiceBusMessage(b"settle then renew"))
        with sb.get_queue_receiver("stale", max_wait_time=5) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(message)
            # The SDK refuses settled messages client-side; renew by a fresh copy of the token.
            message._settled = False
            with pytest.raises(MessageLockLostError):
                receiver.renew_message_lock(message)


def test_receiving_an_unknown_deferred_sequence_number_raises_message_not_found(broker):
    """rule LCK-4: receive-by-sequence-number for a number that is not deferred."""
    with client(broker) as sb:
        with sb.get_queue_sender("deferred") as sender:
            sender.send_messages(ServiceBusMessage(b"not deferred"))
        with sb.get_queue_receiver("deferred", max_wait_time=5) as receiver:
            with pytest.raises(MessageNotFoundError):
                receiver.receive_deferred_messages([1])
            with pytest.raises(MessageNotFoundError):
                receiver.receive_deferred_messages([999])
