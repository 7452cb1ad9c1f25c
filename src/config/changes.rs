//! The namespace's run-time changes as the broker stores them (a record of the data
//! directory's log, the metadata group's state): entities defined or redefined through the admin API, and paths deleted. At
//! start they are laid over the configuration file: a run-time definition replaces the
//! file's, a deletion removes the file's entity (and is logged, never silent).
//!
//! The format is the configuration file's, plus `deleted = [paths]` and
//! `[[topic_subscriptions]]` (a topic name with the subscriptions created at run time under
//! it, when the topic itself was not redefined).

use serde::Deserialize;

use super::raw::{RawQueue, RawTopic};
use super::{Config, ConfigError, QueueConfig, SubscriptionConfig, TopicConfig, render};

/// Run-time changes of the namespace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamespaceChanges {
    /// Paths deleted at run time (lower case), also those of the configuration file.
    pub deleted: Vec<String>,
    /// Queues defined at run time.
    pub queues: Vec<QueueConfig>,
    /// Topics defined at run time (without subscriptions).
    pub topics: Vec<TopicConfig>,
    /// Subscriptions defined at run time: (topic name, subscription).
    pub subscriptions: Vec<(String, SubscriptionConfig)>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChanges {
    #[serde(default)]
    deleted: Vec<String>,
    #[serde(default)]
    queues: Vec<RawQueue>,
    #[serde(default)]
    topics: Vec<RawTopic>,
    #[serde(default)]
    topic_subscriptions: Vec<RawTopic>,
}

