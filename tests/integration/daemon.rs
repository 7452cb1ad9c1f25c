//! Running as a daemon, on the real binary (signals): SIGHUP and `POST /$config/reload`
//! re-read the configuration file and apply its entities without a restart, an invalid file
//! is refused and the running configuration stays, entities removed from the file follow the
//! precedence of run-time changes exactly as a restart would, the route is authorised like
//! the other admin routes, the service manager hears READY=1, RELOADING=1 then READY=1, and
//! STOPPING=1 on its NOTIFY_SOCKET, and `--log-format json` prints one JSON object per line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use fe2o3_amqp::{Receiver, Sender};
use serde_json::Value;

use crate::harness::receive;
use crate::process::BrokerProcess;

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!(
        "ferrobus-daemon-{name}-{}-{}",
        std::process::id(),
        ferrobus::encoding::ids::unique_u64()
    ));
    std::fs::create_dir_all(&directory).expect("scratch directory");
    directory
}

/// An anonymous connection and a session on it (the cluster tests use it too).
pub(crate) async fn connect(
    address: SocketAddr,
) -> (
    fe2o3_amqp::connection::ConnectionHandle<()>,
    fe2o3_amqp::session::SessionHandle<()>,
) {
    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id(format!("daemon-{}", ferrobus::encoding::ids::unique_u64()))
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(format!("amqp://{address}").as_str())
        .await
        .expect("connects");
    let session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session");
    (connection, session)
}

/// Sends one message to `queue` and receives it back (peek-lock, completed).
async fn round_trip(address: SocketAddr, queue: &str, body: &str) {
    let (mut connection, mut session) = connect(address).await;
    let mut sender = Sender::attach(&mut session, "sender", queue)
        .await
        .unwrap_or_else(|error| panic!("a sender attaches to '{queue}': {error:?}"));
    sender.send(body.to_string()).await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", queue)
        .await
        .expect("a receiver attaches");
    let delivery = receive(&mut receiver).await;
    let text = format!("{:?}", delivery.body());
    assert!(text.contains(body), "{text}");
    receiver.accept(&delivery).await.expect("completed");
    sender.close().await.ok();
    receiver.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

/// Whether a sender can attach to `queue` (a missing queue is refused with not-found).
async fn attaches(address: SocketAddr, queue: &str) -> bool {
    let (mut connection, mut session) = connect(address).await;
    let attached = Sender::attach(&mut session, "probe", queue).await;
    let ok = match attached {
        Ok(sender) => {
            sender.close().await.ok();
            true
        }
        Err(_) => false,
    };
    session.end().await.ok();
    connection.close().await.ok();
    ok
}

/// One admin request to the broker's AMQP port (HTTP is told apart by its first bytes).
async fn http(
    address: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut all = vec![("Host", "localhost")];
    all.extend_from_slice(headers);
    if method == "PUT" {
        all.push((
            "Content-Type",
            "application/atom+xml;type=entry;charset=utf-8",
        ));
    }
    let (status, _, body) = crate::http_guard::raw(address, method, target, &all, body).await;
    (status, body)
}

async fn reload_route(address: SocketAddr, headers: &[(&str, &str)]) -> (u16, Value) {
    let (status, body) = http(address, "POST", "/$config/reload", headers, "").await;
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, value)
}

fn names(value: &Value, key: &str) -> Vec<String> {
    let mut names: Vec<String> = value[key]
        .as_array()
        .unwrap_or_else(|| panic!("'{key}' is a list: {value}"))
        .iter()
        .map(|name| name.as_str().expect("a name").to_string())
        .collect();
    names.sort();
    names
}

/// The queue's MaxDeliveryCount as the admin API describes it; `None`: not found.
async fn max_delivery_count(address: SocketAddr, queue: &str) -> Option<u32> {
    let (status, body) = http(
        address,
        "GET",
        &format!("/{queue}?api-version=2021-05"),
        &[],
        "",
    )
    .await;
    if status == 404 {
        return None;
    }
    assert_eq!(status, 200, "{body}");
    body.split("<MaxDeliveryCount>")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .and_then(|value| value.parse().ok())
}

