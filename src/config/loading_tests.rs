//! Loading tests: TOML text in, the expected `Config` out; the sample file; `load`; summary.
//!
//! Rejections are in `rejection_tests.rs`; the helpers here are shared with it.

use std::time::Duration;

use super::*;

/// The sample configuration shipped as `config/ferrobus.toml`.
pub(super) const SAMPLE: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/config/ferrobus.toml"));

/// Loads `text`, panicking with the error if it is rejected.
pub(super) fn load(text: &str) -> Config {
    match Config::from_toml_str(text, "test.toml") {
        Ok(config) => config,
        Err(error) => panic!("config should load: {error}"),
    }
}
#[test]
fn empty_file_gives_defaults_and_no_entities() {
    let config = load("");
    assert_eq!(config, Config::default());
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:5672");
    assert_eq!(config.server.idle_timeout, Duration::from_secs(120));
    assert_eq!(config.server.handshake_timeout, Duration::from_secs(30));
    assert_eq!(config.server.filter_evaluation_budget, 16_000_000);
    assert_eq!(config.server.max_frame_size, 1_048_576);
    assert_eq!(config.server.max_connections, 10_000);
    assert!(config.auth.keys.is_empty());
    assert_eq!(config.entity_count(), 0);
}

#[test]
fn entity_defaults_are_applied() {
    let config = load(
        "[[queues]]\nname = \"q\"\n[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n",
    );
    let queue = &config.queues[0];
    assert_eq!(queue, &QueueConfig::new("q"));
    assert_eq!(queue.lock_duration, Duration::from_secs(60));
    assert_eq!(queue.max_delivery_count, 10);
    assert_eq!(queue.default_message_time_to_live, None);
    assert_eq!(
        queue.duplicate_detection_history_time_window,
        Duration::from_secs(600)
    );
    assert_eq!(queue.auto_delete_on_idle, None);
    assert_eq!(queue.max_size_in_megabytes, 1024);
    assert_eq!(queue.max_message_size_in_kilobytes, 256);
    assert_eq!(config.topics[0].name, "t");
    let subscription = &config.topics[0].subscriptions[0];
    assert_eq!(subscription, &SubscriptionConfig::new("s"));
    assert!(subscription.dead_lettering_on_filter_evaluation_exceptions);
    assert_eq!(subscription.rules, vec![RuleConfig::default_rule()]);
    assert_eq!(subscription.rules[0].name, "$Default");
    assert_eq!(subscription.rules[0].filter, FilterConfig::True);
    assert_eq!(config.entity_count(), 3);
}

