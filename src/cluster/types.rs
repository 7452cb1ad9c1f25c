//! The consensus library's types for ferrobus: what a log entry carries and who the nodes
//! are. Only `crate::cluster` names openraft, so an upgrade stays here.

use std::io::Cursor;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::store::codec::{self, LogRecord};

/// What a group's log entry carries: the entity records of one write (a turn of one
/// entity, a topic's publish with every subscription's copies, a checkpoint's parts, a
/// drop), durable together.
///
/// Between nodes it travels as the store's own encoding of each record (one byte string:
/// each record's length as 4 bytes, big-endian, then its encoding), so the records need
/// no second representation.
#[derive(Clone, Debug, Default)]
pub struct Turn(pub Arc<Vec<LogRecord>>);

impl Deref for Turn {
    type Target = Vec<LogRecord>;

    fn deref(&self) -> &Vec<LogRecord> {
        &self.0
    }
}

impl Serialize for Turn {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(256);
        let mut record = Vec::with_capacity(256);
        for each in self.0.iter() {
            record.clear();
            codec::encode_into(&mut record, each);
            let length = u32::try_from(record.len())
                .map_err(|_| serde::ser::Error::custom("a log record over 4 GiB"))?;
            bytes.extend_from_slice(&length.to_be_bytes());
            bytes.extend_from_slice(&record);
        }
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for Turn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Turn, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(deserializer)?;
        let mut rest = &bytes[..];
        let mut records = Vec::new();
        while !rest.is_empty() {
            let malformed = || serde::de::Error::custom("a truncated log record");
            let (length, after) = rest.split_first_chunk::<4>().ok_or_else(malformed)?;
            let length = u32::from_be_bytes(*length) as usize;
            if after.len() < length {
                return Err(malformed());
            }
            let (record, after) = after.split_at(length);
            records.push(codec::decode(record).map_err(serde::de::Error::custom)?);
            rest = after;
        }
        Ok(Turn(Arc::new(records)))
    }
}

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
