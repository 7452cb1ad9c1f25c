#!/usr/bin/env python3
"""Two figures of running a three-node cluster (issue 46, "Measured"), on this machine.

  idle   each node's CPU while nothing happens, with --queues queues (10,000), as a share of
         one core over --seconds (30), against one durable single node with the same queues,
         measured in the same run (utime + stime of /proc/PID/stat)
  move   moving the leadership (`ferrobus cluster transfer-leader`) with --messages messages
         (100,000) of 1 KiB stored in one queue: from the request to another node serving as
         leader (its /health 200 with role leader), the new leader's replay of the log (its
         own log line), and from the request to the first send acknowledged through it
  join   a fourth node added (`ferrobus cluster add-node`) after the three compacted their
         logs (`compaction_threshold` --threshold) with --messages messages of 1 KiB stored:
         the snapshot's size and build time, from the request to the node a caught-up voter
         (add-node returns then), its install, and then moving the leadership to it: its
         replay from the snapshot and a send acknowledged through it

The cluster is scripts/cluster's (127.0.9.1-3, ports 5672/5300/5700, no keys), in a scratch
directory removed at the end; the single node listens on 127.0.9.9. Messages are sent with the
official Python SDK (tests/python/.venv) in batches of 100.

    tests/python/.venv/bin/python scripts/bench/cluster-ops.py [--only idle|move|join]
        [--queues N] [--seconds S] [--messages N] [--rounds N] [--threshold SIZE]
        [--binary BIN]

Linux only; the release binary (cargo build --release) unless --binary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NET = "127.0.9"
TICKS = os.sysconf("SC_CLK_TCK")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def health(host: str) -> tuple[int, dict]:
    try:
        with OPENER.open(f"http://{host}:5300/health", timeout=1) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, {}
    except (OSError, ValueError):
        return 0, {}


def queues_toml(count: int) -> str:
    return "".join(f'[[queues]]\nname = "idle-{index}"\n\n' for index in range(count)) + '[[queues]]\nname = "moved"\n'


class Cluster:
    def __init__(self, directory: Path, binary: str, append: Path, storage: str = "") -> None:
        self.directory = directory
        self.env = dict(
            os.environ,
            FERROBUS_BIN=binary,
            FERROBUS_CLUSTER_NET=NET,
            FERROBUS_CLUSTER_APPEND=str(append),
            FERROBUS_CLUSTER_STORAGE=storage,
        )

    def script(self, *arguments: str) -> str:
        return subprocess.run(
            [str(REPO / "scripts" / "cluster"), *arguments, str(self.directory)],
            env=self.env, check=True, capture_output=True, text=True, timeout=180,
        ).stdout

    def pid(self, node: int) -> int:
        return int((self.directory / f"node{node}.pid").read_text())

    def leader(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for node in (1, 2, 3):
                status, view = health(f"{NET}.{node}")
                if status == 200 and (view.get("cluster") or {}).get("role") == "leader":
                    return node
            time.sleep(0.05)
        raise RuntimeError("no leader")


def idle_cpu(pids: dict, seconds: float) -> dict:
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: 100.0 * (cpu_seconds(pid) - before[name]) / seconds for name, pid in pids.items()}


def send_all(connection_string: str, queue: str, count: int) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    body = b"x" * 1024
    with ServiceBusClient.from_connection_string(connection_string) as client, client.get_queue_sender(queue) as sender:
        sent = 0
        while sent < count:
            batch = sender.create_message_batch()
            for _ in range(min(100, count - sent)):
                batch.add_message(ServiceBusMessage(body))
            sender.send_messages(batch)
            sent += len(batch)


def logged(path: Path, pattern: bytes, after: int = 0) -> list:
    with open(path, "rb") as log:
        log.seek(after)
        return re.findall(pattern, log.read())


def join(cluster: "Cluster", binary: str, messages: int) -> None:
    """A fourth node added after the three compacted: see the module's text."""
    leader = cluster.leader()
    started = time.monotonic()
    send_all(connection_string(leader), "moved", messages)
    print(f"{messages} messages of 1 KiB stored in {time.monotonic() - started:.1f} s", flush=True)
    deadline = time.monotonic() + 120
    built = {}
    while time.monotonic() < deadline:
        built = {
            node: logged(cluster.directory / f"node{node}.log", rb"built a snapshot of the group in ([0-9.]+) ms group=\S+ index=(\d+) bytes=(\d+)")
            for node in (1, 2, 3)
        }
        if all(built.values()):
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"not every node built a snapshot: {built}")
    for node, found in built.items():
        ms, index, size = found[-1]
        print(f"  node {node}: {len(found)} snapshots, the last at entry {int(index)}: {int(size) / 1e6:.1f} MB built in {float(ms):.0f} ms")
    config = (cluster.directory / "node3.toml").read_text()
    for key in ("listen", "address"):
        config = config.replace(f'{key} = "{NET}.3:', f'{key} = "{NET}.4:')
    config = config.replace("node_id = 3", "node_id = 4").replace("/node3", "/node4")
    config = config.replace("[cluster]\n", "[cluster]\njoin = true\n", 1)
    config = config.replace("members = [\n", f'members = [\n  {{ id = 4, address = "{NET}.4:5700" }},\n', 1)
    (cluster.directory / "node4.toml").write_text(config)
    log4 = cluster.directory / "node4.log"
    node4 = subprocess.Popen([binary, "--config", str(cluster.directory / "node4.toml")], stdout=open(log4, "ab"), stderr=subprocess.STDOUT)
    try:
        while health(f"{NET}.4")[0] == 0:
            time.sleep(0.05)
        asked = time.monotonic()
        subprocess.run(
            [binary, "cluster", "add-node", "4", f"{NET}.4:5700", "--connection-string", connection_string(leader)],
            check=True, capture_output=True, timeout=300,
        )
        voter = time.monotonic() - asked
        line = [text for text in log4.read_text(errors="replace").splitlines() if "installed a snapshot" in text]
        print(f"  node 4 added: a caught-up voter {voter:.2f} s after the request; {line[-1].split(' INFO ')[-1] if line else 'no snapshot installed'}", flush=True)
        size = log4.stat().st_size
        asked = time.monotonic()
        subprocess.run(
            [binary, "cluster", "transfer-leader", "4", "--connection-string", connection_string(leader)],
            check=True, capture_output=True, timeout=60,
        )
        while not (health(f"{NET}.4")[0] == 200 and (health(f"{NET}.4")[1].get("cluster") or {}).get("role") == "leader"):
            if time.monotonic() - asked > 60:
                raise RuntimeError("node 4 did not lead")
            time.sleep(0.02)
        serving = time.monotonic() - asked
        send_all(connection_string(4), "moved", 1)
        acknowledged = time.monotonic() - asked
        replay = logged(log4, rb"entities replayed in ([0-9.]+) ms", size)
        print(
            f"  node 4 leads: serving {serving:.2f} s after the request, replay {float(replay[-1]) / 1000 if replay else float('nan'):.2f} s, "
            f"a send acknowledged {acknowledged:.2f} s after it",
            flush=True,
        )
    finally:
        node4.terminate()
        node4.wait(timeout=30)


