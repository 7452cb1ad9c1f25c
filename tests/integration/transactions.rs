//! Transactions (issue 15, item 3; rules TXN-1..4) with fe2o3-amqp's transaction controller
//! against the real broker: sends and settlements under a transaction land together at
//! commit and leave no trace on roll-back, a lost lock rolls the whole transaction back,
//! a transaction stays on one entity except for send-via, send-via moves its messages on
//! only when committed, and a committed transaction survives `kill -9` whole while an
//! undischarged one vanishes whole.

use fe2o3_amqp::transaction::{
    Controller, Transaction, TransactionDischarge, TransactionalRetirement,
};
use fe2o3_amqp::types::messaging::{Body, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use fe2o3_amqp_types::definitions::Fields;
use fe2o3_amqp_types::primitives::Symbol;
use std::net::SocketAddr;

use crate::explorer::{api, counts, wait_for_count};
use crate::harness::{Broker, receive};
use crate::process::BrokerProcess;

const CONFIG: &str = r#"
[[queues]]
name = "input"
lock_duration = "1s"

[[queues]]
name = "output"

[[queues]]
name = "other"

[[queues]]
name = "closed"
status = "SendDisabled"
"#;

/// A count of the explorer's entity list, now.
async fn count(address: SocketAddr, path: &str, name: &str) -> u64 {
    let (_, entities) = api(address, "GET", "entities", None).await;
    counts(&entities, path)[name].as_u64().expect("a count")
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

async fn send(session: &mut fe2o3_amqp::session::SessionHandle<()>, to: &str, bodies: &[&str]) {
    let mut sender = Sender::attach(session, format!("plain-{to}"), to)
        .await
        .expect("sender");
    for body in bodies {
        sender.send(body.to_string()).await.expect("accepted");
    }
    sender.close().await.ok();
}

/// A sender whose messages go through `via` to `destination` (send-via).
async fn via_sender(
    session: &mut fe2o3_amqp::session::SessionHandle<()>,
    via: &str,
    destination: &str,
) -> Result<Sender, fe2o3_amqp::link::SenderAttachError> {
    let mut properties = Fields::new();
    properties.insert(
        Symbol::from("com.microsoft:transfer-destination-address"),
        Value::String(destination.to_string()),
    );
    Sender::builder()
        .name(format!("via-{via}-{destination}"))
        .target(via)
        .properties(properties)
        .attach(session)
        .await
}

/// A connection with a transaction controller and a receiver on `input` holding the first
/// of the messages it was sent (`work` unless given).
struct Work {
    connection: fe2o3_amqp::connection::ConnectionHandle<()>,
    session: fe2o3_amqp::session::SessionHandle<()>,
    controller: Controller,
    receiver: Receiver,
    delivery: fe2o3_amqp::Delivery<Body<Value>>,
}

impl Work {
    async fn start(broker: &Broker) -> Work {
        Work::start_with(broker, &["work"]).await
    }

    async fn start_with(broker: &Broker, bodies: &[&str]) -> Work {
        let (connection, mut session) = broker.connect().await;
        send(&mut session, "input", bodies).await;
        let controller = Controller::attach(&mut session, "controller")
            .await
            .expect("coordinator");
        let mut receiver = Receiver::attach(&mut session, "r", "input")
            .await
            .expect("receiver");
        let delivery = receive(&mut receiver).await;
        Work {
            connection,
            session,
            controller,
            receiver,
            delivery,
        }
    }
}

fn accepted(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Accepted(_))
}

#[tokio::test]
async fn sends_and_completions_land_together_at_commit() {
    // rule TXN-1
    let broker = Broker::start(CONFIG).await;
    let Work {
        mut connection,
        mut session,
        controller,
        mut receiver,
        delivery: first,
    } = Work::start_with(&broker, &["work-1", "work-2"]).await;
    let mut sender = Sender::attach(&mut session, "s", "input")
        .await
        .expect("sender");

    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    txn.accept(&mut receiver, &first)
        .await
        .expect("settled in the transaction");
    let outcome = txn.post(&mut sender, "result-1").await.expect("posted");
    assert!(accepted(&outcome), "{outcome:?}");
    let outcome = txn.post(&mut sender, "result-2").await.expect("posted");
    assert!(accepted(&outcome), "{outcome:?}");
    // Not there yet: the transfers were answered, so a send outside a transaction would
    // be counted by now; the completed message is still held.
    assert_eq!(count(broker.address, "input", "active").await, 2);

    txn.commit().await.expect("committed");
    // work-1 gone, work-2 still locked by the receiver's credit, the results there.
    assert_eq!(count(broker.address, "input", "active").await, 3);
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let delivery = receive(&mut receiver).await;
        bodies.push(text(&delivery));
        receiver.accept(&delivery).await.expect("completed");
    }
    bodies.sort();
    assert_eq!(bodies, ["result-1", "result-2", "work-2"]);
    wait_for_count(broker.address, "input", "active", 0).await;
    connection.close().await.ok();
}

