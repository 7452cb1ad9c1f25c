//! Replication: every durable change goes through a Raft group (openraft), one group per
//! placement group (`docs/scale-out.md` §3–4). A queue with its sub-queues is a group, a
//! topic with all its subscriptions is a group; the group's log is the node's write-ahead
//! log, tagged by group, so all groups on a node share its group commit.
//!
//! [`RaftLog`] implements the core's storage port: an entity's turn (or a topic's publish
//! with every subscription's copies) becomes one entry of its group's log, and the append
//! resolves once openraft reports the entry committed and applied, so the actor's turn
//! stays the commit point. As configured, every group has one member, this node: the same
//! path a multi-node cluster takes, with nobody else to wait for. [`RaftLog::new_cluster`]
//! runs groups of several members over the node-to-node transport (`peer`); configuration
//! does not offer it yet.
//!
//! The namespace's run-time changes (entities created, changed or deleted at run time) are
//! the state of one more group, the metadata group ([`METADATA_GROUP`]): each change is an
//! entry holding the whole text, and every compaction round writes the text again so the
//! round can delete the segments that held the older entries.
//!
//! Only this module names openraft (pinned in `Cargo.toml`), so an upgrade stays local. It
//! leans on the core's port and the store, never the other way.

mod compaction;
mod convert;
mod durable;
mod log_store;
mod member;
mod network;
pub(crate) mod peer;
pub mod placement;
mod propose;
pub mod remote;
mod state_machine;
mod types;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::{OnceCell, mpsc, oneshot, watch};

use crate::broker::leadership::Leadership;
use crate::broker::storage::StorageError;
// The tests' `use super::*` names these (the port's implementation is in `durable`).
#[cfg(test)]
use crate::broker::entity::state::Change;
#[cfg(test)]
use crate::broker::storage::DurableLog;
use crate::config::ClusterConfig;
use crate::store::codec::LogRecord;
use crate::store::log::StoreError;
use crate::store::storage::{GroupLog, LogStorage};
use log_store::{GroupStore, Pending};
pub use placement::{GroupLayout, preferred_leader};
use propose::{MAX_ENTRIES_PER_REQUEST, MAX_ENTRY_BYTES_IN_CLUSTER, Proposed, Write, propose};
use state_machine::GroupMachine;
pub use state_machine::SnapshotStats;
use types::GroupRaft;

/// Where the groups report to the broker's metrics.
#[derive(Clone)]
pub struct GroupMetrics {
    /// A write's time from being handed to its group to its entry committed and applied.
    pub commit_seconds: prometheus::Histogram,
    /// Leaderships this node saw begin, of any group (a group's first election included).
    pub leader_changes: prometheus::IntCounter,
    /// Groups running on this node.
    pub running: prometheus::IntGauge,
    /// Running groups this node leads.
    pub led: prometheus::IntGauge,
}

/// Each running group's leader as this node knows it.
pub type Leaders = BTreeMap<String, Leadership>;

/// When this node's leadership of each group it leads began (as this node saw it).
type LeadingSince = Arc<Mutex<HashMap<String, (Leadership, tokio::time::Instant)>>>;

/// Follows `group`'s leadership until its Raft stops: publishes it in `leaders` (removed
/// when the Raft stops here or no leader is known), notes in `since` when this node's
/// leadership began, and with `metrics` counts each leadership that begins and the group
/// among the running and the led ones while it is.
async fn follow_leadership(
    group: String,
    raft: GroupRaft,
    node: u64,
    (leaders, since): (Arc<watch::Sender<Leaders>>, LeadingSince),
    metrics: Option<GroupMetrics>,
) {
    // The server metrics change with the vote and the leader only, not with every entry.
    let mut watch = raft.server_metrics();
    drop(raft);
    if let Some(metrics) = &metrics {
        metrics.running.inc();
    }
    let mut seen = None;
    let mut leading = false;
    loop {
        let (term, leader) = {
            let current = watch.borrow_and_update();
            (current.vote.leader_id().term, current.current_leader)
        };
        let leadership = leader.map(|leader| Leadership { node: leader, term });
        leaders.send_if_modified(|leaders| match leadership {
            Some(leadership) => leaders.insert(group.clone(), leadership) != Some(leadership),
            None => leaders.remove(&group).is_some(),
        });
        note_leading(&since, &group, leadership.filter(|led| led.node == node));
        if let Some(metrics) = &metrics {
            if let Some(leadership) = leadership
                && seen != Some(leadership)
            {
                seen = Some(leadership);
                metrics.leader_changes.inc();
            }
            if (leader == Some(node)) != leading {
                leading = !leading;
                if leading {
                    metrics.led.inc();
                } else {
                    metrics.led.dec();
                }
            }
        }
        if watch.changed().await.is_err() {
            break;
        }
    }
    leaders.send_if_modified(|leaders| leaders.remove(&group).is_some());
    note_leading(&since, &group, None);
    if let Some(metrics) = &metrics {
        if leading {
            metrics.led.dec();
        }
        metrics.running.dec();
    }
}

