//! The broker core: entities, their message logs and rules. No sockets, no AMQP frames.

pub mod budget;
pub mod entity;
pub mod filter;
pub mod forwarder;
pub mod leadership;
pub mod lifecycle;
pub mod message;
pub mod namespace;
pub mod partitions;
pub mod registry;
pub mod reload;
pub mod rules;
pub mod storage;
pub mod topic;
pub mod topic_state;
pub mod types;
