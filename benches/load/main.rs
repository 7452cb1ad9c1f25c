//! The end-to-end load generator (issue 7): AMQP 1.0 with the fe2o3-amqp client, so it can
//! be pointed at ferrobus or at any other broker; over plain TCP, TLS, WebSocket or secure
//! WebSocket (`--transport`, issue 14).
//!
//! ```text
//! cargo bench --bench load -- run --url amqp://127.0.0.1:PORT --broker-pid PID --count 100000
//! ```
//!
//! Every command prints one line that starts with `result` followed by `key=value` fields;
//! `scripts/bench/` runs the scenarios and `docs/benchmarks.md` explains the fields.
//!
//! # Layout
//!
//! - `options`: the command line.
//! - `run`: the `run` command, its coordinator, watchdog and result line.
//! - `sender`, `receiver`: one link each, on its own connection.
//! - `connect`: connection + session with the chosen transport and SASL mechanism.
//! - `transport`: TLS (trusting `--ca`) and the WebSocket byte stream.
//! - `payload`: send time and message number inside the body.
//! - `tally`, `histogram`: lost/duplicate counting and latency percentiles.
//! - `process_stats`: broker CPU seconds and RSS from `/proc/<pid>`.
//! - `startup`, `idle`: start-up time and idle RSS; idle connections (S7).

mod connect;
mod histogram;
mod idle;
mod options;
mod payload;
mod process_stats;
mod receiver;
mod run;
mod sender;
mod startup;
mod tally;
mod transport;

use std::process::ExitCode;

use clap::Parser;

use crate::options::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(options) => run::main(options),
        Command::Startup(options) => startup::main(options),
        Command::Idle(options) => idle::main(options),
    }
}
