//! Command-line options of the load generator's three commands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// AMQP 1.0 load generator: drives any broker over TCP and prints one `result` line.
#[derive(Parser, Debug)]
#[command(name = "load", version)]
pub struct Cli {
    /// What to measure.
    #[command(subcommand)]
    pub command: Command,
    /// Added by `cargo bench` to a `harness = false` target; ignored.
    #[arg(long, hide = true, global = true)]
    pub bench: bool,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// N senders → entity → M receivers per source address: rates, latency, broker CPU/RSS.
    Run(RunOptions),
    /// Start a ferrobus binary repeatedly: time from spawn to port accepting, idle RSS.
    Startup(StartupOptions),
    /// Open idle connections (session + link each) and report the broker's RSS per connection.
    Idle(IdleOptions),
}

/// How deliveries are settled.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleMode {
    /// Sender transfers unsettled and waits for the outcome; receiver accepts (peek-lock +
    /// complete on a Service Bus style broker).
    AtLeastOnce,
    /// Sender and broker send pre-settled (receive-and-delete on the receiving side).
    Presettled,
}

/// SASL mechanism used to connect.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sasl {
    /// SASL ANONYMOUS.
    Anonymous,
    /// SASL PLAIN with `--user` and `--password`.
    Plain,
    /// No SASL layer at all.
    None,
}

/// The byte stream AMQP runs on.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Plain AMQP over TCP.
    Amqp,
    /// AMQP over TLS (AMQPS).
    Tls,
    /// AMQP over WebSocket (binary messages, subprotocol `AMQPWSB10`).
    Ws,
    /// AMQP over secure WebSocket (WebSocket inside TLS).
    Wss,
}

impl Transport {
    /// The name printed in the result line.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Amqp => "amqp",
            Transport::Tls => "tls",
            Transport::Ws => "ws",
            Transport::Wss => "wss",
        }
    }
}

/// Where and how to connect.
#[derive(Args, Debug, Clone)]
pub struct ConnectOptions {
    /// Broker URL, `amqp://`, `amqps://`, `ws://` or `wss://` `HOST:PORT[/PATH]`; load is
    /// meant for loopback addresses only. The WebSocket path defaults to
    /// `/$servicebus/websocket/`.
    #[arg(long, default_value = "amqp://127.0.0.1:5672")]
    pub url: String,
    /// Transport to the URL's host and port: plain AMQP, TLS, WebSocket or secure WebSocket.
    /// Default: from the URL's scheme (amqp, amqps, ws, wss).
    #[arg(long, value_enum)]
    pub transport: Option<Transport>,
    /// PEM file of the CA certificate(s) to trust for `tls` and `wss`, e.g. the broker's
    /// development CA (`dev-ca.pem` in its data directory). Required for those transports.
    #[arg(long, value_name = "PATH")]
    pub ca: Option<PathBuf>,
    /// SASL mechanism.
    #[arg(long, value_enum, default_value_t = Sasl::Anonymous)]
    pub sasl: Sasl,
    /// User name for SASL PLAIN.
    #[arg(long, default_value = "guest")]
    pub user: String,
    /// Password for SASL PLAIN.
    #[arg(long, default_value = "guest")]
    pub password: String,
    /// The broker's process id, for its CPU seconds and peak RSS from `/proc`.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Scenario name printed in the result line.
    #[arg(long, default_value = "run")]
    pub scenario: String,
    /// Broker name printed in the result line.
    #[arg(long, default_value = "broker")]
    pub target: String,
}

impl ConnectOptions {
    /// The transport's name for the result line: `--transport`, else the URL's scheme.
    pub fn transport_name(&self) -> &str {
        match self.transport {
            Some(transport) => transport.name(),
            None => match self.url.split_once("://") {
                Some(("amqps", _)) => "tls",
                Some((scheme, _)) => scheme,
                None => "amqp",
            },
        }
    }
}

