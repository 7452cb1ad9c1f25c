"""A steady SDK workload through a follower of a three-node cluster while its leader is killed.

    tests/python/.venv/bin/python tests/python/cluster_failover.py [--rounds 2] [--down 3]

Starts a three-node cluster the way the test harness does in cluster mode (conftest's
``ClusterBroker``: 127.0.0.1-3, durable, ports picked free, ``FERROBUS_TEST_AUTH`` as in the
suites) and runs the official azure-servicebus SDK against a follower: one thread sends, in
turn, to a queue, a session queue (two sessions) and a topic with two subscriptions; one
thread per queue, session and subscription receives peek-lock and completes. Each round
waits for the nodes to agree on a leader, kills it with SIGKILL, restarts it ``--down``
seconds later and waits until all three agree on a leader again. Then the sending stops and
the receivers drain.

Checks, each printed; the exit status is 1 if one fails:
- every SDK operation succeeded or raised an error the SDK classes as retryable
  (``ServiceBusError.retryable``), or, on a settlement or a session receive, lost its lock
  (``MessageLockLostError``, ``SessionLockLostError``: locks live in the leader's memory, so a
  failover drops them and the message is delivered again; SEMANTICS Q-LOCK). Each error is
  logged with its type;
- every acknowledged send is received afterwards, on each subscription for the topic (nothing
  acknowledged lost). A received message whose completion was refused as lock lost may be gone
  without coming again: the SDK retried a completion the old leader had stored before it died.
  Those are listed, each peeked for at the end (still held, or gone);
- no message whose completion was acknowledged is delivered again.

Prints the failover time of each kill: from the SIGKILL to the end of the first send started
after it and acknowledged (the SDK retries a send up to 5 times, 0.2 s backoff doubling to
2 s; a leader that is also the node the clients connect to is marked, since they reach the
cluster again only once it restarts).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

os.environ["FERROBUS_TEST_CLUSTER"] = "3"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from azure.servicebus import ServiceBusClient, ServiceBusMessage  # noqa: E402
from azure.servicebus.exceptions import (  # noqa: E402
    MessageLockLostError,
    ServiceBusError,
    SessionLockLostError,
)

from conftest import ClusterBroker, node_host, queue_toml  # noqa: E402

QUEUE = "failover-q"
SESSION_QUEUE = "failover-sessions"
SESSIONS = ("s0", "s1")
TOPIC = "failover-topic"
SUBSCRIPTIONS = ("a", "b")
# Locks lost in a failover are not held by the new leader for long: a short lock duration
# keeps the drain short should a lock survive. A session's lock is not renewed by receiving:
# the session queue's is long enough for the whole run.
LOCK_DURATION = "5s"
SESSION_LOCK_DURATION = "5m"

CONFIG = (
    queue_toml(QUEUE, lock_duration=LOCK_DURATION)
    + queue_toml(SESSION_QUEUE, lock_duration=SESSION_LOCK_DURATION, requires_session=True)
    + f'[[topics]]\nname = "{TOPIC}"\n'
    + "".join(
        f'[[topics.subscriptions]]\nname = "{name}"\nlock_duration = "{LOCK_DURATION}"\n'
        for name in SUBSCRIPTIONS
    )
)

# Errors a failover may cause besides the retryable ones: losing a lock the old leader held.
LOCK_LOSS = (MessageLockLostError, SessionLockLostError)


class Run:
    """What the workload saw, shared by its threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.monotonic()
        # Acknowledged sends: stream -> message ids. A stream is the queue, a session, or a
        # subscription (a topic send is expected on each subscription).
        self.acknowledged: Dict[str, Set[str]] = {}
        # Sends: (start, end, acknowledged).
        self.sends: List[Tuple[float, float, bool]] = []
        # Completed messages: stream -> message ids, and stream -> (message id, sequence number).
        # A send the SDK retried after its first try was stored is a second message with the
        # same id and another sequence number: only the same sequence number coming again is
        # a completed message delivered again.
        self.completed: Dict[str, Set[str]] = {}
        # Received (delivered to the application at least once): stream -> message ids. A
        # completion whose first try was stored but whose answer died with the old leader is
        # retried by the SDK and refused as lock lost; the message is gone, received but never
        # counted completed.
        self.received: Dict[str, Set[str]] = {}
        self.completed_deliveries: Dict[str, Set[Tuple[str, int]]] = {}
        self.returned_after_complete: List[Tuple[str, str, int]] = []
        self.duplicates: List[Tuple[str, str, int]] = []
        self.errors: List[Tuple[float, str, str, BaseException]] = []
        self.operations: Counter = Counter()
        self.stop_sending = threading.Event()
        self.stop_receiving = threading.Event()

    def now(self) -> float:
        return time.monotonic() - self.started

    def error(self, operation: str, stream: str, error: BaseException) -> None:
        with self.lock:
            self.errors.append((self.now(), operation, stream, error))
        allowed = "allowed" if allowed_error(operation, error) else "NOT ALLOWED"
        first_line = str(error).splitlines()[0][:160] if str(error) else ""
        print(
            f"  {self.now():7.2f}s {operation} {stream}: {type(error).__name__} "
            f"(retryable={getattr(error, '_retryable', None)}, {allowed}): {first_line}",
            flush=True,
        )


