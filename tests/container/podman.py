"""Running the ferrobus image with podman for the container tests: the podman command line
these machines need, a container with its ports published on 127.0.0.1, and the wait for it
to be ready.

Run through ``scripts/test-container``, which builds the image first; ``FERROBUS_IMAGE``
names it (default ``localhost/ferrobus:latest``).
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field

import pytest

IMAGE = os.environ.get("FERROBUS_IMAGE", "localhost/ferrobus:latest")

# podman's global options on these virtual machines: crun (Debian's default runtime) fails
# with their hybrid cgroup hierarchy, so runc; there is no systemd to ask for cgroups, so
# cgroupfs. FERROBUS_PODMAN_OPTIONS replaces them (e.g. "" on a machine where the defaults
# work).
PODMAN = [
    "podman",
    *shlex.split(
        os.environ.get("FERROBUS_PODMAN_OPTIONS", "--runtime runc --cgroup-manager=cgroupfs")
    ),
]


def _ulimits() -> list[str]:
    """podman gives a container rlimits of its own (nofile 1048576 …); inside these virtual
    machines they exceed what runc may set, and it refuses to start the container ("error
    setting rlimits"). Explicit limits at or below this process's hard limits fit: the
    broker needs a few thousand descriptors and a few dozen threads here."""
    options = []
    for name, limit, wanted in (
        ("nofile", resource.RLIMIT_NOFILE, 16384),
        ("nproc", resource.RLIMIT_NPROC, 4096),
    ):
        _soft, hard = resource.getrlimit(limit)
        value = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        options += ["--ulimit", f"{name}={value}:{value}"]
    return options


ULIMITS = _ulimits()

SAS_KEY_NAME = "RootManageSharedAccessKey"
SAS_KEY_VALUE = "SAS_KEY_VALUE"

# The container's start-to-ready deadline; ready takes well under a second here.
READY_TIMEOUT = 60.0


def require_podman() -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman runc): container tests skipped")


def podman(*arguments: str, check: bool = True, timeout: float = 120) -> str:
    completed = subprocess.run(
        [*PODMAN, *arguments], capture_output=True, text=True, timeout=timeout
    )
    if check and completed.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(arguments)} exited {completed.returncode}: {completed.stderr}"
        )
    return completed.stdout


def connection_string(port: int) -> str:
    return (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName={SAS_KEY_NAME};"
        f"SharedAccessKey={SAS_KEY_VALUE};UseDevelopmentEmulator=true"
    )


def health_status(port: int) -> int | None:
    """The status of ``GET /health`` on the published HTTP port, or None if nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, urllib.error.URLError):
        return None


@dataclass
class Container:
    """One running container of the image, its ports published on 127.0.0.1."""

    name: str
    amqp_port: int = 0
    http_port: int = 0
    started: float = 0.0
    ready_seconds: float = 0.0
    log: str = field(default="", repr=False)

    @property
    def connection_string(self) -> str:
        return connection_string(self.amqp_port)

    def logs(self) -> str:
        completed = subprocess.run(
            [*PODMAN, "logs", self.name], capture_output=True, text=True, timeout=60
        )
        return completed.stdout + completed.stderr

    def published(self, port: int) -> int:
        text = podman("port", self.name, f"{port}/tcp").strip().splitlines()[0]
        return int(text.rsplit(":", 1)[1])

    def wait_ready(self) -> None:
        """Polls /health on the published port until it answers 200 (the broker serves AMQP
        and HTTP then); fails with the container's log if it exits or the deadline passes."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if health_status(self.http_port) == 200:
                self.ready_seconds = time.monotonic() - self.started
                return
            state = podman("inspect", "--format", "{{.State.Status}}", self.name).strip()
            if state not in ("running", "created", "configured"):
                raise AssertionError(f"container {self.name} is {state}:\n{self.logs()}")
            time.sleep(0.02)
        raise AssertionError(f"container {self.name} not ready in {READY_TIMEOUT} s:\n{self.logs()}")

    def copy_out(self, path: str, destination: str) -> None:
        podman("cp", f"{self.name}:{path}", destination)

    def stop(self) -> None:
        podman("stop", "--time", "10", self.name)

    def remove(self) -> None:
        podman("rm", "--force", "--volumes", self.name, check=False)


class Containers:
    """Starts containers and volumes and removes every one it made at the end."""

    def __init__(self) -> None:
        self.prefix = f"ferrobus-test-{uuid.uuid4().hex[:8]}"
        self.containers: list[Container] = []
        self.volumes: list[str] = []

    def volume(self) -> str:
        name = f"{self.prefix}-data-{len(self.volumes)}"
        podman("volume", "create", name)
        self.volumes.append(name)
        return name

    def run(
        self,
        *arguments: str,
        volume: str | None = None,
        mounts: tuple[tuple[str, str], ...] = (),
        environment: dict[str, str] | None = None,
        command: tuple[str, ...] = (),
    ) -> Container:
        container = Container(name=f"{self.prefix}-{len(self.containers)}")
        options = ["--name", container.name, "-p", "127.0.0.1::5672", "-p", "127.0.0.1::5300"]
        options += ULIMITS
        if volume:
            options += ["-v", f"{volume}:/data"]
        for source, target in mounts:
            options += ["-v", f"{source}:{target}:ro"]
        for key, value in (environment or {}).items():
            options += ["-e", f"{key}={value}"]
        self.containers.append(container)
        container.started = time.monotonic()
        podman("run", "-d", *options, *arguments, IMAGE, *command)
        container.amqp_port = container.published(5672)
        container.http_port = container.published(5300)
        container.wait_ready()
        return container

    def inspect_image(self) -> dict:
        return json.loads(podman("image", "inspect", IMAGE))[0]

    def close(self) -> None:
        for container in self.containers:
            container.remove()
        for volume in self.volumes:
            podman("volume", "rm", "--force", volume, check=False)
