//! The proxy and the server on the two ends of an in-memory stream, with a real entity
//! actor behind the server: what a connection does through the proxy's handle, what it
//! gets back, and what happens when sinks close and the stream ends. Then round trips of
//! every command and notification the codec carries.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::codec::{self, ClientFrame, ServerFrame, SinkIds};
use super::test_support::{
    Table, WAIT, assert_comes_back, body, decode_client_frame, next, reply_to,
};
use super::{Proxy, RemoteError, Target, serve};
use crate::amqp::errors;
use crate::broker::entity::settings::EntitySettings;
use crate::broker::entity::state::{ForwardKey, Lock};
use crate::broker::entity::{
    BatchedSend, Command, Delivery, EntityCounts, EntityHandle, Notification, NotificationSender,
    Record, Reply, ReplyTo, RequestId, SessionOperation, TransactionWork, actor,
};
use crate::broker::message::{Message, SystemField};
use crate::broker::topic::{TopicCommand, TopicHandle};
use crate::broker::types::{
    EntityError, LockToken, MessageState, PropertyValue, ReceiveMode, ReceiverId, SequenceNumber,
    Settlement, SubQueue, Timestamp,
};
use crate::clock::Clock;

const START: Timestamp = Timestamp(1_700_000_000_000);

pub(super) fn spawn_entity(
    path: &str,
    configure: impl FnOnce(&mut EntitySettings),
) -> EntityHandle {
    let mut settings = EntitySettings::with_defaults(path);
    configure(&mut settings);
    let (idle, _) = mpsc::unbounded_channel();
    actor::spawn(
        settings,
        Clock::starting_at(START),
        crate::broker::leadership::Leadership::SINGLE_NODE,
        idle,
        None,
        Default::default(),
        None,
        &Default::default(),
    )
}

/// A proxy and a server on the two ends of a duplex stream; the server knows `entities`.
fn connect(entities: Vec<EntityHandle>) -> (Proxy, JoinHandle<Result<(), RemoteError>>) {
    let (near, far) = tokio::io::duplex(64 * 1024);
    let table: HashMap<String, EntityHandle> = entities
        .into_iter()
        .map(|handle| (handle.path.to_string(), handle))
        .collect();
    let serving = tokio::spawn(serve(far, move |path| {
        table.get(path).cloned().map(Target::Entity)
    }));
    (Proxy::start(near), serving)
}

/// A connection's view: a handle and the sink its requests are answered on.
struct Client {
    handle: EntityHandle,
    sink: NotificationSender,
    replies: UnboundedReceiver<Notification>,
    next_request: u64,
}

impl Client {
    fn new(handle: EntityHandle) -> Client {
        let (sink, replies) = mpsc::unbounded_channel();
        Client {
            handle,
            sink,
            replies,
            next_request: 0,
        }
    }

    fn reply_to(&mut self) -> ReplyTo {
        self.next_request += 1;
        ReplyTo {
            sink: self.sink.clone(),
            request: RequestId(self.next_request),
        }
    }

    async fn request(
        &mut self,
        command: impl FnOnce(ReplyTo) -> Command,
    ) -> Result<Reply, EntityError> {
        let reply = self.reply_to();
        let request = reply.request;
        self.handle.send(command(reply)).await.expect("handle open");
        match next(&mut self.replies).await {
            Notification::Reply {
                request: answered,
                result,
            } if answered == request => result,
            other => panic!("expected the reply to {request:?}, got {other:?}"),
        }
    }

    async fn command(&self, command: Command) {
        self.handle.send(command).await.expect("handle open");
    }

    async fn send(&mut self, messages: Vec<Message>) -> Vec<i64> {
        match self
            .request(|reply| Command::Send {
                messages: messages.into(),
                reply: Some(reply),
            })
            .await
        {
            Ok(Reply::SequenceNumbers(numbers)) => numbers.iter().map(|n| n.0).collect(),
            other => panic!("send: {other:?}"),
        }
    }

