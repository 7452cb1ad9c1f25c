//! Three members in one process: groups replicated over the peer transport onto three
//! nodes' logs, a new leader after the leader stops, a follower that comes back catching
//! up, peers without the cluster's secret or with another node's identity refused, frames
//! over the limit and stalled or silent connections closed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::broker::leadership::Leadership;
use crate::config::ClusterMember;
use crate::store::storage::StorageOptions;
use crate::store::storage::test_support::{counters, next, scratch};

pub(super) const SECRET: &[u8] = b"the cluster's secret";

/// How long any wait of these tests may take before it fails.
pub(super) const PATIENCE: Duration = Duration::from_secs(20);

pub(super) struct Node {
    pub(super) id: u64,
    address: String,
    directory: PathBuf,
    pub(super) log: Arc<RaftLog>,
}

/// Starts three members, node `i + 1` with `secrets[i]`, each on its own data directory
/// and its own listener on 127.0.0.1:0.
pub(super) async fn three(name: &str, secrets: [&[u8]; 3]) -> Vec<Node> {
    let mut listeners = Vec::new();
    let mut members = Vec::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("bound").to_string();
        members.push(ClusterMember { id, address });
        listeners.push(listener);
    }
    let mut nodes = Vec::new();
    for (index, listener) in listeners.into_iter().enumerate() {
        let id = index as u64 + 1;
        let address = members[index].address.clone();
        let directory = scratch(&format!("{name}-{id}"));
        let (storage, recovery) = LogStorage::open(member_options(&directory)).expect("opens");
        let settings = ClusterConfig {
            node_id: id,
            address: address.clone(),
            members: members.clone(),
            secret: None,
            join: false,
            ..ClusterConfig::default()
        };
        let log = RaftLog::new_cluster(
            storage,
            &recovery.groups,
            settings,
            secrets[index],
            listener,
        )
        .expect("runs");
        nodes.push(Node {
            id,
            address,
            directory,
            log,
        });
    }
    nodes
}

/// A cluster member's storage options: entries can be read back, and compaction is by
/// snapshots.
fn member_options(directory: &std::path::Path) -> StorageOptions {
    let mut options = StorageOptions::new(directory);
    options.keep_entry_locations = true;
    options.compact_by_snapshots = true;
    options
}

/// The members of `nodes`' cluster.
fn members(nodes: &[Node]) -> Vec<ClusterMember> {
    nodes
        .iter()
        .map(|node| ClusterMember {
            id: node.id,
            address: node.address.clone(),
        })
        .collect()
}

/// Starts `node` again (after [`close`]) on its data directory and its address.
async fn reopen(node: &Node, members: &[ClusterMember]) -> Node {
    let (storage, recovery) = LogStorage::open(member_options(&node.directory)).expect("opens");
    let listener = TcpListener::bind(&node.address).await.expect("binds again");
    let log = RaftLog::new_cluster(
        storage,
        &recovery.groups,
        ClusterConfig {
            node_id: node.id,
            address: node.address.clone(),
            members: members.to_vec(),
            secret: None,
            join: false,
            ..ClusterConfig::default()
        },
        SECRET,
        listener,
    )
    .expect("runs");
    Node {
        id: node.id,
        address: node.address.clone(),
        directory: node.directory.clone(),
        log,
    }
}

pub(super) async fn close(node: &Node) {
    node.log.shutdown().await;
    node.log.storage().close();
}

/// What `node`'s data directory recovers for `entity`.
fn recovered(node: &Node, entity: &str) -> Vec<i64> {
    let (storage, recovery) =
        LogStorage::open(StorageOptions::new(&node.directory)).expect("opens again");
    storage.close();
    recovery
        .entities
        .get(entity)
        .map(|changes| counters(changes))
        .unwrap_or_default()
}

/// Writes `value` to `group` through whichever of `nodes` leads it, again while the
/// leadership moves (a refused write was not proposed); returns the node that took it.
pub(super) async fn write_through_leader(nodes: &[&Node], group: &str, value: i64) -> u64 {
    through_leader(nodes, group, |node| {
        node.log.append(vec![(group.into(), vec![next(value)])])
    })
    .await
}

