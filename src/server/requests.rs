//! Request/response nodes: `$cbs` (put-token) and `$management` requests parsed from
//! client transfers, routed to entities, and their responses sent on the matching
//! response link (§6.1 of the wire contract).

use bytes::Bytes;
use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState};

use super::authorization::{Access, management_path, management_right, unauthorized};
use super::connection::{Connection, ConnectionError, Pending};
use super::dispositions::{disposition, rejected};
use super::links::LinkKind;
use super::log_text::LogText;
use crate::amqp::errors::{self, Failure};
use crate::amqp::management::{self, PendingResponse, Plan};
use crate::amqp::{cbs, request};
use crate::broker::entity::{Command, Reply, ReplyTo, RequestId};
use crate::broker::topic::TopicCommand;
use crate::broker::types::{EntityError, SubQueue};

impl Connection {
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

    pub(super) fn cbs_request(
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
            self.add_grant(grant);
        }
        self.send_response(channel, request.reply_to.as_deref(), None, outcome.response)
    }

    /// A peek that names no session but is made for a session receiver link of this
    /// connection (`associated-link-name`) peeks that link's session, as the service does.
    fn scope_to_associated_session(&self, associated_link: Option<&str>, plan: Plan) -> Plan {
        let Plan::Peek {
            from,
            count,
            session_id: None,
        } = plan
        else {
            return plan;
        };
        let session_id = associated_link
            .and_then(|name| {
                self.sessions
                    .values()
                    .flat_map(|session| session.links.values())
                    .find(|link| link.name == name && link.session_id.is_some())
            })
            .and_then(|link| link.session_id.clone());
        Plan::Peek {
            from,
            count,
            session_id,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn management_request(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        payload: &Bytes,
        path: String,
        sub_queue: SubQueue,
        txn_id: Option<Bytes>,
    ) -> Result<(), ConnectionError> {
        let Some(request) = self.accept_request(channel, delivery_id, settled, payload)? else {
            return Ok(());
        };
        let plan = management::plan(&request);
        let associated_link = request
            .property_text("associated-link-name")
            .map(str::to_owned);
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
        let right = management_right(&plan);
        // Checked against the management node itself: the SDKs put their token for
        // `<entity>/$management` (a token for the entity covers it too).
        let node = management_path(&path, sub_queue);
        if let Access::Denied = self.access(&node, right) {
            tracing::info!(path = %LogText(&node), ?right, "management operation refused");
            return self.respond_failure(&pending, &unauthorized(right, &node));
        }
        if txn_id.is_some() && !matches!(plan, Plan::Settle(..)) {
            let failure = Failure::new(
                errors::NOT_IMPLEMENTED,
                "Only update-disposition can be part of a transaction on this broker; send this request outside the transaction.",
                501,
            );
            return self.respond_failure(&pending, &failure);
        }
        if self.draining && !plan.finishes_held_work() {
            // The connection closes once its client settled what it holds: new work is
            // refused with a condition the SDKs retry (on a new connection), and answered
            // rather than left in flight when the connection closes (the Python SDK takes a
            // management link closed under a request as a failure it does not retry).
            let failure = Failure::new(
                errors::SERVER_BUSY,
                "This connection is closing (the broker is stopping or handing its clients to another node); retry on a new connection.",
                503,
            );
            return self.respond_failure(&pending, &failure);
        }
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
        if let (Some(txn_id), Plan::Settle(tokens, settlement)) = (&txn_id, &plan) {
            // Settlements by lock token join the transaction.
            let result = self.transactional_management_settle(
                txn_id,
                entity,
                tokens.clone(),
                settlement.clone(),
            );
            return match result {
                Ok(()) => {
                    let response = management::reply_response(
                        &pending,
                        Ok(crate::broker::entity::Reply::Done),
                    );
                    self.send_response(channel, pending.reply_to.as_deref(), Some(&path), response)
                }
                Err(failure) => self.respond_failure(&pending, &failure),
            };
        }
        let plan = self.scope_to_associated_session(associated_link.as_deref(), plan);
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
                let messages = messages.into_iter().collect();
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
            Plan::DeleteMessages {
                count,
                before,
                session_id,
            } => {
                entity
                    .send(Command::Purge {
                        sub_queue,
                        before: Some(before),
                        session_id,
                        max: count,
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
                messages: messages.into_iter().collect(),
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
    pub(super) fn send_response(
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
}
