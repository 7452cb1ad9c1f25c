//! Dispositions: client settlements of our deliveries (mapped to Service Bus settlements
//! by [`crate::amqp::outcome`] and echoed as the SDKs require, §5.2), and our answers to
//! the client's transfers and settlements once the entity replied.

use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{DeliveryState, Outcome, Rejected};
use fe2o3_amqp_types::performatives::{Disposition, Performative};

use super::connection::{Connection, ConnectionError, Pending};
use super::frame;
use super::links::LinkKind;
use super::log_text::LogText;
use super::session::Unsettled;
use crate::amqp::errors::{self, Failure};
use crate::amqp::management::{self};
use crate::broker::entity::{Command, EntityHandle, Reply, ReplyTo};
use crate::broker::types::{EntityError, LockToken};

/// At most this many settled deliveries go to an entity in one command (a disposition may
/// name every delivery the client holds; the entity's turn stays short).
const SETTLED_PER_COMMAND: usize = 1024;

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

/// An accepted disposition written by [`Connection::write_accepted`] that is still the last
/// frame of the connection's output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcceptedRun {
    channel: u16,
    /// The output's length just after the frame.
    end: usize,
    /// The last delivery id it settles.
    last: u32,
}

/// Bytes from the `last` field's value to the end of an accepted disposition frame: the
/// value (4), `settled` (1) and the accepted state (4).
const LAST_FROM_END: usize = 9;

/// A settled `disposition` accepting the client's deliveries `first..=last` on `channel`
/// (role receiver; uints in their 4-byte form so that `last` can be rewritten in place).
fn accepted_frame(channel: u16, first: u32, last: u32) -> [u8; 30] {
    let mut frame = [0u8; 30];
    frame[..8].copy_from_slice(&frame::frame_header(30, frame::FRAME_TYPE_AMQP, channel));
    // Described by 0x15 (disposition): a list8 of 17 bytes holding 5 fields.
    frame[8..14].copy_from_slice(&[0x00, 0x53, 0x15, 0xc0, 17, 5]);
    frame[14] = 0x41; // role: receiver
    frame[15] = 0x70;
    frame[16..20].copy_from_slice(&first.to_be_bytes());
    frame[20] = 0x70;
    frame[21..25].copy_from_slice(&last.to_be_bytes());
    frame[25] = 0x41; // settled
    frame[26..30].copy_from_slice(&[0x00, 0x53, 0x24, 0x45]); // accepted, no fields
    frame
}

/// [`Connection::write_accepted`] on an output and the run last written to it.
fn write_accepted(
    output: &mut bytes::BytesMut,
    last_run: &mut Option<AcceptedRun>,
    channel: u16,
    delivery_id: u32,
) {
    if let Some(run) = last_run
        && run.channel == channel
        && run.end == output.len()
        && run.last.wrapping_add(1) == delivery_id
    {
        let at = run.end - LAST_FROM_END;
        output[at..at + 4].copy_from_slice(&delivery_id.to_be_bytes());
        run.last = delivery_id;
        return;
    }
    output.extend_from_slice(&accepted_frame(channel, delivery_id, delivery_id));
    *last_run = Some(AcceptedRun {
        channel,
        end: output.len(),
        last: delivery_id,
    });
}

pub(super) fn rejected(failure: &Failure) -> DeliveryState {
    DeliveryState::Rejected(Rejected {
        error: Some(failure.to_error()),
    })
}

impl Connection {
    /// Settles the client's delivery `delivery_id` as accepted. Written by hand (issue 16:
    /// the general encoder allocated for every message a client sent), and merged into the
    /// accepted disposition written just before when that one ends the output, is on the
    /// same session and its range ends just before this id: a sender with many transfers in
    /// flight gets one frame per run of accepted deliveries (AMQP 1.0 §2.7.6, first..last).
    pub(super) fn write_accepted(&mut self, channel: u16, delivery_id: u32) {
        write_accepted(
            &mut self.output,
            &mut self.accepted_run,
            channel,
            delivery_id,
        );
    }

    /// The entity of receiver link `handle` on session `channel`, if it is one's.
    fn receiver_entity(&self, channel: u16, handle: u32) -> Option<&EntityHandle> {
        match &self.sessions.get(&channel)?.links.get(&handle)?.kind {
            LinkKind::EntityReceiver { entity, .. } => Some(entity),
            _ => None,
        }
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
        if disposition_frame.settled
            && !matches!(
                disposition_frame.state,
                Some(DeliveryState::TransactionalState(_))
            )
        {
            return self
                .settle_alike(channel, delivery_ids, disposition_frame.state.as_ref())
                .await;
        }
        for delivery_id in delivery_ids {
            let Some(unsettled) = self.session(channel)?.unsettled.remove(&delivery_id) else {
                continue;
            };
            self.settle_delivery(channel, delivery_id, unsettled, &disposition_frame)
                .await?;
        }
        Ok(())
    }

