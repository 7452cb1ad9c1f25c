//! What fails and what comes back: a lost stream fails what waits, a malformed frame ends
//! the stream, and a proxy that connects reaches the next node through the same handles.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::test_support::{Client, WAIT, connect, next};
use super::{Proxy, RemoteError, Target, serve};
use crate::amqp::errors;
use crate::broker::entity::{Command, EntityHandle, Notification, Reply, ReplyTo, RequestId};
use crate::broker::topic::{TopicCommand, TopicHandle};
use crate::broker::types::{EntityError, ReceiveMode, ReceiverId, SubQueue};

fn timed_out(result: &Result<Reply, EntityError>) -> bool {
    matches!(result, Err(error @ EntityError::Timeout(_)) if errors::entity_failure(error).condition == errors::TIMEOUT)
}

#[tokio::test]
async fn a_lost_stream_fails_what_waits_with_a_retryable_error() {
    // An entity that never answers: its commands wait.
    let (commands, mut queued) = mpsc::channel(16);
    let stuck = EntityHandle::from_channel("stuck", commands);
    let (proxy, serving) = connect(vec![stuck]);
    let mut client = Client::new(proxy.handle("stuck"));
    let reply = client.reply_to();
    client.command(Command::Describe { reply }).await;
    let (session_sink, mut session) = mpsc::unbounded_channel();
    client
        .command(Command::AttachSessionReceiver {
            receiver: ReceiverId(3),
            mode: ReceiveMode::PeekLock,
            session_id: None,
            wait: Duration::from_secs(60),
            sink: session_sink,
        })
        .await;
    let (receiver_sink, mut plain) = mpsc::unbounded_channel();
    client
        .command(Command::AttachReceiver {
            receiver: ReceiverId(4),
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::PeekLock,
            sink: receiver_sink,
        })
        .await;
    // All three reached the entity's inbox: they wait there.
    for _ in 0..3 {
        timeout(WAIT, queued.recv())
            .await
            .expect("in time")
            .expect("a command");
    }

    serving.abort();
    let _ = serving.await;
    match next(&mut client.replies).await {
        Notification::Reply { request, result } => {
            assert_eq!(request, RequestId(1));
            assert!(timed_out(&result), "{result:?}");
        }
        other => panic!("expected the failed reply, got {other:?}"),
    }
    match next(&mut session).await {
        Notification::SessionRefused { receiver, error } => {
            assert_eq!(receiver, ReceiverId(3));
            assert!(matches!(error, EntityError::Timeout(_)), "{error:?}");
        }
        other => panic!("expected the refused session, got {other:?}"),
    }
    // A plain receiver is told its entity moved (detach-forced, retried), not deleted.
    match next(&mut plain).await {
        Notification::Moved { receiver } => assert_eq!(receiver, ReceiverId(4)),
        other => panic!("expected the receiver moved, got {other:?}"),
    }
    assert!(proxy.is_closed());
    // A receiver attached after the loss is told the same.
    let (late_sink, mut late) = mpsc::unbounded_channel();
    client
        .command(Command::AttachReceiver {
            receiver: ReceiverId(5),
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::PeekLock,
            sink: late_sink,
        })
        .await;
    assert!(
        matches!(next(&mut late).await, Notification::Moved { receiver } if receiver == ReceiverId(5))
    );
    // Later commands fail the same way, on this handle and on new ones.
    assert!(timed_out(
        &client.request(|reply| Command::Describe { reply }).await
    ));
    let mut later = Client::new(proxy.handle("other"));
    assert!(timed_out(
        &later.request(|reply| Command::Describe { reply }).await
    ));
}