/// Runs `write` through whichever of `nodes` leads `group` (again, as the leadership
/// moves, while it answers that it does not lead); the id of the node it succeeded on.
async fn through_leader<'a, W>(
    nodes: &[&'a Node],
    group: &str,
    write: impl Fn(&'a Node) -> W,
) -> u64
where
    W: std::future::Future<Output = Result<(), crate::broker::storage::StorageError>>,
{
    let running = nodes[0].log.group(group).await.expect("runs");
    let mut metrics = running.raft.metrics();
    let written = async {
        loop {
            let leader = metrics.borrow_and_update().current_leader;
            if let Some(node) = nodes.iter().find(|node| Some(node.id) == leader) {
                match write(node).await {
                    Ok(()) => return node.id,
                    Err(error) if error.to_string().contains("does not lead") => {}
                    Err(error) => panic!("the write through node {} failed: {error}", node.id),
                }
            }
            metrics.changed().await.expect("the group runs");
        }
    };
    tokio::time::timeout(PATIENCE, written)
        .await
        .expect("written through a leader in time")
}

/// Waits until `node`'s Raft for `group` holds the log up to `index`.
async fn holds(node: &Node, group: &str, index: u64) {
    let running = node.log.group(group).await.expect("runs");
    running
        .raft
        .wait(Some(PATIENCE))
        .metrics(
            |metrics| metrics.last_log_index >= Some(index),
            "the node holds the entry",
        )
        .await
        .unwrap_or_else(|error| panic!("node {} lacks index {index}: {error}", node.id));
}

/// The index of the last entry in `node`'s log of `group`.
fn last_index(node: &Node, group: &str) -> Option<u64> {
    node.log
        .storage()
        .group_log(group)
        .last
        .map(|last| last.index)
}

/// Writes 1 to "orders" through the leader, waits until a follower holds it, and closes
/// that follower: the member that is away while the others go on.
async fn one_away(nodes: &[Node]) -> &Node {
    let all: Vec<&Node> = nodes.iter().collect();
    let leader = write_through_leader(&all, "orders", 1).await;
    let away = nodes.iter().find(|node| node.id != leader).expect("two");
    let index = last_index(&nodes[leader as usize - 1], "orders").expect("written");
    holds(away, "orders", index).await;
    close(away).await;
    away
}

/// Warnings and errors logged while the returned guard lives (the test runs on one
/// thread, so every task it spawns logs here).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .expect("not poisoned")
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn start() -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
    }
}

/// A write through a group's leader commits, and every member's log holds it: each data
/// directory, opened again, recovers the write.
#[tokio::test]
async fn a_write_through_the_leader_reaches_all_three_logs() {
    let nodes = three("replicated", [SECRET; 3]).await;
    let all: Vec<&Node> = nodes.iter().collect();
    let leader = write_through_leader(&all, "orders", 7).await;
    let through = &nodes[leader as usize - 1];
    let index = last_index(through, "orders").expect("the leader's log has it");
    for node in &nodes {
        holds(node, "orders", index).await;
    }
    // A follower refuses writes: only the leader proposes.
    let follower = nodes.iter().find(|node| node.id != leader).expect("two");
    let refused = follower
        .log
        .append(vec![("orders".into(), vec![next(8)])])
        .await;
    assert!(refused.is_err(), "a follower does not propose");
    for node in &nodes {
        close(node).await;
    }
    for node in &nodes {
        assert_eq!(
            recovered(node, "orders"),
            vec![7],
            "node {} recovers the write",
            node.id
        );
    }
}

/// Waits until `node` publishes a leader of `group` that `wanted` accepts; returns it.
pub(super) async fn published(
    node: &Node,
    group: &str,
    wanted: impl Fn(Leadership) -> bool,
) -> Leadership {
    let mut leaders = node.log.leaders();
    let seen = tokio::time::timeout(
        PATIENCE,
        leaders.wait_for(|leaders| leaders.get(group).copied().is_some_and(&wanted)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "node {} published {:?} for {group}",
            node.id,
            node.log.leaders().borrow().get(group)
        )
    })
    .expect("the node runs");
    seen[group]
}

