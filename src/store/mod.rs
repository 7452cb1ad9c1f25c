//! Durable storage: the write-ahead log every entity's changes go through before they are
//! acknowledged (issue 11). Only the actor shells talk to it; the pure core never sees it.
//!
//! - [`segment`]: the file format (numbered segments of CRC-checked records) and its reader.
//! - [`log`]: the writer thread with group commit, recovery with torn-tail truncation, the
//!   directory lock, and the fault behaviour (disk full refuses, a failed sync stops).
//! - `active`: the segment being written (plain, or prepared: zero-filled ahead and
//!   written in blocks with `O_DIRECT`) and the thread that prepares the next one.

mod active;
pub mod codec;
pub mod log;
pub mod segment;
pub mod snapshots;
pub mod storage;

#[cfg(test)]
mod log_tests;
