//! Three members in one process, each entity's group a Raft group of its own
//! ([`GroupLayout::PerEntity`]): each group is led first by its preferred member, so the
//! leaders spread; the group-level member calls (confirming a leadership, replaying a
//! group, handing one group over) act on one group and leave the others alone; a stopped
//! member's groups are led by the others.

use std::collections::BTreeMap;

use super::cluster_tests::{Node, PATIENCE, SECRET, close, published, three, write_through_leader};
use super::*;
use crate::store::storage::test_support::counters;

/// The groups these tests run.
const GROUPS: [&str; 9] = ["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"];

/// Three members running every group of [`GROUPS`], once each member knows a leader for
/// each; with the leaderships node 1 knows.
async fn spread(name: &str) -> (Vec<Node>, BTreeMap<String, Leadership>) {
    let nodes = three(name, [SECRET; 3]).await;
    for node in &nodes {
        for group in GROUPS {
            node.log.start_group(group).await.expect("starts");
        }
    }
    let mut seen = Vec::new();
    for node in &nodes {
        let mut leaders = node.log.leaders();
        let known = tokio::time::timeout(
            PATIENCE,
            leaders.wait_for(|leaders| GROUPS.iter().all(|group| leaders.contains_key(*group))),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "node {} knows leaders of {:?} only",
                node.id,
                node.log.leaders().borrow()
            )
        })
        .expect("the node runs")
        .clone();
        seen.push(known);
    }
    for (node, known) in nodes.iter().zip(&seen).skip(1) {
        for group in GROUPS {
            assert_eq!(
                known[group].node, seen[0][group].node,
                "node {} and node 1 agree on {group}'s leader",
                node.id
            );
        }
    }
    (nodes, seen.swap_remove(0))
}

fn node(nodes: &[Node], id: u64) -> &Node {
    nodes.iter().find(|node| node.id == id).expect("a member")
}

async fn close_all(nodes: &[Node]) {
    for node in nodes {
        close(node).await;
    }
}

/// Every group is led by its preferred member (not by the lowest id, as a cluster's
/// metadata group is): the leaders spread over the three.
#[tokio::test]
async fn each_group_is_led_first_by_its_preferred_member() {
    let (nodes, leaders) = spread("spread-preferred").await;
    let led: BTreeMap<&str, u64> = GROUPS
        .iter()
        .map(|group| (*group, leaders[*group].node))
        .collect();
    let preferred: BTreeMap<&str, u64> = GROUPS
        .iter()
        .map(|group| (*group, preferred_leader(group, [1, 2, 3]).expect("voters")))
        .collect();
    assert_eq!(led, preferred);
    let distinct: std::collections::BTreeSet<u64> = preferred.values().copied().collect();
    assert!(distinct.len() > 1, "the groups spread: {preferred:?}");
    close_all(&nodes).await;
}

/// The leader confirms its current leadership; a stale term, or a leadership of another
/// node, is refused at once.
#[tokio::test]
async fn confirm_leadership_holds_for_the_current_leadership_only() {
    let (nodes, leaders) = spread("spread-confirm").await;
    let leadership = leaders["g0"];
    let leader = node(&nodes, leadership.node);
    let follower = nodes
        .iter()
        .find(|node| node.id != leadership.node)
        .expect("two");
    let confirm = |node: &Node, leadership: Leadership| {
        let log = node.log.clone();
        async move {
            tokio::time::timeout(PATIENCE, log.confirm_leadership("g0", leadership))
                .await
                .expect("answers in time")
        }
    };
    assert!(confirm(leader, leadership).await, "the leader confirms");
    let stale = Leadership {
        term: leadership.term - 1,
        ..leadership
    };
    assert!(!confirm(leader, stale).await, "a stale term is refused");
    assert!(
        !confirm(follower, leadership).await,
        "a follower does not confirm the leader's leadership"
    );
    let claimed = Leadership {
        node: follower.id,
        ..leadership
    };
    assert!(
        !confirm(follower, claimed).await,
        "a follower does not lead"
    );
    assert!(
        !tokio::time::timeout(
            PATIENCE,
            leader.log.confirm_leadership("not-running", leadership)
        )
        .await
        .expect("answers in time"),
        "a group that does not run here is not led"
    );
    close_all(&nodes).await;
}

/// A group's leader replays what was written through it, and only that group's entities.
#[tokio::test]
async fn replay_entities_gives_what_the_group_holds() {
    let (nodes, _) = spread("spread-replay").await;
    let all: Vec<&Node> = nodes.iter().collect();
    let mut leader = 0;
    for value in [1, 2, 3] {
        leader = write_through_leader(&all, "g3", value).await;
    }
    write_through_leader(&all, "g4", 40).await;
    let replayed = node(&nodes, leader)
        .log
        .replay_entities("g3")
        .expect("replays");
    assert_eq!(
        replayed.get("g3").map(|changes| counters(changes)),
        Some(vec![1, 2, 3])
    );
    assert!(!replayed.contains_key("g4"), "{:?}", replayed.keys());
    close_all(&nodes).await;
}

