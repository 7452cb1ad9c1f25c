//! Dispositions: client settlements of our deliveries (mapped to Service Bus settlements
//! by [`crate::amqp::outcome`] and echoed as the SDKs require, §5.2), and our answers to
//! the client's transfers and settlements once the entity replied.

use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Outcome, Rejected};
use fe2o3_amqp_types::performatives::{Disposition, Performative};

use super::connection::{Connection, ConnectionError, Pending};
use super::links::LinkKind;
use super::log_text::LogText;
use super::session::Unsettled;
use crate::amqp::errors::{self, Failure};
use crate::amqp::management::{self};
use crate::broker::entity::{Command, Reply, ReplyTo};
use crate::broker::types::{EntityError, LockToken};

pub(super) fn disposition(role: Role, delivery_id: u32, state: DeliveryState) -> Performative {
    Performative::Disposition(Disposition {
        role,
        first: delivery_id,
        last: None,
        settled: true,
        state: Some(state),
        batchable: false,
    })
}

pub(super) fn rejected(failure: &Failure) -> DeliveryState {
    DeliveryState::Rejected(Rejected {
        error: Some(failure.to_error()),
    })
}

impl Connection {
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
        // Delivery ids are serial numbers (RFC 1982): a range whose end lies before its
        // start is malformed, not a request to walk four billion ids.
        let span = last.wrapping_sub(first);
        if (span as i32) < 0 {
            return Err(ConnectionError::protocol(
                errors::INVALID_FIELD,
                format!("disposition range {first}..={last} ends before it starts"),
            ));
        }
        // Settle only deliveries that exist: walk the range or the unsettled map, whichever
        // is smaller, so a wide range costs no more than the deliveries it names.
        let session = self.session(channel)?;
        let mut delivery_ids: Vec<u32> = if span as usize >= session.unsettled.len() {
            session
                .unsettled
                .keys()
                .copied()
                .filter(|id| id.wrapping_sub(first) <= span)
                .collect()
        } else {
            (0..=span)
                .map(|offset| first.wrapping_add(offset))
                .filter(|id| session.unsettled.contains_key(id))
                .collect()
        };
        delivery_ids.sort_unstable_by_key(|id| id.wrapping_sub(first));
        for delivery_id in delivery_ids {
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
        if let Some(DeliveryState::TransactionalState(state)) = &disposition_frame.state {
            // Held by the transaction until its discharge (rule TXN-1).
            let txn_id = bytes::Bytes::from(state.txn_id.to_vec());
            let outcome = state.outcome.clone().map(|outcome| match outcome {
                Outcome::Accepted(accepted) => DeliveryState::Accepted(accepted),
                Outcome::Rejected(rejected) => DeliveryState::Rejected(rejected),
                Outcome::Released(released) => DeliveryState::Released(released),
                Outcome::Modified(modified) => DeliveryState::Modified(modified),
                Outcome::Declared(declared) => DeliveryState::Declared(declared),
            });
            let (settlement, echo) = crate::amqp::outcome::settlement_for(outcome.as_ref());
            let answer = self.transactional_settle(
                &txn_id,
                channel,
                delivery_id,
                unsettled,
                entity,
                settlement,
                echo,
            );
            if disposition_frame.settled {
                return Ok(());
            }
            return self.write(channel, disposition(Role::Sender, delivery_id, answer));
        }
        let (settlement, echo) =
            crate::amqp::outcome::settlement_for(disposition_frame.state.as_ref());
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
                        tracing::info!(condition = failure.condition, description = %LogText(&failure.description), "send refused");
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
            Pending::Discharge {
                channel,
                delivery_id,
                settled,
                deliveries,
            } => self.discharged(
                channel,
                delivery_id,
                settled,
                deliveries,
                result.map(|_| ()),
            ),
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
