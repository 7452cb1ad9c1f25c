//! The namespace façade: entities created, changed and deleted at run time, by path.
//!
//! The configuration file seeds the namespace at start; afterwards the admin API (and
//! anything else that manages entities) goes through these operations, which validate a
//! change against the whole namespace with the configuration's own checks
//! ([`Config::validate`]: names, uniqueness, forward targets, ranges), so each mistake gets
//! the same message whichever way it was made. Changes are serialised by one lock; entity
//! tasks are started and stopped here, and the namespace's run-time changes are handed to
//! the storage (when durable) before the operation is answered.

use std::sync::Arc;
use std::time::SystemTime;

use super::entity::{Command, EntityCounts, Reply, ReplyTo};
use super::filter::Filter;
use super::registry::{self, Description, Entity, Registry, Slot};
use super::rules::{Rule, RuleDefinition};
use super::topic::{RuleOperation, SubscriptionEntry, TopicCommand};
use super::types::EntityError;
use crate::config::changes::NamespaceChanges;
use crate::config::{Config, QueueConfig, SubscriptionConfig, TopicConfig};

/// Why a namespace operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NamespaceError {
    /// No entity (or rule) at that path.
    #[error("{0}")]
    NotFound(String),
    /// The path is taken.
    #[error("{0}")]
    Exists(String),
    /// The definition breaks a rule of the configuration.
    #[error("{0}")]
    Invalid(String),
    /// The change could not be carried out (storage, a stopped task).
    #[error("{0}")]
    Failed(String),
    /// Not now: the entity's node is busy or taking over; the same request may succeed
    /// when tried again.
    #[error("{0}")]
    Busy(String),
}

impl From<EntityError> for NamespaceError {
    fn from(error: EntityError) -> NamespaceError {
        match error {
            EntityError::NotFound(path) => {
                NamespaceError::NotFound(format!("The messaging entity '{path}' was not found."))
            }
            EntityError::AlreadyExists(text) => NamespaceError::Exists(text),
            // A rule that is not there (the topic's answer to remove-rule).
            EntityError::MessageNotFound(text) => NamespaceError::NotFound(text),
            EntityError::Argument(text) | EntityError::LimitExceeded(text) => {
                NamespaceError::Invalid(text)
            }
            EntityError::Timeout(text) => NamespaceError::Busy(text),
            other => NamespaceError::Failed(other.to_string()),
        }
    }
}

fn not_found(path: &str) -> NamespaceError {
    NamespaceError::NotFound(format!("The messaging entity '{path}' could not be found."))
}

fn exists(path: &str) -> NamespaceError {
    NamespaceError::Exists(format!("The messaging entity '{path}' already exists."))
}

/// Runtime counts of an entity, for the admin API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Runtime {
    /// Message counts and size (for a topic: its scheduled messages).
    pub counts: EntityCounts,
    /// Number of subscriptions (topics).
    pub subscription_count: u64,
}

impl Registry {
    /// The namespace as a configuration: every entity's definition (server, auth and
    /// storage settings at their defaults), for validation and for storing.
    pub fn definitions(&self) -> Config {
        let mut config = Config::builtin_default();
        config.queues.clear();
        config.topics.clear();
        let slots = self.slots();
        for slot in &slots {
            match &slot.description {
                Description::Queue(queue) => config.queues.push(queue.clone()),
                Description::Topic(topic) => config.topics.push(topic.clone()),
                Description::Subscription { .. } => {}
            }
        }
        for slot in slots {
            if let Description::Subscription {
                topic,
                subscription,
            } = slot.description
                && let Some(owner) = config
                    .topics
                    .iter_mut()
                    .find(|candidate| candidate.name.eq_ignore_ascii_case(&topic))
            {
                owner.subscriptions.push(subscription);
            }
        }
        config
    }

    /// Checks a namespace with one definition added or replaced.
    fn check(&self, description: &Description) -> Result<(), NamespaceError> {
        self.with_definition(description).map(|_| ())
    }

