//! Links: what a link is, and `attach` (resolving the address to an entity, `$cbs` or
//! `$management`, checking rights, refusing unknown entities with a null terminus and
//! `amqp:not-found`; a session receiver's attach answered once its session is locked).
//! Detach is in `detach.rs`, link credit (`flow`) in `credit.rs`.

use bytes::BytesMut;
use fe2o3_amqp_types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::TargetArchetype;
use fe2o3_amqp_types::performatives::{Attach, Detach, Performative};
use std::sync::Arc;

use super::connection::{Connection, ConnectionError};
use super::log_text::LogText;
use super::session::HANDLE_MAX;
use crate::amqp::address::{self, Node};
use crate::amqp::errors::{self, Failure};
use crate::amqp::link_properties;

use super::authorization::{Access, LinkAuthorization, management_path, node_path, unauthorized};
use crate::amqp::sas::Right;
use crate::broker::entity::{Command, EntityHandle};
use crate::broker::registry::Entity;
use crate::broker::topic::TopicHandle;
use crate::broker::types::{ReceiveMode, ReceiverId, SubQueue};

/// Longest link name accepted (the SDKs use an entity path and a GUID).
const MAX_LINK_NAME: usize = 2048;
/// Longest source or target address accepted: entity paths are at most 260 characters,
/// and with a scheme, host, subscription and `$DeadLetterQueue/$management` an SDK address
/// stays far below this. (A `$cbs` link, open to unauthenticated peers, keeps its other
/// terminus's address.)
const MAX_ADDRESS: usize = 2048;

/// Credit granted to client senders, topped up when half is used.
pub const SENDER_CREDIT: u32 = 1000;
/// How long a next-available session receiver waits when the client gives no timeout.
const DEFAULT_SESSION_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Largest message accepted when an entity sets no limit.
const DEFAULT_MAX_MESSAGE_SIZE: u64 = 1024 * 1024;

/// Where a client sender's messages go.
#[derive(Debug, Clone)]
pub enum SendTarget {
    /// A queue.
    Queue(EntityHandle),
    /// A topic.
    Topic(TopicHandle),
}

impl SendTarget {
    /// Whether both reach the same queue or topic.
    pub fn same(&self, other: &SendTarget) -> bool {
        match (self, other) {
            (SendTarget::Queue(one), SendTarget::Queue(other)) => one.same_entity(other),
            (SendTarget::Topic(one), SendTarget::Topic(other)) => one.same_topic(other),
            _ => false,
        }
    }
}

/// What a link is attached to.
#[derive(Debug)]
pub enum LinkKind {
    /// Client sends messages to an entity.
    EntitySender {
        /// Destination.
        target: SendTarget,
        /// Largest message accepted, in bytes.
        max_message_size: u64,
        /// Send-via: the destination named by `com.microsoft:transfer-destination-address`
        /// (the target is the entity the messages go through).
        via: Option<Arc<str>>,
    },
    /// Client receives messages from an entity.
    EntityReceiver {
        /// Our id for it at the entity.
        receiver: ReceiverId,
        /// The entity.
        entity: EntityHandle,
    },
    /// Client sends `put-token` requests.
    CbsRequest,
    /// Client receives `put-token` responses.
    CbsResponse,
    /// Client sends `$management` requests for an entity.
    ManagementRequest {
        /// Entity path.
        path: String,
        /// Which part of the entity.
        sub_queue: SubQueue,
    },
    /// Client receives `$management` responses.
    ManagementResponse {
        /// Entity path.
        path: String,
    },
    /// Client sends `declare` / `discharge` to the transaction coordinator.
    Coordinator {
        /// Tells this link's transactions apart from other coordinator links'.
        id: u64,
    },
    /// Attach refused; waiting for the client's detach.
    Refused,
}

/// A message arriving in several transfer frames.
#[derive(Debug)]
pub struct PartialTransfer {
    /// Delivery id from the first frame.
    pub delivery_id: u32,
    /// Whether the sender settled it.
    pub settled: bool,
    /// Message format from the first frame.
    pub message_format: u32,
    /// Payload so far.
    pub payload: BytesMut,
    /// The transaction it belongs to (from the first frame's state).
    pub txn_id: Option<bytes::Bytes>,
}

