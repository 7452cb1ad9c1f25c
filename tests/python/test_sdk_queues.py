"""Queue behaviour through the unmodified public ``azure.servicebus`` 7.15.0 API.

Every test owns the queue named in it (configured in conftest.SHARED_QUEUES), so tests are
independent of order. Rule IDs refer to /work/shared/SEMANTICS.md. Exception classes were taken
from the SDK source: ``azure/servicebus/_transport/_pyamqp_transport.py``
(``_ERROR_CODE_TO_ERROR_MAPPING`` and ``_handle_amqp_exception_with_condition``),
``azure/servicebus/_pyamqp/cbs.py`` (CBS failure -> ``TokenAuthFailure``) and
``azure/servicebus/_servicebus_receiver.py`` (``_settle_message_with_retry``).
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import List

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
)

from conftest import SAS_KEY_NAME, SAS_KEY_VALUE, auth_key_toml, queue_toml, requires_no_keys, unique_id

pytestmark = pytest.mark.timeout(60)

# How long a test waits to conclude that nothing (more) will be delivered.
ABSENCE_WAIT_SECONDS = 1.5
RECEIVE_TIMEOUT_SECONDS = 10.0


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def client_for(connection_string: str, **kwargs) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(connection_string, **kwargs)


def no_retry_client(connection_string: str) -> ServiceBusClient:
    """A client that surfaces the first error instead of retrying (error-case tests)."""
    return ServiceBusClient.from_connection_string(connection_string, retry_total=0)


def body_of(message: ServiceBusReceivedMessage) -> bytes:
    return b"".join(message.body)


def receive_exactly(receiver, count: int, timeout: float = RECEIVE_TIMEOUT_SECONDS) -> List[ServiceBusReceivedMessage]:
    """Receive until `count` messages arrived; fail if they don't within `timeout`."""
    received: List[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(received) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        received.extend(receiver.receive_messages(max_message_count=count - len(received), max_wait_time=remaining))
    assert len(received) == count, f"expected {count} messages, received {len(received)} within {timeout} s"
    return received


def assert_nothing_to_receive(receiver, wait: float = ABSENCE_WAIT_SECONDS) -> None:
    unexpected = receiver.receive_messages(max_message_count=10, max_wait_time=wait)
    assert unexpected == [], f"expected no message, got {[(m.message_id, m.sequence_number) for m in unexpected]}"


# --------------------------------------------------------------------------------------------
# Sending


def test_sent_single_message_is_received_with_its_body(broker):
    """rule LCK-1 (peek-lock delivery of a single transfer)."""
    queue = "sdk-send-single"
    message_id = unique_id("single")
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"hello ferrobus", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            assert body_of(received) == b"hello ferrobus"
            assert received.message_id == message_id
            receiver.complete_message(received)


def test_list_send_enqueues_each_message_separately_in_order(broker):
    """A list goes out as one batch transfer (format 0x80013700); each inner message is enqueued
    with its own consecutive sequence number (rule SEQ-1, SEQ-2)."""
    queue = "sdk-send-list"
    bodies = [f"list-{index}".encode() for index in range(5)]
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(body) for body in bodies])
        with client.get_queue_receiver(queue) as receiver:
            received = receive_exactly(receiver, len(bodies))
            assert [body_of(message) for message in received] == bodies
            sequence_numbers = [message.sequence_number for message in received]
            assert sequence_numbers == list(range(sequence_numbers[0], sequence_numbers[0] + len(bodies)))
            assert len({message.message_id for message in received}) == len(bodies)
            for message in received:
                receiver.complete_message(message)
            assert_nothing_to_receive(receiver)


def test_message_batch_send_enqueues_every_message_of_the_batch(broker):
    """create_message_batch -> one batch transfer; every message arrives once (rule SEQ-1)."""
    queue = "sdk-send-batch"
    message_ids = [unique_id("batch") for _ in range(10)]
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            batch = sender.create_message_batch()
            for index, message_id in enumerate(message_ids):
                batch.add_message(ServiceBusMessage(f"batch-{index}", message_id=message_id))
            sender.send_messages(batch)
        with client.get_queue_receiver(queue) as receiver:
            received = receive_exactly(receiver, len(message_ids))
            assert [message.message_id for message in received] == message_ids
            assert [body_of(message) for message in received] == [f"batch-{i}".encode() for i in range(10)]
            for message in received:
                receiver.complete_message(message)
            assert_nothing_to_receive(receiver)


# --------------------------------------------------------------------------------------------
# Settlement


