//! Running as a member of a cluster (`[cluster]` with several members, `docs/cluster.md`).
//!
//! A member starts as a follower: it takes part in the cluster's Raft group and forwards
//! its clients' connections to the leader ([`crate::listener::forward`]). When it becomes
//! the leader, it replays the group's log from its disk and serves the namespace itself, as
//! a single node does after a restart. A leader that loses the leadership stops at once
//! (`deposed`: the binary executes itself again, so it comes back as a follower with every
//! lock released and every connection closed), because its entities' state may differ from
//! what the new leader commits.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::leadership::Lease;
use crate::cluster::{METADATA_GROUP, RaftLog};
use crate::config::Config;
use crate::listener::forward::{Forwarding, forward_until};
use crate::store::storage::{LogStorage, Recovery};
use crate::{Listeners, MemberRole, NamespaceStart};

/// How a member stops serving when it must (the binary: executing itself again; ending).
#[derive(Clone)]
pub struct Exits {
    /// The node led and no longer does: it must not go on serving.
    pub deposed: Arc<dyn Fn() + Send + Sync>,
    /// Its log failed, for the reason given.
    pub failed: Arc<dyn Fn(String) + Send + Sync>,
    /// Another member removed it from the cluster.
    pub removed: Arc<dyn Fn() + Send + Sync>,
}

