//! The process's file-descriptor limit (issue 10, item 13): raised to the hard limit at
//! start, checked against `max_connections`, and — when accept() runs out anyway — a spare
//! descriptor lets the broker take the waiting connection and refuse it at once (our
//! header, `open` and a `close` with `amqp:resource-limit-exceeded`, without waiting for
//! the peer's handshake, so the spare is back before the next accept) instead of leaving
//! the peer hanging in the backlog.

use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

/// Descriptors kept for the process itself (listener, epoll, log, data files) on top of
/// one per connection.
pub const RESERVED_DESCRIPTORS: u64 = 32;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the limit now in force.
pub fn raise_descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    Some(limit.rlim_cur)
}

/// Whether an accept() error means the process or system has no descriptors left.
pub fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE)
    )
}

/// One descriptor held in reserve (`/dev/null`), released to accept a connection that
/// would otherwise fail for lack of descriptors.
#[derive(Debug, Clone)]
pub struct SpareDescriptor(Arc<Mutex<Option<File>>>);

impl SpareDescriptor {
    /// Opens the spare.
    pub fn reserve() -> SpareDescriptor {
        SpareDescriptor(Arc::new(Mutex::new(File::open("/dev/null").ok())))
    }

    /// Closes the spare; false if it was not held.
    pub fn release(&self) -> bool {
        self.0
            .lock()
            .map(|mut spare| spare.take().is_some())
            .unwrap_or(false)
    }

    /// Opens the spare again (once a descriptor is free).
    pub fn restore(&self) {
        if let Ok(mut spare) = self.0.lock()
            && spare.is_none()
        {
            *spare = File::open("/dev/null").ok();
        }
    }

    /// Frees the spare, takes one waiting connection (without waiting for one), writes
    /// `refusal` to it and closes it, then opens the spare again. False when the spare was
    /// not held (it is reopened if a descriptor came free) or nothing was waiting.
    pub fn refuse_one(&self, listener: &TcpListener, refusal: &[u8]) -> bool {
        if !self.release() {
            self.restore();
            return false;
        }
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let refused = match listener.poll_accept(&mut context) {
            std::task::Poll::Ready(Ok((stream, _))) => {
                // A fresh socket's send buffer takes these few hundred bytes at once; if
                // it did not, the peer would still see the connection closed, not hang.
                let _ = stream.try_write(refusal);
                // Read what already arrived (the peer's header, perhaps its `open`):
                // closing a socket with unread input resets it, which may discard our
                // answer before the peer reads it.
                let mut scratch = [0u8; 4096];
                for _ in 0..16 {
                    if !matches!(stream.try_read(&mut scratch), Ok(read) if read > 0) {
                        break;
                    }
                }
                true
            }
            _ => false,
        };
        self.restore();
        refused
    }
}

/// A warning logged at most once per interval, with the count of those it held back.
#[derive(Debug)]
pub struct RateLimitedWarning {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedWarning {
    /// At most one warning per `every`.
    pub fn new(every: Duration) -> RateLimitedWarning {
        RateLimitedWarning {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// Logs an accept failure unless one was logged within the interval.
    pub fn warn(&mut self, error: &std::io::Error) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < self.every)
        {
            self.suppressed += 1;
            return;
        }
        tracing::warn!(%error, suppressed = self.suppressed, "accept failed");
        self.last = Some(now);
        self.suppressed = 0;
    }
}

/// Turns off glibc's fastbins (issue 16). Freed small chunks still go to the per-thread
/// cache first; past it they are merged at once instead of parked in a fastbin, where every
/// allocation of 1 KiB or more (a stored message of that size) had to consolidate them
/// first: `malloc_consolidate` was 2 % of the broker's CPU in S1. Call before any thread
/// starts.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters; no thread is running yet.
    unsafe {
        libc::mallopt(libc::M_MXFAST, 0);
    }
}