#[tokio::test]
async fn a_rolled_back_transaction_leaves_no_trace() {
    // rule TXN-1: roll-back drops the sends; the completed message comes back after its
    // lock expires, counted as a delivery attempt (the lock was never settled)
    let broker = Broker::start(CONFIG).await;
    let Work {
        mut connection,
        mut session,
        controller,
        mut receiver,
        delivery,
    } = Work::start(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "output")
        .await
        .expect("sender");
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    let outcome = txn.post(&mut sender, "never").await.expect("posted");
    assert!(accepted(&outcome));
    txn.rollback().await.expect("rolled back");
    assert_eq!(count(broker.address, "output", "active").await, 0);

    // The complete was not part of anything: the lock is still held, and the message
    // comes back once it lapses (lock_duration 1 s).
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    txn.accept(&mut receiver, &delivery)
        .await
        .expect("settled in the transaction");
    txn.rollback().await.expect("rolled back");
    let again = receive(&mut receiver).await;
    assert_eq!(text(&again), "work");
    assert_eq!(
        again.message().header.as_ref().map(|h| h.delivery_count),
        Some(1)
    );
    receiver.accept(&again).await.expect("completed");
    wait_for_count(broker.address, "input", "active", 0).await;
    assert_eq!(count(broker.address, "output", "active").await, 0);
    connection.close().await.ok();
}

#[tokio::test]
async fn a_lost_lock_rolls_back_the_whole_transaction_at_commit() {
    // rule TXN-2
    let broker = Broker::start(CONFIG).await;
    let Work {
        mut connection,
        mut session,
        controller,
        mut receiver,
        delivery,
    } = Work::start(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "input")
        .await
        .expect("sender");
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    txn.accept(&mut receiver, &delivery)
        .await
        .expect("settled in the transaction");
    let outcome = txn.post(&mut sender, "result").await.expect("posted");
    assert!(accepted(&outcome));
    // The lock lapses (1 s) and the message is delivered again before the commit.
    let again = receive(&mut receiver).await;
    assert_eq!(text(&again), "work");
    let error = txn.commit().await.expect_err("the commit fails");
    let error = format!("{error:?}");
    assert!(error.contains("Rollback"), "{error}");
    assert!(error.contains("lock-lost"), "names the lost lock: {error}");
    // Nothing of it happened: the result was not sent, the message is still there.
    assert_eq!(count(broker.address, "input", "active").await, 1);
    receiver.accept(&again).await.expect("completed outside");
    wait_for_count(broker.address, "input", "active", 0).await;
    connection.close().await.ok();
}

#[tokio::test]
async fn a_transaction_stays_on_one_entity_unless_it_sends_via() {
    // rule TXN-3: a send to a second entity is refused and the transaction can only roll
    // back; with a via sender the same send goes through and lands at commit
    let broker = Broker::start(CONFIG).await;
    let Work {
        mut connection,
        mut session,
        controller,
        mut receiver,
        delivery,
    } = Work::start(&broker).await;
    // On a session of its own: a sender on the coordinator's session would send through
    // the session's first entity (cross-entity transactions, as the service infers them).
    let mut other_session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session");
    let mut direct = Sender::attach(&mut other_session, "direct", "output")
        .await
        .expect("sender");
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    txn.accept(&mut receiver, &delivery)
        .await
        .expect("settled in the transaction");
    let refused = txn.post(&mut direct, "cross-entity").await;
    let refused = format!("{refused:?}");
    assert!(refused.contains("spanning multiple"), "{refused}");
    let error = txn.commit().await.expect_err("doomed to roll back");
    assert!(format!("{error:?}").contains("Rollback"), "{error:?}");
    assert_eq!(count(broker.address, "output", "active").await, 0);

    // (fe2o3-amqp rolls a transaction whose commit failed back again when it is dropped
    // and reads that answer as the next declare's: a fresh controller link avoids it.)
    let controller = Controller::attach(&mut session, "controller-2")
        .await
        .expect("coordinator");
    // Through input (the entity received from) to output and other.
    let mut to_output = via_sender(&mut session, "input", "output")
        .await
        .expect("a via sender attaches");
    let mut to_other = via_sender(&mut session, "input", "other")
        .await
        .expect("a second via sender attaches");
    // The rolled-back complete left the lock held: the message comes back once it lapses.
    let delivery = receive(&mut receiver).await;
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    txn.accept(&mut receiver, &delivery)
        .await
        .expect("settled in the transaction");
    assert!(accepted(
        &txn.post(&mut to_output, "for-output")
            .await
            .expect("posted")
    ));
    assert!(accepted(
        &txn.post(&mut to_other, "for-other").await.expect("posted")
    ));
    assert_eq!(count(broker.address, "output", "active").await, 0);
    txn.commit().await.expect("committed");
    wait_for_count(broker.address, "output", "active", 1).await;
    wait_for_count(broker.address, "other", "active", 1).await;
    wait_for_count(broker.address, "input", "active", 0).await;
    let mut output = Receiver::attach(&mut session, "out", "output")
        .await
        .expect("receiver");
    let arrived = receive(&mut output).await;
    assert_eq!(text(&arrived), "for-output");
    output.accept(&arrived).await.expect("completed");
    connection.close().await.ok();
}