/// Every member publishes its groups' leaders: all three agree once a write commits; when
/// the leader stops, its groups leave its list and the other two agree on a new leader in
/// a later term.
#[tokio::test]
async fn members_publish_the_leader_they_agree_on() {
    let nodes = three("leaders", [SECRET; 3]).await;
    let all: Vec<&Node> = nodes.iter().collect();
    let first = write_through_leader(&all, "orders", 1).await;
    let mut agreed = Vec::new();
    for node in &nodes {
        agreed.push(published(node, "orders", |leadership| leadership.node == first).await);
    }
    assert!(
        agreed.windows(2).all(|pair| pair[0] == pair[1]),
        "{agreed:?}"
    );
    let term = agreed[0].term;
    let stopped = &nodes[first as usize - 1];
    close(stopped).await;
    let mut leaders = stopped.log.leaders();
    tokio::time::timeout(
        PATIENCE,
        leaders.wait_for(|leaders| !leaders.contains_key("orders")),
    )
    .await
    .expect("a stopped node's groups leave its list")
    .expect("watched");
    let mut next = Vec::new();
    for node in nodes.iter().filter(|node| node.id != first) {
        next.push(
            published(node, "orders", |leadership| {
                leadership.node != first && leadership.term > term
            })
            .await,
        );
    }
    assert_eq!(next[0], next[1], "the survivors agree");
    for node in nodes.iter().filter(|node| node.id != first) {
        close(node).await;
    }
}

/// With the leader stopped, the other two elect one of them and a write through it
/// commits on both.
#[tokio::test]
async fn the_other_two_elect_a_leader_when_the_leader_stops() {
    let nodes = three("failover", [SECRET; 3]).await;
    let all: Vec<&Node> = nodes.iter().collect();
    let first = write_through_leader(&all, "orders", 1).await;
    close(&nodes[first as usize - 1]).await;

    let survivors: Vec<&Node> = nodes.iter().filter(|node| node.id != first).collect();
    let running = survivors[0].log.group("orders").await.expect("runs");
    let metrics = running
        .raft
        .wait(Some(PATIENCE))
        .metrics(
            |metrics| metrics.current_leader.is_some_and(|leader| leader != first),
            "a new leader",
        )
        .await
        .expect("the survivors elect a leader");
    assert!(metrics.current_leader.is_some_and(|leader| leader != first));
    let second = write_through_leader(&survivors, "orders", 2).await;
    let through = &nodes[second as usize - 1];
    let index = last_index(through, "orders").expect("written");
    for node in &survivors {
        holds(node, "orders", index).await;
    }
    for node in &survivors {
        close(node).await;
    }
    for node in &survivors {
        assert_eq!(recovered(node, "orders"), vec![1, 2], "node {}", node.id);
    }
}

/// The client's half of a peer handshake as a member configured with no entities or keys
/// (as [`RaftLog::new_cluster`]'s are) holding `secret`.
async fn peer_handshake(
    stream: &mut TcpStream,
    node: u64,
    target: u64,
    secret: &[u8],
) -> Result<(), String> {
    peer::connect_handshake(
        stream,
        node,
        target,
        (secret, &peer::definitions(secret, "")),
    )
    .await
}

/// A member without the cluster's secret is refused both ways: its handshake fails, the
/// refusal is logged with its address, and the group goes on without it.
#[tokio::test]
async fn a_peer_without_the_secret_is_refused_and_cannot_join() {
    let (captured, _guard) = Captured::start();
    let nodes = three("refused", [SECRET, SECRET, b"another secret"]).await;
    let members = [&nodes[0], &nodes[1]];
    let leader = write_through_leader(&members, "orders", 5).await;
    let through = &nodes[leader as usize - 1];
    let index = last_index(through, "orders").expect("written");
    holds(&nodes[0], "orders", index).await;
    holds(&nodes[1], "orders", index).await;

    // By hand: the wrong secret's handshake fails against a member.
    let mut stream = TcpStream::connect(&nodes[0].address)
        .await
        .expect("connects");
    let refused = peer_handshake(&mut stream, 3, 1, b"another secret").await;
    assert!(refused.is_err(), "the wrong secret is refused");

    let outsider = &nodes[2];
    assert!(
        last_index(outsider, "orders").is_none_or(|last| last < index),
        "the outsider never received the entry"
    );
    let text = captured.text();
    assert!(
        text.contains("refused a peer connection")
            && text.contains("does not hold the cluster secret"),
        "members log the refusal: {text}"
    );
    assert!(
        text.contains(&format!("peer={}", outsider.address)),
        "a member that cannot join the outsider names its address: {text}"
    );
    for node in &nodes {
        close(node).await;
    }
    assert!(recovered(outsider, "orders").is_empty());
}

