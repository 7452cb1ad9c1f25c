//! Emulator `Config.json` tests: JSON in, the TOML loader's `Config` out (the round trip),
//! and every rejection naming the file, the line and the JSON path.

use std::time::Duration;

use super::*;
use crate::config::{
    CorrelationFilterConfig, FilterConfig, PropertyLiteral, QueueConfig, RuleConfig,
    SubscriptionConfig, TopicConfig,
};

/// The official emulator's sample `Config.json`, as its installer ships it.
const SAMPLE: &str = r#"{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [
          {
            "Name": "queue.1",
            "Properties": {
              "DeadLetteringOnMessageExpiration": false,
              "DefaultMessageTimeToLive": "PT1H",
              "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "ForwardDeadLetteredMessagesTo": "",
              "ForwardTo": "",
              "LockDuration": "PT1M",
              "MaxDeliveryCount": 3,
              "RequiresDuplicateDetection": false,
              "RequiresSession": false
            }
          }
        ],
        "Topics": [
          {
            "Name": "topic.1",
            "Properties": {
              "DefaultMessageTimeToLive": "PT1H",
              "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "RequiresDuplicateDetection": false
            },
            "Subscriptions": [
              {
                "Name": "subscription.1",
                "Properties": {
                  "DeadLetteringOnMessageExpiration": false,
                  "DefaultMessageTimeToLive": "PT1H",
                  "LockDuration": "PT1M",
                  "MaxDeliveryCount": 3,
                  "ForwardDeadLetteredMessagesTo": "",
                  "ForwardTo": "",
                  "RequiresSession": false
                },
                "Rules": [
                  {
                    "Name": "app-prop-filter-1",
                    "Properties": {
                      "FilterType": "Correlation",
                      "CorrelationFilter": {
                        "ContentType": "application/text",
                        "CorrelationId": "id1",
                        "Label": "subject1",
                        "MessageId": "msgid1",
                        "ReplyTo": "someQueue",
                        "ReplyToSessionId": "sessionId",
                        "SessionId": "session1",
                        "To": "xyz",
                        "Properties": {
                          "prop1": "value1"
                        }
                      }
                    }
                  },
                  {
                    "Name": "sql-filter-1",
                    "Properties": {
                      "FilterType": "Sql",
                      "SqlFilter": {
                        "SqlExpression": "sys.MessageId = '123456' AND userProp1 = 'value1'"
                      },
                      "Action": {
                        "SqlExpression": "SET sys.To = 'Entity'"
                      }
                    }
                  }
                ]
              }
            ]
          }
        ]
      }
    ],
    "Logging": {
      "Type": "File"
    }
  }
}
"#;

/// Converts `json`, panicking with the error if it is rejected.
fn convert(json: &str) -> String {
    to_toml(json, "Config.json").unwrap_or_else(|error| panic!("should convert: {error}"))
}

/// Converts `json` and loads the TOML, panicking (with the TOML) if either step fails.
fn load(json: &str) -> Config {
    let toml_text = convert(json);
    Config::from_toml_str(&toml_text, "converted.toml")
        .unwrap_or_else(|error| panic!("converted TOML should load: {error}\n{toml_text}"))
}

/// The error message for `json`, which must be rejected.
fn rejection(json: &str) -> String {
    match to_toml(json, "Config.json") {
        Ok(toml_text) => panic!("should be rejected, but converted to:\n{toml_text}"),
        Err(error) => error.to_string(),
    }
}

/// A file with one namespace whose members are `body` (e.g. `"Queues": [...]`).
fn namespace(body: &str) -> String {
    format!(
        "{{\"UserConfig\": {{\"Namespaces\": [{{\"Name\": \"ns\", {body}}}], \"Logging\": {{\"Type\": \"File\"}}}}}}"
    )
}

/// The one-based line of `json` containing `needle`.
fn line_of(json: &str, needle: &str) -> usize {
    json.lines()
        .position(|line| line.contains(needle))
        .map(|index| index + 1)
        .unwrap_or_else(|| panic!("{needle:?} is in the text"))
}