#[tokio::test]
async fn a_via_sender_needs_an_existing_destination_and_a_send_via_outside_a_transaction_goes_on() {
    // rule TXN-3
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let missing = match via_sender(&mut session, "input", "nowhere").await {
        Ok(_) => panic!("a via sender to a missing destination is refused"),
        Err(error) => format!("{error:?}"),
    };
    assert!(
        missing.contains("not-found") || missing.contains("NotFound"),
        "{missing}"
    );
    let mut sender = via_sender(&mut session, "input", "output")
        .await
        .expect("attaches");
    sender.send("straight on").await.expect("accepted");
    wait_for_count(broker.address, "output", "active", 1).await;
    assert_eq!(count(broker.address, "input", "active").await, 0);
    connection.close().await.ok();
}

#[tokio::test]
async fn transaction_ids_are_checked_and_the_limit_is_a_hundred_operations() {
    // rule TXN-4
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let controller = Controller::attach(&mut session, "controller")
        .await
        .expect("coordinator");
    let mut sender = Sender::attach(&mut session, "s", "output")
        .await
        .expect("sender");
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    for index in 0..100 {
        let outcome = txn
            .post(&mut sender, format!("m{index}"))
            .await
            .expect("posted");
        assert!(accepted(&outcome), "{index}: {outcome:?}");
    }
    let over = format!("{:?}", txn.post(&mut sender, "m100").await);
    assert!(over.contains("100"), "{over}");
    let error = txn.commit().await.expect_err("rolled back");
    assert!(format!("{error:?}").contains("Rollback"), "{error:?}");
    assert_eq!(count(broker.address, "output", "active").await, 0);

    // Another connection cannot use this connection's transaction.
    let controller = Controller::attach(&mut session, "controller-2")
        .await
        .expect("coordinator");
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    let (mut other_connection, mut other_session) = broker.connect().await;
    let other_controller = Controller::attach(&mut other_session, "controller")
        .await
        .expect("coordinator");
    let mut other_sender = Sender::attach(&mut other_session, "s", "output")
        .await
        .expect("sender");
    let foreign = Transaction::declare(&other_controller, None)
        .await
        .expect("declared");
    // Posting under this connection's id on the other connection: unknown there.
    let posted = txn.post(&mut other_sender, "foreign").await;
    let posted = format!("{posted:?}");
    assert!(posted.contains("UnknownId"), "{posted}");
    foreign.rollback().await.expect("rolled back");
    txn.rollback().await.expect("rolled back");
    other_connection.close().await.ok();
    connection.close().await.ok();
}

