//! A node's part in a cluster of several members: one Raft group, the metadata group,
//! holds the whole namespace (every entity's turns and the run-time definitions), so one
//! node at a time leads everything. The leader runs the broker's entities; the others keep
//! the log on their disks and forward their clients' connections to it. Taking over is
//! recovery: the new leader waits until its term's first entry is committed (so its whole
//! log is), replays the group's entries from its disk and starts the entities from them.
//!
//! With per-entity groups ([`super::GroupLayout::PerEntity`]) each group has a leader of its
//! own, and the same steps are taken group by group: [`RaftLog::start_group`],
//! [`RaftLog::confirm_leadership`], [`RaftLog::replay_entities`],
//! [`RaftLog::hold_group_lease`], [`RaftLog::transfer_group`].
//!
//! A leader holds a [`Lease`] while a majority acknowledges it: the lease runs out
//! ([`LEASE`]) before the other members' election timeout, so a leader cut off from them
//! stops answering before anyone else can lead.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ServerState;
use serde::Serialize;
use tokio::sync::watch;

use super::types::GroupRaft;
use super::{METADATA_GROUP, RaftLog};
use crate::broker::entity::state::Change;
use crate::broker::leadership::{Leadership, Lease};
use crate::broker::storage::{Recovered, StorageError};

/// How often a leader sends heartbeats.
pub(super) const HEARTBEAT: Duration = Duration::from_millis(100);

/// A follower that hears nothing from its leader for a time in this range (random per
/// round) stands for election.
pub(super) const ELECTION_TIMEOUT: (Duration, Duration) =
    (Duration::from_millis(300), Duration::from_millis(600));

/// How long after a majority's acknowledgement a leader still answers clients: well under
/// the shortest election timeout, for clock drift and for the time a reply takes to leave.
/// (A follower grants no other candidate its vote until the longest election timeout has
/// passed since its leader's last heartbeat: openraft's vote lease.)
pub const LEASE: Duration = Duration::from_millis(200);

/// How long a removal waits for the removed node to receive the membership without it (a
/// dead node never does; it is removed all the same).
const REMOVAL_NOTICE: Duration = Duration::from_secs(5);

/// What a node knows of the cluster (`/health`).
#[derive(Debug, Clone, Serialize)]
pub struct MemberView {
    /// This node's id.
    pub node: u64,
    /// `leader`, `follower`, `candidate` or `learner`.
    pub role: &'static str,
    /// The leader this node knows of.
    pub leader: Option<u64>,
    /// The current term.
    pub term: u64,
    /// The index of the last entry in this node's log.
    pub last_index: Option<u64>,
    /// The last entry its snapshot holds (none before its first log compaction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_index: Option<u64>,
    /// Its log is purged up to this entry (its snapshot holds what came before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purged_index: Option<u64>,
    /// The voting members.
    pub voters: Vec<u64>,
    /// Nodes receiving the log that do not vote yet (being added).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub learners: Vec<u64>,
    /// On the leader: each member's replication progress.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberProgress>,
}

/// A member's replication progress as its leader sees it.
#[derive(Debug, Clone, Serialize)]
pub struct MemberProgress {
    /// The member's id.
    pub id: u64,
    /// The index of the last entry known to be on its disk.
    pub matched: Option<u64>,
    /// Entries of the leader's log it does not have yet.
    pub lag: u64,
}

impl RaftLog {
    /// Starts the cluster's group on this node: it takes part in elections and replication
    /// from now on.
    pub async fn start_member(&self) -> Result<(), StorageError> {
        self.start_group(METADATA_GROUP).await
    }

    /// Waits (at most `within`) until the cluster's group has a leader and this node has
    /// applied every entry its log holds: what it then knows of the namespace is what the
    /// cluster committed before it started, not only its configuration file. Whether it got
    /// there.
    pub async fn metadata_applied(&self, within: Duration) -> bool {
        let Some(raft) = self.running_raft(METADATA_GROUP) else {
            return false;
        };
        raft.wait(Some(within))
            .metrics(
                |metrics| {
                    metrics.current_leader.is_some()
                        && metrics.last_applied.map(|id| id.index) >= metrics.last_log_index
                },
                "the cluster's group applied its log",
            )
            .await
            .is_ok()
    }

