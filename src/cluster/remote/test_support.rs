//! What the proxy's tests share: waiting for a notification, plain messages and replies,
//! a topic codec that leaves messages as they are, an entity actor with a proxy and a server
//! in front of it and a connection's view of them, and the pieces of a codec round trip.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::codec::{self, ClientFrame, SinkIds};
use super::{Proxy, RemoteError, Target, serve};
use crate::broker::entity::settings::EntitySettings;
use crate::broker::entity::{
    Command, Delivery, EntityCounts, EntityHandle, Notification, NotificationSender, Reply,
    ReplyTo, RequestId, actor,
};
use crate::broker::message::{Message, SystemField};
use crate::broker::topic::TopicCodec;
use crate::broker::types::{
    EntityError, ReceiveMode, ReceiverId, SequenceNumber, SubQueue, Timestamp,
};
use crate::clock::Clock;

pub(super) const WAIT: Duration = Duration::from_secs(5);

pub(super) async fn next(notifications: &mut UnboundedReceiver<Notification>) -> Notification {
    timeout(WAIT, notifications.recv())
        .await
        .expect("a notification in time")
        .expect("the sink open")
}

pub(super) fn body(text: &str) -> Message {
    Message::with_body(text.as_bytes())
}

pub(super) fn reply_to(sink: &NotificationSender, request: u64) -> ReplyTo {
    ReplyTo {
        sink: sink.clone(),
        request: RequestId(request),
    }
}

/// A topic codec that copies messages as they are.
pub(super) fn topic_codec() -> TopicCodec {
    TopicCodec {
        rewrite: Arc::new(|message, _, _| message.clone()),
        decode_properties: Arc::new(|_| Vec::new()),
        evaluation_budget: crate::broker::filter::DEFAULT_EVALUATION_BUDGET,
    }
}

// ---- a proxy, a server and an entity ----

pub(super) const START: Timestamp = Timestamp(1_700_000_000_000);

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
pub(super) fn connect(entities: Vec<EntityHandle>) -> (Proxy, JoinHandle<Result<(), RemoteError>>) {
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
pub(super) struct Client {
    pub(super) handle: EntityHandle,
    sink: NotificationSender,
    pub(super) replies: UnboundedReceiver<Notification>,
    next_request: u64,
}

impl Client {
    pub(super) fn new(handle: EntityHandle) -> Client {
        let (sink, replies) = mpsc::unbounded_channel();
        Client {
            handle,
            sink,
            replies,
            next_request: 0,
        }
    }

    pub(super) fn reply_to(&mut self) -> ReplyTo {
        self.next_request += 1;
        ReplyTo {
            sink: self.sink.clone(),
            request: RequestId(self.next_request),
        }
    }

    pub(super) async fn request(
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

    pub(super) async fn command(&self, command: Command) {
        self.handle.send(command).await.expect("handle open");
    }

    pub(super) async fn send(&mut self, messages: Vec<Message>) -> Vec<i64> {
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

    pub(super) async fn describe(&mut self) -> EntityCounts {
        match self.request(|reply| Command::Describe { reply }).await {
            Ok(Reply::Counts(counts)) => *counts,
            other => panic!("describe: {other:?}"),
        }
    }

    pub(super) async fn peek(&mut self) -> Vec<Delivery> {
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
    pub(super) async fn attach(
        &self,
        receiver: ReceiverId,
        credit: u32,
    ) -> UnboundedReceiver<Notification> {
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

pub(super) fn in_session(text: &str, session: &str) -> Message {
    let mut message = body(text);
    let system = message.system().with(SystemField::SessionId, Some(session));
    message.set_system(system);
    message
}

// ---- codec round trips ----

/// Sink ids by position in a list.
#[derive(Default)]
pub(super) struct Table(pub(super) Vec<NotificationSender>);

impl SinkIds for Table {
    fn id(&mut self, sink: &NotificationSender) -> u64 {
        if let Some(at) = self.0.iter().position(|known| known.same_channel(sink)) {
            return at as u64;
        }
        self.0.push(sink.clone());
        (self.0.len() - 1) as u64
    }
}

/// Decodes a client frame (without its length), one new sink for each sink id.
pub(super) fn decode_client_frame(frame: &[u8]) -> ClientFrame {
    let mut senders: HashMap<u64, NotificationSender> = HashMap::new();
    codec::decode_client_frame(frame, &mut |id| {
        senders
            .entry(id)
            .or_insert_with(|| mpsc::unbounded_channel().0)
            .clone()
    })
    .expect("decodes")
}

/// What a round trip keeps: the Debug text (but for the senders' insides) and, encoded
/// again, the very bytes.
pub(super) fn assert_comes_back(
    sent: &impl std::fmt::Debug,
    back: &impl std::fmt::Debug,
    frame: &[u8],
    again: &[u8],
) {
    assert_eq!(
        without_senders(&format!("{back:?}")),
        without_senders(&format!("{sent:?}"))
    );
    assert_eq!(frame, again, "{sent:?}");
}

/// A Debug text without the senders' insides (their counts differ).
fn without_senders(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("UnboundedSender {") {
        out.push_str(&rest[..at]);
        out.push_str("Sink");
        let mut depth = 0;
        let mut end = rest.len();
        for (offset, character) in rest[at..].char_indices() {
            match character {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + offset + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