/// A frame longer than the limit closes its connection (logged); the node goes on
/// serving.
#[tokio::test]
async fn a_frame_over_the_limit_closes_the_connection() {
    let (captured, _guard) = Captured::start();
    let nodes = three("oversized", [SECRET; 3]).await;
    let mut stream = TcpStream::connect(&nodes[0].address)
        .await
        .expect("connects");
    peer_handshake(&mut stream, 2, 1, SECRET)
        .await
        .expect("the secret is accepted");
    let length = u32::try_from(peer::MAX_FRAME + 1).expect("fits");
    stream.write_all(&length.to_be_bytes()).await.expect("sent");
    stream.write_all(&[0u8; 1024]).await.expect("sent");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest))
        .await
        .expect("the node closes the connection in time");
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "nothing comes back: {read:?}"
    );
    assert!(
        captured.text().contains("a frame over the limit"),
        "logged: {}",
        captured.text()
    );

    // The node still serves its peers.
    let all: Vec<&Node> = nodes.iter().collect();
    write_through_leader(&all, "orders", 1).await;
    for node in &nodes {
        close(node).await;
    }
}

/// Holding the secret is not enough: a node id that is not a member, or is the server's
/// own, is refused by the server; a client that reaches another member than the one it
/// dialed refuses it. Each refusal names the node.
#[tokio::test]
async fn a_peer_that_is_not_the_member_expected_is_refused() {
    let (captured, _guard) = Captured::start();
    let nodes = three("identity", [SECRET; 3]).await;
    let handshake = |node: u64, target: u64| {
        let address = nodes[0].address.clone();
        async move {
            let mut stream = TcpStream::connect(&address).await.expect("connects");
            peer_handshake(&mut stream, node, target, SECRET).await
        }
    };
    let stranger = handshake(9, 1).await.expect_err("a non-member is refused");
    assert!(stranger.contains("refused this node"), "{stranger}");
    let twin = handshake(1, 1)
        .await
        .expect_err("the server's own id is refused");
    assert!(twin.contains("refused this node"), "{twin}");
    let elsewhere = handshake(2, 3).await.expect_err("node 1 is not node 3");
    assert!(
        elsewhere.contains("the peer is node 1, not node 3"),
        "{elsewhere}"
    );
    handshake(2, 1)
        .await
        .expect("a member reaching the member it dialed is accepted");
    let text = captured.text();
    for expected in [
        "node 9 is not a member of this cluster",
        "claims this node's own id 1",
    ] {
        assert!(text.contains(expected), "logged {expected:?}: {text}");
    }
    // The members still replicate.
    let all: Vec<&Node> = nodes.iter().collect();
    write_through_leader(&all, "orders", 1).await;
    for node in &nodes {
        close(node).await;
    }
}

/// Node 1's peer listener on its own (members 1 and 2, no groups) on 127.0.0.1:0, with
/// `definitions` as its entities and keys, `timeouts` (frame, idle) and `commands` as its
/// entity-command hook: its address and task.
async fn lone_listener(
    definitions: &str,
    timeouts: (Duration, Duration),
    commands: peer::CommandsHook,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let address = listener.local_addr().expect("bound");
    let local: peer::Local =
        Arc::new(|_group: String| Box::pin(async { Err("no groups here".to_string()) }));
    let task = peer::serve(
        listener,
        peer::Serving {
            node: 1,
            members: Arc::new(std::sync::RwLock::new([1, 2].into_iter().collect())),
            secret: SECRET.into(),
            definitions: peer::definitions(SECRET, definitions),
            max_frame: peer::MAX_FRAME,
            timeouts,
            local,
            drain: Arc::default(),
            commands,
            leaving: Arc::default(),
        },
    );
    (address, task)
}

