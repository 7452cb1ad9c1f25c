"""A three-node cluster in network namespaces (``cluster.Cluster``), driven by the official
Python SDK from a host of its own: every node names the same leader in ``/health``; a message
sent through a follower is received through another node; after ``kill -9`` of the leader the
others elect a new one within 5 s and a message acknowledged before the kill is received
after it (nothing acknowledged is lost while a majority lives); and the short form of
``cluster_faults.py`` (the history workload through three seeded faults, with keys) ends
with 0 violations; and a rolling restart under that workload (every node stopped with SIGTERM
in turn, without keys) loses nothing and costs the SDK no operation it would not retry. Both
run with a small ``compaction_threshold``: the nodes compact their logs by snapshots (and
restart from them) meanwhile.

Run: ``tests/python/.venv/bin/python -m pytest tests/faults/test_cluster.py -q`` as root
(skipped, saying why, without root, iproute2 or nftables). ``FERROBUS_BIN`` picks the broker
binary.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cluster as cluster_module  # noqa: E402
import cluster_faults  # noqa: E402
import netns  # noqa: E402

CLIENT = str(HERE / "client.py")
QUEUE = "hq"
needs_namespaces = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))


def answer(node: int, role: str, leader) -> dict:
    return {"status": "healthy", "cluster": {"node": node, "role": role, "leader": leader, "term": 2}}


def test_a_leader_is_agreed_by_a_majority_that_includes_its_own_word() -> None:
    agreed = cluster_module.agreed_leader
    assert agreed({1: answer(1, "leader", 1), 2: answer(2, "follower", 1), 3: None}, 3) == 1
    # One vote of three is no majority.
    assert agreed({1: answer(1, "leader", 1), 2: None, 3: None}, 3) is None
    # Two followers agree, but the node they name says it does not lead (yet, or any more).
    assert agreed({1: answer(1, "candidate", None), 2: answer(2, "follower", 1), 3: answer(3, "follower", 1)}, 3) is None
    # An isolated old leader still claims itself; the majority names another.
    assert agreed({1: answer(1, "leader", 1), 2: answer(2, "leader", 2), 3: answer(3, "follower", 2)}, 3) == 2
    assert agreed({node: answer(node, "follower", 4) for node in (1, 2)} | {4: answer(4, "leader", 4)}, 5) == 4


def test_a_group_leader_is_agreed_by_a_majority_that_includes_its_own_word() -> None:
    def spread(node: int, leaders: dict) -> dict:
        return {"status": "healthy", "cluster": {"node": node, "leader": 2, "group_leaders": leaders}}

    agreed = cluster_module.agreed_group_leader
    answers = {2: spread(2, {"hq": 3}), 3: spread(3, {"hq": 3}), 6: None}
    assert agreed(answers, 3, "hq") == 3
    assert agreed(answers, 3, "ht") is None
    # The named node itself names another.
    assert agreed({2: spread(2, {"hq": 3}), 3: spread(3, {"hq": 6}), 6: spread(6, {"hq": 3})}, 3, "hq") is None


def test_the_preferred_leaders_are_the_brokers() -> None:
    # src/cluster/placement.rs's FIXED_PREFERENCES, and the metadata group's lowest id.
    preferred = cluster_module.preferred_leader
    assert [preferred(name, [1, 2, 3]) for name in ("g0", "g1", "g2", "orders", "invoices")] == [3, 2, 3, 1, 2]
    assert preferred(cluster_module.METADATA_GROUP, [6, 2, 3]) == 2
    # With ids 1-3 the workload's three groups all prefer node 1; spread_ids spreads them.
    groups = cluster_faults.WORKLOAD_GROUPS
    assert {preferred(group, [1, 2, 3]) for group in groups} == {1}
    ids = cluster_module.spread_ids(groups, 3)
    assert len({preferred(group, ids) for group in groups}) == 3, ids
    assert len({preferred(group, cluster_module.spread_ids(groups, 5)) for group in groups}) == 3


def test_failover_is_measured_to_the_first_send_started_after_the_fault() -> None:
    sends = [{"t0": 9.0, "t1": 10.5}, {"t0": 10.2, "t1": 12.0}, {"t0": 11.0, "t1": 11.4}]
    # The send in flight at the fault (acknowledged at 10.5) does not count.
    assert cluster_faults.next_acknowledged(sends, 10.0) == pytest.approx(1.4)
    assert cluster_faults.next_acknowledged(sends, 11.5) is None


def client(cluster: cluster_module.Cluster, node: int, *arguments: str, timeout: float = 60, retries: int = 5) -> dict:
    """One ``client.py`` action on the client host, through node ``node``."""
    done = cluster.network.run(
        "client",
        [sys.executable, CLIENT, cluster.connection_string(node), QUEUE, *arguments],
        timeout=timeout,
        capture_output=True,
        text=True,
        env={**os.environ, "FAULT_CLIENT_RETRIES": str(retries)},
    )
    assert done.stdout.strip(), f"the client printed nothing: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="class")
def cluster() -> Iterator[cluster_module.Cluster]:
    with tempfile.TemporaryDirectory(prefix="ferrobus-cluster-") as directory, cluster_module.Cluster(
        Path(directory), nodes=3, auth="keys"
    ) as running:
        yield running


@needs_namespaces
class TestThreeNodes:
    """One cluster (with keys) for these, in this order."""

    def test_every_node_names_the_same_leader(self, cluster: cluster_module.Cluster) -> None:
        leader = cluster.wait_whole(30)
        answers = cluster.healths(cluster.ids)
        for node, health in answers.items():
            assert health is not None, f"node {node} did not answer /health"
            assert health["status"] == "healthy", health
            assert health["cluster"]["node"] == node, health
            assert health["cluster"]["leader"] == leader, answers
            assert health["cluster"]["role"] == ("leader" if node == leader else "follower"), answers
        members = {member["id"] for member in answers[leader]["cluster"]["members"]}
        assert members == set(cluster.ids), answers[leader]

    def test_a_message_sent_through_a_follower_is_received_through_another_node(self, cluster: cluster_module.Cluster) -> None:
        leader = cluster.wait_whole(30)
        first, second = [node for node in cluster.ids if node != leader]
        sent = client(cluster, first, "send", "through-a-follower")
        assert sent == {"ok": ["through-a-follower"], "error": None}, sent
        received = client(cluster, second, "receive", "1", "10")
        assert received == {"ok": ["through-a-follower"], "error": None}, received

    def test_a_killed_leader_is_replaced_and_keeps_what_it_acknowledged(self, cluster: cluster_module.Cluster) -> None:
        leader = cluster.wait_whole(30)
        entry = min(node for node in cluster.ids if node != leader)
        sent = client(cluster, entry, "send", "before-the-kill")
        assert sent == {"ok": ["before-the-kill"], "error": None}, sent
        killed_at = time.monotonic()
        cluster.kill(leader)
        successor = cluster.wait_leader(5, excluding=leader)
        assert time.monotonic() - killed_at < 5
        assert successor != leader
        received = client(cluster, entry, "receive", "1", "10")
        assert received == {"ok": ["before-the-kill"], "error": None}, received
        cluster.start(leader)
        assert cluster.wait_whole(30) == successor


@needs_namespaces
def test_the_history_through_seeded_faults_has_no_violation(capsys: pytest.CaptureFixture) -> None:
    # With keys; the rolling restart below runs without (CI's time: both modes, one run each).
    code = cluster_faults.main(
        ["--rounds", "3", "--duration", "20", "--seed", "2", "--auth", "keys", "--compaction-threshold", "256 KiB"]
    )
    output = capsys.readouterr().out
    print(output)
    faults = re.findall(r"^\s+[\d.]+ s  (\S+) node", output, re.MULTILINE)
    assert len(faults) >= 2, output
    assert code == 0, output
    assert "\nviolations: 0\n" in output, output
    built = [int(count) for count in re.findall(r"node \d+ built (\d+)", output)]
    assert len(built) == 3 and sum(built) >= 1, output


@needs_namespaces
def test_a_rolling_restart_costs_the_sdk_nothing_it_cannot_retry(capsys: pytest.CaptureFixture) -> None:
    # Every node stopped with SIGTERM in turn (the leader last) under the history workload:
    # nothing lost, and no operation failed in a way the SDK does not retry (a lost lock, a
    # management request cut off by a closing connection).
    code = cluster_faults.main(
        ["--rolling", "--duration", "16", "--seed", "3", "--auth", "none", "--compaction-threshold", "256 KiB"]
    )
    output = capsys.readouterr().out
    print(output)
    stops = re.findall(r"^\s+[\d.]+ s  stop node", output, re.MULTILINE)
    assert len(stops) == 3, output
    assert "\nviolations: 0\n" in output, output
    assert "rolling restart: 0 operations failed" in output, output
    assert code == 0, output
