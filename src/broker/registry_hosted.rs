//! A registry whose entities run where their placement group is led: a cluster member of
//! the spread layout (`[cluster] placement = "spread"`, `docs/cluster.md`). Every member
//! keeps a slot for every entity; each slot's handle is a router that carries the
//! entity's commands to the group's actors on this node while this node leads the group,
//! and to the node that leads it otherwise (through `cluster::remote`).
//!
//! A group this node comes to lead starts from its log, as a single node's entities do
//! after a restart: once every entry of the group's log is committed, its records are
//! replayed and its actors (a queue's, or a topic's task with its subscriptions') start
//! under the new leadership. When the leadership ends, they are aborted at once (nothing
//! they still hold counts: the new leader decides from the log), and every receiver
//! attached through this node is told to attach again ([`Notification::Moved`]; a session
//! receiver loses its session), as happens when a leader dies.
//!
//! The namespace follows the one the cluster committed ([`Hosting::follow`]); a change made
//! here (on the metadata group's leader, where requests that change it are relayed) is
//! stored through the metadata group. A group whose entities' definitions change starts
//! again from its log where it is led.
//!
//! A local group answers only while its leader's lease holds: a command or a delivery waits
//! for it (up to [`LEASE_WAIT`]), then the command is answered with a retryable timeout and
//! the delivery dropped, so a deposed leader that does not know it yet never
//! answers from state a newer leader has changed.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::{Description, Registry, RemoteEntities, key, spawn_entity_in};
use crate::broker::entity::{Command, EntityHandle, Notification, NotificationSender};
use crate::broker::leadership::{Leadership, Lease};
use crate::broker::lifecycle::Lifecycle;
use crate::broker::storage::Storage;
use crate::broker::topic::{self, SubscriptionEntry, TopicCommand, TopicHandle};
use crate::broker::types::{EntityError, ReceiverId};
use crate::clock::Clock;
use crate::config::Config;
type GroupChanges = HashMap<String, Vec<crate::broker::entity::state::Change>>;

/// How long a command waits for its group to have a leader before it is answered with a
/// retryable timeout.
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// How long a command or a delivery of a local group waits for its leader's lease to hold
/// again.
const LEASE_WAIT: Duration = Duration::from_secs(2);

/// How long a group that starts here waits for its first lease before it serves anyway
/// (commands then wait for the lease one by one).
const FIRST_LEASE_WAIT: Duration = Duration::from_secs(1);

/// How long a group whose definitions changed holds its commands back before its tasks
/// stop and start again.
const RESTART_QUIESCE: Duration = Duration::from_millis(200);

/// A router's inbox capacity (the local actor's inbox bounds the rest).
const ROUTER_CAPACITY: usize = 256;

/// What a hosted registry needs of the cluster: who leads each group, this node's part
/// in a group it leads, and handles that reach the other nodes' entities.
pub trait GroupPlacement: Send + Sync + 'static {
    /// This node's id.
    fn node(&self) -> u64;
    /// Each running group's leadership as this node knows it.
    fn leaders(&self) -> watch::Receiver<crate::cluster::Leaders>;
    /// Starts `group` on this node: it takes part in the group's elections and replication.
    fn start_group(&self, group: &str) -> BoxFuture<'static, Result<(), String>>;
    /// Resolves true once this node leads `group` in `leadership` with every entry of the
    /// group's log committed; false when that leadership ends first.
    fn confirm(&self, group: &str, leadership: Leadership) -> BoxFuture<'static, bool>;
    /// Keeps `lease` extended while this node leads `group` in `leadership` and a majority
    /// acknowledges it; revokes it when the leadership ends.
    fn hold_lease(
        &self,
        group: &str,
        lease: Arc<Lease>,
        leadership: Leadership,
    ) -> BoxFuture<'static, ()>;
    /// The records of `group`'s entities in this node's log.
    fn replay(&self, group: &str) -> Result<GroupChanges, String>;
    /// Handles that reach `node`'s entities (its routers' peer inboxes).
    fn remote(&self, node: u64) -> RemoteEntities;
}

/// Where a group's commands go now.
#[derive(Clone)]
enum Route {
    /// No leader known (or this node is taking over): commands wait.
    Waiting,
    /// This node leads: its own tasks, while `lease` holds.
    Local(Arc<LocalGroup>),
    /// Another node leads.
    Remote(u64),
}