fn seconds(count: u64) -> Duration {
    Duration::from_secs(count)
}

/// A queue as the emulator creates it when `Properties` is left out.
fn emulator_queue(name: &str) -> QueueConfig {
    QueueConfig {
        lock_duration: seconds(60),
        max_delivery_count: 3,
        default_message_time_to_live: Some(seconds(3600)),
        duplicate_detection_history_time_window: seconds(20),
        ..QueueConfig::new(name)
    }
}

/// A subscription as the emulator creates it when `Properties` and `Rules` are left out.
fn emulator_subscription(name: &str) -> SubscriptionConfig {
    SubscriptionConfig {
        lock_duration: seconds(60),
        max_delivery_count: 3,
        default_message_time_to_live: Some(seconds(3600)),
        ..SubscriptionConfig::new(name)
    }
}

/// A topic as the emulator creates it when `Properties` is left out.
fn emulator_topic(name: &str, subscriptions: Vec<SubscriptionConfig>) -> TopicConfig {
    TopicConfig {
        default_message_time_to_live: Some(seconds(3600)),
        duplicate_detection_history_time_window: seconds(20),
        subscriptions,
        ..TopicConfig::new(name)
    }
}

#[test]
fn the_official_sample_converts_every_field() {
    let toml_text = convert(SAMPLE);
    assert!(toml_text.contains("converted from the Azure Service Bus emulator's Config.json"));
    assert!(
        toml_text.contains("Emulator namespace: \"sbemulatorns\""),
        "{toml_text}"
    );
    assert!(
        toml_text.contains("# UserConfig.Namespaces[0].Queues[0]\n"),
        "{toml_text}"
    );
    assert!(
        !toml_text.contains("forward_to"),
        "empty ForwardTo means none: {toml_text}"
    );
    let config = Config::from_toml_str(&toml_text, "converted.toml")
        .unwrap_or_else(|error| panic!("{error}\n{toml_text}"));
    assert_eq!(config.queues, vec![emulator_queue("queue.1")]);
    let correlation = CorrelationFilterConfig {
        correlation_id: Some("id1".into()),
        message_id: Some("msgid1".into()),
        to: Some("xyz".into()),
        reply_to: Some("someQueue".into()),
        subject: Some("subject1".into()),
        session_id: Some("session1".into()),
        reply_to_session_id: Some("sessionId".into()),
        content_type: Some("application/text".into()),
        properties: vec![("prop1".into(), PropertyLiteral::String("value1".into()))],
    };
    let subscription = SubscriptionConfig {
        rules: vec![
            RuleConfig {
                name: "app-prop-filter-1".into(),
                filter: FilterConfig::Correlation(correlation),
                action: None,
                parameters: Vec::new(),
            },
            RuleConfig {
                name: "sql-filter-1".into(),
                filter: FilterConfig::Sql(
                    "sys.MessageId = '123456' AND userProp1 = 'value1'".into(),
                ),
                action: Some("SET sys.To = 'Entity'".into()),
                parameters: Vec::new(),
            },
        ],
        ..emulator_subscription("subscription.1")
    };
    assert_eq!(
        config.topics,
        vec![emulator_topic("topic.1", vec![subscription])]
    );
    // The sample's explicit values are the emulator's defaults, so nothing is marked.
    assert!(!toml_text.contains("# emulator default\n"), "{toml_text}");
}