    /// The namespace with one definition added or replaced, validated.
    fn with_definition(&self, description: &Description) -> Result<Config, NamespaceError> {
        let mut config = self.definitions();
        // Cloud-parity mode applies to entities made at run time as to the file's.
        config.server.strict = self.seed().server.strict;
        match description {
            Description::Queue(queue) => {
                config
                    .queues
                    .retain(|existing| !existing.name.eq_ignore_ascii_case(&queue.name));
                config.queues.push(queue.clone());
            }
            Description::Topic(topic) => {
                match config
                    .topics
                    .iter_mut()
                    .find(|existing| existing.name.eq_ignore_ascii_case(&topic.name))
                {
                    Some(existing) => {
                        let subscriptions = std::mem::take(&mut existing.subscriptions);
                        *existing = TopicConfig {
                            subscriptions,
                            ..topic.clone()
                        };
                    }
                    None => config.topics.push(topic.clone()),
                }
            }
            Description::Subscription {
                topic,
                subscription,
            } => {
                let owner = config
                    .topics
                    .iter_mut()
                    .find(|existing| existing.name.eq_ignore_ascii_case(topic))
                    .ok_or_else(|| not_found(topic))?;
                owner
                    .subscriptions
                    .retain(|existing| !existing.name.eq_ignore_ascii_case(&subscription.name));
                owner.subscriptions.push(subscription.clone());
            }
        }
        config
            .validate()
            .map_err(|error| NamespaceError::Invalid(error.to_string()))?;
        Ok(config)
    }

    /// Creates a queue, topic or subscription. A topic is created without subscriptions
    /// (create them one by one); a subscription starts with the rules it is given.
    pub async fn create(
        self: &Arc<Self>,
        description: Description,
    ) -> Result<Slot, NamespaceError> {
        let _guard = self.changes.lock().await;
        if let Some(hosting) = self.hosting.get() {
            let slot = self.create_hosted(hosting, description).await?;
            tracing::info!(entity = %slot.description.path(), "entity created");
            return Ok(slot);
        }
        let slot = self.apply_create(description, true).await?;
        self.namespace_changed().await?;
        tracing::info!(entity = %slot.description.path(), "entity created");
        Ok(slot)
    }

    /// [`Registry::create`] on a registry whose entities run where their group is led: the
    /// namespace with the definition added is stored (through the metadata group), and
    /// every member, this one included, follows it (`registry::hosted`).
    async fn create_hosted(
        &self,
        hosting: &Arc<super::registry::Hosting>,
        mut description: Description,
    ) -> Result<Slot, NamespaceError> {
        let path = description.path();
        if self.slot(&path).is_some() {
            return Err(exists(&path));
        }
        if let Description::Topic(topic) = &mut description {
            topic.subscriptions.clear();
        }
        let before = self.definitions();
        let mut after = self.with_definition(&description)?;
        after.server.strict = before.server.strict;
        hosting.follow(self, &after);
        if let Err(error) = self.namespace_changed().await {
            hosting.follow(self, &before);
            return Err(error);
        }
        self.slot(&path).ok_or_else(|| not_found(&path))
    }

