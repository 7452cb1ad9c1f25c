"""Runs the history workload against one durable ferrobus killed with SIGKILL, then checks it.

Starts the release binary (``FERROBUS_BIN``, else ``target/release/ferrobus``) on 127.0.0.1
(a free port, kept across restarts) with a data directory of its own, runs ``workload.py``
against it, and meanwhile kills the broker (SIGKILL, by the PID this script started) and
restarts it on the same data directory ``--rounds`` times at moments drawn from the seed.
After the traffic the workload drains every entity; then ``checker.py`` reads the history.
Prints the seed, the counts and every violation; exits 1 on any violation, 2 when the run
itself failed (the broker did not start, the workload crashed).

``--auth keys`` configures the connection string's key (``[[auth.keys]]``), so every token
is checked; ``--auth none`` accepts any token.

Examples:
    python tests/history/run.py                         # short form: 3 rounds, ~20 s of traffic
    python tests/history/run.py --rounds 100 --duration 300
    python tests/history/run.py --seed 1234 --rounds 30 --duration 90   # replay a seed
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import checker  # noqa: E402
from workload import ENTITIES_TOML  # noqa: E402

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
KEY_NAME = "RootManageSharedAccessKey"
KEY_VALUE = "SAS_KEY_VALUE"
STARTUP_TIMEOUT_SECONDS = 20.0


def connection_string(port: int) -> str:
    return f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY_VALUE};UseDevelopmentEmulator=true"


class Broker:
    """The one ferrobus process this runner started (and the only one it ever signals)."""

    def __init__(self, binary: Path, work_dir: Path, auth: str) -> None:
        self.binary = binary
        self.work_dir = work_dir
        self.data_dir = work_dir / "data"
        self.config_path = work_dir / "ferrobus.toml"
        self.log_path = work_dir / "ferrobus.stderr.log"
        config = ENTITIES_TOML
        if auth == "keys":
            config += f'\n[[auth.keys]]\nname = "{KEY_NAME}"\nkey = "{KEY_VALUE}"\nrights = ["Manage"]\n'
        self.config_path.write_text(config)
        self.port: Optional[int] = None
        self.process: Optional[subprocess.Popen] = None
        self.starts = 0

    def start(self) -> None:
        listen = f"127.0.0.1:{self.port or 0}"
        log = open(self.log_path, "a", encoding="utf-8")
        log.write(f"==== start {self.starts} at {time.time():.3f}\n")
        log.flush()
        self.process = subprocess.Popen(
            [str(self.binary), "--config", str(self.config_path), "--listen", listen, "--data-dir", str(self.data_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=dict(os.environ, NO_COLOR="1"),
        )
        self.starts += 1
        found = threading.Event()
        process = self.process

        def drain() -> None:
            assert process.stderr is not None
            for raw in iter(process.stderr.readline, b""):
                line = ANSI_ESCAPE.sub("", raw.decode("utf-8", "replace"))
                log.write(line)
                log.flush()
                match = LISTENING.search(line)
                if match and not found.is_set():
                    self.port = int(match.group(1))
                    found.set()
            log.close()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while not found.wait(0.02):
            if process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"ferrobus did not start (see {self.log_path})")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def fault_moments(rng: random.Random, rounds: int, duration: float) -> List[float]:
    """``rounds`` kill times (seconds after the traffic starts) spread over the traffic, each
    in its own slice of it, at a random point of that slice."""
    if rounds == 0:
        return []
    window = duration * 0.9 / rounds
    return [window * index + rng.uniform(0.2, 1.0) * window for index in range(rounds)]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3, help="kill -9 and restarts during the traffic")
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic (default: 20, or 3 per round beyond 6)")
    parser.add_argument("--ops", type=int, default=1_000_000, help="stop the traffic after this many operations")
    parser.add_argument("--auth", choices=["none", "keys"], default="keys")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (history, broker log)")
    parser.add_argument("--work-dir", default=None, help="directory for the data, the log and the history (kept)")
    args = parser.parse_args(argv)

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    duration = args.duration if args.duration is not None else max(20.0, 3.0 * args.rounds)
    print(f"history run: seed {seed}, {args.rounds} rounds, {duration:.0f} s of traffic, auth {args.auth}", flush=True)
    rng = random.Random(seed)
    binary = Path(os.environ.get("FERROBUS_BIN") or REPO_ROOT / "target" / "release" / "ferrobus")
    if not binary.is_file():
        print(f"ferrobus binary not found at {binary}: cargo build --release, or set FERROBUS_BIN", file=sys.stderr)
        return 2
    work_dir = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="ferrobus-history-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    history_path = work_dir / "history.jsonl"
    broker = Broker(binary, work_dir, args.auth)
    started = time.monotonic()
    failed = False
    try:
        broker.start()
        assert broker.port is not None
        workload = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "workload.py"),
                "--connection-string",
                connection_string(broker.port),
                "--history",
                str(history_path),
                "--seed",
                str(seed),
                "--duration",
                str(duration),
                "--ops",
                str(args.ops),
            ],
        )
        traffic_start = time.monotonic()
        for moment in fault_moments(rng, args.rounds, duration):
            delay = traffic_start + moment - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if workload.poll() is not None:
                break
            broker.kill()
            time.sleep(rng.uniform(0.0, 1.0))
            broker.start()
        code = workload.wait()
        if code != 0:
            print(f"workload exited with {code}", file=sys.stderr)
            failed = True
    finally:
        broker.stop()
    elapsed = time.monotonic() - started

    report, crashed = checker.report(
        history_path, f"history run: seed {seed}, broker started {broker.starts} times, {elapsed:.1f} s"
    )
    return checker.conclude(
        report, failed, crashed, bool(args.keep or args.work_dir), work_dir, "history and broker log"
    )


if __name__ == "__main__":
    sys.exit(main())
