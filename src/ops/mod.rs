//! The operator CLI: `ferrobus queue|topic|subscription|rule|send|peek|receive|resubmit|purge|
//! status` and `ferrobus config reload`, commands that talk to a running broker with the
//! SDKs' connection string. Reference: `docs/cli.md`.
//!
//! - [`client`]: the connection string, the HTTP client and the errors with their exit codes.
//! - [`entities`]: queues, topics, subscriptions and rules (the explorer's JSON API for
//!   entities, whose definitions are the configuration file's TOML; the admin API for rules).
//! - [`messages`]: peek, resubmit, purge (the explorer's JSON API) and the status table.
//! - [`send`] and [`receive`]: sending and receiving over AMQP (fe2o3-amqp) as an SDK does,
//!   with the rights a sender or receiver needs; [`amqp`]: their connection and errors.
//! - [`output`]: tables and the JSON shape of a message.
//! - [`cluster`]: a cluster's membership (`ferrobus cluster status|add-node|remove-node`).
//!
//! Nothing here touches the broker's internals: every operation goes through a route a
//! client could call, so the CLI sees what any client sees. This module owns only argument
//! shapes and dispatch.

pub mod amqp;
pub mod client;
pub mod cluster;
pub mod entities;
pub mod messages;
pub mod output;
pub mod receive;
pub mod send;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

pub use client::{OpsError, Target};

/// Where the broker is and how to print: taken by every operator command, before or after
/// its subcommand.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct Connection {
    /// The SDKs' connection string (`Endpoint=sb://host:port;SharedAccessKeyName=…;
    /// SharedAccessKey=…`) [default: $FERROBUS_CONNECTION_STRING, else
    /// Endpoint=sb://localhost:5672 without a key].
    #[arg(long, global = true, value_name = "TEXT")]
    pub connection_string: Option<String>,

    /// Output format [default: table for lists and single entities, json (one line per
    /// message) for messages].
    #[arg(long, short = 'o', global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns (or key: value lines) for people.
    Table,
    /// JSON (one object, or one object per line for messages) for scripts.
    Json,
}

/// The operator commands, flattened into the top-level `ferrobus` subcommands.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum OpsCommand {
    /// Queues: list (with counts), show, create, update, delete.
    Queue {
        #[command(subcommand)]
        action: QueueAction,
        #[command(flatten)]
        connection: Connection,
    },
    /// Topics: list (with counts), show, create, update, delete.
    Topic {
        #[command(subcommand)]
        action: QueueAction,
        #[command(flatten)]
        connection: Connection,
    },
    /// Subscriptions of a topic: list (with counts), show, create, update, delete.
    Subscription {
        #[command(subcommand)]
        action: SubscriptionAction,
        #[command(flatten)]
        connection: Connection,
    },
    /// Rules of a subscription: list, show, create, update, delete.
    Rule {
        #[command(subcommand)]
        action: RuleAction,
        #[command(flatten)]
        connection: Connection,
    },
    /// Send a message over AMQP (body from --body, --file or stdin).
    Send(SendArgs),
    /// Print messages without taking them (JSON lines by default).
    Peek(PeekArgs),
    /// Receive messages over AMQP (peek-lock and complete, or receive-and-delete).
    Receive(ReceiveArgs),
    /// Move dead letters back to their entity (or another).
    Resubmit(ResubmitArgs),
    /// Delete every message of an entity's queue, dead-letter queue or transfer dead-letter
    /// queue (messages a receiver holds locked stay).
    Purge(PurgeArgs),
    /// A cluster's members: status, add-node, remove-node (asked of the leader through
    /// any node).
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
        #[command(flatten)]
        connection: Connection,
    },
    /// Every entity with its message counts.
    Status {
        #[command(flatten)]
        connection: Connection,
    },
}

