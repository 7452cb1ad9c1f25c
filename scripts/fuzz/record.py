#!/usr/bin/env python3
"""Records what real clients send to ferrobus, as the fuzz corpus (tests/fuzz/corpus/).

Starts the release binary on 127.0.0.1:0, puts a recording TCP proxy in front of it, and
drives the official azure-servicebus SDK and python-qpid-proton through the proxy: sends,
receives, settles, dead-letters, $management peek and schedule, a session receiver, a topic.
Each client connection's client→broker bytes are written to one file:
<client>-<n>.bin. Re-record after protocol changes with:

    cargo build --release && tests/python/.venv/bin/python scripts/fuzz/record.py
"""

from __future__ import annotations

import datetime
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
BINARY = ROOT / "target" / "release" / "ferrobus"
CONFIG = """
[[queues]]
name = "q"
[[queues]]
name = "sessions"
requires_session = true
[[topics]]
name = "t"
[[topics.subscriptions]]
name = "s"
"""


class RecordingProxy:
    """Forwards 127.0.0.1:<port> to the broker and keeps what each client sent."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.sessions: list[bytearray] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            recorded = bytearray()
            with self.lock:
                self.sessions.append(recorded)
            threading.Thread(target=self._pump, args=(client, upstream, recorded), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, recorded: bytearray | None) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if recorded is not None:
                    recorded.extend(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def take(self) -> list[bytes]:
        with self.lock:
            taken = [bytes(session) for session in self.sessions if session]
            self.sessions.clear()
        return taken


def start_broker(directory: Path) -> tuple[subprocess.Popen, int]:
    config = directory / "record.toml"
    config.write_text(CONFIG)
    process = subprocess.Popen(
        [str(BINARY), "--config", str(config), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if found:
            threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
            return process, int(found.group(1))
    raise RuntimeError("the broker did not start")


def drive_sdk(port: int) -> None:
    from azure.servicebus import (
        ServiceBusClient,
        ServiceBusMessage,
        ServiceBusReceiveMode,
        ServiceBusSubQueue,
    )

    connection = (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
    )
    with ServiceBusClient.from_connection_string(connection) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                [ServiceBusMessage(f"m{n}", application_properties={"n": n}, subject="s") for n in range(4)]
            )
            at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
            numbers = sender.schedule_messages(ServiceBusMessage("later"), at)
            sender.cancel_scheduled_messages(numbers)
        with client.get_queue_receiver("q", max_wait_time=2) as receiver:
            receiver.peek_messages(max_message_count=2)
            messages = receiver.receive_messages(max_message_count=4, max_wait_time=2)
            actions = [receiver.complete_message, receiver.abandon_message, receiver.defer_message]
            for index, message in enumerate(messages[:3]):
                actions[index](message)
            for message in messages[3:]:
                receiver.dead_letter_message(message, reason="fuzz", error_description="recorded")
        with client.get_queue_receiver("q", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=1) as receiver:
            for message in receiver.receive_messages(max_message_count=4, max_wait_time=1):
                receiver.complete_message(message)
        with client.get_queue_sender("sessions") as sender:
            sender.send_messages(ServiceBusMessage("in a session", session_id="s1"))
        with client.get_queue_receiver("sessions", session_id="s1", max_wait_time=2) as receiver:
            receiver.session.set_state(b"state")
            for message in receiver.receive_messages(max_message_count=1, max_wait_time=2):
                receiver.complete_message(message)
        with client.get_topic_sender("t") as sender:
            sender.send_messages(ServiceBusMessage("to the topic"))
        with client.get_subscription_receiver(
            "t", "s", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=2
        ) as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=2)


def drive_proton(port: int) -> None:
    from proton import Message
    from proton.utils import BlockingConnection

    connection = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=5)
    try:
        sender = connection.create_sender("q")
        for n in range(3):
            sender.send(Message(body=f"proton {n}", properties={"n": n}))
        receiver = connection.create_receiver("q", credit=3)
        for _ in range(3):
            receiver.receive(timeout=5)
            receiver.accept()
    finally:
        connection.close()


def main() -> int:
    directory = Path("/tmp") / f"ferrobus-record-{__import__('os').getpid()}"
    directory.mkdir(parents=True, exist_ok=True)
    process, port = start_broker(directory)
    try:
        proxy = RecordingProxy(port)
        CORPUS.mkdir(parents=True, exist_ok=True)
        for name, drive in (("sdk", drive_sdk), ("proton", drive_proton)):
            drive(proxy.port)
            for index, session in enumerate(proxy.take()):
                (CORPUS / f"{name}-{index}.bin").write_bytes(session)
                print(f"{name}-{index}.bin: {len(session)} bytes")
    finally:
        process.terminate()
        process.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