/// One attached link.
#[derive(Debug)]
pub struct Link {
    /// Link name.
    pub name: String,
    /// What it is attached to.
    pub kind: LinkKind,
    /// The client's target address (response routing matches `reply-to` against it).
    pub target_address: Option<String>,
    /// Link delivery-count: deliveries we sent (broker-sender links) or received.
    pub delivery_count: u32,
    /// Credit the client granted us (response links) or we granted it (sender links).
    pub credit: u32,
    /// A message being assembled from several frames.
    pub partial: Option<PartialTransfer>,
    /// Receiver links: deliveries are held back at the entity (window closed or output
    /// backed up) until the connection can write again.
    pub blocked: bool,
    /// Held back, and deliveries the entity made before that may still be on their way:
    /// the link is not given credit again before the entity's `Fenced` (they would
    /// overtake the ones returned to it).
    pub fence_pending: bool,
    /// Entity links attached under a `$cbs` token: what it covers and until when.
    pub authorization: Option<LinkAuthorization>,
    /// Its share of the broker's metrics.
    pub metrics: LinkMetrics,
    /// A session receiver's session, once the entity locked one: `$management` requests
    /// that name this link (`associated-link-name`) and no session are scoped to it, as the
    /// service does (the Go SDK's session peek sends only the link name).
    pub session_id: Option<String>,
}

/// What a link contributes to the metrics: counted in `ferrobus_links` while it exists;
/// a receiver link observes the delivery latency of its entity.
#[derive(Debug, Default)]
pub struct LinkMetrics {
    open: Option<prometheus::IntGauge>,
    /// `ferrobus_delivery_latency_seconds` of the receiver's entity.
    pub latency: Option<prometheus::Histogram>,
}

impl LinkMetrics {
    fn new(metrics: &crate::metrics::Metrics, kind: &LinkKind) -> LinkMetrics {
        let label = match kind {
            LinkKind::EntitySender { .. } => "sender",
            LinkKind::EntityReceiver { .. } => "receiver",
            LinkKind::CbsRequest | LinkKind::CbsResponse => "cbs",
            LinkKind::Coordinator { .. } => "coordinator",
            LinkKind::ManagementRequest { .. } | LinkKind::ManagementResponse { .. } => {
                "management"
            }
            LinkKind::Refused => return LinkMetrics::default(),
        };
        let open = metrics.links.with_label_values(&[label]);
        open.inc();
        let latency = match kind {
            LinkKind::EntityReceiver { entity, .. } => Some(
                metrics
                    .delivery_latency
                    .with_label_values(&[entity.path.as_ref()]),
            ),
            _ => None,
        };
        LinkMetrics {
            open: Some(open),
            latency,
        }
    }
}

impl Drop for LinkMetrics {
    fn drop(&mut self) {
        if let Some(open) = &self.open {
            open.dec();
        }
    }
}

fn source_address(attach: &Attach) -> Option<String> {
    attach
        .source
        .as_ref()
        .and_then(|source| source.address.clone())
}

fn target_address(attach: &Attach) -> Option<String> {
    match attach.target.as_deref() {
        Some(TargetArchetype::Target(target)) => target.address.clone(),
        _ => None,
    }
}

