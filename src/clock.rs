//! The broker's one source of wall-clock time, and the [`Timestamp`] it returns.
//!
//! Wall-clock values that clients see (enqueued time, locked-until, scheduled time) are
//! derived from a monotonic `tokio::time::Instant` anchored to the system clock once at
//! start. So deadlines computed in wall-clock milliseconds map exactly onto tokio timers,
//! and tests with paused tokio time move the broker's wall clock too.
//!
//! The clock never runs backwards across restarts: recovery passes the latest time the log
//! recorded to [`Clock::not_before`], and a clock anchored earlier (the system clock was
//! stepped back while the broker was down) starts from that time instead (`docs/scale-out.md`
//! §6.6). Within a run the clock is monotonic by construction.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Wall-clock time as milliseconds since the Unix epoch (what clients see as timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The timestamp `duration` later, saturating at the far future.
    pub fn plus(self, duration: Duration) -> Timestamp {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(millis))
    }
    /// Milliseconds from `self` until `later` (zero if `later` is not later).
    pub fn until(self, later: Timestamp) -> Duration {
        Duration::from_millis(later.0.saturating_sub(self.0).max(0) as u64)
    }
}

/// Wall clock anchored to a tokio instant. Cheap to copy.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Wall-clock microseconds at `anchor` (kept finer than what [`Clock::now`] returns,
    /// so that a reading is the true time rounded down to its millisecond, not up to two
    /// milliseconds early from rounding the anchor and the time since it apart).
    anchor_wall: i64,
    /// The monotonic instant corresponding to `anchor_wall`.
    anchor: Instant,
}

impl Clock {
    /// A clock anchored to the system time now.
    pub fn system() -> Clock {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_micros() as i64)
            .unwrap_or(0);
        Clock {
            anchor_wall: wall,
            anchor: Instant::now(),
        }
    }

    /// A clock that reads `start` now (tests pick a fixed wall time).
    pub fn starting_at(start: Timestamp) -> Clock {
        Clock {
            anchor_wall: start.0.saturating_mul(1000),
            anchor: Instant::now(),
        }
    }

    /// This clock, moved forward so that it reads at least `floor` now (the latest time
    /// the log recorded before a restart); unchanged when it is already there. Clients see
    /// times offset by how far the system clock went back, never times that run backwards.
    pub fn not_before(self, floor: Option<Timestamp>) -> Clock {
        let Some(floor) = floor else { return self };
        let behind = floor.0.saturating_sub(self.now().0);
        if behind <= 0 {
            return self;
        }
        tracing::warn!(
            behind_ms = behind,
            "the system clock is behind the latest time in the log; the broker's clock starts from that time"
        );
        Clock {
            anchor_wall: self.anchor_wall.saturating_add(behind.saturating_mul(1000)),
            anchor: self.anchor,
        }
    }

    /// The current wall-clock time.
    pub fn now(&self) -> Timestamp {
        Timestamp((self.anchor_wall + self.anchor.elapsed().as_micros() as i64).div_euclid(1000))
    }

    /// The monotonic instant at which the wall clock reads `at`.
    pub fn instant_at(&self, at: Timestamp) -> Instant {
        let offset =
            at.0.saturating_mul(1000)
                .saturating_sub(self.anchor_wall)
                .max(0) as u64;
        self.anchor + std::time::Duration::from_micros(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_clock_behind_the_log_starts_from_the_latest_recorded_time() {
        let clock = Clock::starting_at(Timestamp(1_000)).not_before(Some(Timestamp(5_000)));
        assert_eq!(clock.now(), Timestamp(5_000));
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(clock.now(), Timestamp(5_250), "it runs on from there");
        assert_eq!(
            clock.instant_at(Timestamp(5_500)),
            clock.anchor + Duration::from_millis(500),
            "deadlines map onto timers from the moved anchor"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_ahead_of_the_log_is_unchanged() {
        let clock = Clock::starting_at(Timestamp(9_000)).not_before(Some(Timestamp(5_000)));
        assert_eq!(clock.now(), Timestamp(9_000));
        let clock = Clock::starting_at(Timestamp(9_000)).not_before(None);
        assert_eq!(
            clock.now(),
            Timestamp(9_000),
            "an empty log changes nothing"
        );
    }
}
