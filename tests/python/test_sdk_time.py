"""Time semantics through the unmodified public ``azure.servicebus`` 7.15.0 API: time to live,
expiry, scheduled messages, duplicate detection, auto-delete on idle, deferral.

A module-scoped broker serves every queue below; each test owns its queue(s), so tests are
independent of order. The auto-delete-on-idle test starts its own broker, because its idle
clock runs from broker start-up. Rule IDs refer to /work/shared/SEMANTICS.md.

Durations are short and configured (1–3 s). ``time.sleep`` is used only where the passage of
time is the behaviour under test (expiry, a window closing, idleness); everything else waits
deterministically with ``max_wait_time``. Note that the SDK's ``time_to_live`` setter keeps
whole seconds only (``int(total_seconds()) * 1000``), so message TTLs here are whole seconds.
Opening an SDK handler costs ~0.45 s and closing one ~0.55 s (SDK-side polling and thread
joins), so tests whose TTL is 1 s open their receiver before they send.
"""

from __future__ import annotations

import datetime
import time
from typing import Iterator, List

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessagingEntityNotFoundError

from conftest import QUEUE_DEFAULTS, Broker, _start, _stop, unique_id

pytestmark = pytest.mark.timeout(30)

# How long a test waits to conclude that nothing (more) will be delivered.
ABSENCE_WAIT_SECONDS = 1.0
RECEIVE_TIMEOUT_SECONDS = 10.0
# Tolerance for comparing broker-stamped wall-clock times with the test's clock.
CLOCK_TOLERANCE = datetime.timedelta(seconds=1)
# Scheduled messages are due this long after the schedule call: the first management call of a
# handler costs the SDK up to ~1 s (it attaches $management lazily and polls in 50 ms sleeps).
SCHEDULE_DELAY = datetime.timedelta(seconds=3)
# Rounding tolerance for enqueued time + TTL (the wire carries milliseconds).
MILLISECOND = datetime.timedelta(milliseconds=1)

# name -> overrides of conftest.QUEUE_DEFAULTS; one queue (or a few) per test.
TIME_QUEUES = {
    "time-ttl-stamp": {},
    "time-default-ttl": {"default_message_time_to_live": "2s"},
    "time-expire-dead-letter": {"dead_lettering_on_message_expiration": True},
    "time-expire-drop": {},
    "time-expire-while-locked": {"lock_duration": "5s", "dead_lettering_on_message_expiration": True},
    "time-deferred-expiry": {"dead_lettering_on_message_expiration": True},
    "time-dead-letter-no-expiry": {},
    "time-schedule-operation": {},
    "time-schedule-on-send": {},
    "time-schedule-cancel": {},
    "time-duplicates": {
        "requires_duplicate_detection": True,
        "duplicate_detection_history_time_window": "3s",
    },
    "time-defer-peek": {},
}


@pytest.fixture(scope="module")
def time_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    config = "".join(queue_toml(name, **overrides) for name, overrides in TIME_QUEUES.items())
    started = _start(config, tmp_path_factory.mktemp("ferrobus-time"))
    yield started
    _stop(started)


def toml_value(value: object) -> str:
    """A TOML literal (conftest.queue_toml would write Python's ``True``, which TOML rejects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def queue_toml(name: str, **overrides: object) -> str:
    settings = {**QUEUE_DEFAULTS, **overrides}
    lines = ["[[queues]]", f'name = "{name}"'] + [f"{key} = {toml_value(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def client_for(broker: Broker, **kwargs) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(broker.connection_string, **kwargs)


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


def assert_nothing_to_peek(receiver) -> None:
    """No message at all (active, deferred or scheduled): peek answers at once, so this is the
    deterministic absence check once the broker has had its chance to act."""
    unexpected = receiver.peek_messages(max_message_count=10, sequence_number=1)
    assert unexpected == [], f"expected no message, peeked {[(m.message_id, m.sequence_number) for m in unexpected]}"


def body_of(message: ServiceBusReceivedMessage) -> bytes:
    return b"".join(message.body)


# --------------------------------------------------------------------------------------------
# Time to live


def test_expires_at_is_enqueued_time_plus_message_ttl(time_broker):
    """rule TTL-1: expires-at = enqueued time + the message's TTL; the TTL comes back as sent."""
    queue = "time-ttl-stamp"
    ttl = datetime.timedelta(seconds=90)
    with client_for(time_broker) as client:
        before_send = utc_now()
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"ttl", time_to_live=ttl))
        after_send = utc_now()
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [received] = receive_exactly(receiver, 1)
    assert received.time_to_live == ttl
    assert received.enqueued_time_utc is not None and received.expires_at_utc is not None
    assert abs(received.expires_at_utc - (received.enqueued_time_utc + ttl)) <= MILLISECOND
    assert before_send - CLOCK_TOLERANCE <= received.enqueued_time_utc <= after_send + CLOCK_TOLERANCE
    assert before_send + ttl - CLOCK_TOLERANCE <= received.expires_at_utc <= after_send + ttl + CLOCK_TOLERANCE