/// `ferrobus queue …` and `ferrobus topic …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum QueueAction {
    /// Every entity of this kind with its counts.
    List,
    /// One entity: status, counts, definition (and rules, sessions).
    Show {
        /// The entity's name.
        name: String,
    },
    /// Create an entity with the settings given (the broker's defaults for the rest).
    Create {
        /// The entity's name.
        name: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// Change the settings given; the others stay.
    Update {
        /// The entity's name.
        name: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// Delete the entity and its messages.
    Delete {
        /// The entity's name.
        name: String,
    },
}

/// `ferrobus subscription …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum SubscriptionAction {
    /// The topic's subscriptions with their counts.
    List {
        /// The topic.
        topic: String,
    },
    /// One subscription: status, counts, definition, rules.
    Show {
        /// The topic.
        topic: String,
        /// The subscription.
        name: String,
    },
    /// Create a subscription (with the `$Default` rule that takes every message).
    Create {
        /// The topic (must exist).
        topic: String,
        /// The subscription.
        name: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// Change the settings given; the others (and the rules) stay.
    Update {
        /// The topic.
        topic: String,
        /// The subscription.
        name: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// Delete the subscription and its messages.
    Delete {
        /// The topic.
        topic: String,
        /// The subscription.
        name: String,
    },
}

/// `ferrobus rule …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum RuleAction {
    /// The subscription's rules: name, filter, action.
    List {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
    },
    /// One rule.
    Show {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule.
        name: String,
    },
    /// Add a rule (a SQL filter, a correlation filter, or with neither a filter that takes
    /// every message).
    Create {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule.
        name: String,
        #[command(flatten)]
        rule: RuleSettings,
    },
    /// Replace a rule's filter and action.
    Update {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule.
        name: String,
        #[command(flatten)]
        rule: RuleSettings,
    },
    /// Delete a rule.
    Delete {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule.
        name: String,
    },
}

/// Entity settings, named as in the configuration file (`docs/configuration.md`); each is
/// checked by the broker as the file's would be. Durations: `30s`, `5m`, `PT1M`, `14d`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct Settings {
    /// Lock duration (queues, subscriptions).
    #[arg(long, value_name = "DURATION")]
    pub lock_duration: Option<String>,
    /// Deliveries before a message is dead-lettered (queues, subscriptions).
    #[arg(long, value_name = "N")]
    pub max_delivery_count: Option<u32>,
    /// Default time to live of a message.
    #[arg(long, value_name = "DURATION")]
    pub default_message_time_to_live: Option<String>,
    /// Dead-letter expired messages (queues, subscriptions).
    #[arg(long, value_name = "BOOL")]
    pub dead_lettering_on_message_expiration: Option<bool>,
    /// Sessions (queues, subscriptions; at creation only).
    #[arg(long, value_name = "BOOL")]
    pub requires_session: Option<bool>,
    /// Duplicate detection (queues, topics; at creation only).
    #[arg(long, value_name = "BOOL")]
    pub requires_duplicate_detection: Option<bool>,
    /// Duplicate detection window.
    #[arg(long, value_name = "DURATION")]
    pub duplicate_detection_history_time_window: Option<String>,
    /// Delete the entity after this long unused.
    #[arg(long, value_name = "DURATION")]
    pub auto_delete_on_idle: Option<String>,
    /// Forward every message to this entity (queues, subscriptions).
    #[arg(long, value_name = "PATH")]
    pub forward_to: Option<String>,
    /// Forward dead letters to this entity (queues, subscriptions).
    #[arg(long, value_name = "PATH")]
    pub forward_dead_lettered_messages_to: Option<String>,
    /// Size quota in megabytes (queues, topics).
    #[arg(long, value_name = "N")]
    pub max_size_in_megabytes: Option<u64>,
    /// Active, Disabled, SendDisabled or ReceiveDisabled.
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// Free text kept with the entity.
    #[arg(long, value_name = "TEXT")]
    pub user_metadata: Option<String>,
    /// Any other setting of the configuration file, as KEY=VALUE (VALUE in TOML: 5, true,
    /// "text"; a bare word is taken as text). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// A rule's filter and action.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct RuleSettings {
    /// SQL filter, e.g. "colour = 'red' AND size > 3".
    #[arg(long, value_name = "EXPRESSION")]
    pub sql: Option<String>,
    /// Correlation filter: correlation id.
    #[arg(long, value_name = "TEXT")]
    pub correlation_id: Option<String>,
    /// Correlation filter: message id.
    #[arg(long, value_name = "TEXT")]
    pub message_id: Option<String>,
    /// Correlation filter: to.
    #[arg(long, value_name = "TEXT")]
    pub to: Option<String>,
    /// Correlation filter: reply to.
    #[arg(long, value_name = "TEXT")]
    pub reply_to: Option<String>,
    /// Correlation filter: subject (label).
    #[arg(long, value_name = "TEXT")]
    pub subject: Option<String>,
    /// Correlation filter: session id.
    #[arg(long, value_name = "TEXT")]
    pub session_id: Option<String>,
    /// Correlation filter: content type.
    #[arg(long, value_name = "TEXT")]
    pub content_type: Option<String>,
    /// Correlation filter: an application property equal to a value (NAME=VALUE, the value
    /// typed as for `send --property`). Repeatable.
    #[arg(long = "property", short = 'p', value_name = "NAME=VALUE")]
    pub properties: Vec<String>,
    /// SQL action run on matching messages, e.g. "SET sys.label = 'routed'".
    #[arg(long, value_name = "EXPRESSION")]
    pub action: Option<String>,
}