def test_completed_message_is_not_delivered_again(broker):
    """rule LCK-1: peek-lock delivers a locked message; complete removes it."""
    queue = "sdk-peek-lock-complete"
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"complete me"))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            assert received.lock_token is not None
            receiver.complete_message(received)
        with client.get_queue_receiver(queue) as second_receiver:
            assert_nothing_to_receive(second_receiver)


def test_receive_and_delete_removes_message_on_delivery(broker):
    """rule LCK-5: the message is gone once delivered, without any settlement."""
    queue = "sdk-receive-and-delete"
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"delete on delivery"))
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [received] = receive_exactly(receiver, 1)
            assert body_of(received) == b"delete on delivery"
            assert received.lock_token is None
        with client.get_queue_receiver(queue) as peek_lock_receiver:
            assert_nothing_to_receive(peek_lock_receiver)


def test_abandoned_message_is_redelivered_with_delivery_count_incremented(broker):
    """rule LCK-1 (abandon unlocks), rule LCK-2 (abandon increments the delivery count)."""
    queue = "sdk-abandon"
    message_id = unique_id("abandon")
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"abandon me", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            [first] = receive_exactly(receiver, 1)
            assert first.delivery_count == 0
            receiver.abandon_message(first)
            [second] = receive_exactly(receiver, 1)
            assert second.message_id == message_id
            assert second.sequence_number == first.sequence_number
            assert second.delivery_count == first.delivery_count + 1
            receiver.complete_message(second)
            assert_nothing_to_receive(receiver)


def test_dead_lettered_message_moves_to_dlq_with_reason_and_description(broker):
    """rule DLQ-4 (application dead-lettering records reason and description), rule DLQ-2."""
    queue = "sdk-dead-letter"
    message_id = unique_id("dead-letter")
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"poison", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            receiver.dead_letter_message(received, reason="bad-format", error_description="field x missing")
            assert_nothing_to_receive(receiver)
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq_receiver:
            [dead] = receive_exactly(dlq_receiver, 1)
            assert dead.message_id == message_id
            assert body_of(dead) == b"poison"
            assert dead.dead_letter_reason == "bad-format"
            assert dead.dead_letter_error_description == "field x missing"
            dlq_receiver.complete_message(dead)
            assert_nothing_to_receive(dlq_receiver)


def test_message_abandoned_up_to_max_delivery_count_is_dead_lettered(broker):
    """rule LCK-2: reaching max_delivery_count (3 here) dead-letters with MaxDeliveryCountExceeded
    (rule DLQ-3)."""
    queue = "sdk-max-delivery"
    max_delivery_count = 3
    message_id = unique_id("max-delivery")
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"keeps failing", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            for attempt in range(max_delivery_count):
                [received] = receive_exactly(receiver, 1)
                assert received.message_id == message_id
                assert received.delivery_count == attempt
                receiver.abandon_message(received)
            assert_nothing_to_receive(receiver)
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq_receiver:
            [dead] = receive_exactly(dlq_receiver, 1)
            assert dead.message_id == message_id
            assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
            dlq_receiver.complete_message(dead)


def test_expired_lock_redelivers_message_and_the_old_lock_is_lost(broker):
    """rule LCK-2 (lock expiry increments the delivery count), rule LCK-3 (settling with an
    expired lock fails with MessageLockLostError).

    The SDK itself refuses to settle a message whose locked_until_utc has passed, so the
    MessageLockLostError here is raised client-side; the broker-side check is the next test.
    Sleeping is the behaviour under test: the wait is the configured 2 s lock duration.
    """
    queue = "sdk-lock-expiry"
    message_id = unique_id("lock-expiry")
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"slow consumer", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            [first] = receive_exactly(receiver, 1)
            assert first.delivery_count == 0
            assert first.locked_until_utc is not None
            seconds_left = (first.locked_until_utc - utc_now()).total_seconds()
            assert 0 < seconds_left <= 3, f"lock_duration is 2 s, but locked_until is {seconds_left:.2f} s away"
            time.sleep(seconds_left + 0.3)

            [second] = receive_exactly(receiver, 1)
            assert second.message_id == message_id
            assert second.sequence_number == first.sequence_number
            assert second.delivery_count == 1
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(first)
            receiver.complete_message(second)
            assert_nothing_to_receive(receiver)


