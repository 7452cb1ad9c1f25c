//! SQL filter and action parameters (issue 45) on the AMQP side: `sql-parameters` in
//! `$management` add-rule, typed values in what enumerate-rules returns, a clear refusal of an
//! undefined parameter, `sql_parameters` in the configuration file, and a parametrized rule
//! added at run time surviving a kill -9 of a durable broker.

use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Symbol, Timestamp, Uuid, Value};
use fe2o3_amqp::{Receiver, Sender};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use crate::auth::Node;
use crate::harness::{Broker, property, receive};
use crate::process::BrokerProcess;

/// A topic "t" whose subscription "s" lets through only the marker (`marker = 1`) until a
/// test adds its rule.
const CONFIG: &str = r#"
[[topics]]
name = "t"
[[topics.subscriptions]]
name = "s"
[[topics.subscriptions.rules]]
name = "marker"
sql_filter = "marker = 1"
"#;

const GUID: [u8; 16] = [
    0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e,
];
/// 2024-05-06T07:08:09.123Z.
const AT_MILLISECONDS: i64 = 1_714_979_289_123;
/// 90 seconds in .NET ticks.
const SPAN_TICKS: i64 = 900_000_000;

fn text(value: &str) -> Value {
    Value::String(value.to_string())
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut map = OrderedMap::new();
    for (key, value) in entries {
        map.insert(text(key), value);
    }
    Value::Map(map)
}

fn timespan(ticks: i64) -> Value {
    Value::Described(Box::new(Described {
        descriptor: Descriptor::Name(Symbol::from("com.microsoft:timespan")),
        value: Value::Long(ticks),
    }))
}

/// Every AMQP type a parameter may have, as a .NET client would encode it.
fn typed_parameters() -> Value {
    map(vec![
        ("@s", text("red")),
        ("@i", Value::Int(7)),
        ("@l", Value::Long(1 << 40)),
        ("@d", Value::Double(2.5.into())),
        ("@b", Value::Bool(true)),
        (
            "@t",
            Value::Timestamp(Timestamp::from_milliseconds(AT_MILLISECONDS)),
        ),
        ("@g", Value::Uuid(Uuid::from(GUID))),
        ("@span", timespan(SPAN_TICKS)),
    ])
}

const TYPED_FILTER: &str =
    "(s = @s AND i = @i AND l = @l AND d = @d AND b = @b AND t = @t AND g = @g) OR marker = 1";

fn add_rule_body(name: &str, filter: Value, action: Option<Value>) -> Value {
    let mut description = vec![("sql-filter", filter)];
    if let Some(action) = action {
        description.push(("sql-rule-action", action));
    }
    map(vec![
        ("rule-name", text(name)),
        ("rule-description", map(description)),
    ])
}

async fn request(node: &mut Node, operation: &str, body: Value) -> (i32, String, Option<Value>) {
    node.request_full(
        &[("operation", SimpleValue::String(operation.to_string()))],
        body,
    )
    .await
}

/// The list inside a described value.
fn described_list(value: &Value) -> (u64, &Vec<Value>) {
    let Value::Described(described) = value else {
        panic!("a described value: {value:?}");
    };
    let Descriptor::Code(code) = described.descriptor else {
        panic!("a numeric descriptor: {value:?}");
    };
    let Value::List(list) = &described.value else {
        panic!("a described list: {value:?}");
    };
    (code, list)
}

/// enumerate-rules: each rule's name with its filter's and action's described lists.
async fn enumerate(node: &mut Node) -> Vec<(String, Vec<Value>, Vec<Value>)> {
    let (status, description, body) = request(
        node,
        "com.microsoft:enumerate-rules",
        map(vec![("top", Value::Int(100)), ("skip", Value::Int(0))]),
    )
    .await;
    assert_eq!(status, 200, "{description}");
    let body = body.expect("a body");
    let Some(Value::List(rules)) = (match &body {
        Value::Map(map) => map.get(&text("rules")),
        _ => None,
    }) else {
        panic!("rules in {body:?}");
    };
    rules
        .iter()
        .map(|entry| {
            let Value::Map(entry) = entry else {
                panic!("{entry:?}")
            };
            let (_, rule) =
                described_list(entry.get(&text("rule-description")).expect("described"));
            let (_, filter) = described_list(&rule[0]);
            let (_, action) = described_list(&rule[1]);
            let Value::String(name) = &rule[2] else {
                panic!("{rule:?}")
            };
            (name.clone(), filter.clone(), action.clone())
        })
        .collect()
}

