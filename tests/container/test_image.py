"""The container image (Containerfile), run with podman and driven by the official Python SDK
through its published ports: send, receive, dead-letter and the dead-letter queue; the
administration client; messages kept on the /data volume across a new container; the
official emulator's Config.json mount; the health check; the compose file.

Run with ``bash scripts/test-container`` (it builds the image); skipped without podman.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.management import ServiceBusAdministrationClient

sys.path.insert(0, str(Path(__file__).parent))
from podman import IMAGE, PODMAN, ULIMITS, Container, Containers, podman, require_podman  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def containers():
    require_podman()
    made = Containers()
    yield made
    made.close()


def receive(client: ServiceBusClient, queue: str, count: int, **options) -> list[str]:
    """Receives and completes `count` messages (fewer if the queue runs dry for 5 s), then
    peeks to show nothing else is left; returns the bodies and, last, what the peek saw."""
    bodies = []
    with client.get_queue_receiver(queue, max_wait_time=5, **options) as receiver:
        while len(bodies) < count:
            batch = receiver.receive_messages(max_message_count=count - len(bodies), max_wait_time=5)
            if not batch:
                break
            for message in batch:
                bodies.append(str(message))
                receiver.complete_message(message)
        bodies.extend(f"left: {message}" for message in receiver.peek_messages(max_message_count=5))
    return bodies


def test_image_is_from_scratch_non_root_with_a_health_check(containers):
    """The image's metadata: one layer per copied file, user 10001, /data a volume, the three
    ports, and a HEALTHCHECK that runs the binary (there is no shell)."""
    image = containers.inspect_image()
    config = image["Config"]
    assert config["User"] == "10001:10001"
    assert "/data" in config["Volumes"]
    assert set(config["ExposedPorts"]) == {"5672/tcp", "5671/tcp", "5300/tcp"}
    assert config["Entrypoint"] == ["/usr/local/bin/ferrobus"]
    health = image.get("Healthcheck") or config.get("Healthcheck")
    assert health and health["Test"] == ["CMD", "/usr/local/bin/ferrobus", "health"], image
    # FROM scratch: the binary and four small files; no shell to run.
    assert image["Size"] < 40_000_000, image["Size"]


def test_sdk_and_admin_client_then_messages_survive_a_new_container(containers, tmp_path):
    """Send, receive, dead-letter and read the dead-letter queue through the published AMQP
    port; create a queue with the administration client and use it; then remove the
    container, start a new one on the same volume, and find the messages and the queue."""
    volume = containers.volume()
    first = containers.run(volume=volume)
    assert first.ready_seconds < 10, f"ready after {first.ready_seconds:.2f} s"
    assert "Emulator Service is Successfully Up!" in first.logs()
    # The HEALTHCHECK itself, run by podman inside the container (no systemd timer here).
    podman("healthcheck", "run", first.name)

    first.copy_out("/data/dev-ca.pem", str(tmp_path / "dev-ca.pem"))
    admin = ServiceBusAdministrationClient.from_connection_string(
        first.connection_string, connection_verify=str(tmp_path / "dev-ca.pem")
    )
    admin.create_queue("orders", max_delivery_count=5)
    assert admin.get_queue("orders").max_delivery_count == 5

    with ServiceBusClient.from_connection_string(first.connection_string) as client:
        with client.get_queue_sender("queue.1") as sender:
            sender.send_messages([ServiceBusMessage(f"message {n}") for n in range(4)])
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("an order"))
        with client.get_queue_receiver("queue.1", max_wait_time=5) as receiver:
            [taken] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert str(taken) == "message 0"
            receiver.complete_message(taken)
            [rejected] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert str(rejected) == "message 1"
            receiver.dead_letter_message(rejected, reason="bad", error_description="a test")
        with client.get_queue_receiver(
            "queue.1", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
        ) as receiver:
            [dead] = receiver.peek_messages(max_message_count=5)
            assert (str(dead), dead.dead_letter_reason) == ("message 1", "bad")

    first.stop()
    first.remove()
    second = containers.run(volume=volume)
    with ServiceBusClient.from_connection_string(second.connection_string) as client:
        assert receive(client, "queue.1", 2) == ["message 2", "message 3"]
        assert receive(client, "queue.1", 1, sub_queue=ServiceBusSubQueue.DEAD_LETTER) == [
            "message 1"
        ]
        assert receive(client, "orders", 1) == ["an order"]
    second.copy_out("/data/dev-ca.pem", str(tmp_path / "dev-ca-2.pem"))
    admin = ServiceBusAdministrationClient.from_connection_string(
        second.connection_string, connection_verify=str(tmp_path / "dev-ca-2.pem")
    )
    assert admin.get_queue("orders").max_delivery_count == 5


def test_emulator_config_json_mount_is_the_configuration(containers, tmp_path):
    """A Config.json mounted where the official emulator reads it replaces the image's
    default configuration; the emulator's environment variables are accepted and ignored."""
    config = tmp_path / "Config.json"
    config.write_text(
        """{
  // The emulator's format: comments are allowed.
  "UserConfig": {
    "Namespaces": [{
      "Name": "sbemulatorns",
      "Queues": [{ "Name": "from-emulator-config", "Properties": { "MaxDeliveryCount": 7 } }],
      "Topics": []
    }],
    "Logging": { "Type": "File" }
  }
}
"""
    )
    config.chmod(0o644)
    container = containers.run(
        mounts=((str(config), "/ServiceBus_Emulator/ConfigFiles/Config.json"),),
        environment={
            "ACCEPT_EULA": "Y",
            "SQL_SERVER": "mssql",
            "MSSQL_SA_PASSWORD": "not-used-1!",
            "SQL_WAIT_INTERVAL": "0",
        },
    )
    logs = container.logs()
    assert "config: /ServiceBus_Emulator/ConfigFiles/Config.json" in logs, logs
    assert re.search(r"ignoring the official emulator's environment \(ACCEPT_EULA, SQL_SERVER", logs)
    with ServiceBusClient.from_connection_string(container.connection_string) as client:
        with client.get_queue_sender("from-emulator-config") as sender:
            sender.send_messages(ServiceBusMessage("configured"))
        assert receive(client, "from-emulator-config", 1) == ["configured"]
    # The image's default namespace (queue.1) is not there: the mounted file is the config.
    status = subprocess.run(
        [*PODMAN, "exec", container.name, "/usr/local/bin/ferrobus", "health"],
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0, status.stderr
    with ServiceBusClient.from_connection_string(container.connection_string) as client:
        with pytest.raises(Exception, match="(?i)not.?found|does not exist"):
            with client.get_queue_sender("queue.1") as sender:
                sender.send_messages(ServiceBusMessage("nowhere"))


def test_compose_file_mirrors_the_official_emulators(tmp_path):
    """compose.yaml keeps the official emulator's service, container and network names, its
    ports, environment names and Config.json mount, with the image swapped and no SQL
    Server service."""
    import yaml

    compose = yaml.safe_load((REPOSITORY / "compose.yaml").read_text())
    assert compose["name"] == "microsoft-azure-servicebus-emulator"
    assert list(compose["services"]) == ["emulator"]
    emulator = compose["services"]["emulator"]
    assert emulator["container_name"] == "servicebus-emulator"
    assert emulator["image"] == "localhost/ferrobus:latest"
    assert emulator["ports"] == ["5672:5672", "5300:5300"]
    assert set(emulator["environment"]) == {
        "SQL_SERVER",
        "MSSQL_SA_PASSWORD",
        "ACCEPT_EULA",
        "SQL_WAIT_INTERVAL",
    }
    assert any(
        volume.startswith("${CONFIG_PATH")
        and volume.endswith(":/ServiceBus_Emulator/ConfigFiles/Config.json")
        for volume in emulator["volumes"]
    )
    assert emulator["networks"]["sb-emulator"]["aliases"] == ["sb-emulator"]
    assert "depends_on" not in emulator
    default_config = REPOSITORY / "packaging/container/Config.json"
    assert default_config.is_file()


def test_compose_file_runs_with_podman_compose(containers, tmp_path):
    """podman-compose brings compose.yaml up (its ports moved to free ones on 127.0.0.1, its
    names made unique, so the test runs beside anything else) and the SDK uses the sample
    Config.json's queue through it."""
    import yaml

    compose_command = shutil.which("podman-compose") or str(
        Path(sys.executable).parent / "podman-compose"
    )
    if not Path(compose_command).exists():
        pytest.skip("podman-compose is not installed")
    compose = yaml.safe_load((REPOSITORY / "compose.yaml").read_text())
    project = f"{containers.prefix}-compose"
    compose["name"] = project
    emulator = compose["services"]["emulator"]
    emulator["container_name"] = project
    emulator["image"] = IMAGE
    emulator["ports"] = ["127.0.0.1::5672", "127.0.0.1::5300"]
    # The same rlimits as every container here (see podman.ULIMITS).
    emulator["ulimits"] = {}
    for option in ULIMITS[1::2]:
        name, values = option.split("=")
        soft, hard = values.split(":")
        emulator["ulimits"][name] = {"soft": int(soft), "hard": int(hard)}
    emulator["volumes"] = [
        volume.replace("./", f"{REPOSITORY}/", 1) if volume.startswith("${CONFIG_PATH") else volume
        for volume in emulator["volumes"]
    ]
    file = tmp_path / "compose.yaml"
    file.write_text(yaml.safe_dump(compose))
    base = [
        compose_command,
        "--podman-path",
        "podman",
        "--podman-args",
        " ".join(PODMAN[1:]),
        "-f",
        str(file),
    ]
    environment = {key: value for key, value in os.environ.items() if key != "CONFIG_PATH"}
    up = subprocess.run(
        [*base, "up", "-d"], capture_output=True, text=True, timeout=300, env=environment
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        container = Container(name=project)
        containers.containers.append(container)
        container.started = time.monotonic()
        container.amqp_port = container.published(5672)
        container.http_port = container.published(5300)
        container.wait_ready()
        assert "config: /ServiceBus_Emulator/ConfigFiles/Config.json" in container.logs()
        with ServiceBusClient.from_connection_string(container.connection_string) as client:
            with client.get_topic_sender("topic.1") as sender:
                sender.send_messages(ServiceBusMessage("through compose"))
            with client.get_queue_sender("queue.1") as sender:
                sender.send_messages(ServiceBusMessage("through compose"))
            assert receive(client, "queue.1", 1) == ["through compose"]
    finally:
        subprocess.run(
            [*base, "down", "--volumes"], capture_output=True, text=True, timeout=300, env=environment
        )
