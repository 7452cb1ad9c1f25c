//! Running as a member of a cluster whose groups have leaders of their own (`[cluster]
//! placement = "spread"`, `docs/cluster.md`).
//!
//! Each queue, and each topic with its subscriptions, is a Raft group of its own; its
//! first leader is the member [`crate::cluster::preferred_leader`] names, so leaders spread
//! over the members. Every member serves every client that connects to it — AMQP (plain,
//! TLS, WebSocket), `$cbs`, the admin API — from a registry whose entities run where their
//! group is led ([`Registry::start_hosted`]): the groups this node leads run here; the
//! others' commands cross to their leader over one entity-command connection per node
//! ([`crate::cluster::remote`]), and other members' commands for the groups this node
//! leads arrive the same way.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use super::member::{Exits, member_start, report_cluster, watch_exits};
use crate::broker::leadership::{Leadership, Lease};
use crate::broker::registry::{GroupPlacement, Hosted, Hosting, Registry, RemoteEntities};
use crate::clock::Clock;
use crate::cluster::remote::{self, Proxy};
use crate::cluster::{GroupLayout, RaftLog, preferred_leader};
use crate::config::Config;
use crate::store::storage::{LogStorage, Recovery};
use crate::{Listeners, MemberRole};

/// Runs this node as a member of a spread cluster until `shutdown` turns true.
pub async fn run_spread(
    listeners: Listeners,
    config: &Config,
    storage: (LogStorage, Recovery),
    shutdown: watch::Receiver<bool>,
    ready: impl FnOnce(),
    reload: Option<super::reload::ReloadSource>,
    exits: Exits,
) -> Result<(), String> {
    let (store, recovery) = storage;
    let settings = &config.cluster;
    let (secret, peers) = member_start(config, &recovery).await?;
    // Entries of the one-leader layout are all in the metadata group's log, where this
    // layout never looks for an entity's.
    let one_leader = store
        .replay_group(crate::cluster::METADATA_GROUP)
        .map_err(|error| format!("cannot read the data directory's log: {error}"))?;
    if !one_leader.is_empty() {
        return Err(format!(
            "the data directory {} was written with placement = \"one-leader\" (its {} entities are in the cluster's single log): a member of a spread cluster starts on an empty data directory (or set placement = \"one-leader\" again)",
            store.directory().display(),
            one_leader.len()
        ));
    }
    let metrics = crate::metrics::Metrics::new();
    let definitions = crate::config::render::definitions(config);
    let raft = RaftLog::new_member(
        store.clone(),
        &recovery.groups,
        settings.clone(),
        (secret.as_bytes(), &definitions),
        peers,
        GroupLayout::PerEntity,
    )?;
    drop(recovery);
    raft.report_to(metrics.groups.clone());
    tokio::spawn(report_cluster(
        Arc::downgrade(&raft),
        metrics.cluster.clone(),
    ));
    raft.start_member()
        .await
        .map_err(|error| format!("cannot join the cluster: {error}"))?;
    watch_exits(&raft, &shutdown, exits.failed, exits.removed);
    // The namespace this node serves from the start is the one the cluster committed: its
    // metadata group's log applied (an election and a commit after a restart of every node).
    if !raft.metadata_applied(METADATA_WAIT).await {
        tracing::warn!(
            "the cluster's namespace is not applied here after {METADATA_WAIT:?}: serving the configuration file's entities until it is"
        );
    }
    tracing::info!(
        node = settings.node_id,
        "member of a cluster of {} nodes with its groups' leaders spread; peers on {}",
        settings.members.len(),
        settings.address
    );

    // The namespace: the configuration file's entities with the run-time changes the
    // cluster committed before (members of this layout make none).
    let namespace = match raft.applied_namespace().borrow().as_deref() {
        Some(text) => crate::lay_changes(config, text, "the cluster's log")?,
        None => config.clone(),
    };
    let placement = Arc::new(RaftPlacement {
        raft: Arc::downgrade(&raft),
        node: settings.node_id,
        proxies: std::sync::Mutex::default(),
    });
    let clock = Clock::system();
    let port: Arc<dyn crate::broker::storage::DurableLog> = raft.clone();
    let (registry, hosted) = Registry::start_hosted(
        &namespace,
        config,
        clock,
        crate::topic_codec(config),
        crate::broker::storage::Storage::new(port),
        placement.clone(),
    );
    registry.cap_message_size(crate::cluster::MAX_MESSAGE_SIZE);
    raft.on_commands(serve_commands(Arc::downgrade(&hosted)));

    let view: crate::admin::http::ClusterView = {
        let raft = raft.clone();
        Arc::new(move || {
            let view = raft.member_view()?;
            let mut value = serde_json::to_value(view).ok()?;
            let leaders: serde_json::Map<String, serde_json::Value> = raft
                .leaders()
                .borrow()
                .iter()
                .map(|(group, leadership)| (group.clone(), leadership.node.into()))
                .collect();
            value["group_leaders"] = leaders.into();
            Some(value)
        })
    };
    let control: crate::admin::http::ClusterControl = {
        let view = view.clone();
        Arc::new(move |request| {
            let answer = match request {
                crate::admin::http::ClusterRequest::View => match view() {
                    Some(view) => (200, view),
                    None => (
                        503,
                        serde_json::json!({ "error": "the cluster's group stopped" }),
                    ),
                },
                _ => (
                    409,
                    serde_json::json!({
                        "error": "adding or removing members and moving leaderships are not supported with placement = \"spread\" yet"
                    }),
                ),
            };
            Box::pin(async move { answer })
        })
    };
    {
        // A stopping node takes no leadership handed to it (another member's rebalancing).
        let raft = Arc::downgrade(&raft);
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            if stop.wait_for(|stop| *stop).await.is_ok()
                && let Some(raft) = raft.upgrade()
            {
                raft.refuse_leadership();
            }
        });
    }
    let members: Vec<u64> = settings.members.iter().map(|member| member.id).collect();
    let hosting = registry
        .hosting()
        .ok_or_else(|| "the registry does not follow the cluster's placement".to_string())?;
    tokio::spawn(rebalance(
        Arc::downgrade(&raft),
        hosting.clone(),
        members.clone(),
        shutdown.clone(),
    ));
    // Requests that may change the namespace go to the metadata group's leader, which
    // stores every change (on its AMQP port, which serves HTTP too: the same on every node).
    let namespace_node: crate::admin::http::NamespaceNode = {
        let raft = Arc::downgrade(&raft);
        let port = listeners
            .amqp
            .local_addr()
            .map_err(|error| format!("the AMQP listener has no address: {error}"))?
            .port();
        Arc::new(move || {
            let raft = raft.upgrade()?;
            let leader = raft
                .leaders()
                .borrow()
                .get(crate::cluster::METADATA_GROUP)?
                .node;
            if leader == raft.node_id() {
                return None;
            }
            let host: std::net::IpAddr = raft.member_host(leader)?.parse().ok()?;
            Some(std::net::SocketAddr::new(host, port))
        })
    };
    // The namespace the cluster committed, as it changes: every member follows it.
    {
        let registry = Arc::downgrade(&registry);
        let hosting = hosting.clone();
        let config = config.clone();
        let mut applied = raft.applied_namespace();
        tokio::spawn(async move {
            while applied.changed().await.is_ok() {
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                let latest = || {
                    let text = applied.borrow_and_update().clone();
                    match text.as_deref() {
                        Some(text) => crate::lay_changes(&config, text, "the cluster's log"),
                        None => Ok(config.clone()),
                    }
                };
                hosting.follow_committed(&registry, latest).await;
            }
        });
    }
    let served = crate::serve_registry(
        listeners,
        config,
        (registry, clock, Some(store.clone())),
        metrics,
        shutdown,
        ready,
        reload,
        Some(MemberRole {
            namespace_node: Some(namespace_node),
            lease: None,
            view,
            control,
            drains: Arc::default(),
            on_registry: None,
        }),
    )
    .await;
    // Every client connection here is drained; the other members' commands still reach
    // this node's groups until each is handed over.
    hand_over_groups(&raft, &hosting, &members).await;
    for proxy in placement.proxies() {
        proxy.close();
    }
    raft.shutdown().await;
    store.close();
    served
}

