"""Checks a recorded client history (``workload.py``'s JSON lines) against Service Bus's
guarantees. Pure: records in, violations out; no broker, no clock, no I/O.

A history is a list of operation records, each with ``op``, ``client``, ``entity``, ``t0`` /
``t1`` (wall-clock seconds before the call and after its outcome) and ``outcome``: ``ok``
(acknowledged), ``unknown`` (indeterminate: a retryable error, may or may not have taken
effect) or ``fail`` (a final error: did not take effect). Operations: ``send`` (``messages``:
``id``, ``session``, ``amount``, ``scheduled_for``), ``schedule`` (one message; ``seqs``, the
scheduling sequence numbers, when ok), ``receive`` / ``receive_deferred`` / ``peek``
(``messages`` seen: ``id``, ``seq``, ``enqueued``, ``session``, ``state``), ``complete`` /
``abandon`` / ``dead_letter`` / ``defer`` (``id``, ``seq``), and ``meta`` (the topics'
subscriptions and their filters, the session entities).

Entities are named as the SDK addresses them: ``queue``, ``topic/subscriptions/name``, and
``<entity>/$DeadLetterQueue``; a dead-letter queue belongs to its parent's *family* (it keeps
the parent's sequence numbers). Message ids are unique per send attempt.

The checks, with the rule IDs of /work/shared/SEMANTICS.md they rest on:

- ``lost``: an acknowledged send (or schedule) is seen (delivered, dead-lettered, or still
  present in the final peek) in every entity it was addressed to (SEQ-1, LCK-1, DLQ-2, SCH-3).
- ``failed-send-appeared``: a send the SDK reported as failed for good is never seen.
- ``phantom``: nothing is seen that was never sent there.
- ``duplicate``: a message has one sequence number per entity: one send, acknowledged or
  indeterminate, is enqueued at most once (SEQ-1; the workload's SDK retries are off, so a
  second copy can only come from the broker).
- ``sequence-reused``: one sequence number names one message per entity, scheduling numbers
  included (SEQ-1).
- ``sequence-order``: if send A was acknowledged before send B was invoked, A's sequence
  number in an entity is lower than B's; within a batch, numbers follow the batch (SEQ-2).
- ``vanished``: a message seen once is completed in the end (the drain completes everything)
  or still there in the final peek: abandoned, lock-lost and redelivered messages come back
  (LCK-1, LCK-2).
- ``unfinished``: the history has an ``end`` record saying the workload finished its drain;
  without it the final state is unknown and nothing else is checked.
- ``enqueued-time``: an acknowledged send's enqueued time lies within its call (SEQ-3).
- ``completed-redelivered``: after an acknowledged complete, the message is never seen again
  in its entity or its dead-letter queue (LCK-1).
- ``dead-letter``: after an acknowledged dead-letter the message is not seen in its entity any
  more and is seen in the dead-letter queue (DLQ-2, DLQ-4).
- ``deferred``: after an acknowledged defer the message is only delivered by sequence number,
  and is delivered so (or still present) later; a receive by number is refused as not found
  only after a complete or dead-letter attempted since the defer, or while an earlier receive
  by number may still hold its lock (LCK-4).
- ``scheduled-early``: a scheduled message is not delivered before its time (SCH-2).
- ``session-order``: within a session, messages are first delivered in sequence-number order
  (SES-1, SEQ-2).
- ``topic-partial``: a topic publish reaches every subscription whose filter matches it, or
  none of them; ``filter``: never one whose filter does not match.
"""

from __future__ import annotations

import bisect
import json
import math
import shutil
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

DLQ_SUFFIX = "/$DeadLetterQueue"
# The broker stamps enqueued times in milliseconds; the client's clock reads are on the same
# machine. Allowance for the rounding.
ENQUEUED_SLACK_SECONDS = 0.002
# The workload's lock duration (workload.ENTITIES_TOML): a message a receive by number may
# have locked stays locked, and so refused by number, at most this long after that call.
LOCK_SECONDS = 5.0


@dataclass
class Violation:
    kind: str
    rules: str
    message: str
    evidence: List[Dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.kind} ({self.rules}): {self.message}"]
        lines += ["    " + json.dumps(record, sort_keys=True) for record in self.evidence[:6]]
        return "\n".join(lines)


def family(entity: str) -> str:
    return entity[: -len(DLQ_SUFFIX)] if entity.endswith(DLQ_SUFFIX) else entity