/// Runs this node as a member of its cluster until `shutdown` turns true: a follower until
/// it leads, then the broker. `ready` is called once the listeners forward (or serve);
/// `exits` says what to do when it led and no longer does, and when its log fails.
pub async fn run_member(
    listeners: Listeners,
    config: &Config,
    storage: (LogStorage, Recovery),
    shutdown: watch::Receiver<bool>,
    ready: impl FnOnce(),
    reload: Option<super::reload::ReloadSource>,
    exits: Exits,
) -> Result<(), String> {
    let Exits {
        deposed,
        failed,
        removed,
    } = exits;
    let (store, recovery) = storage;
    let settings = &config.cluster;
    let (secret, peers) = member_start(config, &recovery).await?;
    // A spread cluster's entities each have a group of their own, which this layout never
    // reads.
    let spread = recovery
        .groups
        .iter()
        .filter(|(group, log)| group.as_str() != METADATA_GROUP && log.last.is_some())
        .count();
    if spread > 0 {
        return Err(format!(
            "the data directory {} was written by a single node or with placement = \"spread\" ({spread} entities' groups of their own, which this layout does not read): set placement = \"spread\" if it was, or start on an empty data directory",
            store.directory().display()
        ));
    }
    let metrics = crate::metrics::Metrics::new();
    // Every member must be configured with the same entities and keys: peers compare them
    // at each connection's handshake.
    let definitions = crate::config::render::definitions(config);
    let raft = RaftLog::new_member(
        store.clone(),
        &recovery.groups,
        settings.clone(),
        (secret.as_bytes(), &definitions),
        peers,
        crate::cluster::GroupLayout::One,
    )?;
    drop(recovery);
    raft.report_to(metrics.groups.clone());
    tokio::spawn(report_cluster(
        Arc::downgrade(&raft),
        metrics.cluster.clone(),
    ));
    raft.start_member()
        .await
        .map_err(|error| format!("cannot join the cluster: {error}"))?;
    watch_exits(&raft, &shutdown, failed, removed);
    for (id, stored, configured) in raft.member_address_differences() {
        tracing::warn!(
            node = id,
            "member {id}'s peer address in the cluster's log is {stored}, not the configured {configured}: the log's address is the one used (remove the member and add it again with `ferrobus cluster remove-node`/`add-node` to change it)"
        );
    }
    tracing::info!(
        node = settings.node_id,
        "member of a cluster of {} nodes; peers on {}",
        settings.members.len(),
        settings.address
    );
    ready();

    // With `client_routing = "proxy"`, plain AMQP clients are served here while another
    // node leads, their commands carried to it.
    let local = match settings.client_routing {
        crate::config::ClientRouting::Proxy => Some(super::proxying::LocalClients::start(
            &raft,
            config,
            metrics.clone(),
        )?),
        crate::config::ClientRouting::Forward => None,
    };
    // A follower until this node leads (or the broker stops).
    let led = {
        let mut leading = {
            let raft = raft.clone();
            tokio::spawn(async move { raft.lead().await })
        };
        let mut outcome = None;
        let mut stop = shutdown.clone();
        let until = async {
            tokio::select! {
                led = &mut leading => outcome = led.ok(),
                _ = stop.wait_for(|stop| *stop) => leading.abort(),
            }
        };
        let forwarding = Forwarding {
            own: settings.node_id,
            leader: raft.cluster_leader(),
            host_of: {
                let raft = raft.clone();
                Arc::new(move |node| raft.member_host(node))
            },
            health: {
                let raft = raft.clone();
                Arc::new(move || follower_health(&raft))
            },
            metrics: metrics.clone(),
            metrics_allowed: {
                let keys = crate::access_keys(config);
                Arc::new(move |head: &[u8]| metrics_allowed(&keys, head))
            },
            source: raft
                .member_host(settings.node_id)
                .and_then(|host| host.parse().ok()),
            local_amqp: local.as_ref().map(|local| local.hook.clone()),
        };
        let (flat, shape) = flatten(listeners);
        let (forwarded, connections) = forward_until(flat, forwarding, until).await;
        (forwarded, connections, shape, outcome)
    };
    let (forwarded, connections, shape, outcome) = led;
    let led_since = tokio::time::Instant::now();
    if let Some(local) = &local {
        let open = local.open();
        if outcome.is_none() {
            // A planned stop: the connections served here drain as at a shutdown (their
            // clients settle what they hold, then are closed).
            if open > 0 {
                tracing::info!("stopping: draining the {open} client connections served here");
            }
            local
                .close(config.server.shutdown_grace_period + std::time::Duration::from_secs(2))
                .await;
        } else {
            // This node leads now: what those connections wait for can never come (the old
            // leader is gone); their clients connect again, to this node's broker.
            if open > 0 {
                tracing::info!(
                    "closing the {open} client connections served here: this node leads now"
                );
            }
            local.abort();
        }
    }
    // Its registry and proxy go with it (the task that follows the namespace for it ends).
    drop(local);
    let leadership = match outcome {
        None => {
            // A planned stop: no new connection is taken, and those forwarded are drained
            // by the leader (their clients settle what they hold, then are closed) before
            // this node leaves.
            drop(forwarded);
            hand_over_forwarded(&raft, &connections, config.server.shutdown_grace_period).await;
            raft.shutdown().await;
            store.close();
            return Ok(());
        }
        Some(Err(error)) => return Err(format!("cannot lead the cluster: {error}")),
        Some(Ok(leadership)) => leadership,
    };
    let listeners = unflatten(forwarded, shape)?;

    // The leader: the whole log is committed; replay it and serve.
    let started = std::time::Instant::now();
    let recovered = raft.replay_member().await?;
    raft.keep_metadata();
    tracing::info!(
        node = settings.node_id,
        term = leadership.term,
        "this node leads the cluster: {} entities replayed in {:.1} ms",
        recovered.entities.len(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    // `POST /$cluster/leader` asks this leader to step down: it drains its clients as at a
    // stop, hands the leadership over, and comes back as a follower.
    let (step_down, stepping_down) = watch::channel::<Option<Option<u64>>>(None);
    let serving_stop = stop_serving(shutdown.clone(), stepping_down.clone());
    let lease = Arc::new(Lease::new());
    {
        let raft = raft.clone();
        let lease = lease.clone();
        tokio::spawn(async move { raft.hold_lease(lease, leadership).await });
    }
    {
        // The leadership ends: stop serving at once.
        let mut leaders = raft.leaders();
        let deposed = deposed.clone();
        let mut stop = shutdown.clone();
        let stopping = shutdown.clone();
        let stepping_down = stepping_down.clone();
        tokio::spawn(async move {
            let ended = leaders
                .wait_for(|leaders| leaders.get(METADATA_GROUP).copied() != Some(leadership));
            tokio::select! {
                _ = ended => {
                    if stepping_down.borrow().is_some() {
                        // Handed over on request: the step-down comes back as a follower.
                        return;
                    }
                    if *stopping.borrow() {
                        // Stopping: the leadership ends with the process (its hand-over,
                        // or its Raft's shutdown); it must not come back as a follower.
                        return;
                    }
                    tracing::warn!(
                        term = leadership.term,
                        "this node no longer leads the cluster: restarting as a follower"
                    );
                    deposed();
                }
                _ = stop.wait_for(|stop| *stop) => {}
            }
        });
    }
    let view: crate::admin::http::ClusterView = {
        let raft = raft.clone();
        Arc::new(move || {
            raft.member_view()
                .and_then(|view| serde_json::to_value(view).ok())
        })
    };
    let control: crate::admin::http::ClusterControl = {
        let raft = raft.clone();
        let step_down = Arc::new(step_down);
        Arc::new(move |request| {
            let raft = raft.clone();
            let step_down = step_down.clone();
            Box::pin(async move { cluster_request(&raft, &step_down, request).await })
        })
    };
    let drains = Arc::new(crate::listener::drains::Drains::default());
    {
        // A stopping member asks for the connections it forwards to be drained: those from
        // its host's address (its forwarded connections leave from there), or, when its host
        // is a name, from the address its peer connection comes from.
        let drains = drains.clone();
        let weak = Arc::downgrade(&raft);
        let counted = metrics.cluster.drained.clone();
        raft.on_drain_request(Arc::new(move |node, address| {
            let host = weak
                .upgrade()
                .and_then(|raft| raft.member_host(node))
                .and_then(|host| host.parse::<std::net::IpAddr>().ok());
            let drained = drains.drain_from(host.unwrap_or(address));
            counted.inc_by(drained as u64);
            drained
        }));
    }
    let port: Arc<dyn crate::broker::storage::DurableLog> = raft.clone();
    let served = crate::serve(
        listeners,
        config,
        Some((crate::broker::storage::Storage::new(port), recovered)),
        NamespaceStart::default(),
        Some(store.clone()),
        metrics,
        serving_stop,
        || {},
        reload,
        Some(MemberRole {
            lease: Some(lease.clone()),
            view,
            control,
            drains,
            namespace_node: None,
            on_registry: Some({
                // The other members' entity commands are answered from this registry.
                let raft = raft.clone();
                Arc::new(move |registry: &Arc<crate::broker::registry::Registry>| {
                    raft.on_commands(super::proxying::serve_commands(
                        Arc::downgrade(registry),
                        lease.clone(),
                    ));
                })
            }),
        }),
    )
    .await;
    // Every client connection drained and the entities stopped: hand the leadership over
    // (a planned stop, or a step-down asked for), so the others need not wait out an
    // election timeout.
    let asked = *stepping_down.borrow();
    if served.is_ok() && (asked.is_some() || *shutdown.borrow()) {
        let to = asked.flatten();
        match raft
            .transfer_leadership(to, led_since, HAND_OVER_WITHIN)
            .await
        {
            Ok(leader) => tracing::info!(
                node = settings.node_id,
                "handed the cluster's leadership to node {leader}"
            ),
            Err(why) => tracing::warn!(
                node = settings.node_id,
                "could not hand the cluster's leadership over: {why}"
            ),
        }
        if asked.is_some() && !*shutdown.borrow() {
            tracing::info!("stepped down: restarting as a follower");
            deposed();
            return Ok(());
        }
    }
    raft.shutdown().await;
    store.close();
    served
}

/// What every member checks and opens first: no `--reset-runtime-changes` (the run-time
/// changes are the cluster's), the cluster secret, and the peer listener.
pub(super) async fn member_start(
    config: &Config,
    recovery: &Recovery,
) -> Result<(String, TcpListener), String> {
    if recovery.namespace_reset {
        return Err(
            "--reset-runtime-changes is not supported on a cluster member: the run-time changes are the cluster's, in its replicated log (delete or recreate entities through the admin API)"
                .to_string(),
        );
    }
    let settings = &config.cluster;
    let secret = settings
        .secret
        .clone()
        .ok_or_else(|| "[cluster] secret is not set".to_string())?;
    let peers = TcpListener::bind(&settings.address)
        .await
        .map_err(|error| {
            format!(
                "cannot listen for the cluster's members on {} (cluster.address): {error}",
                settings.address
            )
        })?;
    Ok((secret, peers))
}

/// Ends the process as `exits` say when this member's log fails (it takes no further
/// part) or another member removes it, unless it is stopping anyway.
pub(super) fn watch_exits(
    raft: &Arc<RaftLog>,
    shutdown: &watch::Receiver<bool>,
    failed: Arc<dyn Fn(String) + Send + Sync>,
    removed: Arc<dyn Fn() + Send + Sync>,
) {
    {
        // A member whose log fails (a disk that cannot sync) takes no further part: the
        // process ends with the reason, so that the others elect a leader meanwhile (a node
        // starting again at once would lead again from the vote on its disk).
        let raft = raft.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let why = tokio::select! {
                why = raft.member_stopped() => why,
                _ = stop.wait_for(|stop| *stop) => return,
            };
            let stopping = *stop.borrow();
            if !stopping {
                failed(format!("this node's part in the cluster stopped: {why}"));
            }
        });
    }
    {
        let raft = raft.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = raft.removed() => {
                    tracing::warn!("this node was removed from the cluster: stopping");
                    removed();
                }
                _ = stop.wait_for(|stop| *stop) => {}
            }
        });
    }
}