    async fn describe(&mut self) -> EntityCounts {
        match self.request(|reply| Command::Describe { reply }).await {
            Ok(Reply::Counts(counts)) => *counts,
            other => panic!("describe: {other:?}"),
        }
    }

    async fn peek(&mut self) -> Vec<Delivery> {
        match self
            .request(|reply| Command::Peek {
                sub_queue: SubQueue::Main,
                from: SequenceNumber(1),
                count: 100,
                session_id: None,
                reply,
            })
            .await
        {
            Ok(Reply::Messages(messages)) => messages,
            other => panic!("peek: {other:?}"),
        }
    }

    /// Attaches a peek-lock receiver with `credit`; returns its sink's receiving end.
    async fn attach(&self, receiver: ReceiverId, credit: u32) -> UnboundedReceiver<Notification> {
        let (sink, deliveries) = mpsc::unbounded_channel();
        self.command(Command::AttachReceiver {
            receiver,
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::PeekLock,
            sink,
        })
        .await;
        self.command(Command::Credit {
            receiver,
            delivery_count: Some(0),
            link_credit: credit,
            drain: false,
        })
        .await;
        deliveries
    }
}

async fn delivery(notifications: &mut UnboundedReceiver<Notification>) -> Delivery {
    match next(notifications).await {
        Notification::Deliver(delivery) => delivery,
        other => panic!("expected a delivery, got {other:?}"),
    }
}

fn in_session(text: &str, session: &str) -> Message {
    let mut message = body(text);
    let system = message.system().with(SystemField::SessionId, Some(session));
    message.set_system(system);
    message
}

fn timed_out(result: &Result<Reply, EntityError>) -> bool {
    matches!(result, Err(error @ EntityError::Timeout(_)) if errors::entity_failure(error).condition == errors::TIMEOUT)
}

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

// ---- codec round trips ----

/// Encodes, decodes and encodes again: the same bytes and the same Debug text.
fn round_trip_command(command: Command) {
    let mut sinks = Table::default();
    let frame = codec::encode_command("queue/path", &command, &mut sinks).expect("encodes");
    let decoded = decode_client_frame(&frame[4..]);
    let ClientFrame::Command {
        path,
        command: back,
    } = decoded
    else {
        panic!("a command frame");
    };
    assert_eq!(path, "queue/path");
    let again = codec::encode_command("queue/path", &back, &mut Table::default()).expect("encodes");
    assert_comes_back(&command, &back, &frame, &again);
    assert_eq!(
        u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
        frame.len() - 4
    );
}

fn round_trip_notification(notification: Notification) {
    let frame = codec::encode_notification(9, &notification).expect("encodes");
    let ServerFrame::Notification {
        sink,
        notification: back,
    } = codec::decode_server_frame(&frame[4..]).expect("decodes")
    else {
        panic!("a notification frame");
    };
    assert_eq!(sink, 9);
    assert_eq!(format!("{back:?}"), format!("{notification:?}"));
    assert_eq!(
        codec::encode_notification(9, &back).expect("encodes"),
        frame
    );
}

fn rich_message() -> Message {
    let mut message = in_session("payload", "session-1");
    let mut header = message.header();
    header.durable = true;
    header.priority = 7;
    header.time_to_live = Some(Duration::from_secs(90));
    message.set_header(header);
    message.set_hop_count(2);
    message.edit_extras(|extras| {
        extras.scheduled_enqueue_time = Some(Timestamp(1_800_000_000_000));
        extras.original_sequence_number = Some(41);
        extras.user_properties = vec![("color".into(), PropertyValue::String("red".into()))];
        extras.dead_letter_source = Some("source".into());
        extras.extra_properties = vec![("n".into(), PropertyValue::Long(-3))];
        extras.topic_sequence = Some((SequenceNumber(12), Timestamp(1_700_000_000_123)));
        extras.partition_key = Some("key".into());
    });
    message
}

