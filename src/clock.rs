//! The broker's one source of wall-clock time.
//!
//! Wall-clock values that clients see (enqueued time, locked-until, scheduled time) are
//! derived from a monotonic `tokio::time::Instant` anchored to the system clock once at
//! start. So deadlines computed in wall-clock milliseconds map exactly onto tokio timers,
//! and tests with paused tokio time move the broker's wall clock too.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::broker::types::Timestamp;

/// Wall clock anchored to a tokio instant. Cheap to copy.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Wall-clock milliseconds at `anchor`.
    anchor_wall: i64,
    /// The monotonic instant corresponding to `anchor_wall`.
    anchor: Instant,
}

impl Clock {
    /// A clock anchored to the system time now.
    pub fn system() -> Clock {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as i64)
            .unwrap_or(0);
        Clock::starting_at(Timestamp(wall))
    }

    /// A clock that reads `start` now (tests pick a fixed wall time).
    pub fn starting_at(start: Timestamp) -> Clock {
        Clock {
            anchor_wall: start.0,
            anchor: Instant::now(),
        }
    }

    /// The current wall-clock time.
    pub fn now(&self) -> Timestamp {
        Timestamp(self.anchor_wall + self.anchor.elapsed().as_millis() as i64)
    }

    /// The monotonic instant at which the wall clock reads `at`.
    pub fn instant_at(&self, at: Timestamp) -> Instant {
        let offset = at.0.saturating_sub(self.anchor_wall).max(0) as u64;
        self.anchor + std::time::Duration::from_millis(offset)
    }
}
