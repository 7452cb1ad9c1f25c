//! Durable storage faults and space (issue 11): a disk below its free-space minimum refuses
//! sends with a clear error and accepts again once space returns; the log is compacted so
//! that settled messages' space comes back, and what is live survives a kill -9 after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{Body, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use fe2o3_amqp_types::definitions::SenderSettleMode;

use crate::harness::{Broker, annotation, receive, string_message_id};
use crate::process::BrokerProcess;

fn scratch(name: &str) -> std::path::PathBuf {
    let directory = std::env::temp_dir().join(format!(
        "ferrobus-{name}-{}-{}",
        std::process::id(),
        ferrobus::encoding::ids::unique_u64()
    ));
    std::fs::create_dir_all(&directory).expect("scratch directory");
    directory
}

/// Opens a connection (SASL ANONYMOUS) and a session to a broker process.
async fn connect(broker: &BrokerProcess) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let url = format!("amqp://{}", broker.address);
    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id(format!(
            "durability-{}",
            ferrobus::encoding::ids::unique_u64()
        ))
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(url.as_str())
        .await
        .expect("connects");
    let session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session");
    (connection, session)
}

fn sequence_number(delivery: &fe2o3_amqp::Delivery<Body<Value>>) -> i64 {
    match annotation(delivery, "x-opt-sequence-number") {
        Some(Value::Long(number)) => number,
        other => panic!("x-opt-sequence-number missing: {other:?}"),
    }
}