impl Connection {
    pub(super) async fn attach(
        &mut self,
        channel: u16,
        attach: Attach,
    ) -> Result<(), ConnectionError> {
        let handle = attach.handle.0;
        // AMQP 1.0 §2.7.2 (begin, handle-max): "A peer that receives a handle outside the
        // supported range MUST close the connection with the framing-error error-code."
        if handle > HANDLE_MAX {
            return Err(ConnectionError::protocol(
                errors::FRAMING_ERROR,
                format!(
                    "handle {handle} is above the handle-max of {HANDLE_MAX} this broker advertised"
                ),
            ));
        }
        if attach.name.len() > MAX_LINK_NAME {
            return Err(ConnectionError::protocol(
                errors::RESOURCE_LIMIT_EXCEEDED,
                format!(
                    "a link name of {} bytes is longer than the {MAX_LINK_NAME} bytes this broker accepts",
                    attach.name.len()
                ),
            ));
        }
        let longest_address = [source_address(&attach), target_address(&attach)]
            .into_iter()
            .flatten()
            .map(|address| address.len())
            .max()
            .unwrap_or(0);
        if longest_address > MAX_ADDRESS {
            return Err(ConnectionError::protocol(
                errors::RESOURCE_LIMIT_EXCEEDED,
                format!(
                    "a link address of {longest_address} bytes is longer than the {MAX_ADDRESS} bytes this broker accepts"
                ),
            ));
        }
        if self.session(channel)?.links.contains_key(&handle) {
            return Err(ConnectionError::protocol(
                "amqp:session:handle-in-use",
                format!("handle {handle} is already attached"),
            ));
        }
        let client_sends = attach.role == Role::Sender;
        self.steal_link_name(channel, &attach).await?;
        let coordinator = matches!(
            attach.target.as_deref(),
            Some(TargetArchetype::Coordinator(_))
        );
        let address = if client_sends {
            target_address(&attach)
        } else {
            source_address(&attach)
        };
        // A sender on a session with a transaction coordinator may go through the session's
        // first entity (cross-entity transactions, transaction_via.rs).
        let routed = match (client_sends && !coordinator, address.as_deref()) {
            (true, Some(target)) => self.session(channel)?.via.route(&attach, target),
            _ => None,
        };
        let resolved = if coordinator && client_sends {
            Ok((
                LinkKind::Coordinator {
                    id: super::transactions::next_coordinator(),
                },
                DEFAULT_MAX_MESSAGE_SIZE,
                None,
            ))
        } else if let Some(routed) = &routed {
            let via = target_address(routed).unwrap_or_default();
            self.resolve(routed, client_sends, &via).await
        } else {
            self.resolve(&attach, client_sends, address.as_deref().unwrap_or(""))
                .await
        };
        let (kind, max_message_size, authorization) = match resolved {
            Ok(resolved) => resolved,
            Err(failure) => return self.refuse_attach(channel, attach, failure),
        };
        match (&kind, address.as_deref().and_then(address::parse)) {
            (LinkKind::Coordinator { .. }, _) => self.session(channel)?.via.coordinator_attached(),
            (
                LinkKind::EntitySender { .. } | LinkKind::EntityReceiver { .. },
                Some(Node::Entity { path, .. }),
            ) => self.session(channel)?.via.entity_attached(&path),
            _ => {}
        }
        let mut reply = attach.clone();
        reply.role = if client_sends {
            Role::Receiver
        } else {
            Role::Sender
        };
        reply.unsettled = None;
        reply.incomplete_unsettled = false;
        reply.properties = None;
        reply.offered_capabilities = None;
        reply.desired_capabilities = None;
        if client_sends {
            reply.rcv_settle_mode = ReceiverSettleMode::First;
            reply.initial_delivery_count = None;
            reply.max_message_size = Some(max_message_size);
        } else {
            reply.initial_delivery_count = Some(0);
            reply.max_message_size = Some(0);
        }
        if reply.source.is_none() {
            reply.source = Some(Box::default());
        }
        if reply.target.is_none() {
            reply.target = Some(Box::new(TargetArchetype::Target(Default::default())));
        }
        let deferred = match &kind {
            LinkKind::EntityReceiver { receiver, .. }
                if link_properties::session_filter(&attach).is_some() =>
            {
                Some(*receiver)
            }
            _ => None,
        };
        match deferred {
            // A session receiver is answered once the entity has locked a session.
            Some(receiver) => {
                self.deferred_attaches.insert(receiver, reply);
            }
            None => self.write(channel, Performative::Attach(reply))?,
        }
        let metrics = LinkMetrics::new(&self.context.metrics, &kind);
        let link = Link {
            name: attach.name.clone(),
            metrics,
            kind,
            target_address: target_address(&attach),
            delivery_count: attach.initial_delivery_count.unwrap_or(0),
            credit: 0,
            partial: None,
            blocked: false,
            fence_pending: false,
            authorization,
            session_id: None,
        };
        let grants_credit = client_sends;
        if let LinkKind::EntityReceiver {
            receiver, entity, ..
        } = &link.kind
        {
            self.receivers.insert(*receiver, (channel, handle));
            let _ = entity;
        }
        self.session(channel)?.links.insert(handle, link);
        if grants_credit {
            self.grant_sender_credit(channel, handle)?;
        }
        Ok(())
    }

