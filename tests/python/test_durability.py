"""Durability with the official SDK (issue 11): everything a client was told survives
``kill -9`` of the broker and a restart on the same data directory.

Each call here returns only after the broker's disposition or reply, so every state it set
was acknowledged: completions are final, dead letters keep their reason, deferred messages
stay retrievable by sequence number, abandons keep their delivery count, scheduled messages
stay scheduled (and cancelled ones stay cancelled), session state and messages persist,
duplicate detection remembers ids, and sequence numbers go on without reuse.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus import ServiceBusSubQueue

from conftest import queue_toml

CONFIG = (
    queue_toml("durable", duplicate_detection_history_time_window="10m", requires_duplicate_detection=True)
    + queue_toml("durable-sessions", requires_session=True)
)


def body(message: ServiceBusReceivedMessage) -> str:
    return b"".join(message.body).decode()


def test_acknowledged_state_survives_kill_9(start_durable_broker, tmp_path: Path) -> None:
    # rules SEQ-1, LCK-1, LCK-2, LCK-4, DLQ-4, SCH-2, SCH-4, SES-3, DUP-1 across a crash
    data_dir = tmp_path / "data"
    broker = start_durable_broker(CONFIG, data_dir)
    now = datetime.datetime.now(datetime.timezone.utc)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("durable") as sender:
            sender.send_messages([ServiceBusMessage(f"m{index}", message_id=f"id-{index}") for index in range(5)])
            due_soon = sender.schedule_messages(ServiceBusMessage("soon", message_id="soon"), now + datetime.timedelta(seconds=2))
            later = sender.schedule_messages(ServiceBusMessage("later", message_id="later"), now + datetime.timedelta(hours=1))
            cancelled = sender.schedule_messages(ServiceBusMessage("cancelled", message_id="cancelled"), now + datetime.timedelta(hours=1))
            sender.cancel_scheduled_messages(cancelled)
        with client.get_queue_receiver("durable", max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            while len(received) < 5:
                received += receiver.receive_messages(max_message_count=5 - len(received), max_wait_time=5)
            by_body = {body(message): message for message in received}
            receiver.complete_message(by_body["m0"])
            receiver.dead_letter_message(by_body["m1"], reason="BadOrder", error_description="missing customer")
            receiver.defer_message(by_body["m2"])
            deferred_number = by_body["m2"].sequence_number
            receiver.abandon_message(by_body["m3"])
            receiver.complete_message(by_body["m4"])
            highest = max(message.sequence_number for message in received)
        with client.get_queue_sender("durable-sessions") as sender:
            sender.send_messages([ServiceBusMessage(f"s{index}", session_id="order-7") for index in range(2)])
        with client.get_queue_receiver("durable-sessions", session_id="order-7", max_wait_time=5) as receiver:
            receiver.session.set_state(b"state-1")
            first = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [body(message) for message in first] == ["s0"]
            receiver.complete_message(first[0])

    broker.kill()
    broker = start_durable_broker(CONFIG, data_dir)

    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver("durable", max_wait_time=5) as receiver:
            # Scheduled messages are still scheduled; the cancelled one is gone.
            peeked = receiver.peek_messages(max_message_count=50, sequence_number=1)
            scheduled = [message for message in peeked if str(message.state).endswith("SCHEDULED")]
            assert later[0] in [message.sequence_number for message in scheduled]
            assert "cancelled" not in [body(message) for message in peeked]
            # The abandoned message kept its delivery count; the completed ones never return.
            got = []
            deadline = datetime.datetime.now() + datetime.timedelta(seconds=15)
            while len(got) < 2 and datetime.datetime.now() < deadline:
                got += receiver.receive_messages(max_message_count=2, max_wait_time=5)
            assert sorted(body(message) for message in got) == ["m3", "soon"], [body(message) for message in got]
            m3 = next(message for message in got if body(message) == "m3")
            assert m3.delivery_count == 1
            for message in got:
                receiver.complete_message(message)
            assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []
            # The deferred message is still retrievable by its sequence number.
            deferred = receiver.receive_deferred_messages([deferred_number])
            assert [body(message) for message in deferred] == ["m2"]
            receiver.complete_message(deferred[0])
        with client.get_queue_receiver("durable", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5) as receiver:
            dead = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            assert [(body(message), message.dead_letter_reason, message.dead_letter_error_description)
                    for message in dead] == [("m1", "BadOrder", "missing customer")]
            receiver.complete_message(dead[0])
        with client.get_queue_sender("durable") as sender:
            # Duplicate detection remembers ids accepted before the crash.
            sender.send_messages(ServiceBusMessage("m0 again", message_id="id-0"))
            sender.send_messages(ServiceBusMessage("new", message_id="id-new"))
        with client.get_queue_receiver("durable", max_wait_time=5) as receiver:
            fresh = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            assert [body(message) for message in fresh] == ["new"]
            # Sequence numbers go on: never reused after the crash.
            assert fresh[0].sequence_number > max(highest, later[0], due_soon[0], cancelled[0])
            receiver.complete_message(fresh[0])
        with client.get_queue_receiver("durable-sessions", session_id="order-7", max_wait_time=5) as receiver:
            assert receiver.session.get_state() == b"state-1"
            rest = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            assert [body(message) for message in rest] == ["s1"]
            receiver.complete_message(rest[0])


TOPIC_CONFIG = """
[[topics]]
name = "durable-topic"
requires_duplicate_detection = true
duplicate_detection_history_time_window = "10m"
[[topics.subscriptions]]
name = "first"
[[topics.subscriptions]]
name = "second"
"""


def test_topic_state_survives_kill_9(start_durable_broker, tmp_path: Path) -> None:
    # rules SCH-2, SCH-3, SCH-4, DUP-1 for a topic across a crash: messages scheduled on the
    # topic stay scheduled (cancelled ones stay cancelled), its duplicate history survives,
    # and subscription copies stored before the crash are there after it.
    data_dir = tmp_path / "data"
    broker = start_durable_broker(TOPIC_CONFIG, data_dir)
    due = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=4)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("durable-topic") as sender:
            [kept] = sender.schedule_messages(ServiceBusMessage("kept"), due)
            [cancelled] = sender.schedule_messages(ServiceBusMessage("cancelled"), due)
            sender.cancel_scheduled_messages(cancelled)
            sender.send_messages(ServiceBusMessage("published", message_id="topic-id-1"))
    broker.kill()
    broker = start_durable_broker(TOPIC_CONFIG, data_dir)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("durable-topic") as sender:
            sender.send_messages(ServiceBusMessage("duplicate", message_id="topic-id-1"))
            [after] = sender.schedule_messages(ServiceBusMessage("after"), due)
            # The topic's counter goes on: no number is handed out twice.
            assert after > max(kept, cancelled)
            sender.cancel_scheduled_messages(after)
        for name in ("first", "second"):
            with client.get_subscription_receiver("durable-topic", name, max_wait_time=5) as receiver:
                got = []
                deadline = datetime.datetime.now() + datetime.timedelta(seconds=15)
                while len(got) < 2 and datetime.datetime.now() < deadline:
                    got += receiver.receive_messages(max_message_count=5, max_wait_time=3)
                assert sorted(body(message) for message in got) == ["kept", "published"], name
                for message in got:
                    receiver.complete_message(message)
                assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == [], name