/// Holding the secret is not enough either when the two members are configured with other
/// entities or keys: the server refuses the client, both sides say why, and a client
/// configured alike is accepted.
#[tokio::test]
async fn a_peer_configured_with_other_entities_is_refused() {
    let (captured, _guard) = Captured::start();
    let ours = "[[queues]]\nname = \"orders\"\n";
    let (address, task) = lone_listener(
        ours,
        (peer::FRAME_TIMEOUT, peer::IDLE_TIMEOUT),
        Arc::default(),
    )
    .await;
    let greet = |text: &'static str| async move {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        let definitions = peer::definitions(SECRET, text);
        peer::connect_handshake(&mut stream, 2, 1, (SECRET, &definitions)).await
    };
    let refused = greet("[[queues]]\nname = \"payments\"\n")
        .await
        .expect_err("other entities are refused");
    assert!(
        refused.contains("node 1 refused this node: it is configured with other entities or keys")
            && refused.contains("[[auth.keys]]"),
        "{refused}"
    );
    greet(ours).await.expect("the same entities are accepted");
    let text = captured.text();
    assert!(
        text.contains("refused a peer connection")
            && text.contains("node 2 is configured with other entities or keys than this node"),
        "the server logs why: {text}"
    );
    task.abort();
}

/// A peer's entity-command connection passes the same handshake as Raft traffic, then is
/// handed whole to the node's commands hook with the peer's id; a node without one closes
/// it and says why, and one without the secret never gets that far.
#[tokio::test]
async fn an_entity_command_connection_is_handed_to_the_commands_hook() {
    let (captured, _guard) = Captured::start();
    let commands: peer::CommandsHook = Arc::default();
    let (address, task) = lone_listener(
        "",
        (peer::FRAME_TIMEOUT, peer::IDLE_TIMEOUT),
        commands.clone(),
    )
    .await;
    let address = address.to_string();
    let peers = |secret: &[u8]| {
        peer::Peers::new(
            2,
            (secret.into(), peer::definitions(secret, "")),
            peer::MAX_FRAME,
        )
    };

    // No hook yet: the connection is accepted, then closed.
    let mut unserved = peers(SECRET)
        .commands_stream(1, &address)
        .await
        .expect("the handshake succeeds");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, unserved.read_to_end(&mut rest))
        .await
        .expect("closed in time");
    assert!(matches!(read, Ok(0)) || read.is_err(), "{read:?}");
    assert!(
        captured.text().contains("this node runs no entities"),
        "{}",
        captured.text()
    );

    // With a hook: it gets the stream and the peer's id (here it echoes what it reads).
    let (seen, mut peers_seen) = tokio::sync::mpsc::unbounded_channel();
    *commands.write().expect("hook") = Some(Arc::new(move |mut stream: TcpStream, node| {
        let _ = seen.send(node);
        tokio::spawn(async move {
            let (mut reader, mut writer) = stream.split();
            let _ = tokio::io::copy(&mut reader, &mut writer).await;
        });
    }));
    let mut served = peers(SECRET)
        .commands_stream(1, &address)
        .await
        .expect("the handshake succeeds");
    served.write_all(b"commands").await.expect("sent");
    let mut echoed = [0u8; 8];
    tokio::time::timeout(PATIENCE, served.read_exact(&mut echoed))
        .await
        .expect("in time")
        .expect("echoed");
    assert_eq!(&echoed, b"commands");
    assert_eq!(peers_seen.recv().await, Some(2));

    // The wrong secret is refused before the hook sees anything.
    let refused = peers(b"another secret").commands_stream(1, &address).await;
    assert!(
        refused.as_ref().is_err_and(|why| why.contains("handshake")),
        "{refused:?}"
    );
    assert!(peers_seen.try_recv().is_err(), "the hook saw no other peer");
    task.abort();
}

/// A served connection that stalls in the middle of a frame, or sends no frame at all, is
/// closed after its timeout (logged), so a stalled or paused peer gives its slot back.
#[tokio::test]
async fn a_stalled_or_silent_peer_connection_is_closed() {
    let (captured, _guard) = Captured::start();
    let (address, task) = lone_listener(
        "",
        (Duration::from_millis(200), Duration::from_millis(600)),
        Arc::default(),
    )
    .await;
    // A frame's length, then only part of its body.
    let mut stalled = TcpStream::connect(address).await.expect("connects");
    peer_handshake(&mut stalled, 2, 1, SECRET)
        .await
        .expect("accepted");
    stalled
        .write_all(&100u32.to_be_bytes())
        .await
        .expect("sent");
    stalled.write_all(&[0u8; 10]).await.expect("sent");
    // Nothing at all after the handshake.
    let mut silent = TcpStream::connect(address).await.expect("connects");
    peer_handshake(&mut silent, 2, 1, SECRET)
        .await
        .expect("accepted");
    for stream in [&mut stalled, &mut silent] {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest))
            .await
            .expect("the node closes the connection in time");
        assert!(
            matches!(read, Ok(0)) || read.is_err(),
            "nothing comes back: {read:?}"
        );
    }
    let text = captured.text();
    assert!(
        text.contains("a frame's body did not arrive within 200ms"),
        "logged: {text}"
    );
    assert!(text.contains("no frame for 600ms"), "logged: {text}");
    task.abort();
}