#[test]
fn every_key_is_read() {
    let config = load(
        r#"
[server]
listen = "0.0.0.0:5673"
idle_timeout = "30s"
handshake_timeout = "300ms"
filter_evaluation_budget = 5000
max_frame_size = 512
max_connections = 1
[[auth.keys]]
name = "RootManageSharedAccessKey"
key = "SAS_KEY_VALUE"
rights = ["manage"]
[[auth.keys]]
name = "sender"
key = "k"
rights = ["SEND", "Listen"]
[[queues]]
name = "orders"
lock_duration = "200ms"
max_delivery_count = 3
default_message_time_to_live = "P14D"
dead_lettering_on_message_expiration = true
requires_session = true
requires_duplicate_detection = true
duplicate_detection_history_time_window = "PT1M"
auto_delete_on_idle = "PT1H"
forward_to = "EVENTS"
forward_dead_lettered_messages_to = "dlq-sink"
max_size_in_megabytes = 2048
max_message_size_in_kilobytes = 102400
[[queues]]
name = "dlq-sink"
[[topics]]
name = "events"
default_message_time_to_live = "1d"
requires_duplicate_detection = true
duplicate_detection_history_time_window = "5m"
auto_delete_on_idle = "2h"
max_size_in_megabytes = 5
max_message_size_in_kilobytes = 1
[[topics.subscriptions]]
name = "all"
lock_duration = "PT0.5S"
max_delivery_count = 1
default_message_time_to_live = "1h"
dead_lettering_on_message_expiration = true
dead_lettering_on_filter_evaluation_exceptions = false
requires_session = true
forward_to = "dlq-sink"
forward_dead_lettered_messages_to = "events"
auto_delete_on_idle = "P1DT2H30M"
[[topics.subscriptions.rules]]
name = "big-red"
sql_filter = "color = 'red' AND amount > 10"
sql_action = "SET sys.Label = 'big'"
"#,
    );
    assert_eq!(config.server.listen.to_string(), "0.0.0.0:5673");
    assert_eq!(config.server.idle_timeout, Duration::from_secs(30));
    assert_eq!(config.server.handshake_timeout, Duration::from_millis(300));
    assert_eq!(config.server.filter_evaluation_budget, 5_000);
    assert_eq!(
        (config.server.max_frame_size, config.server.max_connections),
        (512, 1)
    );
    assert_eq!(config.auth.keys[0].rights, Rights::ALL);
    let sender = Rights {
        manage: false,
        send: true,
        listen: true,
    };
    assert_eq!(config.auth.keys[1].rights, sender);
    let queue = &config.queues[0];
    assert_eq!(queue.lock_duration, Duration::from_millis(200));
    assert_eq!(queue.max_delivery_count, 3);
    assert_eq!(
        queue.default_message_time_to_live,
        Some(Duration::from_secs(14 * 86_400))
    );
    assert!(queue.dead_lettering_on_message_expiration && queue.requires_session);
    assert!(queue.requires_duplicate_detection);
    assert_eq!(
        queue.duplicate_detection_history_time_window,
        Duration::from_secs(60)
    );
    assert_eq!(queue.auto_delete_on_idle, Some(Duration::from_secs(3_600)));
    assert_eq!(queue.forward_to.as_deref(), Some("EVENTS"));
    assert_eq!(
        queue.forward_dead_lettered_messages_to.as_deref(),
        Some("dlq-sink")
    );
    assert_eq!(
        (
            queue.max_size_in_megabytes,
            queue.max_message_size_in_kilobytes
        ),
        (2048, 102_400)
    );
    let topic = &config.topics[0];
    assert_eq!(
        topic.default_message_time_to_live,
        Some(Duration::from_secs(86_400))
    );
    assert!(topic.requires_duplicate_detection);
    assert_eq!(
        topic.duplicate_detection_history_time_window,
        Duration::from_secs(300)
    );
    assert_eq!(topic.auto_delete_on_idle, Some(Duration::from_secs(7_200)));
    assert_eq!(
        (
            topic.max_size_in_megabytes,
            topic.max_message_size_in_kilobytes
        ),
        (5, 1)
    );
    let subscription = &topic.subscriptions[0];
    assert_eq!(subscription.lock_duration, Duration::from_millis(500));
    assert_eq!(subscription.max_delivery_count, 1);
    assert_eq!(
        subscription.default_message_time_to_live,
        Some(Duration::from_secs(3_600))
    );
    assert!(subscription.dead_lettering_on_message_expiration);
    assert!(!subscription.dead_lettering_on_filter_evaluation_exceptions);
    assert!(subscription.requires_session);
    assert_eq!(subscription.forward_to.as_deref(), Some("dlq-sink"));
    assert_eq!(
        subscription.forward_dead_lettered_messages_to.as_deref(),
        Some("events")
    );
    assert_eq!(
        subscription.auto_delete_on_idle,
        Some(Duration::from_secs(95_400))
    );
    let rule = &subscription.rules[0];
    assert_eq!(rule.name, "big-red");
    assert_eq!(
        rule.filter,
        FilterConfig::Sql("color = 'red' AND amount > 10".to_string())
    );
    assert_eq!(rule.action.as_deref(), Some("SET sys.Label = 'big'"));
    assert_eq!(config.entity_count(), 4);
}

#[test]
fn correlation_filter_properties_are_typed_and_ordered() {
    let config = load(
        r#"
[[topics]]
name = "t"
[[topics.subscriptions]]
name = "s"
[[topics.subscriptions.rules]]
name = "typed"
correlation_filter = { subject = "order", content_type = "application/json", properties = { region = "eu", count = 3, ratio = 0.5, urgent = true, big = -9000000000 } }
"#,
    );
    let FilterConfig::Correlation(filter) = &config.topics[0].subscriptions[0].rules[0].filter
    else {
        panic!("expected a correlation filter");
    };
    assert_eq!(filter.subject.as_deref(), Some("order"));
    assert_eq!(filter.content_type.as_deref(), Some("application/json"));
    assert_eq!(filter.correlation_id, None);
    let expected = vec![
        (
            "region".to_string(),
            PropertyLiteral::String("eu".to_string()),
        ),
        ("count".to_string(), PropertyLiteral::Integer(3)),
        ("ratio".to_string(), PropertyLiteral::Float(0.5)),
        ("urgent".to_string(), PropertyLiteral::Bool(true)),
        ("big".to_string(), PropertyLiteral::Integer(-9_000_000_000)),
    ];
    assert_eq!(filter.properties, expected);
}

#[test]
fn builtin_default_is_the_emulator_sample() {
    let config = Config::builtin_default();
    assert_eq!(config.server, ServerConfig::default());
    assert!(config.auth.keys.is_empty());
    assert_eq!(config.queues, vec![QueueConfig::new("queue.1")]);
    assert_eq!(config.topics.len(), 1);
    assert_eq!(config.topics[0].name, "topic.1");
    let subscription = &config.topics[0].subscriptions[0];
    assert_eq!(subscription.name, "subscription.1");
    assert_eq!(subscription.rules, vec![RuleConfig::default_rule()]);
    assert_eq!(config.entity_count(), 3);
    assert!(config.validate().is_ok());
}

#[test]
fn sample_file_parses_to_the_builtin_default() {
    assert_eq!(load(SAMPLE), Config::builtin_default());
}

