//! The namespace: entity path → handle. Built from the validated configuration at start;
//! entities leave it when they delete themselves for idleness (rule IDL-1). Paths are
//! matched case-insensitively, as Service Bus does.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};

use super::entity::actor::{self, Durability, IdleSender};
use super::entity::state::Change;
use super::entity::{EntityHandle, settings::EntitySettings};
use super::forwarder::{self, Targets};
use super::leadership::Leadership;
use super::topic::{self, SubscriptionEntry, TopicCodec, TopicHandle};
use crate::broker::storage::{Recovered, Storage};
use crate::clock::Clock;
use crate::config::{Config, QueueConfig, SubscriptionConfig, TopicConfig};

/// What a path names.
#[derive(Debug, Clone)]
pub enum Entity {
    /// A queue: send and receive.
    Queue(EntityHandle),
    /// A topic: send only; fans out to its subscriptions.
    Topic(TopicHandle),
    /// A topic subscription: receive only.
    Subscription(EntityHandle),
}

#[path = "registry_remote.rs"]
mod remote;
pub use remote::RemoteEntities;

#[path = "registry_hosted.rs"]
mod hosted;
pub use hosted::{GroupPlacement, Hosted, Hosting, Paused};

/// What an entity was defined with: the configuration file's settings, or those given at
/// run time (admin API), in the same validated types.
#[derive(Debug, Clone, PartialEq)]
pub enum Description {
    /// A queue.
    Queue(QueueConfig),
    /// A topic (its `subscriptions` are always empty here: each has its own slot).
    Topic(TopicConfig),
    /// A subscription of `topic`.
    Subscription {
        /// The topic's name as defined.
        topic: String,
        /// The subscription (its `rules` are those it was created with; the topic holds
        /// the rules in force).
        subscription: SubscriptionConfig,
    },
}

impl Description {
    /// The entity path (`queue`, `topic`, `topic/Subscriptions/sub`).
    pub fn path(&self) -> String {
        match self {
            Description::Queue(queue) => queue.name.clone(),
            Description::Topic(topic) => topic.name.clone(),
            Description::Subscription {
                topic,
                subscription,
            } => format!("{topic}/Subscriptions/{}", subscription.name),
        }
    }
}

/// One entity in the namespace.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Its task.
    pub entity: Entity,
    /// Its definition.
    pub description: Description,
    /// When it was created (broker start for entities of the configuration file).
    pub created_at: SystemTime,
    /// When its definition last changed.
    pub updated_at: SystemTime,
    /// Where its forwarding targets are changed at run time (queues and subscriptions).
    targets: Option<watch::Sender<Targets>>,
}

/// All entities of this broker.
pub struct Registry {
    /// Lowercase path → entity. Read on every attach; written when an entity is created,
    /// changed or deleted. Never held across an await.
    entities: RwLock<HashMap<String, Slot>>,
    /// The memory budget every entity's stored bytes are charged to.
    budget: Arc<crate::broker::budget::MemoryBudget>,
    /// The core's tasks and their stop signal.
    lifecycle: crate::broker::lifecycle::Lifecycle,
    /// Turns true once every entity is registered: forwarders wait for it, so that what a
    /// recovered outbox re-sends at start-up finds its target.
    ready: tokio::sync::watch::Sender<bool>,
    /// What entities created at run time start with.
    pub(super) spawner: Spawner,
    /// Serialises namespace changes (create, update, delete) so that each is validated
    /// against the namespace as it is.
    pub(super) changes: tokio::sync::Mutex<()>,
    /// The configuration file's entities: what is stored is the namespace's difference
    /// from them.
    /// Replaced by a configuration reload ([`Registry::reload_file`]).
    pub(super) seed: RwLock<Config>,
    /// The largest message any entity takes, whatever it is configured with
    /// ([`Registry::cap_message_size`]; unlimited by default).
    message_size_cap: std::sync::atomic::AtomicU64,
    /// Its entities run where their placement group is led (`Registry::start_hosted`).
    pub(super) hosting: std::sync::OnceLock<Arc<Hosting>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Registry")
            .field("entities", &self.len())
            .finish()
    }
}