/// Notes in `since` that this node leads `group` in `leading` (from now, unless noted
/// before), or no longer leads it.
fn note_leading(since: &LeadingSince, group: &str, leading: Option<Leadership>) {
    let mut since = since.lock().unwrap_or_else(|poison| poison.into_inner());
    match leading {
        Some(leadership) => {
            let noted = since
                .get(group)
                .is_some_and(|(noted, _)| *noted == leadership);
            if !noted {
                since.insert(group.to_string(), (leadership, tokio::time::Instant::now()));
            }
        }
        None => {
            since.remove(group);
        }
    }
}

/// The placement group of an entity's log key: a subscription belongs to its topic's
/// group; a queue or a topic is a group of its own.
pub fn group_of(entity: &str) -> &str {
    match entity.find("/subscriptions/") {
        Some(at) => &entity[..at],
        None => entity,
    }
}

/// A group's Raft, what its log store shares with its state machine, and its proposer.
#[derive(Clone)]
struct Group {
    raft: GroupRaft,
    pending: Arc<Mutex<Pending>>,
    writes: mpsc::UnboundedSender<Write>,
}

/// The running groups, by name.
type Groups = Arc<Mutex<HashMap<String, Arc<OnceCell<Group>>>>>;

/// Forgets `group` if it is still the running group identified by `pending`.
fn remove_if_current(
    groups: &Mutex<HashMap<String, Arc<OnceCell<Group>>>>,
    group: &str,
    pending: &Arc<Mutex<Pending>>,
) {
    let mut groups = groups.lock().unwrap_or_else(|poison| poison.into_inner());
    let current = groups
        .get(group)
        .and_then(|cell| cell.get())
        .is_some_and(|running| Arc::ptr_eq(&running.pending, pending));
    if current {
        groups.remove(group);
    }
}

/// The metadata group: the namespace's run-time changes. Entity names start with a letter
/// or a digit (`config::names`), so no placement group has this name.
pub const METADATA_GROUP: &str = "$namespace";

/// The metadata group's state as last written.
#[derive(Debug, Default)]
struct Metadata {
    /// The namespace's run-time changes as last written (or recovered): written again at
    /// every compaction round.
    text: Option<String>,
    /// A compaction round whose rewrite failed: the next write of the text ends the
    /// metadata group's part in it.
    owed: Option<u64>,
}

/// The core's storage port on Raft groups over the node's write-ahead log.
pub struct RaftLog {
    settings: ClusterConfig,
    storage: LogStorage,
    config: Arc<openraft::Config>,
    groups: Groups,
    /// A group without writes for this long stops its Raft until the next write.
    idle: Duration,
    /// The metadata group's state; held while its text is written, so that the newest text
    /// is the last one in the group's log.
    metadata: tokio::sync::Mutex<Metadata>,
    /// The other members and the transport to them; `None` when this node is the only
    /// member of every group.
    cluster: Option<Cluster>,
    /// Set by [`RaftLog::shutdown`]: peers' requests no longer start groups.
    stopped: AtomicBool,
    /// Set by [`RaftLog::refuse_leadership`]: peers' requests to stand for election now are
    /// refused (this node is stopping).
    leaving: Arc<AtomicBool>,
    /// Where groups report, once set ([`RaftLog::report_to`]).
    metrics: std::sync::OnceLock<GroupMetrics>,
    /// Each running group's leader as this node knows it.
    leaders: Arc<watch::Sender<Leaders>>,
    /// When this node's leadership of each group it leads began: a leadership handed over
    /// waits out openraft's vote lease from then (`member`).
    leading_since: LeadingSince,
    /// How entities map onto groups: with [`GroupLayout::One`] every entity's writes go to
    /// the metadata group (one leader runs the whole namespace, `member`); with
    /// [`GroupLayout::PerEntity`] each placement group is its own, and a cluster's new
    /// group is led first by its [`preferred_leader`].
    layout: GroupLayout,
    /// What a member's groups did with snapshots.
    snapshots: Arc<state_machine::SnapshotStats>,
    /// The namespace's run-time changes as this member applied them (a member's metadata
    /// group publishes them; see [`RaftLog::applied_namespace`]).
    namespace: state_machine::NamespaceView,
}