#[test]
fn conversion_is_deterministic_and_loads_through_config_load() {
    assert_eq!(convert(SAMPLE), convert(SAMPLE));
    let directory =
        std::env::temp_dir().join(format!("ferrobus-emulator-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let path = directory.join("Config.json");
    std::fs::write(&path, SAMPLE).expect("write");
    let loaded = Config::load(&path).unwrap_or_else(|error| panic!("{error}"));
    let converted = load(SAMPLE);
    assert_eq!(loaded.queues, converted.queues);
    assert_eq!(loaded.topics, converted.topics);
    // Sniffed by its first character, whatever the name.
    let sniffed = directory.join("emulator.conf");
    std::fs::write(&sniffed, format!("// exported\n{SAMPLE}")).expect("write");
    let loaded = Config::load(&sniffed).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(loaded.queues, converted.queues);
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn errors_after_conversion_still_name_the_file() {
    let directory =
        std::env::temp_dir().join(format!("ferrobus-emulator-origin-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let path = directory.join("Config.json");
    std::fs::write(
        &path,
        namespace(r#""Queues": [{"Name": "a", "Properties": {"ForwardTo": "nowhere"}}]"#),
    )
    .expect("write");
    let error = Config::load(&path).err().map(|error| error.to_string());
    let error = error.unwrap_or_default();
    assert!(
        error.contains(&path.display().to_string()) && error.contains("nowhere"),
        "{error}"
    );
    let error = convert_file(&path).err().map(|error| error.to_string());
    assert!(error.unwrap_or_default().contains("nowhere"));
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn json_files_are_recognised_by_name_or_first_character() {
    let toml_text = "# ferrobus\n[[queues]]\nname = \"q\"\n";
    assert!(is_emulator_json(Path::new("Config.json"), ""));
    assert!(is_emulator_json(Path::new("CONFIG.JSON"), toml_text));
    assert!(!is_emulator_json(Path::new("ferrobus.toml"), toml_text));
    assert!(!is_emulator_json(Path::new("ferrobus.toml"), ""));
    assert!(is_emulator_json(Path::new("x"), "  \n{}"));
    assert!(is_emulator_json(
        Path::new("x"),
        "\u{feff}// note\n/* more\n */ {"
    ));
    assert!(is_emulator_json(Path::new("x"), "# hash comment\n{"));
    assert!(!is_emulator_json(Path::new("x"), "[server]\n"));
}

#[test]
fn comments_and_trailing_commas_are_tolerated_outside_strings() {
    let json = r#"
    // The emulator's file, edited by hand.
    {
      "UserConfig": {
        /* one namespace,
           as always */
        "Namespaces": [
          {
            "Name": "ns", // any name
            "Queues": [
              { "Name": "q", "Properties": { "LockDuration": "PT30S", }, },
            ],
            "Topics": [
              {
                "Name": "t",
                "Subscriptions": [
                  {
                    "Name": "s",
                    "Rules": [
                      {
                        "Name": "r",
                        "Properties": {
                          "FilterType": "Sql",
                          "SqlFilter": { "SqlExpression": "url = 'http://x/*y*/' OR note = 'a,}'", },
                        },
                      },
                    ],
                  },
                ],
              },
            ],
          },
        ],
        "Logging": { "Type": "Console" }, // ignored
      },
    }
    "#;
    let config = load(json);
    assert_eq!(config.queues[0].lock_duration, seconds(30));
    assert_eq!(
        config.topics[0].subscriptions[0].rules[0].filter,
        FilterConfig::Sql("url = 'http://x/*y*/' OR note = 'a,}'".into())
    );
}

#[test]
fn missing_properties_take_the_emulator_defaults() {
    let json = namespace(
        r#""Queues": [{"Name": "q"}],
           "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s"}]}]"#,
    );
    let toml_text = convert(&json);
    assert!(
        toml_text.contains("max_delivery_count = 3") && toml_text.contains("# emulator default"),
        "{toml_text}"
    );
    let config = load(&json);
    assert_eq!(config.queues, vec![emulator_queue("q")]);
    assert_eq!(
        config.topics,
        vec![emulator_topic("t", vec![emulator_subscription("s")])]
    );
    assert_eq!(
        config.topics[0].subscriptions[0].rules,
        vec![RuleConfig::default_rule()]
    );
}

#[test]
fn each_property_is_converted() {
    let json = namespace(
        r#""Queues": [
             {"Name": "target"},
             {"Name": "q", "Properties": {
               "DeadLetteringOnMessageExpiration": true,
               "DefaultMessageTimeToLive": "PT10M",
               "DuplicateDetectionHistoryTimeWindow": "PT5M",
               "ForwardDeadLetteredMessagesTo": "target",
               "LockDuration": "PT5S",
               "MaxDeliveryCount": 7,
               "RequiresDuplicateDetection": true,
               "RequiresSession": true}}],
           "Topics": [{"Name": "t",
             "Properties": {"DefaultMessageTimeToLive": "PT5M", "RequiresDuplicateDetection": true,
                            "DuplicateDetectionHistoryTimeWindow": "PT1M"},
             "Subscriptions": [{"Name": "s", "Properties": {
               "DeadLetteringOnMessageExpiration": true, "DefaultMessageTimeToLive": "PT2M",
               "LockDuration": "PT2M", "MaxDeliveryCount": 1, "ForwardTo": "target",
               "ForwardDeadLetteredMessagesTo": "target", "RequiresSession": true}}]}]"#,
    );
    let config = load(&json);
    assert_eq!(
        config.queues[1],
        QueueConfig {
            lock_duration: seconds(5),
            max_delivery_count: 7,
            default_message_time_to_live: Some(seconds(600)),
            dead_lettering_on_message_expiration: true,
            requires_session: true,
            requires_duplicate_detection: true,
            duplicate_detection_history_time_window: seconds(300),
            forward_dead_lettered_messages_to: Some("target".into()),
            ..QueueConfig::new("q")
        }
    );
    let topic = &config.topics[0];
    assert_eq!(topic.default_message_time_to_live, Some(seconds(300)));
    assert!(topic.requires_duplicate_detection);
    assert_eq!(topic.duplicate_detection_history_time_window, seconds(60));
    assert_eq!(
        topic.subscriptions[0],
        SubscriptionConfig {
            lock_duration: seconds(120),
            max_delivery_count: 1,
            default_message_time_to_live: Some(seconds(120)),
            dead_lettering_on_message_expiration: true,
            requires_session: true,
            forward_to: Some("target".into()),
            forward_dead_lettered_messages_to: Some("target".into()),
            ..SubscriptionConfig::new("s")
        }
    );
}

#[test]
fn durations_take_fractions_days_and_the_unlimited_time_span() {
    let json = namespace(
        r#""Queues": [{"Name": "q", "Properties": {
             "LockDuration": "PT0.5S",
             "DefaultMessageTimeToLive": "P1D",
             "DuplicateDetectionHistoryTimeWindow": "P1DT2H30M"}},
           {"Name": "forever", "Properties": {
             "DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S"}}]"#,
    );
    let toml_text = convert(&json);
    assert!(
        toml_text.contains("# default_message_time_to_live: unlimited"),
        "{toml_text}"
    );
    let config = load(&json);
    let queue = &config.queues[0];
    assert_eq!(queue.lock_duration, Duration::from_millis(500));
    assert_eq!(queue.default_message_time_to_live, Some(seconds(86_400)));
    assert_eq!(
        queue.duplicate_detection_history_time_window,
        seconds(86_400 + 2 * 3600 + 30 * 60)
    );
    assert_eq!(config.queues[1].default_message_time_to_live, None);
}