/// How long a leader that stops or steps down tries to hand its leadership over.
const HAND_OVER_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The stop signal the leader's broker serves by: true on the process's `shutdown`, or
/// when a step-down is asked for.
fn stop_serving(
    shutdown: watch::Receiver<bool>,
    stepping_down: watch::Receiver<Option<Option<u64>>>,
) -> watch::Receiver<bool> {
    let asked = crate::listener::drains::turns(stepping_down, Option::is_some);
    crate::listener::drains::stop_signal(&shutdown, asked, || {})
}

/// A follower's planned stop: asks the leader to drain the connections this node forwards
/// and waits for them to end (at most the grace period and a margin).
async fn hand_over_forwarded(
    raft: &RaftLog,
    connections: &crate::listener::forward::Forwarded,
    grace: std::time::Duration,
) {
    let open = connections.open();
    if open == 0 {
        return;
    }
    match raft
        .ask_leader_to_drain(std::time::Duration::from_secs(2))
        .await
    {
        Ok(drained) => tracing::info!(
            "stopping: the leader drains the {open} connections this node forwards to it ({drained} found there)"
        ),
        Err(why) => {
            tracing::warn!(
                "stopping: cannot ask the leader to drain the {open} connections this node forwards ({why}); they are closed"
            );
            return;
        }
    }
    let within = grace + std::time::Duration::from_secs(2);
    if !connections.ended(within).await {
        tracing::warn!(
            "stopping: {} forwarded connections still open after {within:?}; they are closed",
            connections.open()
        );
    }
}

