//! A three-node cluster of real processes on 127.0.0.1, 127.0.0.2 and 127.0.0.3 (every
//! node on the same ports, picked free at run time): clients connect to any node, a
//! follower forwards them to the leader, acknowledged messages survive the leader's
//! `kill -9`, entities created at run time through a follower exist on the new leader, and a
//! leader paused past its lease comes back as a follower (fail-stop: the same pid executes
//! itself again).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fe2o3_amqp::{Receiver, Sender};
use serde_json::Value;

use crate::daemon::connect;
use crate::harness::receive;

const BINARY: &str = env!("CARGO_BIN_EXE_ferrobus");
const SECRET: &str = "cluster-test-secret-0123456789";
const PATIENCE: Duration = Duration::from_secs(30);

/// A port free on all four loopback addresses the tests use.
fn shared_free_port() -> u16 {
    for _ in 0..50 {
        let first = TcpListener::bind("127.0.0.1:0").expect("binds");
        let port = first.local_addr().expect("address").port();
        let others: Vec<_> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
            .iter()
            .map(|host| TcpListener::bind((*host, port)))
            .collect();
        if others.iter().all(|other| other.is_ok()) {
            return port;
        }
    }
    panic!("no port is free on 127.0.0.1-4");
}

/// One node: its process, its log lines, its files.
struct Node {
    id: u64,
    host: String,
    port: u16,
    config: PathBuf,
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    /// `FERROBUS_FAULT_INJECT` for its next start (a slow or failing disk).
    fault: Option<String>,
}

impl Node {
    fn address(&self) -> SocketAddr {
        format!("{}:{}", self.host, self.port)
            .parse()
            .expect("an address")
    }

