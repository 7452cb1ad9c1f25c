//! Client transfers: assembly of multi-frame deliveries, size limits, batches, and the
//! hand-off of messages to queues and topics; `$cbs` and `$management` requests go on to
//! [`super::requests`].

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::Role;
use std::sync::Arc;

use super::connection::{Connection, ConnectionError, Pending};
use super::dispositions::{disposition, rejected};
use super::frame;
use super::links::{LinkKind, PartialTransfer, SENDER_CREDIT, SendTarget};
use super::log_text::LogText;
use super::session::unattached_handle;
use crate::amqp::errors::{self, Failure};
use crate::amqp::message::{self};
use crate::broker::entity::{BatchedSend, Command, Messages, ReplyTo, RequestId};
use crate::broker::topic::TopicCommand;

impl Connection {
    /// Handles a transfer frame from the client.
    pub(super) async fn transfer(
        &mut self,
        channel: u16,
        transfer: frame::IncomingTransfer,
        payload: Bytes,
    ) -> Result<(), ConnectionError> {
        self.count_incoming_transfer(channel)?;
        let handle = transfer.handle;
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Err(super::session::no_session(channel));
        };
        let Some(link) = session.links.get_mut(&handle) else {
            return Err(unattached_handle(handle));
        };
        if matches!(link.kind, LinkKind::Refused) {
            return Ok(());
        }
        // Assemble multi-frame deliveries.
        let held_before = link
            .partial
            .as_ref()
            .map_or(0, |partial| partial.payload.len());
        // A single-frame send to an entity is parsed straight from the frame (the parser
        // copies what it keeps into the message's own allocation); a multi-frame delivery
        // and a request are assembled in their own buffer.
        let mut whole = None;
        let partial = match link.partial.take() {
            Some(mut partial) => {
                partial.payload.extend_from_slice(&payload);
                partial
            }
            None if !transfer.more && matches!(link.kind, LinkKind::EntitySender { .. }) => {
                whole = Some(payload);
                PartialTransfer {
                    delivery_id: transfer.delivery_id.unwrap_or(0),
                    settled: transfer.settled.unwrap_or(false),
                    message_format: transfer.message_format.unwrap_or(0),
                    payload: BytesMut::new(),
                    txn_id: transfer.txn_id.clone(),
                }
            }
            None => PartialTransfer {
                delivery_id: transfer.delivery_id.unwrap_or(0),
                settled: transfer.settled.unwrap_or(false),
                message_format: transfer.message_format.unwrap_or(0),
                payload: BytesMut::from(&payload[..]),
                txn_id: transfer.txn_id.clone(),
            },
        };
        // What this connection holds in unfinished deliveries, across all its links.
        self.partial_bytes -= held_before;
        if transfer.aborted {
            return Ok(());
        }
        let limit = match &link.kind {
            LinkKind::EntitySender {
                max_message_size, ..
            } => *max_message_size,
            _ => 1024 * 1024,
        };
        if transfer.more {
            if partial.payload.len() as u64 > limit + 64 * 1024 {
                // Refuse early rather than buffer an unbounded message.
                let failure = size_exceeded(partial.payload.len() as u64, limit);
                return self
                    .detach_with_error(channel, handle, failure.to_error())
                    .await;
            }
            let held = partial.payload.len();
            link.partial = Some(partial);
            self.partial_bytes += held;
            let cap = self.context.max_partial_bytes();
            if self.partial_bytes > cap {
                return Err(ConnectionError::protocol(
                    errors::RESOURCE_LIMIT_EXCEEDED,
                    format!(
                        "unfinished multi-frame deliveries on this connection hold more than {cap} bytes"
                    ),
                ));
            }
            return Ok(());
        }
        link.delivery_count = link.delivery_count.wrapping_add(1);
        link.credit = link.credit.saturating_sub(1);
        let top_up = link.credit < SENDER_CREDIT / 2;
        let payload = whole.unwrap_or_else(|| partial.payload.freeze());
        let delivery_id = partial.delivery_id;
        let settled = partial.settled;
        let txn_id = partial.txn_id;
        let kind = match &link.kind {
            LinkKind::EntitySender {
                target,
                max_message_size,
                via,
            } => {
                // A send to the queue or topic whose sends are staged needs no handle of
                // its own (issue 16: cloning and dropping one was 1.5 % of the CPU).
                let target = match target {
                    target
                        if self
                            .staged
                            .as_ref()
                            .is_some_and(|staged| staged.target.same(target)) =>
                    {
                        None
                    }
                    other => Some(other.clone()),
                };
                Some((target, *max_message_size, via.clone()))
            }
            _ => None,
        };
        let coordinator = match link.kind {
            LinkKind::Coordinator { id } => Some(id),
            _ => None,
        };
        let link_kind_is_cbs = matches!(link.kind, LinkKind::CbsRequest);
        let management = match &link.kind {
            LinkKind::ManagementRequest { path, sub_queue } => Some((path.clone(), *sub_queue)),
            _ => None,
        };
        if top_up {
            self.grant_sender_credit(channel, handle)?;
        }
        if let Some((target, max_message_size, via)) = kind {
            return self
                .enqueue(
                    channel,
                    Incoming {
                        delivery_id,
                        settled,
                        message_format: partial.message_format,
                        payload,
                        txn_id,
                    },
                    target,
                    max_message_size,
                    via,
                )
                .await;
        }
        // Transfers other than sends act after the sends before them.
        self.hand_over_sends().await?;
        if let Some(coordinator) = coordinator {
            return self
                .coordinator_transfer(channel, coordinator, delivery_id, settled, &payload)
                .await;
        }
        if link_kind_is_cbs {
            return self.cbs_request(channel, delivery_id, settled, &payload);
        }
        if let Some((path, sub_queue)) = management {
            return self
                .management_request(
                    channel,
                    delivery_id,
                    settled,
                    &payload,
                    path,
                    sub_queue,
                    txn_id,
                )
                .await;
        }
        Ok(())
    }

    async fn enqueue(
        &mut self,
        channel: u16,
        incoming: Incoming,
        target: Option<SendTarget>,
        max_message_size: u64,
        via: Option<Arc<str>>,
    ) -> Result<(), ConnectionError> {
        let Incoming {
            delivery_id,
            settled,
            message_format,
            payload,
            txn_id,
        } = incoming;
        let refuse = |connection: &mut Connection, failure: Failure| {
            tracing::info!(condition = failure.condition, description = %LogText(&failure.description), "transfer refused");
            if settled {
                return Ok(());
            }
            connection.write(
                channel,
                disposition(Role::Receiver, delivery_id, rejected(&failure)),
            )
        };
        if self.draining {
            return refuse(
                self,
                Failure::new(
                    errors::CONNECTION_FORCED,
                    "The broker is shutting down and accepts no more messages.",
                    503,
                ),
            );
        }
        if payload.len() as u64 > max_message_size {
            return refuse(self, size_exceeded(payload.len() as u64, max_message_size));
        }
        let messages = match message::parse_transfer(payload, message_format) {
            Ok(messages) => messages,
            Err(error) => {
                let condition = match error {
                    message::MessageError::TooLong { .. }
                    | message::MessageError::PropertiesTooLong { .. }
                    | message::MessageError::HeaderTooLarge { .. }
                    | message::MessageError::PartitionKeyMismatch { .. } => errors::ARGUMENT_ERROR,
                    _ => errors::DECODE_ERROR,
                };
                return refuse(self, Failure::new(condition, error.to_string(), 400));
            }
        };
        if txn_id.is_none() && via.is_none() {
            match &target {
                None => {
                    return self
                        .stage_send(None, messages, settled, channel, delivery_id)
                        .await;
                }
                Some(target) => {
                    self.hand_over_unless(target).await?;
                    return self
                        .stage_send(Some(target), messages, settled, channel, delivery_id)
                        .await;
                }
            }
        }
        // `None` is the staged queue or topic.
        let target = match target {
            Some(target) => target,
            None => match &self.staged {
                Some(staged) => staged.target.clone(),
                None => return Err(lost_target()),
            },
        };
        self.hand_over_sends().await?;
        if txn_id.is_some() || via.is_some() {
            return self
                .transactional_send(
                    channel,
                    delivery_id,
                    settled,
                    txn_id,
                    messages.into_vec(),
                    target,
                    via,
                )
                .await;
        }
        let reply = if settled {
            None
        } else {
            let request = self.register(Pending::Enqueue {
                channel,
                delivery_id,
            });
            Some(ReplyTo {
                sink: self.notifications.clone(),
                request,
            })
        };
        // The reply moves into the command (cloning it would count its sink's reference up
        // and down for every message); a refusal needs only its request id.
        let request = reply.as_ref().map(|reply| reply.request);
        let sent = match &target {
            SendTarget::Queue(handle) => handle.send(Command::Send { messages, reply }).await,
            SendTarget::Topic(handle) => {
                handle
                    .send(TopicCommand::Publish {
                        messages: messages.into_vec(),
                        reply,
                    })
                    .await
            }
        };
        if let (Err(error), Some(request)) = (sent, request) {
            self.pending.remove(&request);
            return refuse(self, errors::entity_failure(&error));
        }
        Ok(())
    }
}

