"""Topics and subscriptions through the unmodified public ``azure.servicebus`` 7.15.0 API:
rule filters (SQL and correlation), rule actions, filter-evaluation dead-lettering, session
subscriptions, subscription dead-letter queues, per-subscription sequence numbers, TTL-3.

A module-scoped broker serves several topics that all carry the same six subscriptions
(``ORDERS_SUBSCRIPTIONS``); each test publishes to its own topic, so tests never see each
other's copies. Rule IDs refer to /work/shared/SEMANTICS.md.

Python decodes AMQP strings in application properties to ``bytes`` (keys and values), so
``property_of`` compares through text.
"""

from __future__ import annotations

import datetime
import time
from typing import Iterator, List, Optional

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import OperationTimeoutError, ServiceBusError

from conftest import Broker, _start, _stop, unique_id

pytestmark = pytest.mark.timeout(30)

ABSENCE_WAIT_SECONDS = 1.0
RECEIVE_TIMEOUT_SECONDS = 10.0

# The subscriptions of every "orders" topic. TOML written as is, appended after [[topics]].
ORDERS_SUBSCRIPTIONS = """
[[topics.subscriptions]]
name = "all"

[[topics.subscriptions]]
name = "red"
[[topics.subscriptions.rules]]
name = "red"
sql_filter = "color = 'red' AND amount > 10"

[[topics.subscriptions]]
name = "eu"
[[topics.subscriptions.rules]]
name = "eu"
correlation_filter = { subject = "created", properties = { region = "eu" } }

[[topics.subscriptions]]
name = "tagged"
[[topics.subscriptions.rules]]
name = "tag"
sql_filter = "1=1"
sql_action = "SET sys.Label = 'tagged'; SET priority = 'high'"

[[topics.subscriptions]]
name = "strict"
dead_lettering_on_filter_evaluation_exceptions = true
[[topics.subscriptions.rules]]
name = "over-five"
sql_filter = "amount > 5"

[[topics.subscriptions]]
name = "sessions"
requires_session = true
"""
# The subscriptions a non-session receiver may read ('sessions' refuses one, as in the cloud).
PLAIN_SUBSCRIPTIONS = ["all", "red", "eu", "tagged", "strict"]

# One topic per test that publishes to the orders subscriptions.
ORDERS_TOPICS = ["orders", "orders-action", "orders-filter-error", "orders-sessions", "orders-refused", "orders-sequence"]

# TTL-3: the topic's default (1 s) is smaller than the subscription's (1 h).
TTL_TOPIC = """
[[topics]]
name = "ttl-topic"
default_message_time_to_live = "1s"
[[topics.subscriptions]]
name = "long"
default_message_time_to_live = "1h"
dead_lettering_on_message_expiration = true
"""


@pytest.fixture(scope="module")
def topic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    config = "".join(f'[[topics]]\nname = "{topic}"\n{ORDERS_SUBSCRIPTIONS}\n' for topic in ORDERS_TOPICS) + TTL_TOPIC
    started = _start(config, tmp_path_factory.mktemp("ferrobus-topics"))
    yield started
    _stop(started)


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


def receive_all(receiver, wait: float = ABSENCE_WAIT_SECONDS) -> List[ServiceBusReceivedMessage]:
    """Everything the entity delivers until it stays silent for `wait` seconds."""
    received: List[ServiceBusReceivedMessage] = []
    while True:
        batch = receiver.receive_messages(max_message_count=50, max_wait_time=wait)
        if not batch:
            return received
        received.extend(batch)


def assert_nothing_to_receive(receiver, wait: float = ABSENCE_WAIT_SECONDS) -> None:
    unexpected = receiver.receive_messages(max_message_count=10, max_wait_time=wait)
    assert unexpected == [], f"expected no message, got {[(m.message_id, m.sequence_number) for m in unexpected]}"


def text(value: object) -> object:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def property_of(message: ServiceBusReceivedMessage, name: str) -> Optional[object]:
    """An application property by name, with bytes keys and string values decoded."""
    for key, value in (message.application_properties or {}).items():
        if text(key) == name:
            return text(value)
    return None


