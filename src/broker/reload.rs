//! A configuration reload (SIGHUP, `POST /$config/reload`): the namespace a restart with the
//! new file would serve, reached without a restart.
//!
//! A start serves the file with the stored run-time changes laid over it (run-time changes
//! win, [`crate::config::changes::NamespaceChanges::apply`]). A reload computes the same namespace from the new file
//! and the run-time changes in force, validates it whole with the configuration's checks,
//! and then creates, updates and deletes entities through the namespace layer's operations,
//! under its change lock. The new file becomes the seed the run-time changes are measured
//! against, so what the reload did is never stored as a run-time change.
//!
//! What an existing entity cannot change while it runs (`requires_session`,
//! `enable_partitioning`, a subscription's rules from the file) is described as the file
//! says and reported as taking effect at the next start, which is what a restart would do.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::namespace::NamespaceError;
use super::registry::{Description, Registry};
use crate::config::Config;

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileReload {
    /// Entities created (paths as the admin API names them: `queue`, `topic`,
    /// `topic/Subscriptions/name`).
    pub added: Vec<String>,
    /// Entities whose settings changed.
    pub changed: Vec<String>,
    /// Entities deleted (a deleted topic's subscriptions are listed too).
    pub removed: Vec<String>,
    /// Changes that take effect at the next start, one sentence each.
    pub restart: Vec<String>,
    /// Entities where a run-time change overrides the file (one line each, as logged at
    /// start).
    pub overridden: Vec<String>,
    /// Operations that failed (the rest were carried out).
    pub errors: Vec<String>,
}

/// The namespace's definitions by lower-case path, in creation order (queues, topics,
/// then subscriptions).
fn descriptions(config: &Config) -> Vec<(String, Description)> {
    let mut out = Vec::new();
    for queue in &config.queues {
        out.push(Description::Queue(queue.clone()));
    }
    for topic in &config.topics {
        let mut bare = topic.clone();
        bare.subscriptions.clear();
        out.push(Description::Topic(bare));
    }
    for topic in &config.topics {
        for subscription in &topic.subscriptions {
            out.push(Description::Subscription {
                topic: topic.name.clone(),
                subscription: subscription.clone(),
            });
        }
    }
    out.into_iter()
        .map(|description| (description.path().to_ascii_lowercase(), description))
        .collect()
}

fn same_kind(a: &Description, b: &Description) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// What of `new` an entity defined as `old` can take while it runs, and the settings that
/// wait for the next start.
fn online_part(old: &Description, new: &Description) -> (Description, Vec<&'static str>) {
    let mut waiting = Vec::new();
    let applied = match (old, new.clone()) {
        (Description::Queue(old), Description::Queue(mut new)) => {
            if new.requires_session != old.requires_session {
                waiting.push("requires_session");
                new.requires_session = old.requires_session;
            }
            if new.enable_partitioning != old.enable_partitioning {
                waiting.push("enable_partitioning");
                new.enable_partitioning = old.enable_partitioning;
            }
            Description::Queue(new)
        }
        (Description::Topic(old), Description::Topic(mut new)) => {
            if new.enable_partitioning != old.enable_partitioning {
                waiting.push("enable_partitioning");
                new.enable_partitioning = old.enable_partitioning;
            }
            Description::Topic(new)
        }
        (
            Description::Subscription {
                subscription: old, ..
            },
            Description::Subscription {
                topic,
                subscription: mut new,
            },
        ) => {
            if new.requires_session != old.requires_session {
                waiting.push("requires_session");
                new.requires_session = old.requires_session;
            }
            if new.rules != old.rules {
                waiting.push("rules");
                new.rules = old.rules.clone();
            }
            Description::Subscription {
                topic,
                subscription: new,
            }
        }
        (_, new) => new,
    };
    (applied, waiting)
}