/// A node's part in a cluster of several members.
struct Cluster {
    /// Every group's members (this node included) and their peer addresses.
    members: BTreeMap<u64, BasicNode>,
    /// The connections to the other members, shared by every group.
    peers: Arc<peer::Peers>,
    /// The peer listener's task (aborted at shutdown, which closes its connections).
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The nodes the peer listener serves: the configured members, and every node a
    /// group's membership names (members added at run time).
    accepted: Arc<std::sync::RwLock<std::collections::BTreeSet<u64>>>,
    /// What this node does when a stopping peer asks it to drain what that peer forwards.
    drain: peer::DrainHook,
    /// How this node serves a peer's entity commands.
    commands: peer::CommandsHook,
}

impl std::fmt::Debug for RaftLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RaftLog")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A group's Raft stops after this long without writes (restarting it takes ~0.2 ms).
const GROUP_IDLE: Duration = Duration::from_secs(30);

/// How long a group may take to elect its one member at start (or, in a cluster, how long
/// a write waits for the group to have a leader).
const ELECTION_WAIT: Duration = Duration::from_secs(30);

/// A cluster's new group waits this long for the member with the lowest id to initialize it
/// before another member does.
const INITIALIZE_WAIT: Duration = Duration::from_secs(3);

/// The largest message a cluster takes (entities configured with more are capped): it is
/// replicated in one entry, which must reach the followers within an AppendEntries
/// request's timeout (the heartbeat interval); one of 48 MiB never did, and the followers'
/// elections it caused left the cluster without a leader.
pub const MAX_MESSAGE_SIZE: u64 = 1024 * 1024;

/// A snapshot is sent to a member in chunks of this many bytes (the peer link's frames
/// hold at most `peer::MAX_FRAME`).
const SNAPSHOT_CHUNK: u64 = 1 << 20;

/// How long a member may take to take one chunk of a snapshot (the last one: to write and
/// sync the whole file).
const SNAPSHOT_CHUNK_TIMEOUT: Duration = Duration::from_secs(10);

/// Groups of several members never retire: a retired leader would stop its heartbeats and
/// a retired follower would miss entries.
const NEVER_IDLE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn port_error(error: StoreError) -> StorageError {
    match error {
        StoreError::NoSpace(text) => StorageError::NoSpace(text),
        other => StorageError::Failed(other.to_string()),
    }
}

impl RaftLog {
    /// Runs the groups recovered in `groups` (and every group written later) on `storage`.
    /// Fails when the data directory's groups name other members than this node: it was
    /// written by another node id.
    pub fn new(
        storage: LogStorage,
        groups: &HashMap<String, GroupLog>,
        settings: ClusterConfig,
    ) -> Result<RaftLog, String> {
        // One-member groups need no heartbeats or elections on a timer: a group elects
        // itself when it starts.
        let config = openraft::Config {
            enable_tick: false,
            enable_heartbeat: false,
            enable_elect: false,
            ..openraft::Config::default()
        };
        RaftLog::build(storage, groups, settings, config, None)
    }

