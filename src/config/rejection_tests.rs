//! Rejection tests: each broken rule gives a one-line `ConfigError` naming its key path.
//!
//! Checked by message content (the key path and the key), since the message is the contract
//! users see.

use std::time::Duration;

use super::loading_tests::load;
use super::*;

/// The one-line message of the error `text` must produce.
fn error_of(text: &str) -> String {
    match Config::from_toml_str(text, "test.toml") {
        Ok(config) => panic!("config should be rejected: {config:#?}"),
        Err(error) => error.to_string(),
    }
}

fn assert_error(text: &str, expected_parts: &[&str]) {
    let message = error_of(text);
    assert!(
        !message.contains('\n'),
        "message should be one line: {message}"
    );
    for part in expected_parts {
        assert!(
            message.contains(part),
            "{message:?} should contain {part:?}"
        );
    }
}

#[test]
fn unknown_key_names_the_key_and_line() {
    let text = "[server]\nlisten = \"127.0.0.1:5672\"\n\n[[queues]]\nname = \"q\"\nlock_durration = \"PT1M\"\n";
    let error = Config::from_toml_str(text, "ferrobus.toml").err();
    let Some(ConfigError::Parse {
        origin,
        line,
        message,
    }) = error
    else {
        panic!("expected a parse error, got {error:?}");
    };
    assert_eq!(origin, "ferrobus.toml");
    assert_eq!(line, Some(6));
    assert!(message.contains("lock_durration"), "{message}");
    assert_error(text, &["test.toml:6:", "lock_durration"]);
}

#[test]
fn unknown_keys_are_rejected_in_every_table() {
    assert_error("colour = 1", &[":1:", "colour"]);
    assert_error("[server]\nport = 1", &[":2:", "port"]);
    assert_error("[auth]\nmode = 1", &[":2:", "mode"]);
    assert_error(
        "[[auth.keys]]\nname = \"a\"\nkey = \"b\"\nsecret = 1",
        &[":4:", "secret"],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\nlock_duration = \"1s\"",
        &[":3:", "lock_duration"],
    );
    let subscription = "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n";
    assert_error(
        &format!("{subscription}max_size_in_megabytes = 1"),
        &[":5:", "max_size_in_megabytes"],
    );
    assert_error(
        &format!("{subscription}[[topics.subscriptions.rules]]\nname = \"r\"\nfilter = \"x\""),
        &[":7:", "filter"],
    );
    assert_error(
        &format!(
            "{subscription}[[topics.subscriptions.rules]]\nname = \"r\"\ncorrelation_filter = {{ label = \"x\" }}"
        ),
        &[":7:", "label"],
    );
}

#[test]
fn syntax_and_type_errors_have_lines() {
    assert_error("[server\n", &["test.toml:1:"]);
    assert_error(
        "[server]\nmax_frame_size = \"big\"",
        &["test.toml:2:", "u32"],
    );
    assert_error(
        "[[queues]]\nname = \"q\"\nmax_delivery_count = -1",
        &["test.toml:3:"],
    );
    assert_error(
        "[[queues]]\nlock_duration = \"1s\"",
        &["test.toml:1:", "name"],
    );
}

#[test]
fn bad_durations_name_the_key_and_quote_the_value() {
    assert_error(
        "[server]\nidle_timeout = \"soon\"",
        &["server: idle_timeout", "\"soon\""],
    );
    assert_error(
        "[[queues]]\nname = \"orders\"\nlock_duration = \"PT1Q\"",
        &["queues[0] \"orders\": lock_duration", "\"PT1Q\""],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\nauto_delete_on_idle = \"forever\"",
        &["topics[0] \"t\": auto_delete_on_idle", "\"forever\""],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\ndefault_message_time_to_live = \"10\"",
        &[
            "topics[0] \"t\" subscriptions[0] \"s\": default_message_time_to_live",
            "\"10\"",
        ],
    );
}

#[test]
fn zero_durations_that_make_no_sense_are_rejected() {
    assert_error(
        "[[queues]]\nname = \"q\"\nlock_duration = \"0s\"",
        &["queues[0] \"q\"", "lock_duration must be greater than zero"],
    );
    assert_error(
        "[[queues]]\nname = \"q\"\ndefault_message_time_to_live = \"PT0S\"",
        &["default_message_time_to_live"],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\nduplicate_detection_history_time_window = \"0ms\"",
        &["topics[0]", "duplicate_detection_history_time_window"],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nlock_duration = \"0s\"",
        &["subscriptions[0] \"s\"", "lock_duration"],
    );
}

