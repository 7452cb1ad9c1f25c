//! A hosted registry's routers against a placement the test controls: a group led here runs
//! its entities from its log, one led elsewhere is carried there, and a move detaches what
//! was attached.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::broker::entity::{Reply, ReplyTo};
use crate::broker::message::Message;
use crate::broker::storage::MemoryLog;
use crate::broker::types::{SequenceNumber, SubQueue};
use crate::cluster::Leaders;

/// A placement whose leaderships the test sets; other nodes' commands land in channels the
/// test reads.
struct TestPlacement {
    leaders: watch::Sender<Leaders>,
    log: Arc<MemoryLog>,
    /// The lease of each leadership this node holds, by group.
    leases: Mutex<HashMap<String, Arc<Lease>>>,
    /// The channels of the handles made for other nodes' entities: (node, path, channel).
    carried: Carried,
}

type Carried = Arc<Mutex<Vec<(u64, String, mpsc::Receiver<Command>)>>>;

const OWN: u64 = 1;

impl GroupPlacement for TestPlacement {
    fn node(&self) -> u64 {
        OWN
    }

    fn leaders(&self) -> watch::Receiver<Leaders> {
        self.leaders.subscribe()
    }

    fn start_group(&self, _group: &str) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn confirm(&self, group: &str, leadership: Leadership) -> BoxFuture<'static, bool> {
        let leads = self.leaders.borrow().get(group) == Some(&leadership);
        Box::pin(async move { leads })
    }

    fn hold_lease(
        &self,
        group: &str,
        lease: Arc<Lease>,
        _leadership: Leadership,
    ) -> BoxFuture<'static, ()> {
        lease.extend_to(std::time::Instant::now() + Duration::from_secs(3600));
        lock(&self.leases).insert(group.to_string(), lease);
        Box::pin(std::future::pending())
    }

    fn replay(&self, group: &str) -> Result<GroupChanges, String> {
        Ok(self
            .log
            .recovered()
            .entities
            .into_iter()
            .filter(|(entity, _)| crate::cluster::group_of(entity) == group)
            .collect())
    }

    fn remote(&self, node: u64) -> RemoteEntities {
        let carried = self.carried.clone();
        RemoteEntities {
            entity: Arc::new(move |path| {
                let (sender, receiver) = mpsc::channel(16);
                lock(&carried).push((node, path.to_string(), receiver));
                EntityHandle::from_channel(path, sender)
            }),
            topic: Arc::new(move |path| TopicHandle::from_channel(path, mpsc::channel(16).0)),
        }
    }
}

fn leadership(node: u64, term: u64) -> Leadership {
    Leadership { node, term }
}

/// A hosted registry of queues `a` and `b`, `a` led here in term 1 and `b` by node 2.
async fn hosted() -> (Arc<Registry>, Arc<Hosted>, Arc<TestPlacement>) {
    let config = Config::from_toml_str(
        "[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n",
        "test",
    )
    .expect("valid");
    let leaders = Leaders::from([
        ("a".to_string(), leadership(OWN, 1)),
        ("b".to_string(), leadership(2, 1)),
    ]);
    let log = Arc::new(MemoryLog::default());
    let placement = Arc::new(TestPlacement {
        leaders: watch::channel(leaders).0,
        log: log.clone(),
        leases: Mutex::default(),
        carried: Carried::default(),
    });
    let (registry, hosted) = Registry::start_hosted(
        &config,
        &config,
        Clock::system(),
        crate::broker::topic::TopicCodec {
            rewrite: Arc::new(|message, _, _| message.clone()),
            decode_properties: Arc::new(|_| Vec::new()),
            evaluation_budget: crate::broker::filter::DEFAULT_EVALUATION_BUDGET,
        },
        Storage::new(log),
        placement.clone(),
    );
    (registry, hosted, placement)
}

fn queue(registry: &Registry, path: &str) -> EntityHandle {
    match registry.lookup(path) {
        Some(crate::broker::registry::Entity::Queue(handle)) => handle,
        other => panic!("{path} is a queue: {other:?}"),
    }
}