fn record() -> Record {
    let mut record = Record::new(
        rich_message(),
        SequenceNumber(12),
        Timestamp(1_700_000_000_123),
        Some(Duration::from_secs(60)),
    );
    record.set_delivery_count(3);
    record.set_state(MessageState::Deferred);
    record.set_expires(true);
    record
}

fn lock() -> Lock {
    Lock {
        token: LockToken([7; 16]),
        until: Timestamp(1_700_000_030_000),
    }
}

fn settlements() -> Vec<Settlement> {
    vec![
        Settlement::Complete,
        Settlement::Abandon {
            properties: vec![("a".into(), PropertyValue::Bool(true))],
        },
        Settlement::Defer {
            properties: vec![("d".into(), PropertyValue::Double(1.5))],
        },
        Settlement::DeadLetter {
            reason: Some("reason".into()),
            description: None,
            properties: vec![("u".into(), PropertyValue::Uuid([1; 16]))],
        },
        Settlement::Release,
    ]
}

#[test]
fn every_command_that_crosses_comes_back_the_same() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let (other, _keep_other) = mpsc::unbounded_channel();
    let mut commands = vec![
        Command::Commit {
            work: Box::new(TransactionWork {
                sends: vec![rich_message(), body("b")],
                via: vec![("elsewhere".into(), body("via"))],
                settlements: vec![(LockToken([2; 16]), settlements()[3].clone())],
            }),
            reply: reply_to(&sink, 1),
        },
        Command::Send {
            messages: vec![rich_message(), body("plain")].into(),
            reply: Some(reply_to(&sink, 2)),
        },
        Command::Send {
            messages: vec![body("settled")].into(),
            reply: None,
        },
        Command::SendBatch {
            sends: vec![
                BatchedSend {
                    messages: vec![body("x")].into(),
                    numbers: vec![(SequenceNumber(3), Timestamp(4))].into(),
                    request: Some(RequestId(5)),
                },
                BatchedSend {
                    messages: vec![].into(),
                    numbers: Default::default(),
                    request: None,
                },
            ],
            sink: other.clone(),
        },
        Command::DeadLetterOnArrival {
            messages: vec![(rich_message(), "reason".into(), "description".into())],
        },
        Command::SendForwarded {
            message: rich_message(),
            key: ForwardKey {
                source: "source".into(),
                sequence_number: SequenceNumber(9),
                enqueued_time: Timestamp(10),
            },
            floor: SequenceNumber(-1),
            reply: reply_to(&sink, 3),
        },
        Command::Forwarded {
            sequence_number: SequenceNumber(i64::MAX),
        },
        Command::ForwardFailed {
            sequence_number: SequenceNumber(4),
            reason: "r".into(),
            description: "d".into(),
        },
        Command::Return {
            receiver: Some(ReceiverId(2)),
            sub_queue: SubQueue::DeadLetter,
            record: Box::new(record()),
            lock: Some(lock()),
        },
        Command::Return {
            receiver: None,
            sub_queue: SubQueue::TransferDeadLetter,
            record: Box::new(record()),
            lock: None,
        },
        Command::AttachReceiver {
            receiver: ReceiverId(u64::MAX),
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::ReceiveAndDelete,
            sink: sink.clone(),
        },
        Command::AttachSessionReceiver {
            receiver: ReceiverId(1),
            mode: ReceiveMode::PeekLock,
            session_id: Some("s".into()),
            wait: Duration::new(5, 123),
            sink: other.clone(),
        },
        Command::AttachSessionReceiver {
            receiver: ReceiverId(1),
            mode: ReceiveMode::PeekLock,
            session_id: None,
            wait: Duration::ZERO,
            sink: sink.clone(),
        },
        Command::ListSessions {
            last_updated: i64::MIN,
            skip: 3,
            top: 100,
            reply: reply_to(&sink, 6),
        },
        Command::DetachReceiver {
            receiver: ReceiverId(8),
        },
        Command::Fence {
            receiver: ReceiverId(9),
        },
        Command::Credit {
            receiver: ReceiverId(1),
            delivery_count: Some(u32::MAX),
            link_credit: 50,
            drain: true,
        },
        Command::Credit {
            receiver: ReceiverId(1),
            delivery_count: None,
            link_credit: 0,
            drain: false,
        },
        Command::Settle {
            token: LockToken([3; 16]),
            settlement: Settlement::Complete,
            reply: None,
        },
        Command::Peek {
            sub_queue: SubQueue::DeadLetter,
            from: SequenceNumber(1),
            count: 32,
            session_id: Some("s".into()),
            reply: reply_to(&sink, 7),
        },
        Command::ReceiveDeferred {
            sub_queue: SubQueue::Main,
            sequence_numbers: vec![SequenceNumber(1), SequenceNumber(2)],
            mode: ReceiveMode::PeekLock,
            reply: reply_to(&sink, 8),
        },
        Command::Take {
            sub_queue: SubQueue::Main,
            sequence_numbers: vec![SequenceNumber(3)],
            mode: ReceiveMode::ReceiveAndDelete,
            reply: reply_to(&sink, 9),
        },
        Command::Purge {
            sub_queue: SubQueue::Main,
            before: Some(Timestamp(5)),
            session_id: None,
            max: 1000,
            reply: reply_to(&sink, 10),
        },
        Command::CancelScheduled {
            sequence_numbers: vec![SequenceNumber(4)],
            reply: reply_to(&sink, 11),
        },
        Command::RenewLocks {
            tokens: vec![LockToken([4; 16]), LockToken([5; 16])],
            reply: reply_to(&sink, 12),
        },
        Command::UpdateSettings {
            settings: Box::new({
                let mut settings = EntitySettings::with_defaults("queue/path");
                settings.default_message_time_to_live = Some(Duration::from_millis(1500));
                settings.duplicate_detection_window = Some(Duration::from_secs(600));
                settings.forward_to = Some("next".into());
                settings.status = crate::config::EntityStatus::SendDisabled;
                settings.partitions = 16;
                settings.requires_session = true;
                settings
            }),
            reply: reply_to(&sink, 13),
        },
        Command::Describe {
            reply: reply_to(&sink, 14),
        },
        Command::Delete {
            reply: reply_to(&sink, 15),
        },
    ];
    for operation in [
        SessionOperation::RenewLock,
        SessionOperation::SetState(Some(vec![0, 1, 2])),
        SessionOperation::SetState(None),
        SessionOperation::GetState,
    ] {
        commands.push(Command::Session {
            session_id: "s".into(),
            operation,
            reply: reply_to(&sink, 16),
        });
    }
    for settlement in settlements() {
        commands.push(Command::Settle {
            token: LockToken([6; 16]),
            settlement: settlement.clone(),
            reply: Some(reply_to(&other, 17)),
        });
        commands.push(Command::SettleAll {
            tokens: vec![LockToken([6; 16])],
            settlement,
        });
    }
    for command in commands {
        round_trip_command(command);
    }
}

