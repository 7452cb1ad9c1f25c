"""Scheduling through a topic sender (schedule-message / cancel-scheduled-message on
`<topic>/$management`): the topic holds the message until its time, then every
subscription gets it (rules SCH-1..4)."""

from __future__ import annotations

import datetime
import time
from typing import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from conftest import Broker, _start, _stop

pytestmark = pytest.mark.timeout(60)

CONFIG = """
[[topics]]
name = "scheduled-topic"
[[topics.subscriptions]]
name = "first"
[[topics.subscriptions]]
name = "second"
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Broker]:
    started = _start(CONFIG, tmp_path_factory.mktemp("ferrobus-topic-schedule"))
    yield started
    _stop(started)


def test_topic_scheduled_messages_reach_every_subscription_at_their_time(broker):
    """rules SCH-1, SCH-2, SCH-3, SCH-4"""
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as sb:
        # Links open first, so the seconds before `due` are spent on the schedule and the
        # early receive only (opening a link takes about 0.5 s).
        with sb.get_topic_sender("scheduled-topic") as sender, \
                sb.get_subscription_receiver("scheduled-topic", "first") as first, \
                sb.get_subscription_receiver("scheduled-topic", "second") as second:
            due = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)
            [kept] = sender.schedule_messages(ServiceBusMessage(b"kept"), due)
            [cancelled] = sender.schedule_messages(ServiceBusMessage(b"cancelled"), due)
            assert kept != cancelled
            sender.cancel_scheduled_messages(cancelled)
            assert first.receive_messages(max_message_count=5, max_wait_time=1) == [], "not before its time"
            time.sleep(max(0.0, (due - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))
            for receiver in (first, second):
                received = receiver.receive_messages(max_message_count=5, max_wait_time=5)
                assert [b"".join(message.body) for message in received] == [b"kept"]
                assert received[0].scheduled_enqueue_time_utc is not None
                receiver.complete_message(received[0])
                assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == [], "the cancelled one never comes"