def drain(client: ServiceBusClient, topic: str, subscription: str, sub_queue=None) -> List[ServiceBusReceivedMessage]:
    """Every message of a subscription (or of its DLQ), removed on delivery."""
    with client.get_subscription_receiver(
        topic, subscription, sub_queue=sub_queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        return receive_all(receiver)


# --------------------------------------------------------------------------------------------
# Routing


def test_each_subscription_receives_exactly_the_copies_its_rules_select(topic_broker):
    """rule DLQ-5 and rule filtering: a topic copies each message to every subscription whose
    rules match: $Default (no rules) takes everything, the SQL filter takes red orders over 10,
    the correlation filter takes subject 'created' with region 'eu', '1=1' takes everything,
    'amount > 5' takes amounts over 5. The session subscription holds none of these
    session-less messages (no session to accept within 1 s): they are all in its DLQ."""
    topic = "orders"
    published = {
        "red-big": dict(subject="placed", application_properties={"color": "red", "amount": 20}),
        "red-small": dict(subject="placed", application_properties={"color": "red", "amount": 5}),
        "eu-created": dict(subject="created", application_properties={"region": "eu", "amount": 1}),
        "us-created": dict(subject="created", application_properties={"region": "us", "amount": 1}),
        "eu-updated": dict(subject="updated", application_properties={"region": "eu", "amount": 7}),
        "blue-big": dict(subject="placed", application_properties={"color": "blue", "amount": 50}),
    }
    expected = {
        "all": set(published),
        "red": {"red-big"},
        "eu": {"eu-created"},
        "tagged": set(published),
        "strict": {"red-big", "eu-updated", "blue-big"},
    }
    with client_for(topic_broker) as client:
        with client.get_topic_sender(topic) as sender:
            for message_id, fields in published.items():
                sender.send_messages(ServiceBusMessage(message_id.encode(), message_id=message_id, **fields))
        drained = {subscription: drain(client, topic, subscription) for subscription in PLAIN_SUBSCRIPTIONS}
        session_dead_letters = drain(client, topic, "sessions", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
    # retry_total=0: the SDK retries OperationTimeoutError; one 1 s attempt is the check.
    with client_for(topic_broker, retry_total=0) as client:
        with pytest.raises(OperationTimeoutError):
            with client.get_subscription_receiver(topic, "sessions", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1) as receiver:
                receiver.receive_messages(max_message_count=1, max_wait_time=1)
    assert sorted(m.message_id for m in session_dead_letters) == sorted(published)
    received_ids = {subscription: [m.message_id for m in messages] for subscription, messages in drained.items()}
    # Presence and absence: exactly the expected copies, each once.
    assert {subscription: sorted(ids) for subscription, ids in received_ids.items()} == {
        subscription: sorted(ids) for subscription, ids in expected.items()
    }
    for subscription, messages in drained.items():
        for message in messages:
            assert b"".join(message.body) == message.message_id.encode(), subscription


def test_rule_action_sets_label_and_properties_and_records_rule_name(topic_broker):
    """Rule actions: 'SET sys.Label = 'tagged'; SET priority = 'high'' rewrites the copy of
    the 'tagged' subscription (subject, new property, RuleName = the rule's name) and leaves
    the other subscriptions' copies as sent."""
    topic = "orders-action"
    message_id = unique_id("action")
    with client_for(topic_broker) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(
                ServiceBusMessage(b"tag me", message_id=message_id, subject="original", application_properties={"color": "green"})
            )
        with client.get_subscription_receiver(topic, "tagged") as receiver:
            [tagged] = receive_exactly(receiver, 1)
            receiver.complete_message(tagged)
        with client.get_subscription_receiver(topic, "all") as receiver:
            [plain] = receive_exactly(receiver, 1)
            receiver.complete_message(plain)
    assert tagged.message_id == message_id
    assert tagged.subject == "tagged"
    assert property_of(tagged, "priority") == "high"
    assert property_of(tagged, "RuleName") == "tag"
    assert property_of(tagged, "color") == "green"
    assert b"".join(tagged.body) == b"tag me"
    assert plain.subject == "original"
    assert property_of(plain, "priority") is None
    assert property_of(plain, "color") == "green"


# --------------------------------------------------------------------------------------------
# Dead-lettering on arrival


def test_filter_evaluation_error_dead_letters_on_subscription_with_the_flag(topic_broker):
    """rule DLQ-3 (filter evaluation errors, when enabled on the subscription): 'amount > 5'
    against the string 'abc' is an evaluation error (string vs number has no C# comparison);
    'strict' (dead_lettering_on_filter_evaluation_exceptions = true) dead-letters the message
    with a reason and does not deliver it; the DLQ is read with
    sub_queue=ServiceBusSubQueue.DEAD_LETTER. color = 'blue' makes the 'red' rule FALSE before
    it reaches its own amount comparison, so 'red' sees no error."""
    topic = "orders-filter-error"
    message_id = unique_id("bad-amount")
    with client_for(topic_broker) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(
                ServiceBusMessage(b"bad", message_id=message_id, application_properties={"color": "blue", "amount": "abc"})
            )
        with client.get_subscription_receiver(topic, "strict", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            [dead] = receive_exactly(dead_letters, 1)
            dead_letters.complete_message(dead)
            assert_nothing_to_receive(dead_letters)
        with client.get_subscription_receiver(topic, "strict") as receiver:
            assert_nothing_to_receive(receiver)
        with client.get_subscription_receiver(topic, "red", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            assert_nothing_to_receive(dead_letters)
        with client.get_subscription_receiver(topic, "all") as receiver:
            [copy] = receive_exactly(receiver, 1)
            receiver.complete_message(copy)
    assert dead.message_id == message_id
    assert dead.dead_letter_reason, "a filter-evaluation dead letter must carry a reason"
    assert dead.dead_letter_reason == "FilterEvaluationException"
    assert copy.message_id == message_id


def test_session_less_message_is_dead_lettered_by_session_subscription(topic_broker):
    """rules SES-1, DLQ-3: a session subscription cannot hold a message without session id:
    it goes to that subscription's DLQ with reason 'Session ID is null.'; a message with a
    session id is not dead-lettered there."""
    topic = "orders-sessions"
    session_less, with_session = unique_id("no-session"), unique_id("with-session")
    with client_for(topic_broker) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(ServiceBusMessage(b"no session", message_id=session_less))
            sender.send_messages(ServiceBusMessage(b"session", message_id=with_session, session_id="s1"))
        with client.get_subscription_receiver(topic, "sessions", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            dead = receive_all(dead_letters)
            for message in dead:
                dead_letters.complete_message(message)
    assert [message.message_id for message in dead] == [session_less]
    assert dead[0].dead_letter_reason == "Session ID is null."


def test_session_subscription_delivers_session_message_to_session_receiver(topic_broker):
    """rule SES-1: the session subscription delivers a message with a session id to a receiver
    for that session."""
    topic = "orders-sessions"
    message_id = unique_id("session-delivery")
    with client_for(topic_broker) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(ServiceBusMessage(b"for s2", message_id=message_id, session_id="s2"))
        with client.get_subscription_receiver(topic, "sessions", session_id="s2") as receiver:
            [received] = receive_exactly(receiver, 1)
            receiver.complete_message(received)
    assert received.message_id == message_id
    assert received.session_id == "s2"


# --------------------------------------------------------------------------------------------
# Addressing and numbering


def test_sending_to_a_subscription_is_refused(topic_broker):
    """rule DLQ-5 (a topic's messages live only in its subscriptions): a subscription is not a
    send target: sending to '<topic>/Subscriptions/<name>' raises, and nothing arrives."""
    topic = "orders-refused"
    with client_for(topic_broker, retry_total=0) as client:
        with pytest.raises(ServiceBusError):
            with client.get_queue_sender(f"{topic}/Subscriptions/all") as sender:
                sender.send_messages(ServiceBusMessage(b"not allowed"))
        with client.get_subscription_receiver(topic, "all") as receiver:
            assert_nothing_to_receive(receiver)


def test_subscription_copies_carry_the_topics_sequence_number_and_enqueued_time(topic_broker):
    """rule SEQ-1: sequence numbers are the topic's: 'all' gets 1, 2, 3; 'red', which takes
    only the second and third message, gets the same numbers, 2 and 3 (a gap where the blue
    message was), with the same enqueued times as the copies in 'all'."""
    topic = "orders-sequence"
    with client_for(topic_broker) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(ServiceBusMessage(b"0", message_id="0", application_properties={"color": "blue", "amount": 1}))
            sender.send_messages(ServiceBusMessage(b"1", message_id="1", application_properties={"color": "red", "amount": 11}))
            sender.send_messages(ServiceBusMessage(b"2", message_id="2", application_properties={"color": "red", "amount": 12}))
        with client.get_subscription_receiver(topic, "all", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            everything = receive_exactly(receiver, 3)
        with client.get_subscription_receiver(topic, "red", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            red = receive_exactly(receiver, 2)
    assert [(m.message_id, m.sequence_number) for m in everything] == [("0", 1), ("1", 2), ("2", 3)]
    assert [(m.message_id, m.sequence_number) for m in red] == [("1", 2), ("2", 3)]
    enqueued = {m.message_id: m.enqueued_time_utc for m in everything}
    assert all(m.enqueued_time_utc == enqueued[m.message_id] for m in red)


# --------------------------------------------------------------------------------------------
# Time to live


def test_topic_default_ttl_smaller_than_subscription_default_applies(topic_broker):
    """rule TTL-3 (with TTL-2, TTL-6): topic default TTL 1 s, subscription default 1 h: a copy
    reports time_to_live 1 s, and a copy left alone expires after 1 s (dead-lettered with
    TTLExpiredException, the subscription dead-letters on expiration)."""
    topic, subscription = "ttl-topic", "long"
    expiring = unique_id("expiring")
    with client_for(topic_broker) as client:
        with client.get_topic_sender(topic) as sender, client.get_subscription_receiver(topic, subscription) as receiver:
            sender.send_messages(ServiceBusMessage(b"inspected", message_id="inspected"))
            [inspected] = receive_exactly(receiver, 1, timeout=0.9)
            receiver.complete_message(inspected)
            sender.send_messages(ServiceBusMessage(b"expiring", message_id=expiring))
            time.sleep(1.5)  # the behaviour under test: the topic's 1 s TTL passes
            assert_nothing_to_receive(receiver)
        with client.get_subscription_receiver(topic, subscription, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            [dead] = receive_exactly(dead_letters, 1, timeout=3)
            dead_letters.complete_message(dead)
    assert inspected.time_to_live == datetime.timedelta(seconds=1)
    assert dead.message_id == expiring
    assert dead.dead_letter_reason == "TTLExpiredException"
