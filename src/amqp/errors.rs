//! The one table from broker errors to AMQP error conditions and `$management` status
//! codes, as the Azure SDKs map them (wire contract §5.5, §6.3).

use fe2o3_amqp_types::definitions::{Error, ErrorCondition};
use fe2o3_amqp_types::primitives::Symbol;

use crate::broker::types::EntityError;

/// `amqp:not-found`.
pub const NOT_FOUND: &str = "amqp:not-found";
/// `amqp:unauthorized-access`.
pub const UNAUTHORIZED_ACCESS: &str = "amqp:unauthorized-access";
/// `amqp:resource-limit-exceeded`.
pub const RESOURCE_LIMIT_EXCEEDED: &str = "amqp:resource-limit-exceeded";
/// `amqp:link:message-size-exceeded`.
pub const MESSAGE_SIZE_EXCEEDED: &str = "amqp:link:message-size-exceeded";
/// `amqp:not-allowed`.
pub const NOT_ALLOWED: &str = "amqp:not-allowed";
/// `amqp:not-implemented`.
pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
/// `amqp:decode-error`.
pub const DECODE_ERROR: &str = "amqp:decode-error";
/// `amqp:invalid-field`.
pub const INVALID_FIELD: &str = "amqp:invalid-field";
/// `amqp:internal-error`.
pub const INTERNAL_ERROR: &str = "amqp:internal-error";
/// `amqp:resource-limit-exceeded` is also used for too many connections.
pub const CONNECTION_FORCED: &str = "amqp:connection:forced";
/// `com.microsoft:server-busy`: the SDKs retry after a back-off (wire contract §5.5).
pub const SERVER_BUSY: &str = "com.microsoft:server-busy";
/// `amqp:connection:framing-error`.
pub const FRAMING_ERROR: &str = "amqp:connection:framing-error";
/// `amqp:session:window-violation`.
pub const WINDOW_VIOLATION: &str = "amqp:session:window-violation";
/// `amqp:session:unattached-handle`.
pub const UNATTACHED_HANDLE: &str = "amqp:session:unattached-handle";
/// The link name was attached again elsewhere (AMQP 1.0 §2.8.16).
pub const LINK_STOLEN: &str = "amqp:link:stolen";
/// `amqp:link:detach-forced`: the link was detached by the broker and may attach again
/// (the SDKs retry it; not-found they do not).
pub const DETACH_FORCED: &str = "amqp:link:detach-forced";
/// `com.microsoft:message-lock-lost`.
pub const MESSAGE_LOCK_LOST: &str = "com.microsoft:message-lock-lost";
/// `com.microsoft:message-not-found`.
pub const MESSAGE_NOT_FOUND: &str = "com.microsoft:message-not-found";
/// `com.microsoft:argument-error`.
pub const ARGUMENT_ERROR: &str = "com.microsoft:argument-error";
/// `com.microsoft:session-cannot-be-locked`.
pub const SESSION_CANNOT_BE_LOCKED: &str = "com.microsoft:session-cannot-be-locked";
/// `com.microsoft:session-lock-lost`.
pub const SESSION_LOCK_LOST: &str = "com.microsoft:session-lock-lost";
/// `com.microsoft:timeout`.
pub const TIMEOUT: &str = "com.microsoft:timeout";
/// `com.microsoft:entity-already-exists`.
pub const ENTITY_ALREADY_EXISTS: &str = "com.microsoft:entity-already-exists";
/// `com.microsoft:dead-letter`: a disposition condition, never an error reply.
pub const DEAD_LETTER: &str = "com.microsoft:dead-letter";
/// The entity is disabled for this operation (`MessagingEntityDisabledError`).
pub const ENTITY_DISABLED: &str = "com.microsoft:entity-disabled";

/// A failure as the wire carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The AMQP error condition symbol.
    pub condition: &'static str,
    /// Human-readable description.
    pub description: String,
    /// The `$management` status code for this failure.
    pub status_code: i32,
}

impl Failure {
    /// A failure with an explicit condition.
    pub fn new(condition: &'static str, description: impl Into<String>, status_code: i32) -> Self {
        Failure {
            condition,
            description: description.into(),
            status_code,
        }
    }

    /// As an AMQP `error` value.
    pub fn to_error(&self) -> Error {
        amqp_error(self.condition, &self.description)
    }
}

/// Builds an AMQP `error` with a condition symbol and description.
/// `info` is always present (empty): the Python SDK reads the error as a three-element
/// list and fails on a shorter one (`error_info[0][2]`), hanging the send.
pub fn amqp_error(condition: &str, description: &str) -> Error {
    Error {
        condition: ErrorCondition::Custom(Symbol::from(condition)),
        description: Some(description.to_string()),
        info: Some(Box::default()),
    }
}

/// The not-found failure with the wording the JS SDK matches on (§3.4).
pub fn entity_not_found(path: &str) -> Failure {
    Failure::new(
        NOT_FOUND,
        format!(
            "The messaging entity '{path}' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions."
        ),
        404,
    )
}

/// The failure a receiver's link is detached with when its entity moved to another node
/// (a leader change): retryable, so the client attaches again.
pub fn entity_moved(path: &str) -> Failure {
    Failure::new(
        DETACH_FORCED,
        format!("The messaging entity '{path}' moved to another node; attach the link again."),
        503,
    )
}

/// Maps a broker error to its wire failure.
pub fn entity_failure(error: &EntityError) -> Failure {
    let description = error.to_string();
    match error {
        EntityError::LockLost => Failure::new(MESSAGE_LOCK_LOST, description, 410),
        EntityError::QuotaExceeded { .. } => {
            Failure::new(RESOURCE_LIMIT_EXCEEDED, description, 403)
        }
        EntityError::NotAllowed(_) => Failure::new(NOT_ALLOWED, description, 400),
        EntityError::LimitExceeded(_) => Failure::new(RESOURCE_LIMIT_EXCEEDED, description, 403),
        EntityError::MessageNotFound(_) => Failure::new(MESSAGE_NOT_FOUND, description, 404),
        EntityError::Argument(_) => Failure::new(ARGUMENT_ERROR, description, 400),
        EntityError::SessionCannotBeLocked(_) => {
            Failure::new(SESSION_CANNOT_BE_LOCKED, description, 410)
        }
        EntityError::SessionLockLost(_) => Failure::new(SESSION_LOCK_LOST, description, 410),
        EntityError::Timeout(_) => Failure::new(TIMEOUT, description, 408),
        EntityError::AlreadyExists(_) => Failure::new(ENTITY_ALREADY_EXISTS, description, 409),
        EntityError::NotFound(path) => entity_not_found(path),
        EntityError::Disabled(_) => Failure::new(ENTITY_DISABLED, description, 400),
        EntityError::StorageFull(_) => Failure::new(RESOURCE_LIMIT_EXCEEDED, description, 403),
        EntityError::StorageFailed(_) => Failure::new(INTERNAL_ERROR, description, 500),
    }
}
