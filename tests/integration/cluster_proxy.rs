//! `[cluster] client_routing = "proxy"`: a follower keeps its clients' plain AMQP
//! connections and carries their commands to the leader's entities; when the leader dies,
//! a receiver attached through the follower is detached with `amqp:link:detach-forced`
//! (which the SDKs answer by attaching again), and the same follower serves the new leader's
//! entities.

use super::*;

/// Every node's `[cluster]` table and entities: proxying, a queue and a topic with a
/// subscription.
const PROXIED: &str = "client_routing = \"proxy\"\n[[queues]]\nname = \"orders\"\n\
[[topics]]\nname = \"events\"\n[[topics.subscriptions]]\nname = \"all\"\n";

/// The value of the counter `name` in `node`'s `/metrics` (0 when it is not there).
fn counter(node: &Node, name: &str) -> f64 {
    metric(node, name).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_clients_are_served_there_and_reach_the_leaders_entities() {
    let mut cluster = Cluster::start(PROXIED);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let through = cluster.node(follower).address();

    // A queue and a topic, through the follower.
    send(through, "orders", &["one", "two", "three"]).await;
    send(through, "events", &["fanned"]).await;
    let fanned = receive_some(through, "events/Subscriptions/all", 1, true).await;
    assert!(fanned[0].contains("fanned"), "{fanned:?}");
    let first = receive_some(through, "orders", 1, false).await;
    assert!(first[0].contains("one"), "{first:?}");
    // Served there: no connection was forwarded, the follower counted its own.
    assert_eq!(
        counter(
            cluster.node(follower),
            "ferrobus_cluster_forwarded_connections_total"
        ),
        0.0
    );
    assert!(counter(cluster.node(follower), "ferrobus_connections_total") >= 4.0);
    // Their commands crossed: counted on both sides (reported each second).
    let deadline = Instant::now() + PATIENCE;
    while counter(
        cluster.node(follower),
        "ferrobus_cluster_proxied_commands_total",
    ) < 4.0
        || counter(
            cluster.node(leader),
            "ferrobus_cluster_served_commands_total",
        ) < 4.0
    {
        assert!(
            Instant::now() < deadline,
            "the proxied commands are not counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        counter(
            cluster.node(leader),
            "ferrobus_cluster_proxied_commands_total"
        ),
        0.0,
        "the leader carries nothing elsewhere"
    );
    // What the leader stored is what its own clients see.
    let peeked = receive_some(cluster.node(leader).address(), "orders", 1, false).await;
    assert!(peeked[0].contains("two"), "{peeked:?}");

    // A receiver attached through the follower while the leader is killed is detached with
    // detach-forced; attached again, it gets what is left from the new leader.
    let (mut connection, mut session) = connect(through).await;
    let mut receiver = Receiver::attach(&mut session, "across", "orders")
        .await
        .expect("a receiver attaches");
    cluster.node_mut(leader).kill();
    let detached = tokio::time::timeout(
        PATIENCE,
        receiver.recv::<fe2o3_amqp::types::primitives::Value>(),
    )
    .await;
    let text = format!("{detached:?}");
    assert!(
        text.contains("LinkError(DetachForced)") && text.contains("moved to another node"),
        "the receiver is detached with amqp:link:detach-forced: {text}"
    );
    let _ = connection.close().await;
    let next = tokio::task::block_in_place(|| cluster.leader(&[leader]));
    assert_ne!(next, leader);
    let rest = receive_some_patiently(cluster.node(follower).address(), "orders", 1).await;
    assert!(rest[0].contains("three"), "{rest:?}");
    send_until_acknowledged(&cluster, "orders", "after").await;
}

/// Receives `count` messages of `queue` through `address`, attaching again while the node
/// answers that the entity is not reachable yet (a leader being elected).
async fn receive_some_patiently(address: SocketAddr, queue: &str, count: usize) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let received = receive_some(address, queue, count, false).await;
        if received.len() == count {
            return received;
        }
        assert!(
            Instant::now() < deadline,
            "{count} messages not received through {address}: {received:?}"
        );
    }
}
