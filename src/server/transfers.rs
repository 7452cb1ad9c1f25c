//! Message flow on links: client transfers (assembly of multi-frame deliveries, size
//! limits, batches, `$cbs` and `$management` requests), client dispositions (mapped to
//! Service Bus settlements and echoed as the SDKs require, §5.2), deliveries from
//! entities, drain replies, and responses on request/response links.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Handle, Role};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Modified, Rejected, Released};
use fe2o3_amqp_types::performatives::{Disposition, Performative};
use fe2o3_amqp_types::primitives::Value;
use std::sync::Arc;

use super::connection::{Connection, ConnectionError, Pending};
use super::frame;
use super::links::{LinkKind, PartialTransfer, SENDER_CREDIT, SendTarget};
use super::session::{Unsettled, unattached_handle};
use crate::amqp::errors::{self, Failure};
use crate::amqp::management::{self, PendingResponse, Plan};
use crate::amqp::message::{self, DeliveryView};
use crate::amqp::{cbs, ids, request, rewrite};
use crate::broker::entity::{Command, Delivery, Reply, ReplyTo, RequestId};
use crate::broker::topic::TopicCommand;
use crate::broker::types::{EntityError, LockToken, ReceiverId, Settlement, SubQueue};

fn disposition(role: Role, delivery_id: u32, state: DeliveryState) -> Performative {
    Performative::Disposition(Disposition {
        role,
        first: delivery_id,
        last: None,
        settled: true,
        state: Some(state),
        batchable: false,
    })
}

fn rejected(failure: &Failure) -> DeliveryState {
    DeliveryState::Rejected(Rejected {
        error: Some(failure.to_error()),
    })
}