/// What the registry needs to start entities after start-up.
pub(super) struct Spawner {
    /// Wall clock.
    pub clock: Clock,
    /// The AMQP adapter's functions for topics.
    pub codec: TopicCodec,
    /// Where idle entities report their deletion.
    pub on_idle: IdleSender,
    /// The durable storage (`None`: in memory).
    pub storage: Option<Storage>,
}

/// Partitions of an entity with or without `enable_partitioning`.
pub fn partitions(enable_partitioning: bool) -> u16 {
    if enable_partitioning {
        super::partitions::PARTITIONS
    } else {
        1
    }
}

fn queue_settings(queue: &QueueConfig) -> EntitySettings {
    EntitySettings {
        path: queue.name.clone(),
        lock_duration: queue.lock_duration,
        max_delivery_count: queue.max_delivery_count,
        default_message_time_to_live: queue.default_message_time_to_live,
        dead_lettering_on_message_expiration: queue.dead_lettering_on_message_expiration,
        max_size_bytes: queue.max_size_in_megabytes.saturating_mul(1024 * 1024),
        requires_session: queue.requires_session,
        duplicate_detection_window: queue
            .requires_duplicate_detection
            .then_some(queue.duplicate_detection_history_time_window),
        auto_delete_on_idle: queue.auto_delete_on_idle,
        forwards: queue.forward_to.is_some(),
        forward_to: queue.forward_to.clone(),
        forward_dead_lettered_messages_to: queue.forward_dead_lettered_messages_to.clone(),
        status: queue.status,
        partitions: partitions(queue.enable_partitioning),
    }
}

fn subscription_settings(topic: &TopicConfig, subscription: &SubscriptionConfig) -> EntitySettings {
    // Rule TTL-3: the smaller of topic and subscription default TTL applies.
    let default_message_time_to_live = match (
        topic.default_message_time_to_live,
        subscription.default_message_time_to_live,
    ) {
        (Some(topic_ttl), Some(subscription_ttl)) => Some(topic_ttl.min(subscription_ttl)),
        (topic_ttl, subscription_ttl) => topic_ttl.or(subscription_ttl),
    };
    EntitySettings {
        path: format!("{}/Subscriptions/{}", topic.name, subscription.name),
        lock_duration: subscription.lock_duration,
        max_delivery_count: subscription.max_delivery_count,
        default_message_time_to_live,
        dead_lettering_on_message_expiration: subscription.dead_lettering_on_message_expiration,
        max_size_bytes: topic.max_size_in_megabytes.saturating_mul(1024 * 1024),
        requires_session: subscription.requires_session,
        duplicate_detection_window: None,
        auto_delete_on_idle: subscription.auto_delete_on_idle,
        forwards: subscription.forward_to.is_some(),
        forward_to: subscription.forward_to.clone(),
        forward_dead_lettered_messages_to: subscription.forward_dead_lettered_messages_to.clone(),
        // A subscription takes no sends of its own: its status only stops receiving. Its
        // topic's copies keep arriving.
        status: if subscription.status.allows_receive() {
            crate::config::EntityStatus::Active
        } else {
            crate::config::EntityStatus::ReceiveDisabled
        },
        partitions: partitions(topic.enable_partitioning),
    }
}

/// Starts an entity actor and its forwarder (every queue and subscription has one, so that
/// forwarding can be turned on at run time). With storage, the entity starts from
/// `recovered`.
fn spawn_entity(
    settings: EntitySettings,
    spawner: &Spawner,
    registry: &Arc<Registry>,
    recovered: Vec<Change>,
) -> (EntityHandle, watch::Sender<Targets>) {
    // Without a cluster every entity runs in term 1 of its node.
    let run = (Leadership::SINGLE_NODE, &registry.lifecycle);
    spawn_entity_in(settings, spawner, registry, recovered, run)
}

