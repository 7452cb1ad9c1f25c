//! The operator CLI (`ferrobus queue|topic|subscription|rule|send|peek|receive|resubmit|purge|
//! status`, docs/cli.md) run as a process against a real broker on `127.0.0.1:0`, with and
//! without `[[auth.keys]]`: every command's effect is read back through another command, and
//! every documented exit code (1 refused, 2 usage, 3 unreachable, 4 unauthorised, 5 not
//! found, 6 already exists) is produced once.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::harness::Broker;

const BINARY: &str = env!("CARGO_BIN_EXE_ferrobus");

/// What one CLI run gave.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Stdout as JSON lines (peek, receive).
    fn lines(&self) -> Vec<Json> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("JSON line: {line}")))
            .collect()
    }

    /// Stdout as one JSON document (`-o json`).
    fn json(&self) -> Json {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|_| panic!("JSON output: {}", self.stdout))
    }
}

/// Runs `ferrobus ARGUMENTS` with `connection` as FERROBUS_CONNECTION_STRING, feeding `input`
/// on stdin.
fn cli_with_input(connection: &str, arguments: &[&str], input: &str) -> Run {
    let mut child = Command::new(BINARY)
        .args(arguments)
        .env("FERROBUS_CONNECTION_STRING", connection)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("stdin takes the body");
    let output = child.wait_with_output().expect("the binary ends");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn cli(connection: &str, arguments: &[&str]) -> Run {
    cli_with_input(connection, arguments, "")
}

/// Runs a command that must succeed.
fn ok(connection: &str, arguments: &[&str]) -> Run {
    let run = cli(connection, arguments);
    assert_eq!(
        run.code, 0,
        "ferrobus {arguments:?} failed: {}{}",
        run.stdout, run.stderr
    );
    run
}

/// Runs a command that must fail with `code`.
fn fails(connection: &str, arguments: &[&str], code: i32) -> Run {
    let run = cli(connection, arguments);
    assert_eq!(
        run.code, code,
        "ferrobus {arguments:?}: {}{}",
        run.stdout, run.stderr
    );
    assert!(run.stderr.starts_with("ferrobus: "), "{}", run.stderr);
    run
}

fn connection_string(broker: &Broker, key: Option<(&str, &str)>) -> String {
    match key {
        Some((name, key)) => format!(
            "Endpoint=sb://{};SharedAccessKeyName={name};SharedAccessKey={key};UseDevelopmentEmulator=true",
            broker.address
        ),
        None => format!(
            "Endpoint=sb://{};UseDevelopmentEmulator=true",
            broker.address
        ),
    }
}

/// The row of `path` in a counts table, as its cells.
fn table_row(table: &str, path: &str) -> Vec<String> {
    table
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.iter().any(|cell| cell == path))
        .unwrap_or_else(|| panic!("no row for {path} in\n{table}"))
}