/// Maps a client's outcome to a Service Bus settlement and the outcome to echo (§5.1).
fn settlement_for(state: Option<&DeliveryState>) -> (Settlement, DeliveryState) {
    match state {
        Some(DeliveryState::Accepted(_)) => {
            (Settlement::Complete, DeliveryState::Accepted(Accepted {}))
        }
        Some(DeliveryState::Modified(modified)) => {
            let properties = management::property_changes(
                modified
                    .message_annotations
                    .as_ref()
                    .map(|fields| {
                        Value::Map(
                            fields
                                .iter()
                                .map(|(key, value)| (Value::Symbol(key.clone()), value.clone()))
                                .collect(),
                        )
                    })
                    .as_ref(),
            );
            let echo = DeliveryState::Modified(Modified {
                delivery_failed: modified.delivery_failed,
                undeliverable_here: modified.undeliverable_here,
                message_annotations: None,
            });
            if modified.undeliverable_here == Some(true) {
                (Settlement::Defer { properties }, echo)
            } else {
                (Settlement::Abandon { properties }, echo)
            }
        }
        Some(DeliveryState::Rejected(rejected)) => {
            let mut properties = Vec::new();
            let mut reason = None;
            let mut description = rejected
                .error
                .as_ref()
                .and_then(|error| error.description.clone());
            if let Some(info) = rejected
                .error
                .as_ref()
                .and_then(|error| error.info.as_ref())
            {
                for (key, value) in info.iter() {
                    let value = management::property_value(value);
                    let text = match &value {
                        crate::broker::types::PropertyValue::String(text) => Some(text.clone()),
                        _ => None,
                    };
                    match key.0.as_str() {
                        "DeadLetterReason" => reason = text,
                        "DeadLetterErrorDescription" => description = text.or(description),
                        _ => properties.push((key.0.clone(), value)),
                    }
                }
            }
            (
                Settlement::DeadLetter {
                    reason,
                    description,
                    properties,
                },
                DeliveryState::Rejected(Rejected { error: None }),
            )
        }
        _ => (Settlement::Release, DeliveryState::Released(Released {})),
    }
}

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
        let session = self.session(channel)?;
        let Some(link) = session.links.get_mut(&handle) else {
            return Err(unattached_handle(handle));
        };
        if matches!(link.kind, LinkKind::Refused) {
            return Ok(());
        }
        // Assemble multi-frame deliveries.
        let partial = match link.partial.take() {
            Some(mut partial) => {
                partial.payload.extend_from_slice(&payload);
                partial
            }
            None => PartialTransfer {
                delivery_id: transfer.delivery_id.unwrap_or(0),
                settled: transfer.settled.unwrap_or(false),
                message_format: transfer.message_format.unwrap_or(0),
                payload: BytesMut::from(&payload[..]),
            },
        };
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
            link.partial = Some(partial);
            return Ok(());
        }
        link.delivery_count = link.delivery_count.wrapping_add(1);
        link.credit = link.credit.saturating_sub(1);
        let top_up = link.credit < SENDER_CREDIT / 2;
        let payload = partial.payload.freeze();
        let delivery_id = partial.delivery_id;
        let settled = partial.settled;
        let kind = match &link.kind {
            LinkKind::EntitySender {
                target,
                max_message_size,
            } => Some((target.clone(), *max_message_size)),
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
        if let Some((target, max_message_size)) = kind {
            return self
                .enqueue(
                    channel,
                    delivery_id,
                    settled,
                    partial.message_format,
                    payload,
                    target,
                    max_message_size,
                )
                .await;
        }
        if link_kind_is_cbs {
            return self.cbs_request(channel, delivery_id, settled, &payload);
        }
        if let Some((path, sub_queue)) = management {
            return self
                .management_request(channel, delivery_id, settled, &payload, path, sub_queue)
                .await;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn enqueue(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        message_format: u32,
        payload: Bytes,
        target: SendTarget,
        max_message_size: u64,
    ) -> Result<(), ConnectionError> {
        let refuse = |connection: &mut Connection, failure: Failure| {
            tracing::info!(condition = failure.condition, description = %failure.description, "transfer refused");
            if settled {
                return Ok(());
            }
            connection.write(
                channel,
                disposition(Role::Receiver, delivery_id, rejected(&failure)),
            )
        };
        if payload.len() as u64 > max_message_size {
            return refuse(self, size_exceeded(payload.len() as u64, max_message_size));
        }
        let messages = match message::parse_transfer(payload, message_format) {
            Ok(messages) => messages,
            Err(error) => {
                return refuse(
                    self,
                    Failure::new(errors::DECODE_ERROR, error.to_string(), 400),
                );
            }
        };
        let messages: Vec<_> = messages.into_iter().map(Arc::new).collect();
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
        let sent = match &target {
            SendTarget::Queue(handle) => {
                handle
                    .send(Command::Send {
                        messages,
                        reply: reply.clone(),
                    })
                    .await
            }
            SendTarget::Topic(handle) => {
                let messages = messages
                    .into_iter()
                    .map(|message| {
                        let mut message = Arc::unwrap_or_clone(message);
                        message.user_properties = rewrite::decode_user_properties(&message);
                        Arc::new(message)
                    })
                    .collect();
                handle
                    .send(TopicCommand::Publish {
                        messages,
                        reply: reply.clone(),
                    })
                    .await
            }
        };
        if let (Err(error), Some(reply)) = (sent, reply) {
            self.pending.remove(&reply.request);
            return refuse(self, errors::entity_failure(&error));
        }
        Ok(())
    }

    /// Parses a `$cbs` / `$management` request and settles its delivery: `accepted`, or
    /// `rejected` with a decode error (then `None`: there is nothing to answer).
    fn accept_request(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        payload: &Bytes,
    ) -> Result<Option<request::Request>, ConnectionError> {
        let state = match request::parse(payload) {
            Ok(request) => {
                if !settled {
                    self.write(
                        channel,
                        disposition(
                            Role::Receiver,
                            delivery_id,
                            DeliveryState::Accepted(Accepted {}),
                        ),
                    )?;
                }
                return Ok(Some(request));
            }
            Err(error) => rejected(&Failure::new(errors::DECODE_ERROR, error.to_string(), 400)),
        };
        self.write(channel, disposition(Role::Receiver, delivery_id, state))?;
        Ok(None)
    }

    fn cbs_request(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        payload: &Bytes,
    ) -> Result<(), ConnectionError> {
        let Some(request) = self.accept_request(channel, delivery_id, settled, payload)? else {
            return Ok(());
        };
        let now = self.context.clock.now().0 / 1000;
        let outcome = cbs::handle(&request, &self.context.settings.keys, now);
        if let Some(grant) = outcome.grant {
            self.grants.push(grant);
        }
        self.send_response(channel, request.reply_to.as_deref(), None, outcome.response)
    }

    async fn management_request(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        payload: &Bytes,
        path: String,
        sub_queue: SubQueue,
    ) -> Result<(), ConnectionError> {
        let Some(request) = self.accept_request(channel, delivery_id, settled, payload)? else {
            return Ok(());
        };
        let plan = management::plan(&request);
        let pending = PendingResponse {
            channel,
            reply_to: request.reply_to,
            path: path.clone(),
            correlation: request.message_id,
            kind: plan
                .as_ref()
                .map_or(management::ResponseKind::Empty, Plan::response_kind),
        };
        let plan = match plan {
            Ok(plan) => plan,
            Err(failure) => return self.respond_failure(&pending, &failure),
        };
        if let Plan::Rules(operation) = plan {
            return self.manage_rules(pending, operation).await;
        }
        let entity = match self.context.registry.lookup(&path) {
            Some(crate::broker::registry::Entity::Queue(handle))
            | Some(crate::broker::registry::Entity::Subscription(handle)) => handle,
            Some(crate::broker::registry::Entity::Topic(topic))
                if matches!(plan, Plan::Schedule(_) | Plan::Cancel(_)) =>
            {
                return self.schedule_on_topic(pending, topic, plan).await;
            }
            _ => {
                let failure = Failure::new(
                    errors::NOT_ALLOWED,
                    format!(
                        "'{path}' does not hold messages; this operation needs a queue or subscription."
                    ),
                    400,
                );
                return self.respond_failure(&pending, &failure);
            }
        };
        let reply = self.await_management(pending);
        let request = reply.request;
        let sent = match plan {
            Plan::RenewLocks(tokens) => entity.send(Command::RenewLocks { tokens, reply }).await,
            Plan::Peek {
                from,
                count,
                session_id,
            } => {
                entity
                    .send(Command::Peek {
                        sub_queue,
                        from,
                        count,
                        session_id,
                        reply,
                    })
                    .await
            }
            Plan::Schedule(messages) => {
                let messages = messages.into_iter().map(Arc::new).collect();
                entity
                    .send(Command::Send {
                        messages,
                        reply: Some(reply),
                    })
                    .await
            }
            Plan::Rules(_) => Ok(()), // handled above
            Plan::Session(session_id, operation) => {
                entity
                    .send(Command::Session {
                        session_id,
                        operation,
                        reply,
                    })
                    .await
            }
            Plan::ListSessions {
                last_updated,
                skip,
                top,
            } => {
                entity
                    .send(Command::ListSessions {
                        last_updated,
                        skip,
                        top,
                        reply,
                    })
                    .await
            }
            Plan::Cancel(sequence_numbers) => {
                entity
                    .send(Command::CancelScheduled {
                        sequence_numbers,
                        reply,
                    })
                    .await
            }
            Plan::ReceiveDeferred {
                sequence_numbers,
                mode,
            } => {
                entity
                    .send(Command::ReceiveDeferred {
                        sub_queue,
                        sequence_numbers,
                        mode,
                        reply,
                    })
                    .await
            }
            Plan::Settle(tokens, settlement) => {
                let count = tokens.len();
                let mut outcome = Ok(());
                for (index, token) in tokens.into_iter().enumerate() {
                    let reply = (index + 1 == count).then(|| reply.clone());
                    outcome = entity
                        .send(Command::Settle {
                            token,
                            settlement: settlement.clone(),
                            reply,
                        })
                        .await;
                }
                if count == 0 {
                    reply.send(Ok(Reply::Done));
                }
                outcome
            }
        };
        self.management_sent(request, sent)
    }

    /// Answers a management request with a failure at once.
    fn respond_failure(
        &mut self,
        pending: &PendingResponse,
        failure: &Failure,
    ) -> Result<(), ConnectionError> {
        let response = management::failure_response(pending.correlation.as_ref(), failure);
        self.send_response(
            pending.channel,
            pending.reply_to.as_deref(),
            Some(&pending.path),
            response,
        )
    }

    /// Registers a management request as waiting for its entity; returns where the
    /// entity's reply goes.
    fn await_management(&mut self, pending: PendingResponse) -> ReplyTo {
        let request = self.register(Pending::Management(pending));
        ReplyTo {
            sink: self.notifications.clone(),
            request,
        }
    }

    /// After handing a management request to an entity: if it could not be delivered
    /// (the entity is gone), answer the waiting request with that error.
    fn management_sent(
        &mut self,
        request: RequestId,
        sent: Result<(), EntityError>,
    ) -> Result<(), ConnectionError> {
        if let Err(error) = sent
            && let Some(Pending::Management(pending)) = self.pending.remove(&request)
        {
            let response = management::reply_response(&pending, Err(error));
            return self.send_response(
                pending.channel,
                pending.reply_to.as_deref(),
                Some(&pending.path),
                response,
            );
        }
        Ok(())
    }

    /// `schedule-message` / `cancel-scheduled-message` on a topic: the topic holds the
    /// scheduled messages and publishes them when due.
    async fn schedule_on_topic(
        &mut self,
        pending: PendingResponse,
        topic: crate::broker::topic::TopicHandle,
        plan: Plan,
    ) -> Result<(), ConnectionError> {
        let reply = self.await_management(pending);
        let request = reply.request;
        let command = match plan {
            Plan::Schedule(messages) => TopicCommand::Schedule {
                messages: messages
                    .into_iter()
                    .map(|mut message| {
                        message.user_properties = rewrite::decode_user_properties(&message);
                        Arc::new(message)
                    })
                    .collect(),
                reply,
            },
            Plan::Cancel(sequence_numbers) => TopicCommand::CancelScheduled {
                sequence_numbers,
                reply,
            },
            _ => return Ok(()),
        };
        let sent = topic.send(command).await;
        self.management_sent(request, sent)
    }

    async fn manage_rules(
        &mut self,
        pending: PendingResponse,
        operation: crate::broker::topic::RuleOperation,
    ) -> Result<(), ConnectionError> {
        let Some((topic, subscription)) = self.context.registry.subscription_topic(&pending.path)
        else {
            let failure = Failure::new(
                errors::NOT_ALLOWED,
                format!(
                    "Rules belong to subscriptions; '{}' is not a subscription.",
                    pending.path
                ),
                400,
            );
            return self.respond_failure(&pending, &failure);
        };
        let reply = self.await_management(pending);
        let request = reply.request;
        let sent = topic
            .send(TopicCommand::Rules {
                subscription,
                operation,
                reply,
            })
            .await;
        self.management_sent(request, sent)
    }

    /// Sends a response message on the response link that matches `reply_to`: a link of
    /// the same node (`$cbs`, or the management node of `path`) whose target address or
    /// name equals `reply_to`; else one in the same session; else any (§6.1).
    fn send_response(
        &mut self,
        channel: u16,
        reply_to: Option<&str>,
        path: Option<&str>,
        response: Bytes,
    ) -> Result<(), ConnectionError> {
        let mut best: Option<(u8, u16, u32)> = None;
        for (session_channel, session) in &self.sessions {
            for (handle, link) in &session.links {
                let node_matches = match (&link.kind, path) {
                    (LinkKind::CbsResponse, None) => true,
                    (LinkKind::ManagementResponse { path: link_path }, Some(path)) => {
                        link_path.eq_ignore_ascii_case(path)
                    }
                    _ => false,
                };
                if !node_matches {
                    continue;
                }
                let reply_matches = reply_to.is_some_and(|reply_to| {
                    link.target_address.as_deref() == Some(reply_to) || link.name == reply_to
                });
                let score =
                    if reply_matches { 2 } else { 0 } + u8::from(*session_channel == channel);
                if best.is_none_or(|(best_score, ..)| score > best_score) {
                    best = Some((score, *session_channel, *handle));
                }
            }
        }
        let Some((_, response_channel, handle)) = best else {
            tracing::info!(
                ?reply_to,
                "no response link for a request; response dropped"
            );
            return Ok(());
        };
        self.send_on_link(response_channel, handle, response, true, None)
    }

    /// Sends a message on a broker-sender link.
    fn send_on_link(
        &mut self,
        channel: u16,
        handle: u32,
        payload: Bytes,
        settled: bool,
        tag: Option<[u8; 16]>,
    ) -> Result<(), ConnectionError> {
        let peer_max_frame_size = self.peer_max_frame_size;
        let session = self.session(channel)?;
        let delivery_id = session.next_delivery_id;
        session.next_delivery_id = session.next_delivery_id.wrapping_add(1);
        if let Some(link) = session.links.get_mut(&handle) {
            link.delivery_count = link.delivery_count.wrapping_add(1);
            link.credit = link.credit.saturating_sub(1);
        }
        let tag = tag.unwrap_or_else(ids::unique_guid_bytes);
        let header = frame::DeliveryHeader {
            handle,
            delivery_id,
            tag: &tag,
            settled,
        };
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Ok(());
        };
        if session.queued.is_empty() && session.remote_incoming_window > 0 {
            // The common case: straight into the connection's output buffer.
            let units = frame::write_delivery(
                &mut self.output,
                channel,
                &header,
                &payload,
                peer_max_frame_size,
            );
            session.remote_incoming_window -= units as i64;
            session.next_outgoing_id = session.next_outgoing_id.wrapping_add(units);
            return Ok(());
        }
        let mut frames = BytesMut::with_capacity(payload.len() + 64);
        let units =
            frame::write_delivery(&mut frames, channel, &header, &payload, peer_max_frame_size);
        self.send_transfer_frames(channel, frames.freeze(), units)
    }

    /// Sends a delivery from an entity to its receiver link.
    pub(super) async fn deliver(&mut self, delivery: Delivery) -> Result<(), ConnectionError> {
        let Some(receiver) = delivery.receiver else {
            return Ok(());
        };
        let lock = delivery.record.lock.map(|lock| (lock.token, lock.until));
        let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
            // The link went away while this delivery was on its way: give the message back
            // untouched (no delivery counted), so a receive-and-delete message is not lost.
            if let Some(entity) = self.detached_receivers.get(&receiver) {
                let _ = entity
                    .send(Command::Return {
                        sub_queue: delivery.sub_queue,
                        record: Box::new(delivery.record),
                    })
                    .await;
            }
            return Ok(());
        };
        let mut payload = BytesMut::with_capacity(delivery.record.message.size() + 128);
        message::encode_delivery(
            DeliveryView {
                record: &delivery.record,
                lock,
            },
            &mut payload,
        );
        let settled = lock.is_none();
        let tag = lock.map(|(token, _)| ids::swap_guid_byte_order(&token.0));
        let delivery_id = self.session(channel)?.next_delivery_id;
        if let Some((token, _)) = lock {
            self.session(channel)?
                .unsettled
                .insert(delivery_id, Unsettled { handle, token });
        }
        self.send_on_link(channel, handle, payload.freeze(), settled, tag)
    }

    /// Answers a drain: delivery count advanced, credit zero.
    pub(super) fn drained(
        &mut self,
        receiver: ReceiverId,
        delivery_count: u32,
    ) -> Result<(), ConnectionError> {
        let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
            return Ok(());
        };
        let mut flow = self.session_flow(channel)?;
        if let Some(link) = self.session(channel)?.links.get_mut(&handle) {
            link.delivery_count = delivery_count;
        }
        flow.handle = Some(Handle(handle));
        flow.delivery_count = Some(delivery_count);
        flow.link_credit = Some(0);
        flow.drain = true;
        self.write(channel, Performative::Flow(flow))
    }

    /// Handles a client disposition for deliveries we sent.
    pub(super) async fn disposition(
        &mut self,
        channel: u16,
        disposition_frame: Disposition,
    ) -> Result<(), ConnectionError> {
        if disposition_frame.role != Role::Receiver {
            return Ok(()); // the client settling its own transfers: nothing to do
        }
        let first = disposition_frame.first;
        let last = disposition_frame.last.unwrap_or(first);
        let count = last.wrapping_sub(first).min(100_000);
        for offset in 0..=count {
            let delivery_id = first.wrapping_add(offset);
            let Some(unsettled) = self.session(channel)?.unsettled.remove(&delivery_id) else {
                continue;
            };
            self.settle_delivery(channel, delivery_id, unsettled, &disposition_frame)
                .await?;
        }
        Ok(())
    }

    async fn settle_delivery(
        &mut self,
        channel: u16,
        delivery_id: u32,
        unsettled: Unsettled,
        disposition_frame: &Disposition,
    ) -> Result<(), ConnectionError> {
        let entity = match self
            .session(channel)?
            .links
            .get(&unsettled.handle)
            .map(|link| &link.kind)
        {
            Some(LinkKind::EntityReceiver { entity, .. }) => entity.clone(),
            _ => return Ok(()),
        };
        let (settlement, echo) = settlement_for(disposition_frame.state.as_ref());
        let reply = if disposition_frame.settled {
            None
        } else {
            let request = self.register(Pending::Settle {
                channel,
                delivery_id,
                echo,
            });
            Some(ReplyTo {
                sink: self.notifications.clone(),
                request,
            })
        };
        let token: LockToken = unsettled.token;
        let sent = entity
            .send(Command::Settle {
                token,
                settlement,
                reply: reply.clone(),
            })
            .await;
        if let (Err(error), Some(reply)) = (sent, reply) {
            self.pending.remove(&reply.request);
            let failure = errors::entity_failure(&error);
            self.write(
                channel,
                disposition(Role::Sender, delivery_id, rejected(&failure)),
            )?;
        }
        Ok(())
    }

    /// Completes a pending request with the entity's reply.
    pub(super) fn reply(
        &mut self,
        pending: Pending,
        result: Result<Reply, EntityError>,
    ) -> Result<(), ConnectionError> {
        match pending {
            Pending::Enqueue {
                channel,
                delivery_id,
            } => {
                if !self.sessions.contains_key(&channel) {
                    return Ok(());
                }
                let state = match result {
                    Ok(_) => DeliveryState::Accepted(Accepted {}),
                    Err(error) => {
                        let failure = errors::entity_failure(&error);
                        tracing::info!(condition = failure.condition, description = %failure.description, "send refused");
                        rejected(&failure)
                    }
                };
                self.write(channel, disposition(Role::Receiver, delivery_id, state))
            }
            Pending::Settle {
                channel,
                delivery_id,
                echo,
            } => {
                if !self.sessions.contains_key(&channel) {
                    return Ok(());
                }
                let state = match result {
                    Ok(_) => echo,
                    Err(error) => rejected(&errors::entity_failure(&error)),
                };
                self.write(channel, disposition(Role::Sender, delivery_id, state))
            }
            Pending::Management(pending) => {
                let response = management::reply_response(&pending, result);
                let path = pending.path.clone();
                self.send_response(
                    pending.channel,
                    pending.reply_to.as_deref(),
                    Some(&path),
                    response,
                )
            }
        }
    }
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