#[test]
fn sinks_are_named_once_and_what_waits_is_reported() {
    #[derive(Default)]
    struct Recording {
        table: Table,
        waits: Vec<(u64, u64)>,
        attaches: Vec<(u64, u64, bool)>,
    }
    impl SinkIds for Recording {
        fn id(&mut self, sink: &NotificationSender) -> u64 {
            self.table.id(sink)
        }
        fn waits(&mut self, sink: u64, request: RequestId) {
            self.waits.push((sink, request.0));
        }
        fn attaches(&mut self, sink: u64, receiver: ReceiverId, session: bool) {
            self.attaches.push((sink, receiver.0, session));
        }
    }
    let (first, _keep) = mpsc::unbounded_channel();
    let (second, _keep_second) = mpsc::unbounded_channel();
    let mut recording = Recording::default();
    let commands = [
        Command::Describe {
            reply: reply_to(&first, 1),
        },
        Command::AttachSessionReceiver {
            receiver: ReceiverId(4),
            mode: ReceiveMode::PeekLock,
            session_id: None,
            wait: Duration::ZERO,
            sink: second.clone(),
        },
        Command::SendBatch {
            sends: vec![
                BatchedSend {
                    messages: vec![body("x")].into(),
                    numbers: Default::default(),
                    request: Some(RequestId(2)),
                },
                BatchedSend {
                    messages: vec![body("y")].into(),
                    numbers: Default::default(),
                    request: None,
                },
            ],
            sink: first.clone(),
        },
        Command::AttachReceiver {
            receiver: ReceiverId(6),
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::PeekLock,
            sink: first.clone(),
        },
    ];
    for command in &commands {
        codec::encode_command("q", command, &mut recording).expect("encodes");
    }
    assert_eq!(recording.table.0.len(), 2, "one id per channel");
    assert_eq!(recording.waits, [(0, 1), (0, 2)]);
    assert_eq!(recording.attaches, [(1, 4, true), (0, 6, false)]);
}