/// Sends to one queue or topic staged from consecutive transfers: handed over in one
/// command when the frames of a read run out, before anything else the connection does
/// (another entity's send, a disposition, an attach...), and when the batch grows past
/// [`STAGED_SENDS`] or [`STAGED_BYTES`]. Each send keeps its own outcome (issue 16: a
/// bounded-channel send, a reply and a wake-up of the entity for every message; a topic
/// also sent every subscription a command per message).
pub(super) struct StagedSends {
    target: SendTarget,
    sends: Vec<BatchedSend>,
    bytes: usize,
}

/// At most this many sends go in one command.
const STAGED_SENDS: usize = 256;
/// At most this many message bytes go in one command (the entity's inbox holds a bounded
/// number of commands; this bounds what each can hold).
const STAGED_BYTES: usize = 1024 * 1024;

impl Connection {
    /// Hands over the staged sends if they are for another queue or topic than `target`.
    async fn hand_over_unless(&mut self, target: &SendTarget) -> Result<(), ConnectionError> {
        if self
            .staged
            .as_ref()
            .is_some_and(|staged| !staged.target.same(target))
        {
            self.hand_over_sends().await?;
        }
        Ok(())
    }

    /// Stages a send to `target`, or to the queue or topic already staged for (`None`).
    async fn stage_send(
        &mut self,
        target: Option<&SendTarget>,
        messages: Messages,
        settled: bool,
        channel: u16,
        delivery_id: u32,
    ) -> Result<(), ConnectionError> {
        let request = (!settled).then(|| {
            self.sends_unanswered += 1;
            send_request(channel, delivery_id)
        });
        let bytes: usize = messages.iter().map(|message| message.size()).sum();
        let staged = match (&mut self.staged, target) {
            (Some(staged), _) => staged,
            (staged @ None, Some(target)) => staged.insert(StagedSends {
                target: target.clone(),
                // Room for a read's worth of 1 KiB sends without growing.
                sends: BatchedSend::list(),
                bytes: 0,
            }),
            (None, None) => return Err(lost_target()),
        };
        staged.sends.push(BatchedSend {
            messages,
            numbers: Default::default(),
            request,
        });
        staged.bytes += bytes;
        // A send handed over alone would take a unit of the task's cooperative budget (the
        // channel's permit): so does a staged one, or a fast sender's connection would keep
        // its worker for many reads in a row and starve the entity and the receivers (the
        // backlog then grows however fast they are). When the budget is spent the staged
        // sends are handed over first, so that the entity has them while this task waits.
        if staged.sends.len() >= STAGED_SENDS
            || staged.bytes >= STAGED_BYTES
            || !tokio::task::coop::has_budget_remaining()
        {
            self.hand_over_sends().await?;
        }
        tokio::task::coop::consume_budget().await;
        Ok(())
    }