/// Asserts a described SQL list carries `expression`, level 20 and `parameters` (a map).
fn assert_sql_list(list: &[Value], expression: &str, parameters: &Value) {
    assert_eq!(
        list.len(),
        3,
        "expression, compatibility level, parameters: {list:?}"
    );
    assert_eq!(list[0], text(expression));
    assert_eq!(list[1], Value::Int(20));
    assert_eq!(
        &list[2], parameters,
        "the parameters come back with their AMQP types"
    );
}

fn matching_properties() -> ApplicationProperties {
    ApplicationProperties::builder()
        .insert("s", "red")
        .insert("i", 7i32)
        .insert("l", 1i64 << 40)
        .insert("d", 2.5f64)
        .insert("b", true)
        .insert(
            "t",
            SimpleValue::Timestamp(Timestamp::from_milliseconds(AT_MILLISECONDS)),
        )
        .insert("g", SimpleValue::Uuid(Uuid::from(GUID)))
        .build()
}

/// Sends the matching message, one whose `l` differs, and the marker; returns what the
/// subscription delivers up to the marker (it keeps the topic's order).
async fn publish_and_receive(
    session: &mut fe2o3_amqp::session::SessionHandle<()>,
    topic: &str,
    subscription: &str,
) -> Vec<fe2o3_amqp::Delivery<Body<Value>>> {
    let mut sender = Sender::attach(session, "publisher", topic)
        .await
        .expect("sender");
    let mut other = matching_properties();
    other
        .0
        .insert("l".to_string(), SimpleValue::Long((1 << 40) + 1));
    for (body, properties) in [
        ("match", matching_properties()),
        ("other", other),
        (
            "marker",
            ApplicationProperties::builder()
                .insert("marker", 1i32)
                .build(),
        ),
    ] {
        let message = Message::builder()
            .application_properties(properties)
            .value(body.to_string())
            .build();
        sender.send(message).await.expect("accepted");
    }
    sender.close().await.ok();
    let mut receiver = Receiver::attach(
        session,
        "subscriber",
        format!("{topic}/Subscriptions/{subscription}"),
    )
    .await
    .expect("receiver");
    let mut received = Vec::new();
    loop {
        let delivery = receive(&mut receiver).await;
        receiver.accept(&delivery).await.expect("completed");
        let Body::Value(value) = delivery.body() else {
            panic!("a value body")
        };
        if value.0 == text("marker") {
            break;
        }
        received.push(delivery);
    }
    receiver.close().await.ok();
    received
}

