"""ferrobus as a plain AMQP 1.0 broker, driven by a generic client (python-qpid-proton).

Checks what the Azure SDK wire contract (/work/shared/protocol/azure-sdk-wire-contract.md)
requires at the protocol level, independent of any Service Bus SDK: SASL ANONYMOUS and no-SASL
connections, the meaning of each outcome, broker annotations, not-found on attach. Rule IDs refer
to /work/shared/SEMANTICS.md. Each test owns the queue named in it (conftest.SHARED_QUEUES).
"""

from __future__ import annotations

import time
import uuid
from typing import Callable, Iterator, List

import pytest
from proton import SASL, Delivery, Link, Message, Timeout, timestamp, ulong
from proton.reactor import AtLeastOnce, ReceiverOption
from proton.utils import BlockingConnection, LinkDetached

from conftest import KEYS_MODE, SAS_KEY_NAME, SAS_KEY_VALUE, requires_no_keys

pytestmark = pytest.mark.timeout(60)

CONNECT_TIMEOUT_SECONDS = 10
RECEIVE_TIMEOUT_SECONDS = 5
ABSENCE_WAIT_SECONDS = 1.5


def peek_lock() -> AtLeastOnce:
    """snd-settle-mode unsettled, rcv-settle-mode first: the broker locks each delivery until the
    client settles it (the Azure SDKs' peek-lock receivers also send snd-settle-mode unsettled)."""
    return AtLeastOnce()


class SettleSecond(ReceiverOption):
    """Receiver link with rcv-settle-mode second, as the Azure SDKs' peek-lock receivers use:
    the client's disposition is unsettled and the broker answers with the outcome it applied."""

    def apply(self, receiver) -> None:
        receiver.snd_settle_mode = Link.SND_UNSETTLED
        receiver.rcv_settle_mode = Link.RCV_SECOND


@pytest.fixture
def connect(broker) -> Iterator[Callable[..., BlockingConnection]]:
    """Open BlockingConnections to the shared broker; all are closed at teardown. SASL ANONYMOUS,
    or in keys mode SASL PLAIN with the configured key (a generic client has no $cbs token)."""
    opened: List[BlockingConnection] = []

    def open_connection(**options) -> BlockingConnection:
        if KEYS_MODE:
            options.setdefault("allowed_mechs", "PLAIN")
            options.setdefault("allow_insecure_mechs", True)
            options.setdefault("user", SAS_KEY_NAME)
            options.setdefault("password", SAS_KEY_VALUE)
        else:
            options.setdefault("allowed_mechs", "ANONYMOUS")
        connection = BlockingConnection(broker.amqp_url, timeout=CONNECT_TIMEOUT_SECONDS, **options)
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        try:
            connection.close()
        except Exception:  # pylint: disable=broad-except
            pass


def now_milliseconds() -> int:
    return int(time.time() * 1000)


def current_delivery(receiver) -> Delivery:
    """The delivery of the message most recently returned by receiver.receive()."""
    return receiver.fetcher.unsettled[-1]


def assert_nothing_to_receive(receiver) -> None:
    with pytest.raises(Timeout):
        unexpected = receiver.receive(timeout=ABSENCE_WAIT_SECONDS)
        pytest.fail(f"expected no message, got id={unexpected.id!r} body={unexpected.body!r}")


def wait_for_broker_outcome(connection: BlockingConnection, delivery: Delivery) -> None:
    connection.wait(
        lambda: delivery.settled and delivery.remote_state != 0,
        timeout=RECEIVE_TIMEOUT_SECONDS,
        msg="waiting for the broker's settled disposition",
    )


@requires_no_keys
def test_sasl_anonymous_connection_sends_receives_and_accepts(connect):
    """SASL ANONYMOUS is accepted (wire contract 1.3); accept = complete (rule LCK-1)."""
    queue = "amqp-anonymous"
    connection = connect(allowed_mechs="ANONYMOUS")
    sasl = connection.conn.transport.sasl()
    assert sasl.outcome == SASL.OK
    assert sasl.mech == "ANONYMOUS"

    message_id = str(uuid.uuid4())
    connection.create_sender(queue).send(Message(id=message_id, body="over anonymous sasl"))
    receiver = connection.create_receiver(queue, credit=1, options=peek_lock())
    received = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert received.id == message_id
    assert received.body == "over anonymous sasl"
    receiver.accept()
    assert_nothing_to_receive(receiver)