    /// Hands the staged sends to their queue or topic; if it is gone, every send waiting
    /// for an outcome is rejected with the reason, as the entity would have.
    pub(super) async fn hand_over_sends(&mut self) -> Result<(), ConnectionError> {
        let Some(staged) = self.staged.take() else {
            return Ok(());
        };
        let sink = self.notifications.clone();
        let refused = match staged.target {
            SendTarget::Queue(entity) => {
                let command = Command::SendBatch {
                    sends: staged.sends,
                    sink,
                };
                match entity.send_or_give_back(command).await {
                    Err((error, Command::SendBatch { sends, .. })) => Some((error, sends)),
                    _ => None,
                }
            }
            SendTarget::Topic(topic) => {
                let command = TopicCommand::PublishBatch {
                    sends: staged.sends,
                    sink,
                };
                match topic.send_or_give_back(command).await {
                    Err((error, TopicCommand::PublishBatch { sends, .. })) => Some((error, sends)),
                    _ => None,
                }
            }
        };
        if let Some((error, sends)) = refused {
            for request in sends.into_iter().filter_map(|send| send.request) {
                self.answer(request, Err(error.clone()))?;
            }
        }
        Ok(())
    }
}

/// The top bit of a staged send's request id: the id carries the channel and the delivery
/// id its answer goes to (issue 16: a map insertion and removal per message sent, both
/// cache misses with many connections); other request ids count up from 1 in `pending`.
const SEND_REQUEST: u64 = 1 << 63;