/// An entry's records cross the wire in the store's encoding and come back the same.
#[test]
fn a_turns_records_cross_the_wire_unchanged() {
    let turn = types::Turn(Arc::new(vec![
        LogRecord::Changes {
            entity: "orders".into(),
            changes: vec![next(1), next(2)],
        },
        LogRecord::Dropped {
            entity: "gone".into(),
        },
    ]));
    let mut bytes = Vec::new();
    ciborium::into_writer(&turn, &mut bytes).expect("encodes");
    let back: types::Turn = ciborium::from_reader(&bytes[..]).expect("decodes");
    assert_eq!(format!("{back:?}"), format!("{turn:?}"));
    let mut cut = bytes.clone();
    cut.truncate(bytes.len() - 3);
    assert!(ciborium::from_reader::<types::Turn, _>(&cut[..]).is_err());
}

/// A member that was away while its group wrote, and whose peers have restarted since (so
/// none holds those entries in memory), is sent them read back from the leader's log: it
/// recovers every write, not blank entries in their place.
#[tokio::test]
async fn entries_a_member_lacks_are_read_back_from_the_log() {
    let nodes = three("read-back", [SECRET; 3]).await;
    let away = one_away(&nodes).await;
    let others: Vec<&Node> = nodes.iter().filter(|node| node.id != away.id).collect();
    write_through_leader(&others, "orders", 2).await;
    write_through_leader(&others, "orders", 3).await;
    for node in &others {
        close(node).await;
    }
    let members = members(&nodes);
    let mut restarted = Vec::new();
    for node in &others {
        restarted.push(reopen(node, &members).await);
    }
    let back = reopen(away, &members).await;
    let running: Vec<&Node> = restarted.iter().collect();
    let leading = write_through_leader(&running, "orders", 4).await;
    let through = restarted
        .iter()
        .find(|node| node.id == leading)
        .expect("a restarted node leads");
    let index = last_index(through, "orders").expect("written");
    holds(&back, "orders", index).await;
    close(&back).await;
    for node in &restarted {
        close(node).await;
    }
    assert_eq!(recovered(&back, "orders"), vec![1, 2, 3, 4]);
}

/// A follower that stops and comes back on its data directory catches up on what was
/// committed without it: its leader kept those entries for it.
#[tokio::test]
async fn a_follower_that_comes_back_catches_up() {
    let nodes = three("comeback", [SECRET; 3]).await;
    let all: Vec<&Node> = nodes.iter().collect();
    let leader = write_through_leader(&all, "orders", 1).await;
    let follower = nodes.iter().find(|node| node.id != leader).expect("two");
    let index = last_index(&nodes[leader as usize - 1], "orders").expect("written");
    holds(follower, "orders", index).await;
    close(follower).await;
    let others: Vec<&Node> = nodes.iter().filter(|node| node.id != follower.id).collect();
    write_through_leader(&others, "orders", 2).await;
    write_through_leader(&others, "orders", 3).await;
    let back = reopen(follower, &members(&nodes)).await;
    let leading = write_through_leader(&others, "orders", 4).await;
    let index = last_index(&nodes[leading as usize - 1], "orders").expect("written");
    holds(&back, "orders", index).await;
    close(&back).await;
    for node in &others {
        close(node).await;
    }
    assert_eq!(recovered(&back, "orders"), vec![1, 2, 3, 4]);
}