/// [`spawn_entity`] under `leadership` (a cluster passes the Raft term of the group's
/// leadership), its tasks in `lifecycle`.
fn spawn_entity_in(
    settings: EntitySettings,
    spawner: &Spawner,
    registry: &Arc<Registry>,
    recovered: Vec<Change>,
    (leadership, lifecycle): (Leadership, &crate::broker::lifecycle::Lifecycle),
) -> (EntityHandle, watch::Sender<Targets>) {
    let durability = spawner.storage.as_ref().map(|storage| Durability {
        storage: storage.clone(),
        key: key(&settings.path),
        recovered,
    });
    let (targets, targets_watch) = watch::channel(Targets {
        messages: settings.forward_to.clone(),
        dead_letters: settings.forward_dead_lettered_messages_to.clone(),
    });
    let (forward_sender, forward_inbox) = mpsc::unbounded_channel();
    let handle = actor::spawn(
        settings,
        spawner.clock,
        leadership,
        spawner.on_idle.clone(),
        Some(forward_sender),
        registry.budget.clone(),
        durability,
        lifecycle,
    );
    forwarder::spawn(
        handle.clone(),
        targets_watch,
        Arc::downgrade(registry),
        forward_inbox,
        lifecycle,
    );
    (handle, targets)
}

/// The registry key of a path: trimmed of slashes, lower case.
pub fn key(path: &str) -> String {
    path.trim_matches('/').to_ascii_lowercase()
}

/// Settings of a queue as its actor runs them.
pub(super) fn settings_of_queue(queue: &QueueConfig) -> EntitySettings {
    queue_settings(queue)
}

/// Settings of a subscription as its actor runs them.
pub(super) fn settings_of_subscription(
    topic: &TopicConfig,
    subscription: &SubscriptionConfig,
) -> EntitySettings {
    subscription_settings(topic, subscription)
}

impl Registry {
    /// A registry with no entities yet, for `config` (the namespace) seeded by `seed` (the
    /// configuration file's).
    fn empty((config, seed): (&Config, &Config), spawner: Spawner) -> Arc<Registry> {
        Arc::new(Registry {
            entities: RwLock::default(),
            lifecycle: Default::default(),
            ready: tokio::sync::watch::channel(false).0,
            budget: Arc::new(crate::broker::budget::MemoryBudget::new(
                config
                    .server
                    .memory_budget
                    .unwrap_or_else(crate::broker::budget::default_limit),
            )),
            spawner,
            changes: tokio::sync::Mutex::new(()),
            seed: RwLock::new(seed.clone()),
            message_size_cap: std::sync::atomic::AtomicU64::new(u64::MAX),
            hosting: std::sync::OnceLock::new(),
        })
    }

    /// Starts an actor per queue and subscription, and a fan-out task per topic. Fails
    /// (before starting anything) when a rule's SQL does not parse.
    pub fn start(
        config: &Config,
        clock: Clock,
        codec: TopicCodec,
        storage: Option<(Storage, Recovered)>,
    ) -> Result<Arc<Registry>, String> {
        Registry::start_seeded(config, config, clock, codec, storage)
    }

