//! The namespace: entity path → handle. Built from the validated configuration at start;
//! entities leave it when they delete themselves for idleness (rule IDL-1). Paths are
//! matched case-insensitively, as Service Bus does.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::mpsc;

use super::entity::actor::{self, Durability, IdleSender};
use super::entity::{EntityHandle, settings::EntitySettings};
use super::forwarder::{self, Targets};
use super::topic::{self, SubscriptionEntry, TopicCodec, TopicHandle};
use crate::clock::Clock;
use crate::config::{Config, QueueConfig, SubscriptionConfig, TopicConfig};
use crate::store::storage::{Recovery, Storage};

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

/// All entities of this broker.
#[derive(Debug, Default)]
pub struct Registry {
    /// Lowercase path → entity. Read on every attach; written only when an entity is
    /// deleted. Never held across an await.
    entities: RwLock<HashMap<String, Entity>>,
    /// The memory budget every entity's stored bytes are charged to.
    budget: Arc<crate::broker::budget::MemoryBudget>,
    /// The core's tasks and their stop signal.
    lifecycle: crate::broker::lifecycle::Lifecycle,
    /// Turns true once every entity is registered: forwarders wait for it, so that what a
    /// recovered outbox re-sends at start-up finds its target.
    ready: tokio::sync::watch::Sender<bool>,
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
    }
}

/// Starts an entity actor, and its forwarder when it auto-forwards. With storage, the
/// entity starts from what recovery read for it.
fn spawn_entity(
    settings: EntitySettings,
    clock: Clock,
    on_idle: &IdleSender,
    registry: &Arc<Registry>,
    storage: Option<&mut (Storage, Recovery)>,
) -> EntityHandle {
    let durability = storage.map(|(storage, recovery)| {
        let key = key(&settings.path);
        Durability {
            storage: storage.clone(),
            recovered: recovery.entities.remove(&key).unwrap_or_default(),
            key,
        }
    });
    let targets = Targets {
        messages: settings.forward_to.clone(),
        dead_letters: settings.forward_dead_lettered_messages_to.clone(),
    };
    let forwarding = targets.messages.is_some() || targets.dead_letters.is_some();
    let (forward_sender, forward_inbox) = mpsc::unbounded_channel();
    let handle = actor::spawn(
        settings,
        clock,
        crate::amqp::ids::unique_u64(),
        on_idle.clone(),
        forwarding.then_some(forward_sender),
        registry.budget.clone(),
        durability,
        &registry.lifecycle,
    );
    if forwarding {
        forwarder::spawn(
            handle.clone(),
            targets,
            Arc::downgrade(registry),
            forward_inbox,
            &registry.lifecycle,
        );
    }
    handle
}

fn key(path: &str) -> String {
    path.trim_matches('/').to_ascii_lowercase()
}

impl Registry {
    /// Starts an actor per queue and subscription, and a fan-out task per topic. Fails
    /// (before starting anything) when a rule's SQL does not parse.
    pub fn start(
        config: &Config,
        clock: Clock,
        codec: TopicCodec,
        mut storage: Option<(Storage, Recovery)>,
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
        let registry = Arc::new(Registry {
            entities: RwLock::default(),
            lifecycle: Default::default(),
            ready: tokio::sync::watch::channel(false).0,
            budget: Arc::new(crate::broker::budget::MemoryBudget::new(
                config
                    .server
                    .memory_budget
                    .unwrap_or_else(crate::broker::budget::default_limit),
            )),
        });
        let (on_idle, mut idle_paths): (IdleSender, _) = mpsc::unbounded_channel();
        let mut entities = HashMap::new();
        for queue in &config.queues {
            let handle = spawn_entity(
                queue_settings(queue),
                clock,
                &on_idle,
                &registry,
                storage.as_mut(),
            );
            entities.insert(key(&queue.name), Entity::Queue(handle));
        }
        for topic_config in &config.topics {
            let mut subscriptions = Vec::new();
            for subscription in &topic_config.subscriptions {
                let settings = subscription_settings(topic_config, subscription);
                let path = key(&settings.path);
                let handle = spawn_entity(settings, clock, &on_idle, &registry, storage.as_mut());
                subscriptions.push(SubscriptionEntry {
                    name: subscription.name.clone(),
                    handle: handle.clone(),
                    rules: compiled.next().unwrap_or_default(),
                    dead_letter_on_filter_errors: subscription
                        .dead_lettering_on_filter_evaluation_exceptions,
                    requires_session: subscription.requires_session,
                });
                entities.insert(path, Entity::Subscription(handle));
            }
            let durability = storage.as_mut().map(|(storage, recovery)| {
                let key = key(&topic_config.name);
                let recovered = recovery.entities.remove(&key).unwrap_or_default();
                (storage.clone(), key, recovered)
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
            entities.insert(key(&topic_config.name), Entity::Topic(handle));
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
            }
        });
        Ok(registry)
    }

    /// Stops every entity, topic and forwarder task and waits for them (after the front end
    /// has closed every connection).
    pub async fn shut_down(&self) {
        self.lifecycle.shut_down().await;
    }

    /// Removes an entity (and, for a topic, its subscriptions).
    pub fn remove(&self, path: &str) {
        let path = key(path);
        if let Ok(mut map) = self.entities.write() {
            map.remove(&path);
            let prefix = format!("{path}/subscriptions/");
            map.retain(|name, _| !name.starts_with(&prefix));
        }
        tracing::info!(entity = %path, "entity deleted after being idle (auto_delete_on_idle)");
    }

    /// The topic and subscription name of a subscription path (`t/Subscriptions/s`).
    pub fn subscription_topic(&self, path: &str) -> Option<(TopicHandle, String)> {
        let lower = key(path);
        let index = lower.find("/subscriptions/")?;
        let topic = self.lookup(&path[..index])?;
        let subscription = path[index + "/subscriptions/".len()..].trim_matches('/');
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
        self.entities.read().ok()?.get(&key(path)).cloned()
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
