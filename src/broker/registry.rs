//! The namespace: entity path → handle. Built from the validated configuration at start.
//! Paths are matched case-insensitively, as Service Bus does.

use std::collections::HashMap;

use super::entity::{EntityHandle, actor, settings::EntitySettings};
use super::topic::{self, TopicHandle};
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

/// All entities of this broker.
#[derive(Debug, Default)]
pub struct Registry {
    /// Lowercase path → entity.
    entities: HashMap<String, Entity>,
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
    }
}

impl Registry {
    /// Starts an actor per queue and subscription, and a fan-out task per topic.
    pub fn start(config: &Config, clock: Clock) -> Registry {
        let mut registry = Registry::default();
        for queue in &config.queues {
            let handle = actor::spawn(queue_settings(queue), clock, crate::amqp::ids::unique_u64());
            registry
                .entities
                .insert(queue.name.to_ascii_lowercase(), Entity::Queue(handle));
        }
        for topic_config in &config.topics {
            let mut subscriptions = Vec::new();
            for subscription in &topic_config.subscriptions {
                let settings = subscription_settings(topic_config, subscription);
                let key = settings.path.to_ascii_lowercase();
                let handle = actor::spawn(settings, clock, crate::amqp::ids::unique_u64());
                subscriptions.push(handle.clone());
                registry.entities.insert(key, Entity::Subscription(handle));
            }
            let handle = topic::spawn(topic_config.name.clone(), subscriptions);
            registry.entities.insert(
                topic_config.name.to_ascii_lowercase(),
                Entity::Topic(handle),
            );
        }
        registry
    }

    /// Looks an entity up by path (case-insensitive).
    pub fn lookup(&self, path: &str) -> Option<Entity> {
        self.entities
            .get(&path.trim_matches('/').to_ascii_lowercase())
            .cloned()
    }

    /// Number of entities (queues, topics and subscriptions).
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    /// Whether there are no entities.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }
}