impl NamespaceChanges {
    /// Reads stored changes; `origin` names where they were stored in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<NamespaceChanges, ConfigError> {
        let raw: RawChanges = toml::from_str(text).map_err(|error| ConfigError::Parse {
            origin: origin.to_string(),
            line: None,
            message: error.message().trim().replace('\n', "; "),
        })?;
        let mut changes = NamespaceChanges {
            deleted: raw.deleted,
            ..Default::default()
        };
        for (index, queue) in raw.queues.into_iter().enumerate() {
            changes
                .queues
                .push(super::convert::convert_queue(index, queue)?);
        }
        for (index, topic) in raw.topics.into_iter().enumerate() {
            changes
                .topics
                .push(super::convert::convert_topic(index, topic)?);
        }
        for (index, owner) in raw.topic_subscriptions.into_iter().enumerate() {
            let owner = super::convert::convert_topic(index, owner)?;
            for subscription in owner.subscriptions {
                changes
                    .subscriptions
                    .push((owner.name.clone(), subscription));
            }
        }
        Ok(changes)
    }

    /// The text stored.
    pub fn to_toml(&self) -> String {
        let mut out = String::from(
            "# ferrobus: entities created, changed or deleted at run time (admin API).\n\
             # Written by the broker; laid over the configuration file at start.\n",
        );
        let deleted: Vec<String> = self
            .deleted
            .iter()
            .map(|path| toml::Value::String(path.clone()).to_string())
            .collect();
        out.push_str(&format!("deleted = [{}]\n", deleted.join(", ")));
        for queue in &self.queues {
            out.push('\n');
            out.push_str(&render::queue(queue));
        }
        for topic in &self.topics {
            out.push('\n');
            out.push_str(&render::topic("topics", topic));
        }
        let mut owners: Vec<&str> = Vec::new();
        for (owner, _) in &self.subscriptions {
            if !owners.iter().any(|known| known.eq_ignore_ascii_case(owner)) {
                owners.push(owner);
            }
        }
        for owner in owners {
            let mut topic = TopicConfig::new(owner);
            topic.subscriptions = self
                .subscriptions
                .iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case(owner))
                .map(|(_, subscription)| subscription.clone())
                .collect();
            out.push('\n');
            out.push_str(&render::topic("topic_subscriptions", &topic));
        }
        out
    }

    /// Lays the changes over a configuration; returns one line per entity of the file that
    /// a change replaced or removed (the caller logs them). Validation is the caller's.
    pub fn apply(&self, config: &mut Config) -> Vec<String> {
        let mut notes = Vec::new();
        let key = |path: &str| path.trim_matches('/').to_ascii_lowercase();
        for path in &self.deleted {
            let path = key(path);
            if let Some((topic, subscription)) = path.split_once("/subscriptions/") {
                for owner in config
                    .topics
                    .iter_mut()
                    .filter(|owner| owner.name.eq_ignore_ascii_case(topic))
                {
                    let before = owner.subscriptions.len();
                    owner
                        .subscriptions
                        .retain(|s| !s.name.eq_ignore_ascii_case(subscription));
                    if owner.subscriptions.len() != before {
                        notes.push(format!("{path}: deleted at run time"));
                    }
                }
            } else {
                let before = config.queues.len() + config.topics.len();
                config.queues.retain(|queue| key(&queue.name) != path);
                config.topics.retain(|topic| key(&topic.name) != path);
                if config.queues.len() + config.topics.len() != before {
                    notes.push(format!("{path}: deleted at run time"));
                }
            }
        }
        for queue in &self.queues {
            if let Some(existing) = config
                .queues
                .iter_mut()
                .find(|existing| existing.name.eq_ignore_ascii_case(&queue.name))
            {
                if existing != queue {
                    notes.push(format!("{}: redefined at run time", queue.name));
                }
                *existing = queue.clone();
            } else {
                config.queues.push(queue.clone());
            }
        }
        for topic in &self.topics {
            if let Some(existing) = config
                .topics
                .iter_mut()
                .find(|existing| existing.name.eq_ignore_ascii_case(&topic.name))
            {
                let subscriptions = std::mem::take(&mut existing.subscriptions);
                if *existing != *topic {
                    notes.push(format!("{}: redefined at run time", topic.name));
                }
                *existing = TopicConfig {
                    subscriptions,
                    ..topic.clone()
                };
            } else {
                config.topics.push(topic.clone());
            }
        }
        for (owner, subscription) in &self.subscriptions {
            let Some(topic) = config
                .topics
                .iter_mut()
                .find(|topic| topic.name.eq_ignore_ascii_case(owner))
            else {
                notes.push(format!(
                    "{owner}/Subscriptions/{}: its topic no longer exists; not created",
                    subscription.name
                ));
                continue;
            };
            if let Some(existing) = topic
                .subscriptions
                .iter_mut()
                .find(|existing| existing.name.eq_ignore_ascii_case(&subscription.name))
            {
                if existing != subscription {
                    notes.push(format!(
                        "{owner}/Subscriptions/{}: redefined at run time",
                        subscription.name
                    ));
                }
                *existing = subscription.clone();
            } else {
                topic.subscriptions.push(subscription.clone());
            }
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_round_trip_and_lay_over_the_file() {
        let mut file = Config::builtin_default();
        let mut redefined = QueueConfig::new("queue.1");
        redefined.max_delivery_count = 2;
        let mut changes = NamespaceChanges {
            deleted: vec!["topic.1/subscriptions/subscription.1".into()],
            queues: vec![redefined.clone(), QueueConfig::new("new")],
            topics: vec![TopicConfig::new("fresh")],
            subscriptions: vec![("topic.1".into(), SubscriptionConfig::new("added"))],
        };
        let text = changes.to_toml();
        let read = NamespaceChanges::from_toml_str(&text, "namespace.toml").expect("reads");
        assert_eq!(read, changes);
        let notes = changes.apply(&mut file);
        assert_eq!(file.queues, vec![redefined, QueueConfig::new("new")]);
        let names: Vec<_> = file.topics[0]
            .subscriptions
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["added"]);
        assert_eq!(file.topics[1].name, "fresh");
        assert_eq!(notes.len(), 2, "{notes:?}");
        file.validate().expect("valid");
        changes.deleted.push("topic.1".into());
        changes.subscriptions.clear();
        let mut file = Config::builtin_default();
        changes.apply(&mut file);
        assert!(file.topics.iter().all(|topic| topic.name != "topic.1"));
    }
}