    /// Runs every group with the members `settings.members` names (this node among them),
    /// reaching them with `secret` and serving them on `listener` (whose address is this
    /// node's in `settings`). Each group is initialized with all its members when it first
    /// starts; its members elect its leader.
    ///
    /// Configuration still refuses more than one member: this runs the transport and the
    /// replication on their own until placement and proxying exist.
    pub fn new_cluster(
        storage: LogStorage,
        groups: &HashMap<String, GroupLog>,
        settings: ClusterConfig,
        secret: &[u8],
        listener: TcpListener,
    ) -> Result<Arc<RaftLog>, String> {
        RaftLog::cluster_with(
            storage,
            groups,
            settings,
            (secret, ""),
            listener,
            GroupLayout::PerEntity,
        )
    }

    /// A cluster member as the daemon runs it: [`RaftLog::new_cluster`] with its groups laid
    /// out by `layout` ([`GroupLayout::One`]: every entity's writes in the metadata group,
    /// one leader for the whole namespace, `member`). `credentials` are the cluster secret
    /// and this node's entities and keys as [`crate::config::render::definitions`] renders
    /// them: a peer configured with others is refused (`peer`).
    pub fn new_member(
        storage: LogStorage,
        groups: &HashMap<String, GroupLog>,
        settings: ClusterConfig,
        credentials: (&[u8], &str),
        listener: TcpListener,
        layout: GroupLayout,
    ) -> Result<Arc<RaftLog>, String> {
        RaftLog::cluster_with(storage, groups, settings, credentials, listener, layout)
    }

    fn cluster_with(
        storage: LogStorage,
        groups: &HashMap<String, GroupLog>,
        settings: ClusterConfig,
        (secret, definitions): (&[u8], &str),
        listener: TcpListener,
        layout: GroupLayout,
    ) -> Result<Arc<RaftLog>, String> {
        if !storage.keeps_entry_locations() {
            return Err(
                "a cluster member's storage must keep its entries' locations (members read entries back for each other)"
                    .to_string(),
            );
        }
        if !settings
            .members
            .iter()
            .any(|member| member.id == settings.node_id)
        {
            return Err(format!(
                "node {} is not one of the cluster's members",
                settings.node_id
            ));
        }
        let config = openraft::Config {
            heartbeat_interval: member::HEARTBEAT.as_millis() as u64,
            election_timeout_min: member::ELECTION_TIMEOUT.0.as_millis() as u64,
            election_timeout_max: member::ELECTION_TIMEOUT.1.as_millis() as u64,
            max_payload_entries: MAX_ENTRIES_PER_REQUEST,
            // Snapshots are built when the store's compaction round asks (`compact`), and
            // sent in chunks well under the peer link's frame limit.
            snapshot_max_chunk_size: SNAPSHOT_CHUNK,
            // A chunk's request, and the last one's install (the file written and synced).
            install_snapshot_timeout: SNAPSHOT_CHUNK_TIMEOUT.as_millis() as u64,
            ..openraft::Config::default()
        };
        let settings_node = settings.node_id;
        let accepted = Arc::new(std::sync::RwLock::new(
            settings
                .members
                .iter()
                .map(|member| member.id)
                .collect::<std::collections::BTreeSet<u64>>(),
        ));
        let definitions = peer::definitions(secret, definitions);
        let secret: Arc<[u8]> = secret.into();
        let drain: peer::DrainHook = Arc::default();
        let commands: peer::CommandsHook = Arc::default();
        let peers = Arc::new(peer::Peers::new(
            settings.node_id,
            (secret.clone(), definitions),
            peer::MAX_FRAME,
        ));
        let cluster = Cluster {
            members: settings
                .members
                .iter()
                .map(|member| (member.id, BasicNode::new(&member.address)))
                .collect(),
            peers,
            listener: Mutex::new(None),
            accepted: accepted.clone(),
            drain: drain.clone(),
            commands: commands.clone(),
        };
        let mut log = RaftLog::build(storage, groups, settings, config, Some(cluster))?;
        log.idle = NEVER_IDLE;
        log.layout = layout;
        let log = Arc::new(log);
        let weak = Arc::downgrade(&log);
        log.storage.set_compactor(Arc::new(move |targets| {
            let weak = weak.clone();
            Box::pin(async move {
                let log = weak.upgrade()?;
                log.compact(targets).await
            })
        }));
        let weak = Arc::downgrade(&log);
        let local: peer::Local = Arc::new(move |group: String| {
            let weak = weak.clone();
            Box::pin(async move {
                let log = weak
                    .upgrade()
                    .ok_or_else(|| "the node is stopping".to_string())?;
                if log.stopped.load(Ordering::Acquire) {
                    return Err("the node is stopping".to_string());
                }
                log.group(&group)
                    .await
                    .map(|running| running.raft)
                    .map_err(|error| error.to_string())
            })
        });
        let task = peer::serve(
            listener,
            peer::Serving {
                node: settings_node,
                members: accepted,
                secret,
                definitions,
                max_frame: peer::MAX_FRAME,
                timeouts: (peer::FRAME_TIMEOUT, peer::IDLE_TIMEOUT),
                local,
                drain,
                commands,
                leaving: log.leaving.clone(),
            },
        );
        if let Some(cluster) = &log.cluster {
            *cluster
                .listener
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = Some(task);
        }
        Ok(log)
    }