def filter_matches(spec: Dict[str, Any], message: Dict[str, Any]) -> bool:
    kind = spec.get("kind")
    if kind == "true":
        return True
    if kind == "gt":
        value = message.get(spec["property"])
        return value is not None and value > spec["value"]
    raise ValueError(f"unknown filter kind {kind!r}")


@dataclass
class Sighting:
    """One message seen by one receive, deferred receive or peek."""

    entity: str
    message: Dict[str, Any]
    record: Dict[str, Any]
    index: int  # position of the message within its operation

    @property
    def how(self) -> str:
        return self.record["op"]


@dataclass
class Sent:
    id: str
    record: Dict[str, Any]
    position: int  # within a batch
    message: Dict[str, Any]
    targets: List[str]  # entity families it must reach (when acknowledged)
    excluded: List[str]  # subscriptions whose filter does not match

    @property
    def outcome(self) -> str:
        return self.record["outcome"]

    @property
    def scheduled(self) -> bool:
        return self.record["op"] == "schedule" or self.message.get("scheduled_for") is not None


def check(records: Iterable[Dict[str, Any]]) -> List[Violation]:
    records = list(records)
    meta = next((r for r in records if r.get("op") == "meta"), {})
    end = next((r for r in records if r.get("op") == "end"), None)
    if meta and (end is None or end.get("drained") is False):
        return [Violation("unfinished", "-", "the workload did not finish its drain, so the final state is unknown", [end] if end else [])]
    topics: Dict[str, Dict[str, Dict[str, Any]]] = meta.get("topics", {})
    session_entities = set(meta.get("session_entities", []))
    violations: List[Violation] = []

    # -- what was sent -----------------------------------------------------------------------
    sent: Dict[str, Sent] = {}
    for record in records:
        if record.get("op") not in ("send", "schedule"):
            continue
        for position, message in enumerate(record.get("messages", [])):
            entity = record["entity"]
            if entity in topics:
                targets, excluded = [], []
                for name, spec in topics[entity].items():
                    (targets if filter_matches(spec, message) else excluded).append(f"{entity}/subscriptions/{name}")
            else:
                targets, excluded = [entity], []
            sent[message["id"]] = Sent(message["id"], record, position, message, targets, excluded)

    # -- what was seen -----------------------------------------------------------------------
    sightings: Dict[Tuple[str, str], List[Sighting]] = defaultdict(list)  # (family, id) -> ...
    by_entity_seq: Dict[str, Dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for record in records:
        if record.get("op") not in ("receive", "receive_deferred", "peek") or record.get("outcome") != "ok":
            continue
        for index, message in enumerate(record.get("messages", [])):
            sighting = Sighting(record["entity"], message, record, index)
            sightings[(family(record["entity"]), message["id"])].append(sighting)
            by_entity_seq[family(record["entity"])][message["seq"]].add(message["id"])
    for key in sightings:
        sightings[key].sort(key=lambda s: (s.record["t1"], s.index))
    for message_id, send in sent.items():
        if send.record["op"] == "schedule" and send.outcome == "ok":
            for seq in send.record.get("seqs", []):
                by_entity_seq[send.record["entity"]][seq].add(message_id)

    def delivered_seq(fam: str, message_id: str) -> Optional[int]:
        seqs = {s.message["seq"] for s in sightings.get((fam, message_id), []) if s.message.get("state") != "SCHEDULED"}
        return min(seqs) if seqs else None

    # lost / failed-send-appeared / duplicate / topic-partial / filter
    for message_id, send in sent.items():
        seen_in = [target for target in send.targets if sightings.get((target, message_id))]
        if send.outcome == "ok":
            for target in send.targets:
                if target not in seen_in:
                    violations.append(
                        Violation("lost", "SEQ-1, LCK-1, DLQ-2, SCH-3", f"acknowledged send {message_id} never seen in {target}", [send.record])
                    )
        elif send.outcome == "fail" and seen_in:
            first = sightings[(seen_in[0], message_id)][0]
            violations.append(
                Violation("failed-send-appeared", "SEQ-1", f"send {message_id} failed for good but was seen in {seen_in[0]}", [send.record, first.record])
            )
        if send.outcome != "ok" and seen_in and len(seen_in) != len(send.targets):
            missing = sorted(set(send.targets) - set(seen_in))
            violations.append(
                Violation("topic-partial", "SEQ-1", f"publish {message_id} reached {seen_in} but not {missing}", [send.record])
            )
        for other in send.excluded:
            if sightings.get((other, message_id)):
                violations.append(
                    Violation("filter", "SEQ-1", f"{message_id} reached {other}, whose filter does not match it", [send.record, sightings[(other, message_id)][0].record])
                )
        for target in send.targets:
            seqs = sorted({s.message["seq"] for s in sightings.get((target, message_id), []) if s.message.get("state") != "SCHEDULED"})
            if len(seqs) > 1:
                evidence = [send.record] + [s.record for s in sightings[(target, message_id)]]
                violations.append(
                    Violation("duplicate", "SEQ-1", f"send {message_id} ({send.outcome}) enqueued {len(seqs)} times in {target}: sequence numbers {seqs}", evidence)
                )

    # vanished: seen once, then neither completed nor left at the end
    drained = "drain_start" in {r.get("op") for r in records}
    settled = {
        (family(r["entity"]), r["id"])
        for r in records
        if r.get("op") == "complete" and r.get("outcome") in ("ok", "unknown")
    }
    for message_id, send in sent.items():
        if not drained:
            break
        for target in send.targets:
            seen = sightings.get((target, message_id), [])
            if not seen or (target, message_id) in settled:
                continue
            if any(s.how == "peek" for s in seen):  # still there at the end
                continue
            violations.append(
                Violation(
                    "vanished",
                    "LCK-1, LCK-2",
                    f"{message_id} ({send.outcome} send) was seen in {target} but never completed and is not there at the end",
                    [send.record] + [s.record for s in seen],
                )
            )

    # phantom
    for (fam, message_id), seen in sightings.items():
        send = sent.get(message_id)
        if send is None or (fam not in send.targets and fam not in send.excluded):
            violations.append(Violation("phantom", "SEQ-1", f"{message_id} seen in {fam} but never sent there", [seen[0].record]))

    # sequence-reused
    for fam, seqs in by_entity_seq.items():
        for seq, ids in seqs.items():
            if len(ids) > 1:
                violations.append(Violation("sequence-reused", "SEQ-1", f"sequence number {seq} in {fam} names {sorted(ids)}"))

    # sequence-order and enqueued-time
    for fam in sorted({t for s in sent.values() for t in s.targets}):
        acknowledged: List[Tuple[Sent, int, Dict[str, Any]]] = []
        for send in sent.values():
            if fam not in send.targets or send.scheduled:
                continue
            seen = [s for s in sightings.get((fam, send.id), []) if s.message.get("state") != "SCHEDULED"]
            if not seen:
                continue
            if send.outcome == "ok":
                acknowledged.append((send, seen[0].message["seq"], seen[0].message))
            enqueued = seen[0].message.get("enqueued")
            if enqueued is not None and send.outcome in ("ok", "unknown"):
                early = enqueued < send.record["t0"] - ENQUEUED_SLACK_SECONDS
                late = send.outcome == "ok" and enqueued > send.record["t1"] + ENQUEUED_SLACK_SECONDS
                if early or late:
                    violations.append(
                        Violation("enqueued-time", "SEQ-3", f"{send.id} in {fam} enqueued at {enqueued:.3f}, outside its send [{send.record['t0']:.3f}, {send.record['t1']:.3f}]", [send.record, seen[0].record])
                    )
        violations += _order_violations(fam, acknowledged)

    # completed-redelivered / dead-letter / deferred
    for record in records:
        if record.get("outcome") != "ok" or record.get("op") not in ("complete", "dead_letter", "defer"):
            continue
        fam, message_id = family(record["entity"]), record["id"]
        later = [s for s in sightings.get((fam, message_id), []) if s.record["t0"] > record["t1"]]
        if record["op"] == "complete":
            if later:
                violations.append(
                    Violation("completed-redelivered", "LCK-1", f"{message_id} seen in {later[0].entity} after its completion was acknowledged", [record, later[0].record])
                )
        elif record["op"] == "dead_letter":
            if record["entity"].endswith(DLQ_SUFFIX):
                continue
            again = [s for s in later if s.entity == record["entity"]]
            if again:
                violations.append(
                    Violation("dead-letter", "DLQ-2", f"{message_id} seen in {record['entity']} after it was dead-lettered", [record, again[0].record])
                )
            in_dlq = [s for s in sightings.get((fam, message_id), []) if s.entity == record["entity"] + DLQ_SUFFIX and s.record["t1"] > record["t0"]]
            if not in_dlq:
                violations.append(
                    Violation("dead-letter", "DLQ-2, DLQ-4", f"{message_id} dead-lettered (acknowledged) but never seen in {record['entity'] + DLQ_SUFFIX}", [record])
                )
        else:
            plain = [s for s in later if s.how == "receive" and s.entity == record["entity"]]
            if plain:
                violations.append(
                    Violation("deferred", "LCK-4", f"{message_id} delivered by a plain receive after it was deferred", [record, plain[0].record])
                )
            by_number = [
                s
                for s in later
                if s.entity == record["entity"] and (s.how == "receive_deferred" or (s.how == "peek" and s.message.get("state") == "DEFERRED"))
            ]
            if not by_number:
                violations.append(
                    Violation("deferred", "LCK-4", f"{message_id} (sequence number {record['seq']}) deferred (acknowledged) but never received by number afterwards", [record])
                )

    # deferred: a deferred message not found by its number, with nothing since its defer
    # that could have removed it
    for record in records:
        if record.get("op") != "receive_deferred" or record.get("error") != "MessageNotFoundError" or len(record.get("seqs", [])) != 1:
            continue
        seq, entity = record["seqs"][0], record["entity"]
        defers = [r for r in records if r.get("op") == "defer" and r.get("outcome") == "ok" and r["entity"] == entity and r["seq"] == seq and r["t1"] < record["t0"]]
        if not defers:
            continue
        last = max(defers, key=lambda r: r["t1"])
        removers = [
            r
            for r in records
            if r.get("op") in ("complete", "dead_letter")
            and r.get("outcome") in ("ok", "unknown")
            and r["entity"] == entity
            and r["seq"] == seq
            and r["t1"] > last["t0"]
            and r["t0"] < record["t1"]
        ]
        # The broker refuses a number whose message is locked, as not found: a receive by
        # number since the defer, acknowledged or not (its answer lost with the connection),
        # may hold the lock until its lock duration runs out.
        lockers = [
            r
            for r in records
            if r.get("op") == "receive_deferred"
            and r.get("outcome") in ("ok", "unknown")
            and r["entity"] == entity
            and seq in r.get("seqs", [])
            and r["t1"] > last["t0"]
            and r["t0"] < record["t0"] < r["t1"] + LOCK_SECONDS
        ]
        if not removers and not lockers:
            violations.append(
                Violation("deferred", "LCK-4", f"deferred message {last['id']} (sequence number {seq}) not found by its number", [last, record])
            )

    # scheduled-early
    for message_id, send in sent.items():
        at = send.message.get("scheduled_for")
        if at is None:
            continue
        # The scheduled time travels as an AMQP timestamp, whole milliseconds (truncated).
        at = math.floor(at * 1000) / 1000
        for target in send.targets:
            for s in sightings.get((target, message_id), []):
                if s.how != "peek" and s.record["t1"] < at:
                    violations.append(
                        Violation("scheduled-early", "SCH-2", f"{message_id} scheduled for {at:.3f} delivered by {s.record['t1']:.3f}", [send.record, s.record])
                    )

    # session-order
    for entity in session_entities:
        first_seen: Dict[str, List[Sighting]] = defaultdict(list)
        seen_ids = set()
        deliveries = sorted(
            (s for (fam, _), ss in sightings.items() if fam == entity for s in ss if s.how == "receive" and s.entity == entity),
            key=lambda s: (s.record["t1"], s.index),
        )
        for s in deliveries:
            if s.message["id"] in seen_ids:
                continue
            seen_ids.add(s.message["id"])
            first_seen[s.message.get("session")].append(s)
        for session, firsts in first_seen.items():
            for before, after in zip(firsts, firsts[1:]):
                if after.message["seq"] < before.message["seq"]:
                    violations.append(
                        Violation(
                            "session-order",
                            "SES-1, SEQ-2",
                            f"session {session}: {after.message['id']} (seq {after.message['seq']}) first delivered after {before.message['id']} (seq {before.message['seq']})",
                            [before.record, after.record],
                        )
                    )
    return violations


def _order_violations(fam: str, acknowledged: List[Tuple[Sent, int, Dict[str, Any]]]) -> List[Violation]:
    """SEQ-2 over acknowledged sends of one entity: real-time order implies sequence order."""
    violations: List[Violation] = []
    # Within a batch.
    batches: Dict[int, List[Tuple[int, int, Sent]]] = defaultdict(list)
    for send, seq, _ in acknowledged:
        batches[id(send.record)].append((send.position, seq, send))
    for members in batches.values():
        members.sort(key=lambda m: m[0])
        for (_, seq_a, a), (_, seq_b, b) in zip(members, members[1:]):
            if seq_b <= seq_a:
                violations.append(
                    Violation("sequence-order", "SEQ-2", f"in {fam}, batch message {b.id} got {seq_b}, not above {a.id}'s {seq_a}", [a.record])
                )
    # Across operations: A acknowledged before B was invoked => seq(A) < seq(B).
    by_end = sorted(acknowledged, key=lambda entry: entry[0].record["t1"])
    ends = [entry[0].record["t1"] for entry in by_end]
    # prefix maximum of the sequence numbers of sends ordered by acknowledgement time
    prefix: List[Tuple[int, Sent]] = []
    for send, seq, _ in by_end:
        prefix.append(max(prefix[-1], (seq, send), key=lambda p: p[0]) if prefix else (seq, send))
    for send, seq, _ in acknowledged:
        count = bisect.bisect_left(ends, send.record["t0"])
        if count == 0:
            continue
        highest, earlier = prefix[count - 1]
        if highest >= seq and earlier.record is not send.record:
            violations.append(
                Violation(
                    "sequence-order",
                    "SEQ-2",
                    f"in {fam}, {earlier.id} was acknowledged before {send.id} was sent, but got sequence number {highest} >= {seq}",
                    [earlier.record, send.record],
                )
            )
    return violations


def summary(records: List[Dict[str, Any]], violations: List[Violation]) -> str:
    operations = Counter((r.get("op"), r.get("outcome")) for r in records if r.get("outcome"))
    messages = Counter(r["outcome"] for r in records if r.get("op") in ("send", "schedule") for _ in r.get("messages", []))
    seen = sum(len(r.get("messages", [])) for r in records if r.get("op") in ("receive", "receive_deferred") and r.get("outcome") == "ok")
    seen_ids = {m["id"] for r in records if r.get("op") in ("receive", "receive_deferred", "peek") and r.get("outcome") == "ok" for m in r.get("messages", [])}
    indeterminate = [m["id"] for r in records if r.get("op") in ("send", "schedule") and r.get("outcome") == "unknown" for m in r.get("messages", [])]
    settles = Counter((r["op"], r["outcome"]) for r in records if r.get("op") in ("complete", "abandon", "dead_letter", "defer"))
    lines = [
        "operations: " + ", ".join(f"{op} {outcome} {count}" for (op, outcome), count in sorted(operations.items())),
        f"messages sent: {messages.get('ok', 0)} acknowledged, {messages.get('unknown', 0)} indeterminate "
        f"({sum(1 for i in indeterminate if i in seen_ids)} of them enqueued), {messages.get('fail', 0)} failed; {seen} deliveries; "
        f"settlements not acknowledged: {sum(c for (op, outcome), c in settles.items() if outcome != 'ok')}",
        f"violations: {len(violations)}" + ("" if not violations else " (" + ", ".join(f"{k} {c}" for k, c in sorted(Counter(v.kind for v in violations).items())) + ")"),
    ]
    return "\n".join(lines)


def report(path: Any, heading: str) -> Tuple[List[Violation], List[Dict[str, Any]]]:
    """Reads the history at ``path``, checks it, and prints ``heading``, the summary, every
    violation and every workload client that crashed (to stderr); returns the violations
    and the crashed clients' records (what the runners judge their exit status by)."""
    with open(path, encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    violations = check(records)
    print(heading)
    print(summary(records, violations))
    for violation in violations:
        print(f"VIOLATION {violation}")
    crashed = [record for record in records if record.get("op") == "client_crash"]
    for crash in crashed:
        print(f"workload client crashed: {crash}", file=sys.stderr)
    return violations, crashed


def main(argv: List[str]) -> int:
    """``python checker.py HISTORY.jsonl``: checks a recorded history again."""
    records = [json.loads(line) for line in open(argv[0], encoding="utf-8") if line.strip()]
    violations = check(records)
    print(summary(records, violations))
    for violation in violations:
        print(f"VIOLATION {violation}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def conclude(violations: List[Violation], failed: bool, crashed: List[Dict[str, Any]], keep: bool, directory: Any, kept: str) -> int:
    """How a runner ends after ``report``: keeps ``directory`` (saying it holds ``kept``) when
    something went wrong or ``keep`` asks, else removes it; returns the exit status — 1 for a
    violation, 2 for a failed or crashed run, 0 otherwise."""
    if violations or failed or crashed or keep:
        print(f"{kept} kept in {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    if violations:
        return 1
    return 2 if failed or crashed else 0