#[test]
fn server_ranges_are_checked() {
    assert_error(
        "[server]\nmax_frame_size = 511",
        &["server", "max_frame_size 511"],
    );
    assert_error(
        "[server]\nmax_connections = 0",
        &["server", "max_connections"],
    );
    assert_error(
        "[server]\nhandshake_timeout = \"0s\"",
        &["server", "handshake_timeout must be greater than zero"],
    );
    assert_error(
        "[server]\nfilter_evaluation_budget = 0",
        &["server", "filter_evaluation_budget must be at least 1"],
    );
    assert_error(
        "[server]\nhandshake_timeout = \"later\"",
        &["server: handshake_timeout", "\"later\""],
    );
    assert_error(
        "[server]\nlisten = \"localhost:5672\"",
        &["server", "listen \"localhost:5672\""],
    );
}

#[test]
fn entity_ranges_are_checked() {
    assert_error(
        "[[queues]]\nname = \"q\"\nmax_delivery_count = 0",
        &["queues[0] \"q\"", "max_delivery_count"],
    );
    assert_error(
        "[[queues]]\nname = \"q\"\nmax_size_in_megabytes = 0",
        &["queues[0] \"q\"", "max_size_in_megabytes"],
    );
    assert_error(
        "[[queues]]\nname = \"q\"\nmax_message_size_in_kilobytes = 102401",
        &["max_message_size_in_kilobytes 102401"],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nmax_delivery_count = 0",
        &["subscriptions[0] \"s\"", "max_delivery_count"],
    );
}

#[test]
fn auth_keys_are_checked() {
    let key = |name: &str, rights: &str| {
        format!("[[auth.keys]]\nname = \"{name}\"\nkey = \"secret\"\nrights = {rights}\n")
    };
    assert_error(
        &key("admin", "[\"Admin\"]"),
        &["auth.keys[0] \"admin\"", "unknown right \"Admin\""],
    );
    assert_error(&key("admin", "[]"), &["auth.keys[0] \"admin\"", "rights"]);
    assert_error(
        "[[auth.keys]]\nname = \"a\"\nkey = \"\"\nrights = [\"Send\"]",
        &["auth.keys[0] \"a\"", "key is empty"],
    );
    assert_error(
        &format!(
            "{}{}",
            key("Root", "[\"Send\"]"),
            key("root", "[\"Listen\"]")
        ),
        &["auth.keys[1] \"root\"", "auth.keys[0]"],
    );
}

#[test]
fn entity_names_are_checked() {
    assert_error(
        "[[queues]]\nname = \"bad$name\"",
        &["queues[0] \"bad$name\"", "'$'"],
    );
    assert_error(
        "[[topics]]\nname = \"-t\"",
        &["topics[0] \"-t\"", "start and end"],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"a/b\"",
        &["topics[0] \"t\" subscriptions[0] \"a/b\"", "'/'"],
    );
    let long = "r".repeat(51);
    assert_error(
        &format!(
            "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions.rules]]\nname = \"{long}\"\nsql_filter = \"1=1\""
        ),
        &["rules[0]", "limit is 50"],
    );
}

#[test]
fn dot_segments_are_refused_in_every_name_from_the_file() {
    // Issue 41: `a/../b` is `b` to a client that normalises paths.
    assert_error(
        "[[queues]]\nname = \"adv-q/../evil-q\"",
        &["queues[0] \"adv-q/../evil-q\"", "path segment \"..\""],
    );
    assert_error(
        "[[topics]]\nname = \"sales/./eu\"",
        &["topics[0] \"sales/./eu\"", "path segment \".\""],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"..\"",
        &["topics[0] \"t\" subscriptions[0] \"..\"", "start and end"],
    );
    assert_error(
        "[[queues]]\nname = \"a\"\nforward_to = \"a/../b\"\n[[queues]]\nname = \"b\"",
        &["queues[0] \"a\"", "forward_to", "path segment \"..\""],
    );
    assert_error(
        "[[queues]]\nname = \"b\"\n[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nforward_dead_lettered_messages_to = \"x/./b\"",
        &[
            "subscriptions[0] \"s\"",
            "forward_dead_lettered_messages_to",
            "path segment \".\"",
        ],
    );
}