/// Which queue of an entity a message command works on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum SubQueue {
    /// The entity's own messages.
    #[default]
    Main,
    /// The dead-letter queue (`$DeadLetterQueue`).
    Dlq,
    /// The transfer dead-letter queue (`$Transfer/$DeadLetterQueue`).
    TransferDlq,
}

impl SubQueue {
    /// The explorer API's name of it.
    pub fn api_name(self) -> &'static str {
        match self {
            SubQueue::Main => "main",
            SubQueue::Dlq => "dlq",
            SubQueue::TransferDlq => "transfer-dlq",
        }
    }
}

/// `ferrobus send`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct SendArgs {
    /// The queue or topic.
    pub path: String,
    /// The body text (else --file, else standard input).
    #[arg(long, conflicts_with = "file", value_name = "TEXT")]
    pub body: Option<String>,
    /// Read the body from this file (any bytes).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// An application property, NAME=VALUE: a number, true or false is sent typed, anything
    /// else (or a value in double quotes) as text. Repeatable.
    #[arg(long = "property", short = 'p', value_name = "NAME=VALUE")]
    pub properties: Vec<String>,
    /// The message id [default: one the broker makes].
    #[arg(long, value_name = "TEXT")]
    pub message_id: Option<String>,
    /// The correlation id.
    #[arg(long, value_name = "TEXT")]
    pub correlation_id: Option<String>,
    /// The subject (label).
    #[arg(long, value_name = "TEXT")]
    pub subject: Option<String>,
    /// The content type, e.g. application/json.
    #[arg(long, value_name = "TEXT")]
    pub content_type: Option<String>,
    /// The session id (needed by session entities).
    #[arg(long, value_name = "TEXT")]
    pub session_id: Option<String>,
    /// Time to live: a duration (30s, 5m, PT1H) or a number of seconds.
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
    pub ttl: Option<std::time::Duration>,
    /// Scheduled enqueue time: RFC 3339 (2030-01-01T00:00:00Z) or +DURATION from now (+30s,
    /// +5m).
    #[arg(long, value_name = "TIME")]
    pub schedule: Option<String>,
    /// Send this many copies (1 to 1000).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub count: u32,
    #[command(flatten)]
    pub connection: Connection,
}

/// `ferrobus peek`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct PeekArgs {
    /// The entity: a queue, or TOPIC/Subscriptions/SUBSCRIPTION.
    pub path: String,
    /// Which queue of the entity.
    #[arg(long, value_enum, default_value_t)]
    pub queue: SubQueue,
    /// How many messages at most.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub count: usize,
    /// Start at this sequence number.
    #[arg(long, default_value_t = 0, value_name = "SEQ")]
    pub from: i64,
    /// Only messages in this state: all, active, deferred, scheduled.
    #[arg(long, default_value = "all", value_name = "STATE")]
    pub state: String,
    #[command(flatten)]
    pub connection: Connection,
}

/// `ferrobus receive`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ReceiveArgs {
    /// The entity: a queue, or TOPIC/Subscriptions/SUBSCRIPTION.
    pub path: String,
    /// Which queue of the entity.
    #[arg(long, value_enum, default_value_t)]
    pub queue: SubQueue,
    /// How many messages at most.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub count: u32,
    /// How long to wait for the next message before stopping with what was received
    /// (500ms, 5s, 1m).
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = parse_wait)]
    pub wait: std::time::Duration,
    /// Take the messages without a lock (receive-and-delete) instead of locking and
    /// completing each.
    #[arg(long)]
    pub receive_and_delete: bool,
    /// The session to receive from (session entities; default: the next one with messages).
    #[arg(long, value_name = "ID")]
    pub session_id: Option<String>,
    #[command(flatten)]
    pub connection: Connection,
}