def test_broker_refuses_settlement_with_an_expired_lock(broker):
    """rule LCK-3, checked at the broker: the SDK is made to send `accepted` for a delivery whose
    lock has expired (its client-side expiry check is bypassed by moving the cached
    locked-until forward). The broker must answer `rejected` with
    com.microsoft:message-lock-lost -> MessageLockLostError, and keep the message."""
    queue = "sdk-lock-lost-broker"
    message_id = unique_id("lock-lost")
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"late completion", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            [stale] = receive_exactly(receiver, 1)
            assert stale.locked_until_utc is not None
            time.sleep(max(0.0, (stale.locked_until_utc - utc_now()).total_seconds()) + 0.5)
            stale._expiry = utc_now() + datetime.timedelta(minutes=5)  # pylint: disable=protected-access
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(stale)
            [again] = receive_exactly(receiver, 1)
            assert again.message_id == message_id
            assert again.delivery_count == 1
            receiver.complete_message(again)


def test_deferred_message_is_not_delivered_by_a_normal_receive(broker):
    """rule LCK-4: defer sets the message aside."""
    queue = "sdk-defer"
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"later"))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            receiver.defer_message(received)
            assert_nothing_to_receive(receiver)
        with client.get_queue_receiver(queue) as other_receiver:
            assert_nothing_to_receive(other_receiver)


def test_deferred_message_is_retrievable_by_its_sequence_number(broker):
    """rule LCK-4: a deferred message is only retrievable by its sequence number
    ($management receive-by-sequence-number), and can then be completed."""
    queue = "sdk-defer-by-sequence"
    message_id = unique_id("deferred")
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"set aside", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            receiver.defer_message(received)
            [deferred] = receiver.receive_deferred_messages([received.sequence_number])
            assert deferred.message_id == message_id
            assert deferred.sequence_number == received.sequence_number
            assert body_of(deferred) == b"set aside"
            assert deferred.state == ServiceBusMessageState.DEFERRED
            assert deferred.lock_token is not None
            receiver.complete_message(deferred)
            try:
                leftovers = receiver.receive_deferred_messages([received.sequence_number])
            except MessageNotFoundError:
                leftovers = []
            assert leftovers == [], "a completed deferred message must be gone"
            assert_nothing_to_receive(receiver)


# --------------------------------------------------------------------------------------------
# Broker-stamped metadata


def test_sequence_numbers_start_at_one_and_increase_by_one_per_message(broker):
    """rule SEQ-1 (start at 1, no gaps), rule SEQ-2 (arrival order), across single and batch sends."""
    queue = "sdk-sequence"
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"1"))
            sender.send_messages(ServiceBusMessage(b"2"))
            sender.send_messages([ServiceBusMessage(b"3"), ServiceBusMessage(b"4"), ServiceBusMessage(b"5")])
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            received = receive_exactly(receiver, 5)
            assert [message.sequence_number for message in received] == [1, 2, 3, 4, 5]
            assert [body_of(message) for message in received] == [b"1", b"2", b"3", b"4", b"5"]


def test_enqueued_time_is_stamped_when_the_broker_accepts_the_message(broker):
    """rule SEQ-3: enqueued_time_utc lies between just before the send and just after it."""
    queue = "sdk-enqueued-time"
    tolerance = datetime.timedelta(seconds=2)
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            before_send = utc_now()
            sender.send_messages(ServiceBusMessage(b"when"))
            after_send = utc_now()
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            enqueued = received.enqueued_time_utc
            assert enqueued is not None
            assert before_send - tolerance <= enqueued <= after_send + tolerance, (
                f"enqueued {enqueued} not within [{before_send}, {after_send}] +- {tolerance}"
            )
            receiver.complete_message(received)


def test_sender_set_properties_are_delivered_unchanged(broker):
    """All sender sections are delivered unchanged (wire contract 4.3): message_id, application
    properties, subject, correlation_id, content_type, to, reply_to and header.ttl."""
    queue = "sdk-properties"
    message_id = unique_id("props")
    time_to_live = datetime.timedelta(minutes=5)
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(
                ServiceBusMessage(
                    b'{"order": 1}',
                    message_id=message_id,
                    application_properties={"color": "blue", "count": 7, "ratio": 0.5, "urgent": True},
                    subject="order-created",
                    correlation_id="corr-42",
                    content_type="application/json",
                    time_to_live=time_to_live,
                    to="billing",
                    reply_to="replies",
                )
            )
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            assert received.message_id == message_id
            assert received.application_properties == {b"color": b"blue", b"count": 7, b"ratio": 0.5, b"urgent": True}
            assert received.subject == "order-created"
            assert received.correlation_id == "corr-42"
            assert received.content_type == "application/json"
            assert received.time_to_live == time_to_live
            assert received.to == "billing"
            assert received.reply_to == "replies"
            assert received.session_id is None
            assert body_of(received) == b'{"order": 1}'
            receiver.complete_message(received)