def connection_string(node: int) -> str:
    return f"Endpoint=sb://{NET}.{node};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["idle", "move", "join"], default=None)
    parser.add_argument("--threshold", default="32MiB", help="every node's compaction_threshold (join)")
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3, help="leadership moves (move)")
    parser.add_argument("--binary", default=str(REPO / "target" / "release" / "ferrobus"))
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="ferrobus-cluster-ops-"))
    binary = str(scratch / "ferrobus")
    shutil.copy(args.binary, binary)
    append = scratch / "queues.toml"
    append.write_text(queues_toml(args.queues))
    storage = f'compaction_threshold = "{args.threshold}"' if args.only == "join" else ""
    cluster = Cluster(scratch / "cluster", binary, append, storage)
    single = None
    try:
        started = time.monotonic()
        cluster.script("start")
        leader = cluster.leader()
        print(f"three nodes with {args.queues} queues; node {leader} leads after {time.monotonic() - started:.1f} s", flush=True)
        if args.only in (None, "idle"):
            config = scratch / "single.toml"
            config.write_text(
                f'[server]\nlisten = "{NET}.9:5672"\n[http]\nenabled = false\n[tls]\nenabled = false\n'
                f'[websocket]\nenabled = false\n[storage]\nmode = "durable"\ndata_dir = "{scratch / "single"}"\n\n'
                + append.read_text()
            )
            single = subprocess.Popen([binary, "--config", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(5.0)  # every process past its start
            pids = {f"node {node}{' (leader)' if node == leader else ''}": cluster.pid(node) for node in (1, 2, 3)}
            pids["single node"] = single.pid
            shares = idle_cpu(pids, args.seconds)
            print(f"idle, {args.queues} queues, CPU over {args.seconds:.0f} s (% of one core):")
            for name, share in shares.items():
                print(f"  {name:<20} {share:5.2f} %")
        if args.only in (None, "move"):
            started = time.monotonic()
            send_all(connection_string(leader), "moved", args.messages)
            print(f"{args.messages} messages of 1 KiB stored in {time.monotonic() - started:.1f} s", flush=True)
            serving, acknowledged, replays = [], [], []
            for _ in range(args.rounds):
                old = cluster.leader()
                log_size = {node: (cluster.directory / f"node{node}.log").stat().st_size for node in (1, 2, 3)}
                asked = time.monotonic()
                subprocess.run(
                    [binary, "cluster", "transfer-leader", "--connection-string", connection_string(old)],
                    check=True, capture_output=True, timeout=30,
                )
                new = None
                while new is None:
                    for node in (1, 2, 3):
                        status, view = health(f"{NET}.{node}")
                        if node != old and status == 200 and (view.get("cluster") or {}).get("role") == "leader":
                            new = node
                    if time.monotonic() - asked > 60:
                        raise RuntimeError("the leadership did not move")
                serving.append(time.monotonic() - asked)
                send_all(connection_string(new), "moved", 1)
                acknowledged.append(time.monotonic() - asked)
                with open(cluster.directory / f"node{new}.log", "rb") as log:
                    log.seek(log_size[new])
                    found = re.findall(rb"entities replayed in ([0-9.]+) ms", log.read())
                if found:
                    replays.append(float(found[-1]) / 1000)
                print(f"  node {old} -> node {new}: serving after {serving[-1]:.2f} s, replay {replays[-1] if found else float('nan'):.2f} s, a send acknowledged after {acknowledged[-1]:.2f} s", flush=True)
                time.sleep(1.0)
            def summary(values: list) -> str:
                return f"median {statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"
            print(f"move with {args.messages} messages: serving {summary(serving)}; replay {summary(replays) if replays else '-'}; acknowledged send {summary(acknowledged)}")
        if args.only == "join":
            join(cluster, binary, args.messages)
    finally:
        if single is not None:
            single.terminate()
            single.wait(timeout=30)
        try:
            cluster.script("stop")
        except subprocess.SubprocessError:
            pass
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
