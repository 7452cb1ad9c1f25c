"""A concurrent Service Bus workload that records what its clients saw, for ``checker.py``.

Driven by the official Python SDK (``azure-servicebus``) against one connection string and
nothing else, so the same workload runs against a single node killed with ``kill -9``
(``run.py``) or a cluster under faults. The entities it uses (``ENTITIES_TOML``) must exist.

Clients (one thread and one ``ServiceBusClient`` each, the SDK's own retries off so every
attempt is one recorded operation):

- ``queue-sender-N``: single sends, batches, scheduled messages (``schedule_messages`` and a
  scheduled enqueue time on a plain send), to queue ``hq``;
- ``session-sender``: sends and batches to session queue ``hq-sessions``, round-robin over a
  few session ids;
- ``topic-sender``: sends and batches to topic ``ht`` with an ``amount`` property;
  subscription ``all`` takes everything, ``big`` only ``amount > 50`` (an SQL filter);
- ``queue-receiver-N``: peek-lock receives on ``hq`` settled by complete, abandon,
  dead-letter or defer; deferred messages are later received by sequence number and completed;
- ``session-receiver-N``: accept the next available session of ``hq-sessions``, complete
  what it delivers;
- ``sub-receiver-all`` / ``sub-receiver-big``: receive and complete (sometimes abandon) from
  the subscriptions.

Every operation is one JSON line: ``client``, ``op``, ``entity``, ``t0``/``t1`` (wall clock,
seconds, before the call and after its outcome), ``outcome`` (``ok``; ``unknown`` when the SDK
raised an error it considers retryable, or an error that is not a Service Bus error at all,
e.g. the connection dropped while the broker was down: the operation may or may not have
taken effect; ``fail`` for a non-retryable Service Bus error, e.g. a lost lock), ``error``
(the exception's class) and the messages involved (``id``, ``seq``, ``enqueued``,
``session``, ``delivery_count``, ``amount``, ``scheduled_for``). Message ids are fresh for
every attempt; a retried send is a new message.

After ``--duration`` seconds (or ``--ops`` operations) the traffic stops and the workload
drains every entity (dead-letter queues, each session, every deferred sequence number it
knows), waiting until every scheduled time has passed, then peeks what is left. The drain
retries through errors, so it can start while the broker is still coming back.

``--seed`` fixes every client's choices (what to send, how to settle, when to pause); the
interleaving of threads and the broker's timing are not reproducible.

Example: python workload.py --connection-string "Endpoint=sb://127.0.0.1:5672;..." \
    --history history.jsonl --seed 7 --duration 30
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError

QUEUE = "hq"
SESSION_QUEUE = "hq-sessions"
TOPIC = "ht"
# Subscription name -> filter, in the checker's terms (see checker.filter_matches).
SUBSCRIPTIONS: Dict[str, Dict[str, Any]] = {
    "all": {"kind": "true"},
    "big": {"kind": "gt", "property": "amount", "value": 50},
}

# The entities the workload needs, as ferrobus configuration (appended to the broker's).
ENTITIES_TOML = f"""
[[queues]]
name = "{QUEUE}"
lock_duration = "5s"
max_delivery_count = 10

[[queues]]
name = "{SESSION_QUEUE}"
requires_session = true
lock_duration = "5s"

[[topics]]
name = "{TOPIC}"

[[topics.subscriptions]]
name = "all"
lock_duration = "5s"