def test_entity_default_ttl_applies_and_caps_message_ttl(time_broker):
    """rule TTL-2: a message without TTL gets the queue default (2 s); a longer message TTL
    (1 h) is silently lowered to it."""
    queue = "time-default-ttl"
    default_ttl = datetime.timedelta(seconds=2)
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"no-ttl", message_id="no-ttl"))
            sender.send_messages(ServiceBusMessage(b"long-ttl", message_id="long-ttl", time_to_live=datetime.timedelta(hours=1)))
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            received = {message.message_id: message for message in receive_exactly(receiver, 2)}
    assert received["no-ttl"].time_to_live == default_ttl
    assert received["long-ttl"].time_to_live == default_ttl
    for message in received.values():
        assert abs(message.expires_at_utc - (message.enqueued_time_utc + default_ttl)) <= MILLISECOND


def test_expired_message_is_dead_lettered_by_timer_without_receiver(time_broker):
    """rules TTL-4, TTL-6: with dead-lettering on expiration, a message whose TTL (1 s) passed
    while no receiver was attached is in the DLQ with reason TTLExpiredException (the broker
    expires it on a timer, not lazily on the next receive); the queue delivers nothing.
    The DLQ is read first, before anything touches the queue itself."""
    queue = "time-expire-dead-letter"
    message_id = unique_id("expire-dlq")
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"short-lived", message_id=message_id, time_to_live=datetime.timedelta(seconds=1)))
        time.sleep(1.5)  # the behaviour under test: the TTL passes with no receiver attached
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            [dead] = receive_exactly(dead_letters, 1, timeout=3)
            assert dead.message_id == message_id
            assert dead.dead_letter_reason == "TTLExpiredException"
            assert body_of(dead) == b"short-lived"
            dead_letters.complete_message(dead)
        with client.get_queue_receiver(queue) as receiver:
            assert_nothing_to_receive(receiver)


def test_expired_message_without_dead_lettering_is_dropped(time_broker):
    """rules TTL-4, TTL-6: without dead-lettering on expiration an expired message is dropped:
    neither the queue nor its DLQ delivers it."""
    queue = "time-expire-drop"
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"dropped", time_to_live=datetime.timedelta(seconds=1)))
        time.sleep(1.5)  # the behaviour under test: the TTL passes
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            assert_nothing_to_peek(dead_letters)
        with client.get_queue_receiver(queue) as receiver:
            assert_nothing_to_receive(receiver)


def test_locked_message_can_be_completed_after_its_ttl(time_broker):
    """rule TTL-5: expiry does not affect a locked message: with a 5 s lock and a 1 s TTL, the
    message is completed 1.5 s after delivery, and nothing is left in the queue or the DLQ."""
    queue = "time-expire-while-locked"
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
            sender.send_messages(ServiceBusMessage(b"locked", time_to_live=datetime.timedelta(seconds=1)))
            [locked] = receive_exactly(receiver, 1, timeout=0.9)
            time.sleep(1.5)  # the behaviour under test: the TTL passes while the lock is held
            receiver.complete_message(locked)  # raises MessageLockLostError if the broker expired it
            assert_nothing_to_peek(receiver)
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            assert_nothing_to_peek(dead_letters)


def test_deferred_message_survives_its_ttl(time_broker):
    """rule TTL-7: a deferred message is not purged or dead-lettered when its TTL (1 s) passes;
    2 s later receive_deferred_messages still returns it."""
    queue = "time-deferred-expiry"
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
            sender.send_messages(ServiceBusMessage(b"deferred", time_to_live=datetime.timedelta(seconds=1)))
            [message] = receive_exactly(receiver, 1, timeout=0.9)
            sequence_number = message.sequence_number
            receiver.defer_message(message)
            time.sleep(2)  # the behaviour under test: the TTL passes while deferred
            deferred = receiver.receive_deferred_messages([sequence_number])
            assert [m.sequence_number for m in deferred] == [sequence_number]
            assert body_of(deferred[0]) == b"deferred"
            receiver.complete_message(deferred[0])
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            assert_nothing_to_peek(dead_letters)


