//! Protocol adapters between AMQP and the broker core: address parsing, message ⇄ broker
//! message, the one error→condition table, `$cbs`, `$management`, SAS tokens. Nothing here
//! owns sockets or entity state.

pub mod address;
pub mod cbs;
pub mod errors;
pub mod link_properties;
pub mod management;
pub mod message;
pub mod outcome;
pub mod request;
pub mod rewrite;
pub mod sas;