    /// A link is named by its name and direction (AMQP 1.0 §2.6.1): attaching a name that
    /// is already attached in the same direction on this session takes it over, and the
    /// old attachment is detached with `amqp:link:stolen`.
    async fn steal_link_name(
        &mut self,
        channel: u16,
        attach: &Attach,
    ) -> Result<(), ConnectionError> {
        let client_sends = attach.role == Role::Sender;
        let existing = self
            .session(channel)?
            .links
            .iter()
            .find_map(|(handle, link)| {
                let same_direction = match &link.kind {
                    LinkKind::EntitySender { .. }
                    | LinkKind::CbsRequest
                    | LinkKind::Coordinator { .. }
                    | LinkKind::ManagementRequest { .. } => client_sends,
                    LinkKind::EntityReceiver { .. }
                    | LinkKind::CbsResponse
                    | LinkKind::ManagementResponse { .. } => !client_sends,
                    LinkKind::Refused => false,
                };
                (same_direction && link.name == attach.name).then_some(*handle)
            });
        if let Some(handle) = existing {
            let error = errors::amqp_error(
                errors::LINK_STOLEN,
                "The link name was attached again on this session; this attachment is closed.",
            );
            self.detach_with_error(channel, handle, error).await?;
        }
        Ok(())
    }

    /// Resolves an attach to a link kind and (for client senders) its max message size.
    async fn resolve(
        &mut self,
        attach: &Attach,
        client_sends: bool,
        address: &str,
    ) -> Result<(LinkKind, u64, Option<LinkAuthorization>), Failure> {
        let node = address::parse(address).ok_or_else(|| {
            Failure::new(
                errors::NOT_FOUND,
                "The link address is missing or empty.",
                404,
            )
        })?;
        match node {
            Node::Cbs if client_sends => Ok((LinkKind::CbsRequest, DEFAULT_MAX_MESSAGE_SIZE, None)),
            Node::Cbs => Ok((LinkKind::CbsResponse, 0, None)),
            Node::Management { path, sub_queue } => {
                // A peer with no claim on the node learns nothing about whether the entity
                // exists: the attach succeeds and each request is refused with 401.
                let node = management_path(&path, sub_queue);
                let any_claim = [Right::Send, Right::Listen, Right::Manage]
                    .into_iter()
                    .any(|right| matches!(self.access(&node, right), Access::Allowed(_)));
                if any_claim && self.context.registry.lookup(&path).is_none() {
                    return Err(errors::entity_not_found(&path));
                }
                // Each operation is authorized when it is requested (authorization.rs).
                if client_sends {
                    Ok((
                        LinkKind::ManagementRequest { path, sub_queue },
                        DEFAULT_MAX_MESSAGE_SIZE,
                        None,
                    ))
                } else {
                    Ok((LinkKind::ManagementResponse { path }, 0, None))
                }
            }
            Node::Entity { path, sub_queue } => {
                let right = if client_sends {
                    Right::Send
                } else {
                    Right::Listen
                };
                // Authorized before the entity is looked up: a peer without the claim does
                // not learn whether the entity exists.
                let node = node_path(&path, sub_queue);
                let Access::Allowed(until) = self.access(&node, right) else {
                    return Err(unauthorized(right, &node));
                };
                let entity = self
                    .context
                    .registry
                    .lookup(&path)
                    .ok_or_else(|| errors::entity_not_found(&path))?;
                let authorization = until.map(|until| LinkAuthorization {
                    path: node,
                    right,
                    until: Some(until),
                });
                let (kind, size) = self
                    .entity_link(attach, client_sends, path, sub_queue, entity)
                    .await?;
                Ok((kind, size, authorization))
            }
        }
    }

