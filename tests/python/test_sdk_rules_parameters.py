"""SQL filter and action parameters (issue 45) through the official ``ServiceBusAdministrationClient``.

``SqlRuleFilter("property1 = @param1", parameters={"@param1": "value"})`` is the SDK's own
``mgmt_rule`` sample. Service Bus substitutes each ``@name`` with the value given beside the
expression, keeps the values typed as the client sent them (``string``, ``int``, ``long``,
``double``, ``boolean``, ``dateTime``, ``duration`` on the ATOM wire) and shows them back with
those types. The Python SDK has no AMQP rule manager, so every rule here goes through the admin
client; rules also come from the configuration file (``sql_parameters`` on a rule) and survive a
restart on the same data directory.

Every test starts its own broker on a data directory of its own (the admin client needs the
development CA written there), so the file runs the same in both storage modes; both auth
modes apply (keys mode checks the SDK's SAS token on every call).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Iterable, List

import pytest
from azure.core.exceptions import HttpResponseError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import (
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from conftest import unique_id

UTC = datetime.timezone.utc
MARKER = "marker"


def admin_client(broker, data_dir: Path) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.connection_string, connection_verify=str(data_dir / "dev-ca.pem")
    )


def topic_with_subscription(admin: ServiceBusAdministrationClient, subscription: str = "sub") -> str:
    """A new topic with one subscription whose `$Default` rule is gone (only the test's rules pass)."""
    topic = unique_id("params")
    admin.create_topic(topic)
    admin.create_subscription(topic, subscription)
    admin.delete_rule(topic, subscription, "$Default")
    return topic


def publish_and_receive(
    broker, topic: str, subscription: str, messages: Iterable[ServiceBusMessage], expected: int
) -> List:
    """Sends `messages` then a marker every rule in these tests passes (`marker = 1`), and
    receives until the marker: subscriptions keep the topic's order, so what arrives before it is
    exactly what the rules let through. Returns the messages before the marker."""
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(
                [*messages, ServiceBusMessage(MARKER, application_properties={"marker": 1})]
            )
        received: List = []
        with client.get_subscription_receiver(topic, subscription, max_wait_time=10) as receiver:
            for _ in range(expected + 5):
                wanted = expected + 1 - len(received)
                batch = receiver.receive_messages(max_message_count=wanted, max_wait_time=5)
                for message in batch:
                    receiver.complete_message(message)
                    received.append(message)
                if any(str(message) == MARKER for message in received):
                    break
        bodies = [str(message) for message in received]
        assert MARKER in bodies, f"the marker never arrived; received {bodies}"
        before_marker = received[: bodies.index(MARKER)]
        assert len(before_marker) == expected, [str(message) for message in before_marker]
        return before_marker


def property_of(message, name: str):
    """An application property by name (the SDK gives bytes keys, and string values as bytes)."""
    for key, value in (message.application_properties or {}).items():
        key = key.decode("utf-8") if isinstance(key, bytes) else key
        if key == name:
            return value.decode("utf-8") if isinstance(value, bytes) else value
    return None


def with_marker(expression: str) -> str:
    return f"({expression}) OR marker = 1"


def test_the_sdk_sample_parametrized_filter_is_created_read_back_and_applied(start_durable_broker, tmp_path):
    """The mgmt_rule sample: two parameters, a string and an int, read back with their types."""
    data_dir = tmp_path / "data"
    broker = start_durable_broker("", data_dir)
    admin = admin_client(broker, data_dir)
    topic = topic_with_subscription(admin)
    sample_filter = SqlRuleFilter(
        with_marker("property1 = @param1 AND property2 = @param2"),
        parameters={"@param1": "value", "@param2": 1},
    )
    created = admin.create_rule(topic, "sub", "sql_rule", filter=sample_filter)
    assert created.filter.parameters == {"@param1": "value", "@param2": 1}

    rule = admin.get_rule(topic, "sub", "sql_rule")
    assert rule.filter.sql_expression == with_marker("property1 = @param1 AND property2 = @param2")
    assert rule.filter.parameters == {"@param1": "value", "@param2": 1}
    assert type(rule.filter.parameters["@param2"]) is int
    listed = {rule.name: rule for rule in admin.list_rules(topic, "sub")}
    assert listed["sql_rule"].filter.parameters == {"@param1": "value", "@param2": 1}

    received = publish_and_receive(
        broker,
        topic,
        "sub",
        [
            ServiceBusMessage("match", application_properties={"property1": "value", "property2": 1}),
            ServiceBusMessage("other-int", application_properties={"property1": "value", "property2": 2}),
            ServiceBusMessage("other-text", application_properties={"property1": "VALUE", "property2": 1}),
        ],
        expected=1,
    )
    assert [str(message) for message in received] == ["match"]


TYPED_PARAMETERS = {
    "@s": "text",
    "@i": 7,
    "@l": 2**40,
    "@d": 2.5,
    "@b": True,
    # The SDK writes a dateTime to the second (isodate's default format drops the fraction).
    "@dt": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
}
TYPED_EXPRESSION = "s = @s AND i = @i AND l = @l AND d = @d AND b = @b AND dt = @dt"


def test_every_type_the_sdk_sends_is_kept_and_compared_as_typed(start_durable_broker, tmp_path):
    """string, int, long (past 2^31), double, boolean and dateTime on the filter, a duration and a
    string on the action: read back with the same Python types, matched as those types."""
    data_dir = tmp_path / "data"
    broker = start_durable_broker("", data_dir)
    admin = admin_client(broker, data_dir)
    topic = topic_with_subscription(admin)
    action_parameters = {"@tag": "routed", "@td": datetime.timedelta(minutes=90, seconds=1.5)}
    admin.create_rule(
        topic,
        "sub",
        "typed",
        filter=SqlRuleFilter(with_marker(TYPED_EXPRESSION), parameters=TYPED_PARAMETERS),
        action=SqlRuleAction("SET tag = @tag", parameters=action_parameters),
    )
    rule = admin.get_rule(topic, "sub", "typed")
    assert rule.filter.parameters == TYPED_PARAMETERS
    for name, value in TYPED_PARAMETERS.items():
        assert type(rule.filter.parameters[name]) is type(value), name
    assert rule.action.sql_expression == "SET tag = @tag"
    assert rule.action.parameters == action_parameters
    assert type(rule.action.parameters["@td"]) is datetime.timedelta

    matching = {
        "s": "text",
        "i": 7,
        # pyamqp sends an int property as a 32-bit int: 2^40 goes as a double (exact).
        "l": float(2**40),
        "d": 2.5,
        "b": True,
        "dt": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
    }
    received = publish_and_receive(
        broker,
        topic,
        "sub",
        [
            ServiceBusMessage("all-equal", application_properties=matching),
            ServiceBusMessage("long-differs", application_properties={**matching, "l": float(2**40 + 1)}),
            ServiceBusMessage("bool-differs", application_properties={**matching, "b": False}),
            ServiceBusMessage(
                "time-differs",
                application_properties={
                    **matching,
                    "dt": datetime.datetime(2024, 5, 6, 7, 8, 9, 1000, tzinfo=UTC),
                },
            ),
        ],
        expected=1,
    )
    assert [str(message) for message in received] == ["all-equal"]
    assert property_of(received[0], "tag") == "routed", "the action's parameter was applied"


def test_names_match_with_or_without_at_ignoring_case_and_undefined_ones_are_refused(
    start_durable_broker, tmp_path
):
    data_dir = tmp_path / "data"
    broker = start_durable_broker("", data_dir)
    admin = admin_client(broker, data_dir)
    topic = topic_with_subscription(admin)
    # Given without `@` and in another case than the expression writes it.
    admin.create_rule(
        topic, "sub", "limit", filter=SqlRuleFilter(with_marker("n > @Limit"), parameters={"LIMIT": 5})
    )
    assert admin.get_rule(topic, "sub", "limit").filter.parameters == {"LIMIT": 5}

    with pytest.raises(HttpResponseError) as refused:
        admin.create_rule(
            topic, "sub", "missing", filter=SqlRuleFilter("a = @missing", parameters={"@other": 1})
        )
    assert refused.value.status_code == 400
    assert "@missing" in str(refused.value)
    with pytest.raises(HttpResponseError) as refused:
        admin.create_rule(
            topic,
            "sub",
            "missing-action",
            filter=SqlRuleFilter("1=1"),
            action=SqlRuleAction("SET a = @nothing"),
        )
    assert refused.value.status_code == 400
    assert "@nothing" in str(refused.value)
    assert [rule.name for rule in admin.list_rules(topic, "sub")] == ["limit"]

    received = publish_and_receive(
        broker,
        topic,
        "sub",
        [
            ServiceBusMessage("five", application_properties={"n": 5}),
            ServiceBusMessage("six", application_properties={"n": 6}),
        ],
        expected=1,
    )
    assert [str(message) for message in received] == ["six"]


CONFIGURED = """
[[topics]]
name = "configured"
[[topics.subscriptions]]
name = "sub"
[[topics.subscriptions.rules]]
name = "typed"
sql_filter = "(color = @color AND size > @n AND weight < @big AND ratio = @ratio AND on = @on AND at = @at) OR marker = 1"
sql_parameters = { "@color" = "red", "@n" = 3, "@big" = 5000000000, "@ratio" = 0.5, "@on" = true, "@at" = 2024-05-06T07:08:09Z, "@ttl" = { duration = "PT1M30S" }, "@id" = { guid = "0f8fad5b-d9cb-469f-a165-70867728950e" } }
sql_action = "SET tag = @color"
"""


def test_parameters_from_the_configuration_file(start_durable_broker, tmp_path):
    """`sql_parameters` on a configured rule: typed as TOML writes them (an integer past 2^31 is
    a long; `{ duration = ... }` and `{ guid = ... }` for the types TOML lacks), shown back
    through the admin API on the filter and the action, and applied."""
    data_dir = tmp_path / "data"
    broker = start_durable_broker(CONFIGURED, data_dir)
    admin = admin_client(broker, data_dir)
    rule = admin.get_rule("configured", "sub", "typed")
    expected = {
        "@color": "red",
        "@n": 3,
        "@big": 5000000000,
        "@ratio": 0.5,
        "@on": True,
        "@at": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
        "@ttl": datetime.timedelta(minutes=1, seconds=30),
        # The SDK reads a guid back as its text.
        "@id": "0f8fad5b-d9cb-469f-a165-70867728950e",
    }
    assert rule.filter.parameters == expected
    assert rule.action.parameters == expected
    received = publish_and_receive(
        broker,
        "configured",
        "sub",
        [
            ServiceBusMessage(
                "match",
                application_properties={
                    "color": "red",
                    "size": 4,
                    "weight": 10,
                    "ratio": 0.5,
                    "on": True,
                    "at": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
                },
            ),
            ServiceBusMessage(
                "too-small",
                application_properties={
                    "color": "red",
                    "size": 3,
                    "weight": 10,
                    "ratio": 0.5,
                    "on": True,
                    "at": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
                },
            ),
        ],
        expected=1,
    )
    assert [str(message) for message in received] == ["match"]
    assert property_of(received[0], "tag") == "red"


def test_a_parametrized_rule_added_at_run_time_survives_kill_9(start_durable_broker, tmp_path):
    data_dir = tmp_path / "data"
    broker = start_durable_broker("", data_dir)
    admin = admin_client(broker, data_dir)
    topic = topic_with_subscription(admin)
    admin.create_rule(
        topic,
        "sub",
        "kept",
        filter=SqlRuleFilter(with_marker(TYPED_EXPRESSION), parameters=TYPED_PARAMETERS),
        action=SqlRuleAction("SET tag = @tag", parameters={"@tag": "after-restart"}),
    )
    broker.kill()

    restarted = start_durable_broker("", data_dir)
    admin = admin_client(restarted, data_dir)
    rule = admin.get_rule(topic, "sub", "kept")
    assert rule.filter.parameters == TYPED_PARAMETERS
    for name, value in TYPED_PARAMETERS.items():
        assert type(rule.filter.parameters[name]) is type(value), name
    assert rule.action.parameters == {"@tag": "after-restart"}
    matching = {
        "s": "text",
        "i": 7,
        # pyamqp sends an int property as a 32-bit int: 2^40 goes as a double (exact).
        "l": float(2**40),
        "d": 2.5,
        "b": True,
        "dt": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
    }
    received = publish_and_receive(
        restarted,
        topic,
        "sub",
        [
            ServiceBusMessage("kept", application_properties=matching),
            ServiceBusMessage("other", application_properties={**matching, "s": "else"}),
        ],
        expected=1,
    )
    assert [str(message) for message in received] == ["kept"]
    assert property_of(received[0], "tag") == "after-restart"