async fn send(handle: &EntityHandle, body: &str) -> Result<Reply, EntityError> {
    let (reply, answer) = ReplyTo::oneshot();
    let message = Message::with_body(&Bytes::from(body.as_bytes().to_vec()));
    handle
        .send(Command::Send {
            messages: vec![message].into(),
            reply: Some(reply),
        })
        .await?;
    tokio::time::timeout(
        Duration::from_secs(5),
        ReplyTo::wait(answer, || EntityError::NotFound(handle.path.to_string())),
    )
    .await
    .expect("answered")
}

async fn peek(handle: &EntityHandle) -> Result<Reply, EntityError> {
    let (reply, answer) = ReplyTo::oneshot();
    handle
        .send(Command::Peek {
            sub_queue: SubQueue::Main,
            from: SequenceNumber(0),
            count: 10,
            session_id: None,
            reply,
        })
        .await?;
    tokio::time::timeout(
        Duration::from_secs(5),
        ReplyTo::wait(answer, || EntityError::NotFound(handle.path.to_string())),
    )
    .await
    .expect("answered")
}

fn peeked(reply: Result<Reply, EntityError>) -> usize {
    match reply {
        Ok(Reply::Messages(messages)) => messages.len(),
        other => panic!("peeked messages: {other:?}"),
    }
}

/// Waits until `condition` holds (the routers follow the leaderships asynchronously).
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until a command that `wanted` accepts reaches node `node`'s handle for `path`.
async fn carried(
    placement: &TestPlacement,
    (node, path): (u64, &str),
    wanted: impl Fn(&Command) -> bool,
) {
    until(&format!("a command reaches node {node}'s {path}"), || {
        lock(&placement.carried)
            .iter_mut()
            .any(|(to, at, channel)| {
                *to == node
                    && at == path
                    && channel.try_recv().is_ok_and(|command| wanted(&command))
            })
    })
    .await;
}

/// Waits until `placement` holds the lease of `group` (the group started here).
async fn led_here(placement: &TestPlacement, group: &str) -> Arc<Lease> {
    until(&format!("{group} starts here"), || {
        lock(&placement.leases).contains_key(group)
    })
    .await;
    lock(&placement.leases)[group].clone()
}

#[tokio::test]
async fn a_group_led_here_runs_from_its_log_and_one_led_elsewhere_is_carried_there() {
    let (registry, _hosted, placement) = hosted().await;
    led_here(&placement, "a").await;
    // `a` runs here: its send is stored in this node's log.
    let a = queue(&registry, "a");
    let sent = send(&a, "one").await;
    assert!(matches!(sent, Ok(Reply::SequenceNumbers(_))), "{sent:?}");
    assert!(placement.log.recovered().entities.contains_key("a"));
    assert_eq!(peeked(peek(&a).await), 1);
    // `b` is node 2's: its command is carried there, untouched.
    let b = queue(&registry, "b");
    let (reply, _answer) = ReplyTo::oneshot();
    b.send(Command::Send {
        messages: vec![Message::with_body(&Bytes::from_static(b"two"))].into(),
        reply: Some(reply),
    })
    .await
    .expect("taken");
    carried(&placement, (2, "b"), |command| {
        matches!(command, Command::Send { .. })
    })
    .await;
    assert!(!placement.log.recovered().entities.contains_key("b"));
    registry.shut_down().await;
}

