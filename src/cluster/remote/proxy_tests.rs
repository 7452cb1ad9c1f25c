//! Requests and replies through the proxy, a real entity actor behind the server: sends
//! and their sequence numbers, an entity the other node does not know, a command that does
//! not cross, and a busy entity that holds up only its own commands.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::timeout;

use super::test_support::{Client, body, connect, next, spawn_entity};
use crate::broker::entity::{BatchedSend, Command, EntityHandle, Notification, Reply, RequestId};
use crate::broker::types::{EntityError, ReceiverId, SequenceNumber};

#[tokio::test]
async fn sends_through_the_proxy_get_their_sequence_numbers() {
    let (proxy, _serving) = connect(vec![spawn_entity("orders", |_| {})]);
    let mut client = Client::new(proxy.handle("orders"));
    assert_eq!(client.send(vec![body("a"), body("b")]).await, [1, 2]);
    assert_eq!(client.send(vec![body("c")]).await, [3]);

    // A batch of sends: one notification answers those that wait.
    let (sink, mut replies) = mpsc::unbounded_channel();
    let sends = vec![
        BatchedSend {
            messages: vec![body("d")].into(),
            numbers: Default::default(),
            request: Some(RequestId(7)),
        },
        BatchedSend {
            messages: vec![body("e")].into(),
            numbers: Default::default(),
            request: None,
        },
        BatchedSend {
            messages: vec![body("f")].into(),
            numbers: Default::default(),
            request: Some(RequestId(8)),
        },
    ];
    client.command(Command::SendBatch { sends, sink }).await;
    match next(&mut replies).await {
        Notification::Replies { replies } => {
            let got: Vec<_> = replies
                .into_iter()
                .map(|(request, result)| match result {
                    Ok(Reply::SequenceNumbers(numbers)) => (request.0, numbers.to_vec()),
                    other => panic!("batch: {other:?}"),
                })
                .collect();
            assert_eq!(
                got,
                [(7, vec![SequenceNumber(4)]), (8, vec![SequenceNumber(6)])]
            );
        }
        other => panic!("expected the batch's replies, got {other:?}"),
    }
    let counts = client.describe().await;
    assert_eq!(counts.active, 6);
    assert_eq!(counts.totals.sent, 6);
    let bodies: Vec<Vec<u8>> = client
        .peek()
        .await
        .iter()
        .map(|d| d.message.body().to_vec())
        .collect();
    assert_eq!(
        bodies,
        [b"a", b"b", b"c", b"d", b"e", b"f"].map(|b| b.to_vec())
    );
    assert!(
        proxy.handle("orders").same_entity(&client.handle),
        "one handle per path"
    );
}

#[tokio::test]
async fn an_entity_the_other_node_does_not_know_is_not_found() {
    let (proxy, _serving) = connect(vec![spawn_entity("orders", |_| {})]);
    let mut client = Client::new(proxy.handle("missing"));
    let described = client.request(|reply| Command::Describe { reply }).await;
    assert_eq!(
        described.err(),
        Some(EntityError::NotFound("missing".to_string()))
    );
    let mut deliveries = client.attach(ReceiverId(1), 10).await;
    assert!(
        matches!(next(&mut deliveries).await, Notification::EntityDeleted { receiver } if receiver == ReceiverId(1)),
        "a receiver of an unknown entity is told it is gone"
    );
    // The known entity on the same stream still answers.
    let mut orders = Client::new(proxy.handle("orders"));
    assert_eq!(orders.send(vec![body("x")]).await, [1]);
}

#[tokio::test]
async fn a_staged_copy_is_refused_by_name() {
    let (proxy, _serving) = connect(vec![spawn_entity("topic/Subscriptions/all", |_| {})]);
    let handle = proxy.handle("topic/Subscriptions/all");
    let (sink, mut replies) = mpsc::unbounded_channel();
    let (staged, _) = mpsc::unbounded_channel();
    handle
        .send(Command::Stage {
            sends: vec![BatchedSend {
                messages: vec![body("copy")].into(),
                numbers: Default::default(),
                request: Some(RequestId(4)),
            }],
            dead_letters: Vec::new(),
            sink,
            staged,
        })
        .await
        .expect("handle open");
    match next(&mut replies).await {
        Notification::Replies { replies } => {
            assert_eq!(replies.len(), 1);
            assert_eq!(replies[0].0, RequestId(4));
            match &replies[0].1 {
                Err(EntityError::NotAllowed(text)) => assert!(text.contains("Stage"), "{text}"),
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        other => panic!("expected the refusal, got {other:?}"),
    }
    // The stream goes on.
    let mut client = Client::new(handle);
    assert_eq!(client.describe().await.active, 0);
}

#[tokio::test]
async fn a_busy_entity_holds_up_its_own_commands_only() {
    // An entity whose inbox is full and never drained.
    let (commands, _queued) = mpsc::channel(1);
    let busy = EntityHandle::from_channel("busy", commands);
    let (proxy, _serving) = connect(vec![busy, spawn_entity("orders", |_| {})]);
    let busy = proxy.handle("busy");
    let filling = tokio::spawn(async move {
        let mut accepted = 0usize;
        loop {
            let command = Command::Forwarded {
                sequence_number: SequenceNumber(1),
            };
            match timeout(Duration::from_millis(500), busy.send(command)).await {
                Ok(Ok(())) => accepted += 1,
                Ok(Err(error)) => panic!("busy: {error}"),
                Err(_) => return accepted,
            }
        }
    });
    let accepted = timeout(Duration::from_secs(30), filling)
        .await
        .expect("the busy handle blocks in time")
        .expect("task");
    // Its handle's channel, the window on the stream and the actor's one slot: bounded.
    let most = super::COMMAND_CAPACITY + super::WINDOW + 2;
    assert!(
        (super::COMMAND_CAPACITY..=most).contains(&accepted),
        "{accepted} commands taken before the sender waited"
    );
    // Another entity on the same stream is not held up.
    let mut orders = Client::new(proxy.handle("orders"));
    assert_eq!(orders.send(vec![body("x")]).await, [1]);
}