/// A group handed to a named member is led by it on every member; the other groups keep
/// their leaderships. Only the group's leader can hand it over.
#[tokio::test]
async fn transfer_group_moves_one_groups_leadership() {
    let (nodes, before) = spread("spread-transfer").await;
    let from = before["g5"].node;
    let to = from % 3 + 1;
    let refused = node(&nodes, to)
        .log
        .transfer_group("g5", from, PATIENCE)
        .await;
    assert!(refused.is_err(), "a follower cannot hand it over");
    let moved = node(&nodes, from)
        .log
        .transfer_group("g5", to, PATIENCE)
        .await
        .expect("handed over");
    assert_eq!(moved, to);
    for node in &nodes {
        published(node, "g5", |leadership| leadership.node == to).await;
    }
    let after = nodes[0].log.leaders().borrow().clone();
    for group in GROUPS.iter().filter(|group| **group != "g5") {
        assert_eq!(after[*group], before[*group], "{group} kept its leadership");
    }
    close_all(&nodes).await;
}

/// A member that is stopping (`refuse_leadership`) is not handed a group: the transfer to
/// it fails, the leadership stays, and another member still takes it.
#[tokio::test]
async fn a_stopping_member_takes_no_leadership_handed_to_it() {
    let (nodes, before) = spread("spread-leaving").await;
    let from = before["g4"].node;
    let leaving = from % 3 + 1;
    let other = leaving % 3 + 1;
    node(&nodes, leaving).log.refuse_leadership();
    let refused = node(&nodes, from)
        .log
        .transfer_group("g4", leaving, Duration::from_secs(2))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_ne!(
        nodes[0]
            .log
            .leaders()
            .borrow()
            .get("g4")
            .map(|leadership| leadership.node),
        Some(leaving)
    );
    let moved = node(&nodes, from)
        .log
        .transfer_group("g4", other, PATIENCE)
        .await
        .expect("handed to a member that is not stopping");
    assert_eq!(moved, other);
    close_all(&nodes).await;
}

/// A member that handed a group over stands for its elections again: after the group
/// moved 1 → 2 → 3 (or the like) and its last leader stops, the two that handed it over
/// elect one of them.
#[tokio::test]
async fn a_member_that_handed_a_group_over_stands_for_election_again() {
    let (nodes, before) = spread("spread-electable").await;
    let first = before["g6"].node;
    let second = first % 3 + 1;
    let third = second % 3 + 1;
    node(&nodes, first)
        .log
        .transfer_group("g6", second, PATIENCE)
        .await
        .expect("handed to the second");
    published(node(&nodes, second), "g6", |leadership| {
        leadership.node == second
    })
    .await;
    node(&nodes, second)
        .log
        .transfer_group("g6", third, PATIENCE)
        .await
        .expect("handed to the third");
    let handed = published(node(&nodes, third), "g6", |leadership| {
        leadership.node == third
    })
    .await;
    close(node(&nodes, third)).await;
    for id in [first, second] {
        published(node(&nodes, id), "g6", |leadership| {
            leadership.node != third && leadership.term > handed.term
        })
        .await;
    }
    for id in [first, second] {
        close(node(&nodes, id)).await;
    }
}

/// When a member stops, the other two elect a leader for each group it led; the groups
/// they led keep their leaderships.
#[tokio::test]
async fn the_others_elect_leaders_for_a_stopped_members_groups() {
    let (nodes, before) = spread("spread-failover").await;
    let stopped = (1..=3u64)
        .max_by_key(|id| {
            GROUPS
                .iter()
                .filter(|group| before[**group].node == *id)
                .count()
        })
        .expect("three");
    let orphaned: Vec<&str> = GROUPS
        .iter()
        .copied()
        .filter(|group| before[*group].node == stopped)
        .collect();
    assert!(!orphaned.is_empty());
    close(node(&nodes, stopped)).await;
    let survivors: Vec<&Node> = nodes.iter().filter(|node| node.id != stopped).collect();
    for survivor in &survivors {
        for group in &orphaned {
            published(survivor, group, |leadership| {
                leadership.node != stopped && leadership.term > before[*group].term
            })
            .await;
        }
    }
    let after = survivors[0].log.leaders().borrow().clone();
    for group in GROUPS.iter().filter(|group| !orphaned.contains(group)) {
        assert_eq!(after[*group], before[*group], "{group} kept its leadership");
    }
    for survivor in survivors {
        close(survivor).await;
    }
}
