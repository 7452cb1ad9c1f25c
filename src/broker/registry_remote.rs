//! A registry whose entities run on another node: a cluster member that keeps its clients'
//! connections, `$cbs` and links, while the entities' actors and topic tasks run where
//! their placement group is led (`docs/scale-out.md`, "Client routing"). Each slot holds a
//! handle that carries the entity's commands there (`crate::cluster::remote`) and the
//! entity's definition, which attaches read (sessions, status, message size) here.
//!
//! Nothing runs locally: no actor, topic task, forwarder or idle janitor. The namespace
//! follows the one the cluster committed ([`Registry::follow`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::{Description, Entity, Registry, Slot, Spawner, key};
use crate::broker::entity::EntityHandle;
use crate::broker::topic::{TopicCodec, TopicHandle};
use crate::clock::Clock;
use crate::config::Config;

/// How a registry reaches entities another node runs: a handle per path.
#[derive(Clone)]
pub struct RemoteEntities {
    /// A queue's or subscription's handle.
    pub entity: Arc<dyn Fn(&str) -> EntityHandle + Send + Sync>,
    /// A topic's handle.
    pub topic: Arc<dyn Fn(&str) -> TopicHandle + Send + Sync>,
}

impl std::fmt::Debug for RemoteEntities {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("RemoteEntities")
    }
}

/// Every entity `namespace` defines: queues, topics (without their subscriptions) and
/// subscriptions.
pub(super) fn descriptions(namespace: &Config) -> Vec<Description> {
    let mut all: Vec<Description> = namespace
        .queues
        .iter()
        .cloned()
        .map(Description::Queue)
        .collect();
    for topic in &namespace.topics {
        for subscription in &topic.subscriptions {
            all.push(Description::Subscription {
                topic: topic.name.clone(),
                subscription: subscription.clone(),
            });
        }
        let mut bare = topic.clone();
        bare.subscriptions.clear();
        all.push(Description::Topic(bare));
    }
    all
}

/// The handle `remote` gives for what `description` defines.
fn handle(description: &Description, remote: &RemoteEntities) -> Entity {
    let path = description.path();
    match description {
        Description::Queue(_) => Entity::Queue((remote.entity)(&path)),
        Description::Topic(_) => Entity::Topic((remote.topic)(&path)),
        Description::Subscription { .. } => Entity::Subscription((remote.entity)(&path)),
    }
}

/// Whether two definitions are of the same kind of entity (a handle fits both).
fn same_kind(one: &Description, other: &Description) -> bool {
    std::mem::discriminant(one) == std::mem::discriminant(other)
}

impl Registry {
    /// A registry of `namespace`'s entities (the configuration file `seed` with the
    /// cluster's run-time changes laid over it), each reached through `remote`.
    pub fn start_remote(
        namespace: &Config,
        seed: &Config,
        clock: Clock,
        codec: TopicCodec,
        remote: &RemoteEntities,
    ) -> Arc<Registry> {
        let (on_idle, _) = tokio::sync::mpsc::unbounded_channel();
        let registry = Registry::empty(
            (namespace, seed),
            Spawner {
                clock,
                codec,
                on_idle,
                storage: None,
            },
        );
        registry.follow(namespace, remote);
        registry.ready.send_replace(true);
        registry
    }

