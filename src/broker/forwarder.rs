//! Auto-forwarding (rules FWD-1..3): a task per forwarding entity takes the messages its
//! entity hands over and sends them to the target queue or topic. The source keeps each
//! message in its outbox until the target has stored it (durably, with durable storage),
//! then is told to drop it; a crash in between sends it again after recovery (at least
//! once, never lost). A message the target refuses (missing, deleted, full) moves from the
//! outbox to the source's transfer dead-letter queue.
//!
//! Await order: the forwarder awaits the target's inbox and reply, and the source's inbox
//! when it returns a failure. Entity actors never await a forwarder (they push into an
//! unbounded channel), so forwarding cycles cannot deadlock.

use std::sync::Weak;

use tokio::sync::mpsc;

use super::entity::state::ForwardKey;
use super::entity::{Command, EntityHandle, Notification, ReplyTo, RequestId};
use super::message::Message;
use super::registry::{Entity, Registry};
use super::topic::TopicCommand;
use super::types::{EntityError, OutboxTarget};

/// A message to forward.
#[derive(Debug)]
pub struct Forward {
    /// The message, stamped by the source.
    pub message: Message,
    /// Its number in the source's outbox.
    pub sequence_number: super::types::SequenceNumber,
    /// Its enqueued time in the source (with the number and the source's path, the key a
    /// queue or topic target stores it under, so that a re-send is not stored or published
    /// twice).
    pub enqueued_time: super::types::Timestamp,
    /// The lowest number in the source's outbox when it was handed over (after the turn's
    /// commit): every entry below it is committed as forwarded, so the target may forget
    /// their keys.
    pub floor: super::types::SequenceNumber,
    /// Where it goes.
    pub target: super::types::OutboxTarget,
}

/// Where forwarded messages go.
pub type ForwardSender = mpsc::UnboundedSender<Forward>;

/// The forwarding targets of one entity (changed at run time through a watch channel).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Targets {
    /// `forward_to`.
    pub messages: Option<String>,
    /// `forward_dead_lettered_messages_to`.
    pub dead_letters: Option<String>,
}

/// Starts the forwarder of `source`, reading from `inbox`.
pub fn spawn(
    source: EntityHandle,
    targets: tokio::sync::watch::Receiver<Targets>,
    registry: Weak<Registry>,
    mut inbox: mpsc::UnboundedReceiver<Forward>,
    lifecycle: &crate::broker::lifecycle::Lifecycle,
) {
    let mut stopping = lifecycle.stopping();
    let source_key = super::registry::key(&source.path);
    lifecycle.spawn(async move {
        let (sink, mut replies) = mpsc::unbounded_channel();
        let mut next_request = 0u64;
        if let Some(registry) = registry.upgrade() {
            registry.wait_ready().await;
        }
        loop {
            let forward = tokio::select! {
                forward = inbox.recv() => forward,
                () = crate::broker::lifecycle::stopped(&mut stopping) => None,
            };
            let Some(forward) = forward else { break };
            let target = match &forward.target {
                OutboxTarget::Forward => targets.borrow().messages.clone(),
                OutboxTarget::DeadLetters => targets.borrow().dead_letters.clone(),
                OutboxTarget::Via(destination) => Some(destination.to_string()),
            };
            let Some(target) = target.as_deref() else {
                continue;
            };
            next_request += 1;
            let reply = ReplyTo {
                sink: sink.clone(),
                request: RequestId(next_request),
            };
            let entity = registry
                .upgrade()
                .and_then(|registry| registry.lookup(target));
            let key = ForwardKey {
                source: source_key.clone(),
                sequence_number: forward.sequence_number,
                enqueued_time: forward.enqueued_time,
            };
            let sent = match entity {
                Some(Entity::Queue(handle)) => {
                    handle
                        .send(Command::SendForwarded {
                            message: forward.message.clone(),
                            key,
                            floor: forward.floor,
                            reply,
                        })
                        .await
                }
                Some(Entity::Topic(handle)) => {
                    handle
                        .send(TopicCommand::PublishForwarded {
                            message: forward.message.clone(),
                            key,
                            floor: forward.floor,
                            reply,
                        })
                        .await
                }
                _ => Err(EntityError::NotFound(target.to_string())),
            };
            let outcome = match sent {
                Ok(()) => match replies.recv().await {
                    Some(Notification::Reply { result, .. }) => result.map(|_| ()),
                    _ => Err(EntityError::NotFound(target.to_string())),
                },
                Err(error) => Err(error),
            };
            let settled = match outcome {
                Ok(()) => Command::Forwarded {
                    sequence_number: forward.sequence_number,
                },
                Err(error) => {
                    tracing::info!(source = %source.path, %target, %error, "forwarding failed; message moved to the transfer dead-letter queue");
                    Command::ForwardFailed {
                        sequence_number: forward.sequence_number,
                        reason: "TransferFailed".to_string(),
                        description: format!("Forwarding to '{target}' failed: {error}"),
                    }
                }
            };
            let _ = source.send(settled).await;
        }
    });
}