    fn start(&mut self) {
        let mut command = Command::new(BINARY);
        if let Some(fault) = &self.fault {
            command.env("FERROBUS_FAULT_INJECT", fault);
        }
        let mut child = command
            .args(["--config", &self.config.display().to_string()])
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        let stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let lines = self.lines.clone();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                lines.lock().expect("lines").push(line);
            }
        });
        self.child = Some(child);
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM (a planned stop), then waits for the process to end; its exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.wait_exit()
    }

    /// Waits for the process to end; its exit status.
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        child.wait().expect("exits")
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    fn logged(&self, text: &str) -> usize {
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .filter(|line| line.contains(text))
            .count()
    }

    /// A GET of `route` on this node's AMQP port (which serves HTTP too): status and body.
    fn get(&self, route: &str) -> Option<(u16, String)> {
        let mut stream =
            TcpStream::connect_timeout(&self.address(), Duration::from_millis(500)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET {route} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, text.split("\r\n\r\n").nth(1)?.to_string()))
    }

    /// This node's `/health`, asked on its AMQP port (which serves HTTP too).
    fn health(&self) -> Option<(u16, Value)> {
        let (status, body) = self.get("/health")?;
        Some((status, serde_json::from_str(&body).ok()?))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Cluster {
    nodes: Vec<Node>,
    directory: PathBuf,
    /// The client port and the peer port every node uses.
    ports: (u16, u16),
    /// What every node's `[storage]` table holds besides its mode and data directory.
    storage: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

/// Writes node `id`'s configuration (127.0.0.`id`, the shared `ports`, members 1 to
/// `members`; `storage` goes at the end of its `[storage]` table, `extra` at the end of its
/// `[cluster]` table, where the entities follow) and starts it, with `fault` as its
/// `FERROBUS_FAULT_INJECT`.
fn launch(
    directory: &std::path::Path,
    (port, peer_port): (u16, u16),
    id: u64,
    members: u64,
    fault: Option<String>,
    storage: &str,
    extra: &str,
) -> Node {
    let members: Vec<String> = (1..=members)
        .map(|member| format!("{{ id = {member}, address = \"127.0.0.{member}:{peer_port}\" }}"))
        .collect();
    let host = format!("127.0.0.{id}");
    let config = format!(
        "[server]\nlisten = \"{host}:{port}\"\n[http]\nenabled = false\n[tls]\nenabled = false\n[websocket]\nenabled = false\n[storage]\nmode = \"durable\"\ndata_dir = \"{}\"\n{storage}[cluster]\nnode_id = {id}\nsecret = \"{SECRET}\"\nmembers = [{}]\n{extra}",
        directory.join(format!("node{id}")).display(),
        members.join(", ")
    );
    let path = directory.join(format!("node{id}.toml"));
    std::fs::write(&path, config).expect("config");
    let mut node = Node {
        id,
        host,
        port,
        config: path,
        child: None,
        lines: Arc::default(),
        fault,
    };
    node.start();
    node
}

impl Cluster {
    fn start(entities: &str) -> Cluster {
        Cluster::start_with_faults(entities, &[])
    }

    /// [`Cluster::start`] with `FERROBUS_FAULT_INJECT` set for some nodes.
    fn start_with_faults(entities: &str, faults: &[(u64, &str)]) -> Cluster {
        Cluster::start_configured(entities, faults, "")
    }

    /// [`Cluster::start`] with `storage` (lines such as `compaction_threshold = "1 MiB"`)
    /// in every node's `[storage]` table, nodes started later included.
    fn start_with_storage(entities: &str, storage: &str) -> Cluster {
        Cluster::start_configured(entities, &[], storage)
    }

    fn start_configured(entities: &str, faults: &[(u64, &str)], storage: &str) -> Cluster {
        let directory = std::env::temp_dir().join(format!(
            "ferrobus-cluster-{}-{}",
            std::process::id(),
            ferrobus::encoding::ids::unique_u64()
        ));
        std::fs::create_dir_all(&directory).expect("scratch");
        let port = shared_free_port();
        let peer_port = loop {
            let candidate = shared_free_port();
            if candidate != port {
                break candidate;
            }
        };
        let mut nodes = Vec::new();
        for id in 1..=3u64 {
            let fault = faults
                .iter()
                .find(|(node, _)| *node == id)
                .map(|(_, fault)| fault.to_string());
            nodes.push(launch(
                &directory,
                (port, peer_port),
                id,
                3,
                fault,
                storage,
                entities,
            ));
        }
        Cluster {
            nodes,
            directory,
            ports: (port, peer_port),
            storage: storage.to_string(),
        }
    }

    /// Starts node `id` on 127.0.0.`id` to join the running cluster (`join = true`); the
    /// leader adds it.
    fn start_joining(&mut self, id: u64, entities: &str) {
        let entities = format!("join = true\n{entities}");
        let node = launch(
            &self.directory,
            self.ports,
            id,
            id,
            None,
            &self.storage,
            &entities,
        );
        self.nodes.push(node);
    }

    fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    /// The leader every running node but `except` names, once they agree and it serves.
    fn leader(&self, except: &[u64]) -> u64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let views: Vec<(u16, Value)> = self
                .nodes
                .iter()
                .filter(|node| node.child.is_some() && !except.contains(&node.id))
                .filter_map(Node::health)
                .collect();
            let leaders: Vec<Option<u64>> = views
                .iter()
                .map(|(_, view)| view["cluster"]["leader"].as_u64())
                .collect();
            if let Some(Some(leader)) = leaders.first()
                && leaders.len() >= 2
                && leaders.iter().all(|other| *other == Some(*leader))
                && !except.contains(leader)
                && self.node(*leader).health().is_some_and(|(status, view)| {
                    status == 200 && view["cluster"]["role"] == "leader"
                })
            {
                return *leader;
            }
            assert!(
                Instant::now() < deadline,
                "no leader agreed on in {PATIENCE:?}: {views:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until `node` answers `/health` as a follower of `leader`.
async fn follows(node: &Node, leader: u64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let view = node.health();
        if let Some((200, view)) = &view
            && view["cluster"]["role"] == "follower"
            && view["cluster"]["leader"].as_u64() == Some(leader)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {} does not follow node {leader}: {view:?}",
            node.id
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn send(address: SocketAddr, queue: &str, bodies: &[&str]) {
    let (mut connection, mut session) = connect(address).await;
    let mut sender = Sender::attach(&mut session, "sender", queue)
        .await
        .expect("a sender attaches");
    for body in bodies {
        sender.send(body.to_string()).await.expect("accepted");
    }
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

/// Receives exactly `count` messages.
async fn receive_all(address: SocketAddr, queue: &str, count: usize) -> Vec<String> {
    receive_some(address, queue, count, true).await
}

const ENTITIES: &str = "[[queues]]\nname = \"orders\"\n";

/// Rule DUR-1 across nodes: an acknowledged message survives the `kill -9` of the leader
/// that acknowledged it, and a completed one does not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_through_a_follower_survive_the_leaders_kill() {
    let mut cluster = Cluster::start(ENTITIES);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (first, second) = (followers[0], followers[1]);
    send(
        cluster.node(first).address(),
        "orders",
        &["one", "two", "three"],
    )
    .await;
    let received = receive_some(cluster.node(second).address(), "orders", 1, false).await;
    assert!(received[0].contains("one"), "{received:?}");

    cluster.node_mut(leader).kill();
    let killed_at = Instant::now();
    let next = tokio::task::block_in_place(|| cluster.leader(&[leader]));
    assert_ne!(next, leader);
    let failover = killed_at.elapsed();
    assert!(
        cluster.node(next).logged("this node leads the cluster") >= 1,
        "the new leader says it took over"
    );
    let survivor = if next == first { second } else { first };
    let rest = receive_all(cluster.node(survivor).address(), "orders", 2).await;
    assert!(
        rest[0].contains("two") && rest[1].contains("three"),
        "{rest:?} after {failover:?}"
    );

    // The killed node comes back as a follower and catches up.
    cluster.node_mut(leader).start();
    follows(cluster.node(leader), next).await;
}

/// Each node answers `/health` for itself: a follower names the leader, the leader lists
/// every member's progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reports_its_own_view_of_the_cluster() {
    let cluster = Cluster::start(ENTITIES);
    // The views are read one after another: on a loaded machine a leadership may move in
    // between, so they are read again (within the patience) until all name one leader.
    let deadline = Instant::now() + PATIENCE;
    let (leader, views) = loop {
        let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
        let views: Vec<(u16, Value)> = cluster
            .nodes
            .iter()
            .map(|node| node.health().expect("answers"))
            .collect();
        let agreed = views
            .iter()
            .all(|(_, view)| view["cluster"]["leader"].as_u64() == Some(leader));
        if agreed || Instant::now() > deadline {
            break (leader, views);
        }
    };
    for (node, (status, view)) in cluster.nodes.iter().zip(views) {
        assert_eq!(status, 200, "{view}");
        assert_eq!(view["status"], "healthy", "{view}");
        assert_eq!(view["cluster"]["node"].as_u64(), Some(node.id), "{view}");
        assert_eq!(view["cluster"]["leader"].as_u64(), Some(leader), "{view}");
        if node.id == leader {
            assert_eq!(view["cluster"]["role"], "leader");
            let members = view["cluster"]["members"].as_array().expect("members");
            assert_eq!(members.len(), 3, "{view}");
        } else {
            assert_eq!(view["cluster"]["role"], "follower");
        }
    }
    // A follower's own metrics: the leader it knows, the connections it forwarded.
    let follower = cluster
        .nodes
        .iter()
        .find(|node| node.id != leader)
        .expect("a follower");
    send(follower.address(), "orders", &["counted"]).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, text) = follower.get("/metrics").expect("answers");
        assert_eq!(status, 200);
        let leader_line = format!("ferrobus_cluster_leader {leader}");
        let forwarded = text
            .lines()
            .find_map(|line| line.strip_prefix("ferrobus_cluster_forwarded_connections_total "))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if text.contains(&leader_line) && forwarded >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An entity created at run time through a follower (the admin API, forwarded to the
/// leader) is in the replicated log: it exists, with its messages, on the next leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_created_through_a_follower_outlives_the_leader() {
    let mut cluster = Cluster::start(ENTITIES);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let connection = format!("Endpoint=sb://{}", cluster.node(follower).address());
    let created = Command::new(BINARY)
        .args([
            "queue",
            "create",
            "made-at-run-time",
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
    send(
        cluster.node(follower).address(),
        "made-at-run-time",
        &["kept"],
    )
    .await;

    cluster.node_mut(leader).kill();
    let next = tokio::task::block_in_place(|| cluster.leader(&[leader]));
    let received = receive_all(cluster.node(next).address(), "made-at-run-time", 1).await;
    assert!(received[0].contains("kept"), "{received:?}");
}

/// A leader paused past its lease is replaced; when it wakes it learns of the newer term
/// and starts again as a follower in the same process (fail-stop), never serving as leader
/// beside the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_comes_back_as_a_follower() {
    let cluster = Cluster::start(ENTITIES);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let pid = cluster.node(leader).pid();
    cluster.node(leader).signal("STOP");
    let next = tokio::task::block_in_place(|| cluster.leader(&[leader]));
    assert_ne!(next, leader);
    cluster.node(leader).signal("CONT");
    follows(cluster.node(leader), next).await;
    assert_eq!(cluster.node(leader).pid(), pid, "the same process");
    // Its /health may name the new leader a moment before it logs why it starts again.
    let deadline = Instant::now() + PATIENCE;
    while cluster.node(leader).logged("no longer leads the cluster") == 0
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        cluster.node(leader).logged("no longer leads the cluster"),
        1,
        "it said why it started again"
    );
    // Then it executes itself again: a connection accepted just before that is reset, so
    // the client waits for the new process's start line.
    let deadline = Instant::now() + PATIENCE;
    while cluster.node(leader).logged("member of a cluster of") < 2 {
        assert!(
            Instant::now() < deadline,
            "node {leader} did not start again as a follower"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Clients through it reach the new leader.
    send(cluster.node(leader).address(), "orders", &["after"]).await;
    let received = receive_all(cluster.node(next).address(), "orders", 1).await;
    assert!(received[0].contains("after"), "{received:?}");
}

/// The explorer, opened in headless Chromium through a follower (forwarded to the leader),
/// names the leader, the term and each member's lag in its top bar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explorer_through_a_follower_shows_the_cluster() {
    const CHROMIUM: &str = "/usr/bin/chromium";
    if !std::path::Path::new(CHROMIUM).exists() {
        eprintln!("skipped: {CHROMIUM} is absent (apt-get install chromium)");
        return;
    }
    let cluster = Cluster::start(ENTITIES);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let url = format!("http://{}/explorer/", cluster.node(follower).address());
    let expected = format!("Cluster: node {leader} leads");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let page = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--virtual-time-budget=5000",
                "--dump-dom",
                &url,
            ])
            .stderr(Stdio::null())
            .output()
            .expect("chromium runs");
        let dom = String::from_utf8_lossy(&page.stdout);
        if dom.contains(&expected) && dom.contains("lag 0") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {expected:?}: {dom}"
        );
    }
}

/// Sends `body` through any running node, again on another after an error, until one
/// acknowledges it (at least once: a send whose acknowledgement was lost may be stored
/// twice).
async fn send_until_acknowledged(cluster: &Cluster, queue: &str, body: &str) {
    let deadline = Instant::now() + PATIENCE;
    let mut attempt = 0usize;
    loop {
        let running: Vec<&Node> = cluster
            .nodes
            .iter()
            .filter(|node| node.child.is_some())
            .collect();
        let node = running[attempt % running.len()];
        attempt += 1;
        let sent = tokio::time::timeout(Duration::from_secs(5), async {
            let mut connection = fe2o3_amqp::Connection::builder()
                .container_id(format!("cluster-{}", ferrobus::encoding::ids::unique_u64()))
                .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
                .open(format!("amqp://{}", node.address()).as_str())
                .await
                .ok()?;
            let mut session = fe2o3_amqp::Session::begin(&mut connection).await.ok()?;
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
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Receives until every one of `expected` has come (duplicates allowed), completing each.
async fn receive_every(address: SocketAddr, queue: &str, expected: &[String]) {
    let (mut connection, mut session) = connect(address).await;
    let mut receiver = Receiver::attach(&mut session, "receiver", queue)
        .await
        .expect("a receiver attaches");
    let mut missing: std::collections::BTreeSet<&String> = expected.iter().collect();
    while !missing.is_empty() {
        let delivery = tokio::time::timeout(
            Duration::from_secs(10),
            receiver
                .recv::<fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>>(),
        )
        .await
        .unwrap_or_else(|_| panic!("never received {missing:?}"))
        .expect("receives");
        let text = format!("{:?}", delivery.body());
        missing.retain(|body| !text.contains(&format!("\"{body}\"")));
        receiver.accept(&delivery).await.expect("completed");
    }
    receiver.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

/// A leader whose disk fails (every fsync an error after its first few) ends its process,
/// naming why; the others elect a leader, and every send any node acknowledged is received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_fails_loses_no_acknowledged_message() {
    let mut cluster = Cluster::start_with_faults(ENTITIES, &[(1, "sync-fails-after=40")]);
    let first = tokio::task::block_in_place(|| cluster.leader(&[]));
    let mut sent = Vec::new();
    for index in 0..80 {
        let body = format!("disk-{index}");
        send_until_acknowledged(&cluster, "orders", &body).await;
        sent.push(body);
    }
    // Node 1's syncs run out, whether it leads or follows (more sends until they do): its
    // process ends.
    let deadline = Instant::now() + PATIENCE;
    let mut more = 0;
    let status = loop {
        let child = cluster.node_mut(1).child.as_mut().expect("started");
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        let body = format!("disk-more-{more}");
        more += 1;
        send_until_acknowledged(&cluster, "orders", &body).await;
        sent.push(body);
        assert!(
            Instant::now() < deadline,
            "node 1 went on with a failed disk"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success());
    // The thread that reads its standard error may not have taken the last line yet.
    let deadline = Instant::now() + PATIENCE;
    while cluster
        .node(1)
        .logged("this node's part in the cluster stopped")
        == 0
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        cluster
            .node(1)
            .logged("this node's part in the cluster stopped"),
        1,
        "it said why"
    );
    cluster.node_mut(1).child = None;
    let leader = tokio::task::block_in_place(|| cluster.leader(&[1]));
    assert_ne!(leader, 1, "first leader {first}");
    receive_every(cluster.node(leader).address(), "orders", &sent).await;
}

/// A follower with a slow disk (every fsync 300 ms longer) does not hold the others back
/// from committing, and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_with_a_slow_disk_does_not_stop_the_cluster() {
    let cluster = Cluster::start_with_faults(ENTITIES, &[(3, "sync-delay=300")]);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let mut sent = Vec::new();
    for index in 0..20 {
        let body = format!("slow-{index}");
        send_until_acknowledged(&cluster, "orders", &body).await;
        sent.push(body);
    }
    receive_every(cluster.node(leader).address(), "orders", &sent).await;
    assert_eq!(
        cluster.node(3).logged("faulty disk"),
        1,
        "node 3 ran with the slow disk"
    );
}

/// A rolling restart: each node in turn, the leader among them, stopped with SIGTERM and
/// started again while a sender keeps sending through whichever nodes run; every send any
/// node acknowledged is received afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_nothing() {
    let mut cluster = Cluster::start(ENTITIES);
    tokio::task::block_in_place(|| cluster.leader(&[]));
    let mut sent = Vec::new();
    for id in 1..=3u64 {
        for index in 0..10 {
            let body = format!("roll-{id}-{index}");
            send_until_acknowledged(&cluster, "orders", &body).await;
            sent.push(body);
        }
        let status = tokio::task::block_in_place(|| cluster.node_mut(id).stop());
        assert!(status.success(), "node {id} stopped cleanly: {status}");
        for index in 10..20 {
            let body = format!("roll-{id}-{index}");
            send_until_acknowledged(&cluster, "orders", &body).await;
            sent.push(body);
        }
        cluster.node_mut(id).start();
        tokio::task::block_in_place(|| cluster.leader(&[]));
    }
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    receive_every(cluster.node(leader).address(), "orders", &sent).await;
}

/// A planned stop of a follower (SIGTERM) does not cut the connections it forwards: the
/// leader drains them, so a client holding a locked message settles it before the follower
/// leaves, and the settlement holds (the message does not come back once its lock would
/// have run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_follower_lets_its_clients_settle_what_they_hold() {
    let mut cluster = Cluster::start("[[queues]]\nname = \"orders\"\nlock_duration = \"2s\"\n");
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let follower = if leader == 1 { 2 } else { 1 };
    follows(cluster.node(follower), leader).await;
    let through = cluster.node(follower).address();
    send(through, "orders", &["held"]).await;
    let (_connection, mut session) = connect(through).await;
    let mut receiver = Receiver::attach(&mut session, "holder", "orders")
        .await
        .expect("a receiver attaches");
    let held = receive(&mut receiver).await;

    cluster.node(follower).signal("TERM");
    // It takes no new connection once it is stopping.
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect_timeout(&through, Duration::from_millis(200)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "node {follower} still takes connections"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    receiver
        .accept(&held)
        .await
        .expect("the held message is settled through the stopping follower");
    let status = tokio::task::block_in_place(|| cluster.node_mut(follower).wait_exit());
    assert!(
        status.success(),
        "node {follower} stopped cleanly: {status}"
    );

    let (_, metrics) = cluster
        .node(leader)
        .get("/metrics")
        .expect("the leader's metrics");
    let drained = metrics
        .lines()
        .find_map(|line| line.strip_prefix("ferrobus_cluster_drained_connections_total "))
        .and_then(|value| value.trim().parse::<f64>().ok());
    assert!(
        drained.is_some_and(|count| count >= 1.0),
        "the leader counts the drained connection: {drained:?}"
    );

    // Past the lock's 2 s: a settlement lost on the way would have let it come back.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let again = receive_some(cluster.node(leader).address(), "orders", 0, true).await;
    assert!(again.is_empty(), "{again:?}");
}

/// A leadership move cut short by the leader's `kill -9` right after it was asked for: the
/// others agree on a leader, the killed node follows it once restarted, and nothing
/// acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_move_cut_short_by_a_kill_leaves_one_leader_and_loses_nothing() {
    let mut cluster = Cluster::start(ENTITIES);
    let first = tokio::task::block_in_place(|| cluster.leader(&[]));
    send(cluster.node(first).address(), "orders", &["before"]).await;
    let target = (1..=3).find(|id| *id != first).expect("a follower");
    let (asked, text) = cli(
        cluster.node(target),
        &["cluster", "transfer-leader", &target.to_string()],
    );
    assert!(asked, "{text}");
    cluster.node_mut(first).kill();
    let next = tokio::task::block_in_place(|| cluster.leader(&[first]));
    send_until_acknowledged(&cluster, "orders", "after").await;
    cluster.node_mut(first).start();
    let settled = tokio::task::block_in_place(|| cluster.leader(&[]));
    for id in (1..=3).filter(|id| *id != settled) {
        follows(cluster.node(id), settled).await;
    }
    // (A send retried after an unanswered attempt may be stored twice: at least once.)
    let received = receive_some(cluster.node(settled).address(), "orders", 2, false).await;
    assert!(
        received[0].contains("before") && received[1].contains("after"),
        "after node {next} took over: {received:?}"
    );
}

/// `ferrobus cluster transfer-leader N`: the leader drains its clients, node N leads, and
/// the old leader comes back as a follower in the same process; a leader stopped with
/// SIGTERM hands its leadership over before it leaves. Nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leadership_moves_on_request_and_before_a_planned_stop() {
    let mut cluster = Cluster::start(ENTITIES);
    let first = tokio::task::block_in_place(|| cluster.leader(&[]));
    send(cluster.node(first).address(), "orders", &["before"]).await;
    let chosen = (1..=3).find(|id| *id != first).expect("a follower");
    let old_pid = cluster.node(first).pid();

    let (moved, text) = cli(
        cluster.node(chosen),
        &["cluster", "transfer-leader", &chosen.to_string()],
    );
    assert!(moved, "{text}");
    assert!(text.contains(&format!("node {chosen}")), "{text}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
        if leader == chosen {
            break;
        }
        assert!(Instant::now() < deadline, "node {leader} still leads");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    follows(cluster.node(first), chosen).await;
    assert_eq!(cluster.node(first).pid(), old_pid, "the same process");
    let (refused, text) = cli(
        cluster.node(first),
        &["cluster", "transfer-leader", &chosen.to_string()],
    );
    assert!(!refused, "the leader cannot hand over to itself: {text}");
    send(cluster.node(first).address(), "orders", &["between"]).await;

    // A planned stop of the leader: it hands over before it leaves.
    let status = tokio::task::block_in_place(|| cluster.node_mut(chosen).stop());
    assert!(status.success(), "node {chosen} stopped cleanly: {status}");
    assert_eq!(
        cluster
            .node(chosen)
            .logged("handed the cluster's leadership to node"),
        1,
        "node {chosen} handed its leadership over before it stopped"
    );
    let next = tokio::task::block_in_place(|| cluster.leader(&[chosen]));
    send(cluster.node(next).address(), "orders", &["after"]).await;
    let received = receive_all(cluster.node(next).address(), "orders", 3).await;
    assert!(
        received[0].contains("before")
            && received[1].contains("between")
            && received[2].contains("after"),
        "{received:?}"
    );

    // The last follower stops, then the leader: its hand-over cannot succeed, and it ends
    // (it must not take the end of its leadership for a deposition and come back).
    let other = [1, 2, 3]
        .into_iter()
        .find(|id| *id != chosen && *id != next)
        .expect("a follower");
    let status = tokio::task::block_in_place(|| cluster.node_mut(other).stop());
    assert!(status.success(), "node {other} stopped cleanly: {status}");
    cluster.node(next).signal("TERM");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let child = cluster.node_mut(next).child.as_mut().expect("running");
        if let Some(status) = child.try_wait().expect("waits") {
            assert!(status.success(), "node {next} stopped cleanly: {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {next} did not end after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cluster.node(next).logged("restarting as a follower"),
        0,
        "a stopping leader does not come back"
    );
}

/// A leader that hears from no majority (both followers paused) sends its clients nothing
/// once its lease has run out — here a message a receiver asks for — and closes their
/// connections; when the followers wake, it serves again and the message is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_its_majority_answers_nothing() {
    let cluster = Cluster::start(ENTITIES);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let address = cluster.node(leader).address();
    send(address, "orders", &["held-back"]).await;
    let (mut connection, mut session) = connect(address).await;
    for follower in &followers {
        cluster.node(*follower).signal("STOP");
    }
    // The lease (350 ms after the last acknowledgement) runs out.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let attached = tokio::time::timeout(Duration::from_secs(5), async {
        let mut receiver = Receiver::attach(&mut session, "receiver", "orders").await?;
        let delivery = receiver
            .recv::<fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>>()
            .await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(format!("{:?}", delivery.body()))
    })
    .await;
    assert!(
        !matches!(attached, Ok(Ok(_))),
        "a leader without its majority delivered: {attached:?}"
    );
    // The HTTP side answers 503 rather than what may be stale.
    let (status, text) = cluster
        .node(leader)
        .get("/explorer/api/entities")
        .expect("answers");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("majority"), "{text}");
    for follower in &followers {
        cluster.node(*follower).signal("CONT");
    }
    drop(session);
    drop(connection.close().await);
    // The resumed followers may depose the old leader just after they named it (it then
    // executes itself again and resets the connections it had accepted): a receive whose
    // connection is refused or reset is tried again through the leader named then.
    let deadline = Instant::now() + PATIENCE;
    let received = loop {
        let now = tokio::task::block_in_place(|| cluster.leader(&[]));
        let address = cluster.node(now).address();
        match tokio::spawn(async move { receive_all(address, "orders", 1).await }).await {
            Ok(received) => break received,
            Err(failed) => {
                let why = failed
                    .into_panic()
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_default();
                assert!(
                    why.starts_with("connects") && Instant::now() < deadline,
                    "{why}"
                );
            }
        }
    };
    assert!(received[0].contains("held-back"), "{received:?}");
}