    /// [`Registry::create`] under the caller's hold of the change lock, storing nothing;
    /// `validate`: check the namespace with the definition added first (a configuration
    /// reload checks the whole new namespace before it starts).
    pub(super) async fn apply_create(
        self: &Arc<Self>,
        description: Description,
        validate: bool,
    ) -> Result<Slot, NamespaceError> {
        let path = description.path();
        if self.slot(&path).is_some() {
            return Err(exists(&path));
        }
        if let Description::Queue(queue) = &description
            && self.slot(&queue.name).is_some()
        {
            return Err(exists(&path));
        }
        if validate {
            self.check(&description)?;
        }
        let now = SystemTime::now();
        let slot = match description {
            Description::Queue(queue) => {
                let (handle, targets) = self.spawn_entity(registry::settings_of_queue(&queue));
                Slot::new(
                    Entity::Queue(handle),
                    Description::Queue(queue),
                    now,
                    Some(targets),
                )
            }
            Description::Topic(mut topic) => {
                topic.subscriptions.clear();
                let handle = self.spawn_topic(&topic);
                Slot::new(Entity::Topic(handle), Description::Topic(topic), now, None)
            }
            Description::Subscription {
                topic,
                subscription,
            } => {
                let Some(Slot {
                    entity: Entity::Topic(topic_handle),
                    description: Description::Topic(topic_config),
                    ..
                }) = self.slot(&topic)
                else {
                    return Err(not_found(&topic));
                };
                let rules = super::topic::compile_rules(&subscription.rules, now_millis(now))
                    .map_err(|error| NamespaceError::Invalid(error.to_string()))?;
                let (handle, targets) = self.spawn_entity(registry::settings_of_subscription(
                    &topic_config,
                    &subscription,
                ));
                let entry = SubscriptionEntry {
                    name: subscription.name.clone(),
                    handle: handle.clone(),
                    rules,
                    dead_letter_on_filter_errors: subscription
                        .dead_lettering_on_filter_evaluation_exceptions,
                    requires_session: subscription.requires_session,
                };
                let (reply, answer) = ReplyTo::oneshot();
                topic_handle
                    .send(TopicCommand::AddSubscription {
                        entry: Box::new(entry),
                        reply,
                    })
                    .await?;
                if let Err(error) =
                    ReplyTo::wait(answer, || EntityError::NotFound(topic_config.name.clone())).await
                {
                    delete_entity(&handle).await.ok();
                    return Err(error.into());
                }
                Slot::new(
                    Entity::Subscription(handle),
                    Description::Subscription {
                        topic: topic_config.name.clone(),
                        subscription,
                    },
                    now,
                    Some(targets),
                )
            }
        };
        self.insert(slot.clone());
        Ok(slot)
    }

    /// Changes an entity's settings; the running tasks apply them at once. The name,
    /// `requires_session` and a subscription's rules do not change here (Service Bus
    /// refuses the first two; rules have their own operations).
    pub async fn update(&self, description: Description) -> Result<Slot, NamespaceError> {
        let _guard = self.changes.lock().await;
        let path = description.path();
        self.apply_update(description, true).await?;
        self.namespace_changed().await?;
        self.hosting_follows();
        tracing::info!(entity = %path, "entity updated");
        self.slot(&path).ok_or_else(|| not_found(&path))
    }

    /// [`Registry::update`] under the caller's hold of the change lock, storing nothing
    /// (`validate` as for [`Registry::apply_create`]).
    pub(super) async fn apply_update(
        &self,
        description: Description,
        validate: bool,
    ) -> Result<(), NamespaceError> {
        let path = description.path();
        let Some(current) = self.slot(&path) else {
            return Err(not_found(&path));
        };
        let description = match (&current.description, description) {
            (Description::Queue(old), Description::Queue(mut new)) => {
                new.name = old.name.clone();
                // Fixed at creation, as in Service Bus.
                new.enable_partitioning = old.enable_partitioning;
                if new.requires_session != old.requires_session {
                    return Err(NamespaceError::Invalid(format!(
                        "queue '{}': requires_session cannot be changed on an existing queue",
                        old.name
                    )));
                }
                Description::Queue(new)
            }
            (Description::Topic(old), Description::Topic(mut new)) => {
                new.name = old.name.clone();
                new.enable_partitioning = old.enable_partitioning;
                new.subscriptions.clear();
                Description::Topic(new)
            }
            (
                Description::Subscription {
                    topic,
                    subscription: old,
                },
                Description::Subscription {
                    subscription: mut new,
                    ..
                },
            ) => {
                new.name = old.name.clone();
                new.rules = old.rules.clone();
                if new.requires_session != old.requires_session {
                    return Err(NamespaceError::Invalid(format!(
                        "subscription '{}': requires_session cannot be changed on an existing subscription",
                        old.name
                    )));
                }
                Description::Subscription {
                    topic: topic.clone(),
                    subscription: new,
                }
            }
            _ => {
                return Err(NamespaceError::Invalid(format!(
                    "'{path}' is an entity of another kind"
                )));
            }
        };
        if validate {
            self.check(&description)?;
        }
        match (&current.entity, &description) {
            (Entity::Queue(handle), Description::Queue(queue)) => {
                update_entity(handle, registry::settings_of_queue(queue)).await?;
            }
            (
                Entity::Subscription(handle),
                Description::Subscription {
                    topic,
                    subscription,
                },
            ) => {
                let Some(Description::Topic(topic_config)) =
                    self.slot(topic).map(|slot| slot.description)
                else {
                    return Err(not_found(topic));
                };
                update_entity(
                    handle,
                    registry::settings_of_subscription(&topic_config, subscription),
                )
                .await?;
            }
            (Entity::Topic(handle), Description::Topic(topic)) => {
                let (reply, answer) = ReplyTo::oneshot();
                handle
                    .send(TopicCommand::Update {
                        duplicate_detection: topic
                            .requires_duplicate_detection
                            .then_some(topic.duplicate_detection_history_time_window),
                        auto_delete_on_idle: topic.auto_delete_on_idle,
                        status: topic.status,
                        reply,
                    })
                    .await?;
                ReplyTo::wait(answer, || EntityError::NotFound(topic.name.clone())).await?;
                // The topic's TTL is applied by its subscriptions (rule TTL-3).
                for slot in self.slots() {
                    if let (
                        Entity::Subscription(sub_handle),
                        Description::Subscription {
                            topic: owner,
                            subscription,
                        },
                    ) = (&slot.entity, &slot.description)
                        && owner.eq_ignore_ascii_case(&topic.name)
                    {
                        update_entity(
                            sub_handle,
                            registry::settings_of_subscription(topic, subscription),
                        )
                        .await?;
                    }
                }
            }
            _ => {}
        }
        self.redescribe(description, SystemTime::now());
        Ok(())
    }