    async fn entity_link(
        &mut self,
        attach: &Attach,
        client_sends: bool,
        path: String,
        sub_queue: SubQueue,
        entity: Entity,
    ) -> Result<(LinkKind, u64), Failure> {
        let status = self.context.registry.status(&path);
        if client_sends && !status.allows_send() || !client_sends && !status.allows_receive() {
            return Err(errors::entity_failure(
                &crate::broker::types::EntityError::Disabled(format!(
                    "Messaging entity '{path}' is currently disabled ({}).",
                    status.as_str()
                )),
            ));
        }
        if client_sends {
            if sub_queue != SubQueue::Main {
                return Err(Failure::new(
                    errors::NOT_ALLOWED,
                    format!(
                        "Cannot send to the dead-letter sub-queue of '{path}': messages enter it only by dead-lettering."
                    ),
                    400,
                ));
            }
            let max_message_size = self.context.max_message_size(&path);
            let via = self.via_destination(attach, &path)?;
            let target = match entity {
                Entity::Queue(handle) => SendTarget::Queue(handle),
                Entity::Topic(_) if via.is_some() => {
                    return Err(Failure::new(
                        errors::NOT_ALLOWED,
                        format!(
                            "'{path}' is a topic; a send-via goes through the queue or subscription the transaction receives from."
                        ),
                        400,
                    ));
                }
                Entity::Topic(handle) => SendTarget::Topic(handle),
                Entity::Subscription(handle) if via.is_some() => SendTarget::Queue(handle),
                Entity::Subscription(_) => {
                    return Err(Failure::new(
                        errors::NOT_ALLOWED,
                        format!("Cannot send to subscription '{path}': send to its topic."),
                        400,
                    ));
                }
            };
            return Ok((
                LinkKind::EntitySender {
                    target,
                    max_message_size,
                    via,
                },
                max_message_size,
            ));
        }
        let handle = match entity {
            Entity::Queue(handle) | Entity::Subscription(handle) => handle,
            Entity::Topic(_) => {
                return Err(Failure::new(
                    errors::NOT_ALLOWED,
                    format!(
                        "Cannot receive from topic '{path}': receive from one of its subscriptions."
                    ),
                    400,
                ));
            }
        };
        let session_filter = link_properties::session_filter(attach);
        let session_entity = sub_queue == SubQueue::Main && self.context.requires_session(&path);
        match (&session_filter, session_entity) {
            (Some(_), false) => {
                return Err(Failure::new(
                    errors::NOT_ALLOWED,
                    format!(
                        "The entity '{path}' does not require sessions; a session receiver cannot be created on it."
                    ),
                    400,
                ));
            }
            (None, true) => {
                return Err(Failure::new(
                    errors::NOT_ALLOWED,
                    format!(
                        "It is not possible for an entity that requires sessions to create a non-sessionful message receiver ('{path}')."
                    ),
                    400,
                ));
            }
            _ => {}
        }
        let mode = if attach.snd_settle_mode == SenderSettleMode::Settled {
            ReceiveMode::ReceiveAndDelete
        } else {
            ReceiveMode::PeekLock
        };
        let receiver = ReceiverId(
            self.context
                .next_receiver_id
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        let command = match session_filter {
            Some(session_id) => {
                let wait = link_properties::session_wait(attach).unwrap_or(DEFAULT_SESSION_WAIT);
                Command::AttachSessionReceiver {
                    receiver,
                    mode,
                    session_id,
                    wait,
                    sink: self.notifications.clone(),
                }
            }
            None => Command::AttachReceiver {
                receiver,
                sub_queue,
                mode,
                sink: self.notifications.clone(),
            },
        };
        handle
            .send(command)
            .await
            .map_err(|error| errors::entity_failure(&error))?;
        Ok((
            LinkKind::EntityReceiver {
                receiver,
                entity: handle,
            },
            0,
        ))
    }

    /// The destination of a send-via sender (`com.microsoft:transfer-destination-address`):
    /// it must exist and the client must hold Send on it as well as on the link's target.
    fn via_destination(
        &mut self,
        attach: &Attach,
        path: &str,
    ) -> Result<Option<std::sync::Arc<str>>, Failure> {
        let Some(address) = link_properties::transfer_destination(attach) else {
            return Ok(None);
        };
        let Some(Node::Entity {
            path: destination,
            sub_queue: SubQueue::Main,
        }) = address::parse(&address)
        else {
            return Err(Failure::new(
                errors::NOT_ALLOWED,
                format!(
                    "The transfer destination '{address}' is not a queue or topic a message can be sent to."
                ),
                400,
            ));
        };
        if destination == path {
            return Ok(None);
        }
        if let Access::Denied = self.access(&destination, Right::Send) {
            return Err(unauthorized(Right::Send, &destination));
        }
        match self.context.registry.lookup(&destination) {
            Some(Entity::Queue(_)) | Some(Entity::Topic(_)) => Ok(Some(destination.into())),
            Some(Entity::Subscription(_)) => Err(Failure::new(
                errors::NOT_ALLOWED,
                format!("Cannot send to subscription '{destination}': send to its topic."),
                400,
            )),
            None => Err(errors::entity_not_found(&destination)),
        }
    }

    fn refuse_attach(
        &mut self,
        channel: u16,
        attach: Attach,
        failure: Failure,
    ) -> Result<(), ConnectionError> {
        tracing::info!(link = %LogText(&attach.name), condition = failure.condition, description = %LogText(&failure.description), "attach refused");
        let handle = attach.handle.0;
        let client_sends = attach.role == Role::Sender;
        let mut reply = attach;
        reply.role = if client_sends {
            Role::Receiver
        } else {
            Role::Sender
        };
        reply.unsettled = None;
        reply.properties = None;
        if client_sends {
            reply.target = None;
        } else {
            reply.source = None;
            reply.initial_delivery_count = Some(0);
        }
        self.write(channel, Performative::Attach(reply))?;
        self.write(
            channel,
            Performative::Detach(Detach {
                handle: Handle(handle),
                closed: true,
                error: Some(failure.to_error()),
            }),
        )?;
        self.session(channel)?.links.insert(
            handle,
            Link {
                // A refused link keeps nothing of what the peer sent (not even its name).
                name: String::new(),
                kind: LinkKind::Refused,
                target_address: None,
                delivery_count: 0,
                credit: 0,
                partial: None,
                blocked: false,
                fence_pending: false,
                authorization: None,
                metrics: LinkMetrics::default(),
                session_id: None,
            },
        );
        Ok(())
    }

    /// Answers a session receiver's attach once its session is locked (§3.5): the session
    /// id in the source filter, the lock expiry as .NET ticks. The id comes back in the form
    /// the client's filter had: a plain string to a plain (or null) filter — rhea (JS) keeps
    /// a described value as an object — and a described string, with the client's descriptor,
    /// to a described filter: go-amqp (the Go SDK) decodes every filter-set value as a
    /// described type and fails the whole attach on a plain one.
    pub(super) fn session_accepted(
        &mut self,
        receiver: ReceiverId,
        session_id: String,
        locked_until: crate::broker::types::Timestamp,
    ) -> Result<(), ConnectionError> {
        use fe2o3_amqp_types::primitives::{Symbol, Value};
        let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
            return Ok(());
        };
        let Some(mut reply) = self.deferred_attaches.remove(&receiver) else {
            return Ok(());
        };
        if let Some(link) = self
            .sessions
            .get_mut(&channel)
            .and_then(|session| session.links.get_mut(&handle))
        {
            link.session_id = Some(session_id.clone());
        }
        if let Some(source) = reply.source.as_mut() {
            let requested_descriptor = source.filter.as_ref().and_then(|filter| {
                filter.iter().find_map(|(key, value)| match value {
                    Value::Described(described) if key.0 == "com.microsoft:session-filter" => {
                        Some(described.descriptor.clone())
                    }
                    _ => None,
                })
            });
            let value = match requested_descriptor {
                Some(descriptor) => Value::Described(Box::new(serde_amqp::described::Described {
                    descriptor,
                    value: Value::String(session_id),
                })),
                None => Value::String(session_id),
            };
            let mut filter = fe2o3_amqp_types::messaging::FilterSet::new();
            filter.insert(Symbol::from("com.microsoft:session-filter"), value);
            source.filter = Some(filter);
        }
        let mut properties = fe2o3_amqp_types::definitions::Fields::new();
        properties.insert(
            Symbol::from("com.microsoft:locked-until-utc"),
            Value::Long(link_properties::dotnet_ticks(locked_until.0)),
        );
        reply.properties = Some(properties);
        self.write(channel, Performative::Attach(reply))
    }

    /// Refuses a session receiver's attach: null source, then a detach with the error.
    pub(super) async fn session_refused(
        &mut self,
        receiver: ReceiverId,
        error: crate::broker::types::EntityError,
    ) -> Result<(), ConnectionError> {
        let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
            return Ok(());
        };
        self.receivers.remove(&receiver);
        let Some(mut reply) = self.deferred_attaches.remove(&receiver) else {
            return Ok(());
        };
        reply.source = None;
        self.write(channel, Performative::Attach(reply))?;
        if let Some(link) = self.session(channel)?.links.get_mut(&handle) {
            link.kind = LinkKind::Refused;
        }
        let failure = errors::entity_failure(&error);
        tracing::info!(condition = failure.condition, description = %LogText(&failure.description), "session receiver refused");
        self.write(
            channel,
            Performative::Detach(Detach {
                handle: Handle(handle),
                closed: true,
                error: Some(failure.to_error()),
            }),
        )
    }
}