/// Sets the cluster's gauges from what this node's Raft reports, once a second, until the
/// node stops.
pub(super) async fn report_cluster(
    raft: std::sync::Weak<RaftLog>,
    metrics: crate::metrics::ClusterMetrics,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(raft) = raft.upgrade() else { return };
        let Some(view) = raft.member_view() else {
            continue;
        };
        metrics.leader.set(view.leader.unwrap_or(0) as i64);
        metrics.term.set(view.term as i64);
        metrics
            .purged_index
            .set(view.purged_index.unwrap_or(0) as i64);
        let stats = raft.snapshot_stats();
        let counted = |counter: &prometheus::IntCounter, total: u64| {
            counter.inc_by(total.saturating_sub(counter.get()));
        };
        counted(
            &metrics.snapshots_built,
            stats.built.load(std::sync::atomic::Ordering::Relaxed),
        );
        counted(
            &metrics.snapshots_installed,
            stats.installed.load(std::sync::atomic::Ordering::Relaxed),
        );
        metrics
            .snapshot_bytes
            .set(stats.bytes.load(std::sync::atomic::Ordering::Relaxed) as i64);
        counted(
            &metrics.proxied,
            crate::cluster::remote::COMMANDS_CARRIED.load(std::sync::atomic::Ordering::Relaxed),
        );
        counted(
            &metrics.served,
            crate::cluster::remote::COMMANDS_SERVED.load(std::sync::atomic::Ordering::Relaxed),
        );
        metrics.member_lag.reset();
        for member in &view.members {
            metrics
                .member_lag
                .with_label_values(&[&member.id.to_string()])
                .set(member.lag as i64);
        }
    }
}