/// Uncomments lines of the form `# key = value` and `# [table]`, leaving prose alone.
pub(super) fn uncomment_examples(text: &str) -> String {
    let uncommented: Vec<&str> = text
        .lines()
        .map(|line| {
            let Some(rest) = line.strip_prefix("# ") else {
                return line;
            };
            let key: String = rest
                .chars()
                .take_while(|character| character.is_ascii_lowercase() || *character == '_')
                .collect();
            let is_key = !key.is_empty() && rest[key.len()..].starts_with(" = ");
            if rest.starts_with('[') || is_key {
                rest
            } else {
                line
            }
        })
        .collect();
    uncommented.join("\n")
}

#[test]
fn sample_file_examples_are_valid_when_uncommented() {
    let config = load(&uncomment_examples(SAMPLE));
    assert_eq!(config.auth.keys.len(), 1);
    assert_eq!(config.queues.len(), 2);
    assert_eq!(
        config.queues[0].auto_delete_on_idle,
        Some(Duration::from_secs(3_600))
    );
    let rules = &config.topics[0].subscriptions[0].rules;
    assert_eq!(rules.len(), 3);
    assert_eq!(
        rules[1].parameters[..2],
        [
            ("@color".to_string(), ParameterValue::String("red".into())),
            ("@min".to_string(), ParameterValue::Int(10)),
        ]
    );
    crate::broker::rules::compile(&rules[1], 0).expect("the parametrized example compiles");
    let FilterConfig::Correlation(filter) = &rules[2].filter else {
        panic!("expected a correlation filter");
    };
    assert_eq!(filter.reply_to_session_id.as_deref(), Some("session-2"));
    assert_eq!(filter.properties.len(), 4);
    assert_eq!(
        filter.properties[2],
        ("weight".to_string(), PropertyLiteral::Float(1.5))
    );
}

#[test]
fn load_reports_missing_file_with_its_path() {
    let path = std::path::Path::new("/nonexistent/ferrobus.toml");
    let message = Config::load(path)
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(
        message.starts_with("cannot read config file /nonexistent/ferrobus.toml: "),
        "{message}"
    );
}

#[test]
fn load_reads_a_file_and_uses_its_path_as_origin() -> std::io::Result<()> {
    let path =
        std::env::temp_dir().join(format!("ferrobus-config-test-{}.toml", std::process::id()));
    std::fs::write(&path, "[[queues]]\nname = \"q\"\n")?;
    let loaded = Config::load(&path).map(|config| config.queues.len());
    std::fs::write(&path, "\n[[queues]]\nnam = \"q\"\n")?;
    let message = Config::load(&path)
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    std::fs::remove_file(&path)?;
    assert_eq!(loaded.ok(), Some(1));
    assert!(
        message.starts_with(&format!("{}:3:", path.display())),
        "{message}"
    );
    Ok(())
}

#[test]
fn shared_access_key_debug_hides_the_secret() {
    let config =
        load("[[auth.keys]]\nname = \"root\"\nkey = \"TOP-SECRET\"\nrights = [\"Manage\"]");
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("TOP-SECRET") && debug.contains("root"),
        "{debug}"
    );
    assert!(!config.summary().contains("TOP-SECRET"));
}

#[test]
fn summary_lists_entities_and_key_settings() {
    let summary = load(&uncomment_examples(SAMPLE)).summary();
    for expected in [
        "server: listen 127.0.0.1:5672, idle timeout 2m",
        "auth key \"RootManageSharedAccessKey\": Manage, Send, Listen",
        "queue \"queue.1\": lock 1m, max deliveries 10, time to live 14d",
        "forwards to \"queue.2\"",
        "queue \"queue.2\"",
        "topic \"topic.1\"",
        "  subscription \"subscription.1\": lock 1m",
        "    rule \"big-red\": sql color = 'red' AND amount > 10; action SET sys.Label = 'big'",
        "properties.region = \"eu\", properties.priority = 2",
        "4 entities: 2 queue(s), 1 topic(s), 1 subscription(s)",
    ] {
        assert!(
            summary.contains(expected),
            "summary should contain {expected:?}:\n{summary}"
        );
    }
    let builtin = Config::builtin_default().summary();
    assert!(builtin.contains("no keys configured"), "{builtin}");
    assert!(
        builtin.contains("rule \"$Default\": true filter"),
        "{builtin}"
    );
}

#[test]
fn http_guard_keys_are_read_with_their_defaults() {
    let defaults = load("");
    assert_eq!(defaults.http.max_connections, 1_000);
    assert!(defaults.http.allowed_hosts.is_empty());
    let config = load(
        "[http]\nallowed_hosts = [\"Broker.Internal\", \"*.corp.example\", \"*\"]\nmax_connections = 5\n",
    );
    assert_eq!(
        config.http.allowed_hosts,
        ["broker.internal", "*.corp.example", "*"]
    );
    assert_eq!(config.http.max_connections, 5);
}