#[test]
fn durations_must_be_iso_8601_with_fixed_units() {
    for (text, expected) in [
        ("1 minute", "not a duration"),
        ("00:01:00", "not a duration"),
        ("P1Y", "ISO-8601"),
        ("PT", "ISO-8601"),
    ] {
        let json = namespace(&format!(
            r#""Queues": [{{"Name": "q", "Properties": {{"LockDuration": "{text}"}}}}]"#
        ));
        let error = rejection(&json);
        assert!(
            error.contains("UserConfig.Namespaces[0].Queues[0].Properties.LockDuration")
                && error.contains(expected),
            "{text}: {error}"
        );
    }
}

#[test]
fn empty_or_missing_collections_mean_none() {
    for body in [
        r#""Queues": [], "Topics": []"#,
        r#""Queues": null"#,
        r#""Topics": [{"Name": "t", "Subscriptions": []}]"#,
        r#""Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": []}]}]"#,
    ] {
        let config = load(&namespace(body));
        assert!(config.queues.is_empty(), "{body}");
        for subscription in config.topics.iter().flat_map(|topic| &topic.subscriptions) {
            assert_eq!(
                subscription.rules,
                vec![RuleConfig::default_rule()],
                "{body}"
            );
        }
    }
    let bare = load(r#"{"UserConfig": {"Namespaces": [{"Name": "x"}]}}"#);
    assert_eq!(bare.entity_count(), 0);
}

#[test]
fn keys_match_case_insensitively_and_scalars_may_be_strings() {
    let json = r#"{"userConfig": {"namespaces": [{"name": "anything-at-all",
        "queues": [{"NAME": "q", "properties": {"lockduration": "pt10s",
           "MAXDELIVERYCOUNT": "5", "requiresSession": "True"}}],
        "topics": [{"name": "t", "subscriptions": [{"name": "s", "rules": [{"name": "r",
           "properties": {"filtertype": "sql", "sqlfilter": {"sqlexpression": "a = 1"}}}]}]}]}],
        "logging": {"type": "File"}}}"#;
    let config = load(json);
    assert_eq!(config.queues[0].lock_duration, seconds(10));
    assert_eq!(config.queues[0].max_delivery_count, 5);
    assert!(config.queues[0].requires_session);
    assert_eq!(
        config.topics[0].subscriptions[0].rules[0].filter,
        FilterConfig::Sql("a = 1".into())
    );
}

