//! Broker → client: deliveries from entities, drain replies, and the one function that
//! writes a message on a broker-sender link within the peer's session window.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::Performative;

use super::connection::{Connection, ConnectionError};
use super::frame;
use super::links::LinkKind;
use super::session::Unsettled;
use crate::amqp::message::{self, DeliveryView};
use crate::broker::entity::{Command, Delivery};
use crate::broker::types::ReceiverId;
use crate::encoding::ids;

/// Output bytes waiting for the socket above which deliveries are held back at their
/// entity instead of piling up here (the peer is not reading fast enough).
pub(super) const OUTPUT_HIGH_WATER: usize = 4 * 1024 * 1024;

impl Connection {
    /// Numbers the next delivery on a broker-sender link and counts it against the link's
    /// credit; the tag is the given one or a fresh GUID.
    fn begin_delivery(
        &mut self,
        channel: u16,
        handle: u32,
        tag: Option<[u8; 16]>,
    ) -> Result<(u32, [u8; 16]), ConnectionError> {
        let session = self.session(channel)?;
        let delivery_id = session.next_delivery_id;
        session.next_delivery_id = session.next_delivery_id.wrapping_add(1);
        if let Some(link) = session.links.get_mut(&handle) {
            link.delivery_count = link.delivery_count.wrapping_add(1);
            link.credit = link.credit.saturating_sub(1);
        }
        Ok((delivery_id, tag.unwrap_or_else(ids::unique_guid_bytes)))
    }