    fn build(
        storage: LogStorage,
        groups: &HashMap<String, GroupLog>,
        settings: ClusterConfig,
        config: openraft::Config,
        cluster: Option<Cluster>,
    ) -> Result<RaftLog, String> {
        for (name, log) in groups {
            if let Some((_, membership)) = &log.membership {
                let member = membership
                    .configs
                    .iter()
                    .any(|config| config.contains(&settings.node_id));
                if !member {
                    return Err(format!(
                        "the data directory's group '{name}' has members {:?}, and this node's id is {}: the directory belongs to another node (set [cluster] node_id to its id, or use another data_dir)",
                        membership.configs, settings.node_id
                    ));
                }
            }
        }
        let config = openraft::Config {
            cluster_name: "ferrobus".to_string(),
            // Compaction is the store's (checkpoints and deleted segments).
            snapshot_policy: SnapshotPolicy::Never,
            ..config
        }
        .validate()
        .map_err(|error| format!("the Raft configuration is invalid: {error}"))?;
        Ok(RaftLog {
            settings,
            storage,
            config: Arc::new(config),
            groups: Groups::default(),
            idle: GROUP_IDLE,
            metadata: tokio::sync::Mutex::default(),
            cluster,
            stopped: AtomicBool::new(false),
            leaving: Arc::default(),
            metrics: std::sync::OnceLock::new(),
            leaders: Arc::new(watch::channel(Leaders::new()).0),
            leading_since: LeadingSince::default(),
            layout: GroupLayout::PerEntity,
            snapshots: Arc::default(),
            namespace: Arc::new(watch::channel(None).0),
        })
    }

    /// The namespace's run-time changes (the TOML text of `config::changes`) as of the
    /// metadata group's last entry this member applied, leader or not: on a cluster member,
    /// from its snapshot at start and from each committed entry as it is applied; never an
    /// entry that was not committed. `None` until there are any (and on a single node,
    /// which keeps them in its broker instead).
    pub fn applied_namespace(&self) -> watch::Receiver<Option<Arc<str>>> {
        self.namespace.subscribe()
    }

    /// Starts from the namespace's run-time changes recovered (`Recovery::namespace`), which
    /// compaction rounds write again until they are replaced.
    pub fn with_namespace(mut self, text: Option<String>) -> RaftLog {
        self.metadata.get_mut().text = text;
        self
    }

    /// Takes part in compaction for the metadata group: at every round the namespace's
    /// run-time changes are written again (after the round's start, so they replace what
    /// came before it), and only then may the round delete the segments before it. Whoever
    /// runs the broker calls this once, before any write; without it a round would purge
    /// the group's entries.
    pub fn keep_metadata(self: &Arc<Self>) {
        self.storage.register(METADATA_GROUP);
        let log = Arc::downgrade(self);
        let mut epochs = self.storage.epochs();
        tokio::spawn(async move {
            while epochs.changed().await.is_ok() {
                let epoch = *epochs.borrow_and_update();
                let Some(log) = log.upgrade() else { break };
                log.rewrite_metadata(epoch).await;
            }
        });
    }

