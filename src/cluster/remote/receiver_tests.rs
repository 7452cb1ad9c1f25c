//! Receivers and sessions through the proxy: a peek-lock receiver's deliveries and
//! settlements, a session receiver's session and state, and a client sink that closes.

use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver};

use super::test_support::{Client, START, body, connect, in_session, next, spawn_entity};
use crate::broker::entity::{Command, Delivery, Notification, Reply, SessionOperation};
use crate::broker::types::{
    EntityError, PropertyValue, ReceiveMode, ReceiverId, SequenceNumber, Settlement,
};

async fn delivery(notifications: &mut UnboundedReceiver<Notification>) -> Delivery {
    match next(notifications).await {
        Notification::Deliver(delivery) => delivery,
        other => panic!("expected a delivery, got {other:?}"),
    }
}

#[tokio::test]
async fn a_peek_lock_receiver_receives_completes_abandons_and_renews() {
    let (proxy, _serving) = connect(vec![spawn_entity("orders", |_| {})]);
    let mut client = Client::new(proxy.handle("orders"));
    client
        .send(vec![body("one"), body("two"), body("three")])
        .await;
    let receiver = ReceiverId(1);
    let mut deliveries = client.attach(receiver, 3).await;
    let mut received = Vec::new();
    for expected in 1..=3 {
        let delivery = delivery(&mut deliveries).await;
        assert_eq!(delivery.receiver, Some(receiver));
        assert_eq!(delivery.sequence_number, SequenceNumber(expected));
        assert_eq!(delivery.delivery_count(), 0);
        received.push(delivery.lock.expect("peek-lock"));
    }

    let completed = client
        .request(|reply| Command::Settle {
            token: received[0].token,
            settlement: Settlement::Complete,
            reply: Some(reply),
        })
        .await;
    assert!(matches!(completed, Ok(Reply::Done)), "{completed:?}");
    let abandoned = client
        .request(|reply| Command::Settle {
            token: received[1].token,
            settlement: Settlement::Abandon {
                properties: vec![("why".to_string(), PropertyValue::String("later".into()))],
            },
            reply: Some(reply),
        })
        .await;
    assert!(matches!(abandoned, Ok(Reply::Done)), "{abandoned:?}");
    let again = client
        .request(|reply| Command::Settle {
            token: received[0].token,
            settlement: Settlement::Complete,
            reply: Some(reply),
        })
        .await;
    assert_eq!(
        again.err(),
        Some(EntityError::LockLost),
        "a lock settles once"
    );

    client
        .command(Command::Credit {
            receiver,
            delivery_count: Some(3),
            link_credit: 1,
            drain: false,
        })
        .await;
    let redelivered = delivery(&mut deliveries).await;
    assert_eq!(redelivered.sequence_number, SequenceNumber(2));
    assert_eq!(redelivered.delivery_count(), 1, "the abandon counted");

    let renewed = client
        .request(|reply| Command::RenewLocks {
            tokens: vec![received[2].token],
            reply,
        })
        .await;
    match renewed {
        Ok(Reply::Expirations(until)) => {
            assert_eq!(until.len(), 1);
            assert!(
                until[0] >= received[2].until,
                "{until:?} vs {:?}",
                received[2].until
            );
        }
        other => panic!("renew: {other:?}"),
    }

    let peeked: Vec<i64> = client
        .peek()
        .await
        .iter()
        .map(|d| d.sequence_number.0)
        .collect();
    assert_eq!(peeked, [2, 3], "the completed message is gone");
    let counts = client.describe().await;
    assert_eq!(
        (
            counts.active,
            counts.totals.completed,
            counts.totals.abandoned
        ),
        (2, 1, 1)
    );
    assert!(counts.kept_alive, "a receiver is attached");
}

#[tokio::test]
async fn a_session_receiver_holds_its_session_and_its_state() {
    let (proxy, _serving) = connect(vec![spawn_entity("sessions", |settings| {
        settings.requires_session = true
    })]);
    let mut client = Client::new(proxy.handle("sessions"));
    client.send(vec![in_session("hello", "s1")]).await;

    let (sink, mut notifications) = mpsc::unbounded_channel();
    let receiver = ReceiverId(5);
    client
        .command(Command::AttachSessionReceiver {
            receiver,
            mode: ReceiveMode::PeekLock,
            session_id: Some("s1".to_string()),
            wait: Duration::ZERO,
            sink,
        })
        .await;
    match next(&mut notifications).await {
        Notification::SessionAccepted {
            receiver: accepted,
            session_id,
            locked_until,
        } => {
            assert_eq!((accepted, session_id.as_str()), (receiver, "s1"));
            assert!(locked_until > START);
        }
        other => panic!("expected the session, got {other:?}"),
    }
    client
        .command(Command::Credit {
            receiver,
            delivery_count: Some(0),
            link_credit: 1,
            drain: false,
        })
        .await;
    let delivered = delivery(&mut notifications).await;
    assert_eq!(delivered.message.system().session_id(), Some("s1"));

    let set = client
        .request(|reply| Command::Session {
            session_id: "s1".to_string(),
            operation: SessionOperation::SetState(Some(b"state".to_vec())),
            reply,
        })
        .await;
    assert!(matches!(set, Ok(Reply::Done)), "{set:?}");
    let got = client
        .request(|reply| Command::Session {
            session_id: "s1".to_string(),
            operation: SessionOperation::GetState,
            reply,
        })
        .await;
    match got {
        Ok(Reply::SessionState(Some(state))) => assert_eq!(state, b"state"),
        other => panic!("get state: {other:?}"),
    }
    let listed = client
        .request(|reply| Command::ListSessions {
            last_updated: i64::MIN,
            skip: 0,
            top: 10,
            reply,
        })
        .await;
    match listed {
        Ok(Reply::Sessions(sessions)) => assert_eq!(sessions, ["s1"]),
        other => panic!("list sessions: {other:?}"),
    }
    let renewed = client
        .request(|reply| Command::Session {
            session_id: "s1".to_string(),
            operation: SessionOperation::RenewLock,
            reply,
        })
        .await;
    assert!(matches!(renewed, Ok(Reply::Expirations(_))), "{renewed:?}");
}

#[tokio::test]
async fn a_closed_client_sink_is_closed_for_the_entity_too() {
    let (proxy, _serving) = connect(vec![spawn_entity("orders", |_| {})]);
    let mut client = Client::new(proxy.handle("orders"));
    client.send(vec![body("one")]).await;
    let mut gone = client.attach(ReceiverId(1), 10).await;
    let first = delivery(&mut gone).await;
    assert_eq!(first.sequence_number, SequenceNumber(1));
    assert!(client.describe().await.kept_alive, "a receiver is attached");

    // The connection goes away. The next sink the proxy names makes it look for closed
    // ones (a request from another connection), so the server drops its side first.
    drop(gone);
    let mut other = Client::new(proxy.handle("orders"));
    other.describe().await;

    // The entity finds the receiver's sink closed on its next delivery: the message comes
    // back (no delivery counted) and the receiver is forgotten.
    other.send(vec![body("two")]).await;
    let counts = other.describe().await;
    assert!(!counts.kept_alive, "the receiver is forgotten: {counts:?}");
    assert_eq!(counts.active, 2);
    let mut deliveries = other.attach(ReceiverId(2), 10).await;
    let second = delivery(&mut deliveries).await;
    assert_eq!(
        second.sequence_number,
        SequenceNumber(2),
        "the first stays locked"
    );
    assert_eq!(
        second.delivery_count(),
        0,
        "a message given back is not counted"
    );
}