    /// Makes the registry's entities `namespace`'s: entities it no longer defines leave
    /// (their links' next commands are answered by the node that ran them), new ones get a
    /// handle from `remote`, changed ones their new definition (and a new handle when
    /// their kind changed).
    pub fn follow(&self, namespace: &Config, remote: &RemoteEntities) {
        let wanted: HashMap<String, Description> = descriptions(namespace)
            .into_iter()
            .map(|description| (key(&description.path()), description))
            .collect();
        let now = SystemTime::now();
        let Ok(mut map) = self.entities.write() else {
            return;
        };
        map.retain(|path, _| wanted.contains_key(path));
        for (path, description) in wanted {
            match map.get_mut(&path) {
                Some(slot) if slot.description == description => {}
                Some(slot) if same_kind(&slot.description, &description) => {
                    slot.description = description;
                    slot.updated_at = now;
                }
                _ => {
                    map.insert(
                        path,
                        Slot {
                            entity: handle(&description, remote),
                            description,
                            created_at: now,
                            updated_at: now,
                            targets: None,
                        },
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::sync::mpsc;

    use super::*;
    use crate::broker::entity::Command;
    use crate::broker::topic::TopicCommand;

    /// Remote handles whose channels the test keeps, by path.
    #[derive(Default)]
    struct Channels {
        entities: Mutex<Vec<(String, mpsc::Receiver<Command>)>>,
        topics: Mutex<Vec<(String, mpsc::Receiver<TopicCommand>)>>,
    }

    fn remote(channels: &Arc<Channels>) -> RemoteEntities {
        let (entities, topics) = (channels.clone(), channels.clone());
        RemoteEntities {
            entity: Arc::new(move |path| {
                let (sender, receiver) = mpsc::channel(4);
                entities
                    .entities
                    .lock()
                    .expect("test")
                    .push((path.to_string(), receiver));
                EntityHandle::from_channel(path, sender)
            }),
            topic: Arc::new(move |path| {
                let (sender, receiver) = mpsc::channel(4);
                topics
                    .topics
                    .lock()
                    .expect("test")
                    .push((path.to_string(), receiver));
                TopicHandle::from_channel(path, sender)
            }),
        }
    }

    fn config(text: &str) -> Config {
        Config::from_toml_str(text, "test").expect("valid")
    }

    #[tokio::test]
    async fn a_remote_registry_has_every_entity_and_follows_the_namespace() {
        let channels = Arc::new(Channels::default());
        let remote = remote(&channels);
        let first = config(
            "[[queues]]\nname = \"orders\"\nrequires_session = true\n\
             [[topics]]\nname = \"events\"\n[[topics.subscriptions]]\nname = \"all\"\n",
        );
        let registry = Registry::start_remote(
            &first,
            &first,
            Clock::system(),
            crate::broker::topic::TopicCodec {
                rewrite: Arc::new(|message, _, _| message.clone()),
                decode_properties: Arc::new(|_| Vec::new()),
                evaluation_budget: crate::broker::filter::DEFAULT_EVALUATION_BUDGET,
            },
            &remote,
        );
        registry.wait_ready().await;
        assert!(matches!(registry.lookup("ORDERS"), Some(Entity::Queue(_))));
        assert!(registry.requires_session("orders"));
        assert!(matches!(registry.lookup("events"), Some(Entity::Topic(_))));
        assert!(matches!(
            registry.lookup("events/Subscriptions/all"),
            Some(Entity::Subscription(_))
        ));
        assert!(
            registry
                .subscription_topic("events/subscriptions/all")
                .is_some()
        );
        // A command through a slot's handle reaches the remote side's channel.
        let Some(Entity::Queue(orders)) = registry.lookup("orders") else {
            panic!("a queue")
        };
        orders
            .send(Command::DetachReceiver {
                receiver: crate::broker::types::ReceiverId(7),
            })
            .await
            .expect("sent");
        let mut entities = channels.entities.lock().expect("test");
        let (_, receiver) = entities
            .iter_mut()
            .find(|(path, _)| path == "orders")
            .expect("a handle was made for orders");
        assert!(matches!(
            receiver.try_recv(),
            Ok(Command::DetachReceiver { .. })
        ));
        drop(entities);

        // The namespace changes: a queue changed, one created, the topic deleted.
        let second = config("[[queues]]\nname = \"orders\"\n[[queues]]\nname = \"payments\"\n");
        registry.follow(&second, &remote);
        assert!(!registry.requires_session("orders"), "the new definition");
        assert!(matches!(
            registry.lookup("payments"),
            Some(Entity::Queue(_))
        ));
        assert!(registry.lookup("events").is_none());
        assert!(registry.lookup("events/subscriptions/all").is_none());
        let made = channels.entities.lock().expect("test").len();
        assert_eq!(made, 3, "orders kept its handle; payments got one");
        assert_eq!(registry.len(), 2);
    }
}
