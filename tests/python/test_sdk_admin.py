"""The administration API (issue 12) through the official ``ServiceBusAdministrationClient``,
sync and async, against the data-plane connection string's host and port: the AMQP port
answers HTTPS with a development certificate the test trusts the way users would
(``connection_verify=<data_dir>/dev-ca.pem``).

Runs in both auth modes: without keys any token is accepted; with keys the SDK's SAS token
(Manage) is checked, and a wrong key is refused with 401.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityNotFoundError
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from azure.servicebus.aio.management import (
    ServiceBusAdministrationClient as AsyncAdministrationClient,
)

from conftest import KEYS_MODE, SAS_KEY_NAME, unique_id

# No entities in the file: every test creates what it uses.
EMPTY_CONFIG = ""


@pytest.fixture
def admin_broker(start_durable_broker, tmp_path: Path):
    data_dir = tmp_path / "data"
    broker = start_durable_broker(EMPTY_CONFIG, data_dir)
    ca = data_dir / "dev-ca.pem"
    assert ca.is_file(), "the development CA is written to <data_dir>/dev-ca.pem at start"
    return broker, str(ca)


def admin_client(broker, ca: str) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.connection_string, connection_verify=ca
    )


def test_queue_lifecycle_and_runtime_counts(admin_broker):
    """Create, get, list, update and delete a queue; runtime counts follow sends, receives and
    dead-lettering."""
    broker, ca = admin_broker
    admin = admin_client(broker, ca)
    name = unique_id("adminq")
    created = admin.create_queue(
        name,
        max_delivery_count=4,
        lock_duration=datetime.timedelta(seconds=30),
        default_message_time_to_live=datetime.timedelta(hours=1),
        dead_lettering_on_message_expiration=True,
    )
    assert created.name == name
    assert created.max_delivery_count == 4
    assert created.lock_duration == datetime.timedelta(seconds=30)
    assert created.default_message_time_to_live == datetime.timedelta(hours=1)
    assert created.dead_lettering_on_message_expiration is True
    assert name in [queue.name for queue in admin.list_queues()]

    with pytest.raises(ResourceExistsError):
        admin.create_queue(name)

    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(name) as sender:
            sender.send_messages([ServiceBusMessage(f"m{index}") for index in range(5)])
            sender.schedule_messages(
                ServiceBusMessage("later"),
                datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
            )
        with client.get_queue_receiver(name, max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=2, max_wait_time=5)
            assert len(received) == 2
            receiver.complete_message(received[0])
            receiver.dead_letter_message(received[1], reason="bad", error_description="test")

    runtime = admin.get_queue_runtime_properties(name)
    assert runtime.active_message_count == 3
    assert runtime.dead_letter_message_count == 1
    assert runtime.scheduled_message_count == 1
    assert runtime.transfer_message_count == 0
    assert runtime.total_message_count == 5
    assert runtime.size_in_bytes > 0
    assert runtime.created_at_utc <= runtime.updated_at_utc
    listed = {queue.name: queue for queue in admin.list_queues_runtime_properties()}
    assert listed[name].active_message_count == 3

    queue = admin.get_queue(name)
    queue.max_delivery_count = 7
    queue.lock_duration = datetime.timedelta(seconds=45)
    admin.update_queue(queue)
    updated = admin.get_queue(name)
    assert updated.max_delivery_count == 7
    assert updated.lock_duration == datetime.timedelta(seconds=45)

    admin.delete_queue(name)
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue(name)
    with pytest.raises(ResourceNotFoundError):
        admin.delete_queue(name)
    assert name not in [queue.name for queue in admin.list_queues()]


def test_updates_apply_to_the_running_queue(admin_broker):
    """An update of max delivery count changes when the running queue dead-letters (rule LCK-2)."""
    broker, ca = admin_broker
    admin = admin_client(broker, ca)
    name = unique_id("liveq")
    admin.create_queue(name, max_delivery_count=10)
    queue = admin.get_queue(name)
    queue.max_delivery_count = 1
    admin.update_queue(queue)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(name) as sender:
            sender.send_messages(ServiceBusMessage("once"))
        with client.get_queue_receiver(name, max_wait_time=5) as receiver:
            (message,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.abandon_message(message)
        with client.get_queue_receiver(
            name, sub_queue="deadletter", max_wait_time=5
        ) as dead_letters:
            (dead,) = dead_letters.receive_messages(max_message_count=1, max_wait_time=5)
            assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
            dead_letters.complete_message(dead)


def test_deleting_a_queue_fails_its_senders_and_receivers(admin_broker):
    """Senders and receivers of a deleted entity get MessagingEntityNotFoundError."""
    broker, ca = admin_broker
    admin = admin_client(broker, ca)
    name = unique_id("goneq")
    admin.create_queue(name)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        sender = client.get_queue_sender(name)
        sender.send_messages(ServiceBusMessage("before"))
        admin.delete_queue(name)
        with pytest.raises(MessagingEntityNotFoundError):
            sender.send_messages(ServiceBusMessage("after"))
        sender.close()
        with pytest.raises(MessagingEntityNotFoundError):
            with client.get_queue_receiver(name, max_wait_time=2) as receiver:
                receiver.receive_messages(max_message_count=1, max_wait_time=2)


def test_topic_subscription_and_rules(admin_broker):
    """Topics, subscriptions and rules: created, listed, filtering, deleted."""
    broker, ca = admin_broker
    admin = admin_client(broker, ca)
    topic = unique_id("admint")
    admin.create_topic(topic, default_message_time_to_live=datetime.timedelta(minutes=30))
    admin.create_subscription(topic, "red", max_delivery_count=3)
    admin.create_subscription(topic, "all")
    assert sorted(s.name for s in admin.list_subscriptions(topic)) == ["all", "red"]
    assert admin.get_subscription(topic, "red").max_delivery_count == 3
    admin.delete_rule(topic, "red", "$Default")
    admin.create_rule(
        topic,
        "red",
        "sql",
        filter=SqlRuleFilter("color = 'red'"),
        action=SqlRuleAction("SET sys.Label = 'painted'"),
    )
    admin.create_rule(
        topic, "red", "corr", filter=CorrelationRuleFilter(label="crimson", properties={"shade": 2})
    )
    rules = {rule.name: rule for rule in admin.list_rules(topic, "red")}
    assert set(rules) == {"sql", "corr"}
    assert rules["sql"].filter.sql_expression == "color = 'red'"
    assert rules["sql"].action.sql_expression == "SET sys.Label = 'painted'"
    assert rules["corr"].filter.label == "crimson"
    assert rules["corr"].filter.properties == {"shade": 2}
    assert isinstance(admin.get_rule(topic, "all", "$Default").filter, TrueRuleFilter)
    with pytest.raises(ResourceExistsError):
        admin.create_rule(topic, "red", "sql", filter=SqlRuleFilter("1=1"))

    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("r", application_properties={"color": "red"}),
                    ServiceBusMessage("b", application_properties={"color": "blue"}),
                    ServiceBusMessage("c", subject="crimson", application_properties={"shade": 2}),
                ]
            )
        with client.get_subscription_receiver(topic, "red", max_wait_time=5) as receiver:
            bodies = set()
            for _ in range(3):
                for message in receiver.receive_messages(max_message_count=5, max_wait_time=2):
                    bodies.add(str(message))
                    receiver.complete_message(message)
                if len(bodies) == 2:
                    break
            assert bodies == {"r", "c"}

    assert admin.get_subscription_runtime_properties(topic, "all").active_message_count == 3
    assert admin.get_topic_runtime_properties(topic).subscription_count == 2
    assert admin.get_topic(topic).default_message_time_to_live == datetime.timedelta(minutes=30)

    admin.delete_subscription(topic, "all")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription(topic, "all")
    admin.delete_topic(topic)
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic(topic)
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription(topic, "red")


def test_invalid_definitions_are_refused_with_the_reason(admin_broker):
    broker, ca = admin_broker
    admin = admin_client(broker, ca)
    with pytest.raises(HttpResponseError) as refused:
        admin.create_queue(unique_id("fwd"), forward_to="no-such-queue")
    assert refused.value.status_code == 400
    assert "no-such-queue" in str(refused.value)
    with pytest.raises(ResourceNotFoundError):
        admin.create_subscription("no-such-topic", "s")


def test_namespace_properties(admin_broker):
    broker, ca = admin_broker
    properties = admin_client(broker, ca).get_namespace_properties()
    # Named after the host of the connection string (an IP address whole).
    assert properties.name == broker.host
    assert properties.messaging_sku == "Standard"


@pytest.mark.skipif(not KEYS_MODE, reason="without keys any token is accepted")
def test_a_wrong_key_is_refused(admin_broker):
    broker, ca = admin_broker
    wrong = broker.connection_string_with(SAS_KEY_NAME, "not-the-key")
    admin = ServiceBusAdministrationClient.from_connection_string(wrong, connection_verify=ca)
    with pytest.raises(ClientAuthenticationError):
        admin.create_queue(unique_id("nope"))


def test_async_client(admin_broker):
    """The async administration client (aiohttp transport) does the same."""
    broker, ca = admin_broker

    async def scenario() -> None:
        async with AsyncAdministrationClient.from_connection_string(
            broker.connection_string, connection_verify=ca
        ) as admin:
            name = unique_id("asyncq")
            await admin.create_queue(name, requires_session=True)
            queue = await admin.get_queue(name)
            assert queue.requires_session is True
            names = [queue.name async for queue in admin.list_queues()]
            assert name in names
            runtime = await admin.get_queue_runtime_properties(name)
            assert runtime.active_message_count == 0
            topic = unique_id("asynct")
            await admin.create_topic(topic)
            await admin.create_subscription(topic, "s")
            await admin.create_rule(topic, "s", "r", filter=SqlRuleFilter("a = 1"))
            rules = [rule.name async for rule in admin.list_rules(topic, "s")]
            assert rules == ["$Default", "r"]
            await admin.delete_topic(topic)
            await admin.delete_queue(name)
            with pytest.raises(ResourceNotFoundError):
                await admin.get_queue(name)

    asyncio.run(scenario())


def test_entities_created_at_run_time_survive_kill_9(start_durable_broker, tmp_path: Path):
    """Entities created, changed and deleted through the admin API are durable: after kill -9
    the restarted broker has them (with their messages and rules); deleted ones stay deleted,
    also those of the configuration file."""
    data_dir = tmp_path / "data"
    config = '[[queues]]\nname = "from-file"\n[[queues]]\nname = "file-doomed"\n'
    broker = start_durable_broker(config, data_dir)
    ca = str(data_dir / "dev-ca.pem")
    admin = admin_client(broker, ca)
    admin.create_queue("made", max_delivery_count=5)
    queue = admin.get_queue("from-file")
    queue.max_delivery_count = 2
    admin.update_queue(queue)
    admin.delete_queue("file-doomed")
    admin.create_topic("made-topic")
    admin.create_subscription("made-topic", "sub")
    admin.delete_rule("made-topic", "sub", "$Default")
    admin.create_rule("made-topic", "sub", "only-red", filter=SqlRuleFilter("color = 'red'"))
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("made") as sender:
            sender.send_messages([ServiceBusMessage("kept-1"), ServiceBusMessage("kept-2")])
    broker.kill()

    restarted = start_durable_broker(config, data_dir)
    admin = admin_client(restarted, ca)
    names = sorted(queue.name for queue in admin.list_queues())
    assert names == ["from-file", "made"]
    assert admin.get_queue("made").max_delivery_count == 5
    assert admin.get_queue("from-file").max_delivery_count == 2, "the run-time change wins"
    assert admin.get_queue_runtime_properties("made").active_message_count == 2
    assert [rule.name for rule in admin.list_rules("made-topic", "sub")] == ["only-red"]
    with ServiceBusClient.from_connection_string(restarted.connection_string) as client:
        with client.get_topic_sender("made-topic") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("blue", application_properties={"color": "blue"}),
                    ServiceBusMessage("red", application_properties={"color": "red"}),
                ]
            )
        with client.get_subscription_receiver("made-topic", "sub", max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=5, max_wait_time=3)
            assert [str(message) for message in received] == ["red"]
        with client.get_queue_receiver("made", max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=5, max_wait_time=3)
            assert sorted(str(message) for message in received) == ["kept-1", "kept-2"]


def test_status_changes_apply_to_the_running_queue(admin_broker):
    """Status SendDisabled refuses sends (MessagingEntityDisabledError) and still gives out
    messages; ReceiveDisabled keeps messages back until the queue is Active again."""
    from azure.servicebus.exceptions import MessagingEntityDisabledError
    from azure.servicebus.management import EntityStatus

    broker, ca = admin_broker
    admin = admin_client(broker, ca)
    name = unique_id("statusq")
    admin.create_queue(name)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(name) as sender:
            sender.send_messages(ServiceBusMessage("first"))
        queue = admin.get_queue(name)
        queue.status = EntityStatus.SEND_DISABLED
        admin.update_queue(queue)
        assert admin.get_queue(name).status == EntityStatus.SEND_DISABLED
        # The SDK retries entity-disabled like the cloud's other transient errors: one try.
        with ServiceBusClient.from_connection_string(
            broker.connection_string, retry_total=0
        ) as impatient:
            with pytest.raises(MessagingEntityDisabledError):
                with impatient.get_queue_sender(name) as sender:
                    sender.send_messages(ServiceBusMessage("refused"))
        with client.get_queue_receiver(name, max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [str(message) for message in received] == ["first"]
            receiver.abandon_message(received[0])

        queue.status = EntityStatus.RECEIVE_DISABLED
        admin.update_queue(queue)
        with ServiceBusClient.from_connection_string(
            broker.connection_string, retry_total=0
        ) as impatient:
            with pytest.raises(MessagingEntityDisabledError):
                with impatient.get_queue_receiver(name, max_wait_time=2) as receiver:
                    receiver.receive_messages(max_message_count=1, max_wait_time=2)
        with client.get_queue_sender(name) as sender:
            sender.send_messages(ServiceBusMessage("second"))

        queue.status = EntityStatus.ACTIVE
        admin.update_queue(queue)
        with client.get_queue_receiver(name, max_wait_time=5) as receiver:
            bodies = []
            for _ in range(3):
                for message in receiver.receive_messages(max_message_count=5, max_wait_time=2):
                    bodies.append(str(message))
                    receiver.complete_message(message)
                if len(bodies) == 2:
                    break
            assert sorted(bodies) == ["first", "second"]


def test_forwarding_set_through_the_admin_client(admin_broker):
    """create_queue/update_queue with forward_to send the supplementary authorization headers
    (ServiceBusSupplementaryAuthorization, ServiceBusDlqSupplementaryAuthorization): accepted,
    with keys as without; messages and dead letters then go to the targets (rule FWD-1)."""
    broker, ca = admin_broker
    admin = admin_client(broker, ca)
    target, dead_target, source = unique_id("fwdtarget"), unique_id("fwddlq"), unique_id("fwdsrc")
    admin.create_queue(target)
    admin.create_queue(dead_target)
    created = admin.create_queue(source, forward_dead_lettered_messages_to=dead_target)
    assert created.forward_dead_lettered_messages_to.rstrip("/").endswith(dead_target)
    queue = admin.get_queue(source)
    queue.forward_to = target
    admin.update_queue(queue)
    assert admin.get_queue(source).forward_to.rstrip("/").endswith(target)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(source) as sender:
            sender.send_messages(ServiceBusMessage("onward"))
        with client.get_queue_receiver(target, max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [str(message) for message in received] == ["onward"]
            receiver.complete_message(received[0])
    assert admin.get_queue_runtime_properties(source).active_message_count == 0