    /// Sends a message on a broker-sender link.
    pub(super) fn send_on_link(
        &mut self,
        channel: u16,
        handle: u32,
        payload: Bytes,
        settled: bool,
        tag: Option<[u8; 16]>,
    ) -> Result<(), ConnectionError> {
        let peer_max_frame_size = self.peer_max_frame_size;
        let (delivery_id, tag) = self.begin_delivery(channel, handle, tag)?;
        let header = frame::DeliveryHeader {
            handle,
            delivery_id,
            tag: &tag,
            settled,
        };
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Ok(());
        };
        if session.may_send_now() {
            // The common case: straight into the connection's output buffer.
            let units = frame::write_delivery(
                &mut self.output,
                channel,
                &header,
                &payload,
                peer_max_frame_size,
            );
            session.count_sent(units);
            return Ok(());
        }
        let mut frames = BytesMut::with_capacity(payload.len() + 64);
        let units =
            frame::write_delivery(&mut frames, channel, &header, &payload, peer_max_frame_size);
        self.send_transfer_frames(channel, frames.freeze(), units)
    }

    /// Sends a delivery whose payload `encode` writes: straight into the connection's output
    /// buffer behind its transfer performative when the session window is open (one copy of
    /// the message on the way out, issue 16), split into frames afterwards only when it
    /// outgrows the peer's frame size; through [`Self::send_on_link`] otherwise.
    fn send_encoded_on_link(
        &mut self,
        channel: u16,
        handle: u32,
        settled: bool,
        tag: Option<[u8; 16]>,
        encode: impl FnOnce(&mut BytesMut),
    ) -> Result<(), ConnectionError> {
        let peer_max_frame_size = self.peer_max_frame_size;
        let session = self.session(channel)?;
        if !session.may_send_now() {
            let mut payload = BytesMut::new();
            encode(&mut payload);
            return self.send_on_link(channel, handle, payload.freeze(), settled, tag);
        }
        let (delivery_id, tag) = self.begin_delivery(channel, handle, tag)?;
        let header = frame::DeliveryHeader {
            handle,
            delivery_id,
            tag: &tag,
            settled,
        };
        let start = frame::begin_frame(&mut self.output, frame::FRAME_TYPE_AMQP, channel);
        frame::write_transfer_performative(&mut self.output, &header, true, false);
        let payload_at = self.output.len();
        encode(&mut self.output);
        let max_frame_size = peer_max_frame_size.max(frame::MIN_MAX_FRAME_SIZE) as usize;
        let units = if self.output.len() - start <= max_frame_size {
            frame::end_frame(&mut self.output, start);
            1
        } else {
            let payload = self.output.split_off(payload_at);
            self.output.truncate(start);
            frame::write_delivery(
                &mut self.output,
                channel,
                &header,
                &payload,
                peer_max_frame_size,
            )
        };
        self.session(channel)?.count_sent(units);
        Ok(())
    }

    /// Sends a delivery from an entity to its receiver link.
    pub(super) async fn deliver(&mut self, delivery: Delivery) -> Result<(), ConnectionError> {
        let Some(receiver) = delivery.receiver else {
            return Ok(());
        };
        let lock = delivery.lock.map(|lock| (lock.token, lock.until));
        let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
            // The link went away while this delivery was on its way: give the message back
            // untouched (no delivery counted), so a receive-and-delete message is not lost.
            if let Some(entity) = self.detached_receivers.get(&receiver) {
                let _ = entity
                    .send(Command::Return {
                        receiver: None,
                        sub_queue: delivery.sub_queue,
                        record: Box::new(delivery.record),
                        lock: delivery.lock,
                    })
                    .await;
            }
            return Ok(());
        };
        if self.cannot_send(channel, handle) {
            return self.hold_back(channel, handle, receiver, delivery).await;
        }
        if let Some(latency) = self
            .sessions
            .get(&channel)
            .and_then(|session| session.links.get(&handle))
            .and_then(|link| link.metrics.latency.as_ref())
        {
            let now = self.batch_now.unwrap_or_else(|| self.context.clock.now());
            let waited = now.0.saturating_sub(delivery.record.enqueued_time().0);
            latency.observe(waited.max(0) as f64 / 1000.0);
        }
        let settled = lock.is_none();
        let tag = lock.map(|(token, _)| ids::swap_guid_byte_order(&token.0));
        let delivery_id = self.session(channel)?.next_delivery_id;
        if let Some((token, _)) = lock {
            self.session(channel)?
                .unsettled
                .insert(delivery_id, Unsettled { handle, token });
        }
        self.output_room(delivery.record.message.encoded_size() + 256);
        self.send_encoded_on_link(channel, handle, settled, tag, |output| {
            message::encode_delivery(
                DeliveryView {
                    record: &delivery.record,
                    lock,
                    lock_token: true,
                },
                output,
            )
        })
    }

    /// Whether a delivery to this link would not reach the socket now: the peer's session
    /// window is closed, or the peer is not reading what we already have for it.
    fn cannot_send(&mut self, channel: u16, handle: u32) -> bool {
        if self.output_len() >= OUTPUT_HIGH_WATER {
            return true;
        }
        let Some(session) = self.sessions.get(&channel) else {
            return true;
        };
        session.remote_incoming_window <= 0
            || !session.queued.is_empty()
            || session.links.get(&handle).is_none_or(|link| link.blocked)
    }

    /// A delivery that cannot be written goes back to the entity untouched — a transfer
    /// that never left counts as no delivery attempt (issue 10, item 4) — and the link's
    /// credit at the entity is withdrawn until [`Self::unblock_receivers`] restores it.
    async fn hold_back(
        &mut self,
        channel: u16,
        handle: u32,
        receiver: ReceiverId,
        delivery: Delivery,
    ) -> Result<(), ConnectionError> {
        let Some(link) = self
            .sessions
            .get_mut(&channel)
            .and_then(|session| session.links.get_mut(&handle))
        else {
            return Ok(());
        };
        let LinkKind::EntityReceiver { entity, .. } = &link.kind else {
            return Ok(());
        };
        let entity = entity.clone();
        if !link.blocked {
            link.blocked = true;
            link.fence_pending = true;
            self.receivers_blocked = true;
            let _ = entity
                .send(Command::Credit {
                    receiver,
                    delivery_count: Some(link.delivery_count),
                    link_credit: 0,
                    drain: false,
                })
                .await;
            let _ = entity.send(Command::Fence { receiver }).await;
        }
        let _ = entity
            .send(Command::Return {
                receiver: Some(receiver),
                sub_queue: delivery.sub_queue,
                record: Box::new(delivery.record),
                lock: delivery.lock,
            })
            .await;
        Ok(())
    }

    /// Shutdown: every receiver link stops taking messages (its credit at the entity is
    /// withdrawn; deliveries already on their way go back), while what the receivers
    /// hold can still be settled.
    pub(super) async fn start_draining(&mut self) {
        self.draining = true;
        let mut withdrawals = Vec::new();
        for session in self.sessions.values_mut() {
            for link in session.links.values_mut() {
                if let LinkKind::EntityReceiver { receiver, entity } = &link.kind {
                    link.blocked = true;
                    withdrawals.push((
                        entity.clone(),
                        Command::Credit {
                            receiver: *receiver,
                            delivery_count: Some(link.delivery_count),
                            link_credit: 0,
                            drain: false,
                        },
                    ));
                }
            }
        }
        for (entity, command) in withdrawals {
            let _ = entity.send(command).await;
        }
    }

    /// Whether the client holds no delivery of ours unsettled and no answer is pending.
    pub(super) fn nothing_unsettled(&self) -> bool {
        self.pending.is_empty()
            && self.sends_unanswered == 0
            && self
                .sessions
                .values()
                .all(|session| session.unsettled.is_empty())
    }

    /// Gives held-back receiver links their credit again once their session window is
    /// open and the output has drained.
    pub(super) async fn unblock_receivers(&mut self) {
        if self.draining || !self.receivers_blocked || self.output_len() >= OUTPUT_HIGH_WATER / 2 {
            return;
        }
        let mut still_blocked = false;
        let mut grants = Vec::new();
        for session in self.sessions.values_mut() {
            let open = session.remote_incoming_window > 0 && session.queued.is_empty();
            for link in session.links.values_mut().filter(|link| link.blocked) {
                if !open || link.fence_pending {
                    still_blocked = true;
                    continue;
                }
                link.blocked = false;
                if let LinkKind::EntityReceiver { receiver, entity } = &link.kind {
                    grants.push((
                        entity.clone(),
                        Command::Credit {
                            receiver: *receiver,
                            delivery_count: Some(link.delivery_count),
                            link_credit: link.credit,
                            drain: false,
                        },
                    ));
                }
            }
        }
        self.receivers_blocked = still_blocked;
        for (entity, command) in grants {
            let _ = entity.send(command).await;
        }
    }

    /// The entity's answer to a fence: the link may be given credit again.
    pub(super) fn fenced(&mut self, receiver: ReceiverId) {
        if let Some(&(channel, handle)) = self.receivers.get(&receiver)
            && let Some(link) = self
                .sessions
                .get_mut(&channel)
                .and_then(|session| session.links.get_mut(&handle))
        {
            link.fence_pending = false;
        }
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
}
