//! The official emulator's `Config.json`, used as is: `ferrobus config convert`,
//! `--check-config`, and a broker started with `--config Config.json` serving its queue.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use fe2o3_amqp::types::messaging::{AmqpValue, Body};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};

use crate::harness::receive;

const BINARY: &str = env!("CARGO_BIN_EXE_ferrobus");

/// The emulator installer's sample, with the comments and trailing commas people add.
const CONFIG_JSON: &str = r#"{
  // Copied from the emulator installer.
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
              "RequiresSession": false,
            },
          },
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
                        "Properties": { "prop1": "value1" }
                      }
                    }
                  },
                  {
                    "Name": "sql-filter-1",
                    "Properties": {
                      "FilterType": "Sql",
                      "SqlFilter": { "SqlExpression": "sys.MessageId = '123456' AND userProp1 = 'value1'" },
                      "Action": { "SqlExpression": "SET sys.To = 'Entity'" }
                    }
                  }
                ]
              }
            ]
          }
        ]
      }
    ],
    /* Accepted and ignored. */
    "Logging": { "Type": "File" }
  }
}
"#;

/// A fresh scratch directory holding `Config.json` with `text`; returns the file's path.
fn write_config_json(name: &str, text: &str) -> std::path::PathBuf {
    let directory =
        std::env::temp_dir().join(format!("ferrobus-emulator-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("scratch dir");
    let path = directory.join("Config.json");
    std::fs::write(&path, text).expect("write Config.json");
    path
}

fn run(arguments: &[&str]) -> std::process::Output {
    Command::new(BINARY).args(arguments).output().expect("runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn config_convert_prints_toml_that_check_config_accepts() {
    let path = write_config_json("convert", CONFIG_JSON);
    let path_text = path.to_str().expect("utf-8 path");
    let output = run(&["config", "convert", path_text]);
    let toml_text = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    for expected in [
        "Emulator namespace: \"sbemulatorns\"",
        "[[queues]]\n# UserConfig.Namespaces[0].Queues[0]\nname = \"queue.1\"\n",
        "max_delivery_count = 3\n",
        "subject = \"subject1\"\n",
        "sql_filter = \"sys.MessageId = '123456' AND userProp1 = 'value1'\"\n",
        "sql_action = \"SET sys.To = 'Entity'\"\n",
    ] {
        assert!(
            toml_text.contains(expected),
            "{expected:?} in:\n{toml_text}"
        );
    }
    // The printed TOML is a config file of its own.
    let converted = path.with_file_name("converted.toml");
    std::fs::write(&converted, &toml_text).expect("write");
    let output = run(&["--check-config", converted.to_str().expect("utf-8 path")]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let from_toml = text(&output.stdout);
    // And --check-config reads the JSON itself, to the same entities.
    let output = run(&["--check-config", path_text]);
    let from_json = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    for expected in [
        "queue \"queue.1\": lock 1m, max deliveries 3, time to live 1h",
        "subscription \"subscription.1\"",
        "rule \"sql-filter-1\"",
        "rule \"app-prop-filter-1\"",
    ] {
        assert!(
            from_json.contains(expected),
            "{expected:?} in:\n{from_json}"
        );
    }
    let entities = |summary: &str| summary.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(entities(&from_json), entities(&from_toml));
    let _ = std::fs::remove_dir_all(path.parent().expect("scratch dir"));
}

#[test]
fn a_misspelled_filter_type_is_an_error_naming_path_and_line() {
    let misspelled =
        CONFIG_JSON.replace("\"FilterType\": \"Sql\"", "\"FilterType\": \"SqlFilter\"");
    let line = misspelled
        .lines()
        .position(|line| line.contains("\"SqlFilter\","))
        .map(|index| index + 1)
        .expect("the misspelling is there");
    let path = write_config_json("misspelled", &misspelled);
    let path_text = path.to_str().expect("utf-8 path");
    for arguments in [
        vec!["config", "convert", path_text],
        vec!["--check-config", path_text],
        vec!["--config", path_text, "--memory", "--listen", "127.0.0.1:0"],
    ] {
        let output = run(&arguments);
        assert_eq!(output.status.code(), Some(1), "{arguments:?}");
        assert!(output.stdout.is_empty(), "{arguments:?}");
        let error = text(&output.stderr);
        assert!(
            error.contains(&format!("{path_text}:{line}: "))
                && error.contains(
                    "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[1].Properties.FilterType"
                )
                && error.contains("did you mean \"Sql\""),
            "{arguments:?}: {error}"
        );
    }
    let missing = run(&["config", "convert", "/nonexistent/Config.json"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("/nonexistent/Config.json"));
    let _ = std::fs::remove_dir_all(path.parent().expect("scratch dir"));
}

/// The broker process; killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_broker_serves_a_queue_defined_in_config_json() {
    let path = write_config_json("serve", CONFIG_JSON);
    let mut child = Command::new(BINARY)
        .args([
            "--config",
            path.to_str().expect("utf-8 path"),
            "--memory",
            "--listen",
            "127.0.0.1:0",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let stderr = child.stderr.take().expect("stderr");
    let running = Running(child);
    let mut lines = BufReader::new(stderr).lines();
    // Warnings (e.g. about the file limit) may come first.
    let start_up = lines
        .by_ref()
        .take(50)
        .map_while(Result::ok)
        .find(|line| line.contains("listening on "))
        .expect("a start-up line");
    // Keep draining stderr so the broker never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    assert!(
        start_up.contains("with 3 entities") && start_up.contains("Config.json"),
        "{start_up}"
    );
    let address: SocketAddr = start_up
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("an address in {start_up:?}"));

    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id("emulator-config-test")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(format!("amqp://{address}").as_str())
        .await
        .expect("connection opens");
    let mut session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session begins");
    let mut sender = Sender::attach(&mut session, "sender", "queue.1")
        .await
        .expect("attach sender");
    sender.send("from Config.json").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "queue.1")
        .await
        .expect("attach receiver");
    let delivery = receive(&mut receiver).await;
    assert_eq!(
        delivery.body(),
        &Body::Value(AmqpValue(Value::String("from Config.json".into())))
    );
    receiver.accept(&delivery).await.expect("completes");
    let _ = sender.close().await;
    let _ = receiver.close().await;
    let _ = session.end().await;
    let _ = connection.close().await;
    drop(running);
    let _ = std::fs::remove_dir_all(path.parent().expect("scratch dir"));
}