/// How long a starting member waits to apply the cluster's namespace before it serves.
const METADATA_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often a member looks for groups it leads that their preferred member could lead.
const REBALANCE_EVERY: std::time::Duration = std::time::Duration::from_secs(3);

/// How long a hand-over of one group may take (at a planned stop, or back to its preferred
/// member).
const HAND_OVER_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The groups this node leads (the cluster's metadata group aside).
fn groups_led(raft: &RaftLog) -> Vec<String> {
    let own = raft.node_id();
    raft.leaders()
        .borrow()
        .iter()
        .filter(|(group, leadership)| {
            leadership.node == own && group.as_str() != crate::cluster::METADATA_GROUP
        })
        .map(|(group, _)| group.clone())
        .collect()
}

/// How long a group's commands are held back before its leadership is handed over: what
/// its tasks are doing (a settlement being stored) finishes and is answered first.
const QUIESCE: std::time::Duration = std::time::Duration::from_millis(200);

/// How many looks in a row a group's preferred member must be up to date with the group's
/// log before the group goes back to it (a member that just came back settles first).
const CURRENT_LOOKS: u32 = 2;

/// Hands `group`, led here, to `to`: its commands wait while what its tasks do finishes,
/// then the leadership moves, and they go on to the new leader (or here again, when the
/// leadership did not move).
async fn hand_over(raft: &RaftLog, hosting: &Hosting, group: &str, to: u64) -> Result<u64, String> {
    let paused = hosting.pause(group);
    if paused.is_some() {
        tokio::time::sleep(QUIESCE).await;
    }
    let moved = raft.transfer_group(group, to, HAND_OVER_WITHIN).await;
    drop(paused);
    moved
}

/// Gives each group this node leads, but another member is preferred for, back to that
/// member once it has been up to date with the group's log for [`CURRENT_LOOKS`] looks
/// (after its restart, say), so that leaders stay spread; until `stop`.
async fn rebalance(
    raft: Weak<RaftLog>,
    hosting: Arc<Hosting>,
    members: Vec<u64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(REBALANCE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut current: HashMap<String, u32> = HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let Some(raft) = raft.upgrade() else { return };
        let own = raft.node_id();
        let led = groups_led(&raft);
        current.retain(|group, _| led.contains(group));
        for group in led {
            if *stop.borrow() {
                return;
            }
            let Some(preferred) = preferred_leader(&group, members.iter().copied()) else {
                continue;
            };
            if preferred == own || raft.group_lag(&group, preferred) != Some(0) {
                current.remove(&group);
                continue;
            }
            let looks = current.entry(group.clone()).or_default();
            *looks += 1;
            if *looks < CURRENT_LOOKS {
                continue;
            }
            current.remove(&group);
            match hand_over(&raft, &hosting, &group, preferred).await {
                Ok(leader) => tracing::info!(
                    group,
                    "the placement group's leadership moved back toward its preferred member, node {preferred}: node {leader} leads it"
                ),
                Err(why) => tracing::debug!(group, %why, "the placement group stays here for now"),
            }
        }
    }
}

/// A planned stop: hands every group this node leads to another member (the one preferred
/// among the others), all at once, so that their clients wait for no election timeout.
async fn hand_over_groups(raft: &RaftLog, hosting: &Hosting, members: &[u64]) {
    let own = raft.node_id();
    let others: Vec<u64> = members.iter().copied().filter(|id| *id != own).collect();
    let groups = groups_led(raft);
    if groups.is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    let others = &others;
    let handed = futures_util::future::join_all(groups.iter().map(|group| async move {
        let to = preferred_leader(group, others.iter().copied())?;
        match hand_over(raft, hosting, group, to).await {
            Ok(leader) => Some(leader),
            Err(why) => {
                tracing::warn!(group, %why, "could not hand the placement group over");
                None
            }
        }
    }))
    .await;
    tracing::info!(
        "stopping: handed {} of the {} placement groups led here over in {:.0} ms",
        handed.iter().flatten().count(),
        groups.len(),
        started.elapsed().as_secs_f64() * 1000.0
    );
}

/// Serves another member's entity-command stream from the routers' peer inboxes: each
/// command is answered by this node's actors while it leads the entity's group, and with
/// a retryable timeout otherwise.
fn serve_commands(hosted: Weak<Hosted>) -> crate::cluster::peer::ServeCommands {
    Arc::new(move |stream: tokio::net::TcpStream, node: u64| {
        let hosted = hosted.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let lookup = move |path: &str| {
                let hosted = hosted.upgrade()?;
                if let Some(topic) = hosted.peer_topic(path) {
                    return Some(remote::Target::Topic(topic));
                }
                // The member that sent it knows the entity: this one has not applied its
                // creation yet (or has applied its deletion, which that member will too).
                let entity = match hosted.peer_entity(path) {
                    Some(router) => router,
                    None => not_known_yet(path, Arc::downgrade(&hosted)),
                };
                Some(remote::Target::Entity(entity))
            };
            if let Err(error) = remote::serve(stream, lookup).await {
                tracing::info!(node, "a member's entity-command stream ended: {error}");
            }
        });
    })
}