impl Registry {
    /// The configuration file the namespace was seeded with (or last reloaded from).
    pub(super) fn seed(&self) -> Config {
        match self.seed.read() {
            Ok(seed) => seed.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Makes the namespace the one a start with `file` would serve: `file`'s entities with
    /// the run-time changes in force laid over them. Refused, changing nothing, when the two
    /// do not fit together or a rule does not compile. Only `file`'s entities are used; its
    /// other settings are the caller's to compare.
    pub async fn reload_file(
        self: &Arc<Self>,
        file: &Config,
    ) -> Result<FileReload, NamespaceError> {
        let _guard = self.changes.lock().await;
        let old_seed = self.seed();
        let mut seed = old_seed.clone();
        seed.queues = file.queues.clone();
        seed.topics = file.topics.clone();
        let mut target = seed.clone();
        let mut report = FileReload {
            overridden: self.changes().apply(&mut target),
            ..FileReload::default()
        };
        target.validate().map_err(|error| {
            NamespaceError::Invalid(format!(
                "the file and the run-time changes in force do not fit together: {error}"
            ))
        })?;
        for topic in &target.topics {
            for subscription in &topic.subscriptions {
                super::topic::compile_rules(&subscription.rules, 0).map_err(|error| {
                    NamespaceError::Invalid(format!(
                        "topic '{}' subscription '{}': {error}",
                        topic.name, subscription.name
                    ))
                })?;
            }
        }
        let current = descriptions(&self.definitions());
        let wanted = descriptions(&target);
        let current_by_path: HashMap<&str, &Description> = current
            .iter()
            .map(|(path, description)| (path.as_str(), description))
            .collect();
        let wanted_by_path: HashMap<&str, &Description> = wanted
            .iter()
            .map(|(path, description)| (path.as_str(), description))
            .collect();
        // Deletions first (subscriptions before their topics): a path may come back as an
        // entity of another kind.
        let mut removals: Vec<&Description> = current
            .iter()
            .filter(|(path, description)| {
                !wanted_by_path
                    .get(path.as_str())
                    .is_some_and(|wanted| same_kind(wanted, description))
            })
            .map(|(_, description)| description)
            .collect();
        removals
            .sort_by_key(|description| !matches!(description, Description::Subscription { .. }));
        for description in removals {
            let path = description.path();
            let gone_with_topic = matches!(description, Description::Subscription { topic, .. }
                if self.slot(topic).is_none());
            if gone_with_topic || self.slot(&path).is_none() {
                report.removed.push(path);
                continue;
            }
            match self.apply_delete(&path).await {
                Ok(()) => {
                    tracing::info!(entity = %path, "entity deleted (configuration reload)");
                    report.removed.push(path);
                }
                Err(error) => report.errors.push(format!("{path}: {error}")),
            }
        }
        for (path, description) in &wanted {
            let existing = current_by_path
                .get(path.as_str())
                .filter(|existing| same_kind(existing, description));
            match existing {
                None => match self.apply_create(description.clone(), false).await {
                    Ok(slot) => {
                        let path = slot.description.path();
                        tracing::info!(entity = %path, "entity created (configuration reload)");
                        report.added.push(path);
                    }
                    Err(error) => report
                        .errors
                        .push(format!("{}: {error}", description.path())),
                },
                Some(existing) if *existing != description => {
                    let (applied, waiting) = online_part(existing, description);
                    let path = description.path();
                    if &applied != *existing
                        && let Err(error) = self.apply_update(applied, false).await
                    {
                        report.errors.push(format!("{path}: {error}"));
                        continue;
                    }
                    if !waiting.is_empty() {
                        // Described as the file says, so that the file (not a run-time
                        // change) is what the next start applies.
                        self.redescribe(description.clone(), SystemTime::now());
                        report.restart.push(format!(
                            "{path}: a change of {} takes effect at the next start",
                            waiting.join(", ")
                        ));
                    }
                    tracing::info!(entity = %path, "entity updated (configuration reload)");
                    report.changed.push(path);
                }
                Some(_) => {}
            }
        }
        match self.seed.write() {
            Ok(mut slot) => *slot = seed,
            Err(poisoned) => *poisoned.into_inner() = seed,
        }
        if let Err(error) = self.namespace_changed().await {
            report.errors.push(error.to_string());
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QueueConfig;

    #[test]
    fn what_waits_for_a_restart_is_kept_from_the_running_entity() {
        let old = Description::Queue(QueueConfig::new("q"));
        let mut changed = QueueConfig::new("q");
        changed.requires_session = true;
        changed.max_delivery_count = 3;
        let (applied, waiting) = online_part(&old, &Description::Queue(changed));
        assert_eq!(waiting, ["requires_session"]);
        let Description::Queue(applied) = applied else {
            panic!("a queue stays a queue");
        };
        assert!(!applied.requires_session);
        assert_eq!(applied.max_delivery_count, 3);
    }

    #[test]
    fn descriptions_list_queues_topics_then_subscriptions() {
        let config = Config::builtin_default();
        let paths: Vec<String> = descriptions(&config)
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        assert_eq!(
            paths,
            ["queue.1", "topic.1", "topic.1/subscriptions/subscription.1"]
        );
    }
}