/// Whether a follower's `/metrics` request may read them: with keys, as on the leader, HTTP
/// Basic with a key that has the Manage right (what Prometheus' `basic_auth` sends).
fn metrics_allowed(keys: &[crate::amqp::sas::AccessKey], head: &[u8]) -> Result<(), (u16, String)> {
    if keys.is_empty() {
        return Ok(());
    }
    let mut headers = axum::http::HeaderMap::new();
    let text = String::from_utf8_lossy(head);
    for line in text.split("\r\n").skip(1) {
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("authorization")
            && let Ok(value) = axum::http::HeaderValue::from_str(value.trim())
        {
            headers.insert(axum::http::header::AUTHORIZATION, value);
        }
    }
    match crate::admin::guard::basic_key(keys, &headers) {
        Ok(key) if key.rights.manage => Ok(()),
        Ok(key) => Err((
            403,
            format!(
                "The key '{}' lacks the Manage right metrics need.\n",
                key.name
            ),
        )),
        Err(_) => Err((
            401,
            "Metrics need a key with the Manage right: HTTP Basic with the key name and key.\n"
                .to_string(),
        )),
    }
}

/// Runs a membership route on the leader.
async fn cluster_request(
    raft: &RaftLog,
    step_down: &watch::Sender<Option<Option<u64>>>,
    request: crate::admin::http::ClusterRequest,
) -> (u16, serde_json::Value) {
    use crate::admin::http::ClusterRequest;
    let done = match request {
        ClusterRequest::Transfer { to } => return transfer_request(raft, step_down, to),
        ClusterRequest::View => raft
            .member_view()
            .ok_or_else(|| "the cluster's group stopped".to_string()),
        ClusterRequest::Add { id, address } => {
            tracing::info!(node = id, %address, "adding a member to the cluster");
            raft.add_member(id, &address, RaftLog::LEARNER_CATCH_UP)
                .await
        }
        ClusterRequest::Remove { id } => {
            tracing::info!(node = id, "removing a member from the cluster");
            raft.remove_member(id).await
        }
    };
    match done {
        Ok(view) => (
            200,
            serde_json::to_value(view).unwrap_or(serde_json::Value::Null),
        ),
        Err(error) => {
            let status = if error.contains("a member already") {
                409
            } else if error.contains("is not a member") {
                404
            } else {
                503
            };
            (status, serde_json::json!({ "error": error }))
        }
    }
}