/// `ferrobus resubmit`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ResubmitArgs {
    /// The entity whose dead letters are resubmitted.
    pub path: String,
    /// The dead letter with this sequence number (repeatable).
    #[arg(long = "sequence", value_name = "SEQ", required_unless_present = "all")]
    pub sequence_numbers: Vec<i64>,
    /// Every dead letter.
    #[arg(long, conflicts_with = "sequence_numbers")]
    pub all: bool,
    /// Send them to this entity instead of back to their own.
    #[arg(long, value_name = "PATH")]
    pub to: Option<String>,
    /// Resubmit from the transfer dead-letter queue instead.
    #[arg(long)]
    pub transfer: bool,
    #[command(flatten)]
    pub connection: Connection,
}

/// `ferrobus purge`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct PurgeArgs {
    /// The entity.
    pub path: String,
    /// Which queue of the entity.
    #[arg(long, value_enum, default_value_t)]
    pub queue: SubQueue,
    #[command(flatten)]
    pub connection: Connection,
}

/// `ferrobus cluster …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ClusterAction {
    /// The leader's view: each node, voter or learner, how far its log is.
    Status,
    /// Add a node (started with `[cluster] join = true`): it receives the log (the leader's
    /// snapshot first, when the leader compacted its log) as a learner until it has caught
    /// up, then votes.
    AddNode {
        /// The new node's id.
        id: u64,
        /// Its peer address (`host:port`, its `[cluster] address`).
        address: String,
    },
    /// Remove a node from the cluster (it stops).
    RemoveNode {
        /// The node's id.
        id: u64,
    },
    /// The leader drains its clients, hands its leadership to another node (ID, or the one
    /// with the most of the log) and comes back as a follower.
    TransferLeader {
        /// The node to lead next.
        id: Option<u64>,
    },
}

/// `ferrobus config reload`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    pub connection: Connection,
}

fn parse_wait(text: &str) -> Result<std::time::Duration, String> {
    crate::config::duration::parse_duration(text)
}

/// `--ttl`: a duration, or a bare number of seconds.
fn parse_ttl(text: &str) -> Result<std::time::Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(seconds) => Ok(std::time::Duration::from_secs(seconds)),
        Err(_) => crate::config::duration::parse_duration(text),
    }
}

/// Runs an operator command to its end and returns the exit status (errors printed to
/// stderr as `ferrobus: …`).
pub fn run(command: &OpsCommand) -> ExitCode {
    finish(block_on(dispatch(command)))
}

/// Runs `ferrobus config reload`.
pub fn run_reload(arguments: &ReloadArgs) -> ExitCode {
    finish(block_on(entities::reload(&arguments.connection)))
}

fn block_on<F: std::future::Future<Output = Result<(), OpsError>>>(
    future: F,
) -> Result<(), OpsError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| OpsError::Refused(format!("cannot start the runtime: {error}")))?
        .block_on(future)
}

fn finish(result: Result<(), OpsError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ferrobus: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

async fn dispatch(command: &OpsCommand) -> Result<(), OpsError> {
    match command {
        OpsCommand::Queue { action, connection } => {
            entities::queue_or_topic(entities::Kind::Queue, action, connection).await
        }
        OpsCommand::Topic { action, connection } => {
            entities::queue_or_topic(entities::Kind::Topic, action, connection).await
        }
        OpsCommand::Subscription { action, connection } => {
            entities::subscription(action, connection).await
        }
        OpsCommand::Rule { action, connection } => entities::rule(action, connection).await,
        OpsCommand::Send(arguments) => send::send(arguments).await,
        OpsCommand::Peek(arguments) => messages::peek(arguments).await,
        OpsCommand::Receive(arguments) => receive::receive(arguments).await,
        OpsCommand::Resubmit(arguments) => messages::resubmit(arguments).await,
        OpsCommand::Purge(arguments) => messages::purge(arguments).await,
        OpsCommand::Status { connection } => messages::status(connection).await,
        OpsCommand::Cluster { action, connection } => cluster::cluster(action, connection).await,
    }
}