/// The request id of a staged send on `channel` with `delivery_id`.
pub(super) fn send_request(channel: u16, delivery_id: u32) -> RequestId {
    RequestId(SEND_REQUEST | (channel as u64) << 32 | delivery_id as u64)
}

/// Where a staged send's answer goes, if `request` is one's.
pub(super) fn sent_to(request: RequestId) -> Option<(u16, u32)> {
    (request.0 & SEND_REQUEST != 0).then_some(((request.0 >> 32) as u16, request.0 as u32))
}

/// A complete client delivery.
struct Incoming {
    delivery_id: u32,
    settled: bool,
    message_format: u32,
    payload: Bytes,
    txn_id: Option<Bytes>,
}

/// A send found no staged queue to go to although its link's queue was the staged one: a
/// fault of this broker, reported rather than a panic (nothing hands sends over between the
/// check and the staging).
fn lost_target() -> ConnectionError {
    ConnectionError::protocol(
        errors::INTERNAL_ERROR,
        "a send lost its queue between the link and the staging (a broker fault)",
    )
}

fn size_exceeded(size: u64, limit: u64) -> Failure {
    Failure::new(
        errors::MESSAGE_SIZE_EXCEEDED,
        format!(
            "The received message (size {size} bytes) exceeds the limit ({limit} bytes) currently allowed on the link."
        ),
        413,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_sends_request_id_says_where_its_answer_goes_and_no_other_id_does() {
        for (channel, delivery_id) in [(0, 0), (7, 42), (u16::MAX, u32::MAX), (1, 1 << 31)] {
            let request = send_request(channel, delivery_id);
            assert_eq!(sent_to(request), Some((channel, delivery_id)));
        }
        // Registered requests count up from 1: never taken for a staged send's.
        for id in [1, 2, u32::MAX as u64, (1 << 62) + 5] {
            assert_eq!(sent_to(RequestId(id)), None);
        }
    }
}
