//! Running as a daemon: the configuration reload (SIGHUP and `POST /$config/reload`),
//! readiness for a service manager (the `NOTIFY_SOCKET` protocol) and the log format.
//!
//! - [`reload`]: re-reads the configuration file and applies its entities online through
//!   the namespace layer ([`crate::broker::reload`]); reports what changed.
//! - [`notify`]: `READY=1`, `RELOADING=1`, `STOPPING=1` and `STATUS=` datagrams to systemd.
//! - [`logging`]: `--log-format text|json`.
//! - [`member`]: running as a member of a cluster: a follower forwarding its clients'
//!   connections until it leads, then the broker.
//!
//! Reference: README "Running as a daemon", `docs/admin-api.md` (the reload route),
//! `packaging/ferrobus.service`.

pub mod logging;
pub mod member;
pub mod notify;
pub(crate) mod proxying;
pub mod reload;
pub mod spread;

pub use logging::LogFormat;
