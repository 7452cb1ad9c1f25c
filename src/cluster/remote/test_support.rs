//! What the proxy's tests share: waiting for a notification, plain messages and replies,
//! a topic codec that leaves messages as they are, and the pieces of a codec round trip.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::time::timeout;

use super::codec::{self, ClientFrame, SinkIds};
use crate::broker::entity::{Notification, NotificationSender, ReplyTo, RequestId};
use crate::broker::message::Message;
use crate::broker::topic::TopicCodec;

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