/// With keys, a follower's own `/metrics` asks for a key with the Manage right, as the
/// leader's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_metrics_need_a_manage_key_when_keys_are_set() {
    let entities = format!(
        "{ENTITIES}[[auth.keys]]\nname = \"admin\"\nkey = \"admin-secret\"\nrights = [\"Manage\"]\n[[auth.keys]]\nname = \"sender\"\nkey = \"sender-secret\"\nrights = [\"Send\"]\n"
    );
    let cluster = Cluster::start(&entities);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let follower = cluster
        .nodes
        .iter()
        .find(|node| node.id != leader)
        .expect("a follower");
    let (status, text) = follower.get("/metrics").expect("answers");
    assert_eq!(status, 401, "{text}");
    let with = |credentials: &str| {
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
        let mut stream = TcpStream::connect(follower.address()).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {encoded}\r\nConnection: close\r\n\r\n"
        )
        .expect("writes");
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        text
    };
    let refused = with("sender:sender-secret");
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let allowed = with("admin:admin-secret");
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    assert!(allowed.contains("ferrobus_cluster_leader"), "{allowed}");
}

/// Runs the operator CLI against `node`; returns its status and output.
fn cli(node: &Node, arguments: &[&str]) -> (bool, String) {
    let connection = format!("Endpoint=sb://{}", node.address());
    let output = Command::new(BINARY)
        .args(arguments)
        .args(["--connection-string", &connection])
        .output()
        .expect("the CLI runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// Membership at run time: a fourth node started with `join = true` is added through a
/// follower (`ferrobus cluster add-node`), catches up and votes; the old leader is killed and
/// removed (`remove-node`), and the three left survive the loss of one more — every
/// acknowledged message is received through the new node. A live node that is removed
/// stops by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_at_run_time_catches_up_and_votes() {
    let mut cluster = Cluster::start(ENTITIES);
    let first = tokio::task::block_in_place(|| cluster.leader(&[]));
    send(cluster.node(first).address(), "orders", &["before"]).await;
    cluster.start_joining(4, ENTITIES);
    let follower = (1..=3).find(|id| *id != first).expect("a follower");
    let peer = format!("127.0.0.4:{}", cluster.ports.1);
    let (added, text) = cli(cluster.node(follower), &["cluster", "add-node", "4", &peer]);
    assert!(added, "{text}");
    let (_, status) = cli(cluster.node(4), &["cluster", "status", "-o", "json"]);
    let view: Value = serde_json::from_str(status.trim()).expect("JSON");
    assert_eq!(view["voters"], serde_json::json!([1, 2, 3, 4]), "{view}");
    send(cluster.node(4).address(), "orders", &["through-four"]).await;

    // Four voters: three are a majority. Kill the leader, remove it, then lose one more.
    cluster.node_mut(first).kill();
    let second = tokio::task::block_in_place(|| cluster.leader(&[first]));
    let (removed, text) = cli(
        cluster.node(4),
        &["cluster", "remove-node", &first.to_string()],
    );
    assert!(removed, "{text}");
    let other = [1, 2, 3]
        .into_iter()
        .find(|id| *id != first && *id != second)
        .expect("a third original");
    let lost = if second == 4 { other } else { second };
    cluster.node_mut(lost).kill();
    let third = tokio::task::block_in_place(|| cluster.leader(&[first, lost]));
    send(cluster.node(4).address(), "orders", &["after"]).await;
    let received = receive_all(cluster.node(third).address(), "orders", 3).await;
    assert!(
        received[0].contains("before")
            && received[1].contains("through-four")
            && received[2].contains("after"),
        "{received:?}"
    );

    // Started again with another queue in its file, it is refused by the others, and both
    // sides say why; with the others' file it rejoins.
    let config = cluster.node(lost).config.clone();
    let original = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("{original}\n[[queues]]\nname = \"only-here\"\n"),
    )
    .expect("config");
    cluster.node_mut(lost).start();
    const DIFFERENT: &str = "configured with other entities or keys";
    let deadline = Instant::now() + PATIENCE;
    while cluster.node(lost).logged(DIFFERENT) == 0 || cluster.node(third).logged(DIFFERENT) == 0 {
        assert!(
            Instant::now() < deadline,
            "no refusal logged by node {lost} and node {third}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        cluster
            .node(third)
            .logged(&format!("node {lost} refused this node: it is {DIFFERENT}"))
            + cluster
                .node(third)
                .logged(&format!("node {lost} is {DIFFERENT} than this node"))
            >= 1,
        "the leader names node {lost}"
    );
    cluster.node_mut(lost).kill();
    std::fs::write(&config, original).expect("config");
    cluster.node_mut(lost).start();
    // Removing a live member: it stops by itself. (The refused node's elections may have
    // moved the leadership.)
    let leader = tokio::task::block_in_place(|| cluster.leader(&[first]));
    let survivor = [1, 2, 3, 4]
        .into_iter()
        .find(|id| *id != first && *id != lost && *id != leader)
        .expect("a survivor besides the leader");
    let (removed, text) = cli(
        cluster.node(leader),
        &["cluster", "remove-node", &survivor.to_string()],
    );
    assert!(removed, "{text}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let child = cluster.node_mut(survivor).child.as_mut().expect("running");
        if let Some(status) = child.try_wait().expect("waits") {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {survivor} went on after its removal"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cluster.node(survivor).logged("removed from the cluster") >= 1);
}

/// What every node's `[storage]` table adds in the compaction test: a round once the log on
/// disk passes 1 MiB (the default is 256 MiB).
const SMALL_COMPACTION: &str = "compaction_threshold = \"1 MiB\"\n";

/// The value of `metric` (a line without labels) in `node`'s `/metrics`.
fn metric(node: &Node, metric: &str) -> Option<f64> {
    let (_, text) = node.get("/metrics")?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{metric} ")))
        .and_then(|value| value.trim().parse().ok())
}

/// Node `id`'s data directory.
fn data_dir(cluster: &Cluster, id: u64) -> PathBuf {
    cluster.directory.join(format!("node{id}"))
}

/// The log segments (`<16 hex digits>.wal`) in `directory`: their numbers and the bytes of
/// their records (a prepared segment's zeros after them are room, not log).
fn segments(directory: &std::path::Path) -> (Vec<u64>, u64) {
    use ferrobus::store::segment;
    let numbers = segment::list(directory).expect("the data directory lists");
    let bytes = numbers
        .iter()
        .filter_map(|number| segment::scan(&directory.join(segment::file_name(*number))).ok())
        .map(|scanned| scanned.valid_length)
        .sum();
    (numbers, bytes)
}

/// Sends `bodies` to `queue` over one link without waiting for each outcome (pipelined),
/// then checks every one was accepted.
async fn send_pipelined(address: SocketAddr, queue: &str, bodies: &[String]) {
    let (mut connection, mut session) = connect(address).await;
    let mut sender = Sender::attach(&mut session, "pipelined", queue)
        .await
        .expect("a sender attaches");
    let mut outcomes = Vec::with_capacity(bodies.len());
    for body in bodies {
        outcomes.push(sender.send_batchable(body.clone()).await.expect("sent"));
    }
    for outcome in outcomes {
        let outcome = outcome.await.expect("settled");
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

/// Receives (peek-lock) the next `count` messages of `queue`, with exactly that much credit
/// (so that no other message is left locked), completing each; fewer when none comes for
/// 5 s. With `nothing_more`, one credit more, and asserts nothing comes on it within a short
/// wait. Their string bodies, in order.
async fn receive_some(
    address: SocketAddr,
    queue: &str,
    count: usize,
    nothing_more: bool,
) -> Vec<String> {
    use fe2o3_amqp::link::receiver::CreditMode;
    use fe2o3_amqp::types::messaging::{AmqpValue, Body};
    use fe2o3_amqp::types::primitives::Value as Amqp;
    let (mut connection, mut session) = connect(address).await;
    let mut receiver = Receiver::builder()
        .name("completer")
        .source(queue)
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .expect("a receiver attaches");
    receiver
        .set_credit(count as u32 + u32::from(nothing_more))
        .await
        .expect("credit");
    let mut bodies = Vec::with_capacity(count);
    for _ in 0..count {
        let Ok(delivery) =
            tokio::time::timeout(Duration::from_secs(5), receiver.recv::<Body<Amqp>>()).await
        else {
            break;
        };
        let delivery = delivery.expect("receives");
        let Body::Value(AmqpValue(Amqp::String(text))) = delivery.body() else {
            panic!("a string body: {:?}", delivery.body());
        };
        bodies.push(text.clone());
        receiver.accept(&delivery).await.expect("completed");
    }
    if nothing_more {
        let more =
            tokio::time::timeout(Duration::from_millis(700), receiver.recv::<Body<Amqp>>()).await;
        assert!(more.is_err(), "an unexpected message: {more:?}");
    }
    receiver.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
    bodies
}

/// Log compaction on a cluster (issue 44 compaction, issue 46 'catches up by snapshot and
/// log'): with a small `[storage] compaction_threshold`, every member snapshots the
/// cluster's log (`snapshots/%24namespace.snap`) and deletes its older segments while
/// messages go through and are completed; a fourth node added at run time (`join = true`,
/// `ferrobus cluster add-node`) lacks the purged entries and installs the leader's
/// snapshot; once it leads (`ferrobus cluster transfer-leader 4`), a receiver through it
/// gets exactly the messages that were not completed, in order — rules DUR-1 (none lost),
/// LCK-1 (a completed message does not come back) and SEQ-2 (the order they were sent in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_after_compaction_installs_the_snapshot_and_serves_what_is_left() {
    // 4,000 messages of 4 KiB: about 16 MiB through the log, 1,000 of them (4 MiB) left at
    // the end: the leader's checkpoints are megabytes, written in entries small enough for
    // the AppendEntries requests' timeout.
    const ROUNDS: usize = 20;
    const PER_ROUND: usize = 200;
    const COMPLETED_PER_ROUND: usize = 150;
    let started = Instant::now();
    let mut cluster = Cluster::start_with_storage(ENTITIES, SMALL_COMPACTION);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    let padding = "x".repeat(4096);
    let mut sent = Vec::new();
    let mut completed = Vec::new();
    for round in 0..ROUNDS {
        let bodies: Vec<String> = (0..PER_ROUND)
            .map(|index| format!("m{:05}-{padding}", round * PER_ROUND + index))
            .collect();
        send_pipelined(cluster.node(leader).address(), "orders", &bodies).await;
        sent.extend(bodies);
        let address = cluster.node(leader).address();
        let bodies = receive_some(address, "orders", COMPLETED_PER_ROUND, false).await;
        assert_eq!(bodies.len(), COMPLETED_PER_ROUND, "round {round}");
        completed.extend(bodies);
    }
    let written: u64 = sent.iter().map(|body| body.len() as u64).sum();
    let completed: std::collections::HashSet<String> = completed.into_iter().collect();
    assert_eq!(
        completed.len(),
        ROUNDS * COMPLETED_PER_ROUND,
        "each completed once"
    );
    let left: Vec<String> = sent
        .iter()
        .filter(|body| !completed.contains(*body))
        .cloned()
        .collect();
    assert_eq!(left.len(), ROUNDS * (PER_ROUND - COMPLETED_PER_ROUND));
    let sending = started.elapsed();

    // Every member built a snapshot and deleted the segments before it (the first one, 0,
    // among them): what its segments still hold is a fraction of the bodies alone.
    let deadline = Instant::now() + PATIENCE;
    for id in 1..=3u64 {
        let directory = data_dir(&cluster, id);
        let snapshot = ferrobus::store::snapshots::path(&directory, "$namespace");
        loop {
            let (numbers, bytes) = segments(&directory);
            let built = cluster.node(id).logged("built a snapshot of the group");
            // (The metrics are brought up to date every so often: waited for as well.)
            let counted = metric(cluster.node(id), "ferrobus_cluster_snapshots_built_total");
            let purged = metric(cluster.node(id), "ferrobus_cluster_log_purged_index");
            if built >= 1
                && snapshot.exists()
                && numbers.first().is_some_and(|first| *first > 0)
                && bytes < written / 2
                && counted.is_some_and(|counted| counted >= 1.0)
                && purged.is_some_and(|purged| purged > 0.0)
            {
                eprintln!(
                    "node {id}: {built} snapshots built ({} bytes), purged to {purged:?}, segments {numbers:?} hold {bytes} bytes",
                    std::fs::metadata(&snapshot).map_or(0, |m| m.len()),
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} built {built} snapshots (counted {counted:?}, {} there: {}), purged to {purged:?}; segments {numbers:?} hold {bytes} bytes of the {written} bytes of bodies sent",
                snapshot.display(),
                snapshot.exists()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let compacting = started.elapsed();

    // A fourth node lacks the purged entries: it is sent the leader's snapshot.
    cluster.start_joining(4, ENTITIES);
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let peer = format!("127.0.0.4:{}", cluster.ports.1);
    let (added, text) = cli(cluster.node(follower), &["cluster", "add-node", "4", &peer]);
    assert!(added, "{text}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let logged = cluster
            .node(4)
            .logged("installed a snapshot of the group sent by its leader");
        let counted = metric(
            cluster.node(4),
            "ferrobus_cluster_snapshots_installed_total",
        );
        if logged >= 1 && counted.is_some_and(|counted| counted >= 1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 installed no snapshot (counted {counted:?}): {:?}",
            cluster.node(4).lines.lock().expect("lines")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        ferrobus::store::snapshots::path(&data_dir(&cluster, 4), "$namespace").exists(),
        "node 4 keeps the snapshot it installed"
    );
    let installing = started.elapsed();

    // Node 4 leads: what it serves comes from the snapshot (and the log after it).
    let (moved, text) = cli(cluster.node(4), &["cluster", "transfer-leader", "4"]);
    assert!(moved, "{text}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = tokio::task::block_in_place(|| cluster.leader(&[]));
        if now == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "node {now} still leads");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let received = receive_some(cluster.node(4).address(), "orders", left.len(), true).await;
    let name = |body: &String| body[..6].to_string();
    let missing: Vec<String> = left
        .iter()
        .filter(|body| !received.contains(*body))
        .map(name)
        .collect();
    let again: Vec<String> = received
        .iter()
        .filter(|body| completed.contains(*body))
        .map(name)
        .collect();
    assert!(
        missing.is_empty() && again.is_empty(),
        "through node 4, {} received: lost {missing:?}; completed before, received again {again:?}",
        received.len()
    );
    assert_eq!(
        received.iter().map(name).collect::<Vec<_>>(),
        left.iter().map(name).collect::<Vec<_>>(),
        "in the order they were sent"
    );
    assert_eq!(received, left, "the bodies whole");
    eprintln!(
        "sent and completed in {sending:?}, compacted by {compacting:?}, installed by {installing:?}, done in {:?}",
        started.elapsed()
    );
}

/// A cluster takes messages of at most 1 MiB, whatever the entity is configured with: a
/// larger one is refused with `MessageSizeExceeded` and never enters the log. (One 48 MiB
/// message replicated in one entry never reached the followers within an AppendEntries
/// timeout, and the elections it caused left the cluster without a leader.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_clusters_limit_is_refused_and_the_cluster_goes_on() {
    let entities = "[[queues]]\nname = \"big\"\nmax_message_size_in_kilobytes = 102400\n";
    let cluster = Cluster::start(entities);
    let leader = tokio::task::block_in_place(|| cluster.leader(&[]));
    assert!(
        cluster
            .node(leader)
            .logged("a cluster takes messages of at most 1024 KiB: big")
            >= 1,
        "the leader warns about the capped queue"
    );
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let (mut connection, mut session) = connect(cluster.node(follower).address()).await;
    let mut sender = Sender::attach(&mut session, "sender", "big")
        .await
        .expect("a sender attaches");
    // Just over the cap (a message far over it is refused before it has all arrived, by
    // detaching the link).
    let over = fe2o3_amqp::types::primitives::Binary::from(vec![7u8; 1024 * 1024 + 16 * 1024]);
    let refused = match tokio::time::timeout(PATIENCE, sender.send(over))
        .await
        .expect("the send is answered")
    {
        Ok(fe2o3_amqp::types::messaging::Outcome::Rejected(rejected)) => {
            format!("{:?}", rejected.error)
        }
        Ok(other) => panic!("a message over 1 MiB was not refused: {other:?}"),
        Err(error) => format!("{error:?}"),
    };
    assert!(
        refused.contains("MessageSizeExceeded") || refused.contains("message-size-exceeded"),
        "{refused}"
    );
    let outcome = sender
        .send(fe2o3_amqp::types::primitives::Binary::from(vec![
            9u8;
            900 * 1024
        ]))
        .await
        .expect("a 900 KiB message is sent");
    assert!(outcome.is_accepted(), "{outcome:?}");
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
    assert_eq!(
        tokio::task::block_in_place(|| cluster.leader(&[])),
        leader,
        "the leadership did not move"
    );
    let mut receiver_connection = connect(cluster.node(leader).address()).await;
    let mut receiver = Receiver::attach(&mut receiver_connection.1, "receiver", "big")
        .await
        .expect("a receiver attaches");
    let delivery = tokio::time::timeout(
        PATIENCE,
        receiver.recv::<fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>>(),
    )
    .await
    .expect("in time")
    .expect("the 900 KiB message");
    receiver.accept(&delivery).await.expect("completed");
    let bytes = match delivery.body() {
        fe2o3_amqp::types::messaging::Body::Value(fe2o3_amqp::types::messaging::AmqpValue(
            fe2o3_amqp::types::primitives::Value::Binary(bytes),
        )) => bytes.len(),
        _ => panic!("the body is not the binary sent"),
    };
    assert_eq!(bytes, 900 * 1024);
    receiver.close().await.ok();
    receiver_connection.1.end().await.ok();
    receiver_connection.0.close().await.ok();
}

#[path = "cluster_proxy.rs"]
mod proxy;

#[path = "cluster_spread.rs"]
mod spread;