    /// Deliveries the client settled first, outside a transaction, all with one outcome:
    /// the locks of consecutive deliveries on one link go to its entity in one command, in
    /// order, at most [`SETTLED_PER_COMMAND`] at a time (issue 16: a command per settled
    /// message). Nobody waits for the outcome, as for one such delivery.
    async fn settle_alike(
        &mut self,
        channel: u16,
        delivery_ids: Vec<u32>,
        state: Option<&DeliveryState>,
    ) -> Result<(), ConnectionError> {
        let (settlement, _) = crate::amqp::outcome::settlement_for(state);
        let mut link = None;
        let mut tokens = Vec::with_capacity(delivery_ids.len().min(SETTLED_PER_COMMAND));
        for delivery_id in delivery_ids {
            let Some(unsettled) = self.session(channel)?.unsettled.remove(&delivery_id) else {
                continue;
            };
            if let Some(handle) = link
                && (handle != unsettled.handle || tokens.len() == SETTLED_PER_COMMAND)
            {
                let tokens = std::mem::take(&mut tokens);
                self.settle_on_link(channel, handle, tokens, settlement.clone())
                    .await;
            }
            link = Some(unsettled.handle);
            tokens.push(unsettled.token);
        }
        if let Some(handle) = link {
            self.settle_on_link(channel, handle, tokens, settlement)
                .await;
        }
        Ok(())
    }

    /// Hands the locks of deliveries on receiver link `handle` to its entity to settle.
    async fn settle_on_link(
        &mut self,
        channel: u16,
        handle: u32,
        tokens: Vec<LockToken>,
        settlement: crate::broker::types::Settlement,
    ) {
        if let Some(entity) = self.receiver_entity(channel, handle) {
            // An entity gone meanwhile has no locks left to settle.
            let _ = entity.send(Command::SettleAll { tokens, settlement }).await;
        }
    }

    async fn settle_delivery(
        &mut self,
        channel: u16,
        delivery_id: u32,
        unsettled: Unsettled,
        disposition_frame: &Disposition,
    ) -> Result<(), ConnectionError> {
        let Some(entity) = self.receiver_entity(channel, unsettled.handle) else {
            return Ok(());
        };
        if let Some(DeliveryState::TransactionalState(state)) = &disposition_frame.state {
            let entity = entity.clone();
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
        // The entity is borrowed from the link and the reply moved into the command (issue
        // 16: cloning both counted references up and down for every settled message).
        let request = reply.as_ref().map(|reply| reply.request);
        let command = Command::Settle {
            token,
            settlement,
            reply,
        };
        let sent = match self.receiver_entity(channel, unsettled.handle) {
            Some(entity) => entity.send(command).await,
            None => Ok(()),
        };
        if let (Err(error), Some(request)) = (sent, request) {
            self.pending.remove(&request);
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
                match result {
                    Ok(_) => {
                        self.write_accepted(channel, delivery_id);
                        Ok(())
                    }
                    Err(error) => {
                        let failure = errors::entity_failure(&error);
                        tracing::info!(condition = failure.condition, description = %LogText(&failure.description), "send refused");
                        let state = rejected(&failure);
                        self.write(channel, disposition(Role::Receiver, delivery_id, state))
                    }
                }
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

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use fe2o3_amqp_types::messaging::Accepted;

    use super::*;

    /// The dispositions in `output`: (channel, first, last), each checked to be a settled
    /// acceptance by the receiver.
    fn accepted_ranges(mut output: BytesMut) -> Vec<(u16, u32, Option<u32>)> {
        let mut ranges = Vec::new();
        while let Some(raw) = frame::take_frame(&mut output, 1024).expect("a frame") {
            let (Performative::Disposition(disposition), _) =
                frame::decode_performative(&raw.body).expect("decodes")
            else {
                panic!("not a disposition");
            };
            assert_eq!(disposition.role, Role::Receiver);
            assert!(disposition.settled);
            assert!(matches!(
                disposition.state,
                Some(DeliveryState::Accepted(Accepted {}))
            ));
            ranges.push((raw.channel, disposition.first, disposition.last));
        }
        ranges
    }

    #[test]
    fn accepted_deliveries_in_a_row_share_one_disposition() {
        let mut output = BytesMut::new();
        let mut run = None;
        for id in [7, 8, 9] {
            write_accepted(&mut output, &mut run, 0, id);
        }
        // Not next in line, another session, something written after: a frame each.
        write_accepted(&mut output, &mut run, 0, 11);
        write_accepted(&mut output, &mut run, 3, 12);
        output.extend_from_slice(&accepted_frame(0, 100, 100));
        write_accepted(&mut output, &mut run, 3, 13);
        // Across the serial-number wrap.
        write_accepted(&mut output, &mut run, 1, u32::MAX);
        write_accepted(&mut output, &mut run, 1, 0);
        assert_eq!(
            accepted_ranges(output),
            [
                (0, 7, Some(9)),
                (0, 11, Some(11)),
                (3, 12, Some(12)),
                (0, 100, Some(100)),
                (3, 13, Some(13)),
                (1, u32::MAX, Some(0)),
            ]
        );
    }

    #[test]
    fn a_flushed_run_is_not_extended() {
        let mut output = BytesMut::new();
        let mut run = None;
        write_accepted(&mut output, &mut run, 0, 1);
        // What the connection does once it wrote its output to the socket.
        let _written = output.split();
        run = None;
        write_accepted(&mut output, &mut run, 0, 2);
        assert_eq!(accepted_ranges(output), [(0, 2, Some(2))]);
    }
}
