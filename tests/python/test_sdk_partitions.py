"""Partitioned entities with the official Python SDK (issue 15, item 2; rules PRT-1..3):
`enable_partitioning` spreads messages over 16 partitions by session id, partition key or
(with duplicate detection) message id; sequence numbers carry the partition in their top 16
bits and count per partition from 1; order holds per partition; peek, receive by sequence
number, schedule/cancel and duplicate detection work across partitions; the admin API
reports and creates partitioned entities. Both auth modes (the harness adds the key)."""

from __future__ import annotations

import datetime
from typing import Iterator, List

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.management import ServiceBusAdministrationClient

from conftest import Broker, _start, _stop

pytestmark = pytest.mark.timeout(90)

PARTITIONS = 16
LOW_BITS = (1 << 48) - 1

CONFIG = """
[[queues]]
name = "partitioned"
enable_partitioning = true

[[queues]]
name = "partitioned-dups"
enable_partitioning = true
requires_duplicate_detection = true

[[queues]]
name = "partitioned-sessions"
enable_partitioning = true
requires_session = true

[[topics]]
name = "partitioned-topic"
enable_partitioning = true
[[topics.subscriptions]]
name = "all"
[[topics.subscriptions]]
name = "also"
"""


def partition_of(key: str) -> int:
    """The broker's partition function (FNV-1a of the UTF-8 bytes, modulo 16)."""
    value = 0x811C9DC5
    for byte in key.encode():
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value % PARTITIONS


def two_keys_in_different_partitions() -> List[str]:
    first = "key-a"
    second = next(f"key-{index}" for index in range(100) if partition_of(f"key-{index}") != partition_of(first))
    return [first, second]


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return tmp_path_factory.mktemp("ferrobus-partitions")


@pytest.fixture(scope="module")
def broker(directory) -> Iterator[Broker]:
    started = _start(CONFIG, directory, directory / "data")
    yield started
    _stop(started)


def client(broker: Broker) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0)


