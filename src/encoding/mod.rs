//! The ground floor of a message: AMQP 1.0's byte-level encoding and the sections of an
//! encoded message, used alike by the broker core (which keeps a message as the bytes the
//! client sent) and by the protocol adapters (which parse transfers and write deliveries).
//!
//! - [`codec`]: measuring an encoded value without decoding it, and writing the primitive
//!   encodings the broker emits itself.
//! - [`depth`]: the guard that refuses nesting too deep before any recursive decoder runs.
//! - [`sections`]: the section descriptor codes, the header and properties sections read
//!   where they lie, a properties section written with an assigned message-id.
//! - [`ids`]: identifiers the broker invents and the text forms of GUIDs and binary ids.
//!
//! Nothing here imports the core, the adapters, the server or the admin plane: it knows
//! bytes, not entities, links or sockets.

pub mod codec;
pub mod depth;
pub mod ids;
pub mod sections;
