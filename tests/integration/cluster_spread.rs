//! `[cluster] placement = "spread"`: each queue's (and each topic's) group has its own
//! leader, the first one the member `preferred_leader` names, so leaders spread over the
//! nodes; every node serves every client itself, and commands cross to the group's leader.
//! When one node is killed with `-9`, the groups it led are elected elsewhere, the others
//! keep their leaders, and every acknowledged message is received (rule DUR-1), through any
//! node.

use std::collections::BTreeMap;

use super::*;

/// Six queues and a topic with a subscription, spread.
const SPREAD: &str = "placement = \"spread\"\n\
[[queues]]\nname = \"q0\"\n[[queues]]\nname = \"q1\"\n[[queues]]\nname = \"q2\"\n\
[[queues]]\nname = \"q3\"\n[[queues]]\nname = \"q4\"\n[[queues]]\nname = \"q5\"\n\
[[topics]]\nname = \"events\"\n[[topics.subscriptions]]\nname = \"all\"\n";

const QUEUES: [&str; 6] = ["q0", "q1", "q2", "q3", "q4", "q5"];

/// Each group's leader as every running node (but those in `except`) reports it, once they
/// all agree on one for each of `groups` that is not in `except`.
fn group_leaders(cluster: &Cluster, groups: &[&str], except: &[u64]) -> BTreeMap<String, u64> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let views: Vec<Value> = cluster
            .nodes
            .iter()
            .filter(|node| node.child.is_some() && !except.contains(&node.id))
            .filter_map(Node::health)
            .map(|(_, view)| view["cluster"]["group_leaders"].clone())
            .collect();
        let agreed = views.len() >= 2
            && views.iter().all(|view| *view == views[0])
            && groups.iter().all(|group| {
                views[0][*group]
                    .as_u64()
                    .is_some_and(|leader| !except.contains(&leader))
            });
        if agreed {
            return groups
                .iter()
                .map(|group| (group.to_string(), views[0][*group].as_u64().unwrap_or(0)))
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "the nodes do not agree on the groups' leaders: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_spread_over_the_nodes_and_a_killed_nodes_groups_move() {
    let mut cluster = Cluster::start(SPREAD);
    let mut groups: Vec<&str> = QUEUES.to_vec();
    groups.push("events");
    let leaders = tokio::task::block_in_place(|| group_leaders(&cluster, &groups, &[]));
    // The first leaders are the members `preferred_leader` names.
    for (group, leader) in &leaders {
        assert_eq!(
            Some(*leader),
            ferrobus::cluster::preferred_leader(group, [1, 2, 3]),
            "group {group}: {leaders:?}"
        );
    }
    let distinct: std::collections::BTreeSet<u64> = leaders.values().copied().collect();
    assert!(distinct.len() >= 2, "leaders spread: {leaders:?}");

    // Every queue through every node: each message sent through one node and received
    // through the next; the topic's copy through a third.
    for (index, queue) in QUEUES.iter().enumerate() {
        let into = cluster.node(1 + index as u64 % 3).address();
        let out_of = cluster.node(1 + (index as u64 + 1) % 3).address();
        send(into, queue, &["first", "second"]).await;
        let first = receive_some(out_of, queue, 1, false).await;
        assert_eq!(first, ["first"], "{queue}");
    }
    send(cluster.node(1).address(), "events", &["fanned"]).await;
    let fanned = receive_some(
        cluster.node(2).address(),
        "events/Subscriptions/all",
        1,
        true,
    )
    .await;
    assert_eq!(fanned, ["fanned"]);
    // Nothing was forwarded: each node served its own clients.
    for id in 1..=3 {
        assert_eq!(
            metric(
                cluster.node(id),
                "ferrobus_cluster_forwarded_connections_total"
            )
            .unwrap_or(0.0),
            0.0,
            "node {id}"
        );
    }

    // A queue created at run time through a node that does not lead the metadata group (the
    // request is relayed to the node that does): every node serves it.
    let metadata = cluster
        .node(1)
        .health()
        .and_then(|(_, view)| view["cluster"]["leader"].as_u64())
        .expect("a metadata leader");
    let through = (1..=3).find(|id| *id != metadata).expect("another node");
    let connection = format!("Endpoint=sb://{}", cluster.node(through).address());
    let created = Command::new(BINARY)
        .args([
            "queue",
            "create",
            "made",
            "--connection-string",
            &connection,
        ])
        .output()
        .expect("the CLI runs");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let others: Vec<u64> = (1..=3).filter(|id| *id != through).collect();
    send_until_known(cluster.node(others[0]).address(), "made", "kept").await;
    let kept = receive_some(cluster.node(others[1]).address(), "made", 1, true).await;
    assert_eq!(kept, ["kept"]);

    // The node that leads q0 is killed: its groups are elected elsewhere, the others keep
    // their leaders, and every queue's second message is there, through any node.
    let victim = leaders["q0"];
    cluster.node_mut(victim).kill();
    let after = tokio::task::block_in_place(|| group_leaders(&cluster, &groups, &[victim]));
    for (group, leader) in &leaders {
        if *leader != victim {
            assert_eq!(
                after[group], *leader,
                "group {group} kept its leader: {after:?}"
            );
        }
    }
    let alive: Vec<u64> = (1..=3).filter(|id| *id != victim).collect();
    for (index, queue) in QUEUES.iter().enumerate() {
        let through = cluster.node(alive[index % 2]).address();
        let rest = receive_some(through, queue, 1, true).await;
        assert_eq!(rest, ["second"], "{queue} after node {victim}'s kill");
    }
    send_until_acknowledged(&cluster, "q0", "after").await;
    let after_kill = receive_some(cluster.node(alive[1]).address(), "q0", 1, true).await;
    assert_eq!(after_kill, ["after"]);
}

/// Sends `body` to `queue` through `address` once the node knows the queue (a node applies
/// an entity's creation a few milliseconds after the node that made it).
async fn send_until_known(address: SocketAddr, queue: &str, body: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let sent = tokio::time::timeout(Duration::from_secs(5), async {
            let (mut connection, mut session) = connect(address).await;
            let mut sender = Sender::attach(&mut session, "sender", queue).await.ok()?;
            let outcome = sender.send(body.to_string()).await.ok()?;
            outcome.accepted_or_else(|_| ()).ok()?;
            sender.close().await.ok();
            session.end().await.ok();
            connection.close().await.ok();
            Some(())
        })
        .await;
        if let Ok(Some(())) = sent {
            return;
        }
        assert!(Instant::now() < deadline, "{body} was never acknowledged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