#[tokio::test]
async fn a_group_that_moves_away_detaches_its_receivers_and_comes_back_from_its_log() {
    let (registry, hosted, placement) = hosted().await;
    led_here(&placement, "a").await;
    let a = queue(&registry, "a");
    send(&a, "kept").await.expect("stored");
    let (sink, mut notifications) = mpsc::unbounded_channel();
    a.send(Command::AttachReceiver {
        receiver: ReceiverId(9),
        sub_queue: SubQueue::Main,
        mode: crate::broker::types::ReceiveMode::PeekLock,
        sink,
    })
    .await
    .expect("attached");
    // No credit given: nothing is delivered yet.

    // Node 2 is elected for `a`: the receiver is told to attach again, and another member's
    // command for `a` reaching this node is refused as retryable (never carried on).
    placement.leaders.send_modify(|leaders| {
        leaders.insert("a".to_string(), leadership(2, 2));
    });
    let moved = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match notifications.recv().await {
                Some(Notification::Moved { receiver }) => return receiver,
                Some(_) => continue,
                None => panic!("the sink closed without a move"),
            }
        }
    })
    .await
    .expect("moved");
    assert_eq!(moved, ReceiverId(9));
    let from_peer = hosted.peer_entity("a").expect("a peer inbox");
    let refused = peek(&from_peer).await;
    assert!(
        matches!(&refused, Err(EntityError::Timeout(text)) if text.contains("node 2 leads it")),
        "{refused:?}"
    );
    // The registry's own handle carries it to node 2 now.
    let (reply, _answer) = ReplyTo::oneshot();
    a.send(Command::Peek {
        sub_queue: SubQueue::Main,
        from: SequenceNumber(0),
        count: 1,
        session_id: None,
        reply,
    })
    .await
    .expect("taken");
    carried(&placement, (2, "a"), |command| {
        matches!(command, Command::Peek { .. })
    })
    .await;

    // This node leads `a` again in term 3: its actor starts from the log, with the message.
    lock(&placement.leases).clear();
    placement.leaders.send_modify(|leaders| {
        leaders.insert("a".to_string(), leadership(OWN, 3));
    });
    led_here(&placement, "a").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match peek(&a).await {
            Ok(Reply::Messages(messages)) => {
                assert_eq!(messages.len(), 1, "the message sent in term 1");
                break;
            }
            other => {
                assert!(tokio::time::Instant::now() < deadline, "{other:?}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    registry.shut_down().await;
}

#[tokio::test]
async fn without_its_lease_a_group_led_here_answers_a_retryable_timeout() {
    let (registry, _hosted, placement) = hosted().await;
    let lease = led_here(&placement, "a").await;
    let a = queue(&registry, "a");
    assert_eq!(peeked(peek(&a).await), 0);
    lease.revoke();
    let refused = peek(&a).await;
    assert!(
        matches!(&refused, Err(EntityError::Timeout(text)) if text.contains("lease")),
        "{refused:?}"
    );
    let refused = send(&a, "late").await;
    assert!(
        matches!(refused, Err(EntityError::Timeout(_))),
        "{refused:?}"
    );
    assert!(
        !placement.log.recovered().entities.contains_key("a"),
        "nothing was stored without the lease"
    );
    registry.shut_down().await;
}

#[tokio::test]
async fn only_a_change_of_its_own_groups_leader_detaches_a_receiver() {
    let (registry, _hosted, placement) = hosted().await;
    led_here(&placement, "a").await;
    let b = queue(&registry, "b");
    let (sink, mut notifications) = mpsc::unbounded_channel();
    b.send(Command::AttachReceiver {
        receiver: ReceiverId(4),
        sub_queue: SubQueue::Main,
        mode: crate::broker::types::ReceiveMode::PeekLock,
        sink,
    })
    .await
    .expect("attached");
    carried(&placement, (2, "b"), |command| {
        matches!(command, Command::AttachReceiver { .. })
    })
    .await;
    // Another group's leadership changes, and `b`'s leader is elected again in a new
    // term on the same node: the receiver stays.
    placement.leaders.send_modify(|leaders| {
        leaders.insert("a".to_string(), leadership(3, 2));
        leaders.insert("b".to_string(), leadership(2, 2));
    });
    let quiet = tokio::time::timeout(Duration::from_millis(300), notifications.recv()).await;
    assert!(quiet.is_err(), "nothing told to the receiver: {quiet:?}");
    // `b` moves to node 3: the receiver attaches again.
    placement.leaders.send_modify(|leaders| {
        leaders.insert("b".to_string(), leadership(3, 3));
    });
    let moved = tokio::time::timeout(Duration::from_secs(5), notifications.recv())
        .await
        .expect("told");
    assert!(
        matches!(
            moved,
            Some(Notification::Moved {
                receiver: ReceiverId(4)
            })
        ),
        "{moved:?}"
    );
    registry.shut_down().await;
}