    /// Writes the namespace's run-time changes again for compaction round `epoch`.
    async fn rewrite_metadata(&self, epoch: u64) {
        let mut metadata = self.metadata.lock().await;
        if let Some(text) = metadata.text.clone() {
            let record = LogRecord::Namespace { text };
            if let Err(error) = self.write(METADATA_GROUP, vec![record]).await {
                tracing::error!(%error, "cannot write the namespace's run-time changes for a log compaction: old log segments are kept until they are written");
                metadata.owed = Some(epoch);
                return;
            }
        }
        metadata.owed = None;
        drop(metadata);
        self.storage.checkpoint_done(METADATA_GROUP, epoch).await;
    }

    /// Retires groups after `idle` without writes instead of the default 30 s.
    pub fn with_idle(mut self, idle: Duration) -> RaftLog {
        self.idle = idle;
        self
    }

    /// How many groups' Raft runs now.
    pub fn running(&self) -> usize {
        self.groups
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .len()
    }

    /// The node's write-ahead log underneath.
    pub fn storage(&self) -> &LogStorage {
        &self.storage
    }

    /// What this node's groups did with snapshots.
    pub fn snapshot_stats(&self) -> &SnapshotStats {
        &self.snapshots
    }

    /// The group an entity's writes go to.
    fn group_for<'a>(&self, entity: &'a str) -> &'a str {
        if self.layout == GroupLayout::One {
            METADATA_GROUP
        } else {
            group_of(entity)
        }
    }

    fn cell(&self, group: &str) -> Arc<OnceCell<Group>> {
        let mut groups = self
            .groups
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        groups.entry(group.to_string()).or_default().clone()
    }

    /// Each running group's leader as this node knows it (its term and node), changing as
    /// leaderships begin and groups start and stop here: what the core follows, group by
    /// group, to know which groups' entities this node runs (those it leads).
    pub fn leaders(&self) -> watch::Receiver<Leaders> {
        self.leaders.subscribe()
    }

    /// Reports the groups to `metrics` from now on (groups started before are not counted
    /// among the running ones).
    pub fn report_to(&self, metrics: GroupMetrics) {
        let _ = self.metrics.set(metrics);
    }

    /// The group's Raft, started (and elected) on first use.
    async fn group(&self, group: &str) -> Result<Group, StorageError> {
        let cell = self.cell(group);
        cell.get_or_try_init(|| self.start(group)).await.cloned()
    }

    async fn start(&self, group: &str) -> Result<Group, StorageError> {
        let failed = |what: &str, error: &dyn std::fmt::Display| {
            StorageError::Failed(format!(
                "cannot start the Raft group '{group}': {what}: {error}"
            ))
        };
        let node = self.settings.node_id;
        let log = self.storage.group_log(group);
        let pending = Arc::new(Mutex::new(match self.cluster {
            None => Pending::default(),
            Some(_) => Pending::keeping(),
        }));
        let store = GroupStore::new(group, self.storage.clone(), pending.clone());
        let files = self.cluster.as_ref().map(|_| state_machine::Files {
            group: group.into(),
            storage: self.storage.clone(),
            stats: self.snapshots.clone(),
            namespace: (group == METADATA_GROUP).then(|| self.namespace.clone()),
        });
        let machine = GroupMachine::recovered(&log, pending.clone(), files)
            .map_err(|error| failed("its snapshot", &error))?;
        let raft = match &self.cluster {
            None => {
                openraft::Raft::new(node, self.config.clone(), network::NoPeers, store, machine)
                    .await
            }
            Some(cluster) => {
                let peers = peer::GroupPeers {
                    group: group.into(),
                    peers: cluster.peers.clone(),
                };
                openraft::Raft::new(node, self.config.clone(), peers, store, machine).await
            }
        }
        .map_err(|error| failed("openraft", &error))?;
        if let Some(cluster) = &self.cluster {
            // A new group is initialized with the same membership (the same entry at index
            // 0) by its preferred leader among the configured members at once (for the
            // metadata group the member with the lowest id), and by any other member only
            // if nothing reached it for a while (the preferred one is down): members that
            // initialize together may each stand for the first term, and a term-1 leader
            // would be deposed at once. Initializing stands for the first term already
            // (openraft); with per-entity groups, where the groups' leaders should spread
            // over the members, the preferred member stands again if that campaign left
            // the group without a leader (`stand_again`).
            tokio::spawn(admit_members(raft.clone(), cluster.accepted.clone()));
            // A node joining a running cluster waits for its leader to add it.
            if log.membership.is_none() && log.last.is_none() && !self.settings.join {
                let first = preferred_leader(group, cluster.members.keys().copied()) == Some(node);
                let elect = first && self.layout == GroupLayout::PerEntity;
                let raft = raft.clone();
                let members = cluster.members.clone();
                let group = group.to_string();
                let initialize = async move {
                    if !first {
                        tokio::time::sleep(INITIALIZE_WAIT).await;
                        if raft.metrics().borrow().last_log_index.is_some() {
                            return;
                        }
                    }
                    match raft.initialize(members).await {
                        Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                        Err(error) => {
                            tracing::warn!(%error, "cannot initialize the Raft group '{group}'");
                        }
                    }
                    if elect {
                        tokio::spawn(stand_again(raft, group));
                    }
                };
                if first {
                    initialize.await;
                } else {
                    tokio::spawn(initialize);
                }
            }
            tokio::spawn(report_replication(raft.clone(), node, pending.clone()));
        } else if log.membership.is_none() && log.last.is_none() {
            let members = BTreeMap::from([(node, BasicNode::new(&self.settings.address))]);
            match raft.initialize(members).await {
                Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(error) => return Err(failed("initializing", &error)),
            }
        } else if raft.metrics().borrow().current_leader != Some(node) {
            raft.trigger()
                .elect()
                .await
                .map_err(|error| failed("electing", &error))?;
        }
        if self.cluster.is_none() {
            raft.wait(Some(ELECTION_WAIT))
                .current_leader(node, "the group's one member leads it")
                .await
                .map_err(|error| failed("electing", &error))?;
        }
        tokio::spawn(follow_leadership(
            group.to_string(),
            raft.clone(),
            node,
            (self.leaders.clone(), self.leading_since.clone()),
            self.metrics.get().cloned(),
        ));
        let (writes, queue) = mpsc::unbounded_channel();
        tokio::spawn(propose(
            group.to_string(),
            raft.clone(),
            pending.clone(),
            queue,
            self.idle,
            Arc::downgrade(&self.groups),
            if self.cluster.is_some() {
                MAX_ENTRY_BYTES_IN_CLUSTER
            } else {
                usize::MAX
            },
        ));
        Ok(Group {
            raft,
            pending,
            writes,
        })
    }

    /// Writes `records` in one entry of `group`'s log (with other writes of the group that
    /// wait at the same time); resolves once it is committed and applied.
    async fn write(&self, group: &str, records: Vec<LogRecord>) -> Result<(), StorageError> {
        let stopped =
            || StorageError::Failed(format!("the Raft group '{group}' stopped: its log failed"));
        let mut records = records;
        let started = std::time::Instant::now();
        // A group that retires (idle) as the write arrives hands it back: start it again.
        for _ in 0..8 {
            let running = self.group(group).await?;
            if self.cluster.is_some() {
                self.elected(group, &running).await?;
            }
            let (done, answer) = oneshot::channel();
            if let Err(mpsc::error::SendError(write)) = running.writes.send(Write { records, done })
            {
                let failed = running
                    .pending
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .failure()
                    .is_some();
                if failed {
                    self.retire(group, &running).await;
                    return Err(stopped());
                }
                records = write.records;
                remove_if_current(&self.groups, group, &running.pending);
                continue;
            }
            match answer.await {
                Ok(Proposed::Done) => {
                    if let Some(metrics) = self.metrics.get() {
                        metrics
                            .commit_seconds
                            .observe(started.elapsed().as_secs_f64());
                    }
                    return Ok(());
                }
                Ok(Proposed::Refused(error)) => return Err(error),
                Ok(Proposed::Stopped(error)) => {
                    // The next write starts the group again from what its log holds.
                    self.retire(group, &running).await;
                    return Err(error);
                }
                Ok(Proposed::Retry(returned)) => {
                    records = returned;
                    remove_if_current(&self.groups, group, &running.pending);
                }
                Err(_) => {
                    self.retire(group, &running).await;
                    return Err(stopped());
                }
            }
        }
        Err(stopped())
    }

    /// Waits until the group has a leader (this node or another) and returns its id.
    async fn elected(&self, group: &str, running: &Group) -> Result<u64, StorageError> {
        let metrics = running
            .raft
            .wait(Some(ELECTION_WAIT))
            .metrics(
                |metrics| metrics.current_leader.is_some(),
                "the group has a leader",
            )
            .await
            .map_err(|error| {
                StorageError::Failed(format!("the Raft group '{group}' has no leader: {error}"))
            })?;
        metrics
            .current_leader
            .ok_or_else(|| StorageError::Failed(format!("the Raft group '{group}' has no leader")))
    }

    /// The node that leads `group` (started here first if it does not run yet), once it
    /// has a leader.
    pub async fn leader(&self, group: &str) -> Result<u64, StorageError> {
        let running = self.group(group).await?;
        self.elected(group, &running).await
    }

    /// Forgets a stopped group's Raft (a later write starts a new one).
    async fn retire(&self, group: &str, stopped: &Group) {
        remove_if_current(&self.groups, group, &stopped.pending);
        let _ = stopped.raft.shutdown().await;
    }

    /// Stops every group's Raft (after the entities stopped; before the log closes).
    pub async fn shutdown(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(cluster) = &self.cluster {
            let listener = cluster
                .listener
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .take();
            if let Some(listener) = listener {
                listener.abort();
                let _ = listener.await;
            }
        }
        let groups: Vec<Arc<OnceCell<Group>>> = {
            let mut groups = self
                .groups
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            groups.drain().map(|(_, cell)| cell).collect()
        };
        for cell in groups {
            if let Some(group) = cell.get() {
                let _ = group.raft.shutdown().await;
            }
        }
        // Last: a group still running could have connected again.
        if let Some(cluster) = &self.cluster {
            cluster.peers.close();
        }
    }
}