#[tokio::test]
async fn a_malformed_frame_ends_the_stream_without_a_panic() {
    use tokio::io::AsyncWriteExt;
    let (mut near, far) = tokio::io::duplex(1024);
    let serving = tokio::spawn(serve(far, |_| None::<Target>));
    near.write_all(&[0, 0, 0, 3, 99, 1, 2]).await.unwrap();
    let result = timeout(WAIT, serving)
        .await
        .expect("in time")
        .expect("task");
    assert!(
        matches!(result, Err(RemoteError::Malformed(_))),
        "{result:?}"
    );

    let (mut near, far) = tokio::io::duplex(1024);
    let serving = tokio::spawn(serve(far, |_| None::<Target>));
    near.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    let result = timeout(WAIT, serving)
        .await
        .expect("in time")
        .expect("task");
    assert!(
        matches!(result, Err(RemoteError::FrameTooLarge(_))),
        "{result:?}"
    );

    // A client reading garbage from its server fails what waits.
    let (near, mut far) = tokio::io::duplex(1024);
    let proxy = Proxy::start(near);
    let mut client = Client::new(proxy.handle("orders"));
    let reply = client.reply_to();
    client.command(Command::Describe { reply }).await;
    far.write_all(&[0, 0, 0, 2, 3, 0xff]).await.unwrap();
    match next(&mut client.replies).await {
        Notification::Reply { result, .. } => assert!(timed_out(&result), "{result:?}"),
        other => panic!("expected the failed reply, got {other:?}"),
    }
}

/// The serving tasks of a proxy that connects, in the order it connected.
type Serving = Arc<Mutex<Vec<JoinHandle<Result<(), RemoteError>>>>>;

/// A proxy that connects, and the servers it reaches in turn: each `connect` serves the
/// next entity of `servers` as `orders` on a new duplex stream (an error when none is
/// left); the serving tasks, in order, and the number of attempts are the test's.
fn connecting(servers: Vec<EntityHandle>) -> (Proxy, Serving, Arc<AtomicUsize>) {
    let servers = Arc::new(Mutex::new(VecDeque::from(servers)));
    let serving = Arc::new(Mutex::new(Vec::new()));
    let attempts = Arc::new(AtomicUsize::new(0));
    let proxy = {
        let serving = serving.clone();
        let attempts = attempts.clone();
        Proxy::connecting(move || {
            attempts.fetch_add(1, Ordering::SeqCst);
            let next = servers.lock().expect("test").pop_front();
            let serving = serving.clone();
            Box::pin(async move {
                let entity = next.ok_or_else(|| "no server left".to_string())?;
                let (near, far) = tokio::io::duplex(64 * 1024);
                let task = tokio::spawn(serve(far, move |path| {
                    (path == "orders").then(|| entity.clone())
                }));
                serving.lock().expect("test").push(task);
                Ok(near)
            })
        })
    };
    (proxy, serving, attempts)
}

/// The next command an entity's channel gets.
async fn arrives(queued: &mut mpsc::Receiver<Command>) -> Command {
    timeout(WAIT, queued.recv())
        .await
        .expect("a command in time")
        .expect("the channel open")
}

fn answer(command: Command) {
    match command {
        Command::Describe { reply } => reply.send(Ok(Reply::Done)),
        other => panic!("expected a describe, got {other:?}"),
    }
}

