"""Message sessions through the unmodified public ``azure.servicebus`` 7.15.0 API.

A module-scoped broker serves every session-enabled queue (and one topic) below; each test owns
its entity, so tests are independent of order. Rule IDs refer to /work/shared/SEMANTICS.md
(SES-1 ordering and required session id, SES-2 session lock and state, TTL-9 session expiry);
the wire details are in /work/shared/protocol/azure-sdk-wire-contract.md §3.5 and §6.4.

What the SDK does, read from its source (so the assertions below are about the broker):
* A session receiver attaches with ``com.microsoft:session-filter`` = the id, or null for
  ``NEXT_AVAILABLE_SESSION``; ``on_attach`` copies the accepted id and
  ``com.microsoft:locked-until-utc`` into ``receiver.session``
  (``_transport/_pyamqp_transport.py``). ``with receiver:`` opens the link, so attach errors
  (``SessionCannotBeLockedError``, ``OperationTimeoutError``) surface at ``__enter__``.
* ``_base_handler._check_live`` raises ``SessionLockLostError`` client-side as soon as
  ``session.locked_until_utc`` has passed, before any settlement is sent; the broker-side check
  is exercised by moving that cached time forward.
* ``SessionCannotBeLockedError`` is ``retryable=True`` and the handler retries opens, so
  error-case tests use a client with ``retry_total=0`` to see the first error.

``time.sleep`` is used only where the passage of time is the behaviour (lock expiry, lock
renewal, TTL); everything else waits deterministically with ``max_wait_time``.
"""

from __future__ import annotations

import datetime
import time
from typing import Iterator, List

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceivedMessage,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)

from conftest import QUEUE_DEFAULTS, Broker, _start, _stop, unique_id

pytestmark = pytest.mark.timeout(45)

# How long a test waits to conclude that nothing (more) will be delivered.
ABSENCE_WAIT_SECONDS = 1.5
RECEIVE_TIMEOUT_SECONDS = 10.0
# max_wait_time of a next-available receiver that is expected to find no session. The SDK sends
# it (minus jitter) as the link's com.microsoft:timeout, which the broker must honour.
NO_SESSION_WAIT_SECONDS = 2.0
# Tolerance for comparing broker-stamped wall-clock times with the test's clock.
CLOCK_TOLERANCE = datetime.timedelta(seconds=1)

# name -> overrides of conftest.QUEUE_DEFAULTS; every queue here has requires_session = true.
SESSION_QUEUES = {
    "ses-send-without-session-id": {},
    "ses-interleaved": {},
    "ses-next-available": {},
    "ses-next-available-empty": {},
    "ses-exclusive-lock": {},
    "ses-state": {},
    "ses-renew-lock": {"lock_duration": "5s"},
    "ses-lock-expiry": {"lock_duration": "2s", "max_delivery_count": 3},
    "ses-lock-expiry-broker": {"lock_duration": "2s", "max_delivery_count": 3},
    "ses-abandon": {},
    "ses-dead-letter": {},
    "ses-defer": {},
    "ses-peek": {},
    "ses-list-sessions": {},
    "ses-ttl-expiry": {"dead_lettering_on_message_expiration": True},
}
SESSION_TOPIC = "ses-topic"
SESSION_SUBSCRIPTION = "ses-subscription"