/// `POST /$cluster/leader`: checks that the leadership can go to `to` (or to another
/// voter), then starts the step-down; 202 with what happens next.
fn transfer_request(
    raft: &RaftLog,
    step_down: &watch::Sender<Option<Option<u64>>>,
    to: Option<u64>,
) -> (u16, serde_json::Value) {
    let own = raft.node_id();
    let Some(view) = raft.member_view() else {
        return (
            503,
            serde_json::json!({ "error": "the cluster's group stopped" }),
        );
    };
    let refusal = match to {
        Some(target) if target == own => {
            Some((409, format!("node {own} already leads the cluster")))
        }
        Some(target) if !view.voters.contains(&target) => Some((
            404,
            format!("node {target} is not a voting member of the cluster"),
        )),
        None if !view.voters.iter().any(|voter| *voter != own) => Some((
            409,
            "the cluster has no other voting member to lead".to_string(),
        )),
        _ => None,
    };
    if let Some((status, error)) = refusal {
        return (status, serde_json::json!({ "error": error }));
    }
    if step_down.borrow().is_some() {
        return (
            409,
            serde_json::json!({ "error": "this node is already handing its leadership over" }),
        );
    }
    tracing::info!(
        node = own,
        ?to,
        "stepping down on request: draining the clients, then handing the leadership over"
    );
    let _ = step_down.send(Some(to));
    let next = to.map_or("the member with the most of the log".to_string(), |to| {
        format!("node {to}")
    });
    (
        202,
        serde_json::json!({
            "leader": own,
            "to": to,
            "message": format!(
                "Node {own} drains its clients (they reconnect through any node), hands the leadership to {next}, and comes back as a follower."
            ),
        }),
    )
}

/// A follower's `/health`: healthy while it knows a leader to forward to.
fn follower_health(raft: &RaftLog) -> (u16, String) {
    let view = raft.member_view();
    // This node named leader, not serving yet: it is taking over (or cut off, unable to).
    let leader = view
        .as_ref()
        .and_then(|view| view.leader)
        .filter(|leader| *leader != raft.node_id());
    let cluster = view
        .and_then(|view| serde_json::to_string(&view).ok())
        .unwrap_or_else(|| "null".to_string());
    match leader {
        Some(leader) => (
            200,
            format!(
                r#"{{"status":"healthy","message":"Service is healthy: node {leader} leads the cluster.","cluster":{cluster}}}"#
            ),
        ),
        None => (
            503,
            format!(
                r#"{{"status":"unhealthy","message":"No node serves as the cluster's leader yet.","cluster":{cluster}}}"#
            ),
        ),
    }
}

/// Which of [`Listeners`]' optional listeners exist, to put them back after forwarding.
struct Shape {
    http: bool,
    https: bool,
}

/// The listeners in a fixed order: AMQP, HTTP, HTTPS (those that exist), then the others.
fn flatten(listeners: Listeners) -> (Vec<TcpListener>, Shape) {
    let shape = Shape {
        http: listeners.http.is_some(),
        https: listeners.https.is_some(),
    };
    let mut all = vec![listeners.amqp];
    all.extend(listeners.http);
    all.extend(listeners.https);
    all.extend(listeners.more);
    (all, shape)
}

/// [`flatten`] undone.
fn unflatten(listeners: Vec<TcpListener>, shape: Shape) -> Result<Listeners, String> {
    let mut listeners = listeners.into_iter();
    let lost = || "a listener was lost while forwarding".to_string();
    let amqp = listeners.next().ok_or_else(lost)?;
    let http = if shape.http {
        Some(listeners.next().ok_or_else(lost)?)
    } else {
        None
    };
    let https = if shape.https {
        Some(listeners.next().ok_or_else(lost)?)
    } else {
        None
    };
    Ok(Listeners {
        amqp,
        more: listeners.collect(),
        http,
        https,
    })
}