    /// [`Registry::start`] on `config` — the configuration file with the stored run-time
    /// changes laid over it — remembering `seed` (the file's) to store later changes as
    /// differences from it.
    pub fn start_seeded(
        config: &Config,
        seed: &Config,
        clock: Clock,
        codec: TopicCodec,
        mut storage: Option<(Storage, Recovered)>,
    ) -> Result<Arc<Registry>, String> {
        let created_at = clock.now().0;
        let mut compiled = Vec::new();
        for topic_config in &config.topics {
            for subscription in &topic_config.subscriptions {
                let rules =
                    topic::compile_rules(&subscription.rules, created_at).map_err(|error| {
                        format!(
                            "topic '{}' subscription '{}': {error}",
                            topic_config.name, subscription.name
                        )
                    })?;
                compiled.push(rules);
            }
        }
        let mut compiled = compiled.into_iter();
        let (on_idle, mut idle_paths): (IdleSender, _) = mpsc::unbounded_channel();
        let registry = Registry::empty(
            (config, seed),
            Spawner {
                clock,
                codec: codec.clone(),
                on_idle: on_idle.clone(),
                storage: storage.as_ref().map(|(storage, _)| storage.clone()),
            },
        );
        let mut recovered = |path: &str| -> Vec<Change> {
            storage
                .as_mut()
                .and_then(|(_, recovery)| recovery.entities.remove(&key(path)))
                .unwrap_or_default()
        };
        let now = SystemTime::now();
        let slot = |entity, description, targets| Slot {
            entity,
            description,
            created_at: now,
            updated_at: now,
            targets,
        };
        let mut entities = HashMap::new();
        for queue in &config.queues {
            let (handle, targets) = spawn_entity(
                queue_settings(queue),
                &registry.spawner,
                &registry,
                recovered(&queue.name),
            );
            entities.insert(
                key(&queue.name),
                slot(
                    Entity::Queue(handle),
                    Description::Queue(queue.clone()),
                    Some(targets),
                ),
            );
        }
        for topic_config in &config.topics {
            let mut subscriptions = Vec::new();
            for subscription in &topic_config.subscriptions {
                let settings = subscription_settings(topic_config, subscription);
                let path = key(&settings.path);
                let records = recovered(&settings.path);
                let (handle, targets) =
                    spawn_entity(settings, &registry.spawner, &registry, records);
                subscriptions.push(SubscriptionEntry {
                    name: subscription.name.clone(),
                    handle: handle.clone(),
                    rules: compiled.next().unwrap_or_default(),
                    dead_letter_on_filter_errors: subscription
                        .dead_lettering_on_filter_evaluation_exceptions,
                    requires_session: subscription.requires_session,
                });
                entities.insert(
                    path,
                    slot(
                        Entity::Subscription(handle),
                        Description::Subscription {
                            topic: topic_config.name.clone(),
                            subscription: subscription.clone(),
                        },
                        Some(targets),
                    ),
                );
            }
            let durability = registry.spawner.storage.as_ref().map(|storage| {
                (
                    storage.clone(),
                    key(&topic_config.name),
                    recovered(&topic_config.name),
                )
            });
            let handle = topic::spawn(
                topic_config,
                subscriptions,
                clock,
                on_idle.clone(),
                codec.clone(),
                durability,
                &registry.lifecycle,
            );
            let mut description = topic_config.clone();
            description.subscriptions.clear();
            entities.insert(
                key(&topic_config.name),
                slot(Entity::Topic(handle), Description::Topic(description), None),
            );
        }
        if let Ok(mut map) = registry.entities.write() {
            *map = entities;
        }
        registry.ready.send_replace(true);
        if let Some((_, recovery)) = &storage {
            for (entity, changes) in &recovery.entities {
                tracing::warn!(
                    %entity,
                    changes = changes.len(),
                    "the data directory holds messages of an entity the configuration no longer has; they are ignored (and dropped at the next compaction)"
                );
            }
        }
        let janitor = Arc::downgrade(&registry);
        let mut stopping = registry.lifecycle.stopping();
        registry.lifecycle.spawn(async move {
            loop {
                let path = tokio::select! {
                    path = idle_paths.recv() => path,
                    () = crate::broker::lifecycle::stopped(&mut stopping) => None,
                };
                let Some(path) = path else { break };
                let Some(registry) = janitor.upgrade() else {
                    break;
                };
                registry.remove(&path);
                tracing::info!(entity = %path, "entity deleted after being idle (auto_delete_on_idle)");
                let _guard = registry.changes.lock().await;
                let _ = registry.namespace_changed().await;
            }
        });
        Ok(registry)
    }