/// Options of `run`.
#[derive(Args, Debug, Clone)]
pub struct RunOptions {
    /// Connection, broker pid and labels.
    #[command(flatten)]
    pub connect: ConnectOptions,
    /// Address senders attach to (queue or topic).
    #[arg(long, default_value = "bench")]
    pub send_to: String,
    /// Address receivers attach to; repeat for several (e.g. one per subscription). Default:
    /// the `--send-to` address.
    #[arg(long)]
    pub receive_from: Vec<String>,
    /// Sender links, each on its own connection.
    #[arg(long, default_value_t = 1)]
    pub senders: usize,
    /// Receiver links per receive address, each on its own connection (competing consumers).
    #[arg(long, default_value_t = 1)]
    pub receivers: usize,
    /// Message body size in bytes (at least 12: send time and message number).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Link credit each receiver grants (refilled when half is used).
    #[arg(long, default_value_t = 1000)]
    pub credit: u32,
    /// Messages to send in all (ignored with `--duration`).
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Send for this many seconds instead of a count.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Open loop: send at this total rate (msg/s) on a fixed schedule. Latency counts from
    /// the moment a message is handed to the link; lateness against the schedule is reported
    /// as `worst_lag_ms`.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Settlement.
    #[arg(long, value_enum, default_value_t = SettleMode::AtLeastOnce)]
    pub settle: SettleMode,
    /// Unsettled sends each sender keeps in flight before waiting for the oldest outcome.
    #[arg(long, default_value_t = 1000)]
    pub window: usize,
    /// Receivers settle this many deliveries per disposition (1 = one disposition each).
    #[arg(long, default_value_t = 1)]
    pub ack_batch: usize,
    /// Percent of messages abandoned (modified, delivery-failed) on first receipt, then
    /// completed on redelivery. At-least-once only.
    #[arg(long, default_value_t = 0)]
    pub abandon_percent: u32,
    /// Percent of messages rejected (dead-lettered), then drained from the dead-letter address
    /// and counted. At-least-once only.
    #[arg(long, default_value_t = 0)]
    pub dead_letter_percent: u32,
    /// Dead-letter address; default `<receive address>/$DeadLetterQueue`.
    #[arg(long)]
    pub dead_letter_address: Option<String>,
    /// Give every message a message-id (as the Service Bus SDKs do); without it the broker
    /// assigns one.
    #[arg(long)]
    pub message_id: bool,
    /// Send everything first, then attach the receivers and drain (S6).
    #[arg(long)]
    pub preload: bool,
    /// Only send (`--count` messages, or for `--duration`): no receiver attaches and nothing
    /// counts as lost. Fills a queue for a later `--receive-only` run, e.g. across a broker
    /// restart (the recovery scenario).
    #[arg(long, conflicts_with_all = ["receive_only", "preload"])]
    pub send_only: bool,
    /// Only receive: drain the `--count` messages (numbers 0..count, one sender's numbering)
    /// that an earlier `--send-only` run left behind, counting lost and duplicated ones.
    /// Latency is not reported (the send times are another process's clock).
    #[arg(long, conflicts_with_all = ["send_only", "preload", "duration"])]
    pub receive_only: bool,
    /// Stop receiving when nothing arrived for this long after sending ended (seconds).
    #[arg(long, default_value_t = 10.0)]
    pub idle_timeout: f64,
    /// Hard bound on the whole run (seconds); the run stops and reports what it has.
    #[arg(long, default_value_t = 900.0)]
    pub max_time: f64,
    /// Tokio threads. Above 1, fe2o3-amqp 0.14 can lose a disposition (see `run.rs`).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

/// Options of `startup`.
#[derive(Args, Debug, Clone)]
pub struct StartupOptions {
    /// The ferrobus binary.
    #[arg(long, default_value = "target/release/ferrobus")]
    pub broker: PathBuf,
    /// Its configuration file.
    #[arg(long)]
    pub config: PathBuf,
    /// How many starts.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Wait this long after start-up before reading idle RSS (milliseconds).
    #[arg(long, default_value_t = 500)]
    pub settle_ms: u64,
    /// Start each run durable on a fresh, empty data directory of its own, removed after the
    /// run (default: `--memory`).
    #[arg(long, visible_alias = "data-dir-per-run")]
    pub durable: bool,
    /// An extra argument for the broker; repeat for several, e.g.
    /// `--broker-arg --data-dir --broker-arg DIR` to start on an existing data directory
    /// (kept afterwards). `--memory` is passed only when no `--durable` is given and no
    /// broker argument names `--data-dir` or `--memory`.
    #[arg(long = "broker-arg", allow_hyphen_values = true)]
    pub broker_args: Vec<String>,
    /// After the port accepts, also time spawn → the first message received from this
    /// address (AMQP connection, receiver link with credit 1; the message is not settled).
    /// Shows when stored messages are really being served after a recovery.
    #[arg(long)]
    pub first_delivery_from: Option<String>,
    /// How long one start may take, to the first delivery when one is awaited (seconds).
    #[arg(long, default_value_t = 10.0)]
    pub timeout_s: f64,
}

/// Options of `idle`.
#[derive(Args, Debug, Clone)]
pub struct IdleOptions {
    /// Connection, broker pid and labels.
    #[command(flatten)]
    pub connect: ConnectOptions,
    /// Idle connections to open.
    #[arg(long, default_value_t = 5000)]
    pub connections: usize,
    /// Address each connection's sender link attaches to.
    #[arg(long, default_value = "bench")]
    pub address: String,
    /// Connections opened at once.
    #[arg(long, default_value_t = 64)]
    pub parallel: usize,
    /// Wait this long with all connections open before reading RSS (seconds).
    #[arg(long, default_value_t = 2.0)]
    pub settle: f64,
}
