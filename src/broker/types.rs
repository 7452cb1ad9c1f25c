//! Identifiers and values shared by the broker core and its adapters: sequence numbers,
//! lock tokens, wall-clock timestamps, settlement outcomes and the errors an entity
//! reports. Nothing here knows about AMQP frames or sockets.

/// Wall-clock time, owned by the clock that produces it.
pub use crate::clock::Timestamp;

/// A broker-assigned message sequence number: unique per entity, gapless, from 1 (rule SEQ-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SequenceNumber(pub i64);

/// The 16 bytes of a lock token in RFC 4122 order. On the wire, a delivery tag carries the
/// same GUID in .NET byte order; the adapter converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockToken(pub [u8; 16]);

/// Identifies one receiving link attached to an entity, unique for the process lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReceiverId(pub u64);

/// Which part of an entity a link addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubQueue {
    /// The entity itself.
    Main,
    /// `<entity>/$DeadLetterQueue`.
    DeadLetter,
    /// `<entity>/$Transfer/$DeadLetterQueue`: forwarding failures land here.
    TransferDeadLetter,
}

/// How a receiver takes messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveMode {
    /// Messages are locked and must be settled (rule LCK-1).
    PeekLock,
    /// Messages are removed as they are delivered (rule LCK-5).
    ReceiveAndDelete,
}

/// Where a message sits in its entity, as `x-opt-message-state` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageState {
    /// Receivable (or locked by a receiver).
    Active = 0,
    /// Set aside by defer; only retrievable by sequence number (rule LCK-4).
    Deferred = 1,
    /// Waiting for its scheduled enqueue time (rule SCH-2).
    Scheduled = 2,
}

/// A property value the broker writes into application properties (dead-letter reasons,
/// properties-to-modify).
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// AMQP null.
    Null,
    /// AMQP boolean.
    Bool(bool),
    /// Any AMQP integer.
    Long(i64),
    /// AMQP double or float.
    Double(f64),
    /// AMQP string or symbol.
    String(String),
    /// AMQP timestamp.
    Timestamp(i64),
    /// AMQP uuid.
    Uuid([u8; 16]),
    /// AMQP binary.
    Binary(Vec<u8>),
}

/// Properties to merge into a message's application properties.
pub type PropertyChanges = Vec<(String, PropertyValue)>;

/// What a receiver decided about a locked message.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// Remove the message.
    Complete,
    /// Unlock it and count a delivery attempt.
    Abandon { properties: PropertyChanges },
    /// Set it aside; only retrievable by sequence number.
    Defer { properties: PropertyChanges },
    /// Move it to the dead-letter sub-queue.
    DeadLetter {
        reason: Option<String>,
        description: Option<String>,
        properties: PropertyChanges,
    },
    /// Put it back without counting a delivery attempt (AMQP `released`).
    Release,
}

impl Settlement {
    /// The Service Bus disposition-status name used by `update-disposition`.
    pub fn name(&self) -> &'static str {
        match self {
            Settlement::Complete => "completed",
            Settlement::Abandon { .. } => "abandoned",
            Settlement::Defer { .. } => "defered",
            Settlement::DeadLetter { .. } => "suspended",
            Settlement::Release => "released",
        }
    }
}

/// Where a message in an entity's outbox goes (rules FWD-1, TXN-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxTarget {
    /// The entity's `forward_to`.
    Forward,
    /// The entity's `forward_dead_lettered_messages_to`.
    DeadLetters,
    /// A named entity: a message sent through this one in a transaction (send-via).
    Via(std::sync::Arc<str>),
}

/// Why an entity refused an operation. The AMQP adapter maps each to a condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntityError {
    /// The lock token is unknown or its lock expired (rule LCK-3).
    #[error(
        "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."
    )]
    LockLost,
    /// The entity is at its `max_size_in_megabytes`.
    #[error(
        "The maximum entity size has been reached or exceeded for '{entity}': {size} bytes of {limit} bytes."
    )]
    QuotaExceeded {
        entity: String,
        size: u64,
        limit: u64,
    },
    /// Messages of this kind may not be sent here.
    #[error("{0}")]
    NotAllowed(String),
    /// A limit on how many of something an entity may have (rules per subscription).
    #[error("{0}")]
    LimitExceeded(String),
    /// A sequence number names no message in the required state.
    #[error("{0}")]
    MessageNotFound(String),
    /// A request argument is invalid.
    #[error("{0}")]
    Argument(String),
    /// A rule (or other named item) with this name exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// The requested session is locked by another receiver.
    #[error("{0}")]
    SessionCannotBeLocked(String),
    /// The session lock expired or was never held.
    #[error("{0}")]
    SessionLockLost(String),
    /// Waiting for something (a session) took too long.
    #[error("{0}")]
    Timeout(String),
    /// The entity's status refuses the operation (admin API `Status`).
    #[error("{0}")]
    Disabled(String),
    /// The entity no longer exists (deleted, or its actor stopped).
    #[error("The messaging entity '{0}' could not be found.")]
    NotFound(String),
    /// The data directory's disk is (nearly) full: sends are refused until space returns.
    #[error("{0}")]
    StorageFull(String),
    /// The operation could not be made durable; it was not acknowledged.
    #[error("{0}")]
    StorageFailed(String),
}