/// A handle for `path`, an entity another member knows and this one did not when the
/// stream looked it up (the stream keeps what it looked up): each command goes to the
/// entity's router once this node knows it, and is answered with a retryable timeout
/// until then.
fn not_known_yet(path: &str, hosted: Weak<Hosted>) -> crate::broker::entity::EntityHandle {
    let (commands, mut inbox) = tokio::sync::mpsc::channel::<crate::broker::entity::Command>(16);
    let path = path.to_string();
    let handle = crate::broker::entity::EntityHandle::from_channel(&path, commands);
    tokio::spawn(async move {
        while let Some(command) = inbox.recv().await {
            let known = hosted
                .upgrade()
                .and_then(|hosted| hosted.peer_entity(&path));
            let refused = match known {
                Some(router) => router
                    .send_or_give_back(command)
                    .await
                    .err()
                    .map(|(_, c)| c),
                None => Some(command),
            };
            if let Some(command) = refused {
                command.refuse_with(crate::broker::types::EntityError::Timeout(format!(
                    "'{path}' is not known on the node that leads its group yet; try again."
                )));
            }
        }
    });
    handle
}

/// The cluster as a hosted registry sees it.
struct RaftPlacement {
    raft: Weak<RaftLog>,
    node: u64,
    /// One proxy per other member, made when first needed.
    proxies: std::sync::Mutex<HashMap<u64, (Arc<Proxy>, RemoteEntities)>>,
}

