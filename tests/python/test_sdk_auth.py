"""Authorization with ``[[auth.keys]]`` configured, through the unmodified public
``azure.servicebus`` 7.15.0 API: the SDK's dead-letter receivers put a token for the
dead-letter audience (``sb://host/<entity>/$DeadLetterQueue``) and must be served with it; a
connection string with a wrong key gets the SDK's authentication error whatever it does first.

The module's broker configures its key itself, so these tests run the same in both
FERROBUS_TEST_AUTH modes (see conftest.py).
"""

from __future__ import annotations

import time
from typing import Iterator, List

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusAuthenticationError

from conftest import SAS_KEY_NAME, SAS_KEY_VALUE, Broker, _start, _stop, auth_key_toml, queue_toml, unique_id

pytestmark = pytest.mark.timeout(60)

RECEIVE_TIMEOUT_SECONDS = 10.0

QUEUE = "auth-dead-letters"
REFUSED_QUEUE = "auth-refused"
TOPIC = "auth-topic"
SUBSCRIPTION = "all"

CONFIG = (
    auth_key_toml(SAS_KEY_NAME, SAS_KEY_VALUE, ["Manage"])
    + queue_toml(QUEUE)
    + queue_toml(REFUSED_QUEUE)
    + f'[[topics]]\nname = "{TOPIC}"\n[[topics.subscriptions]]\nname = "{SUBSCRIPTION}"\n'
)


@pytest.fixture(scope="module")
def keyed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    started = _start(CONFIG, tmp_path_factory.mktemp("ferrobus-auth"))
    yield started
    _stop(started)


def receive_exactly(receiver, count: int) -> List[ServiceBusReceivedMessage]:
    received: List[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + RECEIVE_TIMEOUT_SECONDS
    while len(received) < count and time.monotonic() < deadline:
        remaining = deadline - time.monotonic()
        received.extend(receiver.receive_messages(max_message_count=count - len(received), max_wait_time=remaining))
    assert len(received) == count, f"expected {count} messages, received {len(received)}"
    return received


def test_dead_letter_receivers_are_served_with_their_dead_letter_token(keyed_broker):
    """The queue's and the subscription's DLQ receivers (sub_queue=DEAD_LETTER) each put a
    token for their own dead-letter audience and receive what was dead-lettered."""
    message_id = unique_id("dead")
    with ServiceBusClient.from_connection_string(keyed_broker.connection_string, retry_total=0) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages(ServiceBusMessage(b"poison", message_id=message_id))
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage(b"poison", message_id=message_id))
        with client.get_queue_receiver(QUEUE) as receiver:
            [received] = receive_exactly(receiver, 1)
            receiver.dead_letter_message(received, reason="bad", error_description="on purpose")
        with client.get_subscription_receiver(TOPIC, SUBSCRIPTION) as receiver:
            [received] = receive_exactly(receiver, 1)
            receiver.dead_letter_message(received, reason="bad", error_description="on purpose")
        with client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            [dead] = receive_exactly(dead_letters, 1)
            assert dead.message_id == message_id
            assert dead.dead_letter_reason == "bad"
            dead_letters.complete_message(dead)
        with client.get_subscription_receiver(
            TOPIC, SUBSCRIPTION, sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dead_letters:
            [dead] = receive_exactly(dead_letters, 1)
            assert dead.message_id == message_id
            dead_letters.complete_message(dead)


@pytest.mark.parametrize("operation", ["send", "peek"])
def test_a_wrong_key_gets_the_authentication_error(keyed_broker, operation):
    """The put-token is answered 401, which the SDK raises as ServiceBusAuthenticationError,
    on a send as on a peek; nothing is enqueued."""
    wrong = keyed_broker.connection_string_with(SAS_KEY_NAME, "NOT_THE_KEY")
    with ServiceBusClient.from_connection_string(wrong, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            if operation == "send":
                with client.get_queue_sender(REFUSED_QUEUE) as sender:
                    sender.send_messages(ServiceBusMessage(b"intruder"))
            else:
                with client.get_queue_receiver(REFUSED_QUEUE) as receiver:
                    receiver.peek_messages(max_message_count=1)
    with ServiceBusClient.from_connection_string(keyed_broker.connection_string, retry_total=0) as client:
        with client.get_queue_receiver(REFUSED_QUEUE) as receiver:
            assert receiver.peek_messages(max_message_count=10) == []