def test_dead_lettered_message_does_not_expire(time_broker):
    """rule TTL-8: a message in the DLQ stays there after its TTL (1 s) passed."""
    queue = "time-dead-letter-no-expiry"
    message_id = unique_id("dlq-keep")
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
            sender.send_messages(ServiceBusMessage(b"kept", message_id=message_id, time_to_live=datetime.timedelta(seconds=1)))
            [message] = receive_exactly(receiver, 1, timeout=0.9)
            receiver.dead_letter_message(message, reason="application-reason", error_description="kept")
        time.sleep(2)  # the behaviour under test: the TTL passes while dead-lettered
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            [dead] = receive_exactly(dead_letters, 1, timeout=3)
            assert dead.message_id == message_id
            assert dead.dead_letter_reason == "application-reason"
            dead_letters.complete_message(dead)


# --------------------------------------------------------------------------------------------
# Scheduled messages


def test_schedule_operation_delivers_at_time_with_new_sequence_number(time_broker):
    """rules SCH-1, SCH-2, SCH-3, TTL-10: schedule_messages returns a sequence number; before
    its time the message is not receivable but peek shows it as SCHEDULED under that number;
    at its time it arrives with scheduled_enqueue_time_utc set and a new, larger sequence
    number. Its TTL (1 s) counts from activation (+2 s), so it has not expired on arrival."""
    queue = "time-schedule-operation"
    message_id = unique_id("scheduled")
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
            schedule_time = utc_now() + SCHEDULE_DELAY
            scheduling_numbers = sender.schedule_messages(
                ServiceBusMessage(b"later", message_id=message_id, time_to_live=datetime.timedelta(seconds=1)),
                schedule_time,
            )
            assert len(scheduling_numbers) == 1 and isinstance(scheduling_numbers[0], int)
            [scheduling_number] = scheduling_numbers
            assert_nothing_to_receive(receiver, wait=1)
            assert utc_now() < schedule_time, "the absence check ran past the scheduled time"
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert [(m.message_id, m.sequence_number, m.state) for m in peeked] == [
                (message_id, scheduling_number, ServiceBusMessageState.SCHEDULED)
            ]
            [arrived] = receive_exactly(receiver, 1, timeout=5)
            arrival = utc_now()
            receiver.complete_message(arrived)
    assert arrived.message_id == message_id
    assert arrived.sequence_number > scheduling_number
    assert arrived.scheduled_enqueue_time_utc is not None
    assert abs(arrived.scheduled_enqueue_time_utc - schedule_time) <= CLOCK_TOLERANCE
    assert arrival >= schedule_time - datetime.timedelta(milliseconds=100)
    # TTL-10: the message materialised at its scheduled time, so that is its enqueued time.
    assert abs(arrived.enqueued_time_utc - schedule_time) <= CLOCK_TOLERANCE
    assert arrived.state == ServiceBusMessageState.ACTIVE


def test_scheduled_enqueue_time_on_plain_send_behaves_like_schedule(time_broker):
    """rules SCH-1, SCH-2, SCH-3: ServiceBusMessage(scheduled_enqueue_time_utc=…) on a plain
    send: not receivable before its time, peekable as SCHEDULED, then delivered with a new,
    larger sequence number."""
    queue = "time-schedule-on-send"
    message_id = unique_id("scheduled-send")
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
            schedule_time = utc_now() + SCHEDULE_DELAY
            sender.send_messages(ServiceBusMessage(b"later", message_id=message_id, scheduled_enqueue_time_utc=schedule_time))
            assert_nothing_to_receive(receiver, wait=1)
            assert utc_now() < schedule_time, "the absence check ran past the scheduled time"
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert [(m.message_id, m.state) for m in peeked] == [(message_id, ServiceBusMessageState.SCHEDULED)]
            scheduling_number = peeked[0].sequence_number
            [arrived] = receive_exactly(receiver, 1, timeout=5)
            arrival = utc_now()
            receiver.complete_message(arrived)
    assert arrived.message_id == message_id
    assert arrived.sequence_number > scheduling_number
    assert arrived.scheduled_enqueue_time_utc is not None
    assert abs(arrived.scheduled_enqueue_time_utc - schedule_time) <= CLOCK_TOLERANCE
    assert arrival >= schedule_time - datetime.timedelta(milliseconds=100)