#[tokio::test]
async fn a_committed_transaction_survives_kill_9_whole_and_an_open_one_vanishes() {
    // rule TXN-1 with durable storage: the commit is one log record
    let data = std::env::temp_dir().join(format!(
        "ferrobus-txn-{}-{}",
        std::process::id(),
        ferrobus::encoding::ids::unique_u64()
    ));
    let data_argument = data.display().to_string();
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data_argument]);
    {
        let (_connection, mut session) = crate::crash::connect_to(broker.address)
            .await
            .expect("connects");
        send(&mut session, "input", &["work"]).await;
        let controller = Controller::attach(&mut session, "controller")
            .await
            .expect("coordinator");
        let mut receiver = Receiver::attach(&mut session, "r", "input")
            .await
            .expect("receiver");
        let delivery = receive(&mut receiver).await;
        let mut sender = Sender::attach(&mut session, "s", "output")
            .await
            .expect("sender");
        let mut via = via_sender(&mut session, "input", "other")
            .await
            .expect("via sender");
        let committed = Transaction::declare(&controller, None)
            .await
            .expect("declared");
        committed
            .accept(&mut receiver, &delivery)
            .await
            .expect("settled");
        for index in 0..40 {
            committed
                .post(&mut via, format!("committed-{index}"))
                .await
                .expect("posted");
        }
        committed.commit().await.expect("committed");
        let open = Transaction::declare(&controller, None)
            .await
            .expect("declared");
        for index in 0..40 {
            open.post(&mut sender, format!("open-{index}"))
                .await
                .expect("posted");
        }
        // kill -9 with the second transaction open.
        drop(broker);
    }
    let broker = BrokerProcess::start(CONFIG, &["--data-dir", &data_argument]);
    let (_connection, mut session) = crate::crash::connect_to(broker.address)
        .await
        .expect("connects");
    // All 40 committed messages arrive (moved on from input's outbox after the restart if
    // the kill came first), the completed message is gone, nothing of the open one exists.
    let mut other = Receiver::attach(&mut session, "other", "other")
        .await
        .expect("receiver");
    // Moving on from the outbox is at least once: one sent just before the kill may come
    // again.
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 40 {
        let delivery = receive(&mut other).await;
        seen.insert(text(&delivery));
        other.accept(&delivery).await.expect("completed");
    }
    assert!(
        seen.iter().all(|body| body.starts_with("committed-")),
        "{seen:?}"
    );
    assert_eq!(
        count(broker.address, "output", "active").await,
        0,
        "nothing of the open one"
    );
    assert_eq!(
        count(broker.address, "input", "active").await,
        0,
        "the completed message is gone"
    );
    wait_for_count(broker.address, "input", "transfer", 0).await;
    drop(broker);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn a_committed_send_via_the_destination_refuses_goes_to_the_transfer_dead_letter_queue() {
    // rule TXN-3 with FWD-3: the via entity keeps what its destination refuses
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let controller = Controller::attach(&mut session, "controller")
        .await
        .expect("coordinator");
    let mut via = via_sender(&mut session, "input", "closed")
        .await
        .expect("attaches: the destination exists");
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    assert!(accepted(
        &txn.post(&mut via, "refused later").await.expect("posted")
    ));
    txn.commit()
        .await
        .expect("committed: the via entity has it");
    wait_for_count(broker.address, "input", "transfer_dead_letter", 1).await;
    let mut dead = Receiver::attach(&mut session, "tdlq", "input/$Transfer/$DeadLetterQueue")
        .await
        .expect("receiver");
    let delivery = receive(&mut dead).await;
    assert_eq!(text(&delivery), "refused later");
    let reason = crate::harness::property(&delivery, "DeadLetterReason");
    assert!(
        format!("{reason:?}").contains("TransferFailed"),
        "{reason:?}"
    );
    dead.accept(&delivery).await.expect("completed");
    connection.close().await.ok();
}

#[tokio::test]
async fn a_dead_letter_resubmitted_in_a_transaction_leaves_the_dlq_and_returns_at_commit() {
    // rule TXN-1 on the dead-letter queue (the DLQ supports transactions): receive from
    // `input/$DeadLetterQueue`, complete it and send it back to `input` in one transaction
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    send(&mut session, "input", &["poisoned"]).await;
    let mut receiver = Receiver::attach(&mut session, "r", "input")
        .await
        .expect("receiver");
    let delivery = receive(&mut receiver).await;
    receiver
        .reject(&delivery, None)
        .await
        .expect("dead-lettered");
    wait_for_count(broker.address, "input", "dead_letter", 1).await;
    let controller = Controller::attach(&mut session, "controller")
        .await
        .expect("coordinator");
    let mut dead = Receiver::attach(&mut session, "dlq", "input/$DeadLetterQueue")
        .await
        .expect("receiver");
    let letter = receive(&mut dead).await;
    let mut sender = Sender::attach(&mut session, "back", "input")
        .await
        .expect("sender");
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    txn.accept(&mut dead, &letter)
        .await
        .expect("settled in the transaction");
    assert!(accepted(
        &txn.post(&mut sender, text(&letter)).await.expect("posted")
    ));
    assert_eq!(count(broker.address, "input", "dead_letter").await, 1);
    txn.commit().await.expect("committed");
    assert_eq!(count(broker.address, "input", "dead_letter").await, 0);
    let again = receive(&mut receiver).await;
    assert_eq!(text(&again), "poisoned");
    receiver.accept(&again).await.expect("completed");
    connection.close().await.ok();
}
