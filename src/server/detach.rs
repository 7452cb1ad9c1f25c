//! Detaching links: at the client's request, with an error the broker chose, and every
//! link of a closing connection; the entity forgets each receiver that goes.

use fe2o3_amqp_types::definitions::{Error as AmqpError, Handle};
use fe2o3_amqp_types::performatives::{Detach, Performative};

use super::connection::{Connection, ConnectionError};
use super::links::{Link, LinkKind};
use super::session::unattached_handle;
use crate::broker::entity::{Command, EntityHandle};
use crate::broker::types::ReceiverId;

impl Connection {
    /// Detaches a link at the client's request.
    pub(super) async fn detach(
        &mut self,
        channel: u16,
        detach: Detach,
    ) -> Result<(), ConnectionError> {
        let handle = detach.handle.0;
        let link = self.session(channel)?.links.remove(&handle);
        let Some(link) = link else {
            return Err(unattached_handle(handle));
        };
        let refused = matches!(link.kind, LinkKind::Refused);
        self.release_link(link).await;
        if !refused {
            self.write(
                channel,
                Performative::Detach(Detach {
                    handle: Handle(handle),
                    closed: true,
                    error: None,
                }),
            )?;
        }
        Ok(())
    }

    /// Detaches a link at the broker's initiative with an error.
    pub(super) async fn detach_with_error(
        &mut self,
        channel: u16,
        handle: u32,
        error: AmqpError,
    ) -> Result<(), ConnectionError> {
        let link = self.session(channel)?.links.remove(&handle);
        if let Some(mut link) = link {
            link.authorization = None;
            link.kind = match link.kind {
                LinkKind::EntityReceiver { receiver, entity } => {
                    self.forget_receiver(receiver, entity).await;
                    LinkKind::Refused
                }
                LinkKind::Coordinator { id } => {
                    self.coordinator_closed(id);
                    LinkKind::Refused
                }
                _ => LinkKind::Refused,
            };
            self.session(channel)?.links.insert(handle, link);
        }
        self.write(
            channel,
            Performative::Detach(Detach {
                handle: Handle(handle),
                closed: true,
                error: Some(error),
            }),
        )
    }

    /// Forgets a link at its entity.
    pub(super) async fn release_link(&mut self, link: Link) {
        if let Some(partial) = &link.partial {
            self.partial_bytes -= partial.payload.len();
        }
        match link.kind {
            LinkKind::EntityReceiver { receiver, entity } => {
                self.forget_receiver(receiver, entity).await;
            }
            LinkKind::Coordinator { id } => self.coordinator_closed(id),
            _ => {}
        }
    }

    /// Detaches a receiver at its entity. Until the entity confirms
    /// ([`Notification::ReceiverDetached`](crate::broker::entity::Notification)), deliveries
    /// still on their way are returned to it untouched, so the map stays as small as the
    /// number of detaches in flight.
    async fn forget_receiver(&mut self, receiver: ReceiverId, entity: EntityHandle) {
        self.receivers.remove(&receiver);
        self.deferred_attaches.remove(&receiver);
        if entity
            .send(Command::DetachReceiver { receiver })
            .await
            .is_ok()
        {
            self.detached_receivers.insert(receiver, entity);
        }
    }

    /// Detaches every receiver of the connection at its entity (connection end).
    pub(super) async fn detach_all(&mut self) {
        let sessions: Vec<_> = self.sessions.drain().collect();
        for (_, session) in sessions {
            for (_, link) in session.links {
                self.release_link(link).await;
            }
        }
    }
}
