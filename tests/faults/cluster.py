"""A ferrobus cluster of N nodes in network namespaces, and the faults it must survive.

``Cluster`` builds on ``netns.Network``: hosts ``node1`` … ``nodeN`` (one broker each, node id
``i`` on ``10.77.<net>.i``) and a host ``client``. Every node listens for clients on port
5672 (HTTP on 5300) and for its peers on 5700 of its own address, with durable storage in a
directory of its own, the same cluster secret, the same member list and the same entities
(the history workload's by default, ``workload.ENTITIES_TOML``), with or without keys.

Processes are signalled by the PID this harness started (``ip netns exec`` executes the broker
in place, so that PID is the broker's; a deposed leader re-executes itself under the same PID):

- ``start`` / ``stop`` (SIGTERM, waiting for the exit) / ``kill`` (SIGKILL) / ``restart``; ``pause`` / ``resume`` (SIGSTOP / SIGCONT);
- ``isolate`` / ``heal``: a node drops every packet from and to the other nodes (the client
  still reaches it); ``lossy``: two nodes drop a share of each other's packets;
- ``health`` (a node's ``GET /health``, asked from the client host), ``leader`` (the leader a
  majority of the answering nodes agree on, itself saying it leads), ``wait_leader``;
  ``group_leader`` / ``wait_group_leader`` likewise for one placement group of a spread
  cluster (``/health``'s ``cluster.group_leaders``).

With ``placement="spread"`` every node's ``[cluster]`` has ``placement = "spread"``: each queue,
and each topic with its subscriptions, is a Raft group of its own whose first (and, the
members rebalancing, usual) leader is the member ``preferred_leader`` names. Node ids need not
be 1 … N (``ids``): ``spread_ids`` picks ids for which the groups a workload uses prefer
different members (with ids 1, 2, 3 all three of the history workload's groups prefer node 1).

Everything stops when the ``with`` block ends: the nodes are killed and the namespaces removed.
Each node's output goes to ``<directory>/nodeI.log``, a ``==== start`` line before each start.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "history"))

import netns  # noqa: E402
from workload import ENTITIES_TOML  # noqa: E402

AMQP_PORT = 5672
HTTP_PORT = 5300
PEER_PORT = 5700
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
SECRET = "ferrobus-fault-harness-cluster-secret"
START_TIMEOUT_SECONDS = 20.0
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CLONE_NEWNET = 0x40000000
# The cluster's metadata group (``cluster::METADATA_GROUP``).
METADATA_GROUP = "$namespace"


def preferred_leader(group: str, voters: Sequence[int]) -> Optional[int]:
    """The member that should lead placement group ``group`` first, among ``voters``: the
    broker's ``cluster::placement::preferred_leader`` written again (FNV-1a of the name,
    then rendezvous hashing with ``ids::mix``; the lowest id for the metadata group)."""
    if not voters:
        return None
    if group == METADATA_GROUP:
        return min(voters)
    group_hash = _fnv1a(group.encode())
    return max(voters, key=lambda voter: (_mix(group_hash ^ _mix(voter)), -voter))


def spread_ids(groups: Sequence[str], size: int, highest: int = 16) -> List[int]:
    """The first ``size`` node ids (in lexicographic order, none above ``highest``) for which
    ``groups`` prefer as many different members as there can be (min(groups, size))."""
    import itertools

    wanted = min(len(groups), size)
    best: Optional[tuple] = None
    for ids in itertools.combinations(range(1, highest + 1), size):
        spread = len({preferred_leader(group, ids) for group in groups})
        if spread >= wanted:
            return list(ids)
        if best is None or spread > best[0]:
            best = (spread, ids)
    assert best is not None
    return list(best[1])


_MASK = (1 << 64) - 1


def _mix(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def _fnv1a(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & _MASK
    return value


def binary() -> str:
    return os.environ.get("FERROBUS_BIN", str(REPO / "target" / "release" / "ferrobus"))


def node_config(
    node: int,
    addresses: Dict[int, str],
    data_dir: Path,
    auth: str = "none",
    entities: str = ENTITIES_TOML,
    secret: str = SECRET,
    compaction_threshold: Optional[str] = None,
    client_routing: Optional[str] = None,
    placement: Optional[str] = None,
) -> str:
    """Node ``node``'s configuration file: its listeners on its own address, the cluster's
    members (with ``client_routing`` and ``placement`` when given), durable storage in ``data_dir``
    (compacted past ``compaction_threshold`` when given), the entities, and the key when
    ``auth`` is ``keys``."""
    members = "\n".join(
        f'  {{ id = {member}, address = "{address}:{PEER_PORT}" }},' for member, address in sorted(addresses.items())
    )
    text = (
        f'[server]\nlisten = "{addresses[node]}:{AMQP_PORT}"\n'
        f'[storage]\nmode = "durable"\ndata_dir = "{data_dir}"\n'
        + (f'compaction_threshold = "{compaction_threshold}"\n' if compaction_threshold else "")
        + f"[cluster]\nnode_id = {node}\n"
        f'address = "{addresses[node]}:{PEER_PORT}"\n'
        f'secret = "{secret}"\n'
        + (f'client_routing = "{client_routing}"\n' if client_routing else "")
        + (f'placement = "{placement}"\n' if placement else "")
        + f"members = [\n{members}\n]\n"
        f"[tls]\nenabled = false\n[websocket]\nenabled = false\n"
    )
    text += entities
    if auth == "keys":
        text += f'\n[[auth.keys]]\nname = "{KEY_NAME}"\nkey = "{KEY}"\nrights = ["Manage"]\n'
    return text


def agreed_leader(answers: Dict[int, Optional[dict]], size: int) -> Optional[int]:
    """The leader that a majority of the cluster's ``size`` nodes name in their ``/health``
    answers (``None`` for a node that did not answer), provided the leader's own answer, if
    it gave one, says it leads; else ``None``."""
    votes: Dict[int, int] = {}
    for answer in answers.values():
        leader = ((answer or {}).get("cluster") or {}).get("leader")
        if leader is not None:
            votes[leader] = votes.get(leader, 0) + 1
    for leader, count in votes.items():
        if count >= size // 2 + 1:
            own = answers.get(leader)
            if own is not None and (own.get("cluster") or {}).get("role") != "leader":
                return None
            return leader
    return None


def agreed_group_leader(answers: Dict[int, Optional[dict]], size: int, group: str) -> Optional[int]:
    """``agreed_leader`` for placement group ``group``: the node a majority of the cluster's
    ``size`` nodes name in ``cluster.group_leaders``, provided its own answer, if it gave
    one, names itself; else ``None``."""
    votes: Dict[int, int] = {}
    for answer in answers.values():
        leader = (((answer or {}).get("cluster") or {}).get("group_leaders") or {}).get(group)
        if leader is not None:
            votes[leader] = votes.get(leader, 0) + 1
    for leader, count in votes.items():
        if count >= size // 2 + 1:
            own = answers.get(leader)
            if own is not None and ((own.get("cluster") or {}).get("group_leaders") or {}).get(group) != leader:
                return None
            return leader
    return None


class Cluster:
    """``nodes`` ferrobus processes and a ``client`` host, each in its own namespace."""

    def __init__(
        self,
        directory: Path,
        nodes: int = 3,
        auth: str = "none",
        entities: str = ENTITIES_TOML,
        net: Optional[int] = None,
        log_level: Optional[str] = None,
        compaction_threshold: Optional[str] = None,
        client_routing: Optional[str] = None,
        placement: Optional[str] = None,
        ids: Optional[Sequence[int]] = None,
        groups: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory)
        # Every node's [cluster] placement ("spread": each queue's and topic's group has a
        # leader of its own).
        self.placement = placement
        # With placement "spread": the placement groups whose leaders ``wait_whole`` also
        # waits for every node to agree on (the workload's).
        self.groups = list(groups)
        # Every node's [cluster] client_routing ("proxy": followers serve plain AMQP
        # clients themselves).
        self.client_routing = client_routing
        # Every node's [storage] compaction_threshold (small: compactions and snapshots
        # happen under the faults).
        self.compaction_threshold = compaction_threshold
        # Passed to every node as --log-level (e.g. "info,ferrobus::server=debug").
        self.log_level = log_level
        self.size = nodes
        self.ids = list(ids) if ids is not None else list(range(1, nodes + 1))
        if len(self.ids) != nodes or len(set(self.ids)) != nodes:
            raise ValueError(f"{nodes} distinct node ids wanted, not {self.ids}")
        self.auth = auth
        self.entities = entities
        self.network = netns.Network([f"node{node}" for node in self.ids] + ["client"], net=net)
        self.address: Dict[int, str] = {node: self.network.address[f"node{node}"] for node in self.ids}
        self.processes: Dict[int, subprocess.Popen] = {}
        self.paused: set = set()
        self.isolated: set = set()
        self.starts: Dict[int, int] = {node: 0 for node in self.ids}
        self._http: Optional[concurrent.futures.ThreadPoolExecutor] = None

    # Life cycle.

    def __enter__(self) -> "Cluster":
        self.network.__enter__()
        try:
            for node in self.ids:
                (self.directory / f"node{node}").mkdir(parents=True, exist_ok=True)
                self.config_path(node).write_text(
                    node_config(
                        node,
                        self.address,
                        self.directory / f"node{node}" / "data",
                        self.auth,
                        self.entities,
                        compaction_threshold=self.compaction_threshold,
                        client_routing=self.client_routing,
                        placement=self.placement,
                    )
                )
            self._http = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(4, self.size), initializer=_enter_namespace, initargs=(self.network.namespace("client"),)
            )
            for node in self.ids:
                self.start(node, wait=False)
            for node in self.ids:
                self.wait_listening(node)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for node in list(self.processes):
            self._kill_process(node)
        if self._http is not None:
            self._http.shutdown(wait=False, cancel_futures=True)
            self._http = None
        self.network.close()

    def config_path(self, node: int) -> Path:
        return self.directory / f"node{node}.toml"

    def log_path(self, node: int) -> Path:
        return self.directory / f"node{node}.log"

    def connection_string(self, node: int) -> str:
        return (
            f"Endpoint=sb://{self.address[node]};SharedAccessKeyName={KEY_NAME};"
            f"SharedAccessKey={KEY};UseDevelopmentEmulator=true"
        )

    # Processes.

    def running(self, node: int) -> bool:
        process = self.processes.get(node)
        return process is not None and process.poll() is None

    def live(self) -> List[int]:
        """The nodes running and not paused (isolated ones included)."""
        return [node for node in self.ids if self.running(node) and node not in self.paused]

    def start(self, node: int, wait: bool = True) -> None:
        """Starts node ``node`` on its data directory (of earlier starts) and, with ``wait``,
        waits for its "listening on" line."""
        if self.running(node):
            raise RuntimeError(f"node {node} is running")
        log_path = self.log_path(node)
        with open(log_path, "ab") as log:
            log.write(f"==== start {self.starts[node]} at {time.time():.3f}\n".encode())
        self._log_offset = getattr(self, "_log_offset", {})
        self._log_offset[node] = log_path.stat().st_size
        log = open(log_path, "ab")
        self.processes[node] = self.network.start(
            f"node{node}",
            [binary(), "--config", str(self.config_path(node))]
            + (["--log-level", self.log_level] if self.log_level else []),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=dict(os.environ, NO_COLOR="1"),
        )
        log.close()
        self.starts[node] += 1
        self.paused.discard(node)
        if wait:
            self.wait_listening(node)

    def log_since_start(self, node: int) -> str:
        with open(self.log_path(node), "rb") as reading:
            reading.seek(self._log_offset.get(node, 0))
            return ANSI_ESCAPE.sub("", reading.read().decode(errors="replace"))

    def wait_listening(self, node: int, timeout: float = START_TIMEOUT_SECONDS) -> None:
        wanted = f"listening on {self.address[node]}:{AMQP_PORT}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if wanted in self.log_since_start(node):
                return
            if not self.running(node):
                raise RuntimeError(f"node {node} exited; see {self.log_path(node)}")
            time.sleep(0.05)
        raise RuntimeError(f"node {node} printed no '{wanted}' in {timeout:.0f} s; see {self.log_path(node)}")

    def kill(self, node: int) -> None:
        """SIGKILL: a crash; nothing the node had not made durable survives."""
        if not self.running(node):
            raise RuntimeError(f"node {node} is not running")
        self._kill_process(node)

    def _kill_process(self, node: int) -> None:
        process = self.processes.get(node)
        if process is None:
            return
        if process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.paused.discard(node)

    def stop(self, node: int, timeout: float = 60.0) -> int:
        """SIGTERM: a planned stop (the node hands over what it must first); waits up to
        ``timeout`` seconds for the process to end and returns its exit status."""
        process = self.processes.get(node)
        if process is None or process.poll() is not None:
            raise RuntimeError(f"node {node} is not running")
        os.kill(process.pid, signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_process(node)
            raise RuntimeError(f"node {node} did not stop within {timeout:.0f} s of SIGTERM; killed")

    def restart(self, node: int) -> None:
        """Kills node ``node`` if it runs, then starts it again and waits for it to listen."""
        if self.running(node):
            self._kill_process(node)
        self.start(node)

    def pause(self, node: int) -> None:
        os.kill(self.processes[node].pid, signal.SIGSTOP)
        self.paused.add(node)

    def resume(self, node: int) -> None:
        os.kill(self.processes[node].pid, signal.SIGCONT)
        self.paused.discard(node)

    # Packets.

    def others(self, node: int) -> List[str]:
        return [f"node{other}" for other in self.ids if other != node]

    def isolate(self, node: int) -> None:
        """Node ``node`` neither hears from nor reaches any other node (it drops their packets
        both ways); the client host still reaches it."""
        self.network.cut(f"node{node}", self.others(node), "inbound")
        self.network.cut(f"node{node}", self.others(node), "outbound")
        self.isolated.add(node)

    def lossy(self, first: int, second: int, percent: int) -> None:
        """Nodes ``first`` and ``second`` each drop ``percent`` % of the packets from the other."""
        self.network.cut(f"node{first}", [f"node{second}"], "inbound", percent)
        self.network.cut(f"node{second}", [f"node{first}"], "inbound", percent)

    def heal(self) -> None:
        """Every node drops nothing any more."""
        for node in self.ids:
            self.network.heal(f"node{node}")
        self.isolated.clear()

    # Health.

    def health(self, node: int, timeout: float = 1.0) -> Optional[dict]:
        """Node ``node``'s ``GET /health`` answer (503 included), or ``None`` without one."""
        assert self._http is not None
        return self._http.submit(_get_health, self.address[node], timeout).result(timeout + 2)

    def healths(self, nodes: Optional[Sequence[int]] = None, timeout: float = 1.0) -> Dict[int, Optional[dict]]:
        """Every live node's answer, asked in parallel."""
        assert self._http is not None
        asked = list(nodes) if nodes is not None else self.live()
        futures = {node: self._http.submit(_get_health, self.address[node], timeout) for node in asked}
        return {node: future.result(timeout + 2) for node, future in futures.items()}

    def leader(self, timeout: float = 1.0) -> Optional[int]:
        """The leader a majority of the cluster agrees on now (``agreed_leader``), or ``None``."""
        return agreed_leader(self.healths(timeout=timeout), self.size)

    def wait_leader(self, timeout: float = 10.0, excluding: Optional[int] = None) -> int:
        """Polls until a majority agrees on a leader (other than ``excluding``); raises after
        ``timeout`` seconds, with every node's last answer."""
        deadline = time.monotonic() + timeout
        answers: Dict[int, Optional[dict]] = {}
        while time.monotonic() < deadline:
            answers = self.healths(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            leader = agreed_leader(answers, self.size)
            if leader is not None and leader != excluding:
                return leader
            time.sleep(0.05)
        raise RuntimeError(f"no leader agreed in {timeout:.0f} s: {json.dumps(answers)}")

    def group_leader(self, group: str, timeout: float = 1.0) -> Optional[int]:
        """The leader of placement group ``group`` a majority agrees on now, or ``None``."""
        return agreed_group_leader(self.healths(timeout=timeout), self.size, group)

    def group_leaders(self, groups: Optional[Sequence[str]] = None, timeout: float = 1.0) -> Dict[str, Optional[int]]:
        """Each placement group's (``groups``, default the cluster's) agreed leader now."""
        answers = self.healths(timeout=timeout)
        return {group: agreed_group_leader(answers, self.size, group) for group in (groups if groups is not None else self.groups)}

    def wait_group_leader(self, group: str, timeout: float = 10.0, excluding: Optional[int] = None) -> int:
        """``wait_leader`` for placement group ``group``."""
        deadline = time.monotonic() + timeout
        answers: Dict[int, Optional[dict]] = {}
        while time.monotonic() < deadline:
            answers = self.healths(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            leader = agreed_group_leader(answers, self.size, group)
            if leader is not None and leader != excluding:
                return leader
            time.sleep(0.05)
        raise RuntimeError(f"no leader of group {group} agreed in {timeout:.0f} s: {json.dumps(answers)}")

    def wait_whole(self, timeout: float = 20.0) -> int:
        """Polls until every node runs, answers, and names one leader (and, for each of the
        cluster's placement ``groups``, one leader of that group); returns the leader."""
        deadline = time.monotonic() + timeout
        answers: Dict[int, Optional[dict]] = {}
        while time.monotonic() < deadline:
            answers = self.healths(self.ids, timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            leaders = {((answer or {}).get("cluster") or {}).get("leader") for answer in answers.values()}
            whole = None not in answers.values() and len(leaders) == 1 and None not in leaders
            for group in self.groups if whole else ():
                named = {(((answer or {}).get("cluster") or {}).get("group_leaders") or {}).get(group) for answer in answers.values()}
                whole = whole and len(named) == 1 and None not in named
            if whole:
                return leaders.pop()
            time.sleep(0.05)
        raise RuntimeError(f"the cluster was not whole in {timeout:.0f} s: {json.dumps(answers)}")


def _enter_namespace(name: str) -> None:
    """Moves the calling thread (only it: a network namespace is per thread) into network
    namespace ``name``, so the sockets it opens are the client host's."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/run/netns/{name}", "rb") as handle:
        if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns into {name}: {os.strerror(error)}")


# No proxy from the environment: the nodes are reached directly.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get_health(address: str, timeout: float) -> Optional[dict]:
    try:
        with _OPENER.open(f"http://{address}:{HTTP_PORT}/health", timeout=timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        try:
            return json.loads(error.read())
        except (ValueError, OSError):
            return None
    except (OSError, ValueError):
        return None