#[tokio::test]
async fn a_connecting_proxy_reaches_the_next_node_through_the_same_handles() {
    let (first_commands, mut first) = mpsc::channel(16);
    let (second_commands, mut second) = mpsc::channel(16);
    let (proxy, serving, attempts) = connecting(vec![
        EntityHandle::from_channel("orders", first_commands),
        EntityHandle::from_channel("orders", second_commands),
    ]);
    assert!(proxy.is_closed(), "no stream before a command needs one");
    let mut client = Client::new(proxy.handle("orders"));

    // The first command opens a stream to the first node.
    let reply = client.reply_to();
    client.command(Command::Describe { reply }).await;
    answer(arrives(&mut first).await);
    assert!(matches!(
        next(&mut client.replies).await,
        Notification::Reply {
            result: Ok(Reply::Done),
            ..
        }
    ));
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert!(!proxy.is_closed());

    // A request and a receiver wait there when that stream is lost.
    let reply = client.reply_to();
    let waiting = reply.request;
    client.command(Command::Describe { reply }).await;
    let (receiver_sink, mut receiver) = mpsc::unbounded_channel();
    client
        .command(Command::AttachReceiver {
            receiver: ReceiverId(3),
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::PeekLock,
            sink: receiver_sink,
        })
        .await;
    let _unanswered = arrives(&mut first).await;
    assert!(matches!(
        arrives(&mut first).await,
        Command::AttachReceiver { .. }
    ));
    let lost = serving.lock().expect("test").remove(0);
    lost.abort();
    let _ = lost.await;
    match next(&mut client.replies).await {
        Notification::Reply { request, result } => {
            assert_eq!(request, waiting);
            assert!(timed_out(&result), "{result:?}");
        }
        other => panic!("expected the failed reply, got {other:?}"),
    }
    assert!(
        matches!(next(&mut receiver).await, Notification::Moved { receiver } if receiver == ReceiverId(3))
    );
    assert!(proxy.is_closed());

    // The same handle's next command opens a stream to the second node.
    let reply = client.reply_to();
    client.command(Command::Describe { reply }).await;
    answer(arrives(&mut second).await);
    assert!(matches!(
        next(&mut client.replies).await,
        Notification::Reply {
            result: Ok(Reply::Done),
            ..
        }
    ));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert!(
        first.try_recv().is_err(),
        "nothing more went to the first node"
    );

    // A reset ends a stream that still looks alive: what waits is answered at once.
    let reply = client.reply_to();
    client.command(Command::Describe { reply }).await;
    let _unanswered = arrives(&mut second).await;
    proxy.reset();
    match next(&mut client.replies).await {
        Notification::Reply { result, .. } => assert!(timed_out(&result), "{result:?}"),
        other => panic!("expected the failed reply, got {other:?}"),
    }

    // No node left: the command that asked is answered with why, and so is the next one
    // at once, without another attempt; after the back-off, one more attempt.
    for _ in 0..2 {
        match client.request(|reply| Command::Describe { reply }).await {
            Err(EntityError::Timeout(text)) => assert!(text.contains("no server left"), "{text}"),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "one attempt per burst");
    tokio::time::sleep(super::RECONNECT_BACKOFF + Duration::from_millis(50)).await;
    assert!(timed_out(
        &client.request(|reply| Command::Describe { reply }).await
    ));
    assert_eq!(attempts.load(Ordering::SeqCst), 4);

    // Closed for good: no more attempts.
    proxy.close();
    tokio::time::sleep(super::RECONNECT_BACKOFF + Duration::from_millis(50)).await;
    match client.request(|reply| Command::Describe { reply }).await {
        Err(EntityError::Timeout(text)) => assert!(text.contains("closed"), "{text}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_topic_handle_of_a_connecting_proxy_follows_the_node_too() {
    let (first_commands, mut first) = mpsc::channel(16);
    let (second_commands, mut second) = mpsc::channel(16);
    let servers = Arc::new(Mutex::new(VecDeque::from([
        TopicHandle::from_channel("events", first_commands),
        TopicHandle::from_channel("events", second_commands),
    ])));
    let proxy = Proxy::connecting(move || {
        let next = servers.lock().expect("test").pop_front();
        Box::pin(async move {
            let topic = next.ok_or_else(|| "no server left".to_string())?;
            let (near, far) = tokio::io::duplex(64 * 1024);
            tokio::spawn(serve(far, move |_: &str| {
                Some(Target::Topic(topic.clone()))
            }));
            Ok(near)
        })
    });
    let topic = proxy.topic_handle("events");
    for queued in [&mut first, &mut second] {
        let (reply, mut replies) = ReplyTo::oneshot();
        topic
            .send(TopicCommand::Describe { reply })
            .await
            .expect("handle open");
        match timeout(WAIT, queued.recv()).await.expect("in time") {
            Some(TopicCommand::Describe { reply }) => reply.send(Ok(Reply::Done)),
            other => panic!("expected a describe, got {other:?}"),
        }
        assert!(matches!(
            next(&mut replies).await,
            Notification::Reply {
                result: Ok(Reply::Done),
                ..
            }
        ));
        proxy.reset();
    }
}