/// The value of `key` in an entity's `definition` TOML (`show -o json`).
fn setting(detail: &Json, table: &str, key: &str) -> Option<toml::Value> {
    let definition: toml::Table = detail["definition"]
        .as_str()
        .expect("a definition")
        .parse()
        .expect("TOML");
    let mut entity = definition
        .get(table.split('.').next()?)?
        .as_array()?
        .first()?
        .as_table()?;
    if let Some(inner) = table.split('.').nth(1) {
        entity = entity.get(inner)?.as_array()?.first()?.as_table()?;
    }
    entity.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_are_listed_created_updated_and_deleted() {
    let broker = Broker::start("[[queues]]\nname = \"seeded\"\n").await;
    let c = &connection_string(&broker, None);

    ok(
        c,
        &[
            "queue",
            "create",
            "orders",
            "--lock-duration",
            "45s",
            "--max-delivery-count",
            "3",
        ],
    );
    let detail = ok(c, &["queue", "show", "orders", "-o", "json"]).json();
    assert_eq!(
        setting(&detail, "queues", "lock_duration"),
        Some("45s".into())
    );
    assert_eq!(
        setting(&detail, "queues", "max_delivery_count"),
        Some(3.into())
    );
    ok(
        c,
        &[
            "queue",
            "update",
            "orders",
            "--max-delivery-count",
            "7",
            "--set",
            "user_metadata=ops",
        ],
    );
    let detail = ok(c, &["queue", "show", "orders", "-o", "json"]).json();
    assert_eq!(
        setting(&detail, "queues", "max_delivery_count"),
        Some(7.into())
    );
    assert_eq!(
        setting(&detail, "queues", "lock_duration"),
        Some("45s".into()),
        "untouched"
    );
    assert_eq!(
        setting(&detail, "queues", "user_metadata"),
        Some("ops".into())
    );
    fails(c, &["queue", "create", "orders"], 6);
    fails(
        c,
        &["queue", "update", "orders", "--set", "no_such_setting=1"],
        1,
    );
    fails(c, &["queue", "update", "orders"], 2);
    let list = ok(c, &["queue", "list"]).stdout;
    assert_eq!(table_row(&list, "orders")[1], "Active");
    table_row(&list, "seeded");

    ok(
        c,
        &[
            "topic",
            "create",
            "events",
            "--default-message-time-to-live",
            "1h",
        ],
    );
    ok(
        c,
        &["topic", "update", "events", "--status", "SendDisabled"],
    );
    assert_eq!(
        ok(c, &["topic", "show", "events", "-o", "json"]).json()["status"],
        "SendDisabled"
    );
    ok(
        c,
        &[
            "subscription",
            "create",
            "events",
            "all",
            "--max-delivery-count",
            "2",
        ],
    );
    fails(c, &["subscription", "create", "nosuch", "all"], 5);
    ok(
        c,
        &[
            "subscription",
            "update",
            "events",
            "all",
            "--lock-duration",
            "10s",
        ],
    );
    let detail = ok(c, &["subscription", "show", "events", "all", "-o", "json"]).json();
    assert_eq!(
        setting(&detail, "topics.subscriptions", "lock_duration"),
        Some("10s".into())
    );
    assert_eq!(
        setting(&detail, "topics.subscriptions", "max_delivery_count"),
        Some(2.into())
    );
    let subscriptions = ok(c, &["subscription", "list", "events", "-o", "json"]).json();
    assert_eq!(subscriptions[0]["path"], "events/Subscriptions/all");

    ok(
        c,
        &[
            "rule",
            "create",
            "events",
            "all",
            "red",
            "--sql",
            "colour = 'red'",
            "--action",
            "SET sys.label = 'r'",
        ],
    );
    ok(
        c,
        &[
            "rule",
            "create",
            "events",
            "all",
            "byid",
            "--correlation-id",
            "c1",
            "-p",
            "n=5",
        ],
    );
    fails(
        c,
        &["rule", "create", "events", "all", "red", "--sql", "1=1"],
        6,
    );
    let rules = ok(c, &["rule", "list", "events", "all", "-o", "json"]).json();
    let names: Vec<&str> = rules
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|rule| rule["name"].as_str())
        .collect();
    assert_eq!(names, ["$Default", "red", "byid"]);
    assert_eq!(rules[1]["action"], "SET sys.label = 'r'");
    ok(
        c,
        &[
            "rule",
            "update",
            "events",
            "all",
            "red",
            "--sql",
            "colour = 'blue'",
        ],
    );
    let red = ok(c, &["rule", "show", "events", "all", "red", "-o", "json"]).json();
    assert_eq!(red["filter"], "colour = 'blue'");
    ok(c, &["rule", "delete", "events", "all", "byid"]);
    fails(c, &["rule", "show", "events", "all", "byid"], 5);
    fails(c, &["rule", "delete", "events", "all", "byid"], 5);

    ok(c, &["subscription", "delete", "events", "all"]);
    fails(c, &["subscription", "show", "events", "all"], 5);
    ok(c, &["topic", "delete", "events"]);
    ok(c, &["queue", "delete", "orders"]);
    fails(c, &["queue", "show", "orders"], 5);
    fails(c, &["topic", "show", "seeded"], 5);
    let status = ok(c, &["status", "-o", "json"]).json();
    let paths: Vec<&str> = status
        .as_array()
        .expect("entities")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(paths, ["seeded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_round_trip_schedule_dead_letter_resubmit_and_purge() {
    let broker = Broker::start(
        r#"
[[queues]]
name = "orders"
[[queues]]
name = "other"
[[queues]]
name = "sessions"
requires_session = true
[[queues]]
name = "expiring"
dead_lettering_on_message_expiration = true
[[queues]]
name = "expiring2"
dead_lettering_on_message_expiration = true
"#,
    )
    .await;
    let c = &connection_string(&broker, None);

    // send → peek → receive, with properties, message id, content type; the body from an
    // argument, a file and stdin.
    ok(
        c,
        &[
            "send",
            "orders",
            "--body",
            "hello",
            "-p",
            "colour=red",
            "-p",
            "n=3",
            "-p",
            "text=\"3\"",
            "--message-id",
            "m1",
            "--content-type",
            "text/plain",
            "--subject",
            "new",
            "--correlation-id",
            "c1",
        ],
    );
    let file = std::env::temp_dir().join(format!("ferrobus-cli-body-{}", std::process::id()));
    std::fs::write(&file, "{\"from\": \"file\"}").expect("body file");
    ok(
        c,
        &[
            "send",
            "orders",
            "--file",
            file.to_str().expect("path"),
            "--message-id",
            "m2",
        ],
    );
    let _ = std::fs::remove_file(&file);
    let run = cli_with_input(c, &["send", "orders", "--message-id", "m3"], "from stdin");
    assert_eq!(run.code, 0, "{}", run.stderr);

    let peeked = ok(c, &["peek", "orders"]).lines();
    assert_eq!(peeked.len(), 3);
    assert_eq!(peeked[0]["body"], "hello");
    assert_eq!(peeked[0]["message_id"], "m1");
    assert_eq!(peeked[0]["content_type"], "text/plain");
    assert_eq!(peeked[0]["subject"], "new");
    assert_eq!(peeked[0]["correlation_id"], "c1");
    assert_eq!(peeked[0]["properties"]["colour"], "red");
    assert_eq!(peeked[0]["properties"]["n"], 3);
    assert_eq!(peeked[0]["properties"]["text"], "3");
    assert_eq!(peeked[1]["body"], "{\"from\": \"file\"}");
    assert_eq!(peeked[2]["body"], "from stdin");
    let first = peeked[0]["sequence_number"]
        .as_i64()
        .expect("a sequence number");
    assert_eq!(
        ok(
            c,
            &[
                "peek",
                "orders",
                "--from",
                &(first + 1).to_string(),
                "--count",
                "1"
            ]
        )
        .lines()[0]["message_id"],
        "m2"
    );
    let table = ok(c, &["peek", "orders", "-o", "table"]).stdout;
    assert!(
        table.starts_with("SEQUENCE") && table.contains("from stdin"),
        "{table}"
    );

    let received = ok(c, &["receive", "orders", "--count", "2"]).lines();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0]["message_id"], "m1");
    assert_eq!(received[0]["body"], "hello");
    assert_eq!(received[0]["properties"]["n"], 3);
    assert_eq!(received[0]["sequence_number"], first);
    assert!(
        received[0]["enqueued_time"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    // Peek-lock + complete removed them; receive-and-delete takes the third.
    let rest = ok(
        c,
        &[
            "receive",
            "orders",
            "--receive-and-delete",
            "--count",
            "5",
            "--wait",
            "300ms",
        ],
    )
    .lines();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["message_id"], "m3");
    assert!(ok(c, &["peek", "orders"]).stdout.is_empty());

    // Sessions: the next available session, or a named one.
    ok(
        c,
        &["send", "sessions", "--body", "a", "--session-id", "s1"],
    );
    ok(
        c,
        &["send", "sessions", "--body", "b", "--session-id", "s2"],
    );
    let s2 = ok(c, &["receive", "sessions", "--session-id", "s2"]).lines();
    assert_eq!(
        (s2[0]["session_id"].as_str(), s2[0]["body"].as_str()),
        (Some("s2"), Some("b"))
    );
    let next = ok(c, &["receive", "sessions"]).lines();
    assert_eq!(next[0]["session_id"], "s1");

    // Scheduled: counted as scheduled, peeked with its time.
    ok(
        c,
        &["send", "orders", "--body", "later", "--schedule", "+1h"],
    );
    let scheduled = ok(c, &["peek", "orders", "--state", "scheduled"]).lines();
    assert_eq!(scheduled[0]["state"], "scheduled");
    assert!(scheduled[0]["scheduled_enqueue_time"].is_string());
    let status = ok(c, &["status"]).stdout;
    let row = table_row(&status, "orders");
    assert_eq!(
        (row[3].as_str(), row[5].as_str()),
        ("0", "1"),
        "active 0, scheduled 1: {status}"
    );
    fails(
        c,
        &["send", "orders", "--body", "x", "--schedule", "tomorrow"],
        2,
    );

    // Dead-lettered by expiry (rule TTL: dead-lettering on expiration), resubmitted by
    // sequence number to another queue and all of them back to their own; a dead-letter
    // queue purged.
    ok(
        c,
        &[
            "send",
            "expiring",
            "--body",
            "one",
            "--ttl",
            "1",
            "--message-id",
            "e1",
        ],
    );
    ok(
        c,
        &[
            "send",
            "expiring",
            "--body",
            "two",
            "--ttl",
            "1s",
            "--message-id",
            "e2",
        ],
    );
    ok(
        c,
        &["send", "expiring2", "--body", "three", "--ttl", "PT1S"],
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let dead = loop {
        let dead = ok(c, &["peek", "expiring", "--queue", "dlq"]).lines();
        let dead2 = ok(c, &["peek", "expiring2", "--queue", "dlq"]).lines();
        if dead.len() == 2 && dead2.len() == 1 {
            break dead;
        }
        assert!(
            Instant::now() < deadline,
            "the messages were not dead-lettered: {dead:?} {dead2:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(dead[0]["dead_letter_reason"], "TTLExpiredException");
    assert_eq!(dead[0]["message_id"], "e1");
    let e1 = dead[0]["sequence_number"].to_string();
    let moved = ok(
        c,
        &[
            "resubmit",
            "expiring",
            "--sequence",
            &e1,
            "--to",
            "other",
            "-o",
            "json",
        ],
    )
    .json();
    assert_eq!(
        (moved["resubmitted"].as_u64(), moved["target"].as_str()),
        (Some(1), Some("other"))
    );
    let other = ok(c, &["receive", "other"]).lines();
    assert_eq!(
        (other[0]["message_id"].as_str(), other[0]["body"].as_str()),
        (Some("e1"), Some("one"))
    );
    let back = ok(c, &["resubmit", "expiring", "--all"]).stdout;
    assert_eq!(back.trim(), "resubmitted 1 to expiring");
    let run = cli(c, &["resubmit", "expiring"]);
    assert_eq!(run.code, 2, "neither --sequence nor --all: {}", run.stderr);
    let purged = ok(c, &["purge", "expiring2", "--queue", "dlq", "-o", "json"]).json();
    assert_eq!(purged["deleted"], 1);
    assert!(
        ok(c, &["peek", "expiring2", "--queue", "dlq"])
            .stdout
            .is_empty()
    );

    // Purge: the queue, its scheduled message too.
    ok(c, &["send", "orders", "--body", "x", "--count", "3"]);
    let purged = ok(c, &["purge", "orders", "-o", "json"]).json();
    assert_eq!(purged["deleted"], 4);
    assert!(ok(c, &["peek", "orders"]).stdout.is_empty());

    // A binary body from a file comes back as base64.
    let binary = std::env::temp_dir().join(format!("ferrobus-cli-binary-{}", std::process::id()));
    std::fs::write(&binary, [0xff, 0x00, 0x01]).expect("binary file");
    ok(
        c,
        &["send", "other", "--file", binary.to_str().expect("path")],
    );
    let _ = std::fs::remove_file(&binary);
    let peeked = ok(c, &["peek", "other"]).lines();
    assert_eq!(peeked[0]["body_base64"], "/wAB");
    assert!(peeked[0].get("body").is_none());

    // Unknown entities.
    fails(c, &["send", "nope", "--body", "x"], 5);
    fails(c, &["peek", "nope"], 5);
    fails(c, &["receive", "nope"], 5);
    fails(c, &["purge", "nope"], 5);
    fails(c, &["resubmit", "nope", "--all"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_decide_who_may_do_what() {
    let broker = Broker::start(
        r#"
[[auth.keys]]
name = "root"
key = "root-secret"
rights = ["Manage"]
[[auth.keys]]
name = "listener"
key = "listen-secret"
rights = ["Listen"]
[[auth.keys]]
name = "sender"
key = "send-secret"
rights = ["Send"]
[[queues]]
name = "q"
[[topics]]
name = "t"
[[topics.subscriptions]]
name = "s"
"#,
    )
    .await;
    let root = &connection_string(&broker, Some(("root", "root-secret")));
    let listener = &connection_string(&broker, Some(("listener", "listen-secret")));
    let wrong = &connection_string(&broker, Some(("root", "not-the-key")));
    let unknown = &connection_string(&broker, Some(("nobody", "root-secret")));
    let anonymous = &connection_string(&broker, None);

    ok(root, &["send", "q", "--body", "hi", "-p", "k=v"]);
    ok(root, &["queue", "create", "made"]);
    ok(root, &["rule", "create", "t", "s", "r", "--sql", "k = 'v'"]);
    assert_eq!(
        ok(root, &["rule", "list", "t", "s", "-o", "json"]).json()[1]["name"],
        "r"
    );
    assert_eq!(table_row(&ok(root, &["status"]).stdout, "q")[3], "1");
    // A Listen key receives over AMQP; it may not manage.
    let received = ok(listener, &["receive", "q"]).lines();
    assert_eq!(received[0]["properties"]["k"], "v");
    fails(listener, &["queue", "create", "x"], 4);
    fails(listener, &["send", "q", "--body", "x"], 4);
    // A Send key sends over AMQP, as an SDK sender; it may not receive or manage.
    let sender = &connection_string(&broker, Some(("sender", "send-secret")));
    ok(sender, &["send", "q", "--body", "from the sender"]);
    fails(sender, &["receive", "q", "--wait", "200ms"], 4);
    fails(sender, &["peek", "q"], 4);
    assert_eq!(
        ok(root, &["peek", "q"]).lines()[0]["body"],
        "from the sender"
    );

    for refused in [wrong, unknown, anonymous] {
        fails(refused, &["status"], 4);
        fails(refused, &["queue", "create", "x"], 4);
        fails(refused, &["rule", "delete", "t", "s", "r"], 4);
        fails(refused, &["send", "q", "--body", "x"], 4);
        fails(refused, &["receive", "q", "--wait", "200ms"], 4);
    }
    // The refusals changed nothing.
    assert_eq!(
        ok(root, &["rule", "list", "t", "s", "-o", "json"]).json()[1]["name"],
        "r"
    );
    fails(root, &["queue", "show", "x"], 5);
}

#[test]
fn an_unreachable_broker_and_a_bad_connection_string_have_their_own_codes() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let c = &format!("Endpoint=sb://127.0.0.1:{port};UseDevelopmentEmulator=true");
    for arguments in [
        &["status"][..],
        &["queue", "list"],
        &["send", "q", "--body", "x"],
        &["receive", "q"],
        &["rule", "delete", "t", "s", "r"],
    ] {
        let run = fails(c, arguments, 3);
        assert!(run.stderr.contains("unreachable"), "{}", run.stderr);
    }
    fails("SharedAccessKey=x", &["status"], 2);
    fails(
        "Endpoint=sb://h;SharedAccessKeyName=only-a-name",
        &["status"],
        2,
    );
    let run = cli(c, &["queue", "frobnicate"]);
    assert_eq!(run.code, 2, "clap's usage errors: {}", run.stderr);
}

/// A broker process started on a configuration file of the test's (what a reload re-reads);
/// killed, and its directory removed, on drop.
struct FileBroker {
    child: std::process::Child,
    connection: String,
    config: std::path::PathBuf,
    directory: std::path::PathBuf,
}

impl FileBroker {
    fn start(name: &str, config: &str) -> FileBroker {
        use std::io::BufRead as _;
        let directory = std::env::temp_dir().join(format!(
            "ferrobus-cli-{name}-{}-{}",
            std::process::id(),
            ferrobus::encoding::ids::unique_u64()
        ));
        std::fs::create_dir_all(&directory).expect("scratch dir");
        let config_path = directory.join("broker.toml");
        std::fs::write(&config_path, config).expect("config");
        let mut child = Command::new(BINARY)
            .args(["--memory", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config_path)
            .current_dir(&directory)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the broker starts");
        let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let mut seen = Vec::new();
        let address = loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 || seen.len() > 50 {
                let _ = child.kill();
                panic!("the broker did not start: {seen:?}");
            }
            if let Some(address) = line
                .split("listening on ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                break address.to_string();
            }
            seen.push(line);
        };
        // Keep draining stderr so the broker never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        FileBroker {
            child,
            connection: format!("Endpoint=sb://{address};UseDevelopmentEmulator=true"),
            config: config_path,
            directory,
        }
    }
}

impl Drop for FileBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

#[test]
fn config_reload_applies_the_file_and_refuses_a_broken_one() {
    let broker = FileBroker::start("reload", "[[queues]]\nname = \"first\"\n");
    let c = &broker.connection;
    fails(c, &["queue", "show", "second"], 5);
    std::fs::write(
        &broker.config,
        "[[queues]]\nname = \"first\"\nmax_delivery_count = 4\n[[queues]]\nname = \"second\"\n",
    )
    .expect("config");
    let report = ok(c, &["config", "reload"]).stdout;
    assert!(report.contains("added: second"), "{report}");
    assert!(report.contains("changed: first"), "{report}");
    ok(c, &["queue", "show", "second"]);
    let json = ok(c, &["config", "reload", "-o", "json"]).json();
    assert_eq!(
        json["added"],
        serde_json::json!([]),
        "nothing new the second time"
    );
    // A broken file is refused; the running namespace stays.
    std::fs::write(&broker.config, "[[queues]]\nname = \n").expect("config");
    let refused = fails(c, &["config", "reload"], 1);
    assert!(refused.stderr.contains("refused"), "{}", refused.stderr);
    ok(c, &["queue", "show", "second"]);
}