#[test]
fn every_notification_comes_back_the_same() {
    let delivery = Delivery {
        receiver: Some(ReceiverId(3)),
        record: record(),
        lock: Some(lock()),
        sub_queue: SubQueue::Main,
    };
    let peeked = Delivery {
        receiver: None,
        record: record(),
        lock: None,
        sub_queue: SubQueue::TransferDeadLetter,
    };
    let mut counts = EntityCounts {
        active: 1,
        scheduled: 2,
        deferred: 3,
        dead_letter: 4,
        transfer: 5,
        transfer_dead_letter: 6,
        size_in_bytes: 7,
        next_sequence_number: 8,
        last_activity: Timestamp(9),
        kept_alive: true,
        ..Default::default()
    };
    counts.totals.sent = 10;
    counts.totals.delivered = 11;
    counts.totals.completed = 12;
    counts.totals.abandoned = 13;
    counts.totals.dead_lettered = 14;
    counts.totals.expired = 15;
    counts.totals.scheduled = 16;
    counts.totals.dead_lettered_by_reason.ttl_expired = 17;
    counts.totals.dead_lettered_by_reason.application = 18;
    counts.totals.dead_lettered_by_reason.filter_evaluation = 19;
    counts
        .totals
        .dead_lettered_by_reason
        .max_delivery_count_exceeded = 20;
    counts
        .totals
        .dead_lettered_by_reason
        .max_transfer_hop_count_exceeded = 21;
    counts.totals.dead_lettered_by_reason.session_id_is_null = 22;
    counts.next_sequence_numbers[0] = 23;
    counts.next_sequence_numbers[15] = 24;
    let errors = vec![
        EntityError::LockLost,
        EntityError::QuotaExceeded {
            entity: "q".into(),
            size: 1,
            limit: 2,
        },
        EntityError::NotAllowed("a".into()),
        EntityError::LimitExceeded("b".into()),
        EntityError::MessageNotFound("c".into()),
        EntityError::Argument("d".into()),
        EntityError::AlreadyExists("e".into()),
        EntityError::SessionCannotBeLocked("f".into()),
        EntityError::SessionLockLost("g".into()),
        EntityError::Timeout("h".into()),
        EntityError::Disabled("i".into()),
        EntityError::NotFound("j".into()),
        EntityError::StorageFull("k".into()),
        EntityError::StorageFailed("l".into()),
    ];
    let replies = vec![
        Reply::Done,
        Reply::SequenceNumbers(vec![SequenceNumber(1), SequenceNumber(2)].into()),
        Reply::Expirations(vec![Timestamp(3)]),
        Reply::Messages(vec![delivery.clone(), peeked.clone()]),
        Reply::SessionState(Some(vec![1, 2, 3])),
        Reply::SessionState(None),
        Reply::Sessions(vec!["s1".into(), "s2".into()]),
        Reply::Counts(Box::new(counts)),
        Reply::Count(42),
    ];
    let mut notifications = vec![
        Notification::Deliver(delivery),
        Notification::Deliver(peeked),
        Notification::Fenced {
            receiver: ReceiverId(1),
        },
        Notification::Drained {
            receiver: ReceiverId(1),
            delivery_count: u32::MAX,
        },
        Notification::SessionAccepted {
            receiver: ReceiverId(1),
            session_id: "s".into(),
            locked_until: Timestamp(5),
        },
        Notification::ReceiverDetached {
            receiver: ReceiverId(1),
        },
        Notification::EntityDeleted {
            receiver: ReceiverId(1),
        },
        Notification::Moved {
            receiver: ReceiverId(u64::MAX),
        },
        Notification::SessionLost {
            receiver: ReceiverId(1),
        },
    ];
    for error in &errors {
        notifications.push(Notification::SessionRefused {
            receiver: ReceiverId(2),
            error: error.clone(),
        });
    }
    let mut all = Vec::new();
    for (at, reply) in replies.into_iter().enumerate() {
        all.push((RequestId(at as u64), Ok(reply)));
    }
    for (at, error) in errors.into_iter().enumerate() {
        all.push((RequestId(100 + at as u64), Err(error)));
    }
    for (request, result) in all {
        let copy = match &result {
            Ok(_) => None,
            Err(error) => Some(error.clone()),
        };
        notifications.push(Notification::Reply { request, result });
        if let Some(error) = copy {
            notifications.push(Notification::Replies {
                replies: vec![(request, Err(error)), (RequestId(0), Ok(Reply::Done))],
            });
        }
    }
    for notification in notifications {
        round_trip_notification(notification);
    }
}