fn queue_entry(max_delivery_count: u32) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><MaxDeliveryCount>{max_delivery_count}</MaxDeliveryCount></QueueDescription></content></entry>"#
    )
}

/// The next datagram on the fake service manager's socket (5 s at most).
async fn next_notification(socket: &tokio::net::UnixDatagram) -> String {
    let mut buffer = vec![0u8; 4096];
    let length = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buffer))
        .await
        .expect("a notification within 5 s")
        .expect("received");
    String::from_utf8_lossy(&buffer[..length]).into_owned()
}

#[tokio::test]
async fn sighup_adds_a_queue_a_client_uses_and_changes_a_property_with_notifications() {
    let directory = scratch("notify");
    let socket_path = directory.join("notify.sock");
    let manager = tokio::net::UnixDatagram::bind(&socket_path).expect("the manager's socket");
    let broker = BrokerProcess::start_with(
        "[[queues]]\nname = \"kept\"\nmax_delivery_count = 10\n",
        &["--memory"],
        &format!("export NOTIFY_SOCKET='{}';", socket_path.display()),
    );
    let ready = next_notification(&manager).await;
    assert!(ready.lines().any(|line| line == "READY=1"), "{ready:?}");
    assert!(ready.contains("STATUS="), "{ready:?}");
    assert!(!attaches(broker.address, "added").await);

    std::fs::write(
        broker.config_path(),
        "[[queues]]\nname = \"kept\"\nmax_delivery_count = 2\n\n[[queues]]\nname = \"added\"\n",
    )
    .expect("rewrite the file");
    broker.signal("HUP");
    let reloading = next_notification(&manager).await;
    assert!(
        reloading.lines().any(|line| line == "RELOADING=1"),
        "{reloading:?}"
    );
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading:?}");
    let ready = next_notification(&manager).await;
    assert!(ready.lines().any(|line| line == "READY=1"), "{ready:?}");
    assert!(ready.contains("1 added, 1 changed, 0 removed"), "{ready:?}");
    let line = broker
        .wait_for_line("configuration reloaded", Duration::from_secs(5))
        .await
        .expect("the reload is logged");
    assert!(line.contains("added [added], changed [kept]"), "{line}");

    // The new queue serves without a restart; the changed property applies.
    round_trip(broker.address, "added", "after-reload").await;
    assert_eq!(max_delivery_count(broker.address, "kept").await, Some(2));

    broker.signal("TERM");
    let stopping = next_notification(&manager).await;
    assert!(
        stopping.lines().any(|line| line == "STOPPING=1"),
        "{stopping:?}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn an_invalid_file_is_refused_naming_the_line_and_the_old_entities_serve() {
    let broker = BrokerProcess::start("[[queues]]\nname = \"old\"\n", &["--memory"]);
    std::fs::write(
        broker.config_path(),
        "[[queues]]\nname = \"old\"\n\n[[queues]]\nnmae = \"new\"\n",
    )
    .expect("rewrite the file");
    broker.signal("HUP");
    let line = broker
        .wait_for_line("configuration reload refused", Duration::from_secs(5))
        .await
        .expect("the refusal is logged");
    assert!(line.contains("broker.toml:5"), "{line}");
    assert!(line.contains("nmae"), "{line}");
    assert!(line.contains("ERROR"), "{line}");
    round_trip(broker.address, "old", "still-served").await;
    assert!(!attaches(broker.address, "new").await);

    // A file that parses but breaks a rule is refused the same way, through the route too.
    std::fs::write(
        broker.config_path(),
        "[[queues]]\nname = \"old\"\nforward_to = \"nowhere\"\n",
    )
    .expect("rewrite the file");
    let (status, answer) = reload_route(broker.address, &[]).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["reloaded"], Value::Bool(false), "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|error| error.contains("nowhere")),
        "{answer}"
    );
    round_trip(broker.address, "old", "still-served-again").await;
}

