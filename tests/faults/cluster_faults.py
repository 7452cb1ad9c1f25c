"""The history workload against a ferrobus cluster under seeded faults, then checked.

A cluster of ``--nodes`` nodes (``cluster.Cluster``: one network namespace per node, another
for the clients) elects a leader; the workload (``tests/history/workload.py``, the official
Python SDK) runs on the client host with its connection string naming one node, the entry,
chosen among the followers of the first election so that it is usually not the one failing.
Between rounds, at moments and with parameters drawn from the seed, one fault at a time:

- ``kill-leader``: the leader is killed with SIGKILL and restarted after the hold;
- ``kill-follower``: a follower is, likewise;
- ``pause-leader``: the leader gets SIGSTOP, and SIGCONT after the hold;
- ``isolate-leader``: the leader drops every packet from and to the other nodes (the client
  host still reaches it), healed after the hold;
- ``loss``: the leader and a follower each drop 10-30 % of the other's packets for the hold.

After each fault the runner waits until every node runs and names the same leader, so never
more than one node is down. Then the workload drains every entity and the history checker
(``tests/history/checker.py``) judges it. For each ``kill-leader`` the failover time is the
time from the kill to the end of the first send the workload started after it and saw
acknowledged (the history's wall-clock ``t0``/``t1``); the runner prints each, their median
and maximum, and the time until the surviving nodes agreed on a new leader.

With ``--rolling`` there are no faults: once the traffic runs, every node in turn (the
followers first, the leader last) is stopped with SIGTERM, as an operator's rolling restart
does, started again, and waited for until the cluster is whole. A planned stop must cost the
clients nothing they cannot retry: the runner lists every operation the SDK reported as a
final failure (``outcome`` ``fail``, e.g. a lost lock) and exits 1 on any, as on a violation.
It prints, for each stop, the time to the next acknowledged send started after it, and the
longest a sending client went without an acknowledged send.

With ``--placement spread`` every node runs ``[cluster] placement = "spread"``: the
workload's queue ``hq``, session queue ``hq-sessions`` and topic ``ht`` (with its
subscriptions) are three Raft groups, each with a leader of its own. The node ids are then
chosen (``cluster.spread_ids``, unless ``--node-ids``) so that the three groups prefer three
different nodes (the members hand a group back to its preferred node once it is up again, so
the leaders stay spread); with ids 1-3 all three would prefer node 1. "The leader" a
leader-targeted fault hits is the leader of one of the workload's groups, drawn from the seed
(an extra draw in this mode only, so the one-leader mode's seeds replay as before); the
follower of ``kill-follower`` and ``loss`` is a node that does not lead that group (it may
lead another). ``wait_whole`` also waits until every node names the same leader of each of
the workload's groups. A kill-leader's failover is measured to the next acknowledged send
to the killed group's entity. Faults that need one leader for everything (a planned
leadership transfer, adding a node: refused in this mode) are not among this runner's kinds.

    python tests/faults/cluster_faults.py [--rounds N] [--seed S] [--auth none|keys]
                                          [--nodes 3|5] [--duration SECONDS] [--keep]
                                          [--rolling [--passes N]]
                                          [--client-routing forward|proxy]
                                          [--placement one-leader|spread [--node-ids 2,3,6]]

Prints the seed, the entry node, each fault with its time, the counts and every violation;
exits 1 on a violation, 2 when the run itself failed (a node did not start or rejoin, no
leader was elected, the workload crashed). ``--seed`` replays the faults' choices and
moments (not the threads' interleaving or the broker's timing). As root (network namespaces),
with ``FERROBUS_BIN`` or ``target/release/ferrobus``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "history"))

import checker  # noqa: E402
import cluster as cluster_module  # noqa: E402
import netns  # noqa: E402
from workload import QUEUE, SESSION_QUEUE, TOPIC  # noqa: E402

# The placement groups of the workload's entities with placement "spread" (a topic's group
# carries its subscriptions).
WORKLOAD_GROUPS = (QUEUE, SESSION_QUEUE, TOPIC)

FAULTS = ("kill-leader", "kill-follower", "pause-leader", "isolate-leader", "loss")
# Seconds a fault round takes beyond its hold (a restart, an election, a rejoin): no fault
# starts later than its hold and this before the traffic ends.
ROUND_MARGIN_SECONDS = 5.0
RECOVERY_TIMEOUT_SECONDS = 30.0
# Traffic before the first planned stop of a rolling restart, and between stops.
ROLLING_PAUSE_SECONDS = 3.0


class Fault:
    """One injected fault: what, on which node, when (wall clock), and what followed."""

    def __init__(
        self, kind: str, node: int, at: float, hold: float, entry: int, detail: str = "", group: Optional[str] = None
    ) -> None:
        self.kind = kind
        # With placement "spread": the placement group whose leader (or a follower of
        # which) the fault hit.
        self.group = group
        self.node = node
        self.at = at
        self.hold = hold
        self.on_entry = node == entry
        self.detail = detail
        # Seconds from the fault to the surviving majority agreeing on another leader
        # (kill-leader only), and from the fault to the next acknowledged send.
        self.election: Optional[float] = None
        self.next_ack: Optional[float] = None


def next_acknowledged(sends: List[Dict], after: float) -> Optional[float]:
    """Seconds from ``after`` to the end of the first acknowledged send started at or after
    it, or ``None``."""
    ends = [record["t1"] for record in sends if record["t0"] >= after]
    return min(ends) - after if ends else None


def acknowledged_sends(history: Path) -> List[Dict]:
    sends = []
    with open(history, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("op") in ("send", "schedule") and record.get("outcome") == "ok":
                sends.append(record)
    return sends


def inject(
    cluster: cluster_module.Cluster, fault: str, hold: float, pick: int, percent: int, entry: int, group: Optional[str] = None
) -> Fault:
    """Injects ``fault`` on the current leader (or the follower ``pick`` indexes), holds it
    ``hold`` seconds, undoes it and waits until the cluster is whole again. With ``group``
    (placement "spread"), the leader is placement group ``group``'s, and the followers the
    nodes that do not lead it."""
    if group is None:
        leader = cluster.wait_leader(RECOVERY_TIMEOUT_SECONDS)
    else:
        leader = cluster.wait_group_leader(group, RECOVERY_TIMEOUT_SECONDS)
    followers = [node for node in cluster.ids if node != leader]
    follower = followers[pick % len(followers)]
    # With placement "spread", what the hit node leads when the fault starts.
    led = ""
    if group is not None:
        leaders = cluster.group_leaders()
        target = leader if fault != "kill-follower" else follower
        led = f"group {group}; node {target} leads {', '.join(sorted(name for name, node in leaders.items() if node == target)) or 'none of the workload groups'}"

    def new_leader(timeout: float, excluding: int) -> int:
        if group is None:
            return cluster.wait_leader(timeout, excluding=excluding)
        return cluster.wait_group_leader(group, timeout, excluding=excluding)

    at = time.time()
    if fault == "kill-leader":
        record = Fault(fault, leader, at, hold, entry, group=group)
        cluster.kill(leader)
        new = new_leader(RECOVERY_TIMEOUT_SECONDS, leader)
        record.election = time.time() - at
        record.detail = f"node {new} leads after {record.election:.2f} s"
        time.sleep(max(0.0, at + hold - time.time()))
        cluster.start(leader)
    elif fault == "kill-follower":
        record = Fault(fault, follower, at, hold, entry, group=group)
        cluster.kill(follower)
        time.sleep(hold)
        cluster.start(follower)
    elif fault == "pause-leader":
        record = Fault(fault, leader, at, hold, entry, group=group)
        cluster.pause(leader)
        record.detail = hold_watching(cluster, leader, at, hold, new_leader)
        cluster.resume(leader)
    elif fault == "isolate-leader":
        record = Fault(fault, leader, at, hold, entry, group=group)
        cluster.isolate(leader)
        record.detail = hold_watching(cluster, leader, at, hold, new_leader)
        cluster.heal()
    else:
        record = Fault(fault, leader, at, hold, entry, f"{percent} % loss with node {follower}", group=group)
        cluster.lossy(leader, follower, percent)
        time.sleep(hold)
        cluster.heal()
    whole = cluster.wait_whole(RECOVERY_TIMEOUT_SECONDS)
    after = f"whole again after {time.time() - at:.1f} s, node {whole} leads"
    if group is not None:
        after += " (" + ", ".join(f"{name} {node}" for name, node in cluster.group_leaders().items()) + ")"
    record.detail = "; ".join(part for part in (led, record.detail, after) if part)
    return record


def hold_watching(cluster: cluster_module.Cluster, leader: int, at: float, hold: float, new_leader=None) -> str:
    """Holds a fault on ``leader`` until ``hold`` seconds after ``at``, meanwhile watching
    for the other nodes to agree on another leader (``new_leader(timeout, excluding)``,
    default ``cluster.wait_leader``); says whether and when they did."""
    if new_leader is None:
        new_leader = lambda timeout, excluding: cluster.wait_leader(timeout, excluding=excluding)  # noqa: E731
    try:
        new = new_leader(max(0.1, at + hold - time.time()), leader)
        detail = f"node {new} leads after {time.time() - at:.2f} s"
    except RuntimeError:
        detail = "no other leader during the hold"
    time.sleep(max(0.0, at + hold - time.time()))
    return detail


def roll(cluster: cluster_module.Cluster, entry: int, started: float, passes: int = 1) -> List[Fault]:
    """Restarts every node in turn with SIGTERM, the followers first and the leader last,
    each time waiting until the cluster is whole again, ``passes`` times; returns the stops
    (kind ``stop``). With placement "spread" (every node may lead some group) the nodes that
    lead fewer of the workload's groups go first, the metadata group's leader last."""
    stops = []
    for _ in range(passes):
        leader = cluster.wait_whole(RECOVERY_TIMEOUT_SECONDS)
        order = [node for node in cluster.ids if node != leader]
        if cluster.groups:
            leaders = cluster.group_leaders()
            order.sort(key=lambda node: sum(1 for led in leaders.values() if led == node))
        order.append(leader)
        stops.extend(roll_once(cluster, entry, started, order))
    return stops


def roll_once(cluster: cluster_module.Cluster, entry: int, started: float, order: List[int]) -> List[Fault]:
    stops = []
    for node in order:
        time.sleep(ROLLING_PAUSE_SECONDS)
        leading = cluster.wait_whole(RECOVERY_TIMEOUT_SECONDS)
        at = time.time()
        record = Fault("stop", node, at, 0.0, entry)
        code = cluster.stop(node)
        stopped = time.time() - at
        if code != 0:
            raise RuntimeError(f"node {node} exited with {code} after SIGTERM; see {cluster.log_path(node)}")
        cluster.start(node)
        whole = cluster.wait_whole(RECOVERY_TIMEOUT_SECONDS)
        record.detail = (
            f"{'the leader, ' if node == leading else ''}stopped in {stopped:.2f} s, "
            f"whole again after {time.time() - at:.1f} s, node {whole} leads"
        )
        stops.append(record)
        print(describe(record, started), flush=True)
    return stops


def final_failures(history: Path) -> List[Dict]:
    """The operations the SDK reported as final failures (it would not retry them)."""
    with open(history, encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    return [record for record in records if record.get("outcome") == "fail"]


def longest_send_gap(sends: List[Dict]) -> Optional[tuple]:
    """The longest time one sending client went between two acknowledged sends: (seconds,
    client, end of the gap)."""
    by_client: Dict[str, List[float]] = {}
    for record in sends:
        by_client.setdefault(record.get("client", ""), []).append(record["t1"])
    longest = None
    for client, ends in by_client.items():
        ends.sort()
        for before, after in zip(ends, ends[1:]):
            if longest is None or after - before > longest[0]:
                longest = (after - before, client, after)
    return longest


def print_rolling(stops: List[Fault], sends: List[Dict], failures: List[Dict], started: float) -> None:
    for stop in stops:
        stop.next_ack = next_acknowledged(sends, stop.at)
    listed = ", ".join(f"{stop.next_ack:.2f}" if stop.next_ack is not None else "none" for stop in stops)
    print(f"rolling restart: from each SIGTERM to the next acknowledged send, s: {listed}")
    gap = longest_send_gap(sends)
    if gap is not None:
        print(f"rolling restart: the longest a sender went without an acknowledged send: {gap[0]:.2f} s ({gap[1]}, ending at {gap[2] - started:.1f} s)")
    print(f"rolling restart: {len(failures)} operations failed in a way the SDK does not retry")
    for record in failures:
        print(
            f"FINAL FAILURE {record.get('client')} {record.get('op')} {record.get('entity')} at {record.get('t0', started) - started:.2f} s: {record.get('error')}",
            flush=True,
        )


def describe(fault: Fault, started: float) -> str:
    entry = " (the entry node)" if fault.on_entry else ""
    return f"  {fault.at - started:6.1f} s  {fault.kind} node {fault.node}{entry} for {fault.hold:.1f} s: {fault.detail}"


def print_failovers(faults: List[Fault], sends: List[Dict]) -> List[float]:
    """Fills in each fault's next acknowledged send (to its group's entity, with placement
    "spread") and prints the kill-leader failovers; returns them (seconds)."""
    for fault in faults:
        if fault.group is None:
            fault.next_ack = next_acknowledged(sends, fault.at)
        else:
            fault.next_ack = next_acknowledged([send for send in sends if send.get("entity") == fault.group], fault.at)
    kills = [fault for fault in faults if fault.kind == "kill-leader"]
    times = [fault.next_ack for fault in kills if fault.next_ack is not None]
    if not kills:
        return times
    listed = ", ".join(
        (f"{fault.group} " if fault.group else "")
        + (f"{fault.next_ack:.2f}" + ("*" if fault.on_entry else "") if fault.next_ack is not None else "none")
        for fault in kills
    )
    what = "the leader" if all(fault.group is None for fault in kills) else "a group's leader"
    whose = "" if what == "the leader" else " to that group's entity"
    print(f"failover (kill -9 of {what} to the next acknowledged send{whose}), s: {listed}")
    if times:
        print(f"failover: median {statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} kills")
    if any(fault.on_entry for fault in kills):
        print("  * the killed leader was the entry node: the workload reached the cluster again only once it restarted")
    return times


def print_snapshots(cluster) -> None:
    """How many snapshots each node built and installed (from its log lines)."""
    counted = []
    for node in cluster.ids:
        try:
            text = cluster.log_path(node).read_text(errors="replace")
        except OSError:
            text = ""
        counted.append(
            f"node {node} built {text.count('built a snapshot of the group')}, "
            f"installed {text.count('installed a snapshot of the group')}"
        )
    print(f"snapshots: {'; '.join(counted)}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="faults to inject")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--auth", choices=["none", "keys"], default="keys")
    parser.add_argument("--nodes", type=int, choices=[3, 5], default=3)
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic (default: 6 a round plus 10, at least 20)")
    parser.add_argument("--faults", default=",".join(FAULTS), help="the kinds to draw from, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (history, node logs)")
    parser.add_argument("--log-level", default=None, help="every node's --log-level (e.g. debug)")
    parser.add_argument("--rolling", action="store_true", help="a rolling restart (SIGTERM each node in turn) instead of faults")
    parser.add_argument("--passes", type=int, default=1, help="with --rolling: how many times every node is restarted")
    parser.add_argument(
        "--compaction-threshold",
        default=None,
        help='every node\'s [storage] compaction_threshold (e.g. "1 MiB": log compactions and snapshots under the faults)',
    )
    parser.add_argument(
        "--client-routing",
        choices=["forward", "proxy"],
        default=None,
        help="every node's [cluster] client_routing (proxy: the follower the workload connects to serves it)",
    )
    parser.add_argument(
        "--placement",
        choices=["one-leader", "spread"],
        default=None,
        help="every node's [cluster] placement (spread: each of the workload's entities' groups has a leader of its own)",
    )
    parser.add_argument(
        "--node-ids",
        default=None,
        help="the nodes' ids, comma-separated (default 1..N; with --placement spread, ids whose preferred leaders spread the workload's groups)",
    )
    args = parser.parse_args(argv)
    spread = args.placement == "spread"
    if args.node_ids:
        ids = [int(part) for part in args.node_ids.split(",") if part]
        if len(ids) != args.nodes or len(set(ids)) != len(ids) or min(ids) < 1:
            parser.error(f"--node-ids: {args.nodes} distinct positive ids")
    else:
        ids = cluster_module.spread_ids(WORKLOAD_GROUPS, args.nodes) if spread else list(range(1, args.nodes + 1))
    why = netns.available()
    if why:
        print(f"skipped: {why}")
        return 0
    kinds = [kind for kind in args.faults.split(",") if kind]
    unknown = set(kinds) - set(FAULTS)
    if unknown or not kinds:
        parser.error(f"--faults: from {', '.join(FAULTS)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    if args.rolling:
        default_duration = (ROLLING_PAUSE_SECONDS + 3.0) * args.nodes * args.passes + 6.0
    else:
        default_duration = max(20.0, 6.0 * args.rounds + 10.0)
    duration = args.duration if args.duration is not None else default_duration
    rng = random.Random(seed)
    what = f"a rolling restart ({args.passes} passes)" if args.rolling else f"{args.rounds} rounds"
    print(
        f"cluster under faults: seed {seed}, {args.nodes} nodes, {what}, "
        f"{duration:.0f} s of traffic, auth {args.auth}"
        + (f", client routing {args.client_routing}" if args.client_routing else "")
        + (f", placement {args.placement}" if args.placement else "")
        + (f", node ids {', '.join(map(str, ids))}" if ids != list(range(1, args.nodes + 1)) else ""),
        flush=True,
    )
    if spread:
        preferred = ", ".join(f"{group} node {cluster_module.preferred_leader(group, ids)}" for group in WORKLOAD_GROUPS)
        print(f"spread: the workload's groups prefer {preferred}; leader faults hit one group's leader, drawn from the seed", flush=True)
        print("spread: no leadership-transfer or add-node fault is drawn (this runner has none; the mode refuses both)", flush=True)
    directory = Path(tempfile.mkdtemp(prefix="ferrobus-cluster-faults-"))
    history = directory / "history.jsonl"
    failed = False
    faults: List[Fault] = []
    with cluster_module.Cluster(
        directory,
        nodes=args.nodes,
        auth=args.auth,
        log_level=args.log_level,
        compaction_threshold=args.compaction_threshold,
        client_routing=args.client_routing,
        placement=args.placement,
        ids=ids,
        groups=WORKLOAD_GROUPS if spread else (),
    ) as cluster:
        try:
            leader = cluster.wait_whole(RECOVERY_TIMEOUT_SECONDS)
        except RuntimeError as error:
            print(f"the cluster did not form: {error}; logs in {directory}", file=sys.stderr)
            return 2
        if spread:
            # The node leading the fewest of the workload's groups, the metadata leader last.
            leaders = cluster.group_leaders()
            entry = min(cluster.ids, key=lambda node: (sum(1 for led in leaders.values() if led == node), node == leader, node))
            led = ", ".join(f"{group} node {node}" for group, node in leaders.items())
            print(f"node {leader} leads the metadata group; {led}; the workload connects to node {entry} ({cluster.address[entry]})", flush=True)
        else:
            entry = min(node for node in cluster.ids if node != leader)
            print(f"node {leader} leads; the workload connects to node {entry} ({cluster.address[entry]})", flush=True)
        workload = cluster.network.start(
            "client",
            [
                sys.executable,
                str(REPO / "tests" / "history" / "workload.py"),
                "--connection-string",
                cluster.connection_string(entry),
                "--history",
                str(history),
                "--seed",
                str(seed),
                "--duration",
                str(duration),
            ],
            stdout=subprocess.DEVNULL,
        )
        started = time.time()
        if args.rolling:
            try:
                faults = roll(cluster, entry, started, args.passes)
            except RuntimeError as error:
                print(f"  {time.time() - started:6.1f} s  the rolling restart failed: {error}", flush=True)
                failed = True
            if time.time() > started + duration:
                print("the traffic ended before the rolling restart did: give it a longer --duration", file=sys.stderr)
                failed = True
        # Each round has its slice of the traffic and starts at a random point of it (at
        # once when the previous round's recovery took longer).
        window = (duration - ROUND_MARGIN_SECONDS) / args.rounds
        for round_number in range(0 if args.rolling else args.rounds):
            # Every choice is drawn before anything is timed, so a seed replays them all.
            moment = window * round_number + rng.uniform(0.1, 0.6) * window
            kind = rng.choice(kinds)
            hold = rng.uniform(0.5, 3.0)
            pick = rng.randrange(1 << 16)
            percent = rng.choice((10, 20, 30))
            group = rng.choice(WORKLOAD_GROUPS) if spread else None
            if max(time.time(), started + moment) + hold + ROUND_MARGIN_SECONDS > started + duration:
                print(f"  the traffic ends: {round_number} of {args.rounds} faults injected", flush=True)
                break
            time.sleep(max(0.0, started + moment - time.time()))
            if workload.poll() is not None:
                break
            try:
                fault = inject(cluster, kind, hold, pick, percent, entry, group)
            except RuntimeError as error:
                print(f"  {time.time() - started:6.1f} s  {kind}: the cluster did not recover: {error}", flush=True)
                failed = True
                break
            faults.append(fault)
            print(describe(fault, started), flush=True)
        try:
            code = workload.wait(timeout=duration + 240)
        except subprocess.TimeoutExpired:
            print("the workload did not end; killed", file=sys.stderr)
            workload.kill()
            code = -9
        if code != 0:
            print(f"workload exited with {code}", file=sys.stderr)
            failed = True
    counts = ", ".join(f"{kind} {sum(1 for fault in faults if fault.kind == kind)}" for kind in FAULTS)
    starts = ", ".join(f"node {node} {count}" for node, count in cluster.starts.items())
    if not history.exists():
        print(f"no history written; logs in {directory}", file=sys.stderr)
        return 2
    report, crashed = checker.report(
        history,
        f"cluster under faults: seed {seed}, entry node {entry}, {len(faults)} faults ({counts}), starts: {starts}",
    )
    sends = acknowledged_sends(history)
    if args.rolling:
        failures = final_failures(history)
        print_rolling(faults, sends, failures, started)
        if failures and not report:
            # The checker found nothing lost, but a planned stop cost a client an operation.
            checker.conclude(report, True, crashed, True, directory, "history and node logs")
            return 1
    else:
        print_failovers(faults, sends)
    if args.compaction_threshold:
        print_snapshots(cluster)
    return checker.conclude(report, failed, crashed, args.keep, directory, "history and node logs")


if __name__ == "__main__":
    sys.exit(main())
