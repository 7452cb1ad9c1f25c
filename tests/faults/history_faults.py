"""The history workload through the fault harness: the broker on one host, the workload's SDK
clients on another, and seeded faults between them — ``kill -9`` and a restart, a paused
broker, a partition either way, packet loss — then every entity drained and the history
checked (``tests/history/checker.py``). The single-node form of the cluster's fault rounds.

    python tests/faults/history_faults.py [--rounds N] [--seed S] [--auth none|keys]
                                          [--duration SECONDS] [--keep]

Prints the seed, each fault, the counts and every violation; exits 1 on a violation, 2 when
the run itself failed. As root (network namespaces), with ``FERROBUS_BIN`` or
``target/release/ferrobus``.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "history"))

import checker  # noqa: E402
import netns  # noqa: E402
from workload import ENTITIES_TOML  # noqa: E402

KEY = "SAS_KEY_VALUE"
FAULTS = ("kill", "pause", "partition-in", "partition-out", "loss")


class Broker:
    """The broker process on host ``broker`` (the only process this runner signals)."""

    def __init__(self, network: netns.Network, directory: Path, auth: str) -> None:
        self.network = network
        self.directory = directory
        self.address = network.address["broker"]
        config = f'[server]\nlisten = "{self.address}:5672"\n' + ENTITIES_TOML
        if auth == "keys":
            config += f'\n[[auth.keys]]\nname = "RootManageSharedAccessKey"\nkey = "{KEY}"\nrights = ["Manage"]\n'
        (directory / "broker.toml").write_text(config)
        self.process = None
        self.starts = 0

    def start(self) -> None:
        log_path = self.directory / "broker.log"
        before = log_path.stat().st_size if log_path.exists() else 0
        log = open(log_path, "ab")
        self.process = self.network.start(
            "broker",
            [
                os.environ.get("FERROBUS_BIN", str(REPO / "target" / "release" / "ferrobus")),
                "--config",
                str(self.directory / "broker.toml"),
                "--data-dir",
                str(self.directory / "data"),
            ],
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with open(log_path, "rb") as reading:
                reading.seek(before)
                if f"listening on {self.address}:5672" in reading.read().decode(errors="replace"):
                    self.starts += 1
                    return
            if self.process.poll() is not None:
                raise RuntimeError(f"the broker exited; see {log_path}")
            time.sleep(0.05)
        raise RuntimeError("the broker did not start")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--auth", choices=["none", "keys"], default="keys")
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic (default: 6 a round, at least 30)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    why = netns.available()
    if why:
        print(f"skipped: {why}")
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    duration = args.duration if args.duration is not None else max(30.0, 6.0 * args.rounds)
    rng = random.Random(seed)
    print(f"history under faults: seed {seed}, {args.rounds} rounds, {duration:.0f} s of traffic, auth {args.auth}", flush=True)
    directory = Path(tempfile.mkdtemp(prefix="ferrobus-history-faults-"))
    history = directory / "history.jsonl"
    failed = False
    with netns.Network(["broker", "client"]) as network:
        broker = Broker(network, directory, args.auth)
        broker.start()
        connection = (
            f"Endpoint=sb://{broker.address};SharedAccessKeyName=RootManageSharedAccessKey;"
            f"SharedAccessKey={KEY};UseDevelopmentEmulator=true"
        )
        workload = network.start(
            "client",
            [
                sys.executable,
                str(REPO / "tests" / "history" / "workload.py"),
                "--connection-string",
                connection,
                "--history",
                str(history),
                "--seed",
                str(seed),
                "--duration",
                str(duration),
            ],
        )
        started = time.monotonic()
        moments = sorted(rng.uniform(2.0, duration - 4.0) for _ in range(args.rounds))
        for moment in moments:
            delay = started + moment - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if workload.poll() is not None:
                break
            fault = rng.choice(FAULTS)
            hold = rng.uniform(0.5, 3.0)
            print(f"  {time.monotonic() - started:6.1f} s  {fault} for {hold:.1f} s", flush=True)
            if fault == "kill":
                network.kill(broker.process)
                time.sleep(hold)
                broker.start()
            elif fault == "pause":
                network.pause(broker.process)
                time.sleep(hold)
                network.resume(broker.process)
            else:
                direction = "outbound" if fault == "partition-out" else "inbound"
                percent = 20 if fault == "loss" else 100
                network.cut("broker", ["client"], direction, percent)
                time.sleep(hold)
                network.heal("broker")
        code = workload.wait()
        if code != 0:
            print(f"workload exited with {code}", file=sys.stderr)
            failed = True
    report, crashed = checker.report(
        history, f"history under faults: seed {seed}, broker started {broker.starts} times"
    )
    return checker.conclude(report, failed, crashed, args.keep, directory, "history and broker log")


if __name__ == "__main__":
    sys.exit(main())
