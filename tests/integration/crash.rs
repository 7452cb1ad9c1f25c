//! Durability under `kill -9` (issue 11): senders and receivers run against the real broker
//! process on a data directory, the broker is killed at a random moment, restarted on the
//! same directory, and so on; at the end everything left is drained and checked:
//! - zero acknowledged messages lost on `work` (sends the broker accepted, scheduled ones
//!   included): each was delivered to the peek-lock consumer (which completes it) or is
//!   still there;
//! - no received-and-deleted message of `rad` ever delivered again (its removal was durable
//!   before its transfer went out); receive-and-delete is at-most-once, so only the few
//!   deliveries in flight at a kill (at most the link credit) may be missing;
//! - sequence numbers unique: one number, one message;
//! - acknowledged messages that expired are in the dead-letter queue.
//!
//! `FERROBUS_CRASH_ITERATIONS` sets the number of kills (3 in the default run; the long form
//! is 100 or more) and `FERROBUS_CRASH_SEED` replays a run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{
    Body, Header, Message, MessageAnnotations, Outcome, Properties,
};
use fe2o3_amqp::types::primitives::{Timestamp, Value};
use fe2o3_amqp::{Connection, Delivery, Receiver, Sender, Session};
use fe2o3_amqp_types::definitions::SenderSettleMode;

use crate::harness::annotation;
use crate::process::BrokerProcess;

const CONFIG: &str = r#"
[[queues]]
name = "work"
lock_duration = "2s"
max_delivery_count = 1000

[[queues]]
name = "rad"

[[queues]]
name = "in"
forward_to = "out"

[[queues]]
name = "out"

[[queues]]
name = "expiring"
dead_lettering_on_message_expiration = true
"#;

/// What the clients saw, across every incarnation of the broker.
#[derive(Default)]
struct Ledger {
    /// Ids the broker accepted on `work` (scheduled ones included).
    acknowledged: BTreeSet<u64>,
    /// Ids the broker accepted on `rad`.
    destructive: BTreeSet<u64>,
    /// Ids the broker accepted on `in`, which forwards to `out`.
    forwarded: BTreeSet<u64>,
    /// Ids delivered on `work` (peek-lock: completed or released).
    seen: BTreeSet<u64>,
    /// Ids the broker accepted on `expiring` (they expire after 100 ms).
    expiring: BTreeSet<u64>,
    /// Ids received and deleted, with their sequence numbers.
    consumed: BTreeMap<u64, i64>,
    /// (queue, sequence number) → id, for every delivery seen.
    numbers: BTreeMap<(&'static str, i64), u64>,
    /// What went wrong.
    violations: Vec<String>,
}

impl Ledger {
    fn consumed(&mut self, id: u64, sequence_number: i64, when: &str) {
        if let Some(previous) = self.consumed.insert(id, sequence_number) {
            self.violations.push(format!(
                "message {id} was received and deleted twice ({when}; numbers {previous} and {sequence_number})"
            ));
        }
        self.numbered("rad", id, sequence_number);
    }