#[tokio::test]
async fn removed_entities_follow_the_run_time_changes_as_a_restart_would() {
    let data = scratch("precedence");
    let data_argument = data.display().to_string();
    let first_file = "[[queues]]\nname = \"plain\"\n\n[[queues]]\nname = \"changed-at-run-time\"\n\n[[queues]]\nname = \"deleted-at-run-time\"\n";
    let broker = BrokerProcess::start(first_file, &["--data-dir", &data_argument]);
    let address = broker.address;
    let (status, body) = http(
        address,
        "PUT",
        "/changed-at-run-time?api-version=2021-05",
        &[("If-Match", "*")],
        &queue_entry(7),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(
        address,
        "DELETE",
        "/deleted-at-run-time?api-version=2021-05",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(
        address,
        "PUT",
        "/created-at-run-time?api-version=2021-05",
        &[],
        &queue_entry(4),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // The new file drops every entity of the old one but the deleted one, and adds one.
    let second_file = "[[queues]]\nname = \"deleted-at-run-time\"\n\n[[queues]]\nname = \"fresh\"\nmax_delivery_count = 3\n";
    std::fs::write(broker.config_path(), second_file).expect("rewrite the file");
    let (status, answer) = reload_route(address, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["reloaded"], Value::Bool(true), "{answer}");
    assert_eq!(names(&answer, "added"), ["fresh"], "{answer}");
    assert_eq!(names(&answer, "removed"), ["plain"], "{answer}");
    assert!(names(&answer, "changed").is_empty(), "{answer}");
    assert!(names(&answer, "errors").is_empty(), "{answer}");

    let expected = [
        ("plain", None),
        ("changed-at-run-time", Some(7)),
        ("deleted-at-run-time", None),
        ("created-at-run-time", Some(4)),
        ("fresh", Some(3)),
    ];
    for (queue, count) in expected {
        assert_eq!(
            max_delivery_count(address, queue).await,
            count,
            "after the reload: {queue}"
        );
    }
    round_trip(address, "fresh", "to-fresh").await;

    // A restart with the new file serves the same namespace.
    broker.signal("TERM");
    let mut broker = broker;
    let _ = broker.child.wait();
    drop(broker);
    let restarted = BrokerProcess::start(second_file, &["--data-dir", &data_argument]);
    for (queue, count) in expected {
        assert_eq!(
            max_delivery_count(restarted.address, queue).await,
            count,
            "after a restart: {queue}"
        );
    }
    drop(restarted);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn with_keys_the_reload_route_needs_a_manage_token() {
    let keys = "[[auth.keys]]\nname = \"root\"\nkey = \"root-secret\"\nrights = [\"Manage\"]\n\n[[auth.keys]]\nname = \"sender\"\nkey = \"send-secret\"\nrights = [\"Send\", \"Listen\"]\n";
    let broker = BrokerProcess::start(
        &format!("{keys}\n[[queues]]\nname = \"q\"\n"),
        &["--memory"],
    );
    std::fs::write(
        broker.config_path(),
        format!("{keys}\n[[queues]]\nname = \"q\"\n\n[[queues]]\nname = \"r\"\n"),
    )
    .expect("rewrite the file");
    let (status, answer) = reload_route(broker.address, &[]).await;
    assert_eq!(status, 401, "{answer}");
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
        + 600;
    let token = crate::auth::token("", "sender", "send-secret", expires);
    let (status, answer) = reload_route(broker.address, &[("Authorization", &token)]).await;
    assert_eq!(status, 403, "{answer}");
    // Nothing was reloaded by the refused requests.
    assert!(
        broker
            .lines()
            .iter()
            .all(|line| !line.contains("reloading the configuration")),
        "{:?}",
        broker.lines()
    );
    let token = crate::auth::token("", "root", "root-secret", expires);
    let (status, answer) = reload_route(broker.address, &[("Authorization", &token)]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(names(&answer, "added"), ["r"], "{answer}");
}

#[tokio::test]
async fn log_format_json_prints_one_json_object_per_line() {
    let broker = BrokerProcess::start(
        "[[queues]]\nname = \"q\"\n",
        &["--memory", "--log-format", "json"],
    );
    broker.signal("HUP");
    broker
        .wait_for_line("configuration reloaded", Duration::from_secs(5))
        .await
        .expect("the reload is logged");
    let lines = broker.lines();
    assert!(lines.len() >= 3, "{lines:?}");
    for line in &lines {
        let value: Value = serde_json::from_str(line.trim_end())
            .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
        assert!(value["timestamp"].is_string(), "{line}");
        assert!(value["level"].is_string(), "{line}");
        assert!(value["fields"]["message"].is_string(), "{line}");
    }
    assert!(
        lines
            .iter()
            .any(|line| line.contains("\"level\":\"INFO\"") && line.contains("listening on")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_reload_adds_and_removes_subscriptions_and_keeps_rules_for_the_next_start() {
    let broker = BrokerProcess::start(
        "[[topics]]\nname = \"t\"\n\n[[topics.subscriptions]]\nname = \"s1\"\n\n[[topics.subscriptions]]\nname = \"gone\"\n",
        &["--memory"],
    );
    std::fs::write(
        broker.config_path(),
        "[[topics]]\nname = \"t\"\n\n[[topics.subscriptions]]\nname = \"s1\"\n\n[[topics.subscriptions.rules]]\nname = \"none\"\nsql_filter = \"1 = 0\"\n\n[[topics.subscriptions]]\nname = \"s2\"\n",
    )
    .expect("rewrite the file");
    let (status, answer) = reload_route(broker.address, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(names(&answer, "added"), ["t/Subscriptions/s2"], "{answer}");
    assert_eq!(
        names(&answer, "removed"),
        ["t/Subscriptions/gone"],
        "{answer}"
    );
    assert_eq!(
        names(&answer, "changed"),
        ["t/Subscriptions/s1"],
        "{answer}"
    );
    assert_eq!(
        names(&answer, "restart"),
        ["t/Subscriptions/s1: a change of rules takes effect at the next start"],
        "{answer}"
    );
    assert!(!attaches(broker.address, "t/Subscriptions/gone").await);

    let (mut connection, mut session) = connect(broker.address).await;
    let mut sender = Sender::attach(&mut session, "sender", "t")
        .await
        .expect("a sender attaches to the topic");
    sender
        .send("published".to_string())
        .await
        .expect("accepted");
    // The new subscription gets the message; the old one keeps the rule in force (the
    // file's new rule applies at the next start).
    for subscription in ["t/Subscriptions/s2", "t/Subscriptions/s1"] {
        let mut receiver = Receiver::attach(&mut session, "receiver", subscription)
            .await
            .expect("a receiver attaches");
        let delivery = receive(&mut receiver).await;
        receiver.accept(&delivery).await.expect("completed");
        receiver.close().await.ok();
    }
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

#[tokio::test]
async fn readiness_reaches_an_abstract_notify_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!(
        "ferrobus-notify-{}-{}",
        std::process::id(),
        ferrobus::encoding::ids::unique_u64()
    );
    let address =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("a name");
    let socket = std::os::unix::net::UnixDatagram::bind_addr(&address).expect("bind");
    socket.set_nonblocking(true).expect("non-blocking");
    let manager = tokio::net::UnixDatagram::from_std(socket).expect("tokio socket");
    let _broker = BrokerProcess::start_with(
        "[[queues]]\nname = \"q\"\n",
        &["--memory"],
        &format!("export NOTIFY_SOCKET='@{name}';"),
    );
    let ready = next_notification(&manager).await;
    assert!(ready.lines().any(|line| line == "READY=1"), "{ready:?}");
}

/// `systemd-analyze verify` accepts packaging/ferrobus.service (with ExecStart pointing at
/// this build); skipped, saying so, where systemd-analyze is missing.
#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/ferrobus.service"
    ))
    .expect("the unit");
    assert!(unit.contains("\nType=notify\n"), "{unit}");
    assert!(
        unit.contains("\nExecReload=/bin/kill -HUP $MAINPID\n"),
        "{unit}"
    );
    assert!(unit.contains("\nStateDirectory=ferrobus\n"), "{unit}");
    let Ok(output) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze is not installed: packaging/ferrobus.service not verified");
        return;
    };
    assert!(output.status.success());
    let directory = scratch("unit");
    let path = directory.join("ferrobus.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/ferrobus", env!("CARGO_BIN_EXE_ferrobus")),
    )
    .expect("the unit's copy");
    let output = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify warns: {said}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}
