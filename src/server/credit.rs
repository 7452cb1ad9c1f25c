//! Link credit: what a client sender is granted, and a peer's `flow` (the session window,
//! then a receiver's credit handed to its entity, or a response link's credit).

use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::{Flow, Performative};

use super::connection::{Connection, ConnectionError};
use super::links::{LinkKind, SENDER_CREDIT};
use crate::amqp::errors;
use crate::broker::entity::Command;

impl Connection {
    /// Gives a client sender credit (right after attach, then whenever half is used).
    pub(super) fn grant_sender_credit(
        &mut self,
        channel: u16,
        handle: u32,
    ) -> Result<(), ConnectionError> {
        let mut flow = self.session_flow(channel)?;
        let session = self.session(channel)?;
        let Some(link) = session.links.get_mut(&handle) else {
            return Ok(());
        };
        link.credit = SENDER_CREDIT;
        flow.handle = Some(Handle(handle));
        flow.delivery_count = Some(link.delivery_count);
        flow.link_credit = Some(SENDER_CREDIT);
        self.write(channel, Performative::Flow(flow))
    }

    /// Handles a peer `flow`: session window, then link credit.
    pub(super) async fn flow(&mut self, channel: u16, flow: Flow) -> Result<(), ConnectionError> {
        self.session_flow_received(channel, &flow)?;
        let Some(handle) = flow.handle.map(|handle| handle.0) else {
            if flow.echo {
                let reply = self.session_flow(channel)?;
                self.write(channel, Performative::Flow(reply))?;
            }
            return Ok(());
        };
        let draining = self.draining;
        let session = self.session(channel)?;
        let Some(link) = session.links.get_mut(&handle) else {
            // A flow crossing the detach of its link (a client that gives credit while the
            // broker detaches it, the link moved to another node): nothing to do. Closing
            // the connection for it would cut off the client's other links.
            tracing::debug!(handle, "a flow for a link no longer attached is ignored");
            return Ok(());
        };
        let credit = flow.link_credit.unwrap_or(0);
        let limit = flow.delivery_count.unwrap_or(0).wrapping_add(credit);
        match &link.kind {
            LinkKind::EntityReceiver { receiver, entity } => {
                // Link credit is a full uint (§2.7.4): what we sent that the client has not
                // seen yet uses part of it; never compare in wrapping limit space.
                let unseen = flow
                    .delivery_count
                    .map(|count| link.delivery_count.wrapping_sub(count))
                    .filter(|unseen| (*unseen as i32) > 0)
                    .unwrap_or(0);
                link.credit = credit.saturating_sub(unseen);
                let command = Command::Credit {
                    receiver: *receiver,
                    delivery_count: flow.delivery_count,
                    // A held-back link gets its credit back when it can send again.
                    // (nor does any link while the broker shuts down).
                    link_credit: if link.blocked || draining { 0 } else { credit },
                    drain: flow.drain,
                };
                let entity = entity.clone();
                if let Err(error) = entity.send(command).await {
                    let failure = errors::entity_failure(&error);
                    return self
                        .detach_with_error(channel, handle, failure.to_error())
                        .await;
                }
            }
            LinkKind::CbsResponse | LinkKind::ManagementResponse { .. } => {
                link.credit = limit.wrapping_sub(link.delivery_count);
            }
            _ => {
                if flow.echo {
                    self.grant_sender_credit(channel, handle)?;
                }
            }
        }
        Ok(())
    }
}