@requires_no_keys
def test_connection_without_sasl_layer_works(connect):
    """A bare AMQP header (no SASL) is accepted (wire contract 1.3, rhea with a SAS-only string)."""
    queue = "amqp-no-sasl"
    connection = connect(sasl_enabled=False, allowed_mechs=None)
    connection.create_sender(queue).send(Message(body=b"no sasl", inferred=True))
    receiver = connection.create_receiver(queue, credit=1, options=peek_lock())
    received = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert received.body == b"no sasl"
    receiver.accept()
    assert_nothing_to_receive(receiver)


def test_released_message_comes_back_without_counting_a_delivery(connect):
    """`released` puts the message back without incrementing the delivery count (wire contract
    3.6: Python's prefetch-0 receivers release messages they did not ask for)."""
    queue = "amqp-released"
    connection = connect()
    connection.create_sender(queue).send(Message(id="released-1", body="give it back"))
    receiver = connection.create_receiver(queue, credit=1, options=peek_lock())
    first = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert first.delivery_count == 0
    receiver.release(delivered=False)  # outcome: released
    second = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert second.id == "released-1"
    assert second.delivery_count == 0
    receiver.accept()
    assert_nothing_to_receive(receiver)


def test_deliveries_settled_together_are_each_settled_at_the_queue(connect, broker):
    """Proton settles first and names a run of deliveries in one disposition when they are
    settled together; the broker hands the run to the queue in one command (issue 16). Released
    together, all come back uncounted (rule LCK-4); accepted together, all are gone (LCK-1)."""
    from azure.servicebus import ServiceBusClient

    queue, count = "amqp-settled-range", 40
    connection = connect()
    sender = connection.create_sender(queue)
    for index in range(count):
        sender.send(Message(id=f"range-{index}", body=f"message {index}"))
    receiver = connection.create_receiver(queue, credit=count, options=peek_lock())

    def receive_all() -> List[str]:
        return [receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS).id for _ in range(count)]

    def settle_all(outcome: int) -> None:
        # Settled without I/O in between: Proton writes them as ranges in one flush.
        for delivery in list(receiver.fetcher.unsettled):
            delivery.update(outcome)
            delivery.settle()
        receiver.fetcher.unsettled.clear()

    first = receive_all()
    assert sorted(first) == sorted(f"range-{index}" for index in range(count))
    settle_all(Delivery.RELEASED)
    # A lock left held would keep every message away for the lock's 30 s.
    again = receive_all()
    assert sorted(again) == sorted(first)
    settle_all(Delivery.ACCEPTED)
    # Commands from one connection reach the queue in order: once this send is accepted,
    # the settlements before it were applied.
    sender.send(Message(id="after", body="after the settlements"))
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue) as sdk:
            left = [str(message.message_id) for message in sdk.peek_messages(max_message_count=count + 1)]
    assert left == ["after"], left


def test_modified_delivery_failed_increments_delivery_count(connect):
    """`modified{delivery-failed=true}` is an abandon: unlock and increment (rule LCK-1, LCK-2)."""
    queue = "amqp-modified"
    connection = connect()
    connection.create_sender(queue).send(Message(id="modified-1", body="try again"))
    receiver = connection.create_receiver(queue, credit=1, options=peek_lock())
    first = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert first.delivery_count == 0
    current_delivery(receiver).local.failed = True
    receiver.settle(Delivery.MODIFIED)
    second = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert second.id == "modified-1"
    assert second.delivery_count == 1
    receiver.accept()
    assert_nothing_to_receive(receiver)


def test_rejected_message_is_dead_lettered(connect):
    """`rejected` dead-letters (wire contract 5.1); the DLQ is readable at
    `<queue>/$DeadLetterQueue` (rule DLQ-1, DLQ-2)."""
    queue = "amqp-rejected"
    connection = connect()
    connection.create_sender(queue).send(Message(id="rejected-1", body="poison"))
    receiver = connection.create_receiver(queue, credit=1, options=peek_lock())
    receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    receiver.reject()
    assert_nothing_to_receive(receiver)

    dlq_receiver = connection.create_receiver(f"{queue}/$DeadLetterQueue", credit=1, options=peek_lock())
    dead = dlq_receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert dead.id == "rejected-1"
    assert dead.body == "poison"
    dlq_receiver.accept()
    assert_nothing_to_receive(dlq_receiver)


@pytest.mark.parametrize("role", ["receiver", "sender"])
def test_attach_to_unknown_address_fails_with_not_found(connect, role):
    """Unknown entity: attach refused with amqp:not-found (wire contract 3.4)."""
    connection = connect()
    with pytest.raises(LinkDetached) as detached:
        if role == "receiver":
            connection.create_receiver("amqp-no-such-queue", credit=1)
        else:
            connection.create_sender("amqp-no-such-queue")
    assert detached.value.condition == "amqp:not-found"