    /// How the entities of a registry run where their group is led follow its namespace
    /// (`None`: they run here).
    pub fn hosting(&self) -> Option<Arc<Hosting>> {
        self.hosting.get().cloned()
    }

    /// Stops every entity, topic and forwarder task and waits for them (after the front end
    /// has closed every connection).
    pub async fn shut_down(&self) {
        self.lifecycle.shut_down().await;
    }

    /// Removes an entity (and, for a topic, its subscriptions) from the map.
    pub fn remove(&self, path: &str) {
        let path = key(path);
        if let Ok(mut map) = self.entities.write() {
            map.remove(&path);
            let prefix = format!("{path}/subscriptions/");
            map.retain(|name, _| !name.starts_with(&prefix));
        }
    }

    /// The topic and subscription name of a subscription path (`t/Subscriptions/s`).
    pub fn subscription_topic(&self, path: &str) -> Option<(TopicHandle, String)> {
        let lower = key(path);
        let index = lower.find("/subscriptions/")?;
        let topic = self.lookup(&path.trim_matches('/')[..index])?;
        let subscription =
            path.trim_matches('/')[index + "/subscriptions/".len()..].trim_matches('/');
        match topic {
            Entity::Topic(handle) => Some((handle, subscription.to_string())),
            _ => None,
        }
    }