/// Waits until `node` finished `rounds` compaction rounds.
async fn compacted(node: &Node, rounds: u64) {
    let storage = node.log.storage().clone();
    let done = async {
        while storage.compactions() < rounds {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PATIENCE, done)
        .await
        .unwrap_or_else(|_| panic!("node {} did not finish its compaction", node.id));
}

/// What `node`'s data directory replays for `entity`'s group: its snapshot, then the log
/// after it (what a member that takes over serves).
fn replayed(node: &Node, entity: &str) -> Vec<i64> {
    let (storage, _) = LogStorage::open(member_options(&node.directory)).expect("opens again");
    let replayed = storage.replay_group(group_of(entity)).expect("replays");
    storage.close();
    replayed
        .get(entity)
        .map(|changes| counters(changes))
        .unwrap_or_default()
}

/// A compaction round on a member snapshots the group, purges its log and deletes the
/// older segments; a member that was away and lacks the purged entries is sent the
/// snapshot, installs it, and replays the same state as the others, also after a restart.
#[tokio::test]
async fn a_member_behind_a_compaction_is_sent_the_snapshot() {
    let nodes = three("snapshot", [SECRET; 3]).await;
    let away = one_away(&nodes).await;
    let others: Vec<&Node> = nodes.iter().filter(|node| node.id != away.id).collect();
    write_through_leader(&others, "orders", 2).await;
    let leading = write_through_leader(&others, "orders", 3).await;
    let index = last_index(&nodes[leading as usize - 1], "orders").expect("written");
    for node in &others {
        holds(node, "orders", index).await;
        let segments = |node: &Node| {
            node.log
                .storage()
                .log()
                .statistics()
                .segments
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let before = segments(node);
        // A round whose group could not be purged past its start in time (a loaded
        // machine) keeps its segments for the next one: at most three rounds.
        for round in 1..=3 {
            node.log.storage().compact().await.expect("a round starts");
            compacted(node, round).await;
            if segments(node) < before + 1 {
                break;
            }
        }
        let log = node.log.storage().group_log(group_of("orders"));
        assert!(
            log.purged.is_some_and(|purged| purged.index >= index),
            "node {}'s log is purged up to the round's start: {:?}",
            node.id,
            log.purged
        );
        assert!(
            segments(node) < before + 1,
            "node {}'s older segments were deleted ({before} before the round's new one, {} after)",
            node.id,
            segments(node)
        );
        assert!(
            node.log
                .snapshot_stats()
                .built
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        );
    }
    write_through_leader(&others, "orders", 4).await;
    let back = reopen(away, &members(&nodes)).await;
    let leading = write_through_leader(&others, "orders", 5).await;
    let index = last_index(&nodes[leading as usize - 1], "orders").expect("written");
    holds(&back, "orders", index).await;
    assert_eq!(
        back.log
            .snapshot_stats()
            .installed
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the member that was away installed the leader's snapshot"
    );
    close(&back).await;
    for node in &others {
        close(node).await;
    }
    for node in [&back, others[0], others[1]] {
        assert_eq!(
            replayed(node, "orders"),
            vec![1, 2, 3, 4, 5],
            "node {} replays the whole history",
            node.id
        );
    }
}

/// A checkpoint in a cluster is written in entries bounded like any other (a whole
/// checkpoint in one entry, megabytes, outlasted every AppendEntries request's timeout and
/// held the leader's writes for minutes), and every member replays it whole.
#[tokio::test]
async fn a_large_checkpoint_is_written_in_bounded_entries() {
    let nodes = three("checkpoint-parts", [SECRET; 3]).await;
    let all: Vec<&Node> = nodes.iter().collect();
    let leader = write_through_leader(&all, "orders", -1).await;
    let leading = &nodes[leader as usize - 1];
    let before = last_index(leading, "orders").expect("written");
    let values: Vec<i64> = (0..10_000).collect();
    leading
        .log
        .checkpoint("orders", 1, values.iter().copied().map(next).collect())
        .await
        .expect("the checkpoint is committed");
    let last = last_index(leading, "orders").expect("written");
    let entries = leading
        .log
        .storage()
        .read_entries(group_of("orders"), before + 1, last + 1)
        .expect("reads back");
    let parts: Vec<usize> = entries
        .iter()
        .filter_map(|(_, payload)| match payload {
            crate::store::codec::Payload::Records(records) => Some(
                records
                    .iter()
                    .map(|record| match record {
                        LogRecord::Checkpoint { changes, .. } => changes.len(),
                        _ => 0,
                    })
                    .sum(),
            ),
            _ => None,
        })
        .collect();
    assert!(
        parts.len() >= 4 && parts.iter().all(|changes| *changes <= 2048),
        "changes per entry: {parts:?}"
    );
    assert_eq!(parts.iter().sum::<usize>(), values.len());
    for node in &nodes {
        holds(node, "orders", last).await;
    }
    for node in &nodes {
        close(node).await;
    }
    for node in &nodes {
        assert_eq!(replayed(node, "orders"), values, "node {}", node.id);
    }
}

/// A node added that never receives the log (it does not run) is not made a voter: the
/// request fails naming it and it stays a learner. (openraft's own wait counts a learner
/// within 5,000 entries of the leader as caught up, one that never answered too.)
#[tokio::test]
async fn a_node_added_that_never_catches_up_gets_no_vote() {
    let nodes = three("add-absent", [SECRET; 3]).await;
    let all: Vec<&Node> = nodes.iter().collect();
    let leader = write_through_leader(&all, METADATA_GROUP, 1).await;
    let leading = &nodes[leader as usize - 1];
    let absent = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let address = absent.local_addr().expect("bound").to_string();
    drop(absent);
    let error = leading
        .log
        .add_member(4, &address, Duration::from_millis(800))
        .await
        .expect_err("a node that does not run is not added");
    assert!(error.contains("did not receive the log"), "{error}");
    let view = leading.log.member_view().expect("runs");
    assert_eq!(view.voters, vec![1, 2, 3]);
    assert_eq!(view.learners, vec![4]);
    for node in &nodes {
        close(node).await;
    }
}

/// Writes `text` as the namespace's run-time changes through the metadata group's leader
/// among `nodes`; its id.
async fn save_through_leader(nodes: &[&Node], text: &str) -> u64 {
    through_leader(nodes, METADATA_GROUP, |node| {
        node.log.save_namespace(text.to_string())
    })
    .await
}

/// Waits until `node` has applied `text` as the namespace's run-time changes.
async fn knows_namespace(node: &Node, text: &str) {
    node.log.group(METADATA_GROUP).await.expect("runs");
    let mut view = node.log.applied_namespace();
    tokio::time::timeout(
        PATIENCE,
        view.wait_for(|known| known.as_deref() == Some(text)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "node {} knows {:?}, not {text:?}",
            node.id,
            node.log.applied_namespace().borrow().as_deref()
        )
    })
    .expect("the view lives");
}

/// Every member knows the namespace's run-time changes as they are committed, not only the
/// leader: from the entries it applies, from the snapshot a leader sends it after a
/// compaction, and from its own snapshot when it starts again.
#[tokio::test]
async fn every_member_knows_the_namespace_as_committed() {
    let nodes = three("namespace-view", [SECRET; 3]).await;
    let all: Vec<&Node> = nodes.iter().collect();
    save_through_leader(&all, "[[queues]]\nname = \"first\"\n").await;
    for node in &nodes {
        knows_namespace(node, "[[queues]]\nname = \"first\"\n").await;
    }

    // One member away while the others save again and compact past it.
    let away = one_away(&nodes).await;
    let others: Vec<&Node> = nodes.iter().filter(|node| node.id != away.id).collect();
    let second = "[[queues]]\nname = \"second\"\n";
    save_through_leader(&others, second).await;
    for node in &others {
        knows_namespace(node, second).await;
        node.log.storage().compact().await.expect("a round starts");
        compacted(node, 1).await;
        let log = node.log.storage().group_log(METADATA_GROUP);
        assert!(
            log.purged.is_some(),
            "node {}'s metadata log is purged",
            node.id
        );
    }
    let back = reopen(away, &members(&nodes)).await;
    knows_namespace(&back, second).await;
    assert!(
        back.log
            .snapshot_stats()
            .installed
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "it learned the text from an installed snapshot"
    );

    // Started again alone (so no leader tells it of any entry), a member knows the text
    // from its own snapshot.
    for node in [&back, others[0], others[1]] {
        close(node).await;
    }
    let alone = reopen(others[0], &members(&nodes)).await;
    alone.log.group(METADATA_GROUP).await.expect("runs");
    assert_eq!(
        alone.log.applied_namespace().borrow().as_deref(),
        Some(second),
        "known from its snapshot at start"
    );
    close(&alone).await;
}