def test_delivered_message_carries_broker_annotations_and_a_message_id(connect):
    """x-opt-sequence-number (long, starts at 1: rule SEQ-1), x-opt-enqueued-time (timestamp, rule
    SEQ-3), x-opt-locked-until (timestamp, future: rule LCK-1), and a message-id although the
    sender set none (wire contract 4.3)."""
    queue = "amqp-annotations"
    connection = connect()
    before_send = now_milliseconds()
    connection.create_sender(queue).send(Message(body="no id"))
    receiver = connection.create_receiver(queue, credit=1, options=peek_lock())
    received = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    received_at = now_milliseconds()

    assert received.id is not None, "the broker must assign a message-id when the sender set none"
    annotations = received.annotations or {}

    sequence_number = annotations.get("x-opt-sequence-number")
    assert isinstance(sequence_number, int) and not isinstance(sequence_number, ulong), (
        f"x-opt-sequence-number must be an AMQP long, got {type(sequence_number).__name__}"
    )
    assert sequence_number == 1

    enqueued_time = annotations.get("x-opt-enqueued-time")
    assert isinstance(enqueued_time, timestamp), f"x-opt-enqueued-time is {type(enqueued_time).__name__}"
    assert before_send - 2000 <= enqueued_time <= received_at + 2000

    locked_until = annotations.get("x-opt-locked-until")
    assert isinstance(locked_until, timestamp), f"x-opt-locked-until is {type(locked_until).__name__}"
    assert received_at < locked_until <= received_at + 32_000  # lock_duration 30 s
    receiver.accept()


def test_settling_after_the_lock_expired_is_refused_with_message_lock_lost(connect):
    """rule LCK-3 at the wire: with rcv-settle-mode second, an `accepted` sent after the lock
    expired is answered `rejected{com.microsoft:message-lock-lost}` (wire contract 5.2), the
    message stays, and expiry counted a delivery (rule LCK-2). Sleeping is the behaviour under
    test: the wait is the configured 1 s lock duration."""
    queue = "amqp-lock-lost"
    connection = connect()
    connection.create_sender(queue).send(Message(id="lock-lost-1", body="too slow"))
    receiver = connection.create_receiver(queue, credit=1, options=SettleSecond())
    first = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    stale_delivery = current_delivery(receiver)
    locked_until = first.annotations["x-opt-locked-until"]
    time.sleep(max(0.0, (locked_until - now_milliseconds()) / 1000) + 0.5)

    stale_delivery.update(Delivery.ACCEPTED)
    wait_for_broker_outcome(connection, stale_delivery)
    assert stale_delivery.remote_state == Delivery.REJECTED
    assert stale_delivery.remote.condition is not None
    assert stale_delivery.remote.condition.name == "com.microsoft:message-lock-lost"
    receiver.fetcher.unsettled.remove(stale_delivery)
    stale_delivery.settle()

    again = receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    assert again.id == "lock-lost-1"
    assert again.delivery_count == 1
    delivery = current_delivery(receiver)
    delivery.update(Delivery.ACCEPTED)
    wait_for_broker_outcome(connection, delivery)
    assert delivery.remote_state == Delivery.ACCEPTED


@pytest.mark.parametrize(
    "outcome, expected_reply",
    [
        ("accepted", Delivery.ACCEPTED),
        ("modified", Delivery.MODIFIED),
        ("rejected", Delivery.REJECTED),
    ],
    ids=["accepted", "modified", "rejected"],
)
def test_unsettled_disposition_is_answered_with_the_same_outcome(connect, outcome, expected_reply):
    """Wire contract 5.2 (pitfall 1): in rcv-settle-mode second the broker answers every
    unsettled disposition with a settled one of the same outcome type and no error."""
    queue = f"amqp-settle-second-{outcome}"
    connection = connect()
    connection.create_sender(queue).send(Message(id=f"second-{outcome}", body=outcome))
    receiver = connection.create_receiver(queue, credit=1, options=SettleSecond())
    receiver.receive(timeout=RECEIVE_TIMEOUT_SECONDS)
    delivery = current_delivery(receiver)
    if outcome == "modified":
        delivery.local.failed = True
    delivery.update(expected_reply)
    wait_for_broker_outcome(connection, delivery)
    assert delivery.remote_state == expected_reply
    remote_condition = delivery.remote.condition
    assert remote_condition is None or not remote_condition.name, f"unexpected error {remote_condition}"