def test_cancelled_scheduled_message_is_never_delivered(time_broker):
    """rule SCH-4: cancel_scheduled_messages deletes the scheduled message: peek no longer
    shows it and nothing arrives after its time."""
    queue = "time-schedule-cancel"
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
            schedule_time = utc_now() + datetime.timedelta(seconds=2)
            [sequence_number] = sender.schedule_messages(ServiceBusMessage(b"cancelled"), schedule_time)
            assert receiver.peek_messages(max_message_count=10, sequence_number=1) != [], "nothing was scheduled"
            sender.cancel_scheduled_messages(sequence_number)
            assert_nothing_to_peek(receiver)
            # Wait past the scheduled time with a margin: nothing may arrive.
            remaining = (schedule_time - utc_now()).total_seconds()
            assert_nothing_to_receive(receiver, wait=max(remaining, 0) + 1)
            assert utc_now() > schedule_time


# --------------------------------------------------------------------------------------------
# Duplicate detection


def test_duplicate_message_id_is_dropped_within_window_and_accepted_after(time_broker):
    """Duplicate detection (requires_duplicate_detection, 3 s window): a second send with the
    same message_id is accepted by the sender but not enqueued; once the window has passed,
    the same id is enqueued again."""
    queue = "time-duplicates"
    message_id = unique_id("duplicate")
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
            sender.send_messages(ServiceBusMessage(b"first", message_id=message_id))
            sender.send_messages(ServiceBusMessage(b"second", message_id=message_id))
            [first] = receive_exactly(receiver, 1)
            assert body_of(first) == b"first"
            receiver.complete_message(first)
            assert_nothing_to_peek(receiver)  # sends are acknowledged after enqueue: no 2nd copy
            time.sleep(3.5)  # the behaviour under test: the detection window passes
            sender.send_messages(ServiceBusMessage(b"third", message_id=message_id))
            [third] = receive_exactly(receiver, 1)
            assert body_of(third) == b"third"
            assert third.message_id == message_id
            receiver.complete_message(third)


# --------------------------------------------------------------------------------------------
# Auto-delete on idle (own broker: the idle clock starts when the broker starts)


def test_idle_queue_is_deleted_and_busy_queue_is_kept(start_broker):
    """rules IDL-1, IDL-2: a queue with auto_delete_on_idle = 1 s works right after start-up,
    then, after more than 3 s without activity, sending to it raises
    MessagingEntityNotFoundError.
    A queue with auto_delete_on_idle = 2 s that receives a send every 0.5 s for 3 s stays."""
    idle_queue, busy_queue = "idle-soon", "idle-busy"
    broker = start_broker(
        queue_toml(idle_queue, auto_delete_on_idle="1s") + queue_toml(busy_queue, auto_delete_on_idle="2s")
    )
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        # Opening an SDK handler takes ~0.45 s and closing one ~0.55 s (SDK-side polling), so
        # the handlers are opened up front and the busy queue is drained before anything closes.
        with client.get_queue_sender(idle_queue) as early_sender:
            early_sender.send_messages(ServiceBusMessage(b"early"))  # about 0.5 s after start-up
            with client.get_queue_sender(busy_queue) as sender:
                busy_sends = 0
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:  # the behaviour under test: time passes
                    sender.send_messages(ServiceBusMessage(f"busy-{busy_sends}".encode()))
                    busy_sends += 1
                    time.sleep(0.5)
                with client.get_queue_receiver(busy_queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
                    received = receive_exactly(receiver, busy_sends)
        with pytest.raises(MessagingEntityNotFoundError):
            with client.get_queue_sender(idle_queue) as sender:
                sender.send_messages(ServiceBusMessage(b"too late"))
    assert [body_of(message) for message in received] == [f"busy-{index}".encode() for index in range(busy_sends)]


# --------------------------------------------------------------------------------------------
# Deferral


def test_peek_shows_deferred_message_and_it_is_received_by_sequence_number(time_broker):
    """rule LCK-4: a deferred message is not delivered to receivers; peek shows it with state
    DEFERRED; receive_deferred_messages returns it and complete_message removes it."""
    queue = "time-defer-peek"
    message_id = unique_id("deferred")
    with client_for(time_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"set aside", message_id=message_id))
        with client.get_queue_receiver(queue) as receiver:
            [message] = receive_exactly(receiver, 1)
            sequence_number = message.sequence_number
            receiver.defer_message(message)
            assert_nothing_to_receive(receiver)
            # sequence_number=1: by default the SDK peeks from its last received number + 1.
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert [(m.message_id, m.sequence_number, m.state) for m in peeked] == [
                (message_id, sequence_number, ServiceBusMessageState.DEFERRED)
            ]
            [deferred] = receiver.receive_deferred_messages([sequence_number])
            assert deferred.message_id == message_id
            assert deferred.state == ServiceBusMessageState.DEFERRED
            receiver.complete_message(deferred)
            assert_nothing_to_peek(receiver)
