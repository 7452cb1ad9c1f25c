//! Between openraft's identities and the store's plain ones.

use std::collections::{BTreeMap, BTreeSet};

use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, Vote};

use crate::store::codec::{self, EntryId};

/// The store's identity of an entry.
pub(super) fn entry_id_to(log_id: &LogId<u64>) -> EntryId {
    EntryId {
        term: log_id.leader_id.term,
        node: log_id.leader_id.node_id,
        index: log_id.index,
    }
}

/// openraft's identity of an entry.
pub(super) fn log_id_from(id: EntryId) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(id.term, id.node), id.index)
}

/// The store's vote.
pub(super) fn vote_to(vote: &Vote<u64>) -> codec::Vote {
    codec::Vote {
        term: vote.leader_id.term,
        node: vote.leader_id.node_id,
        committed: vote.committed,
    }
}

/// openraft's vote.
pub(super) fn vote_from(vote: codec::Vote) -> Vote<u64> {
    if vote.committed {
        Vote::new_committed(vote.term, vote.node)
    } else {
        Vote::new(vote.term, vote.node)
    }
}

/// The store's membership.
pub(super) fn membership_to(membership: &Membership<u64, BasicNode>) -> codec::Membership {
    codec::Membership {
        configs: membership
            .get_joint_config()
            .iter()
            .map(|config| config.iter().copied().collect())
            .collect(),
        nodes: membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect(),
    }
}

/// openraft's membership.
pub(super) fn membership_from(membership: &codec::Membership) -> Membership<u64, BasicNode> {
    let configs: Vec<BTreeSet<u64>> = membership
        .configs
        .iter()
        .map(|config| config.iter().copied().collect())
        .collect();
    let nodes: BTreeMap<u64, BasicNode> = membership
        .nodes
        .iter()
        .map(|(id, address)| (*id, BasicNode::new(address)))
        .collect();
    Membership::new(configs, nodes)
}
