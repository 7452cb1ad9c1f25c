"""Running as a daemon with the official SDK: SIGHUP makes the broker re-read its
configuration file, and a queue the new file adds serves the SDK without a restart, while the
queue it had before keeps its messages.
"""

from __future__ import annotations

import os
import signal
import time

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from conftest import queue_toml, skip_in_cluster, with_test_auth


def body(message) -> str:
    return b"".join(message.body).decode()


def wait_for_log(broker, text: str, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in broker.log_tail(400).splitlines():
            if text in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no log line with {text!r}:\n{broker.log_tail()}")


@skip_in_cluster("sends SIGHUP to one broker process after rewriting its one configuration file")
def test_sighup_adds_a_queue_the_sdk_then_uses(start_broker) -> None:
    broker = start_broker(queue_toml("before-reload"))
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("before-reload") as sender:
            sender.send_messages(ServiceBusMessage("kept across the reload"))
        broker.config_path.write_text(
            with_test_auth(queue_toml("before-reload") + queue_toml("added-by-reload"))
        )
        os.kill(broker._process.pid, signal.SIGHUP)
        line = wait_for_log(broker, "configuration reloaded")
        assert "added [added-by-reload]" in line, line
        with client.get_queue_sender("added-by-reload") as sender:
            sender.send_messages(ServiceBusMessage("after the reload"))
        with client.get_queue_receiver("added-by-reload", max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [body(message) for message in received] == ["after the reload"]
            receiver.complete_message(received[0])
        with client.get_queue_receiver("before-reload", max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [body(message) for message in received] == ["kept across the reload"]
            receiver.complete_message(received[0])
    assert broker.is_running()