def test_peek_lock_message_is_locked_until_a_future_time_within_the_lock_duration(broker):
    """rule LCK-1: the lock lasts the entity's lock duration (20 s here)."""
    queue = "sdk-locked-until"
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"locked"))
        with client.get_queue_receiver(queue) as receiver:
            before_receive = utc_now()
            [received] = receive_exactly(receiver, 1)
            after_receive = utc_now()
            locked_until = received.locked_until_utc
            assert locked_until is not None
            assert before_receive + datetime.timedelta(seconds=18) <= locked_until
            assert locked_until <= after_receive + datetime.timedelta(seconds=22)
            receiver.complete_message(received)


# --------------------------------------------------------------------------------------------
# Errors


def test_dead_letter_queue_refuses_direct_sends(broker):
    """rule DLQ-2: nobody sends to a DLQ directly; the send fails and nothing is enqueued."""
    queue = "sdk-dlq-not-sendable"
    with no_retry_client(broker.connection_string) as client:
        with pytest.raises(ServiceBusError):
            with client.get_queue_sender(queue_name=f"{queue}/$DeadLetterQueue") as sender:
                sender.send_messages(ServiceBusMessage(b"sneaky"))
    with client_for(broker.connection_string) as client:
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq_receiver:
            assert_nothing_to_receive(dlq_receiver)
        with client.get_queue_receiver(queue) as receiver:
            assert_nothing_to_receive(receiver)


def test_sender_to_unknown_queue_raises_entity_not_found(broker):
    """amqp:not-found on attach -> MessagingEntityNotFoundError (wire contract 3.4)."""
    with no_retry_client(broker.connection_string) as client:
        with pytest.raises(MessagingEntityNotFoundError):
            with client.get_queue_sender("no-such-queue") as sender:
                sender.send_messages(ServiceBusMessage(b"nowhere"))


def test_receiver_from_unknown_queue_raises_entity_not_found(broker):
    """amqp:not-found on attach -> MessagingEntityNotFoundError (wire contract 3.4)."""
    with no_retry_client(broker.connection_string) as client:
        with pytest.raises(MessagingEntityNotFoundError):
            with client.get_queue_receiver("no-such-queue") as receiver:
                receiver.receive_messages(max_wait_time=2)


def test_message_over_the_size_limit_is_refused_with_message_size_exceeded(broker):
    """max_message_size_in_kilobytes = 64: a 100 KB message is refused
    (amqp:link:message-size-exceeded -> MessageSizeExceededError); a 60 KB one is accepted."""
    queue = "sdk-message-too-large"
    with no_retry_client(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(ServiceBusMessage(b"x" * (100 * 1024)))
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"y" * (60 * 1024)))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            assert body_of(received) == b"y" * (60 * 1024)
            receiver.complete_message(received)
            assert_nothing_to_receive(receiver)


def test_full_queue_refuses_sends_with_quota_exceeded(broker):
    """max_size_in_megabytes = 1: sending 20 x 60 KB (1.2 MB) fails with
    amqp:resource-limit-exceeded -> ServiceBusQuotaExceededError once about 1 MB is stored;
    completing messages frees room again."""
    queue = "sdk-queue-full"
    body = b"z" * (60 * 1024)
    accepted = 0
    with no_retry_client(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            with pytest.raises(ServiceBusQuotaExceededError):
                for _ in range(20):
                    sender.send_messages(ServiceBusMessage(body))
                    accepted += 1
    # 1 MiB / 60 KiB = 17.07; allow the broker to count per-message overhead.
    assert 14 <= accepted <= 17, f"{accepted} messages of 60 KB fitted in a 1 MB queue"
    with client_for(broker.connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            for message in receive_exactly(receiver, 2):
                receiver.complete_message(message)
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(body))


def auth_config(queue: str) -> str:
    return queue_toml(queue) + auth_key_toml(SAS_KEY_NAME, SAS_KEY_VALUE, ["Manage", "Send", "Listen"])


@pytest.mark.parametrize("role", ["sender", "receiver"])
@pytest.mark.parametrize(
    "key_name, key",
    [(SAS_KEY_NAME, "WRONG_KEY_VALUE"), ("UnknownKeyName", SAS_KEY_VALUE)],
    ids=["wrong-key", "unknown-key-name"],
)
def test_bad_sas_credentials_are_refused_with_authentication_error(start_broker, role, key_name, key):
    """CBS put-token answered with 401 -> TokenAuthFailure -> ServiceBusAuthenticationError."""
    queue = "auth-queue"
    dedicated = start_broker(auth_config(queue))
    with no_retry_client(dedicated.connection_string_with(key_name, key)) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            if role == "sender":
                with client.get_queue_sender(queue) as sender:
                    sender.send_messages(ServiceBusMessage(b"intruder"))
            else:
                with client.get_queue_receiver(queue) as receiver:
                    receiver.receive_messages(max_wait_time=2)
    with client_for(dedicated.connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            assert_nothing_to_receive(receiver)


def test_correct_sas_key_is_accepted_by_a_broker_with_auth_keys(start_broker):
    queue = "auth-queue"
    dedicated = start_broker(auth_config(queue))
    with client_for(dedicated.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"authorised"))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            assert body_of(received) == b"authorised"
            receiver.complete_message(received)


@requires_no_keys
def test_broker_without_auth_keys_accepts_any_key(broker):
    queue = "sdk-any-key"
    with client_for(broker.connection_string_with("SomeName", "any-key-at-all")) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"open door"))
        with client.get_queue_receiver(queue) as receiver:
            [received] = receive_exactly(receiver, 1)
            assert body_of(received) == b"open door"
            receiver.complete_message(received)


