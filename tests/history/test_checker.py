"""The history checker on hand-made histories: a clean one passes, and each violation kind is
found in a history made to contain it (so every check is shown able to fail).

Run: tests/python/.venv/bin/python -m pytest tests/history -q
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

import pytest

from checker import check

META = {
    "op": "meta",
    "topics": {"ht": {"all": {"kind": "true"}, "big": {"kind": "gt", "property": "amount", "value": 50}}},
    "session_entities": ["hq-sessions"],
}


def send(t0: float, t1: float, entity: str, *messages: Dict[str, Any], outcome: str = "ok", op: str = "send", **extra: Any) -> Dict[str, Any]:
    record = {"op": op, "client": "c", "entity": entity, "t0": t0, "t1": t1, "outcome": outcome, "messages": list(messages)}
    record.update(extra)
    return record


def seen(t0: float, t1: float, entity: str, *messages: Dict[str, Any], op: str = "receive") -> Dict[str, Any]:
    return {"op": op, "client": "r", "entity": entity, "t0": t0, "t1": t1, "outcome": "ok", "messages": list(messages)}


def msg(message_id: str, seq: int, enqueued: Optional[float] = None, session: Optional[str] = None, state: str = "ACTIVE") -> Dict[str, Any]:
    return {"id": message_id, "seq": seq, "enqueued": enqueued, "session": session, "state": state}


def settle(op: str, t0: float, t1: float, entity: str, message_id: str, seq: int, outcome: str = "ok") -> Dict[str, Any]:
    return {"op": op, "client": "r", "entity": entity, "t0": t0, "t1": t1, "outcome": outcome, "id": message_id, "seq": seq}


def clean_history() -> List[Dict[str, Any]]:
    """Every feature the workload uses, with nothing wrong."""
    return [
        META,
        send(1.0, 1.1, "hq", {"id": "a"}),
        send(1.2, 1.3, "hq", {"id": "b"}, {"id": "c"}, batch=True),
        send(1.4, 1.5, "hq", {"id": "lost-maybe"}, outcome="unknown"),
        send(1.4, 1.5, "hq", {"id": "failed"}, outcome="fail"),
        send(1.6, 1.7, "hq", {"id": "sch", "scheduled_for": 3.0}, op="schedule", seqs=[5]),
        send(2.0, 2.1, "ht", {"id": "t-small", "amount": 10}),
        send(2.0, 2.1, "ht", {"id": "t-big", "amount": 90}),
        send(2.2, 2.3, "ht", {"id": "t-maybe", "amount": 99}, outcome="unknown"),
        send(2.4, 2.5, "hq-sessions", {"id": "s1", "session": "S"}),
        send(2.6, 2.7, "hq-sessions", {"id": "s2", "session": "S"}),
        seen(4.0, 4.1, "hq", msg("a", 1, 1.05), msg("b", 2, 1.25), msg("c", 3, 1.25), msg("sch", 6, 3.0)),
        settle("complete", 4.2, 4.3, "hq", "a", 1),
        settle("dead_letter", 4.3, 4.4, "hq", "b", 2),
        settle("defer", 4.4, 4.5, "hq", "c", 3),
        settle("complete", 4.5, 4.6, "hq", "sch", 6),
        seen(4.6, 4.7, "hq/$DeadLetterQueue", msg("b", 2, 1.25)),
        seen(4.8, 4.9, "hq", msg("c", 3, 1.25, state="DEFERRED"), op="receive_deferred"),
        settle("complete", 4.9, 5.0, "hq", "c", 3),
        seen(5.0, 5.1, "ht/subscriptions/all", msg("t-small", 1, 2.05), msg("t-big", 2, 2.05), msg("t-maybe", 3, 2.25)),
        seen(5.0, 5.1, "ht/subscriptions/big", msg("t-big", 1, 2.05), msg("t-maybe", 2, 2.25)),
        seen(5.2, 5.3, "hq-sessions", msg("s1", 1, 2.45, "S")),
        seen(5.4, 5.5, "hq-sessions", msg("s1", 1, 2.45, "S"), msg("s2", 2, 2.65, "S")),
        {"op": "drain_start", "t0": 5.9},
        settle("complete", 5.9, 6.0, "hq-sessions", "s1", 1),
        settle("complete", 5.9, 6.0, "hq-sessions", "s2", 2),
        settle("complete", 5.9, 6.0, "hq/$DeadLetterQueue", "b", 2),
        settle("complete", 5.9, 6.0, "ht/subscriptions/all", "t-small", 1),
        settle("complete", 5.9, 6.0, "ht/subscriptions/all", "t-big", 2),
        settle("complete", 5.9, 6.0, "ht/subscriptions/all", "t-maybe", 3, outcome="unknown"),
        settle("complete", 5.9, 6.0, "ht/subscriptions/big", "t-big", 1),
        seen(6.0, 6.1, "ht/subscriptions/big", msg("t-maybe", 2, 2.25), op="peek"),
        seen(6.0, 6.1, "hq", op="peek"),
        {"op": "end", "t0": 6.2},
    ]


def kinds(history: List[Dict[str, Any]]) -> List[str]:
    return sorted({violation.kind for violation in check(history)})


def test_clean_history_passes() -> None:
    assert [str(v) for v in check(clean_history())] == []


def find(history: List[Dict[str, Any]], op: str, entity: Optional[str] = None, message_id: Optional[str] = None) -> Dict[str, Any]:
    for record in history:
        if record.get("op") != op or (entity and record.get("entity") != entity):
            continue
        if message_id is None or record.get("id") == message_id or any(m["id"] == message_id for m in record.get("messages", [])):
            return record
    raise KeyError((op, entity, message_id))


def drop_message(record: Dict[str, Any], message_id: str) -> None:
    record["messages"] = [m for m in record["messages"] if m["id"] != message_id]


def mutate_lost(h):  # an acknowledged send never seen
    drop_message(find(h, "receive", "hq", "a"), "a")
    h.remove(find(h, "complete", "hq", "a"))


def mutate_lost_scheduled(h):  # SCH-3: a scheduled message never activated
    drop_message(find(h, "receive", "hq", "sch"), "sch")
    h.remove(find(h, "complete", "hq", "sch"))


def mutate_failed_send(h):
    find(h, "receive", "hq", "a")["messages"].append(msg("failed", 9, 1.45))


def mutate_phantom(h):
    find(h, "receive", "hq", "a")["messages"].append(msg("never-sent", 9, 1.0))


def mutate_duplicate(h):  # an indeterminate send enqueued twice
    h.append(seen(5.6, 5.7, "hq", msg("lost-maybe", 7, 1.45), msg("lost-maybe", 8, 1.45)))


def mutate_sequence_reused(h):
    h.append(seen(5.6, 5.7, "hq", msg("lost-maybe", 1, 1.45)))


def mutate_sequence_reused_by_schedule(h):  # a scheduling number given to another message
    h.append(seen(5.6, 5.7, "hq", msg("lost-maybe", 5, 1.45)))


def mutate_sequence_order(h):  # a acknowledged before b was sent, but a got the higher number
    record = find(h, "receive", "hq", "a")
    record["messages"][0]["seq"] = 4


def mutate_batch_order(h):
    record = find(h, "receive", "hq", "b")
    record["messages"][1]["seq"], record["messages"][2]["seq"] = 3, 2
    for r in h:
        if r.get("id") in ("b", "c"):
            r["seq"] = {"b": 3, "c": 2}[r["id"]]
    for r in h:
        for m in r.get("messages", []):
            if r["op"] != "send" and m["id"] in ("b", "c"):
                m["seq"] = {"b": 3, "c": 2}[m["id"]]


def mutate_enqueued_time(h):
    find(h, "receive", "hq", "a")["messages"][0]["enqueued"] = 3.0


def mutate_completed_redelivered(h):
    h.append(seen(5.6, 5.7, "hq", msg("a", 1, 1.05)))


def mutate_completed_then_dead_lettered(h):  # the same family: its DLQ
    h.append(seen(5.6, 5.7, "hq/$DeadLetterQueue", msg("a", 1, 1.05)))


def mutate_dead_letter_back(h):
    h.append(seen(5.6, 5.7, "hq", msg("b", 2, 1.25)))
    h.append(settle("complete", 5.7, 5.8, "hq", "b", 2, outcome="fail"))


def mutate_dead_letter_missing(h):
    h.remove(find(h, "receive", "hq/$DeadLetterQueue", "b"))


def mutate_deferred_lost(h):
    h.remove(find(h, "receive_deferred", "hq", "c"))
    h.remove(find(h, "complete", "hq", "c"))


def mutate_deferred_plain(h):
    h.append(seen(4.55, 4.6, "hq", msg("c", 3, 1.25)))


def mutate_deferred_not_found(h):
    h.append({"op": "receive_deferred", "client": "r", "entity": "hq", "t0": 4.6, "t1": 4.7, "outcome": "fail", "error": "MessageNotFoundError", "seqs": [3]})


def mutate_scheduled_early(h):
    record = find(h, "receive", "hq", "sch")
    record["t0"], record["t1"] = 2.0, 2.5
    find(h, "complete", "hq", "sch").update(t0=2.6, t1=2.7)


def mutate_session_order(h):
    first = find(h, "receive", "hq-sessions", "s1")
    first["messages"] = [msg("s2", 2, 2.65, "S")]


def mutate_topic_partial(h):  # an indeterminate publish in one matching subscription only
    drop_message(find(h, "receive", "ht/subscriptions/big", "t-maybe"), "t-maybe")
    drop_message(find(h, "peek", "ht/subscriptions/big", "t-maybe"), "t-maybe")


def mutate_topic_missing(h):  # an acknowledged publish missing from a matching subscription
    drop_message(find(h, "receive", "ht/subscriptions/big", "t-big"), "t-big")


def mutate_vanished(h):  # abandoned, then never delivered again
    h.remove(find(h, "complete", "hq-sessions", "s2"))


def mutate_unfinished(h):
    h.remove(find(h, "end"))


def mutate_drain_timed_out(h):
    find(h, "end")["drained"] = False


def mutate_filter(h):
    find(h, "receive", "ht/subscriptions/big", "t-big")["messages"].append(msg("t-small", 3, 2.05))


@pytest.mark.parametrize(
    "mutation, expected",
    [
        (mutate_lost, "lost"),
        (mutate_lost_scheduled, "lost"),
        (mutate_failed_send, "failed-send-appeared"),
        (mutate_phantom, "phantom"),
        (mutate_duplicate, "duplicate"),
        (mutate_sequence_reused, "sequence-reused"),
        (mutate_sequence_reused_by_schedule, "sequence-reused"),
        (mutate_sequence_order, "sequence-order"),
        (mutate_batch_order, "sequence-order"),
        (mutate_enqueued_time, "enqueued-time"),
        (mutate_completed_redelivered, "completed-redelivered"),
        (mutate_completed_then_dead_lettered, "completed-redelivered"),
        (mutate_dead_letter_back, "dead-letter"),
        (mutate_dead_letter_missing, "dead-letter"),
        (mutate_deferred_lost, "deferred"),
        (mutate_deferred_plain, "deferred"),
        (mutate_deferred_not_found, "deferred"),
        (mutate_scheduled_early, "scheduled-early"),
        (mutate_session_order, "session-order"),
        (mutate_topic_partial, "topic-partial"),
        (mutate_topic_missing, "lost"),
        (mutate_filter, "filter"),
        (mutate_vanished, "vanished"),
        (mutate_unfinished, "unfinished"),
        (mutate_drain_timed_out, "unfinished"),
    ],
)
def test_each_violation_is_found(mutation, expected: str) -> None:
    history = copy.deepcopy(clean_history())
    mutation(history)
    assert expected in kinds(history), [str(v) for v in check(history)]


def test_indeterminate_send_may_be_missing_or_present_once() -> None:
    history = copy.deepcopy(clean_history())
    drop_message(find(history, "receive", "hq", "a"), "a")
    history.remove(find(history, "complete", "hq", "a"))
    find(history, "send", "hq", "a")["outcome"] = "unknown"
    assert kinds(history) == []
    # once present, as in the clean history: nothing either (seen twice with one number is a
    # redelivery, not a duplicate)
    history = copy.deepcopy(clean_history())
    history.append(seen(5.6, 5.7, "hq", msg("lost-maybe", 7, 1.45)))
    history.append(seen(5.8, 5.9, "hq", msg("lost-maybe", 7, 1.45)))
    history.append(settle("complete", 5.9, 5.95, "hq", "lost-maybe", 7))
    assert kinds(history) == []


def test_indeterminate_complete_may_be_redelivered() -> None:
    history = copy.deepcopy(clean_history())
    find(history, "complete", "hq", "a")["outcome"] = "unknown"
    history.append(seen(5.6, 5.7, "hq", msg("a", 1, 1.05)))
    assert kinds(history) == []


def test_scheduled_time_counts_in_whole_milliseconds() -> None:
    # The SDK sends the scheduled time as an AMQP timestamp (milliseconds, truncated): a
    # delivery within the scheduled millisecond is on time.
    history = copy.deepcopy(clean_history())
    find(history, "schedule", "hq", "sch")["messages"][0]["scheduled_for"] = 4.0009
    find(history, "receive", "hq", "sch").update(t0=3.9, t1=4.0002)
    assert kinds(history) == []
    find(history, "receive", "hq", "sch").update(t0=3.9, t1=3.9995)
    assert kinds(history) == ["scheduled-early"]


def test_deferred_message_may_be_gone_after_an_indeterminate_complete() -> None:
    history = copy.deepcopy(clean_history())
    find(history, "complete", "hq", "c")["outcome"] = "unknown"
    history.append({"op": "receive_deferred", "client": "r", "entity": "hq", "t0": 5.1, "t1": 5.2, "outcome": "fail", "error": "MessageNotFoundError", "seqs": [3]})
    assert kinds(history) == []


def test_deferred_message_may_be_refused_while_a_receive_by_number_may_hold_its_lock() -> None:
    # A receive by number whose answer was lost may have locked the message: the broker
    # refuses the number as not found until that lock runs out (LCK-4), then serves it again.
    not_found = {"op": "receive_deferred", "client": "r2", "entity": "hq", "t0": 4.65, "t1": 4.7, "outcome": "fail", "error": "MessageNotFoundError", "seqs": [3]}
    history = copy.deepcopy(clean_history())
    history.append({"op": "receive_deferred", "client": "r", "entity": "hq", "t0": 4.55, "t1": 4.6, "outcome": "unknown", "error": "ServiceBusConnectionError", "seqs": [3]})
    history.append(not_found)
    assert kinds(history) == []
    # Without that receive the refusal is a violation (the message was deferred and free).
    history = copy.deepcopy(clean_history())
    history.append(not_found)
    assert kinds(history) == ["deferred"]