    /// Deletes an entity; a topic takes its subscriptions with it. Attached receivers are
    /// detached with `amqp:not-found`, later sends fail with it.
    pub async fn delete(&self, path: &str) -> Result<(), NamespaceError> {
        let _guard = self.changes.lock().await;
        self.apply_delete(path).await?;
        self.namespace_changed().await?;
        self.hosting_follows();
        tracing::info!(entity = %path, "entity deleted");
        Ok(())
    }

    /// [`Registry::delete`] under the caller's hold of the change lock, storing nothing.
    pub(super) async fn apply_delete(&self, path: &str) -> Result<(), NamespaceError> {
        let Some(slot) = self.slot(path) else {
            return Err(not_found(path));
        };
        match (&slot.entity, &slot.description) {
            (Entity::Queue(handle), _) => {
                self.remove(path);
                delete_entity(handle).await?;
            }
            (
                Entity::Subscription(handle),
                Description::Subscription {
                    topic,
                    subscription,
                },
            ) => {
                self.remove(path);
                if let Some(Entity::Topic(topic_handle)) = self.lookup(topic) {
                    let (reply, answer) = ReplyTo::oneshot();
                    if topic_handle
                        .send(TopicCommand::RemoveSubscription {
                            name: subscription.name.clone(),
                            reply,
                        })
                        .await
                        .is_ok()
                    {
                        ReplyTo::wait(answer, || EntityError::NotFound(topic.clone()))
                            .await
                            .ok();
                    }
                }
                delete_entity(handle).await?;
            }
            (Entity::Topic(handle), _) => {
                let subscriptions: Vec<_> = self
                    .slots()
                    .into_iter()
                    .filter(|candidate| {
                        matches!(&candidate.description,
                            Description::Subscription { topic, .. } if topic.eq_ignore_ascii_case(&handle.path))
                    })
                    .collect();
                self.remove(path);
                let (reply, answer) = ReplyTo::oneshot();
                handle.send(TopicCommand::Delete { reply }).await?;
                ReplyTo::wait(answer, || EntityError::NotFound(path.to_string())).await?;
                for subscription in subscriptions {
                    if let Entity::Subscription(sub_handle) = &subscription.entity {
                        delete_entity(sub_handle).await.ok();
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Message counts of an entity (for a topic: its scheduled messages and subscription
    /// count).
    pub async fn runtime(&self, path: &str) -> Result<Runtime, NamespaceError> {
        // Where entities run on the node that leads their group, that node may not have
        // applied a creation made a moment ago: its retryable answer is tried again here.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            match self.runtime_once(path).await {
                Err(NamespaceError::Busy(_))
                    if self.hosting.get().is_some() && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => return other,
            }
        }
    }

    async fn runtime_once(&self, path: &str) -> Result<Runtime, NamespaceError> {
        let Some(entity) = self.lookup(path) else {
            return Err(not_found(path));
        };
        let (reply, answer) = ReplyTo::oneshot();
        let gone = || EntityError::NotFound(path.to_string());
        match &entity {
            Entity::Queue(handle) | Entity::Subscription(handle) => {
                handle.send(Command::Describe { reply }).await?;
            }
            Entity::Topic(handle) => handle.send(TopicCommand::Describe { reply }).await?,
        }
        let Reply::Counts(counts) = ReplyTo::wait(answer, gone).await? else {
            return Err(NamespaceError::Failed(format!(
                "'{path}' answered a count request with something else"
            )));
        };
        let subscription_count = match &entity {
            Entity::Topic(handle) => self
                .slots()
                .iter()
                .filter(|slot| {
                    matches!(&slot.description,
                        Description::Subscription { topic, .. } if topic.eq_ignore_ascii_case(&handle.path))
                })
                .count() as u64,
            _ => 0,
        };
        Ok(Runtime {
            counts: *counts,
            subscription_count,
        })
    }

    /// How many SQL filters (true and false filters among them, as the service counts the
    /// `$Default` rule) and correlation filters a topic's subscriptions have, together: the
    /// `SqlFilterCount` and `CorrelationFilterCount` of api-version 2024-05. A subscription
    /// deleted meanwhile counts nothing.
    pub async fn filter_counts(&self, topic: &str) -> (u64, u64) {
        let subscriptions: Vec<String> = self
            .slots()
            .iter()
            .filter_map(|slot| match &slot.description {
                Description::Subscription {
                    topic: owner,
                    subscription,
                } if owner.eq_ignore_ascii_case(topic) => Some(subscription.name.clone()),
                _ => None,
            })
            .collect();
        let (mut sql, mut correlation) = (0, 0);
        for subscription in &subscriptions {
            for rule in self.rules(topic, subscription).await.unwrap_or_default() {
                match rule.filter {
                    Filter::Correlation(_) => correlation += 1,
                    Filter::True | Filter::False | Filter::Sql(_) => sql += 1,
                }
            }
        }
        (sql, correlation)
    }

    /// The rules in force on a subscription.
    pub async fn rules(
        &self,
        topic: &str,
        subscription: &str,
    ) -> Result<Vec<Rule>, NamespaceError> {
        let reply = self
            .rule_operation(
                topic,
                subscription,
                RuleOperation::Enumerate {
                    skip: 0,
                    top: usize::MAX,
                },
            )
            .await?;
        match reply {
            Reply::Rules(rules) => Ok(rules),
            _ => Ok(Vec::new()),
        }
    }

    /// Adds a rule to a subscription (the name must be free).
    pub async fn add_rule(
        &self,
        topic: &str,
        subscription: &str,
        rule: &RuleDefinition,
    ) -> Result<(), NamespaceError> {
        // Name, duplicate and count checks happen in the topic's core, for `$management`
        // and the admin API alike.
        let mut rule = rule.clone();
        rule.created_at = now_millis(SystemTime::now());
        let compiled = rule
            .compile()
            .map_err(|error| NamespaceError::Invalid(error.to_string()))?;
        self.rule_operation(topic, subscription, RuleOperation::Add(Box::new(compiled)))
            .await
            .map(|_| ())
    }

    /// Removes a rule from a subscription.
    pub async fn delete_rule(
        &self,
        topic: &str,
        subscription: &str,
        name: &str,
    ) -> Result<(), NamespaceError> {
        self.rule_operation(topic, subscription, RuleOperation::Remove(name.to_string()))
            .await
            .map(|_| ())
    }

    /// On a registry whose entities run where their group is led: the groups whose
    /// entities changed start again from their log with the new definitions.
    fn hosting_follows(&self) {
        if let Some(hosting) = self.hosting.get() {
            hosting.follow(self, &self.definitions());
        }
    }

    async fn rule_operation(
        &self,
        topic: &str,
        subscription: &str,
        operation: RuleOperation,
    ) -> Result<Reply, NamespaceError> {
        let path = format!("{topic}/Subscriptions/{subscription}");
        if self.slot(&path).is_none() {
            return Err(not_found(&path));
        }
        let Some(Entity::Topic(handle)) = self.lookup(topic) else {
            return Err(not_found(topic));
        };
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(TopicCommand::Rules {
                subscription: subscription.to_string(),
                operation,
                reply,
            })
            .await?;
        Ok(ReplyTo::wait(answer, || EntityError::NotFound(path.clone())).await?)
    }

    /// The namespace's differences from the configuration file it was seeded with.
    pub fn changes(&self) -> NamespaceChanges {
        let seed = &self.seed();
        let current = self.definitions();
        let key = |path: &str| path.trim_matches('/').to_ascii_lowercase();
        let mut changes = NamespaceChanges::default();
        let exists = |path: &str| self.slot(path).is_some();
        for queue in &seed.queues {
            if !exists(&queue.name) {
                changes.deleted.push(key(&queue.name));
            }
        }
        for topic in &seed.topics {
            if !exists(&topic.name) {
                changes.deleted.push(key(&topic.name));
                continue;
            }
            for subscription in &topic.subscriptions {
                let path = format!("{}/Subscriptions/{}", topic.name, subscription.name);
                if !exists(&path) {
                    changes.deleted.push(key(&path));
                }
            }
        }
        for queue in current.queues {
            let same = seed.queues.contains(&queue);
            if !same {
                changes.queues.push(queue);
            }
        }
        for mut topic in current.topics {
            let subscriptions = std::mem::take(&mut topic.subscriptions);
            let file = seed
                .topics
                .iter()
                .find(|file| file.name.eq_ignore_ascii_case(&topic.name));
            let same = file.is_some_and(|file| {
                TopicConfig {
                    subscriptions: Vec::new(),
                    ..file.clone()
                } == topic
            });
            for subscription in subscriptions {
                let unchanged = file.is_some_and(|file| file.subscriptions.contains(&subscription));
                if !unchanged {
                    changes
                        .subscriptions
                        .push((topic.name.clone(), subscription));
                }
            }
            if !same {
                changes.topics.push(topic);
            }
        }
        changes
    }

    /// Called after every namespace change: with durable storage the namespace's changes
    /// are stored before the change is answered.
    pub(super) async fn namespace_changed(&self) -> Result<(), NamespaceError> {
        let Some(storage) = &self.spawner.storage else {
            return Ok(());
        };
        let text = self.changes().to_toml();
        storage.save_namespace(text).await.map_err(|error| {
            tracing::error!(%error, "cannot store a namespace change");
            NamespaceError::Failed(format!(
                "The change was made but could not be stored durably: {error}"
            ))
        })
    }
}

async fn update_entity(
    handle: &super::entity::EntityHandle,
    settings: super::entity::settings::EntitySettings,
) -> Result<(), EntityError> {
    let (reply, answer) = ReplyTo::oneshot();
    handle
        .send(Command::UpdateSettings {
            settings: Box::new(settings),
            reply,
        })
        .await?;
    ReplyTo::wait(answer, || EntityError::NotFound(handle.path.to_string()))
        .await
        .map(|_| ())
}

async fn delete_entity(handle: &super::entity::EntityHandle) -> Result<(), EntityError> {
    let (reply, answer) = ReplyTo::oneshot();
    handle.send(Command::Delete { reply }).await?;
    ReplyTo::wait(answer, || EntityError::NotFound(handle.path.to_string()))
        .await
        .map(|_| ())
}

fn now_millis(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// A subscription description with the `$Default` rule, for creation.
pub fn subscription_description(topic: &str, subscription: SubscriptionConfig) -> Description {
    Description::Subscription {
        topic: topic.to_string(),
        subscription,
    }
}

/// A queue description, for creation.
pub fn queue_description(queue: QueueConfig) -> Description {
    Description::Queue(queue)
}