#[test]
fn names_are_unique_case_insensitively() {
    assert_error(
        "[[queues]]\nname = \"Orders\"\n[[queues]]\nname = \"orders\"",
        &["queues[1] \"orders\"", "queues[0] \"Orders\""],
    );
    assert_error(
        "[[queues]]\nname = \"orders\"\n[[topics]]\nname = \"ORDERS\"",
        &["topics[0] \"ORDERS\"", "queues[0] \"orders\""],
    );
    assert_error(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions]]\nname = \"S\"",
        &["subscriptions[1] \"S\"", "subscriptions[0]"],
    );
    let rule = "[[topics.subscriptions.rules]]\nname = \"r\"\nsql_filter = \"1=1\"\n";
    assert_error(
        &format!(
            "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n{rule}{}",
            rule.replace("\"r\"", "\"R\"")
        ),
        &["rules[1] \"R\"", "rules[0]"],
    );
}

#[test]
fn forward_targets_must_exist_and_not_be_the_entity_itself() {
    let queues =
        "[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n[[queues]]\nname = \"orders\"\n";
    assert_error(
        &format!("{queues}forward_to = \"nope\""),
        &["queues[2] \"orders\": forward_to \"nope\" is not a queue or topic"],
    );
    assert_error(
        &format!("{queues}forward_dead_lettered_messages_to = \"Orders\""),
        &["queues[2] \"orders\"", "itself"],
    );
    let topic = "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n";
    assert_error(
        &format!("{topic}forward_to = \"missing\""),
        &["subscriptions[0] \"s\"", "forward_to \"missing\""],
    );
    assert_error(
        &format!("{topic}forward_to = \"T\""),
        &["subscriptions[0] \"s\"", "forward_to \"T\""],
    );
    assert_error(
        &format!("{topic}forward_dead_lettered_messages_to = \"x\""),
        &["forward_dead_lettered_messages_to \"x\""],
    );
    let config = load(&format!(
        "{queues}forward_to = \"A\"\n{topic}forward_to = \"orders\"\nforward_dead_lettered_messages_to = \"t\""
    ));
    assert_eq!(config.queues[2].forward_to.as_deref(), Some("A"));
}

#[test]
fn rules_need_exactly_one_filter() {
    let prefix = "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions.rules]]\nname = \"r\"\n";
    assert_error(
        prefix,
        &[
            "rules[0] \"r\"",
            "neither sql_filter nor correlation_filter",
        ],
    );
    assert_error(
        &format!("{prefix}sql_filter = \"1=1\"\ncorrelation_filter = {{ subject = \"x\" }}"),
        &["rules[0] \"r\"", "both"],
    );
    assert_error(
        &format!("{prefix}correlation_filter = {{}}"),
        &["rules[0] \"r\"", "correlation_filter sets no field"],
    );
    assert_error(
        &format!("{prefix}correlation_filter = {{ properties = {{}} }}"),
        &["correlation_filter sets no field"],
    );
    assert_error(
        &format!("{prefix}sql_filter = \"  \""),
        &["rules[0] \"r\"", "sql_filter is empty"],
    );
    assert_error(
        &format!("{prefix}sql_filter = \"1=1\"\nsql_action = \"\""),
        &["sql_action is empty"],
    );
    assert_error(
        &format!("{prefix}correlation_filter = {{ properties = {{ tags = [\"a\"] }} }}"),
        &[
            "rules[0] \"r\"",
            "correlation_filter.properties.tags",
            "array",
        ],
    );
}

#[test]
fn sql_parameters_need_an_expression_distinct_names_and_known_types() {
    let prefix = "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions.rules]]\nname = \"r\"\n";
    assert_error(
        &format!(
            "{prefix}correlation_filter = {{ subject = \"x\" }}\nsql_parameters = {{ \"@p\" = 1 }}"
        ),
        &["rules[0] \"r\"", "no sql_filter or sql_action"],
    );
    assert_error(
        &format!("{prefix}sql_filter = \"a = @p\"\nsql_parameters = {{ \"@p\" = 1, \"P\" = 2 }}"),
        &["rules[0] \"r\"", "sql_parameters", "same parameter"],
    );
    assert_error(
        &format!(
            "{prefix}sql_filter = \"a = @p\"\nsql_parameters = {{ \"@p\" = {{ duration = \"soon\" }} }}"
        ),
        &["rules[0] \"r\"", "sql_parameters.@p", "soon"],
    );
    assert_error(
        &format!("{prefix}sql_filter = \"a = @p\"\nsql_parameters = {{ \"@p\" = 12:00:00 }}"),
        &["sql_parameters.@p", "date and time"],
    );
}

#[test]
fn explicit_default_rule_may_carry_a_filter() {
    let config = load(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions.rules]]\nname = \"$Default\"\nsql_filter = \"a = 1\"",
    );
    let rule = &config.topics[0].subscriptions[0].rules[0];
    assert_eq!(
        (rule.name.as_str(), &rule.filter),
        ("$Default", &FilterConfig::Sql("a = 1".to_string()))
    );
}

