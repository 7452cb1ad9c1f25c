"""The Python Testcontainers recipe of docs/containers.md, run as written against podman's
Docker-compatible API (``scripts/test-container`` starts ``podman system service`` and sets
``DOCKER_HOST``). Skipped without podman or without that socket.

Ryuk (Testcontainers' reaper) is disabled (``TESTCONTAINERS_RYUK_DISABLED=true``): its image
cannot be pulled on these machines; the ``with`` block removes the container.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

sys.path.insert(0, str(Path(__file__).parent))
from podman import IMAGE, ULIMITS, require_podman  # noqa: E402


def machine_ulimits() -> list:
    """These virtual machines' rlimits (see podman.ULIMITS); not part of the recipe."""
    from docker.types import Ulimit

    limits = []
    for option in ULIMITS[1::2]:
        name, values = option.split("=")
        soft, hard = values.split(":")
        limits.append(Ulimit(name=name, soft=int(soft), hard=int(hard)))
    return limits


def test_testcontainers_recipe_sends_and_receives():
    require_podman()
    if not os.environ.get("DOCKER_HOST"):
        pytest.skip("DOCKER_HOST is not set: run through scripts/test-container (podman's API socket)")

    # --- the recipe (docs/containers.md) ---
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import HttpWaitStrategy

    broker = (
        DockerContainer(IMAGE, command="--listen 0.0.0.0:5672 --memory")
        .with_exposed_ports(5672, 5671, 5300)
        .waiting_for(HttpWaitStrategy(5300, "/health").for_status_code(200))
        .with_kwargs(ulimits=machine_ulimits())  # this machine only
    )
    with broker:
        host = broker.get_container_host_ip()
        port = broker.get_exposed_port(5672)
        connection_string = (
            f"Endpoint=sb://{host}:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
        )
        # --- end of the recipe ---
        with ServiceBusClient.from_connection_string(connection_string) as client:
            with client.get_queue_sender("queue.1") as sender:
                sender.send_messages(ServiceBusMessage("from testcontainers"))
            with client.get_queue_receiver("queue.1", max_wait_time=5) as receiver:
                [message] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
                receiver.complete_message(message)
        assert str(message) == "from testcontainers"
        stdout, _stderr = broker.get_logs()
        assert b"Emulator Service is Successfully Up!" in stdout