impl RaftPlacement {
    fn proxies(&self) -> Vec<Arc<Proxy>> {
        self.proxies
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .values()
            .map(|(proxy, _)| proxy.clone())
            .collect()
    }

    fn raft(&self) -> Result<Arc<RaftLog>, String> {
        self.raft
            .upgrade()
            .ok_or_else(|| "this node is stopping".to_string())
    }
}

impl GroupPlacement for RaftPlacement {
    fn node(&self) -> u64 {
        self.node
    }

    fn leaders(&self) -> watch::Receiver<crate::cluster::Leaders> {
        match self.raft.upgrade() {
            Some(raft) => raft.leaders(),
            None => watch::channel(crate::cluster::Leaders::new()).1,
        }
    }

    fn start_group(&self, group: &str) -> BoxFuture<'static, Result<(), String>> {
        let raft = self.raft();
        let group = group.to_string();
        Box::pin(async move {
            raft?
                .start_group(&group)
                .await
                .map_err(|error| error.to_string())
        })
    }

    fn confirm(&self, group: &str, leadership: Leadership) -> BoxFuture<'static, bool> {
        let raft = self.raft.upgrade();
        let group = group.to_string();
        Box::pin(async move {
            match raft {
                Some(raft) => raft.confirm_leadership(&group, leadership).await,
                None => false,
            }
        })
    }

    fn hold_lease(
        &self,
        group: &str,
        lease: Arc<Lease>,
        leadership: Leadership,
    ) -> BoxFuture<'static, ()> {
        let raft = self.raft.upgrade();
        let group = group.to_string();
        Box::pin(async move {
            match raft {
                Some(raft) => raft.hold_group_lease(&group, lease, leadership).await,
                None => lease.revoke(),
            }
        })
    }

    fn replay(
        &self,
        group: &str,
    ) -> Result<HashMap<String, Vec<crate::broker::entity::state::Change>>, String> {
        self.raft()?.replay_entities(group)
    }

    fn remote(&self, node: u64) -> RemoteEntities {
        let mut proxies = self
            .proxies
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        proxies
            .entry(node)
            .or_insert_with(|| {
                let raft = self.raft.clone();
                let proxy = Arc::new(Proxy::connecting(move || {
                    let raft = raft.clone();
                    Box::pin(async move {
                        let raft = raft
                            .upgrade()
                            .ok_or_else(|| "this node is stopping".to_string())?;
                        raft.commands_stream(node).await
                    })
                }));
                let remote = RemoteEntities {
                    entity: {
                        let proxy = proxy.clone();
                        Arc::new(move |path| proxy.handle(path))
                    },
                    topic: {
                        let proxy = proxy.clone();
                        Arc::new(move |path| proxy.topic_handle(path))
                    },
                };
                (proxy, remote)
            })
            .1
            .clone()
    }
}
