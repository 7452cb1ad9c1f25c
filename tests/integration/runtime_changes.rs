//! The namespace's run-time changes (entities created, changed or deleted through the admin
//! API) are kept in the data directory's log, the metadata group: they survive `kill -9`
//! and restarts with no file of their own, `--reset-runtime-changes` drops them for good,
//! and a `namespace.toml` left by an older build moves into the log at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::BrokerProcess;

/// The file an older build kept the run-time changes in.
const NAMESPACE_FILE: &str = "namespace.toml";

const CONFIG: &str = "[[queues]]\nname = \"from-file\"\n";

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!(
        "ferrobus-{name}-{}-{}",
        std::process::id(),
        ferrobus::encoding::ids::unique_u64()
    ));
    std::fs::create_dir_all(&directory).expect("scratch directory");
    directory
}

/// One admin API request (as the SDKs' administration clients send it); status and body.
async fn admin(address: SocketAddr, method: &str, queue: &str, body: &str) -> (u16, String) {
    let target = format!("/{queue}?api-version=2021-05");
    let mut headers = vec![("Host", "localhost:5300")];
    if !body.is_empty() {
        headers.push((
            "Content-Type",
            "application/atom+xml;type=entry;charset=utf-8",
        ));
    }
    if method == "PUT" && queue == "from-file" {
        headers.push(("If-Match", "*"));
    }
    let (status, _, body) = crate::http_guard::raw(address, method, &target, &headers, body).await;
    (status, body)
}

fn queue_entry(max_delivery_count: u32) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><MaxDeliveryCount>{max_delivery_count}</MaxDeliveryCount></QueueDescription></content></entry>"#
    )
}

/// The queue's max delivery count as the admin API describes it, or `None` if not found.
async fn max_delivery_count(address: SocketAddr, queue: &str) -> Option<u32> {
    let (status, body) = admin(address, "GET", queue, "").await;
    if status == 404 {
        return None;
    }
    assert_eq!(status, 200, "{body}");
    let value = body
        .split("<MaxDeliveryCount>")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_else(|| panic!("a MaxDeliveryCount: {body}"));
    Some(value.parse().expect("a number"))
}

/// What the data directory holds besides the log: no `namespace.toml` (or its temporary).
fn assert_no_namespace_file(data: &Path) {
    let files: Vec<String> = std::fs::read_dir(data)
        .expect("the data directory")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(NAMESPACE_FILE))
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

fn kill(mut broker: BrokerProcess) {
    broker.child.kill().expect("kill -9");
    broker.child.wait().expect("reaped");
}

#[tokio::test]
async fn run_time_changes_survive_kill_9_in_the_log_and_a_reset_drops_them_for_good() {
    let data = scratch("runtime-changes");
    let data_arg = data.display().to_string();
    let first = BrokerProcess::start(CONFIG, &["--data-dir", &data_arg]);
    let (status, body) = admin(first.address, "PUT", "made-at-run-time", &queue_entry(3)).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = admin(first.address, "PUT", "from-file", &queue_entry(7)).await;
    assert_eq!(status, 200, "{body}");
    // kill -9: each answer came once its change was durable.
    kill(first);

    let second = BrokerProcess::start(CONFIG, &["--data-dir", &data_arg]);
    assert_eq!(
        max_delivery_count(second.address, "made-at-run-time").await,
        Some(3)
    );
    assert_eq!(
        max_delivery_count(second.address, "from-file").await,
        Some(7),
        "the run-time definition wins over the file's"
    );
    assert_no_namespace_file(&data);
    kill(second);

    let reset = BrokerProcess::start(
        CONFIG,
        &["--data-dir", &data_arg, "--reset-runtime-changes"],
    );
    assert!(
        reset
            .wait_for_line(
                "--reset-runtime-changes: every entity",
                Duration::from_secs(5)
            )
            .await
            .is_some(),
        "{:?}",
        reset.lines()
    );
    assert_eq!(
        max_delivery_count(reset.address, "made-at-run-time").await,
        None
    );
    assert_eq!(
        max_delivery_count(reset.address, "from-file").await,
        Some(10),
        "the file's definition (the default max delivery count) is back"
    );
    kill(reset);

    // The reset is stored: a start without the flag does not bring the changes back.
    let after = BrokerProcess::start(CONFIG, &["--data-dir", &data_arg]);
    assert_eq!(
        max_delivery_count(after.address, "made-at-run-time").await,
        None
    );
    assert_eq!(
        max_delivery_count(after.address, "from-file").await,
        Some(10)
    );
    assert_no_namespace_file(&data);
    drop(after);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn a_namespace_file_from_an_older_build_moves_into_the_log() {
    let data = scratch("runtime-migration");
    let data_arg = data.display().to_string();
    std::fs::write(
        data.join(NAMESPACE_FILE),
        "deleted = []\n\n[[queues]]\nname = \"migrated\"\nmax_delivery_count = 4\n",
    )
    .expect("an older build's file");
    let first = BrokerProcess::start(CONFIG, &["--data-dir", &data_arg]);
    assert!(
        first
            .wait_for_line(
                "are kept in the data directory's log now",
                Duration::from_secs(5)
            )
            .await
            .is_some(),
        "{:?}",
        first.lines()
    );
    assert_eq!(max_delivery_count(first.address, "migrated").await, Some(4));
    assert_no_namespace_file(&data);
    kill(first);

    let second = BrokerProcess::start(CONFIG, &["--data-dir", &data_arg]);
    assert_eq!(
        max_delivery_count(second.address, "migrated").await,
        Some(4),
        "the file's text is in the log"
    );
    drop(second);
    let _ = std::fs::remove_dir_all(&data);
}

/// A file that does not fit the configuration (a run-time queue forwarding to an entity
/// that does not exist) stops the start, and stays where it is for the operator to fix.
#[tokio::test]
async fn a_namespace_file_that_does_not_fit_is_left_in_place() {
    let data = scratch("runtime-migration-refused");
    let text = "[[queues]]\nname = \"broken\"\nforward_to = \"nowhere\"\n";
    std::fs::write(data.join(NAMESPACE_FILE), text).expect("an older build's file");
    let config_text = format!(
        "[storage]\ndata_dir = {:?}\n{CONFIG}",
        data.display().to_string()
    );
    let config = ferrobus::config::Config::from_toml_str(&config_text, "test.toml").expect("valid");
    let storage = ferrobus::open_storage(&config).expect("the data directory opens");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind an ephemeral port");
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let error = ferrobus::run_with_storage(listener, &config, storage, stopped)
        .await
        .expect_err("the run-time changes do not fit the file");
    assert!(error.contains("do not fit together"), "{error}");
    assert_eq!(
        std::fs::read_to_string(data.join(NAMESPACE_FILE)).expect("still there"),
        text
    );
    let _ = std::fs::remove_dir_all(&data);
}