    /// Waits until every configured entity is registered (start-up).
    pub async fn wait_ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|ready| *ready).await;
    }

    /// Looks an entity up by path (case-insensitive).
    pub fn lookup(&self, path: &str) -> Option<Entity> {
        self.entities
            .read()
            .ok()?
            .get(&key(path))
            .map(|slot| slot.entity.clone())
    }

    /// An entity's slot: task, definition and times.
    pub fn slot(&self, path: &str) -> Option<Slot> {
        self.entities.read().ok()?.get(&key(path)).cloned()
    }

    /// Every slot, sorted by path.
    pub fn slots(&self) -> Vec<Slot> {
        let mut slots: Vec<(String, Slot)> = self
            .entities
            .read()
            .map(|map| map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        slots.sort_by(|a, b| a.0.cmp(&b.0));
        slots.into_iter().map(|(_, slot)| slot).collect()
    }

    /// Puts a slot into the map (namespace changes).
    pub(super) fn insert(&self, slot: Slot) {
        if let Ok(mut map) = self.entities.write() {
            map.insert(key(&slot.description.path()), slot);
        }
    }

    /// Replaces a slot's description and forwarding targets after an update.
    pub(super) fn redescribe(&self, description: Description, now: SystemTime) {
        let Ok(mut map) = self.entities.write() else {
            return;
        };
        let Some(slot) = map.get_mut(&key(&description.path())) else {
            return;
        };
        if let Some(targets) = &slot.targets {
            let (messages, dead_letters) = match &description {
                Description::Queue(queue) => (
                    queue.forward_to.clone(),
                    queue.forward_dead_lettered_messages_to.clone(),
                ),
                Description::Subscription { subscription, .. } => (
                    subscription.forward_to.clone(),
                    subscription.forward_dead_lettered_messages_to.clone(),
                ),
                Description::Topic(_) => (None, None),
            };
            targets.send_replace(Targets {
                messages,
                dead_letters,
            });
        }
        slot.description = description;
        slot.updated_at = now;
    }

    /// Starts an entity's tasks for a namespace change.
    pub(super) fn spawn_entity(
        self: &Arc<Self>,
        settings: EntitySettings,
    ) -> (EntityHandle, watch::Sender<Targets>) {
        spawn_entity(settings, &self.spawner, self, Vec::new())
    }

    /// Starts a topic's task for a namespace change.
    pub(super) fn spawn_topic(&self, config: &TopicConfig) -> TopicHandle {
        let durability = self
            .spawner
            .storage
            .as_ref()
            .map(|storage| (storage.clone(), key(&config.name), Vec::new()));
        topic::spawn(
            config,
            Vec::new(),
            self.spawner.clock,
            self.spawner.on_idle.clone(),
            self.spawner.codec.clone(),
            durability,
            &self.lifecycle,
        )
    }

    /// Whether the entity at `path` requires sessions.
    pub fn requires_session(&self, path: &str) -> bool {
        matches!(
            self.slot(path).map(|slot| slot.description),
            Some(Description::Queue(QueueConfig {
                requires_session: true,
                ..
            })) | Some(Description::Subscription {
                subscription: SubscriptionConfig {
                    requires_session: true,
                    ..
                },
                ..
            })
        )
    }

    /// The status of the entity at `path` (`Active` when unknown).
    pub fn status(&self, path: &str) -> crate::config::EntityStatus {
        match self.slot(path).map(|slot| slot.description) {
            Some(Description::Queue(queue)) => queue.status,
            Some(Description::Topic(topic)) => topic.status,
            Some(Description::Subscription { subscription, .. }) => subscription.status,
            None => crate::config::EntityStatus::Active,
        }
    }

    /// The largest message the entity at `path` accepts, in bytes (256 KiB when unknown),
    /// at most the broker's cap ([`Registry::cap_message_size`]).
    pub fn max_message_size(&self, path: &str) -> u64 {
        let configured = match self.slot(path).map(|slot| slot.description) {
            Some(Description::Queue(queue)) => queue.max_message_size_in_kilobytes * 1024,
            Some(Description::Topic(topic)) => topic.max_message_size_in_kilobytes * 1024,
            _ => 256 * 1024,
        };
        configured.min(
            self.message_size_cap
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The largest message any entity accepts, in bytes.
    pub fn largest_message_size(&self) -> u64 {
        let largest = self
            .entities
            .read()
            .map(|map| {
                map.values()
                    .map(|slot| match &slot.description {
                        Description::Queue(queue) => queue.max_message_size_in_kilobytes * 1024,
                        Description::Topic(topic) => topic.max_message_size_in_kilobytes * 1024,
                        Description::Subscription { .. } => 0,
                    })
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        largest.min(
            self.message_size_cap
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Caps every entity's largest message at `bytes` whatever it is configured with (a
    /// cluster: a message is replicated in one Raft entry, which must reach the followers
    /// within an AppendEntries request's timeout); warns once naming the entities
    /// configured with more.
    pub fn cap_message_size(&self, bytes: u64) {
        self.message_size_cap
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        let capped: Vec<String> = self
            .entities
            .read()
            .map(|map| {
                let mut capped: Vec<String> = map
                    .iter()
                    .filter(|(_, slot)| match &slot.description {
                        Description::Queue(queue) => {
                            queue.max_message_size_in_kilobytes * 1024 > bytes
                        }
                        Description::Topic(topic) => {
                            topic.max_message_size_in_kilobytes * 1024 > bytes
                        }
                        Description::Subscription { .. } => false,
                    })
                    .map(|(path, _)| path.clone())
                    .collect();
                capped.sort();
                capped
            })
            .unwrap_or_default();
        if !capped.is_empty() {
            tracing::warn!(
                "a cluster takes messages of at most {} KiB: {} configured with more (max_message_size_in_kilobytes) accept{} at most that",
                bytes / 1024,
                capped.join(", "),
                if capped.len() == 1 { "s" } else { "" }
            );
        }
    }

    /// Number of entities (queues, topics and subscriptions).
    pub fn len(&self) -> usize {
        self.entities.read().map(|map| map.len()).unwrap_or(0)
    }

    /// Whether there are no entities.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Slot {
    /// A slot created at `now`.
    pub(super) fn new(
        entity: Entity,
        description: Description,
        now: SystemTime,
        targets: Option<watch::Sender<Targets>>,
    ) -> Slot {
        Slot {
            entity,
            description,
            created_at: now,
            updated_at: now,
            targets,
        }
    }
}