fn text(delivery: &fe2o3_amqp::Delivery<Body<Value>>) -> String {
    match delivery.body() {
        Body::Value(value) => match &value.0 {
            Value::String(text) => text.clone(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn a_full_disk_refuses_sends_with_a_clear_error_and_recovers_when_space_returns() {
    let directory = scratch("disk-full");
    let free = Arc::new(AtomicU64::new(u64::MAX));
    let mut options = ferrobus::store::storage::StorageOptions::new(&directory);
    options.min_free_space = 64 * 1024 * 1024;
    options.free_space_override = Some(free.clone());
    let broker = Broker::start_with_storage("[[queues]]\nname = \"q\"\n", options).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach sender");
    sender
        .send("before")
        .await
        .expect("accepted while there is room");

    // The disk fills up: the next send is refused, naming the cause.
    free.store(1024 * 1024, Ordering::Relaxed);
    let refused = loop {
        match sender.send("while full").await {
            Ok(Outcome::Rejected(rejected)) => break rejected,
            Ok(Outcome::Accepted(_)) => {
                // The free space is checked at most every 250 ms: an accepted send here
                // was accepted durably; wait for the next check.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("unexpected outcome {other:?}"),
        }
    };
    let error = refused.error.expect("a rejection carries an error");
    assert_eq!(
        format!("{:?}", error.condition),
        "AmqpError(ResourceLimitExceeded)",
        "{error:?}"
    );
    let description = error.description.unwrap_or_default();
    assert!(
        description.contains("data directory") && description.contains("bytes free"),
        "{description}"
    );

    // Space returns: sends are accepted again.
    free.store(u64::MAX, Ordering::Relaxed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        match sender.send("after").await {
            Ok(Outcome::Accepted(_)) => break,
            Ok(Outcome::Rejected(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("sends are not accepted again: {other:?}"),
        }
    }
    // Nothing refused was stored: the queue holds "before", any "while full" accepted
    // before the check noticed, and "after".
    let mut receiver = Receiver::builder()
        .name("receiver")
        .source("q")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .expect("attach receiver");
    let first = receive(&mut receiver).await;
    assert_eq!(text(&first), "before");
    let mut last = text(&first);
    while last != "after" {
        let delivery = receive(&mut receiver).await;
        last = text(&delivery);
        assert!(last == "while full" || last == "after", "{last}");
    }
    drop(broker);
    let _ = std::fs::remove_dir_all(&directory);
}

/// Bytes of records in the log's segment files in `directory`: each file up to its last
/// byte that is not zero (the segment being written may be a prepared one, filled with
/// zeros to the segment size ahead of the records: space set aside, not data kept).
fn log_bytes(directory: &std::path::Path) -> u64 {
    std::fs::read_dir(directory)
        .expect("data directory")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".wal"))
        .map(|entry| {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            bytes
                .iter()
                .rposition(|byte| *byte != 0)
                .map_or(0, |last| last as u64 + 1)
        })
        .sum()
}

#[tokio::test]
async fn settled_messages_space_comes_back_and_live_ones_survive_compaction_and_kill_9() {
    const CONFIG: &str = r#"
[storage]
compaction_threshold = "256KiB"

[[queues]]
name = "q"
"#;
    let directory = scratch("compaction");
    let data = directory.display().to_string();
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data]);
    let (connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach sender");
    // Peek-lock: what the receiver prefetches but does not complete comes back.
    let mut receiver = Receiver::attach(&mut session, "receiver", "q")
        .await
        .expect("attach receiver");
    let padding = "x".repeat(1000);
    // 2,000 messages of 1 KB (about 2.3 MB of log) pass through; 10 stay, locked by the
    // receiver's prefetch.
    for round in 0..20 {
        for index in 0..100 {
            sender
                .send(format!("{round}-{index}-{padding}"))
                .await
                .expect("accepted");
        }
        let keep = if round == 19 { 10 } else { 0 };
        for _ in 0..(100 - keep) {
            let delivery = receive(&mut receiver).await;
            receiver.accept(&delivery).await.expect("complete");
        }
    }
    // The entity handles commands in order: once this send is acknowledged, every
    // completion before it is durable too.
    sender.send("marker").await.expect("accepted");
    let written = 2_000 * 1_000;
    let on_disk = log_bytes(&directory);
    assert!(
        on_disk < written / 2,
        "the log holds {on_disk} bytes after {written} bytes passed through with 10 messages live: compaction reclaimed nothing"
    );
    // kill -9 and restart: the 10 live messages are back, with their numbers, and the
    // counter goes on from where it was.
    let (_, _) = (receiver.close().await, sender.close().await);
    drop(connection);
    drop(broker);
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data]);
    let (_connection, mut session) = connect(&broker).await;
    let mut receiver = Receiver::attach(&mut session, "receiver-2", "q")
        .await
        .expect("attach receiver");
    let mut numbers = Vec::new();
    for index in 90..101 {
        let delivery = receive(&mut receiver).await;
        let expected = if index == 100 {
            "marker".to_string()
        } else {
            format!("19-{index}-")
        };
        assert!(
            text(&delivery).starts_with(&expected),
            "{}",
            text(&delivery)
        );
        numbers.push(sequence_number(&delivery));
        receiver.accept(&delivery).await.expect("complete");
    }
    assert_eq!(numbers, (1991..=2001).collect::<Vec<i64>>());
    let mut sender = Sender::attach(&mut session, "sender-2", "q")
        .await
        .expect("attach sender");
    sender.send("next").await.expect("accepted");
    let delivery = receive(&mut receiver).await;
    assert_eq!(sequence_number(&delivery), 2002, "rule SEQ-1: never reused");
    drop(broker);
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn a_second_broker_on_the_same_data_directory_is_refused() {
    let directory = scratch("locked");
    let data = directory.display().to_string();
    let first = BrokerProcess::start("[[queues]]\nname = \"q\"\n", &["--data-dir", &data]);
    let config = directory.join("second.toml");
    std::fs::write(&config, "[[queues]]\nname = \"q\"\n").expect("config");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ferrobus"))
        .args(["--config", &config.display().to_string()])
        .args(["--listen", "127.0.0.1:0", "--data-dir", &data])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("in use by another ferrobus process"),
        "{stderr}"
    );
    drop(first);
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn a_torn_tail_is_cut_off_with_a_log_line_and_what_was_acknowledged_is_kept() {
    let directory = scratch("torn");
    let data = directory.display().to_string();
    let config = "[[queues]]\nname = \"q\"\n";
    let broker = BrokerProcess::start(config, &["--data-dir", &data]);
    let (connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach sender");
    for index in 0..3 {
        sender
            .send(format!("kept-{index}"))
            .await
            .expect("accepted");
    }
    drop(sender);
    drop(session);
    drop(connection);
    drop(broker); // kill -9
    // A crash in the middle of a write: half a record header and some garbage at the end.
    let segment = directory.join("0000000000000000.wal");
    let mut bytes = std::fs::read(&segment).expect("the log segment");
    bytes.extend_from_slice(&[0, 0, 4, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
    std::fs::write(&segment, &bytes).expect("tear the tail");

    let broker = BrokerProcess::start(config, &["--data-dir", &data]);
    let line = broker
        .wait_for_line(
            "cutting off a torn or corrupt log tail",
            Duration::from_secs(5),
        )
        .await
        .expect("the truncation is logged");
    assert!(line.contains("bytes=11"), "{line}");
    let (_connection, mut session) = connect(&broker).await;
    let mut receiver = Receiver::attach(&mut session, "receiver", "q")
        .await
        .expect("attach receiver");
    for index in 0..3 {
        let delivery = receive(&mut receiver).await;
        assert_eq!(text(&delivery), format!("kept-{index}"));
        receiver.accept(&delivery).await.expect("complete");
    }
    // Writing goes on after the cut: a new message is accepted and numbered next.
    let mut sender = Sender::attach(&mut session, "sender-2", "q")
        .await
        .expect("attach sender");
    sender.send("after").await.expect("accepted");
    let delivery = receive(&mut receiver).await;
    assert_eq!(sequence_number(&delivery), 4);
    drop(broker);
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn a_failed_fsync_is_never_acknowledged_and_stops_acceptance() {
    // issue 11: never retry-and-pretend — the send is refused with amqp:internal-error, and
    // so is every later one; the broker keeps answering.
    let directory = scratch("sync-fails");
    let mut options = ferrobus::store::storage::StorageOptions::new(&directory);
    options.fault = Some(ferrobus::store::log::Fault::SyncFails);
    let broker = Broker::start_with_storage("[[queues]]\nname = \"q\"\n", options).await;
    let (_connection, mut session) = broker.connect().await;
    // A peek-lock receiver is waiting: locking a message writes nothing, so only the
    // withdrawal of refused sends keeps them from it.
    let mut receiver = Receiver::attach(&mut session, "receiver", "q")
        .await
        .expect("attach receiver");
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach sender");
    for attempt in 0..2 {
        match sender.send(format!("attempt {attempt}")).await {
            Ok(Outcome::Rejected(rejected)) => {
                let error = rejected.error.expect("an error");
                assert_eq!(
                    format!("{:?}", error.condition),
                    "AmqpError(InternalError)",
                    "{error:?}"
                );
                assert!(
                    error
                        .description
                        .unwrap_or_default()
                        .contains("could not store the operation durably"),
                );
            }
            other => panic!("attempt {attempt}: expected a rejection, got {other:?}"),
        }
    }
    // Nothing was acknowledged, and nothing is delivered — also not after a later turn
    // that writes nothing (another receiver attaching) lets held deliveries go out.
    let _second = Receiver::attach(&mut session, "receiver-2", "q")
        .await
        .expect("attach another receiver");
    let nothing =
        tokio::time::timeout(Duration::from_millis(300), receiver.recv::<Body<Value>>()).await;
    assert!(
        nothing.is_err(),
        "a message that was never stored was delivered"
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn an_assigned_message_id_is_the_same_on_redelivery_and_after_kill_9() {
    // The broker keeps the id it assigns as 16 bytes beside the message and writes it into
    // the properties section on the way out (issue 16): a redelivery, and the message
    // recovered from the log, carry the same id, in front of the fields the client sent.
    use fe2o3_amqp::types::messaging::{Message, Properties};
    const CONFIG: &str = r#"
[[queues]]
name = "q"
"#;
    let directory = scratch("assigned-id");
    let data = directory.display().to_string();
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data]);
    let (connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach sender");
    sender.send("bare").await.expect("accepted");
    let with_fields = Message::builder()
        .properties(
            Properties::builder()
                .subject("created")
                .content_type("text/plain")
                .build(),
        )
        .value(Value::String("with fields".into()))
        .build();
    sender.send(with_fields).await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "q")
        .await
        .expect("attach receiver");
    let mut first = Vec::new();
    for _ in 0..2 {
        let delivery = receive(&mut receiver).await;
        first.push((text(&delivery), string_message_id(&delivery)));
        receiver.release(&delivery).await.expect("released");
    }
    assert_ne!(first[0].1, first[1].1, "each message its own id");
    for (_, id) in &first {
        assert!(
            ferrobus::encoding::ids::parse_guid_text(id).is_some(),
            "a GUID's text: {id}"
        );
    }
    for expected in &first {
        let delivery = receive(&mut receiver).await;
        assert_eq!(
            &(text(&delivery), string_message_id(&delivery)),
            expected,
            "redelivered"
        );
        receiver.release(&delivery).await.expect("released");
    }
    // Acknowledged sends and releases are durable: kill -9 and restart.
    let (_, _) = (receiver.close().await, sender.close().await);
    drop(connection);
    drop(broker);
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data]);
    let (_connection, mut session) = connect(&broker).await;
    let mut receiver = Receiver::attach(&mut session, "receiver-2", "q")
        .await
        .expect("attach receiver");
    for expected in &first {
        let delivery = receive(&mut receiver).await;
        assert_eq!(
            &(text(&delivery), string_message_id(&delivery)),
            expected,
            "recovered"
        );
        if expected.0 == "with fields" {
            let properties = delivery.message().properties.clone().expect("properties");
            assert_eq!(properties.subject.as_deref(), Some("created"));
            assert_eq!(
                properties.content_type.map(|symbol| symbol.0),
                Some("text/plain".to_string())
            );
        }
        receiver.accept(&delivery).await.expect("complete");
    }
    drop(broker);
    let _ = std::fs::remove_dir_all(&directory);
}