fn body_text(delivery: &fe2o3_amqp::Delivery<Body<Value>>) -> String {
    match delivery.body() {
        Body::Value(value) => match &value.0 {
            Value::String(text) => text.clone(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn add_rule_takes_typed_sql_parameters_applies_them_and_enumerates_them() {
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut node = Node::attach(&mut session, "t/Subscriptions/s/$management", "rules").await;
    let action_parameters = map(vec![("tag", text("routed"))]);
    let (status, description, _) = request(
        &mut node,
        "com.microsoft:add-rule",
        add_rule_body(
            "typed",
            map(vec![
                ("expression", text(TYPED_FILTER)),
                ("sql-parameters", typed_parameters()),
            ]),
            Some(map(vec![
                ("expression", text("SET tag = @TAG")),
                ("sql-parameters", action_parameters.clone()),
            ])),
        ),
    )
    .await;
    assert_eq!(status, 200, "{description}");

    let rules = enumerate(&mut node).await;
    let (_, filter, action) = rules
        .iter()
        .find(|(name, _, _)| name == "typed")
        .expect("the rule is listed");
    assert_sql_list(filter, TYPED_FILTER, &typed_parameters());
    assert_sql_list(action, "SET tag = @TAG", &action_parameters);
    let (_, marker_filter, _) = rules
        .iter()
        .find(|(name, _, _)| name == "marker")
        .expect("the configured rule");
    assert_eq!(
        marker_filter,
        &vec![text("marker = 1"), Value::Int(20)],
        "a rule without parameters keeps the two documented fields"
    );

    let received = publish_and_receive(&mut session, "t", "s").await;
    assert_eq!(
        received.iter().map(body_text).collect::<Vec<_>>(),
        ["match"]
    );
    assert_eq!(
        property(&received[0], "tag"),
        Some(SimpleValue::String("routed".into())),
        "the action's parameter"
    );
}

#[tokio::test]
async fn add_rule_refuses_an_undefined_parameter_naming_it() {
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut node = Node::attach(&mut session, "t/Subscriptions/s/$management", "rules").await;
    let (status, description, _) = request(
        &mut node,
        "com.microsoft:add-rule",
        add_rule_body(
            "missing",
            map(vec![
                ("expression", text("a = @missing")),
                ("sql-parameters", map(vec![("@other", Value::Int(1))])),
            ]),
            None,
        ),
    )
    .await;
    assert_eq!(status, 400, "{description}");
    assert!(description.contains("@missing"), "{description}");
    let (status, description, _) = request(
        &mut node,
        "com.microsoft:add-rule",
        add_rule_body(
            "unknown-type",
            map(vec![
                ("expression", text("a = @p")),
                (
                    "sql-parameters",
                    map(vec![("@p", Value::Binary(vec![1].into()))]),
                ),
            ]),
            None,
        ),
    )
    .await;
    assert_eq!(status, 400, "{description}");
    assert!(description.contains("@p"), "{description}");
    let names: Vec<String> = enumerate(&mut node)
        .await
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    assert_eq!(names, ["marker"], "nothing was added");
}

const CONFIGURED: &str = r#"
[[topics]]
name = "t"
[[topics.subscriptions]]
name = "s"
[[topics.subscriptions.rules]]
name = "typed"
sql_filter = "(s = @s AND i = @i AND l = @l AND d = @d AND b = @b AND t = @t AND g = @g) OR marker = 1"
sql_action = "SET tag = @s"
sql_parameters = { "@s" = "red", "@i" = 7, "@l" = 1099511627776, "@d" = 2.5, "@b" = true, "@t" = 2024-05-06T07:08:09.123Z, "@g" = { guid = "0F8FAD5B-D9CB-469F-A165-70867728950E" }, "@span" = { duration = "90s" } }
"#;

#[tokio::test]
async fn configured_sql_parameters_are_applied_and_enumerated() {
    let broker = Broker::start(CONFIGURED).await;
    let (_connection, mut session) = broker.connect().await;
    let mut node = Node::attach(&mut session, "t/Subscriptions/s/$management", "rules").await;
    let rules = enumerate(&mut node).await;
    let [(name, filter, action)] = &rules[..] else {
        panic!("{rules:?}");
    };
    assert_eq!(name, "typed");
    // TOML's integer 1099511627776 is past 32 bits: a long; 7 an int.
    assert_sql_list(filter, TYPED_FILTER, &typed_parameters());
    assert_sql_list(action, "SET tag = @s", &typed_parameters());
    let received = publish_and_receive(&mut session, "t", "s").await;
    assert_eq!(
        received.iter().map(body_text).collect::<Vec<_>>(),
        ["match"]
    );
    assert_eq!(
        property(&received[0], "tag"),
        Some(SimpleValue::String("red".into()))
    );
}

#[test]
fn a_configured_rule_using_an_undefined_parameter_is_refused_naming_it() {
    let config = ferrobus::config::Config::from_toml_str(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions.rules]]\nname = \"r\"\nsql_filter = \"a = @missing\"\nsql_parameters = { \"@other\" = 1 }\n",
        "test.toml",
    )
    .expect("the file itself is well formed");
    let error = ferrobus::validate(&config).expect_err("the rule does not compile");
    assert!(
        error.contains("@missing") && error.contains("'r'"),
        "{error}"
    );
    let error = ferrobus::config::Config::from_toml_str(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions.rules]]\nname = \"r\"\nsql_filter = \"a = @p\"\nsql_parameters = { \"@p\" = [1] }\n",
        "test.toml",
    )
    .expect_err("an array is no parameter value")
    .to_string();
    assert!(error.contains("sql_parameters.@p"), "{error}");
}

