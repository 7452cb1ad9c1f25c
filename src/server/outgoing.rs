//! Broker → client: deliveries from entities, drain replies, and the one function that
//! writes a message on a broker-sender link within the peer's session window.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::Performative;

use super::connection::{Connection, ConnectionError};
use super::frame;
use super::session::Unsettled;
use crate::amqp::ids;
use crate::amqp::message::{self, DeliveryView};
use crate::broker::entity::{Command, Delivery};
use crate::broker::types::ReceiverId;

impl Connection {
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
}