impl Route {
    /// Whether two routes send commands to the same place.
    fn same(&self, other: &Route) -> bool {
        match (self, other) {
            (Route::Waiting, Route::Waiting) => true,
            (Route::Local(one), Route::Local(other)) => Arc::ptr_eq(one, other),
            (Route::Remote(one), Route::Remote(other)) => one == other,
            _ => false,
        }
    }
}

/// Sets a group's route, telling its routers only when it changes (each change detaches
/// the receivers attached through them): other groups' leaderships changing, or this
/// group's leader staying where it was, moves nothing.
fn set_route(route: &watch::Sender<Route>, next: Route) {
    route.send_if_modified(|current| {
        if current.same(&next) {
            return false;
        }
        *current = next;
        true
    });
}

/// A group's tasks on the node that leads it.
struct LocalGroup {
    entities: HashMap<String, EntityHandle>,
    topic: Option<TopicHandle>,
    lease: Arc<Lease>,
}

/// The routers of a hosted registry, by path: their peer inboxes, which other members'
/// commands reach (answered only while this node leads the entity's group).
#[derive(Default)]
pub struct Hosted {
    entities: std::sync::Mutex<HashMap<String, EntityHandle>>,
    topics: std::sync::Mutex<HashMap<String, TopicHandle>>,
}

impl Hosted {
    /// The handle another member's commands for `path` take here.
    pub fn peer_entity(&self, path: &str) -> Option<EntityHandle> {
        lock(&self.entities).get(&key(path)).cloned()
    }