def toml_value(value: object) -> str:
    """A TOML literal (conftest.queue_toml would write Python's ``True``, which TOML rejects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def session_queue_toml(name: str, **overrides: object) -> str:
    settings = {**QUEUE_DEFAULTS, "requires_session": True, **overrides}
    lines = ["[[queues]]", f'name = "{name}"']
    lines.extend(f"{key} = {toml_value(value)}" for key, value in settings.items())
    return "\n".join(lines) + "\n"


def session_topic_toml() -> str:
    return (
        f'[[topics]]\nname = "{SESSION_TOPIC}"\n'
        f'[[topics.subscriptions]]\nname = "{SESSION_SUBSCRIPTION}"\nrequires_session = true\n'
    )


@pytest.fixture(scope="module")
def session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    config = "".join(session_queue_toml(name, **overrides) for name, overrides in SESSION_QUEUES.items())
    started = _start(config + session_topic_toml(), tmp_path_factory.mktemp("ferrobus-sessions"))
    yield started
    _stop(started)


def client_for(broker: Broker) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(broker.connection_string)


def no_retry_client(broker: Broker) -> ServiceBusClient:
    """A client that surfaces the first error instead of retrying (error-case tests)."""
    return ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def body_of(message: ServiceBusReceivedMessage) -> bytes:
    return b"".join(message.body)


def session_message(session_id: str, body: str) -> ServiceBusMessage:
    return ServiceBusMessage(body, session_id=session_id, message_id=unique_id(body))


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
    assert unexpected == [], f"expected no message, got {[(m.session_id, body_of(m)) for m in unexpected]}"


def seconds_until(moment: datetime.datetime) -> float:
    return (moment - utc_now()).total_seconds()


# --------------------------------------------------------------------------------------------
# Sending and ordering (SES-1)


def test_send_without_session_id_to_session_queue_is_refused_and_nothing_is_enqueued(session_broker):
    """rule SES-1: a session-enabled entity refuses messages without a session id. The refused
    message must not take a sequence number (the next accepted one is 1, rule SEQ-1) nor land
    in the DLQ."""
    queue = "ses-send-without-session-id"
    with no_retry_client(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            with pytest.raises(ServiceBusError) as refused:
                sender.send_messages(ServiceBusMessage(b"no session id"))
            assert type(refused.value) is ServiceBusError, f"raised {type(refused.value).__name__}: {refused.value}"
            sender.send_messages(session_message("s", "with-session"))
        with client.get_queue_receiver(queue, session_id="s") as receiver:
            [accepted] = receive_exactly(receiver, 1)
            assert body_of(accepted) == b"with-session"
            assert accepted.sequence_number == 1, "the refused message must not have been enqueued"
            receiver.complete_message(accepted)
            assert_nothing_to_receive(receiver)
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq_receiver:
            assert_nothing_to_receive(dlq_receiver)


def test_named_session_receiver_gets_only_its_session_in_sequence_order(session_broker):
    """rule SES-1: with sessions interleaved on the queue (A1 B1 A2 B2 A3), a receiver for A gets
    exactly A1 A2 A3 in sequence order, and one for B gets B1 B2."""
    queue = "ses-interleaved"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            for session_id, body in [("A", "A1"), ("B", "B1"), ("A", "A2"), ("B", "B2"), ("A", "A3")]:
                sender.send_messages(session_message(session_id, body))
        for session_id, expected in [("A", [b"A1", b"A2", b"A3"]), ("B", [b"B1", b"B2"])]:
            with client.get_queue_receiver(queue, session_id=session_id) as receiver:
                assert receiver.session.session_id == session_id
                received = receive_exactly(receiver, len(expected))
                assert [body_of(message) for message in received] == expected
                assert {message.session_id for message in received} == {session_id}
                sequence_numbers = [message.sequence_number for message in received]
                assert sequence_numbers == sorted(sequence_numbers)
                for message in received:
                    receiver.complete_message(message)
                assert_nothing_to_receive(receiver)


# --------------------------------------------------------------------------------------------
# Next available session


def test_next_available_receivers_each_take_a_different_session_with_messages(session_broker):
    """rule SES-2: NEXT_AVAILABLE_SESSION accepts an unlocked session that has messages and reports
    its id; a second one gets the other session; a third finds none and times out
    (com.microsoft:timeout -> OperationTimeoutError)."""
    queue = "ses-next-available"
    with no_retry_client(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([session_message("first", "first-1"), session_message("second", "second-1")])
        with client.get_queue_receiver(queue, session_id=NEXT_AVAILABLE_SESSION) as receiver_one:
            first_id = receiver_one.session.session_id
            assert first_id in ("first", "second"), f"accepted session id is {first_id!r}"
            assert receiver_one.session.locked_until_utc is not None
            with client.get_queue_receiver(queue, session_id=NEXT_AVAILABLE_SESSION) as receiver_two:
                second_id = receiver_two.session.session_id
                assert {first_id, second_id} == {"first", "second"}
                for receiver, session_id in [(receiver_one, first_id), (receiver_two, second_id)]:
                    [message] = receive_exactly(receiver, 1)
                    assert message.session_id == session_id
                    assert body_of(message) == f"{session_id}-1".encode()
                    receiver.complete_message(message)
                third = client.get_queue_receiver(
                    queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=NO_SESSION_WAIT_SECONDS
                )
                with pytest.raises(OperationTimeoutError):
                    with third:
                        pass


def test_next_available_session_on_an_empty_queue_times_out(session_broker):
    """rule SES-2 / wire contract §3.5: with no session available, the broker holds the attach for
    the link's com.microsoft:timeout and then detaches with com.microsoft:timeout, which the SDK
    raises as OperationTimeoutError (at open, i.e. `with`)."""
    queue = "ses-next-available-empty"
    with no_retry_client(session_broker) as client:
        receiver = client.get_queue_receiver(
            queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=NO_SESSION_WAIT_SECONDS
        )
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError):
            with receiver:
                pass
        elapsed = time.monotonic() - started
        assert elapsed < NO_SESSION_WAIT_SECONDS + 5, f"took {elapsed:.1f} s for a {NO_SESSION_WAIT_SECONDS} s wait"


# --------------------------------------------------------------------------------------------
# Session lock (SES-2)


def test_locked_session_cannot_be_accepted_until_its_receiver_closes(session_broker):
    """rule SES-2: a session receiver locks the session; a second receiver for it fails at open
    with SessionCannotBeLockedError (com.microsoft:session-cannot-be-locked). Closing the first
    receiver releases the lock, and its unsettled message is delivered to the next receiver."""
    queue = "ses-exclusive-lock"
    with no_retry_client(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(session_message("locked", "locked-1"))
        with client.get_queue_receiver(queue, session_id="locked") as first:
            [unsettled] = receive_exactly(first, 1)
            rival = client.get_queue_receiver(queue, session_id="locked")
            with pytest.raises(SessionCannotBeLockedError):
                with rival:
                    pass
        with client.get_queue_receiver(queue, session_id="locked") as successor:
            assert successor.session.session_id == "locked"
            [again] = receive_exactly(successor, 1)
            assert again.sequence_number == unsettled.sequence_number
            successor.complete_message(again)
            assert_nothing_to_receive(successor)


def test_renewed_session_lock_extends_locked_until_and_holds_past_the_original_expiry(session_broker):
    """rule SES-2: the session lock can be renewed (com.microsoft:renew-session-lock). With
    lock_duration 5 s, renewing after 3 s moves locked_until_utc forward by about 3 s; after the
    original expiry the session is still locked (a rival fails to accept it) and its message can
    be completed. Sleeping is the behaviour under test. (Opening the rival takes the SDK about
    1 s, hence the long lock.)"""
    queue = "ses-renew-lock"
    lock_duration = datetime.timedelta(seconds=5)
    with no_retry_client(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(session_message("renewed", "renewed-1"))
        with client.get_queue_receiver(queue, session_id="renewed") as receiver:
            original = receiver.session.locked_until_utc
            assert original is not None
            assert utc_now() - CLOCK_TOLERANCE <= original <= utc_now() + lock_duration + CLOCK_TOLERANCE
            [message] = receive_exactly(receiver, 1)
            time.sleep(3.0)
            renewed = receiver.session.renew_lock()
            assert renewed == receiver.session.locked_until_utc
            assert renewed > original + datetime.timedelta(seconds=2), f"renewed {renewed}, original {original}"
            assert renewed <= utc_now() + lock_duration + CLOCK_TOLERANCE

            time.sleep(max(0.0, seconds_until(original)) + 0.5)
            rival = client.get_queue_receiver(queue, session_id="renewed")
            with pytest.raises(SessionCannotBeLockedError):
                with rival:
                    pass
            assert receiver.session.locked_until_utc > utc_now(), "test too slow: renewed lock already over"
            receiver.complete_message(message)
            assert_nothing_to_receive(receiver, wait=0.5)


def test_expired_session_lock_loses_settlement_and_frees_the_session(session_broker):
    """rule SES-2 (the lock is released when it expires), rule LCK-2 (the unsettled message comes
    back with its delivery count incremented). The SDK refuses to settle once
    session.locked_until_utc has passed (SessionLockLostError raised client-side); the
    broker-side refusal is the next test. Sleeping is the behaviour: lock_duration is 2 s."""
    queue = "ses-lock-expiry"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(session_message("expiring", "expiring-1"))
        with client.get_queue_receiver(queue, session_id="expiring") as receiver:
            [stale] = receive_exactly(receiver, 1)
            assert stale.delivery_count == 0
            locked_until = receiver.session.locked_until_utc
            assert locked_until is not None
            assert 0 < seconds_until(locked_until) <= 3, f"lock_duration is 2 s, locked_until is {locked_until}"
            time.sleep(seconds_until(locked_until) + 1.0)
            with pytest.raises(SessionLockLostError):
                receiver.complete_message(stale)
        with client.get_queue_receiver(queue, session_id="expiring") as successor:
            [again] = receive_exactly(successor, 1)
            assert again.sequence_number == stale.sequence_number
            assert again.delivery_count == stale.delivery_count + 1
            successor.complete_message(again)
            assert_nothing_to_receive(successor)


def test_broker_refuses_settlement_after_the_session_lock_expired(session_broker):
    """rule SES-2 + LCK-3, checked at the broker: the SDK's client-side expiry check is bypassed by
    moving the cached session.locked_until_utc forward, so the completion reaches the broker
    after the session lock expired. It must fail with com.microsoft:session-lock-lost (a
    detach of the link, or a refused settlement) -> SessionLockLostError, and the message must
    stay in the queue for the next receiver of the session."""
    queue = "ses-lock-expiry-broker"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(session_message("expiring", "expiring-1"))
        with client.get_queue_receiver(queue, session_id="expiring") as receiver:
            [stale] = receive_exactly(receiver, 1)
            locked_until = receiver.session.locked_until_utc
            assert locked_until is not None
            time.sleep(max(0.0, seconds_until(locked_until)) + 1.0)
            receiver.session._locked_until_utc = utc_now() + datetime.timedelta(minutes=5)  # pylint: disable=protected-access
            # The SDK's receiver-link settlement meets the broker's detach(session-lock-lost) and
            # falls back to $management update-disposition with the session id; either refusal
            # must say session-lock-lost. Checked last, so the redelivery is checked regardless.
            with pytest.raises(ServiceBusError) as lost:
                receiver.complete_message(stale)
        with client.get_queue_receiver(queue, session_id="expiring") as successor:
            [again] = receive_exactly(successor, 1)
            assert again.sequence_number == stale.sequence_number
            assert again.delivery_count == stale.delivery_count + 1
            successor.complete_message(again)
        assert lost.type is SessionLockLostError, f"raised {lost.type.__name__}: {lost.value}"


# --------------------------------------------------------------------------------------------
# Session state (SES-2)


def test_session_state_is_kept_per_session_across_receivers_and_can_be_cleared(session_broker):
    """rule SES-2: session state is kept per session (com.microsoft:set-session-state /
    get-session-state); it outlives the receiver that set it; None clears it."""
    queue = "ses-state"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([session_message("stateful", "stateful-1"), session_message("other", "other-1")])
        with client.get_queue_receiver(queue, session_id="stateful") as receiver:
            assert receiver.session.get_state() is None
            receiver.session.set_state(b"checkpoint-1")
            assert receiver.session.get_state() == b"checkpoint-1"
            receiver.session.set_state("checkpoint-2")  # str is sent UTF-8 encoded
            assert receiver.session.get_state() == b"checkpoint-2"
        with client.get_queue_receiver(queue, session_id="other") as other:
            assert other.session.get_state() is None, "state belongs to one session"
        with client.get_queue_receiver(queue, session_id="stateful") as reopened:
            assert reopened.session.get_state() == b"checkpoint-2"
            reopened.session.set_state(None)
            assert reopened.session.get_state() is None
        with client.get_queue_receiver(queue, session_id="stateful") as last:
            assert last.session.get_state() is None


# --------------------------------------------------------------------------------------------
# Settlement within a session


def test_abandoned_session_message_comes_back_first_with_delivery_count_incremented(session_broker):
    """rule SES-1 (order within the session holds: the abandoned head is redelivered before the
    next message), rule LCK-2 (abandon increments the delivery count)."""
    queue = "ses-abandon"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([session_message("s", "s-1"), session_message("s", "s-2")])
        with client.get_queue_receiver(queue, session_id="s") as receiver:
            [first] = receive_exactly(receiver, 1)
            assert body_of(first) == b"s-1"
            receiver.abandon_message(first)
            [again] = receive_exactly(receiver, 1)
            assert body_of(again) == b"s-1"
            assert again.sequence_number == first.sequence_number
            assert again.delivery_count == first.delivery_count + 1
            receiver.complete_message(again)
            [second] = receive_exactly(receiver, 1)
            assert body_of(second) == b"s-2"
            receiver.complete_message(second)


def test_dead_lettered_session_message_moves_to_the_dlq_with_its_session_id(session_broker):
    """rule DLQ-4 within a session: the message leaves the session (the next one is delivered) and
    appears in the (non-session) DLQ with its session id, reason and description."""
    queue = "ses-dead-letter"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([session_message("s", "s-1"), session_message("s", "s-2")])
        with client.get_queue_receiver(queue, session_id="s") as receiver:
            [first] = receive_exactly(receiver, 1)
            receiver.dead_letter_message(first, reason="bad-format", error_description="field x missing")
            [second] = receive_exactly(receiver, 1)
            assert body_of(second) == b"s-2"
            receiver.complete_message(second)
            assert_nothing_to_receive(receiver)
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq_receiver:
            [dead] = receive_exactly(dlq_receiver, 1)
            assert body_of(dead) == b"s-1"
            assert dead.session_id == "s"
            assert dead.sequence_number == first.sequence_number
            assert dead.dead_letter_reason == "bad-format"
            assert dead.dead_letter_error_description == "field x missing"
            dlq_receiver.complete_message(dead)


def test_deferred_session_message_is_skipped_and_retrievable_by_sequence_number(session_broker):
    """rule LCK-4 within a session: a deferred message is not delivered again (the next message
    of the session is), and receive_deferred_messages on the session receiver
    (receive-by-sequence-number with session-id) returns it for completion."""
    queue = "ses-defer"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([session_message("s", "s-1"), session_message("s", "s-2")])
        with client.get_queue_receiver(queue, session_id="s") as receiver:
            [first] = receive_exactly(receiver, 1)
            receiver.defer_message(first)
            [second] = receive_exactly(receiver, 1)
            assert body_of(second) == b"s-2"
            receiver.complete_message(second)
            assert_nothing_to_receive(receiver)
            [deferred] = receiver.receive_deferred_messages([first.sequence_number])
            assert body_of(deferred) == b"s-1"
            assert deferred.session_id == "s"
            assert deferred.state == ServiceBusMessageState.DEFERRED
            receiver.complete_message(deferred)
            assert receiver.peek_messages(10, sequence_number=1) == []


def test_peek_on_a_session_receiver_shows_only_that_session(session_broker):
    """rule SES-1 / wire contract §6.4 peek-message with session-id: only that session's messages,
    in sequence order, without locking them."""
    queue = "ses-peek"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            for session_id, body in [("A", "A1"), ("B", "B1"), ("A", "A2"), ("B", "B2"), ("A", "A3")]:
                sender.send_messages(session_message(session_id, body))
        with client.get_queue_receiver(queue, session_id="A") as receiver:
            peeked = receiver.peek_messages(10, sequence_number=1)
            assert [body_of(message) for message in peeked] == [b"A1", b"A2", b"A3"]
            assert {message.session_id for message in peeked} == {"A"}
            received = receive_exactly(receiver, 3)
            assert [message.sequence_number for message in received] == [m.sequence_number for m in peeked]
            for message in received:
                receiver.complete_message(message)
        with client.get_queue_receiver(queue, session_id="B") as receiver_b:
            peeked_b = receiver_b.peek_messages(10, sequence_number=1)
            assert [body_of(message) for message in peeked_b] == [b"B1", b"B2"]


def test_list_queue_sessions_returns_sessions_with_messages_or_state(session_broker):
    """wire contract §6.4 get-message-sessions (ServiceBusClient.list_queue_sessions): default
    listing returns sessions that have messages or stored state, and excludes a session whose
    messages were all completed and that has no state (rule SES-2: state is kept per session)."""
    queue = "ses-list-sessions"
    with client_for(session_broker) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(
                [session_message("with-messages", "m-1"), session_message("drained", "d-1"), session_message("stateful", "st-1")]
            )
        with client.get_queue_receiver(queue, session_id="drained") as receiver:
            [message] = receive_exactly(receiver, 1)
            receiver.complete_message(message)
        with client.get_queue_receiver(queue, session_id="stateful") as receiver:
            [message] = receive_exactly(receiver, 1)
            receiver.complete_message(message)
            receiver.session.set_state(b"kept")
        sessions = list(client.list_queue_sessions(queue, timeout=10))
        assert sorted(sessions) == ["stateful", "with-messages"]


# --------------------------------------------------------------------------------------------
# Topics


def test_session_messages_through_a_topic_reach_a_session_subscription_receiver(session_broker):
    """rule SES-1 on a subscription with requires_session: messages sent to the topic keep their
    session id, and a session receiver on the subscription gets only its session, in order."""
    with client_for(session_broker) as client:
        with client.get_topic_sender(SESSION_TOPIC) as sender:
            for session_id, body in [("A", "A1"), ("B", "B1"), ("A", "A2")]:
                sender.send_messages(session_message(session_id, body))
        with client.get_subscription_receiver(SESSION_TOPIC, SESSION_SUBSCRIPTION, session_id="A") as receiver:
            received = receive_exactly(receiver, 2)
            assert [body_of(message) for message in received] == [b"A1", b"A2"]
            assert {message.session_id for message in received} == {"A"}
            for message in received:
                receiver.complete_message(message)
            assert_nothing_to_receive(receiver)
        with client.get_subscription_receiver(
            SESSION_TOPIC, SESSION_SUBSCRIPTION, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
        ) as next_receiver:
            assert next_receiver.session.session_id == "B"
            [message] = receive_exactly(next_receiver, 1)
            assert body_of(message) == b"B1"
            next_receiver.complete_message(message)


# --------------------------------------------------------------------------------------------
# Expiry


def test_one_expired_message_expires_its_whole_session(session_broker):
    """rule TTL-9: in a session entity, once one message of a session has expired, all messages of
    that session expire (here dead-lettered, dead_lettering_on_message_expiration = true) while
    a listener is active. The session receiver is open (listening, no credit yet) before the
    messages are sent and while the first, with TTL 1 s, expires; the second has no TTL. After
    1.5 s the receiver gets nothing and both are in the DLQ with TTLExpiredException. Sleeping
    is the behaviour under test."""
    queue = "ses-ttl-expiry"
    with client_for(session_broker) as client:
        with client.get_queue_receiver(queue, session_id="expiring") as receiver:
            with client.get_queue_sender(queue) as sender:
                short_lived = session_message("expiring", "short-lived")
                short_lived.time_to_live = datetime.timedelta(seconds=1)
                sender.send_messages([short_lived, session_message("expiring", "no-ttl")])
            time.sleep(1.5)
            assert_nothing_to_receive(receiver)
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq_receiver:
            dead = receive_exactly(dlq_receiver, 2)
            assert [body_of(message) for message in dead] == [b"short-lived", b"no-ttl"]
            assert {message.dead_letter_reason for message in dead} == {"TTLExpiredException"}
            assert {message.session_id for message in dead} == {"expiring"}
            for message in dead:
                dlq_receiver.complete_message(message)