[[topics.subscriptions]]
name = "big"
lock_duration = "5s"
[[topics.subscriptions.rules]]
name = "big"
sql_filter = "amount > 50"
"""

DLQ_SUFFIX = "/$DeadLetterQueue"
OPERATION_TIMEOUT_SECONDS = 5.0
# Mean pause between two operations of one sender.
SEND_PAUSE_SECONDS = 0.03
# Pause after an error before the next operation (the broker may be down).
ERROR_PAUSE_SECONDS = 0.2


def subscription_entity(name: str) -> str:
    return f"{TOPIC}/subscriptions/{name}"


class History:
    """Appends one JSON object per line, from any thread; counts operations."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "w", encoding="utf-8")
        self._lock = threading.Lock()
        self.operations = 0

    def write(self, record: Dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            if record.get("op") != "meta":
                self.operations += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


# Errors that say the operation did not take effect, whatever flag the SDK put on them.
FINAL_ERRORS = {"MessageNotFoundError", "MessageLockLostError", "SessionLockLostError", "MessageAlreadySettled"}


def classify(error: BaseException) -> str:
    """``fail`` only for an error the SDK says is final; anything else may have taken effect."""
    if type(error).__name__ in FINAL_ERRORS:
        return "fail"
    # The SDK keeps the flag it retries by in ``_retryable`` (no public accessor).
    if isinstance(error, ServiceBusError) and not getattr(error, "_retryable", True):
        return "fail"
    return "unknown"


def received(message: Any) -> Dict[str, Any]:
    enqueued = message.enqueued_time_utc
    properties = message.application_properties or {}
    amount = None
    for key, value in properties.items():
        if (key.decode() if isinstance(key, bytes) else key) == "amount":
            amount = value
    return {
        "id": message.message_id,
        "seq": message.sequence_number,
        "enqueued": enqueued.timestamp() if enqueued else None,
        "session": message.session_id,
        "delivery_count": message.delivery_count,
        "amount": amount,
        "state": str(getattr(message, "state", "")).rsplit(".", 1)[-1],
    }


class Client:
    """One SDK client and the handlers (sender or receiver) it reopens after an error."""

    def __init__(self, name: str, workload: "Workload") -> None:
        self.name = name
        self.workload = workload
        self.rng = random.Random(f"{workload.seed}:{name}")
        self.sdk = ServiceBusClient.from_connection_string(
            workload.connection_string, retry_total=0, retry_backoff_factor=0.1
        )
        self.handlers: Dict[str, Any] = {}

    def handler(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.handlers:
            self.handlers[key] = make()
        return self.handlers[key]

    def drop(self, key: Optional[str] = None) -> None:
        for name in list(self.handlers) if key is None else [key]:
            handler = self.handlers.pop(name, None)
            if handler is not None:
                try:
                    handler.close()
                except Exception:  # noqa: BLE001 - closing a broken handler may fail any way
                    pass

    def close(self) -> None:
        self.drop()
        try:
            self.sdk.close()
        except Exception:  # noqa: BLE001
            pass

    def run_op(
        self,
        record: Dict[str, Any],
        call: Callable[[], Any],
        handler_key: Optional[str],
        describe: Optional[Callable[[Any], Dict[str, Any]]] = None,
    ) -> Any:
        """Runs one operation, records it (with ``describe(result)`` merged in when it
        succeeded), returns the call's result (None on an error)."""
        record.update(client=self.name, t0=time.time())
        try:
            result = call()
            record.update(outcome="ok")
            if describe is not None:
                record.update(describe(result))
            return result
        except Exception as error:  # noqa: BLE001 - every outcome is recorded
            outcome = classify(error)
            record.update(outcome=outcome, error=type(error).__name__)
            if outcome == "unknown" or type(error).__name__ == "SessionLockLostError":
                # The connection or the session is gone: open a new handler next time, after
                # a pause (the broker may be down).
                if handler_key is not None:
                    self.drop(handler_key)
                time.sleep(ERROR_PAUSE_SECONDS)
            return None
        finally:
            record["t1"] = time.time()
            self.workload.history.write(record)

    def new_id(self) -> str:
        return f"{self.name}-{uuid.UUID(int=self.rng.getrandbits(128))}"


class Workload:
    def __init__(self, connection_string: str, history_path: str, seed: int, duration: float, max_ops: int) -> None:
        self.connection_string = connection_string
        self.history = History(history_path)
        self.seed = seed
        self.duration = duration
        self.max_ops = max_ops
        self.stop = threading.Event()
        self.deadline = 0.0
        # Deferred sequence numbers on hq waiting to be received by number, and the latest
        # scheduled time of any scheduled message (the drain waits for it).
        self.lock = threading.Lock()
        self.deferred: List[int] = []
        self.all_deferred: List[int] = []
        self.completed_deferred: set = set()
        self.latest_scheduled = 0.0

    def pace(self, client: Client) -> None:
        """Senders pause between operations so the receivers keep up (the backlog, and so
        the drain, stays short)."""
        time.sleep(client.rng.uniform(0, 2 * SEND_PAUSE_SECONDS))

    def running(self) -> bool:
        if self.stop.is_set():
            return False
        if time.time() >= self.deadline or self.history.operations >= self.max_ops:
            self.stop.set()
            return False
        return True

    # -- senders ---------------------------------------------------------------------------

    def queue_sender(self, client: Client) -> None:
        while self.running():
            self.pace(client)
            choice = client.rng.random()
            count = 1 if choice < 0.5 else client.rng.randint(2, 5)
            try:
                sender = client.handler("sender", lambda: client.sdk.get_queue_sender(QUEUE))
            except Exception:  # noqa: BLE001
                time.sleep(ERROR_PAUSE_SECONDS)
                continue
            if choice >= 0.8:
                at = time.time() + client.rng.uniform(0.5, 3.0)
                with self.lock:
                    self.latest_scheduled = max(self.latest_scheduled, at)
                moment = datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
                message_id = client.new_id()
                entry = {"id": message_id, "scheduled_for": at}
                if choice >= 0.9:
                    record = {"op": "schedule", "entity": QUEUE, "messages": [entry]}
                    client.run_op(
                        record,
                        lambda: sender.schedule_messages(
                            ServiceBusMessage(message_id, message_id=message_id),
                            moment,
                            timeout=OPERATION_TIMEOUT_SECONDS,
                        ),
                        "sender",
                        lambda seqs: {"seqs": list(seqs)},
                    )
                else:
                    message = ServiceBusMessage(message_id, message_id=message_id, scheduled_enqueue_time_utc=moment)
                    client.run_op(
                        {"op": "send", "entity": QUEUE, "messages": [entry]},
                        lambda: sender.send_messages(message, timeout=OPERATION_TIMEOUT_SECONDS),
                        "sender",
                    )
                continue
            ids = [client.new_id() for _ in range(count)]
            messages = [ServiceBusMessage(message_id, message_id=message_id) for message_id in ids]
            record = {"op": "send", "entity": QUEUE, "batch": count > 1, "messages": [{"id": i} for i in ids]}
            payload = messages[0] if count == 1 else messages
            client.run_op(record, lambda: sender.send_messages(payload, timeout=OPERATION_TIMEOUT_SECONDS), "sender")

    def session_sender(self, client: Client) -> None:
        sessions = [f"session-{self.seed}-{index}" for index in range(4)]
        turn = 0
        while self.running():
            self.pace(client)
            try:
                sender = client.handler("sender", lambda: client.sdk.get_queue_sender(SESSION_QUEUE))
            except Exception:  # noqa: BLE001
                time.sleep(ERROR_PAUSE_SECONDS)
                continue
            session = sessions[turn % len(sessions)]
            turn += 1
            count = 1 if client.rng.random() < 0.6 else client.rng.randint(2, 4)
            ids = [client.new_id() for _ in range(count)]
            messages = [ServiceBusMessage(i, message_id=i, session_id=session) for i in ids]
            record = {"op": "send", "entity": SESSION_QUEUE, "batch": count > 1, "messages": [{"id": i, "session": session} for i in ids]}
            payload = messages[0] if count == 1 else messages
            client.run_op(record, lambda: sender.send_messages(payload, timeout=OPERATION_TIMEOUT_SECONDS), "sender")

    def topic_sender(self, client: Client) -> None:
        while self.running():
            self.pace(client)
            try:
                sender = client.handler("sender", lambda: client.sdk.get_topic_sender(TOPIC))
            except Exception:  # noqa: BLE001
                time.sleep(ERROR_PAUSE_SECONDS)
                continue
            count = 1 if client.rng.random() < 0.6 else client.rng.randint(2, 4)
            entries = [{"id": client.new_id(), "amount": client.rng.randint(0, 100)} for _ in range(count)]
            messages = [
                ServiceBusMessage(e["id"], message_id=e["id"], application_properties={"amount": e["amount"]}) for e in entries
            ]
            record = {"op": "send", "entity": TOPIC, "batch": count > 1, "messages": entries}
            payload = messages[0] if count == 1 else messages
            client.run_op(record, lambda: sender.send_messages(payload, timeout=OPERATION_TIMEOUT_SECONDS), "sender")

    # -- receivers -------------------------------------------------------------------------

    def settle(self, client: Client, receiver: Any, entity: str, message: Any, action: str, key: str) -> bool:
        record = {"op": action, "entity": entity, "id": message.message_id, "seq": message.sequence_number}
        call = {
            "complete": lambda: receiver.complete_message(message),
            "abandon": lambda: receiver.abandon_message(message),
            "dead_letter": lambda: receiver.dead_letter_message(message, reason="history", error_description="workload"),
            "defer": lambda: receiver.defer_message(message),
        }[action]
        client.run_op(record, call, key)
        return record["outcome"] == "ok"

    def receive(self, client: Client, key: str, entity: str, make: Callable[[], Any], count: int, wait: float) -> Optional[List[Any]]:
        try:
            receiver = client.handler(key, make)
        except Exception:  # noqa: BLE001
            time.sleep(ERROR_PAUSE_SECONDS)
            return None
        record: Dict[str, Any] = {"op": "receive", "entity": entity}
        return client.run_op(
            record,
            lambda: receiver.receive_messages(max_message_count=count, max_wait_time=wait),
            key,
            lambda messages: {"messages": [received(m) for m in messages]},
        )

    def receive_deferred(self, client: Client, key: str, entity: str, make: Callable[[], Any], seqs: List[int]) -> Optional[List[Any]]:
        try:
            receiver = client.handler(key, make)
        except Exception:  # noqa: BLE001
            time.sleep(ERROR_PAUSE_SECONDS)
            return None
        record: Dict[str, Any] = {"op": "receive_deferred", "entity": entity, "seqs": seqs}
        return client.run_op(
            record,
            lambda: receiver.receive_deferred_messages(seqs, timeout=OPERATION_TIMEOUT_SECONDS),
            key,
            lambda messages: {"messages": [received(m) for m in messages]},
        )

    def queue_receiver(self, client: Client) -> None:
        make = lambda: client.sdk.get_queue_receiver(QUEUE, max_wait_time=1)  # noqa: E731
        while self.running():
            if client.rng.random() < 0.2:
                with self.lock:
                    seqs, self.deferred = self.deferred[:3], self.deferred[3:]
                if seqs:
                    got = self.receive_deferred(client, "receiver", QUEUE, make, seqs)
                    if got is None and self._last_error.get(client.name) == "MessageNotFoundError":
                        # One of them is gone (its complete took effect though its answer was
                        # lost): ask for each alone; one not found is dropped (final).
                        got = []
                        for seq in seqs:
                            one = self.receive_deferred(client, "receiver", QUEUE, make, [seq])
                            if one is not None:
                                got += one
                            elif self._last_error.get(client.name) != "MessageNotFoundError":
                                with self.lock:
                                    self.deferred.append(seq)
                    if got is None:
                        with self.lock:
                            self.deferred.extend(seqs)
                        continue
                    receiver = client.handlers.get("receiver")
                    for message in got:
                        if receiver is not None and self.settle(client, receiver, QUEUE, message, "complete", "receiver"):
                            with self.lock:
                                self.completed_deferred.add(message.sequence_number)
                        else:
                            with self.lock:
                                self.deferred.append(message.sequence_number)
                            receiver = client.handlers.get("receiver")
                    continue
            messages = self.receive(client, "receiver", QUEUE, make, client.rng.randint(1, 5), 1.0)
            receiver = client.handlers.get("receiver")
            for message in messages or []:
                roll = client.rng.random()
                action = "complete" if roll < 0.6 else "abandon" if roll < 0.75 else "dead_letter" if roll < 0.85 else "defer"
                if receiver is None:
                    break
                if action == "defer":
                    with self.lock:
                        self.all_deferred.append(message.sequence_number)
                ok = self.settle(client, receiver, QUEUE, message, action, "receiver")
                if ok and action == "defer":
                    with self.lock:
                        self.deferred.append(message.sequence_number)
                receiver = client.handlers.get("receiver")

    def session_receiver(self, client: Client) -> None:
        while self.running():
            make = lambda: client.sdk.get_queue_receiver(SESSION_QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1)  # noqa: E731
            for _ in range(client.rng.randint(3, 12)):
                if not self.running():
                    break
                messages = self.receive(client, "session", SESSION_QUEUE, make, client.rng.randint(1, 8), 1.0)
                if not messages:
                    break
                receiver = client.handlers.get("session")
                for message in messages:
                    if receiver is None or not self.settle(client, receiver, SESSION_QUEUE, message, "complete", "session"):
                        break
                if "session" not in client.handlers:
                    break
            client.drop("session")

    def subscription_receiver(self, client: Client, subscription: str) -> None:
        entity = subscription_entity(subscription)
        make = lambda: client.sdk.get_subscription_receiver(TOPIC, subscription, max_wait_time=1)  # noqa: E731
        while self.running():
            messages = self.receive(client, "receiver", entity, make, client.rng.randint(1, 5), 1.0)
            receiver = client.handlers.get("receiver")
            for message in messages or []:
                if receiver is None:
                    break
                action = "complete" if client.rng.random() < 0.85 else "abandon"
                self.settle(client, receiver, entity, message, action, "receiver")
                receiver = client.handlers.get("receiver")

    # -- drain -----------------------------------------------------------------------------

    def drain_entity(self, client: Client, entity: str, make: Callable[[], Any], deadline: float) -> None:
        """Receives and completes until an empty receive after every scheduled time."""
        while time.time() < deadline:
            messages = self.receive(client, "drain", entity, make, 50, 1.0)
            if messages is None:
                continue
            receiver = client.handlers.get("drain")
            for message in messages:
                if receiver is not None:
                    self.settle(client, receiver, entity, message, "complete", "drain")
                    receiver = client.handlers.get("drain")
            if not messages and time.time() > self.latest_scheduled + 1.0:
                client.drop("drain")
                return
        client.drop("drain")

    def drain_deferred(self, client: Client, deadline: float) -> None:
        """Receives by number, and completes, every deferred message not known completed."""
        with self.lock:
            pending = sorted(set(self.all_deferred) - self.completed_deferred)
        make = lambda: client.sdk.get_queue_receiver(QUEUE)  # noqa: E731
        for seq in pending:
            while time.time() < deadline:
                got = self.receive_deferred(client, "drain", QUEUE, make, [seq])
                if got is not None:
                    receiver = client.handlers.get("drain")
                    if receiver is not None and all(self.settle(client, receiver, QUEUE, m, "complete", "drain") for m in got):
                        break
                elif self._last_error.get(client.name) == "MessageNotFoundError":
                    # Final: the message is not deferred (any more).
                    break
        client.drop("drain")

    def drain_sessions(self, client: Client, deadline: float) -> None:
        """The next available session until none is left."""
        make = lambda: client.sdk.get_queue_receiver(SESSION_QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1)  # noqa: E731
        while time.time() < deadline:
            messages = self.receive(client, "drain", SESSION_QUEUE, make, 50, 1.0)
            if messages is None:
                if self._last_error.get(client.name) == "OperationTimeoutError":
                    break
                continue
            receiver = client.handlers.get("drain")
            for message in messages:
                if receiver is not None:
                    self.settle(client, receiver, SESSION_QUEUE, message, "complete", "drain")
            if not messages:
                client.drop("drain")
        client.drop("drain")

    def peek(self, client: Client, entity: str, make: Callable[[], Any]) -> None:
        """Records what is left in the entity (deferred or scheduled messages show in a peek)."""
        for _ in range(20):
            try:
                receiver = make()
                with receiver:
                    record: Dict[str, Any] = {"op": "peek", "entity": entity}
                    client.run_op(
                        record,
                        lambda: receiver.peek_messages(max_message_count=250, sequence_number=1),
                        None,
                        lambda messages: {"messages": [received(m) for m in messages]},
                    )
                    if record["outcome"] == "ok":
                        return
            except Exception:  # noqa: BLE001 - opening or closing the receiver failed: again
                time.sleep(ERROR_PAUSE_SECONDS)

    def drain(self, drain_seconds: float) -> bool:
        """Drains every entity, each on its own client and thread, then peeks it."""
        deadline = time.time() + drain_seconds

        def queue_like(entity: str, make_for: Callable[[Any], Any], before: Optional[Callable[[Client], None]] = None) -> Callable[[Client], None]:
            def job(client: Client) -> None:
                if before is not None:
                    before(client)
                self.drain_entity(client, entity, lambda: make_for(client.sdk), deadline)
                self.peek(client, entity, lambda: make_for(client.sdk))

            return job

        dead_letter = ServiceBusSubQueue.DEAD_LETTER
        jobs: List[tuple] = [
            ("drain-hq", queue_like(QUEUE, lambda sdk: sdk.get_queue_receiver(QUEUE, max_wait_time=1), lambda c: self.drain_deferred(c, deadline))),
            ("drain-hq-dlq", queue_like(QUEUE + DLQ_SUFFIX, lambda sdk: sdk.get_queue_receiver(QUEUE, sub_queue=dead_letter, max_wait_time=1))),
            ("drain-hq-sessions-dlq", queue_like(SESSION_QUEUE + DLQ_SUFFIX, lambda sdk: sdk.get_queue_receiver(SESSION_QUEUE, sub_queue=dead_letter, max_wait_time=1))),
            ("drain-hq-sessions", lambda c: self.drain_sessions(c, deadline)),
        ]
        for name in SUBSCRIPTIONS:
            entity = subscription_entity(name)
            jobs.append((f"drain-{name}", queue_like(entity, lambda sdk, name=name: sdk.get_subscription_receiver(TOPIC, name, max_wait_time=1))))
            jobs.append((f"drain-{name}-dlq", queue_like(entity + DLQ_SUFFIX, lambda sdk, name=name: sdk.get_subscription_receiver(TOPIC, name, sub_queue=dead_letter, max_wait_time=1))))
        clients = [Client(name, self) for name, _ in jobs]
        threads = [threading.Thread(target=self._guarded, args=(job, client), daemon=True) for (_, job), client in zip(jobs, clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=drain_seconds + 30)
        for client in clients:
            client.close()
        # Every drain ended on an empty entity (not on the deadline).
        return time.time() < deadline and not any(thread.is_alive() for thread in threads)

    # -- running ---------------------------------------------------------------------------

    def run(self, drain_seconds: float) -> int:
        self._last_error: Dict[str, str] = {}
        original_write = self.history.write

        def write(record: Dict[str, Any]) -> None:
            if record.get("error"):
                self._last_error[record.get("client", "")] = record["error"]
            elif record.get("outcome") == "ok":
                self._last_error.pop(record.get("client", ""), None)
            original_write(record)

        self.history.write = write  # type: ignore[method-assign]
        self.history.write({"op": "meta", "seed": self.seed, "topics": {TOPIC: SUBSCRIPTIONS}, "session_entities": [SESSION_QUEUE], "t0": time.time()})
        self.deadline = time.time() + self.duration
        roles: List[tuple] = [
            ("queue-sender-1", self.queue_sender),
            ("queue-sender-2", self.queue_sender),
            ("session-sender", self.session_sender),
            ("topic-sender", self.topic_sender),
            ("queue-receiver-1", self.queue_receiver),
            ("queue-receiver-2", self.queue_receiver),
            ("session-receiver-1", self.session_receiver),
            ("session-receiver-2", self.session_receiver),
            ("sub-receiver-all", lambda c: self.subscription_receiver(c, "all")),
            ("sub-receiver-big", lambda c: self.subscription_receiver(c, "big")),
        ]
        clients = [Client(name, self) for name, _ in roles]
        threads = [
            threading.Thread(target=self._guarded, args=(role, client), name=client.name, daemon=True)
            for (_, role), client in zip(roles, clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=self.duration + 60)
        stuck = [thread.name for thread in threads if thread.is_alive()]
        for client in clients:
            client.close()
        self.history.write({"op": "drain_start", "t0": time.time()})
        drained = self.drain(drain_seconds)
        self.history.write({"op": "end", "t0": time.time(), "stuck": stuck, "drained": drained})
        self.history.close()
        if stuck:
            print(f"workload: clients still running at the end: {stuck}", file=sys.stderr)
        return 0

    def _guarded(self, role: Callable[[Client], None], client: Client) -> None:
        try:
            role(client)
        except Exception as error:  # noqa: BLE001 - a client's bug must not hang the run
            self.history.write({"op": "client_crash", "client": client.name, "error": repr(error), "t0": time.time()})
            self.stop.set()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connection-string", required=True)
    parser.add_argument("--history", required=True, help="JSON-lines file to write")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of traffic")
    parser.add_argument("--ops", type=int, default=1_000_000, help="stop the traffic after this many operations")
    parser.add_argument("--drain-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"workload seed {seed}", flush=True)
    return Workload(args.connection_string, args.history, seed, args.duration, args.ops).run(args.drain_seconds)


if __name__ == "__main__":
    sys.exit(main())