    /// The handle another member's topic commands for `path` take here.
    pub fn peer_topic(&self, path: &str) -> Option<TopicHandle> {
        lock(&self.topics).get(&key(path)).cloned()
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// The placement group of a registry key.
fn group_key(path: &str) -> String {
    crate::cluster::group_of(&key(path)).to_string()
}

/// What a hosted registry keeps to follow its namespace: its routers' factories, and each
/// placement group's route and definitions.
pub struct Hosting {
    /// Makes the routers of new entities (and starts their group's host).
    remote: RemoteEntities,
    groups: Arc<std::sync::Mutex<HashMap<String, GroupHost>>>,
}

/// A placement group as its host task follows it.
struct GroupHost {
    route: watch::Sender<Route>,
    /// Its tasks while this node leads it; changed together with `route` (under this lock)
    /// by the host, and by [`Hosting::pause`].
    running: Running,
    /// The group's entities' definitions as last followed; a change restarts the group's
    /// tasks where it is led.
    definitions: watch::Sender<Vec<Description>>,
}

/// A group's tasks here, while this node leads it.
type Running = Arc<std::sync::Mutex<Option<Arc<LocalGroup>>>>;

/// A group led here whose commands wait ([`Hosting::pause`]); dropped, they go on to the
/// group's tasks here again if this node still leads it.
pub struct Paused {
    route: watch::Sender<Route>,
    running: Running,
}

impl Drop for Paused {
    fn drop(&mut self) {
        let running = lock(&self.running);
        if let Some(local) = running.as_ref() {
            set_route(&self.route, Route::Local(local.clone()));
        }
    }
}

impl Hosting {
    /// Holds the commands for `group` (led here) back, and detaches the receivers attached
    /// to it through this node: what its tasks are doing finishes and is answered before its
    /// leadership is handed over, so that no client is left without the outcome of a
    /// settlement that was stored. `None` when this node does not run the group.
    pub fn pause(&self, group: &str) -> Option<Paused> {
        let groups = lock(&self.groups);
        let host = groups.get(group)?;
        let running = lock(&host.running);
        running.as_ref()?;
        set_route(&host.route, Route::Waiting);
        drop(running);
        Some(Paused {
            route: host.route.clone(),
            running: host.running.clone(),
        })
    }

    /// [`Hosting::follow`] for the namespace the cluster committed last, read once the
    /// registry's own changes (which write it) are not under way: a namespace read before
    /// one of them would undo it.
    pub async fn follow_committed(
        &self,
        registry: &Registry,
        latest: impl FnOnce() -> Result<Config, String>,
    ) {
        let _guard = registry.changes.lock().await;
        match latest() {
            Ok(namespace) => self.follow(registry, &namespace),
            Err(error) => {
                tracing::error!("the cluster's namespace changes cannot be served here: {error}")
            }
        }
    }

    /// Makes `registry`'s entities `namespace`'s: new entities get routers (and their
    /// groups a host), those gone leave; a group whose entities' definitions changed starts
    /// again from its log where it is led (its locks are released).
    pub fn follow(&self, registry: &Registry, namespace: &Config) {
        registry.follow(namespace, &self.remote);
        let mut wanted: HashMap<String, Vec<Description>> = HashMap::new();
        for description in super::remote::descriptions(namespace) {
            wanted
                .entry(group_key(&description.path()))
                .or_default()
                .push(description);
        }
        let groups = lock(&self.groups);
        for (group, host) in groups.iter() {
            let mut now = wanted.remove(group).unwrap_or_default();
            now.sort_by_key(Description::path);
            host.definitions.send_if_modified(|definitions| {
                if *definitions == now {
                    return false;
                }
                *definitions = now;
                true
            });
        }
    }
}

impl Registry {
    /// A registry of `namespace`'s entities (the configuration file `seed` with the
    /// cluster's run-time changes laid over it) whose groups run where `placement` says
    /// they are led: here, written through `storage`, or on another member. Returns the
    /// registry and the peer inboxes of its routers.
    pub fn start_hosted(
        namespace: &Config,
        seed: &Config,
        clock: Clock,
        codec: topic::TopicCodec,
        storage: Storage,
        placement: Arc<dyn GroupPlacement>,
    ) -> (Arc<Registry>, Arc<Hosted>) {
        let hosted = Arc::new(Hosted::default());
        let groups: Arc<std::sync::Mutex<HashMap<String, GroupHost>>> = Arc::default();
        // The registry the hosts run the groups' entities in, once it exists.
        let home: Arc<std::sync::OnceLock<Weak<Registry>>> = Arc::default();
        let route_of = {
            let (groups, home, placement) = (groups.clone(), home.clone(), placement.clone());
            let storage = storage.clone();
            move |path: &str| -> watch::Receiver<Route> {
                let group = group_key(path);
                lock(&groups)
                    .entry(group.clone())
                    .or_insert_with(|| {
                        let route = watch::channel(Route::Waiting).0;
                        let definitions = watch::channel(Vec::new()).0;
                        let running = Running::default();
                        tokio::spawn(host_group(
                            group,
                            home.clone(),
                            storage.clone(),
                            placement.clone(),
                            (route.clone(), running.clone(), definitions.subscribe()),
                        ));
                        GroupHost {
                            route,
                            running,
                            definitions,
                        }
                    })
                    .route
                    .subscribe()
            }
        };
        let remote = RemoteEntities {
            entity: {
                let (hosted, placement, route_of) =
                    (hosted.clone(), placement.clone(), route_of.clone());
                Arc::new(move |path| {
                    let (handle, peer) = route_entity(path, route_of(path), placement.clone());
                    lock(&hosted.entities).insert(key(path), peer);
                    handle
                })
            },
            topic: {
                let (hosted, placement) = (hosted.clone(), placement.clone());
                Arc::new(move |path| {
                    let (handle, peer) = route_topic(path, route_of(path), placement.clone());
                    lock(&hosted.topics).insert(key(path), peer);
                    handle
                })
            },
        };
        // Its storage stores the namespace's changes (through the metadata group); the
        // entities' own writes go through their groups' tasks.
        let registry = Registry::empty(
            (namespace, seed),
            super::Spawner {
                clock,
                codec,
                on_idle: mpsc::unbounded_channel().0,
                storage: Some(storage.clone()),
            },
        );
        let hosting = Arc::new(Hosting { remote, groups });
        hosting.follow(&registry, namespace);
        registry.ready.send_replace(true);
        let _ = registry.hosting.set(hosting);
        let _ = home.set(Arc::downgrade(&registry));
        (registry, hosted)
    }
}

impl Registry {
    /// Starts the tasks of `group`'s entities as its leader, from `records`.
    fn start_local(
        self: &Arc<Self>,
        group: &str,
        mut records: GroupChanges,
        storage: &Storage,
        (leadership, lifecycle): (Leadership, &Lifecycle),
    ) -> Result<(HashMap<String, EntityHandle>, Option<TopicHandle>), String> {
        let spawner = super::Spawner {
            clock: self.spawner.clock,
            codec: self.spawner.codec.clone(),
            // Idle deletion is a namespace change, which this layout does not make yet.
            on_idle: mpsc::unbounded_channel().0,
            storage: Some(storage.clone()),
        };
        let mut recovered = |path: &str| records.remove(&key(path)).unwrap_or_default();
        let slots: Vec<_> = self
            .slots()
            .into_iter()
            .filter(|slot| group_key(&slot.description.path()) == group)
            .collect();
        let mut entities = HashMap::new();
        let mut topic_config = None;
        let mut subscriptions = Vec::new();
        let created_at = spawner.clock.now().0;
        for slot in slots {
            match slot.description {
                Description::Queue(queue) => {
                    let settings = super::queue_settings(&queue);
                    let changes = recovered(&queue.name);
                    let run = (leadership, lifecycle);
                    let (handle, _) = spawn_entity_in(settings, &spawner, self, changes, run);
                    entities.insert(key(&queue.name), handle);
                }
                Description::Topic(topic) => topic_config = Some(topic),
                Description::Subscription {
                    topic,
                    subscription,
                } => subscriptions.push((topic, subscription)),
            }
        }
        if let Some(topic_config) = topic_config {
            let mut entries = Vec::new();
            for (_, subscription) in subscriptions {
                let settings = super::subscription_settings(&topic_config, &subscription);
                let path = settings.path.clone();
                let rules = topic::compile_rules(&subscription.rules, created_at)
                    .map_err(|error| format!("subscription '{path}': {error}"))?;
                let changes = recovered(&path);
                let run = (leadership, lifecycle);
                let (handle, _) = spawn_entity_in(settings, &spawner, self, changes, run);
                entities.insert(key(&path), handle.clone());
                entries.push(SubscriptionEntry {
                    name: subscription.name.clone(),
                    handle,
                    rules,
                    dead_letter_on_filter_errors: subscription
                        .dead_lettering_on_filter_evaluation_exceptions,
                    requires_session: subscription.requires_session,
                });
            }
            let durability = Some((
                storage.clone(),
                key(&topic_config.name),
                recovered(&topic_config.name),
            ));
            let handle = topic::spawn(
                &topic_config,
                entries,
                spawner.clock,
                spawner.on_idle.clone(),
                spawner.codec.clone(),
                durability,
                lifecycle,
            );
            return Ok((entities, Some(handle)));
        }
        Ok((entities, None))
    }
}

/// Follows `group`'s leadership for as long as the registry lives: routes its commands to
/// the node that leads it, and runs its entities while this node does.
async fn host_group(
    group: String,
    home: Arc<std::sync::OnceLock<Weak<Registry>>>,
    storage: Storage,
    placement: Arc<dyn GroupPlacement>,
    (route, running, mut definitions): (
        watch::Sender<Route>,
        Running,
        watch::Receiver<Vec<Description>>,
    ),
) {
    let own = placement.node();
    let mut leaders = placement.leaders();
    // Started until it is (the cluster may not run yet): every member takes part.
    loop {
        match placement.start_group(&group).await {
            Ok(()) => break,
            Err(error) => {
                tracing::warn!(group, %error, "cannot start the placement group; trying again");
                if route.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    // The registry is set once it holds every entity of the start.
    let registry = loop {
        if let Some(registry) = home.get() {
            break registry.clone();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    loop {
        if registry.strong_count() == 0 {
            return;
        }
        let leadership = leaders.borrow_and_update().get(&group).copied();
        match leadership {
            None => {
                set_route(&route, Route::Waiting);
            }
            Some(leadership) if leadership.node != own => {
                set_route(&route, Route::Remote(leadership.node));
            }
            Some(leadership) => {
                set_route(&route, Route::Waiting);
                let run = GroupRun {
                    registry: &registry,
                    storage: &storage,
                    placement: &placement,
                    route: &route,
                    running: &running,
                };
                lead_group(&group, leadership, run, &mut definitions).await;
                set_route(&route, Route::Waiting);
                continue;
            }
        }
        if leaders.changed().await.is_err() {
            return;
        }
    }
}

/// What a group's host lends [`lead_group`].
struct GroupRun<'a> {
    registry: &'a Weak<Registry>,
    storage: &'a Storage,
    placement: &'a Arc<dyn GroupPlacement>,
    route: &'a watch::Sender<Route>,
    running: &'a Running,
}

/// Runs `group`'s entities here while this node leads it in `leadership`.
async fn lead_group(
    group: &str,
    leadership: Leadership,
    GroupRun {
        registry,
        storage,
        placement,
        route,
        running,
    }: GroupRun<'_>,
    definitions: &mut watch::Receiver<Vec<Description>>,
) {
    definitions.borrow_and_update();
    let mut leaders = placement.leaders();
    let ended = move |leaders: &crate::cluster::Leaders| leaders.get(group) != Some(&leadership);
    if !placement.confirm(group, leadership).await {
        let _ = leaders.wait_for(ended).await;
        return;
    }
    let lease = Arc::new(Lease::new());
    let holding = tokio::spawn(placement.hold_lease(group, lease.clone(), leadership));
    let started = std::time::Instant::now();
    let begun = async {
        let records = placement.replay(group)?;
        let registry = registry
            .upgrade()
            .ok_or_else(|| "the broker stopped".to_string())?;
        let lifecycle = Lifecycle::default();
        let (entities, topic) =
            registry.start_local(group, records, storage, (leadership, &lifecycle))?;
        Ok::<_, String>((entities, topic, lifecycle))
    };
    let (entities, topic, lifecycle) = match begun.await {
        Ok(begun) => begun,
        Err(error) => {
            tracing::error!(group, %error, "cannot start the placement group's entities here");
            holding.abort();
            let _ = leaders.wait_for(ended).await;
            return;
        }
    };
    let paths: Vec<String> = entities.keys().cloned().collect();
    let wait = tokio::time::Instant::now() + FIRST_LEASE_WAIT;
    while !lease.held() && tokio::time::Instant::now() < wait {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tracing::info!(
        group,
        term = leadership.term,
        "this node leads the placement group: {} entities started in {:.1} ms",
        paths.len() + usize::from(topic.is_some()),
        started.elapsed().as_secs_f64() * 1000.0
    );
    {
        let local = Arc::new(LocalGroup {
            entities,
            topic,
            lease: lease.clone(),
        });
        let mut running = lock(running);
        *running = Some(local.clone());
        set_route(route, Route::Local(local));
    }
    let changed = tokio::select! {
        _ = leaders.wait_for(ended) => false,
        changed = definitions.changed() => changed.is_ok(),
    };
    if changed {
        tracing::info!(
            group,
            term = leadership.term,
            "the placement group's entities changed: they start again here"
        );
        // The tasks finish what they are storing (answered) before they stop: the next
        // ones start from the log as it then is, in the same term.
        set_route(route, Route::Waiting);
        tokio::time::sleep(RESTART_QUIESCE).await;
    } else {
        tracing::info!(
            group,
            term = leadership.term,
            "this node no longer leads the placement group: its entities stop"
        );
    }
    {
        let mut running = lock(running);
        *running = None;
        set_route(route, Route::Waiting);
    }
    lifecycle.abort();
    holding.abort();
    lease.revoke();
    for path in paths {
        storage.unregister(&path);
    }
}

/// The registry's handle for a queue or subscription at `path`, and its peer inbox.
fn route_entity(
    path: &str,
    route: watch::Receiver<Route>,
    placement: Arc<dyn GroupPlacement>,
) -> (EntityHandle, EntityHandle) {
    let (commands, inbox) = mpsc::channel(ROUTER_CAPACITY);
    let (peer_commands, peer_inbox) = mpsc::channel(ROUTER_CAPACITY);
    tokio::spawn(EntityRouter::run(
        key(path),
        route,
        placement,
        inbox,
        peer_inbox,
    ));
    (
        EntityHandle::from_channel(path, commands),
        EntityHandle::from_channel(path, peer_commands),
    )
}

/// A receiver attached through a router: where to tell it that its entity moved.
struct Attached {
    sink: NotificationSender,
    session: bool,
}

struct EntityRouter {
    path: String,
    placement: Arc<dyn GroupPlacement>,
    attached: HashMap<ReceiverId, Attached>,
}

impl EntityRouter {
    async fn run(
        path: String,
        mut route: watch::Receiver<Route>,
        placement: Arc<dyn GroupPlacement>,
        mut inbox: mpsc::Receiver<Command>,
        mut peer_inbox: mpsc::Receiver<Command>,
    ) {
        let mut router = EntityRouter {
            path,
            placement,
            attached: HashMap::new(),
        };
        let mut current = route.borrow_and_update().clone();
        let mut waiting_since = tokio::time::Instant::now();
        // Whether the registry's inbox, and the peer inbox, may still bring commands (a
        // stopping member's registry goes before the other members stop sending).
        let mut open = (true, true);
        loop {
            let waiting = matches!(current, Route::Waiting);
            tokio::select! {
                biased;
                changed = route.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    current = route.borrow_and_update().clone();
                    waiting_since = tokio::time::Instant::now();
                    router.moved();
                }
                () = tokio::time::sleep_until(waiting_since + LEADER_WAIT), if waiting => {
                    // No leader for a long while: what waits is answered (retryable).
                    let error = router.no_leader();
                    while let Ok(command) = inbox.try_recv() {
                        command.refuse_with(error.clone());
                    }
                    while let Ok(command) = peer_inbox.try_recv() {
                        command.refuse_with(error.clone());
                    }
                    waiting_since = tokio::time::Instant::now();
                }
                command = inbox.recv(), if !waiting && open.0 => match command {
                    Some(command) => router.carry(command, &current, false).await,
                    None => open.0 = false,
                },
                command = peer_inbox.recv(), if !waiting && open.1 => match command {
                    Some(command) => router.carry(command, &current, true).await,
                    None => open.1 = false,
                },
            }
            // The registry's handles and the peer inbox's are both gone: nothing can come.
            if !open.0 && !open.1 {
                break;
            }
        }
        router.moved();
    }

    fn no_leader(&self) -> EntityError {
        EntityError::Timeout(format!(
            "The placement group of '{}' has no leader yet; try again.",
            self.path
        ))
    }

    /// The entity's group moved: every receiver attached through here attaches again.
    fn moved(&mut self) {
        for (receiver, attached) in self.attached.drain() {
            let notification = if attached.session {
                Notification::SessionLost { receiver }
            } else {
                Notification::Moved { receiver }
            };
            let _ = attached.sink.send(notification);
        }
    }

    async fn carry(&mut self, command: Command, route: &Route, from_peer: bool) {
        match &command {
            Command::AttachReceiver { receiver, sink, .. } => {
                self.attached.insert(
                    *receiver,
                    Attached {
                        sink: sink.clone(),
                        session: false,
                    },
                );
            }
            Command::AttachSessionReceiver { receiver, sink, .. } => {
                self.attached.insert(
                    *receiver,
                    Attached {
                        sink: sink.clone(),
                        session: true,
                    },
                );
            }
            Command::DetachReceiver { receiver } => {
                self.attached.remove(receiver);
            }
            _ => {}
        }
        match route {
            Route::Waiting => command.refuse_with(self.no_leader()),
            Route::Remote(node) => {
                if from_peer {
                    // Another member believes this node leads: it learns otherwise and
                    // tries again (never carried on, so commands cannot circle).
                    command.refuse_with(EntityError::Timeout(format!(
                        "'{}' is not led by this node (node {node} leads it); try again.",
                        self.path
                    )));
                    return;
                }
                let handle = (self.placement.remote(*node).entity)(&self.path);
                if let Err((_, command)) = handle.send_or_give_back(command).await {
                    command.refuse_with(EntityError::Timeout(format!(
                        "node {node}, which leads '{}', cannot be reached; try again.",
                        self.path
                    )));
                }
            }
            Route::Local(local) => {
                if !lease_comes_back(&local.lease).await {
                    command.refuse_with(EntityError::Timeout(format!(
                        "this node's lease on '{}' does not hold: it may no longer lead it; try again.",
                        self.path
                    )));
                    return;
                }
                let Some(handle) = local.entities.get(&self.path) else {
                    command.refuse_with(EntityError::NotFound(self.path.clone()));
                    return;
                };
                let command = gate_deliveries(command, &local.lease);
                if let Err((_, command)) = handle.send_or_give_back(command).await {
                    command.refuse_with(EntityError::Timeout(format!(
                        "'{}' stopped on this node; try again.",
                        self.path
                    )));
                }
            }
        }
    }
}

/// Whether `lease` holds now or comes back within [`LEASE_WAIT`] (a leader slow to hear
/// from its majority on a loaded machine; a deposed one never gets it back).
async fn lease_comes_back(lease: &Lease) -> bool {
    if lease.held() {
        return true;
    }
    let deadline = tokio::time::Instant::now() + LEASE_WAIT;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
        if lease.held() {
            return true;
        }
    }
    false
}

/// A receiver's attach with its deliveries passed on only while `lease` holds.
fn gate_deliveries(command: Command, lease: &Arc<Lease>) -> Command {
    match command {
        Command::AttachReceiver {
            receiver,
            sub_queue,
            mode,
            sink,
        } => Command::AttachReceiver {
            receiver,
            sub_queue,
            mode,
            sink: gated(sink, lease.clone()),
        },
        Command::AttachSessionReceiver {
            receiver,
            mode,
            session_id,
            wait,
            sink,
        } => Command::AttachSessionReceiver {
            receiver,
            mode,
            session_id,
            wait,
            sink: gated(sink, lease.clone()),
        },
        other => other,
    }
}

/// A sink whose notifications reach `sink` only while `lease` holds (each waits up to
/// [`LEASE_WAIT`] for it, then the rest are dropped: the receiver is moved meanwhile).
fn gated(sink: NotificationSender, lease: Arc<Lease>) -> NotificationSender {
    let (gate, mut passing) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(notification) = passing.recv().await {
            if !lease_comes_back(&lease).await {
                return;
            }
            if sink.send(notification).is_err() {
                return;
            }
        }
    });
    gate
}

/// The registry's handle for a topic at `path`, and its peer inbox.
fn route_topic(
    path: &str,
    route: watch::Receiver<Route>,
    placement: Arc<dyn GroupPlacement>,
) -> (TopicHandle, TopicHandle) {
    let (commands, inbox) = mpsc::channel(ROUTER_CAPACITY);
    let (peer_commands, peer_inbox) = mpsc::channel(ROUTER_CAPACITY);
    tokio::spawn(run_topic_router(
        key(path),
        route,
        placement,
        inbox,
        peer_inbox,
    ));
    (
        TopicHandle::from_channel(path, commands),
        TopicHandle::from_channel(path, peer_commands),
    )
}

async fn run_topic_router(
    path: String,
    mut route: watch::Receiver<Route>,
    placement: Arc<dyn GroupPlacement>,
    mut inbox: mpsc::Receiver<TopicCommand>,
    mut peer_inbox: mpsc::Receiver<TopicCommand>,
) {
    let no_leader = || {
        EntityError::Timeout(format!(
            "The placement group of '{path}' has no leader yet; try again."
        ))
    };
    let mut current = route.borrow_and_update().clone();
    let mut waiting_since = tokio::time::Instant::now();
    // As in `EntityRouter::run`.
    let mut open = (true, true);
    loop {
        let waiting = matches!(current, Route::Waiting);
        let (command, from_peer) = tokio::select! {
            biased;
            changed = route.changed() => {
                if changed.is_err() {
                    return;
                }
                current = route.borrow_and_update().clone();
                waiting_since = tokio::time::Instant::now();
                continue;
            }
            () = tokio::time::sleep_until(waiting_since + LEADER_WAIT), if waiting => {
                while let Ok(command) = inbox.try_recv() {
                    command.refuse_with(no_leader());
                }
                while let Ok(command) = peer_inbox.try_recv() {
                    command.refuse_with(no_leader());
                }
                waiting_since = tokio::time::Instant::now();
                continue;
            }
            command = inbox.recv(), if !waiting && open.0 => (command, false),
            command = peer_inbox.recv(), if !waiting && open.1 => (command, true),
        };
        let Some(command) = command else {
            if from_peer {
                open.1 = false;
            } else {
                open.0 = false;
            }
            if !open.0 && !open.1 {
                return;
            }
            continue;
        };
        match &current {
            Route::Waiting => command.refuse_with(no_leader()),
            Route::Remote(node) if from_peer => command.refuse_with(EntityError::Timeout(format!(
                "'{path}' is not led by this node (node {node} leads it); try again."
            ))),
            Route::Remote(node) => {
                let handle = (placement.remote(*node).topic)(&path);
                if let Err((_, command)) = handle.send_or_give_back(command).await {
                    command.refuse_with(EntityError::Timeout(format!(
                        "node {node}, which leads '{path}', cannot be reached; try again."
                    )));
                }
            }
            Route::Local(local) => {
                let held = lease_comes_back(&local.lease).await;
                let Some(handle) = local.topic.as_ref().filter(|_| held) else {
                    command.refuse_with(EntityError::Timeout(format!(
                        "this node's lease on '{path}' does not hold: it may no longer lead it; try again."
                    )));
                    continue;
                };
                if let Err((_, command)) = handle.send_or_give_back(command).await {
                    command.refuse_with(EntityError::Timeout(format!(
                        "'{path}' stopped on this node; try again."
                    )));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "registry_hosted_tests.rs"]
mod tests;