/// Makes this member, the preferred leader of `group` that just initialized it, stand for
/// election again if its first campaign (initializing starts one) left the group without a
/// leader for the shortest election timeout: without waiting for its own election timer,
/// so that it rather than another member leads the group first. Triggering it at once
/// instead would abandon the first campaign, winning or not, for a second term.
async fn stand_again(raft: GroupRaft, group: String) {
    let led = raft
        .wait(Some(member::ELECTION_TIMEOUT.0))
        .metrics(
            |metrics| metrics.current_leader.is_some(),
            "the group has a leader",
        )
        .await;
    if led.is_ok() {
        return;
    }
    // Ignored by a member that leads by now.
    if let Err(error) = raft.trigger().elect().await {
        tracing::debug!(%error, "the preferred leader of the Raft group '{group}' could not stand for election");
    }
}

/// Lets every node that `raft`'s membership names (a member added at run time among them)
/// connect to this node's peer listener, for as long as the group runs.
async fn admit_members(
    raft: GroupRaft,
    accepted: Arc<std::sync::RwLock<std::collections::BTreeSet<u64>>>,
) {
    let mut metrics = raft.metrics();
    drop(raft);
    loop {
        let nodes: Vec<u64> = metrics
            .borrow_and_update()
            .membership_config
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        accepted
            .write()
            .unwrap_or_else(|poison| poison.into_inner())
            .extend(nodes);
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Tells a multi-member group's log store which entries every member has, so that the
/// leader keeps the others in memory for those that lag; a follower keeps what it applied
/// (up to the store's bound), since it may lead next.
async fn report_replication(raft: GroupRaft, node: u64, pending: Arc<Mutex<Pending>>) {
    let mut metrics = raft.metrics();
    loop {
        let needed = {
            let metrics = metrics.borrow_and_update();
            match (&metrics.replication, metrics.current_leader == Some(node)) {
                (Some(replication), true) => replication
                    .iter()
                    .filter(|(member, _)| **member != node)
                    .map(|(_, matched)| matched.map_or(0, |matched| matched.index + 1))
                    .min()
                    .unwrap_or(u64::MAX),
                // A follower keeps them too: as a leader it may have to send them.
                _ => 0,
            }
        };
        pending
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .replicated(needed);
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod cluster_tests;

#[cfg(test)]
mod spread_tests;