#[test]
fn hand_built_configs_are_validated_too() {
    let mut config = Config::builtin_default();
    config.queues[0].lock_duration = Duration::ZERO;
    let message = config
        .validate()
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("queues[0] \"queue.1\": lock_duration"),
        "{message}"
    );
    config.queues[0].lock_duration = Duration::from_millis(200);
    config.topics[0].subscriptions[0].rules.clear();
    let message = config
        .validate()
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(message.contains("has no rules"), "{message}");
}

#[test]
fn forwarding_cycles_of_any_length_are_rejected_and_named() {
    // Issue 10 item 16.
    assert_error(
        "[[queues]]\nname = \"a\"\nforward_to = \"b\"\n[[queues]]\nname = \"b\"\nforward_to = \"a\"\n",
        &["cycle", "queue \"a\" → queue \"b\" → queue \"a\""],
    );
    assert_error(
        "[[queues]]\nname = \"a\"\nforward_to = \"b\"\n[[queues]]\nname = \"b\"\nforward_to = \"c\"\n[[queues]]\nname = \"c\"\nforward_to = \"A\"\n",
        &[
            "cycle",
            "queue \"a\" → queue \"b\" → queue \"c\" → queue \"a\"",
        ],
    );
    // Through a topic and one of its subscriptions.
    assert_error(
        "[[queues]]\nname = \"q\"\nforward_to = \"t\"\n[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nforward_to = \"q\"\n",
        &[
            "cycle",
            "queue \"q\" → topic \"t\" (subscription \"s\") → queue \"q\"",
        ],
    );
}

#[test]
fn forwarding_chains_without_a_cycle_are_accepted() {
    let config = Config::from_toml_str(
        "[[queues]]\nname = \"a\"\nforward_to = \"b\"\nforward_dead_lettered_messages_to = \"c\"\n[[queues]]\nname = \"b\"\nforward_to = \"c\"\n[[queues]]\nname = \"c\"\nforward_dead_lettered_messages_to = \"a\"\n",
        "chain.toml",
    );
    assert!(config.is_ok(), "{:?}", config.err());
}

#[test]
fn more_than_two_thousand_rules_on_a_subscription_are_rejected() {
    let mut text =
        String::from("[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n");
    for index in 0..2_001 {
        text.push_str(&format!(
            "[[topics.subscriptions.rules]]\nname = \"r{index}\"\nsql_filter = \"n = {index}\"\n"
        ));
    }
    assert_error(&text, &["2001 rules", "at most 2000"]);
}

#[test]
fn memory_budgets_are_byte_sizes() {
    assert_eq!(
        Config::from_toml_str("[server]\nmemory_budget = \"512MiB\"\n", "t.toml")
            .expect("valid")
            .server
            .memory_budget,
        Some(512 * 1024 * 1024)
    );
    assert_eq!(
        Config::from_toml_str("[server]\nmemory_budget = 1000\n", "t.toml")
            .expect("valid")
            .server
            .memory_budget,
        Some(1000)
    );
    assert_error(
        "[server]\nmemory_budget = \"lots\"\n",
        &["memory_budget", "\"lots\"", "byte size"],
    );
}

#[test]
fn storage_is_durable_in_data_by_default_and_its_keys_are_checked() {
    let config = Config::from_toml_str("", "t.toml").expect("valid");
    assert_eq!(config.storage.mode, crate::config::StorageMode::Durable);
    assert_eq!(config.storage.data_dir, std::path::PathBuf::from("data"));
    let config = Config::from_toml_str(
        "[storage]\nmode = \"memory\"\ndata_dir = \"/var/lib/ferrobus\"\nmin_free_space = \"1GiB\"\ncompaction_threshold = \"64MiB\"\n",
        "t.toml",
    )
    .expect("valid");
    assert_eq!(config.storage.mode, crate::config::StorageMode::Memory);
    assert_eq!(
        config.storage.data_dir,
        std::path::PathBuf::from("/var/lib/ferrobus")
    );
    assert_eq!(config.storage.min_free_space, 1 << 30);
    assert_eq!(config.storage.compaction_threshold, 64 << 20);
    assert_error(
        "[storage]\nmode = \"disk\"\n",
        &["storage", "\"disk\"", "durable", "memory"],
    );
    assert_error("[storage]\ndata_dir = \" \"\n", &["data_dir", "empty"]);
    assert_error(
        "[storage]\nmin_free_space = \"some\"\n",
        &["min_free_space", "byte size"],
    );
    assert_error("[storage]\nmod = \"memory\"\n", &["mod"]);
}

