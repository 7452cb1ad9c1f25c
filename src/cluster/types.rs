//! The consensus library's types for ferrobus: what a log entry carries and who the nodes
//! are. Only `crate::cluster` names openraft, so an upgrade stays here.

use std::io::Cursor;
use std::sync::Arc;

use crate::store::codec::LogRecord;

/// What a group's log entry carries: the entity records of one write (a turn of one
/// entity, a topic's publish with every subscription's copies, a checkpoint's parts, a
/// drop), durable together.
pub type Turn = Arc<Vec<LogRecord>>;

openraft::declare_raft_types!(
    /// ferrobus's Raft types.
    pub TypeConfig:
        D = Turn,
        R = (),
        NodeId = u64,
        Node = openraft::BasicNode,
);

/// A group's Raft handle.
pub type GroupRaft = openraft::Raft<TypeConfig>;