# --------------------------------------------------------------------------------------------
# Volume


def test_many_messages_round_trip_without_loss_or_duplicates(broker):
    """500 messages (100 single sends + 4 batches of 100) all arrive exactly once, in
    sequence-number order (rule SEQ-1, SEQ-2), and completing them empties the queue."""
    queue = "sdk-many-messages"
    total = 500
    run = uuid.uuid4().hex
    message_ids = [f"{run}-{index}" for index in range(total)]
    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            for message_id in message_ids[:100]:
                sender.send_messages(ServiceBusMessage(message_id, message_id=message_id))
            for start in range(100, total, 100):
                sender.send_messages(
                    [ServiceBusMessage(message_id, message_id=message_id) for message_id in message_ids[start:start + 100]]
                )
        received: List[ServiceBusReceivedMessage] = []
        with client.get_queue_receiver(queue) as receiver:
            deadline = time.monotonic() + 40
            while len(received) < total and time.monotonic() < deadline:
                batch = receiver.receive_messages(max_message_count=100, max_wait_time=5)
                for message in batch:
                    receiver.complete_message(message)
                received.extend(batch)
            received_ids = [message.message_id for message in received]
            duplicates = {message_id for message_id in received_ids if received_ids.count(message_id) > 1}
            assert not duplicates, f"{len(duplicates)} duplicated message ids"
            missing = set(message_ids) - set(received_ids)
            assert not missing, f"{len(missing)} of {total} messages lost"
            assert len(received) == total
            assert all(body_of(message) == message.message_id.encode() for message in received)
            sequence_numbers = [message.sequence_number for message in received]
            assert sorted(sequence_numbers) == list(range(min(sequence_numbers), min(sequence_numbers) + total))
            assert sequence_numbers == sorted(sequence_numbers), "a single consumer receives in sequence order"
            assert_nothing_to_receive(receiver)


def test_large_batches_past_the_output_high_water_mark_arrive_whole_in_sequence_order(broker):
    """300 messages of ~190 KB received in one batch (57 MB asked for at once, far past the
    broker's 4 MiB output high-water mark, where deliveries are held back and returned to
    the queue): every one arrives once, byte for byte, in sequence order (rule SEQ-4; issue
    16: deliveries made before a receiver was held back overtook the returned ones)."""
    queue = "sdk-large-backlog"
    total = 300

    def payload(index: int) -> bytes:
        return f"{index:05d}-".encode() + bytes([97 + index % 26]) * (190_000 + index)

    with client_for(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            for index in range(total):
                sender.send_messages(ServiceBusMessage(payload(index)))
        received: List[ServiceBusReceivedMessage] = []
        with client.get_queue_receiver(queue) as receiver:
            deadline = time.monotonic() + 40
            while len(received) < total and time.monotonic() < deadline:
                batch = receiver.receive_messages(max_message_count=total, max_wait_time=5)
                for message in batch:
                    receiver.complete_message(message)
                received.extend(batch)
            assert len(received) == total
            sequence_numbers = [message.sequence_number for message in received]
            assert sequence_numbers == sorted(sequence_numbers), "a single consumer receives in sequence order"
            for index, message in enumerate(received):
                assert body_of(message) == payload(index), f"message {index} differs"
            assert_nothing_to_receive(receiver)