#[test]
fn a_message_keeps_what_it_carries_in_transit() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let command = Command::Send {
        messages: vec![rich_message()].into(),
        reply: Some(reply_to(&sink, 1)),
    };
    let frame = codec::encode_command("q", &command, &mut Table::default()).expect("encodes");
    let ClientFrame::Command {
        command: Command::Send { messages, .. },
        ..
    } = codec::decode_client_frame(&frame[4..], &mut |_| sink.clone()).expect("decodes")
    else {
        panic!("a send");
    };
    let message = &messages[0];
    let extras = message.extras();
    assert_eq!(extras.partition_key.as_deref(), Some("key"));
    assert_eq!(
        extras.topic_sequence,
        Some((SequenceNumber(12), Timestamp(1_700_000_000_123)))
    );
    assert_eq!(extras.original_sequence_number, Some(41));
    assert_eq!(message.system().session_id(), Some("session-1"));
    assert_eq!(message.body(), b"payload");
    assert_eq!(message.header().priority, 7);
    assert_eq!(message.hop_count(), 2);
}

#[test]
fn what_does_not_cross_is_refused_and_bad_frames_fail() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let (staged, _) = mpsc::unbounded_channel();
    let stage = Command::Stage {
        sends: Vec::new(),
        dead_letters: Vec::new(),
        sink,
        staged,
    };
    let refused = codec::encode_command("q", &stage, &mut Table::default()).unwrap_err();
    assert!(refused.to_string().contains("Stage"), "{refused}");

    for body in [
        &[][..],
        &[1],
        &[1, 1, b'q', 99],
        &[3, 0, 9, 0],
        &[4, 1, b'q', 1, 0],
        &[77],
    ] {
        assert!(codec::decode_server_frame(body).is_err(), "{body:?}");
        assert!(
            codec::decode_client_frame(body, &mut |_| mpsc::unbounded_channel().0).is_err(),
            "{body:?}"
        );
    }
    // Truncated: every prefix of a good frame fails to decode.
    let (sink, _keep) = mpsc::unbounded_channel();
    let frame = codec::encode_command(
        "q",
        &Command::Send {
            messages: vec![rich_message()].into(),
            reply: Some(reply_to(&sink, 1)),
        },
        &mut Table::default(),
    )
    .expect("encodes");
    for end in 4..frame.len() {
        assert!(
            codec::decode_client_frame(&frame[4..end], &mut |_| sink.clone()).is_err(),
            "a prefix of {end} bytes"
        );
    }
}