#[tokio::test]
async fn explorer_shows_a_rules_parameters() {
    let broker = Broker::start(CONFIGURED).await;
    let (status, detail) =
        crate::explorer::api(broker.address, "GET", "entity?path=t/Subscriptions/s", None).await;
    assert_eq!(status, 200, "{detail}");
    let rule = &detail["rules"][0];
    assert_eq!(rule["name"], "typed");
    assert_eq!(rule["filter_parameters"][0]["name"], "@s");
    assert_eq!(rule["filter_parameters"][0]["type"], "string");
    assert_eq!(rule["filter_parameters"][0]["value"], "'red'");
    assert_eq!(rule["filter_parameters"][2]["type"], "long");
    assert_eq!(rule["action_parameters"][7]["value"], "1m30s");
}

fn scratch(name: &str) -> std::path::PathBuf {
    let directory = std::env::temp_dir().join(format!(
        "ferrobus-{name}-{}-{}",
        std::process::id(),
        ferrobus::encoding::ids::unique_u64()
    ));
    std::fs::create_dir_all(&directory).expect("scratch directory");
    directory
}

async fn connect(
    broker: &BrokerProcess,
) -> (
    fe2o3_amqp::connection::ConnectionHandle<()>,
    fe2o3_amqp::session::SessionHandle<()>,
) {
    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id(format!(
            "parameters-{}",
            ferrobus::encoding::ids::unique_u64()
        ))
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(format!("amqp://{}", broker.address).as_str())
        .await
        .expect("connects");
    let session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session");
    (connection, session)
}

#[tokio::test]
async fn a_parametrized_rule_added_at_run_time_survives_kill_9() {
    let directory = scratch("rule-parameters");
    let data = directory.display().to_string();
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data]);
    let (connection, mut session) = connect(&broker).await;
    let mut node = Node::attach(&mut session, "t/Subscriptions/s/$management", "rules").await;
    let action_parameters = map(vec![("@tag", timespan(-SPAN_TICKS))]);
    let (status, description, _) = request(
        &mut node,
        "com.microsoft:add-rule",
        add_rule_body(
            "kept",
            map(vec![
                ("expression", text(TYPED_FILTER)),
                ("sql-parameters", typed_parameters()),
            ]),
            Some(map(vec![
                ("expression", text("SET tag = @tag")),
                ("sql-parameters", action_parameters.clone()),
            ])),
        ),
    )
    .await;
    assert_eq!(status, 200, "{description}");
    drop(node);
    drop(session);
    drop(connection);
    drop(broker); // kill -9: the reply to add-rule came after its record was durable

    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data]);
    let (_connection, mut session) = connect(&broker).await;
    let mut node = Node::attach(&mut session, "t/Subscriptions/s/$management", "rules").await;
    let rules = enumerate(&mut node).await;
    let (_, filter, action) = rules
        .iter()
        .find(|(name, _, _)| name == "kept")
        .expect("the rule survived");
    assert_sql_list(filter, TYPED_FILTER, &typed_parameters());
    assert_sql_list(action, "SET tag = @tag", &action_parameters);
    let received = publish_and_receive(&mut session, "t", "s").await;
    assert_eq!(
        received.iter().map(body_text).collect::<Vec<_>>(),
        ["match"]
    );
    std::fs::remove_dir_all(&directory).ok();
}