#[test]
fn the_sql_filter_misspelling_names_the_path_the_line_and_the_fix() {
    let json = r#"{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Topics": [
          { "Name": "a", "Subscriptions": [ { "Name": "s" } ] },
          {
            "Name": "b",
            "Subscriptions": [
              {
                "Name": "s",
                "Rules": [
                  { "Name": "r0", "Properties": { "FilterType": "Sql", "SqlFilter": { "SqlExpression": "1=1" } } },
                  { "Name": "r1", "Properties": { "FilterType": "Sql", "SqlFilter": { "SqlExpression": "2=2" } } },
                  {
                    "Name": "r2",
                    "Properties": {
                      "FilterType": "SqlFilter",
                      "SqlFilter": { "SqlExpression": "color = 'red'" }
                    }
                  }
                ]
              }
            ]
          }
        ]
      }
    ]
  }
}"#;
    let error = rejection(json);
    let line = line_of(json, r#""FilterType": "SqlFilter""#);
    assert!(
        error.starts_with(&format!("Config.json:{line}: ")),
        "line {line}: {error}"
    );
    assert!(
        error.contains(
            "UserConfig.Namespaces[0].Topics[1].Subscriptions[0].Rules[2].Properties.FilterType"
        ),
        "{error}"
    );
    assert!(
        error.contains("\"Correlation\" and \"Sql\"") && error.contains("did you mean \"Sql\""),
        "{error}"
    );
    let other = rejection(&json.replace("\"SqlFilter\",", "\"CorrelationFilter\","));
    assert!(other.contains("did you mean \"Correlation\""), "{other}");
}