#[test]
fn an_unknown_entity_status_names_the_entity_and_the_choices() {
    assert_error(
        "[[queues]]\nname = \"q\"\nstatus = \"Paused\"\n",
        &["q", "\"Paused\"", "SendDisabled", "ReceiveDisabled"],
    );
}

#[test]
fn http_guard_keys_are_checked() {
    assert_error(
        "[http]\nmax_connections = 0",
        &["http", "max_connections must be at least 1"],
    );
    for entry in [
        "localhost:5300",
        "http://broker",
        "*corp.example",
        "a..b",
        "",
        "*.",
        "bro ker",
    ] {
        assert_error(
            &format!("[http]\nallowed_hosts = [\"{entry}\"]"),
            &["http", &format!("allowed_hosts entry '{entry}'")],
        );
    }
}

#[test]
fn cluster_table_names_what_is_wrong() {
    assert_error(
        "[cluster]\nnode_id = 0\n",
        &["cluster", "node_id must be 1 or more"],
    );
    assert_error(
        "[cluster]\naddress = \"nohost\"\n",
        &["cluster", "\"nohost\" is not host:port"],
    );
    assert_error(
        "[cluster]\nnode_id = 2\nmembers = [{ id = 1, address = \"a:1\" }]\n",
        &["cluster", "must include this node (node_id 2)"],
    );
    assert_error(
        "[cluster]\nmembers = [{ id = 1, address = \"a:1\" }, { id = 1, address = \"b:1\" }]\n",
        &["cluster member 1", "listed twice"],
    );
    let two = "[storage]\nmode = \"durable\"\n[cluster]\nmembers = [{ id = 1, address = \"a:1\" }, { id = 2, address = \"b:1\" }]\n";
    assert_error(two, &["cluster", "lists 2 nodes", "set secret"]);
    assert_error(
        &format!("{two}secret = \"too short\"\n"),
        &["cluster", "secret is 9 characters", "at least 16"],
    );
    assert_error(
        &format!("{two}secret = \"0123456789abcdef\"\naddress = \"c:1\"\n"),
        &[
            "cluster",
            "address \"c:1\" differs from member 1's address \"a:1\"",
        ],
    );
    assert_error(
        "[storage]\nmode = \"memory\"\n[cluster]\nsecret = \"0123456789abcdef\"\nmembers = [{ id = 1, address = \"a:1\" }, { id = 2, address = \"b:1\" }]\n",
        &["cluster", "storage is in memory", "mode = \"durable\""],
    );
    assert_error("[cluster]\nnode = 1\n", &["node"]);
    assert_error(
        "[cluster]\nclient_routing = \"redirect\"\n",
        &[
            "cluster",
            "client_routing is \"redirect\"",
            "\"forward\" or \"proxy\"",
        ],
    );
    let proxy = Config::from_toml_str("[cluster]\nclient_routing = \"proxy\"\n", "test.toml")
        .expect("loads");
    assert_eq!(
        proxy.cluster.client_routing,
        crate::config::ClientRouting::Proxy
    );
}

#[test]
fn a_cluster_of_three_takes_its_address_from_its_own_entry() {
    let config = Config::from_toml_str(
        "[storage]\nmode = \"durable\"\n[cluster]\nnode_id = 2\nsecret = \"0123456789abcdef\"\nmembers = [\n  { id = 1, address = \"10.0.0.1:5700\" },\n  { id = 2, address = \"10.0.0.2:5700\" },\n  { id = 3, address = \"10.0.0.3:5700\" },\n]\n",
        "test.toml",
    )
    .expect("loads");
    assert!(config.cluster.is_multi_node());
    assert_eq!(config.cluster.address, "10.0.0.2:5700");
    assert_eq!(config.cluster.secret.as_deref(), Some("0123456789abcdef"));
    assert_eq!(config.cluster.members.len(), 3);
}

#[test]
fn cluster_table_defaults_to_node_one_alone() {
    let config = Config::from_toml_str("", "test.toml").expect("empty file loads");
    assert_eq!(config.cluster, ClusterConfig::default());
    let config = Config::from_toml_str(
        "[cluster]\nnode_id = 7\naddress = \"10.0.0.7:5700\"\n",
        "test.toml",
    )
    .expect("loads");
    assert_eq!(config.cluster.node_id, 7);
    assert_eq!(
        config.cluster.members,
        vec![ClusterMember {
            id: 7,
            address: "10.0.0.7:5700".into()
        }]
    );
}