    /// From now on, a peer's request that this node stand for election at once (a
    /// leadership handed to it) is refused: it is stopping.
    pub fn refuse_leadership(&self) {
        self.leaving
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Starts `group` on this node (unless it runs already): it takes part in the group's
    /// elections and replication from now on.
    pub async fn start_group(&self, group: &str) -> Result<(), StorageError> {
        self.group(group).await.map(|_| ())
    }

    /// Waits until this node leads the cluster's group and every entry in its log is
    /// committed (its term's first entry is), then returns the leadership.
    pub async fn lead(&self) -> Result<Leadership, StorageError> {
        let node = self.settings.node_id;
        let mut leaders = self.leaders();
        loop {
            let leading = leaders
                .borrow_and_update()
                .get(METADATA_GROUP)
                .copied()
                .filter(|leadership| leadership.node == node);
            if let Some(leadership) = leading {
                if self.confirm_leadership(METADATA_GROUP, leadership).await {
                    return Ok(leadership);
                }
                // The leadership changed meanwhile (this receiver has the change to see).
                let _ = tokio::time::timeout(HEARTBEAT, leaders.changed()).await;
                continue;
            }
            if leaders.changed().await.is_err() {
                return Err(StorageError::Failed(
                    "the cluster's group stopped".to_string(),
                ));
            }
        }
    }

    /// Whether this node leads `group` in `leadership` with every entry of its log
    /// committed (its term's first entry is): `true` once it does, `false` as soon as the
    /// group's leadership as this node knows it ([`RaftLog::leaders`]) is another one or
    /// none (the group does not run here, or `leadership` names another node or a term
    /// that has passed).
    pub async fn confirm_leadership(&self, group: &str, leadership: Leadership) -> bool {
        if leadership.node != self.settings.node_id {
            return false;
        }
        let mut leaders = self.leaders();
        loop {
            if leaders.borrow_and_update().get(group) != Some(&leadership) {
                return false;
            }
            let Some(raft) = self.running_raft(group) else {
                return false;
            };
            let confirmed = raft.ensure_linearizable().await.is_ok();
            drop(raft);
            if confirmed && self.leaders.borrow().get(group) == Some(&leadership) {
                return true;
            }
            // A leader that cannot reach its majority (it restarted into a leadership its
            // vote recorded, cut off): try again after a while, or once the leadership
            // changes, instead of spinning.
            if let Ok(Err(_)) = tokio::time::timeout(HEARTBEAT, leaders.changed()).await {
                return false;
            }
        }
    }

    /// Everything the cluster's group holds, replayed from this node's disk: what its
    /// leader starts the entities and the namespace from.
    pub async fn replay_member(&self) -> Result<Recovered, String> {
        let (entities, namespace) = self
            .storage
            .replay_group_with_namespace(METADATA_GROUP)
            .map_err(|error| format!("cannot replay the cluster's log: {error}"))?;
        self.metadata.lock().await.text = namespace.clone();
        Ok(Recovered {
            entities,
            namespace,
        })
    }

    /// `group`'s entities (a placement group's, or every entity's in the metadata group),
    /// replayed from this node's disk: its snapshot, then its log after it. What the
    /// group's leader starts them from once [`RaftLog::confirm_leadership`] says its whole
    /// log is committed.
    pub fn replay_entities(&self, group: &str) -> Result<HashMap<String, Vec<Change>>, String> {
        self.storage
            .replay_group(group)
            .map_err(|error| format!("cannot replay the log of the group '{group}': {error}"))
    }

    /// Keeps `lease` extended while this node leads the cluster's group in `leadership`
    /// and a majority acknowledges it; revokes it when the leadership ends.
    pub async fn hold_lease(&self, lease: Arc<Lease>, leadership: Leadership) {
        self.hold_group_lease(METADATA_GROUP, lease, leadership)
            .await
    }

    /// Keeps `lease` extended while this node leads `group` in `leadership` and a majority
    /// of the group's members acknowledges it; revokes it when the leadership ends (or the
    /// group stops).
    pub async fn hold_group_lease(&self, group: &str, lease: Arc<Lease>, leadership: Leadership) {
        let Ok(running) = self.group(group).await else {
            lease.revoke();
            return;
        };
        let mut metrics = running.raft.metrics();
        drop(running);
        loop {
            let held = {
                let current = metrics.borrow_and_update();
                let leads = current.state == ServerState::Leader
                    && current.current_leader == Some(leadership.node)
                    && current.current_term == leadership.term;
                if leads && let Some(millis) = current.millis_since_quorum_ack {
                    let acknowledged = Instant::now()
                        .checked_sub(Duration::from_millis(millis))
                        .unwrap_or_else(Instant::now);
                    lease.extend_to(acknowledged + LEASE);
                }
                leads
            };
            if !held {
                lease.revoke();
                return;
            }
            if metrics.changed().await.is_err() {
                lease.revoke();
                return;
            }
        }
    }

    /// What this node knows of the cluster now (`None` before its group runs).
    pub fn member_view(&self) -> Option<MemberView> {
        let running = self.running_member()?;
        let metrics = running.metrics();
        let metrics = metrics.borrow();
        let role = match metrics.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "stopped",
        };
        let last = metrics.last_log_index.unwrap_or(0);
        let members = metrics
            .replication
            .as_ref()
            .map(|replication| {
                replication
                    .iter()
                    .map(|(id, matched)| MemberProgress {
                        id: *id,
                        matched: matched.map(|matched| matched.index),
                        lag: last.saturating_sub(matched.map_or(0, |matched| matched.index)),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(MemberView {
            node: self.settings.node_id,
            role,
            leader: metrics.current_leader,
            term: metrics.current_term,
            last_index: metrics.last_log_index,
            snapshot_index: metrics.snapshot.map(|id| id.index),
            purged_index: metrics.purged.map(|id| id.index),
            voters: metrics.membership_config.voter_ids().collect(),
            learners: metrics
                .membership_config
                .membership()
                .learner_ids()
                .collect(),
            members,
        })
    }

    /// The host (without the port) other members reach `node` at: from the group's
    /// membership (members added at run time), else the configuration.
    pub fn member_host(&self, node: u64) -> Option<String> {
        let address = self.peer_address(node).ok()?;
        let (host, _) = address.rsplit_once(':')?;
        Some(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        )
    }

    /// The members whose peer address in the group's membership (what the nodes use)
    /// differs from this node's configuration: (id, stored, configured).
    pub fn member_address_differences(&self) -> Vec<(u64, String, String)> {
        let Some(raft) = self.running_member() else {
            return Vec::new();
        };
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        self.settings
            .members
            .iter()
            .filter_map(|member| {
                let stored = metrics
                    .membership_config
                    .nodes()
                    .find(|(id, _)| **id == member.id)
                    .map(|(_, node)| node.addr.clone())?;
                (stored != member.address).then(|| (member.id, stored, member.address.clone()))
            })
            .collect()
    }

    /// The cluster group's Raft on this node, once it runs.
    fn running_member(&self) -> Option<GroupRaft> {
        self.running_raft(METADATA_GROUP)
    }

    /// `group`'s Raft on this node, if it runs (never started by asking).
    /// How many entries of `group`'s log `node` lacks, as this node (the group's leader)
    /// last heard; `None` when this node does not lead the group or has not heard from it.
    pub fn group_lag(&self, group: &str, node: u64) -> Option<u64> {
        let raft = self.running_raft(group)?;
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        let matched = metrics.replication.as_ref()?.get(&node).copied()?;
        let last = metrics.last_log_index.unwrap_or(0);
        Some(last.saturating_sub(matched.map_or(0, |matched| matched.index)))
    }

    fn running_raft(&self, group: &str) -> Option<GroupRaft> {
        let groups = self
            .groups
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        Some(groups.get(group)?.get()?.raft.clone())
    }

    /// How long [`RaftLog::add_member`] waits for the new node to receive the log (under
    /// the command line's 30 s request timeout).
    pub const LEARNER_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(25);

    /// Adds node `id` (its peer listener at `address`) to the cluster: first as a learner
    /// that receives the log until it has caught up, then as a voting member (Raft's joint
    /// consensus). This node must lead. Returns the new view.
    /// Fails when the node has not received the log up to the entry that added it within
    /// `within` (it stays a learner, without a vote).
    pub async fn add_member(
        &self,
        id: u64,
        address: &str,
        within: std::time::Duration,
    ) -> Result<MemberView, String> {
        let raft = self
            .running_member()
            .ok_or("the cluster's group does not run here")?;
        let voters = self.voters(&raft)?;
        if voters.contains(&id) {
            return Err(format!("node {id} is a member already"));
        }
        let (learner, last) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            let learner = metrics
                .membership_config
                .membership()
                .learner_ids()
                .any(|learner| learner == id);
            (learner, metrics.last_log_index.unwrap_or(0))
        };
        // A node added before that has not caught up yet is waited for again.
        let wanted = if learner {
            last
        } else {
            raft.add_learner(id, openraft::BasicNode::new(address), false)
                .await
                .map_err(|error| format!("cannot add node {id} as a learner: {error}"))?
                .log_id
                .index
        };
        // openraft's own wait counts a learner within 5,000 entries as caught up, one that
        // never answered too: wait until it has the log up to the entry that added it.
        let caught_up = raft
            .wait(Some(within))
            .metrics(
                |metrics| {
                    metrics
                        .replication
                        .as_ref()
                        .and_then(|replication| replication.get(&id).copied().flatten())
                        .is_some_and(|matched| matched.index >= wanted)
                },
                "the new node has the log",
            )
            .await;
        if caught_up.is_err() {
            return Err(format!(
                "node {id} did not receive the log up to entry {wanted} within {} s (is it running, with [cluster] join = true, at {address}?): it stays a learner, without a vote; run add-node again once it runs",
                within.as_secs_f64()
            ));
        }
        let mut next = voters;
        next.insert(id);
        raft.change_membership(next, false)
            .await
            .map_err(|error| format!("cannot make node {id} a member: {error}"))?;
        self.member_view()
            .ok_or_else(|| "the cluster's group stopped".to_string())
    }

    /// Removes node `id` from the cluster (joint consensus); the node stops taking part.
    /// This node must lead. Returns the new view.
    pub async fn remove_member(&self, id: u64) -> Result<MemberView, String> {
        let raft = self
            .running_member()
            .ok_or("the cluster's group does not run here")?;
        let mut voters = self.voters(&raft)?;
        if !voters.remove(&id) {
            return Err(format!("node {id} is not a member"));
        }
        if voters.is_empty() {
            return Err("the cluster's last member cannot be removed".to_string());
        }
        // First a learner, so that it still receives the log and learns it no longer votes
        // (a node left out of the log would never know, and would stand for election).
        let changed = raft
            .change_membership(voters, true)
            .await
            .map_err(|error| format!("cannot remove node {id}: {error}"))?;
        let at = changed.log_id.index;
        let _ = raft
            .wait(Some(REMOVAL_NOTICE))
            .metrics(
                |metrics| {
                    metrics.replication.as_ref().is_some_and(|replication| {
                        replication
                            .get(&id)
                            .is_some_and(|matched| matched.is_some_and(|m| m.index >= at))
                    })
                },
                "the removed node has the membership without it",
            )
            .await;
        raft.change_membership(
            openraft::ChangeMembers::RemoveNodes(std::collections::BTreeSet::from([id])),
            false,
        )
        .await
        .map_err(|error| format!("cannot remove node {id}: {error}"))?;
        self.member_view()
            .ok_or_else(|| "the cluster's group stopped".to_string())
    }

    /// The group's voting members, when this node leads it.
    fn voters(&self, raft: &GroupRaft) -> Result<std::collections::BTreeSet<u64>, String> {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        if metrics.current_leader != Some(self.settings.node_id) {
            return Err(format!(
                "node {} does not lead the cluster (the leader is {:?}): ask the leader",
                self.settings.node_id, metrics.current_leader
            ));
        }
        Ok(metrics.membership_config.voter_ids().collect())
    }

    /// Waits until this node, once a voting member of the cluster, votes no longer (another
    /// member removed it: it is a learner for as long as it takes to learn that, or gone).
    pub async fn removed(&self) {
        let Ok(running) = self.group(METADATA_GROUP).await else {
            return std::future::pending().await;
        };
        let mut metrics = running.raft.metrics();
        drop(running);
        let node = self.settings.node_id;
        let mut was_voter = false;
        loop {
            let voter = metrics
                .borrow_and_update()
                .membership_config
                .voter_ids()
                .any(|id| id == node);
            if voter {
                was_voter = true;
            } else if was_voter {
                return;
            }
            if metrics.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The node leading the cluster's group as this node knows it, as it changes.
    pub fn cluster_leader(&self) -> watch::Receiver<Option<u64>> {
        let mut leaders = self.leaders();
        let (sender, receiver) = watch::channel(
            leaders
                .borrow_and_update()
                .get(METADATA_GROUP)
                .map(|leadership| leadership.node),
        );
        tokio::spawn(async move {
            while leaders.changed().await.is_ok() {
                let leader = leaders
                    .borrow_and_update()
                    .get(METADATA_GROUP)
                    .map(|leadership| leadership.node);
                sender.send_if_modified(|current| {
                    let changed = *current != leader;
                    *current = leader;
                    changed
                });
                if sender.is_closed() {
                    break;
                }
            }
        });
        receiver
    }

    /// Waits until the cluster's group stops on this node (its log failed: a disk that
    /// cannot sync), and says why.
    pub async fn member_stopped(&self) -> String {
        let Ok(running) = self.group(METADATA_GROUP).await else {
            return "the cluster's group did not start".to_string();
        };
        let mut metrics = running.raft.metrics();
        drop(running);
        loop {
            let failed = match &metrics.borrow_and_update().running_state {
                Err(error) => Some(error.to_string()),
                Ok(()) => None,
            };
            if let Some(error) = failed {
                return error;
            }
            if metrics.changed().await.is_err() {
                return "the cluster's group stopped".to_string();
            }
        }
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.settings.node_id
    }

    /// Sets what this node does when a stopping member asks it to drain the client
    /// connections that member forwards to it ([`super::peer::DrainForwarded`]).
    pub fn on_drain_request(&self, drain: super::peer::DrainForwarded) {
        if let Some(cluster) = &self.cluster {
            *cluster
                .drain
                .write()
                .unwrap_or_else(|poison| poison.into_inner()) = Some(drain);
        }
    }

    /// Sets how this node serves a peer's entity-command connections (the entities it runs).
    pub fn on_commands(&self, serve: super::peer::ServeCommands) {
        if let Some(cluster) = &self.cluster {
            *cluster
                .commands
                .write()
                .unwrap_or_else(|poison| poison.into_inner()) = Some(serve);
        }
    }

    /// A new entity-command connection to member `node`, its handshake done (what a
    /// [`super::remote::Proxy`] runs on).
    pub async fn commands_stream(&self, node: u64) -> Result<tokio::net::TcpStream, String> {
        let cluster = self.member_part()?;
        let address = self.peer_address(node)?;
        cluster.peers.commands_stream(node, &address).await
    }

    /// Asks the leader this node knows of to drain the client connections this node
    /// forwards to it (this node is stopping); how many it drains.
    pub async fn ask_leader_to_drain(&self, ttl: std::time::Duration) -> Result<usize, String> {
        let cluster = self.member_part()?;
        let leader = self
            .member_view()
            .and_then(|view| view.leader)
            .filter(|leader| *leader != self.node_id())
            .ok_or_else(|| "no other node leads".to_string())?;
        let address = self.peer_address(leader)?;
        cluster.peers.drain(leader, &address, ttl).await
    }

    /// This node's part in a cluster of several members.
    fn member_part(&self) -> Result<&super::Cluster, String> {
        self.cluster
            .as_ref()
            .ok_or_else(|| "not a member of a cluster".to_string())
    }

    /// Member `node`'s peer address: from the cluster group's membership, else the
    /// configuration.
    fn peer_address(&self, node: u64) -> Result<String, String> {
        self.group_peer_address(METADATA_GROUP, node)
    }

    /// Member `node`'s peer address: from `group`'s membership, else the cluster group's,
    /// else the configuration.
    fn group_peer_address(&self, group: &str, node: u64) -> Result<String, String> {
        let in_group = |group: &str| {
            let raft = self.running_raft(group)?;
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            metrics
                .membership_config
                .nodes()
                .find(|(id, _)| **id == node)
                .map(|(_, basic)| basic.addr.clone())
        };
        in_group(group)
            .or_else(|| in_group(METADATA_GROUP))
            .or_else(|| {
                self.cluster
                    .as_ref()
                    .and_then(|cluster| cluster.members.get(&node))
                    .map(|basic| basic.addr.clone())
            })
            .ok_or_else(|| format!("node {node}'s peer address is unknown"))
    }

    /// Hands this node's leadership of the cluster to `to`, or to the voting member that
    /// holds the most of the log: once that node holds every entry, it is asked to start an
    /// election at once, which this node grants. Returns the new leader once this node
    /// knows one, at most `within` after the call.
    ///
    /// A leader refuses every vote for the longest election timeout after it was elected
    /// (openraft's vote lease), so the request waits until `led_since` (when this node
    /// began to lead) is that long ago.
    pub async fn transfer_leadership(
        &self,
        to: Option<u64>,
        led_since: tokio::time::Instant,
        within: Duration,
    ) -> Result<u64, String> {
        self.member_part()?;
        let raft = self
            .running_member()
            .ok_or_else(|| "the cluster's group stopped".to_string())?;
        let own = self.node_id();
        let view = self
            .member_view()
            .ok_or_else(|| "the cluster's group stopped".to_string())?;
        if view.leader != Some(own) {
            return Err(match view.leader {
                Some(leader) => format!("this node does not lead the cluster: node {leader} does"),
                None => "this node does not lead the cluster".to_string(),
            });
        }
        let target = match to {
            Some(target) if target == own => {
                return Err(format!("node {own} already leads the cluster"));
            }
            Some(target) if !view.voters.contains(&target) => {
                return Err(format!(
                    "node {target} is not a voting member of the cluster"
                ));
            }
            Some(target) => target,
            None => view
                .members
                .iter()
                .filter(|member| member.id != own && view.voters.contains(&member.id))
                .min_by_key(|member| member.lag)
                .map(|member| member.id)
                .ok_or_else(|| "the cluster has no other voting member".to_string())?,
        };
        // This node stays out of the cluster group's elections (it is stopping or stepping
        // down): if the first request loses, the leadership does not come back here.
        self.hand_over(METADATA_GROUP, &raft, target, led_since, within)
            .await
    }

    /// Hands this node's leadership of `group` to its voting member `to`, as
    /// [`RaftLog::transfer_leadership`] does the cluster's group's; returns the new leader
    /// once this node knows one, at most `within` after the call. The vote lease is waited
    /// out from when this node began to lead the group (as it saw it). This node stands for
    /// the group's elections again afterwards, whether the leadership moved or not.
    pub async fn transfer_group(
        &self,
        group: &str,
        to: u64,
        within: Duration,
    ) -> Result<u64, String> {
        self.member_part()?;
        let raft = self
            .running_raft(group)
            .ok_or_else(|| format!("the group '{group}' does not run on this node"))?;
        let own = self.node_id();
        let (leader, voter) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            let voter = metrics.membership_config.voter_ids().any(|id| id == to);
            (metrics.current_leader, voter)
        };
        if leader != Some(own) {
            return Err(match leader {
                Some(leader) => {
                    format!("this node does not lead the group '{group}': node {leader} does")
                }
                None => format!("this node does not lead the group '{group}'"),
            });
        }
        if to == own {
            return Err(format!("node {own} already leads the group '{group}'"));
        }
        if !voter {
            return Err(format!(
                "node {to} is not a voting member of the group '{group}'"
            ));
        }
        let led_since = self
            .leading_since
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .get(group)
            .filter(|(leadership, _)| leadership.node == own)
            .map_or_else(tokio::time::Instant::now, |(_, since)| *since);
        let handed = self.hand_over(group, &raft, to, led_since, within).await;
        // Per group: this node stays electable in its other groups regardless.
        raft.runtime_config().elect(true);
        handed
    }

    /// Hands `raft`'s leadership of `group` (this node leads it, since `led_since`) to
    /// `target`: once the target holds every entry, it is asked to start an election at
    /// once, which this node grants, and this node no longer stands for the group's
    /// elections. Returns the new leader once this node knows one, at most `within` after
    /// the call.
    ///
    /// A leader refuses every vote for the longest election timeout after it was elected
    /// (openraft's vote lease), so the request waits until `led_since` is that long ago.
    async fn hand_over(
        &self,
        group: &str,
        raft: &GroupRaft,
        target: u64,
        led_since: tokio::time::Instant,
        within: Duration,
    ) -> Result<u64, String> {
        let cluster = self.member_part()?;
        let own = self.node_id();
        let deadline = tokio::time::Instant::now() + within;
        let stopped = || match group {
            METADATA_GROUP => "the cluster's group stopped".to_string(),
            group => format!("the group '{group}' stopped"),
        };
        // The target must hold every entry, or this node would refuse it its vote.
        let caught_up = raft
            .wait(Some(within))
            .metrics(
                |metrics| lag(metrics, target) == Some(0),
                "the target holds every entry",
            )
            .await;
        if caught_up.is_err() {
            let lag = lag(&raft.metrics().borrow(), target);
            return Err(format!(
                "node {target} did not catch up with the log in {within:?} (behind by {lag:?} entries)"
            ));
        }
        let address = self.group_peer_address(group, target)?;
        tokio::time::sleep_until(led_since + ELECTION_TIMEOUT.1 + Duration::from_millis(50)).await;
        // This node no longer stands for election: if the first request loses (a vote
        // lease, a split vote), the leadership does not come back here.
        raft.runtime_config().elect(false);
        // Asked again while no other node leads (an election lost to a vote lease, a
        // split vote), each time after the longest election timeout and a half.
        let mut metrics = raft.metrics();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no other node took the leadership within {within:?} of asking node {target}"
                ));
            }
            cluster
                .peers
                .elect(
                    target,
                    &address,
                    group,
                    left.max(Duration::from_millis(100)),
                )
                .await
                .map_err(|why| format!("node {target} could not start an election: {why}"))?;
            let round = (ELECTION_TIMEOUT.1 * 3 / 2)
                .min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            let elected = tokio::time::timeout(
                round,
                metrics
                    .wait_for(|metrics| metrics.current_leader.is_some_and(|leader| leader != own)),
            )
            .await;
            match elected {
                Ok(Ok(metrics)) => return Ok(metrics.current_leader.unwrap_or(target)),
                Ok(Err(_)) => return Err(stopped()),
                Err(_) => {}
            }
        }
    }
}

/// How many entries of the leader's log `member` lacks, as the leader's `metrics` show
/// (`None` on a node that does not lead, or for a node that is not a member).
fn lag(metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>, member: u64) -> Option<u64> {
    let last = metrics.last_log_index.unwrap_or(0);
    let matched = *metrics.replication.as_ref()?.get(&member)?;
    Some(last.saturating_sub(matched.map_or(0, |matched| matched.index)))
}