    fn numbered(&mut self, queue: &'static str, id: u64, sequence_number: i64) {
        if let Some(other) = self.numbers.insert((queue, sequence_number), id)
            && other != id
        {
            self.violations.push(format!(
                "{queue}: sequence number {sequence_number} names both message {other} and message {id}"
            ));
        }
    }
}

/// A small deterministic generator (xorshift), seeded per run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

fn body_id(delivery: &Delivery<Body<Value>>) -> Option<u64> {
    match delivery.body() {
        Body::Value(value) => match &value.0 {
            Value::Ulong(id) => Some(*id),
            _ => None,
        },
        _ => None,
    }
}

fn sequence_number(delivery: &Delivery<Body<Value>>) -> i64 {
    match annotation(delivery, "x-opt-sequence-number") {
        Some(Value::Long(number)) => number,
        other => panic!("x-opt-sequence-number missing: {other:?}"),
    }
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// Sends until the broker dies: every accepted id goes into the ledger.
async fn send_load(broker_address: BrokerProcessAddress, ledger: Arc<Mutex<Ledger>>, first: u64) {
    let Some((_connection, mut session)) = connect_to(broker_address).await else {
        return;
    };
    let Ok(mut work) = Sender::attach(&mut session, "work-sender", "work").await else {
        return;
    };
    let Ok(mut expiring) = Sender::attach(&mut session, "expiring-sender", "expiring").await else {
        return;
    };
    let Ok(mut rad) = Sender::attach(&mut session, "rad-sender", "rad").await else {
        return;
    };
    let Ok(mut forwarding) = Sender::attach(&mut session, "in-sender", "in").await else {
        return;
    };
    for id in first.. {
        let to_forward = id % 13 == 0;
        let to_expiring = !to_forward && id % 7 == 0;
        let to_rad = !to_forward && !to_expiring && id % 5 == 0;
        let mut builder = Message::builder()
            .properties(Properties::builder().message_id(format!("m-{id}")).build());
        if to_expiring {
            builder = builder.header(Header {
                ttl: Some(100),
                ..Header::default()
            });
        } else if id % 11 == 0 {
            builder = builder.message_annotations(
                MessageAnnotations::builder()
                    .insert(
                        "x-opt-scheduled-enqueue-time",
                        Timestamp::from_milliseconds(now_millis() + 200),
                    )
                    .build(),
            );
        }
        let message = builder.value(Value::Ulong(id)).build();
        let sender = if to_forward {
            &mut forwarding
        } else if to_expiring {
            &mut expiring
        } else if to_rad {
            &mut rad
        } else {
            &mut work
        };
        match sender.send(message).await {
            Ok(Outcome::Accepted(_)) => {
                let mut ledger = ledger.lock().expect("ledger");
                if to_forward {
                    ledger.forwarded.insert(id);
                } else if to_expiring {
                    ledger.expiring.insert(id);
                } else if to_rad {
                    ledger.destructive.insert(id);
                } else {
                    ledger.acknowledged.insert(id);
                }
            }
            _ => return,
        }
    }
}

/// Receives and deletes from `rad` until the broker dies.
async fn consume_load(broker_address: BrokerProcessAddress, ledger: Arc<Mutex<Ledger>>) {
    let Some((_connection, mut session)) = connect_to(broker_address).await else {
        return;
    };
    let Ok(mut receiver) = Receiver::builder()
        .name("rad-consumer")
        .source("rad")
        .sender_settle_mode(SenderSettleMode::Settled)
        .credit_mode(CreditMode::Auto(RAD_CREDIT))
        .attach(&mut session)
        .await
    else {
        return;
    };
    while let Ok(delivery) = receiver.recv::<Body<Value>>().await {
        let Some(id) = body_id(&delivery) else {
            continue;
        };
        ledger
            .lock()
            .expect("ledger")
            .consumed(id, sequence_number(&delivery), "under load");
        // Settled already: no frame goes out, but fe2o3 counts it to refill credit.
        if receiver.accept(&delivery).await.is_err() {
            return;
        }
    }
}

/// Peek-locks messages of `work`: completes two of three and releases the third (locks
/// held at a kill must come back released, never lost).
async fn peek_lock_load(broker_address: BrokerProcessAddress, ledger: Arc<Mutex<Ledger>>) {
    let Some((_connection, mut session)) = connect_to(broker_address).await else {
        return;
    };
    let Ok(mut receiver) = Receiver::attach(&mut session, "work-consumer", "work").await else {
        return;
    };
    while let Ok(delivery) = receiver.recv::<Body<Value>>().await {
        let Some(id) = body_id(&delivery) else {
            continue;
        };
        {
            let mut ledger = ledger.lock().expect("ledger");
            ledger.numbered("work", id, sequence_number(&delivery));
            ledger.seen.insert(id);
        }
        let settled = if id % 3 == 0 {
            receiver.release(&delivery).await
        } else {
            receiver.accept(&delivery).await
        };
        if settled.is_err() {
            return;
        }
    }
}

type BrokerProcessAddress = std::net::SocketAddr;

/// Concurrent senders (each waits for its outcome before the next send).
const SENDERS: u64 = 4;

/// Link credit of the receive-and-delete consumer: what may be in flight at a kill.
const RAD_CREDIT: u32 = 5;

pub(crate) async fn connect_to(
    address: BrokerProcessAddress,
) -> Option<(ConnectionHandle<()>, SessionHandle<()>)> {
    let url = format!("amqp://{address}");
    let mut connection = Connection::builder()
        .container_id(format!("crash-{}", ferrobus::encoding::ids::unique_u64()))
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(url.as_str())
        .await
        .ok()?;
    let session = Session::begin(&mut connection).await.ok()?;
    Some((connection, session))
}

/// Receives and deletes everything `address` holds until nothing arrives for `quiet`.
async fn drain(broker: &BrokerProcess, address: &str, quiet: Duration) -> Vec<(u64, i64)> {
    let (_connection, mut session) = connect_to(broker.address)
        .await
        .expect("connects after restart");
    let mut receiver = Receiver::builder()
        .name(format!("drain-{address}"))
        .source(address)
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .expect("attach drain receiver");
    let mut drained = Vec::new();
    loop {
        match tokio::time::timeout(quiet, receiver.recv::<Body<Value>>()).await {
            Ok(Ok(delivery)) => {
                if let Some(id) = body_id(&delivery) {
                    drained.push((id, sequence_number(&delivery)));
                }
                // Settled already: no frame goes out, but fe2o3 counts it to refill credit.
                let _ = receiver.accept(&delivery).await;
            }
            Ok(Err(error)) => panic!("draining {address}: {error:?}"),
            Err(_) => break,
        }
    }
    drained
}

fn iterations() -> usize {
    std::env::var("FERROBUS_CRASH_ITERATIONS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_kill_9_under_load() {
    let seed = std::env::var("FERROBUS_CRASH_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| ferrobus::encoding::ids::unique_u64() | 1);
    let mut random = Random(seed);
    let data = std::env::temp_dir().join(format!(
        "ferrobus-crash-{}-{}",
        std::process::id(),
        ferrobus::encoding::ids::unique_u64()
    ));
    let data_argument = data.display().to_string();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut next_id = 1u64;
    for iteration in 0..iterations() {
        let mut broker = BrokerProcess::start(CONFIG, &["--data-dir", &data_argument]);
        let address = broker.address;
        let mut tasks: Vec<_> = (0..SENDERS)
            .map(|sender| {
                tokio::spawn(send_load(
                    address,
                    ledger.clone(),
                    next_id + sender * 100_000,
                ))
            })
            .collect();
        tasks.extend([
            tokio::spawn(consume_load(address, ledger.clone())),
            tokio::spawn(peek_lock_load(address, ledger.clone())),
        ]);
        // Ids of different incarnations never collide.
        next_id += 1_000_000;
        let run_for = Duration::from_millis(random.between(150, 700));
        tokio::time::sleep(run_for).await;
        // kill -9, mid-load.
        broker.child.kill().expect("SIGKILL");
        let _ = broker.child.wait();
        // What the broker sent before it died is in the clients' sockets: give them a moment
        // to read it (a client may not notice the dead connection), then stop them.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
        let ledger = ledger.lock().expect("ledger");
        assert!(
            ledger.violations.is_empty(),
            "seed {seed}, iteration {iteration}: {:?}",
            ledger.violations
        );
    }
    // A last incarnation: everything acknowledged and not yet consumed must be there.
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data_argument]);
    let remaining = drain(&broker, "work", Duration::from_millis(1500)).await;
    let destructive = drain(&broker, "rad", Duration::from_millis(300)).await;
    let dead = drain(
        &broker,
        "expiring/$DeadLetterQueue",
        Duration::from_millis(800),
    )
    .await;
    let unexpired = drain(&broker, "expiring", Duration::from_millis(300)).await;
    let arrived: BTreeSet<u64> = drain(&broker, "out", Duration::from_millis(800))
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let mut ledger = ledger.lock().expect("ledger");
    for (id, sequence_number) in remaining {
        ledger.numbered("work", id, sequence_number);
        ledger.seen.insert(id);
    }
    for (id, sequence_number) in destructive {
        ledger.consumed(id, sequence_number, "after the last restart");
    }
    let acknowledged = ledger.acknowledged.len();
    let lost: Vec<u64> = ledger
        .acknowledged
        .difference(&ledger.seen)
        .copied()
        .take(20)
        .collect();
    let unseen_destructive = ledger
        .destructive
        .iter()
        .filter(|id| !ledger.consumed.contains_key(id))
        .count();
    let in_flight_allowance = iterations() * RAD_CREDIT as usize;
    let expired: BTreeSet<u64> = dead
        .iter()
        .chain(unexpired.iter())
        .map(|(id, _)| *id)
        .collect();
    let lost_expiring: Vec<u64> = ledger
        .expiring
        .difference(&expired)
        .copied()
        .take(20)
        .collect();
    assert!(
        ledger.violations.is_empty(),
        "seed {seed}: {:?}",
        ledger.violations
    );
    let lost_count = ledger.acknowledged.difference(&ledger.seen).count();
    assert!(
        lost.is_empty(),
        "seed {seed}: {lost_count} of {acknowledged} acknowledged messages lost, e.g. {lost:?} (data kept in {})",
        data.display()
    );
    let lost_forwarded: Vec<u64> = ledger
        .forwarded
        .difference(&arrived)
        .copied()
        .take(20)
        .collect();
    assert!(
        lost_forwarded.is_empty(),
        "seed {seed}: acknowledged messages sent to a forwarding queue never reached its target: {lost_forwarded:?}"
    );
    assert!(
        unseen_destructive <= in_flight_allowance,
        "seed {seed}: {unseen_destructive} acknowledged receive-and-delete messages never arrived (at most {in_flight_allowance} may be in flight at the kills)"
    );
    assert!(
        lost_expiring.is_empty(),
        "seed {seed}: acknowledged expiring messages missing from the dead-letter queue: {lost_expiring:?}"
    );
    assert!(
        acknowledged > 0 && !ledger.expiring.is_empty(),
        "seed {seed}: the load sent nothing ({acknowledged} acknowledged)"
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&data);
    eprintln!(
        "crash test: seed {seed}, {} kills, {acknowledged} acknowledged on work (all delivered or kept), {} on rad ({} received and deleted, {unseen_destructive} in flight at a kill), {} expiring ({} dead-lettered)",
        iterations(),
        ledger.destructive.len(),
        ledger.consumed.len(),
        ledger.expiring.len(),
        dead.len()
    );
    eprintln!(
        "crash test: {} acknowledged on the forwarding queue, all {} arrived at its target",
        ledger.forwarded.len(),
        ledger.forwarded.intersection(&arrived).count()
    );
}
