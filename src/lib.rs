//! ferrobus: a standalone AMQP 1.0 message broker with the semantics of Azure Service Bus.
//!
//! # Layout
//! - [`config`]: the TOML configuration, read raw and validated into typed settings.
//! - [`cli`]: command-line flags.
//! - [`clock`]: the wall clock injected into the core.
//! - [`server`]: the network front end (framing, SASL, connections, sessions, links).
//! - [`amqp`]: protocol adapters (addresses, message sections, `$cbs`, `$management`,
//!   the error-condition table).
//! - [`broker`]: the core: entity actors around a pure state machine, topics, registry.
//!
//! Dependency rule: `server → broker`, `server → amqp`, `amqp → broker::types`; `broker`
//! never imports `server` or AMQP frame types.

pub mod amqp;
pub mod broker;
pub mod cli;
pub mod clock;
pub mod config;
pub mod server;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::net::TcpListener;
use tokio::sync::watch;

use amqp::sas::{AccessKey, Rights};
use broker::registry::Registry;
use clock::Clock;
use config::{Config, StorageMode};
use server::{Context, ServerSettings};
use store::storage::{Recovery, Storage, StorageOptions};

/// Checks what the configuration parser cannot: rule SQL compiles.
pub fn validate(config: &Config) -> Result<(), String> {
    for topic in &config.topics {
        for subscription in &topic.subscriptions {
            broker::topic::compile_rules(&subscription.rules, 0).map_err(|error| {
                format!(
                    "topic '{}' subscription '{}': {error}",
                    topic.name, subscription.name
                )
            })?;
        }
    }
    Ok(())
}

/// Opens the data directory of a durable configuration and recovers what it holds;
/// `None` in memory mode. Fails when the directory is locked by another process, cannot be
/// created, or holds a log damaged before its tail.
pub fn open_storage(config: &Config) -> Result<Option<(Storage, Recovery)>, String> {
    if config.storage.mode == StorageMode::Memory {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let mut options = StorageOptions::new(&config.storage.data_dir);
    options.min_free_space = config.storage.min_free_space;
    options.compaction_min_bytes = config.storage.compaction_threshold;
    let (storage, mut recovery) = Storage::open(options).map_err(|error| error.to_string())?;
    recovery.elapsed = started.elapsed();
    Ok(Some((storage, recovery)))
}

/// Runs the broker on an already-bound listener until `shutdown` turns true, with the
/// storage its configuration names. Fails at once (serving nothing) if the configuration's
/// rules do not compile or the data directory cannot be opened.
pub async fn run(
    listener: TcpListener,
    config: &Config,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let storage = open_storage(config)?;
    run_with_storage(listener, config, storage, shutdown).await
}

/// [`run`] with storage already opened by [`open_storage`].
pub async fn run_with_storage(
    listener: TcpListener,
    config: &Config,
    storage: Option<(Storage, Recovery)>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let clock = Clock::system();
    let store = storage.as_ref().map(|(storage, _)| storage.clone());
    if let Some((storage, recovery)) = &storage {
        let messages: usize = recovery
            .entities
            .values()
            .map(|changes| {
                changes
                    .iter()
                    .filter(|change| matches!(change, broker::entity::state::Change::Put { .. }))
                    .count()
            })
            .sum();
        tracing::info!(
            data_dir = %storage.directory().display(),
            records = recovery.records,
            entities = recovery.entities.len(),
            "recovered the data directory in {:.1} ms ({messages} message records)",
            recovery.elapsed.as_secs_f64() * 1000.0
        );
    }
    let codec = broker::topic::TopicCodec {
        rewrite: Arc::new(amqp::rewrite::apply_rule_action),
        decode_properties: Arc::new(amqp::rewrite::decode_user_properties),
    };
    let registry = Registry::start(config, clock, codec, storage)?;
    let keys = config
        .auth
        .keys
        .iter()
        .map(|key| AccessKey {
            name: key.name.clone(),
            key: key.key.clone(),
            rights: Rights {
                manage: key.rights.manage,
                send: key.rights.send || key.rights.manage,
                listen: key.rights.listen || key.rights.manage,
            },
        })
        .collect();
    let mut max_message_sizes = HashMap::new();
    for queue in &config.queues {
        max_message_sizes.insert(
            queue.name.to_ascii_lowercase(),
            queue.max_message_size_in_kilobytes * 1024,
        );
    }
    for topic in &config.topics {
        max_message_sizes.insert(
            topic.name.to_ascii_lowercase(),
            topic.max_message_size_in_kilobytes * 1024,
        );
    }
    let mut session_entities = std::collections::HashSet::new();
    for queue in config.queues.iter().filter(|queue| queue.requires_session) {
        session_entities.insert(queue.name.to_ascii_lowercase());
    }
    for topic in &config.topics {
        for subscription in topic.subscriptions.iter().filter(|s| s.requires_session) {
            session_entities.insert(
                format!("{}/subscriptions/{}", topic.name, subscription.name).to_ascii_lowercase(),
            );
        }
    }
    let context = Arc::new(Context {
        session_entities,
        settings: ServerSettings {
            idle_timeout: config.server.idle_timeout,
            max_frame_size: config.server.max_frame_size,
            max_connections: config.server.max_connections,
            shutdown_grace_period: config.server.shutdown_grace_period,
            keys,
        },
        registry,
        clock,
        next_receiver_id: AtomicU64::new(1),
        max_message_sizes,
    });
    let registry = context.registry.clone();
    server::serve(listener, context, shutdown).await;
    // Every connection is closed: now the entities, topics and forwarders stop.
    registry.shut_down().await;
    if let Some(store) = store {
        // Everything acknowledged is on disk already; this releases the directory.
        store.close();
    }
    Ok(())
}