def utc_now() -> str:
    """Wall-clock time as the nodes' logs print it, to line prints up with them."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def allowed_error(operation: str, error: BaseException) -> bool:
    if isinstance(error, LOCK_LOSS) and operation in ("complete", "receive"):
        return True
    return isinstance(error, ServiceBusError) and bool(getattr(error, "_retryable", False))


def client_for(broker: ClusterBroker) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        broker.connection_string, retry_total=5, retry_backoff_factor=0.2, retry_backoff_max=2
    )


def send_loop(broker: ClusterBroker, run: Run) -> None:
    """Sends to the queue, a session and the topic in turn until told to stop."""
    client = client_for(broker)
    senders = {name: client.get_queue_sender(name) for name in (QUEUE, SESSION_QUEUE)}
    senders[TOPIC] = client.get_topic_sender(TOPIC)
    index = 0
    try:
        while not run.stop_sending.is_set():
            index += 1
            session = SESSIONS[index % len(SESSIONS)]
            for entity, streams, session_id in (
                (QUEUE, [QUEUE], None),
                (SESSION_QUEUE, [f"{SESSION_QUEUE}/{session}"], session),
                (TOPIC, [f"{TOPIC}/{name}" for name in SUBSCRIPTIONS], None),
            ):
                message_id = f"{entity}-{index}"
                start = time.monotonic()
                try:
                    senders[entity].send_messages(
                        ServiceBusMessage(message_id, message_id=message_id, session_id=session_id)
                    )
                except Exception as error:  # every error is logged and judged
                    run.operations["send failed"] += 1
                    with run.lock:
                        run.sends.append((start, time.monotonic(), False))
                    run.error("send", entity, error)
                    continue
                run.operations["send"] += 1
                with run.lock:
                    run.sends.append((start, time.monotonic(), True))
                    for stream in streams:
                        run.acknowledged.setdefault(stream, set()).add(message_id)
            time.sleep(0.02)
    finally:
        client.close()


def receive_loop(run: Run, stream: str, open_receiver: Callable[[], object]) -> None:
    """Receives peek-lock and completes until told to stop; a receiver that failed is closed
    and opened again."""
    completed = run.completed.setdefault(stream, set())
    completed_deliveries = run.completed_deliveries.setdefault(stream, set())
    received = run.received.setdefault(stream, set())
    receiver = None
    while not run.stop_receiving.is_set():
        if receiver is None:
            try:
                receiver = open_receiver()
                receiver.__enter__()
            except Exception as error:
                run.error("open receiver", stream, error)
                receiver = None
                time.sleep(0.2)
                continue
        try:
            messages = receiver.receive_messages(max_message_count=20, max_wait_time=1)
            run.operations["receive"] += 1
        except Exception as error:
            run.error("receive", stream, error)
            close_quietly(receiver)
            receiver = None
            continue
        for message in messages:
            message_id = str(message.message_id)
            received.add(message_id)
            delivery = (message_id, message.sequence_number)
            if delivery in completed_deliveries:
                with run.lock:
                    run.returned_after_complete.append((stream, *delivery))
                print(f"  {run.now():7.2f}s {stream}: {delivery} delivered again after its completion", flush=True)
            elif message_id in completed:
                with run.lock:
                    run.duplicates.append((stream, *delivery))
            try:
                receiver.complete_message(message)
            except Exception as error:
                run.error("complete", stream, error)
                if not isinstance(error, MessageLockLostError):
                    close_quietly(receiver)
                    receiver = None
                    break
                continue
            run.operations["complete"] += 1
            completed.add(message_id)
            completed_deliveries.add(delivery)
    close_quietly(receiver)


def close_quietly(receiver) -> None:
    if receiver is None:
        return
    try:
        receiver.close()
    except Exception:
        pass


def first_acknowledged_send_after(run: Run, moment: float) -> Optional[float]:
    """End of the first send started after `moment` and acknowledged."""
    with run.lock:
        ends = [end for start, end, acknowledged in run.sends if acknowledged and start >= moment]
    return min(ends) if ends else None


def everything_received(run: Run) -> bool:
    with run.lock:
        return all(run.acknowledged[stream] <= run.received.get(stream, set()) for stream in run.acknowledged)


def peek_missing(broker: ClusterBroker, run: Run) -> None:
    """For each acknowledged send never received or never completed, what the cluster still
    holds of it (peeked with a new client): its sequence number, delivery count and lock, or
    that it is gone."""
    for stream in sorted(run.acknowledged):
        missing = run.acknowledged[stream] - run.completed.get(stream, set())
        if not missing:
            continue
        entity, _, part = stream.partition("/")
        try:
            with client_for(broker) as peeker:
                if entity == TOPIC:
                    receiver = peeker.get_subscription_receiver(TOPIC, part)
                elif entity == SESSION_QUEUE:
                    receiver = peeker.get_queue_receiver(SESSION_QUEUE, session_id=part)
                else:
                    receiver = peeker.get_queue_receiver(QUEUE)
                with receiver:
                    held = receiver.peek_messages(max_message_count=1000, sequence_number=0)
        except Exception as error:  # a diagnostic only
            print(f"  {stream}: cannot peek: {type(error).__name__}: {error}")
            continue
        found = {str(message.message_id): message for message in held}
        for message_id in sorted(missing):
            message = found.get(message_id)
            if message is None:
                print(f"  {stream}: {message_id} is not in the entity any more ({len(held)} messages peeked)")
            else:
                print(
                    f"  {stream}: {message_id} is still there: sequence number {message.sequence_number}, "
                    f"delivery count {message.delivery_count}, locked until {message.locked_until_utc}, "
                    f"state {message.state}"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="leader kills (default 2)")
    parser.add_argument("--down", type=float, default=3.0, help="seconds a killed leader stays down (default 3)")
    parser.add_argument("--steady", type=float, default=4.0, help="seconds of workload before and between kills")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds the receivers may take to drain")
    arguments = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ferrobus-failover-"))
    broker = ClusterBroker(CONFIG, work / "cluster")
    broker.start()
    print(f"cluster in {work}: leader node {broker.leader}, clients connect to {broker.host}:{broker.port}", flush=True)
    run = Run()
    client = client_for(broker)
    threads = [threading.Thread(target=send_loop, args=(broker, run), name="sender")]
    receivers: List[Tuple[str, Callable[[], object]]] = [
        (QUEUE, lambda: client.get_queue_receiver(QUEUE, max_wait_time=1)),
        *[
            (
                f"{SESSION_QUEUE}/{session}",
                lambda session=session: client.get_queue_receiver(SESSION_QUEUE, session_id=session, max_wait_time=1),
            )
            for session in SESSIONS
        ],
        *[
            (
                f"{TOPIC}/{name}",
                lambda name=name: client.get_subscription_receiver(TOPIC, name, max_wait_time=1),
            )
            for name in SUBSCRIPTIONS
        ],
    ]
    threads += [
        threading.Thread(target=receive_loop, args=(run, stream, opener), name=f"receiver {stream}")
        for stream, opener in receivers
    ]
    # (killed node, whether it was the clients' entry node, seconds to the next acknowledged send)
    failovers: List[Tuple[int, bool, Optional[float]]] = []
    try:
        for thread in threads:
            thread.start()
        time.sleep(arguments.steady)
        for round_number in range(1, arguments.rounds + 1):
            leader = broker.wait_for_leader()
            entry = " (the clients' entry node: they reach the cluster again once it restarts)" if node_host(leader) == broker.host else ""
            print(f"{run.now():7.2f}s ({utc_now()}) round {round_number}: SIGKILL to the leader, node {leader}{entry}", flush=True)
            killed_at = time.monotonic()
            broker.kill_node(leader)
            new_leader = broker.wait_for_leader(other_than=leader)
            print(f"{run.now():7.2f}s ({utc_now()}) the other nodes agree that node {new_leader} leads", flush=True)
            time.sleep(max(0.0, arguments.down - (time.monotonic() - killed_at)))
            broker.restart_node(leader)
            broker.wait_for_leader()
            print(f"{run.now():7.2f}s node {leader} restarted; the nodes agree on a leader", flush=True)
            time.sleep(arguments.steady)
            acknowledged = first_acknowledged_send_after(run, killed_at)
            failovers.append((leader, bool(entry), None if acknowledged is None else acknowledged - killed_at))
        run.stop_sending.set()
        threads[0].join(timeout=60)
        deadline = time.monotonic() + arguments.drain
        while not everything_received(run) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        run.stop_sending.set()
        run.stop_receiving.set()
        for thread in threads:
            thread.join(timeout=30)
        client.close()
        try:
            peek_missing(broker, run)
        finally:
            broker.stop()

    failed = False
    print("\noperations:", dict(run.operations))
    print("errors by operation and type:", dict(Counter((op, type(e).__name__) for _, op, _, e in run.errors)))
    not_allowed = [(at, op, stream, e) for at, op, stream, e in run.errors if not allowed_error(op, e)]
    if not_allowed:
        failed = True
        print(f"FAIL: {len(not_allowed)} errors neither retryable nor a lost lock:")
        for at, op, stream, error in not_allowed:
            print(f"  {at:7.2f}s {op} {stream}: {type(error).__name__}: {error}")
    else:
        print(f"ok: all {len(run.errors)} errors retryable or a lock lost in a failover")
    for stream in sorted(run.acknowledged):
        missing = run.acknowledged[stream] - run.received.get(stream, set())
        uncompleted = run.acknowledged[stream] - missing - run.completed.get(stream, set())
        if missing:
            failed = True
            print(f"FAIL: {stream}: {len(missing)} of {len(run.acknowledged[stream])} acknowledged sends never received: {sorted(missing)[:10]}")
        else:
            print(f"ok: {stream}: all {len(run.acknowledged[stream])} acknowledged sends received")
        if uncompleted:
            print(
                f"note: {stream}: {len(uncompleted)} received but never completed (a completion refused "
                f"as lock lost, not delivered again before the end): {sorted(uncompleted)[:10]}"
            )
    if run.duplicates:
        print(f"note: {len(run.duplicates)} second copies of a send (same id, another sequence number; "
              f"the SDK retried a send whose first try was stored): {run.duplicates[:5]}")
    if run.returned_after_complete:
        failed = True
        print(f"FAIL: {len(run.returned_after_complete)} completed messages delivered again: {run.returned_after_complete[:10]}")
    else:
        print("ok: no completed message delivered again")
    for leader, entry, seconds in failovers:
        what = " (the entry node: includes its restart)" if entry else ""
        if seconds is None:
            failed = True
            print(f"FAIL: after the kill of node {leader}, no send was acknowledged")
        else:
            print(f"failover after the kill of node {leader}{what}: {seconds:.2f} s to the next acknowledged send")
    print("FAILED" if failed else "PASSED", f"(logs in {work / 'cluster'})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