#[test]
fn unknown_keys_name_the_path_and_line() {
    let json = "{\n  \"UserConfig\": {\n    \"Namespaces\": [{\n      \"Name\": \"ns\",\n      \"Queues\": [{\"Name\": \"q\",\n        \"Properties\": {\"LockDurration\": \"PT1M\"}}]\n    }]\n  }\n}";
    let error = rejection(json);
    assert!(
        error.starts_with("Config.json:6: UserConfig.Namespaces[0].Queues[0].Properties.LockDurration: unknown key"),
        "{error}"
    );
    assert!(
        error.contains("LockDuration"),
        "lists the valid keys: {error}"
    );
    for (json, path) in [
        (
            r#"{"UserConfig": {"Namespaces": [{"Name": "n"}]}, "Extra": 1}"#,
            "Extra",
        ),
        (
            r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Subscriptions": []}]}}"#,
            "UserConfig.Namespaces[0].Subscriptions",
        ),
        (
            r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Topics": [{"Name": "t", "Properties": {"LockDuration": "PT1M"}}]}]}}"#,
            "UserConfig.Namespaces[0].Topics[0].Properties.LockDuration",
        ),
    ] {
        let error = rejection(json);
        assert!(error.contains(&format!("{path}: unknown key")), "{error}");
    }
    // A JSON schema reference for editors is allowed.
    load(r#"{"$schema": "./Config-schema.json", "UserConfig": {"Namespaces": [{"Name": "n"}]}}"#);
}

#[test]
fn exactly_one_namespace_is_required() {
    let two = "{\"UserConfig\": {\"Namespaces\": [\n{\"Name\": \"a\"},\n{\"Name\": \"b\"}\n]}}";
    let error = rejection(two);
    assert!(
        error.starts_with("Config.json:3: UserConfig.Namespaces[1]: exactly one namespace"),
        "{error}"
    );
    let none = rejection(r#"{"UserConfig": {"Namespaces": []}}"#);
    assert!(
        none.contains("UserConfig.Namespaces: exactly one namespace"),
        "{none}"
    );
    let missing = rejection(r#"{"Namespaces": []}"#);
    assert!(missing.contains("unknown key \"Namespaces\""), "{missing}");
    let no_user_config = rejection("{}");
    assert!(no_user_config.contains("UserConfig"), "{no_user_config}");
}

#[test]
fn wrong_types_and_values_are_rejected_with_their_path() {
    for (properties, expected) in [
        (r#""MaxDeliveryCount": 0"#, "whole number from 1"),
        (r#""MaxDeliveryCount": 2.5"#, "whole number from 1"),
        (r#""MaxDeliveryCount": true"#, "whole number from 1"),
        (r#""RequiresSession": "yes""#, "true or false"),
        (r#""RequiresSession": 1"#, "true or false"),
        (r#""LockDuration": 60"#, "must be a string"),
        (r#""ForwardTo": ["a"]"#, "must be a string"),
    ] {
        let json = namespace(&format!(
            r#""Queues": [{{"Name": "q", "Properties": {{{properties}}}}}]"#
        ));
        let error = rejection(&json);
        assert!(
            error.contains("UserConfig.Namespaces[0].Queues[0].Properties.")
                && error.contains(expected),
            "{properties}: {error}"
        );
    }
    let unnamed = rejection(&namespace(r#""Queues": [{"Properties": {}}]"#));
    assert!(
        unnamed.contains("Queues[0].Name: Name is required"),
        "{unnamed}"
    );
    let not_object = rejection(&namespace(r#""Queues": ["q"]"#));
    assert!(
        not_object.contains("Queues[0]: must be an object"),
        "{not_object}"
    );
}

#[test]
fn duplicate_keys_are_rejected() {
    let exact =
        rejection("{\"UserConfig\": {\"Namespaces\": [{\"Name\": \"a\",\n\"Name\": \"b\"}]}}");
    assert!(
        exact.starts_with("Config.json:2: UserConfig.Namespaces[0].Name: key \"Name\" appears twice (also on line 1)"),
        "{exact}"
    );
    let by_case = rejection(r#"{"UserConfig": {"Namespaces": [{"Name": "a", "name": "b"}]}}"#);
    assert!(by_case.contains("is set twice"), "{by_case}");
}

#[test]
fn rules_need_a_matching_filter() {
    let rule = |properties: &str| {
        namespace(&format!(
            r#""Topics": [{{"Name": "t", "Subscriptions": [{{"Name": "s", "Rules": [{{"Name": "r", "Properties": {{{properties}}}}}]}}]}}]"#
        ))
    };
    for (properties, expected) in [
        (
            r#""SqlFilter": {"SqlExpression": "1=1"}"#,
            "FilterType is required",
        ),
        (r#""FilterType": "Sql""#, "needs SqlFilter"),
        (
            r#""FilterType": "Sql", "SqlFilter": {}"#,
            "SqlExpression is required",
        ),
        (
            r#""FilterType": "Sql", "SqlFilter": {"SqlExpression": " "}"#,
            "SqlExpression is required",
        ),
        (r#""FilterType": "Correlation""#, "needs CorrelationFilter"),
        (
            r#""FilterType": "Correlation", "CorrelationFilter": {}"#,
            "sets nothing",
        ),
        (
            r#""FilterType": "Correlation", "CorrelationFilter": {"To": ""}"#,
            "sets nothing",
        ),
        (
            r#""FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "CorrelationFilter": {"To": "x"}"#,
            "remove one of them",
        ),
        (
            r#""FilterType": "Correlation", "CorrelationFilter": {"Properties": {"a": [1]}}"#,
            "must be a string, number or boolean",
        ),
        (
            r#""FilterType": "True""#,
            "valid values are \"Correlation\" and \"Sql\"",
        ),
        (
            r#""FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1", "Parameters": {}}"#,
            "unknown key \"Parameters\"",
        ),
    ] {
        let error = rejection(&rule(properties));
        assert!(
            error.contains("UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0]")
                && error.contains(expected),
            "{properties}: {error}"
        );
    }
    let no_properties = rejection(&namespace(
        r#""Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r"}]}]}]"#,
    ));
    assert!(
        no_properties.contains("Rules[0].Properties: a rule needs Properties"),
        "{no_properties}"
    );
}

#[test]
fn correlation_properties_keep_their_types_and_odd_names() {
    let json = namespace(
        r#""Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r",
           "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {
             "count": 2, "weight": 1.5, "big": 2.0, "urgent": true, "my prop.x": "a \"q\" \\ b"}},
             "Action": {"SqlExpression": "SET a = 'it''s'\nSET b = 1"}}}]}]}]"#,
    );
    let config = load(&json);
    let rule = &config.topics[0].subscriptions[0].rules[0];
    let FilterConfig::Correlation(filter) = &rule.filter else {
        panic!("a correlation filter: {rule:?}");
    };
    let mut properties = filter.properties.clone();
    properties.sort_by(|left, right| left.0.cmp(&right.0));
    assert_eq!(
        properties,
        vec![
            ("big".to_string(), PropertyLiteral::Float(2.0)),
            ("count".to_string(), PropertyLiteral::Integer(2)),
            (
                "my prop.x".to_string(),
                PropertyLiteral::String("a \"q\" \\ b".into())
            ),
            ("urgent".to_string(), PropertyLiteral::Bool(true)),
            ("weight".to_string(), PropertyLiteral::Float(1.5)),
        ]
    );
    assert_eq!(rule.action.as_deref(), Some("SET a = 'it''s'\nSET b = 1"));
}

#[test]
fn empty_actions_and_logging_are_ignored() {
    let json = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Topics": [{"Name": "t",
        "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r", "Properties": {
          "FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {"SqlExpression": ""}}}]}]}]}],
        "Logging": {"Type": "File,Console", "Anything": [1, 2]}}}"#;
    let config = load(json);
    assert_eq!(config.topics[0].subscriptions[0].rules[0].action, None);
}

#[test]
fn malformed_json_reports_the_line() {
    let error = rejection("{\n  \"UserConfig\": {\n    \"Namespaces\": [ }\n}");
    assert!(
        error.starts_with("Config.json:3: not valid JSON"),
        "{error}"
    );
    let unclosed = rejection("{\n /* never closed\n}");
    assert!(unclosed.starts_with("Config.json:2: comment"), "{unclosed}");
}