def test_partition_keys_choose_partitions_and_numbers_count_per_partition(broker):
    """rules PRT-1, PRT-2"""
    keys = two_keys_in_different_partitions()
    with client(broker) as sb:
        with sb.get_queue_sender("partitioned") as sender:
            for index in range(3):
                for key in keys:
                    sender.send_messages(ServiceBusMessage(f"{key}/{index}", partition_key=key))
        with sb.get_queue_receiver("partitioned", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            received = []
            while len(received) < 6:
                batch = receiver.receive_messages(max_message_count=10, max_wait_time=5)
                assert batch, f"only {len(received)} of 6 arrived"
                received.extend(batch)
    by_key = {key: [] for key in keys}
    for message in received:
        assert message.partition_key in by_key
        by_key[message.partition_key].append(message)
    for key, messages in by_key.items():
        # Order holds per partition; the numbers are the partition's, gapless from 1.
        assert [str(message) for message in messages] == [f"{key}/{index}" for index in range(3)]
        assert {message.sequence_number >> 48 for message in messages} == {partition_of(key)}
        assert [message.sequence_number & LOW_BITS for message in messages] == [1, 2, 3]


def test_peek_receive_by_number_and_schedule_work_across_partitions(broker):
    """rules PRT-1, LCK-4, SCH-1..4"""
    keys = two_keys_in_different_partitions()
    with client(broker) as sb:
        with sb.get_queue_sender("partitioned") as sender:
            for key in keys:
                sender.send_messages(ServiceBusMessage(f"deferred {key}", partition_key=key))
            later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
            scheduled = sender.schedule_messages(
                [ServiceBusMessage(f"scheduled {key}", partition_key=key) for key in keys], later
            )
            assert {number >> 48 for number in scheduled} == {partition_of(key) for key in keys}
        with sb.get_queue_receiver("partitioned") as receiver:
            peeked = receiver.peek_messages(max_message_count=10)
            assert sorted(str(message) for message in peeked) == sorted(
                [f"deferred {key}" for key in keys] + [f"scheduled {key}" for key in keys]
            )
            received = []
            while len(received) < 2:
                batch = receiver.receive_messages(max_message_count=2, max_wait_time=5)
                assert batch
                received.extend(batch)
            numbers = []
            for message in received:
                numbers.append(message.sequence_number)
                receiver.defer_message(message)
            deferred = receiver.receive_deferred_messages(numbers)
            assert sorted(message.sequence_number for message in deferred) == sorted(numbers)
            for message in deferred:
                receiver.complete_message(message)
        with sb.get_queue_sender("partitioned") as sender:
            sender.cancel_scheduled_messages(scheduled)
        with sb.get_queue_receiver("partitioned") as receiver:
            assert receiver.peek_messages(max_message_count=10) == []


def test_duplicate_detection_works_across_partitions(broker):
    """rules PRT-2 and duplicate detection: the message id chooses the partition"""
    with client(broker) as sb:
        with sb.get_queue_sender("partitioned-dups") as sender:
            for _ in range(3):
                sender.send_messages(ServiceBusMessage("once", message_id="order-17"))
            sender.send_messages(ServiceBusMessage("other", message_id="order-18"))
        with sb.get_queue_receiver(
            "partitioned-dups", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver:
            received = receiver.receive_messages(max_message_count=10, max_wait_time=5)
            received += receiver.receive_messages(max_message_count=10, max_wait_time=1)
    assert sorted(str(message) for message in received) == ["once", "other"]
    for message in received:
        assert message.sequence_number >> 48 == partition_of(message.message_id)


def test_sessions_of_a_partitioned_queue_keep_their_order(broker):
    """rules PRT-2, SES-1: a session's messages share its partition"""
    with client(broker) as sb:
        with sb.get_queue_sender("partitioned-sessions") as sender:
            for index in range(4):
                for session in ("s-1", "s-2"):
                    sender.send_messages(ServiceBusMessage(f"{session}/{index}", session_id=session))
        for session in ("s-1", "s-2"):
            with sb.get_queue_receiver("partitioned-sessions", session_id=session) as receiver:
                received = []
                while len(received) < 4:
                    batch = receiver.receive_messages(max_message_count=4, max_wait_time=5)
                    assert batch
                    received.extend(batch)
                    for message in batch:
                        receiver.complete_message(message)
                assert [str(message) for message in received] == [f"{session}/{index}" for index in range(4)]
                assert {message.sequence_number >> 48 for message in received} == {partition_of(session)}


def test_a_partitioned_topic_gives_every_subscription_the_same_numbers(broker):
    """rules PRT-1, SEQ-1 (topics)"""
    keys = two_keys_in_different_partitions()
    with client(broker) as sb:
        with sb.get_topic_sender("partitioned-topic") as sender:
            for key in keys:
                sender.send_messages(ServiceBusMessage(key, partition_key=key))
        seen = {}
        for subscription in ("all", "also"):
            with sb.get_subscription_receiver(
                "partitioned-topic", subscription, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
            ) as receiver:
                received = []
                while len(received) < 2:
                    batch = receiver.receive_messages(max_message_count=2, max_wait_time=5)
                    assert batch
                    received.extend(batch)
                seen[subscription] = sorted((str(message), message.sequence_number) for message in received)
    assert seen["all"] == seen["also"]
    assert {number >> 48 for _, number in seen["all"]} == {partition_of(key) for key in keys}


def test_the_admin_api_reports_and_creates_partitioned_entities(broker, directory):
    """rule PRT-1: EnablePartitioning is kept and fixed at creation"""
    # The admin API's development certificate, in the broker's data directory.
    ca = str(directory / "data" / "dev-ca.pem")
    with ServiceBusAdministrationClient.from_connection_string(
        broker.connection_string, connection_verify=ca
    ) as admin:
        assert admin.get_queue("partitioned").enable_partitioning is True
        assert admin.get_topic("partitioned-topic").enable_partitioning is True
        admin.create_queue("made-partitioned", enable_partitioning=True)
        made = admin.get_queue("made-partitioned")
        assert made.enable_partitioning is True
        made.max_delivery_count = 7
        admin.update_queue(made)
        assert admin.get_queue("made-partitioned").enable_partitioning is True
    with client(broker) as sb:
        with sb.get_queue_sender("made-partitioned") as sender:
            sender.send_messages(ServiceBusMessage("x", partition_key="key-a"))
        with sb.get_queue_receiver("made-partitioned") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert message.sequence_number >> 48 == partition_of("key-a")
            receiver.complete_message(message)


def test_a_partition_key_that_differs_from_the_session_id_is_refused(broker):
    """rule PRT-3 (the Python SDK refuses this itself, so a generic AMQP client sends it)"""
    from proton import Delivery, Message, symbol
    from proton.utils import BlockingConnection, SendException

    from conftest import KEYS_MODE, SAS_KEY_NAME, SAS_KEY_VALUE

    options = (
        {"allowed_mechs": "PLAIN", "allow_insecure_mechs": True, "user": SAS_KEY_NAME, "password": SAS_KEY_VALUE}
        if KEYS_MODE
        else {"allowed_mechs": "ANONYMOUS"}
    )
    connection = BlockingConnection(broker.amqp_url, timeout=10, **options)
    try:
        sender = connection.create_sender("partitioned-sessions")
        mismatch = Message(body="x", group_id="s-9", annotations={symbol("x-opt-partition-key"): "s-10"})
        with pytest.raises(SendException) as refused:
            sender.send(mismatch)
        assert refused.value.state == Delivery.REJECTED
        sender.send(Message(body="y", group_id="s-9", annotations={symbol("x-opt-partition-key"): "s-9"}))
    finally:
        connection.close()
