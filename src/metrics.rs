//! The broker's Prometheus metrics, with the `prometheus` crate (one registry per broker, so
//! brokers in one process — the tests — do not share counters): a ground-floor service that
//! the network front end, the admin plane and the storage record into. It imports nothing
//! of the broker; the admin plane's `GET /metrics` fills the per-entity gauges at scrape
//! time and serves [`Metrics::encode`].
//!
//! Connection, link, latency and storage figures are kept as they happen; per-entity
//! figures are read from the entities at scrape time (each actor answers with its counts
//! and cumulative totals).

use std::collections::HashSet;
use std::sync::Arc;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, TextEncoder,
};

/// The broker's metrics.
pub struct Metrics {
    registry: prometheus::Registry,
    /// Open AMQP connections.
    pub connections: IntGauge,
    /// AMQP connections accepted since start.
    pub connections_total: IntCounter,
    /// HTTP requests served, by kind of connection.
    pub http_requests: IntCounterVec,
    /// Messages by entity and state (set at scrape time).
    pub messages: IntGaugeVec,
    /// Bytes held by entity (set at scrape time).
    pub size: IntGaugeVec,
    /// Subscriptions by topic (set at scrape time).
    pub subscriptions: IntGaugeVec,
    /// Cumulative totals by entity and event (set at scrape time).
    pub totals: IntGaugeVec,
    /// Messages dead-lettered by entity and reason (set at scrape time).
    pub dead_lettered: IntGaugeVec,
    /// Open links by kind (sender, receiver, management, cbs).
    pub links: IntGaugeVec,
    /// Time from a message's enqueued time to its delivery being written to a receiver.
    pub delivery_latency: HistogramVec,
    /// Duration of each write-ahead log sync (durable storage only).
    pub storage_sync: Histogram,
    /// The placement groups' Raft logs (durable storage only).
    pub groups: crate::cluster::GroupMetrics,
    /// This node's part in a cluster (zero on a single node).
    pub cluster: ClusterMetrics,
}

/// A cluster member's metrics, set from what its Raft reports (`daemon::member`).
#[derive(Clone)]
pub struct ClusterMetrics {
    /// Client connections this node forwarded to the leader while it followed.
    pub forwarded: IntCounter,
    /// Forwarded connections open now.
    pub forwarded_open: IntGauge,
    /// On the leader: client connections drained because the member forwarding them stopped.
    pub drained: IntCounter,
    /// The node leading the cluster as this node knows it (0: none known).
    pub leader: IntGauge,
    /// The cluster's current term.
    pub term: IntGauge,
    /// On the leader: entries of its log each member does not have yet.
    pub member_lag: IntGaugeVec,
    /// Snapshots of the cluster's log this node built (at its compaction rounds).
    pub snapshots_built: IntCounter,
    /// Snapshots this node installed, sent by the leader (it lacked purged entries).
    pub snapshots_installed: IntCounter,
    /// The size of the last snapshot this node built or installed.
    pub snapshot_bytes: IntGauge,
    /// The last entry of the cluster's log this node purged (its snapshot holds it).
    pub purged_index: IntGauge,
    /// Entity and topic commands this node carried to the node that runs their entity
    /// (`client_routing = "proxy"`).
    pub proxied: IntCounter,
    /// Entity and topic commands other members carried to this node's entities.
    pub served: IntCounter,
}

/// Buckets of the delivery latency histogram, in seconds: 100 µs to 5 min.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
    30.0, 300.0,
];

/// Buckets of the storage sync histogram, in seconds: 50 µs to 1 s.
const SYNC_BUCKETS: [f64; 13] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

impl std::fmt::Debug for Metrics {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Metrics")
    }
}

fn registered<T: prometheus::core::Collector + Clone + 'static>(
    registry: &prometheus::Registry,
    collector: T,
) -> T {
    // Names are constants and unique: registration cannot fail.
    let _ = registry.register(Box::new(collector.clone()));
    collector
}

impl Metrics {
    /// Fresh metrics in their own registry.
    pub fn new() -> Arc<Metrics> {
        let registry = prometheus::Registry::new();
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels)
                .expect("constant metric names and labels are valid")
        };
        Arc::new(Metrics {
            connections: registered(
                &registry,
                IntGauge::new("ferrobus_connections", "Open AMQP connections.")
                    .expect("valid metric"),
            ),
            connections_total: registered(
                &registry,
                IntCounter::new(
                    "ferrobus_connections_total",
                    "AMQP connections accepted since start.",
                )
                .expect("valid metric"),
            ),
            http_requests: registered(
                &registry,
                IntCounterVec::new(
                    Opts::new("ferrobus_http_requests_total", "HTTP requests served."),
                    &["listener"],
                )
                .expect("valid metric"),
            ),
            messages: registered(
                &registry,
                gauge_vec(
                    "ferrobus_entity_messages",
                    "Messages an entity holds, by state (active, deferred (also counted in active, as Service Bus counts them), scheduled, dead_letter, transfer, transfer_dead_letter).",
                    &["entity", "state"],
                ),
            ),
            size: registered(
                &registry,
                gauge_vec(
                    "ferrobus_entity_size_bytes",
                    "Bytes an entity stores across its sub-queues.",
                    &["entity"],
                ),
            ),
            subscriptions: registered(
                &registry,
                gauge_vec(
                    "ferrobus_topic_subscriptions",
                    "Subscriptions of a topic.",
                    &["entity"],
                ),
            ),
            totals: registered(
                &registry,
                gauge_vec(
                    "ferrobus_entity_messages_total",
                    "Messages an entity has handled since it started, by event (sent, delivered, completed, abandoned, dead_lettered, expired, scheduled). A counter; exposed as a gauge because it restarts with the entity.",
                    &["entity", "event"],
                ),
            ),
            dead_lettered: registered(
                &registry,
                gauge_vec(
                    "ferrobus_entity_dead_lettered_total",
                    "Messages an entity has dead-lettered since it started, by reason (the broker's own reasons; \"application\" for a receiver's dead-letter call). A counter exposed as a gauge, like ferrobus_entity_messages_total.",
                    &["entity", "reason"],
                ),
            ),
            links: registered(
                &registry,
                gauge_vec(
                    "ferrobus_links",
                    "Open AMQP links, by kind (sender, receiver, management, cbs).",
                    &["kind"],
                ),
            ),
            delivery_latency: registered(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "ferrobus_delivery_latency_seconds",
                        "Time from a message's enqueued time (its activation, for a scheduled message) to each delivery of it written to a receiver.",
                    )
                    .buckets(LATENCY_BUCKETS.to_vec()),
                    &["entity"],
                )
                .expect("valid metric"),
            ),
            storage_sync: registered(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "ferrobus_storage_sync_seconds",
                        "Duration of each write-ahead log write and fsync (durable storage; replies wait for it).",
                    )
                    .buckets(SYNC_BUCKETS.to_vec()),
                )
                .expect("valid metric"),
            ),
            groups: crate::cluster::GroupMetrics {
                commit_seconds: registered(
                    &registry,
                    Histogram::with_opts(
                        HistogramOpts::new(
                            "ferrobus_raft_commit_seconds",
                            "Time from a write handed to its placement group's Raft log to its entry committed and applied (durable storage; a turn's replies wait for it).",
                        )
                        .buckets(SYNC_BUCKETS.to_vec()),
                    )
                    .expect("valid metric"),
                ),
                leader_changes: registered(
                    &registry,
                    IntCounter::new(
                        "ferrobus_raft_leader_changes_total",
                        "Leaderships of placement groups this node saw begin (a group's first election included).",
                    )
                    .expect("valid metric"),
                ),
                running: registered(
                    &registry,
                    IntGauge::new(
                        "ferrobus_raft_groups",
                        "Placement groups whose Raft runs on this node (an idle group stops its Raft until its next write).",
                    )
                    .expect("valid metric"),
                ),
                led: registered(
                    &registry,
                    IntGauge::new(
                        "ferrobus_raft_groups_led",
                        "Running placement groups this node leads.",
                    )
                    .expect("valid metric"),
                ),
            },
            cluster: ClusterMetrics {
                forwarded: registered(
                    &registry,
                    IntCounter::new(
                        "ferrobus_cluster_forwarded_connections_total",
                        "Client connections this node forwarded to the cluster's leader while it followed.",
                    )
                    .expect("valid metric"),
                ),
                forwarded_open: registered(
                    &registry,
                    IntGauge::new(
                        "ferrobus_cluster_forwarded_connections",
                        "Forwarded client connections open now.",
                    )
                    .expect("valid metric"),
                ),
                drained: registered(
                    &registry,
                    IntCounter::new(
                        "ferrobus_cluster_drained_connections_total",
                        "Client connections the leader drained because the member forwarding them was stopping.",
                    )
                    .expect("valid metric"),
                ),
                leader: registered(
                    &registry,
                    IntGauge::new(
                        "ferrobus_cluster_leader",
                        "The node leading the cluster as this node knows it (0: none known).",
                    )
                    .expect("valid metric"),
                ),
                term: registered(
                    &registry,
                    IntGauge::new("ferrobus_cluster_term", "The cluster's current Raft term.")
                        .expect("valid metric"),
                ),
                member_lag: registered(
                    &registry,
                    gauge_vec(
                        "ferrobus_cluster_member_lag_entries",
                        "On the leader: entries of its log each member does not have on its disk yet.",
                        &["member"],
                    ),
                ),
                snapshots_built: registered(
                    &registry,
                    IntCounter::new(
                        "ferrobus_cluster_snapshots_built_total",
                        "Snapshots of the cluster's log this node built at its log compactions.",
                    )
                    .expect("valid metric"),
                ),
                proxied: registered(
                    &registry,
                    IntCounter::new(
                        "ferrobus_cluster_proxied_commands_total",
                        "Entity and topic commands this node carried to the node that runs their entity (client_routing = \"proxy\").",
                    )
                    .expect("valid metric"),
                ),
                served: registered(
                    &registry,
                    IntCounter::new(
                        "ferrobus_cluster_served_commands_total",
                        "Entity and topic commands other members carried to this node's entities.",
                    )
                    .expect("valid metric"),
                ),
                snapshots_installed: registered(
                    &registry,
                    IntCounter::new(
                        "ferrobus_cluster_snapshots_installed_total",
                        "Snapshots this node installed, sent by the leader because it lacked entries the leader had purged.",
                    )
                    .expect("valid metric"),
                ),
                snapshot_bytes: registered(
                    &registry,
                    IntGauge::new(
                        "ferrobus_cluster_snapshot_bytes",
                        "The size of the last snapshot this node built or installed.",
                    )
                    .expect("valid metric"),
                ),
                purged_index: registered(
                    &registry,
                    IntGauge::new(
                        "ferrobus_cluster_log_purged_index",
                        "The last entry of the cluster's log this node purged (its snapshot holds what came before).",
                    )
                    .expect("valid metric"),
                ),
            },
            registry,
        })
    }

    /// Clears the per-entity gauges before a scrape sets them again, and drops the latency
    /// series of entities not in `current` (paths of the entities that exist).
    pub fn start_scrape(&self, current: &HashSet<String>) {
        use prometheus::core::Collector;
        self.messages.reset();
        self.size.reset();
        self.subscriptions.reset();
        self.totals.reset();
        self.dead_lettered.reset();
        let mut gone = Vec::new();
        for family in self.delivery_latency.collect() {
            for metric in family.get_metric() {
                for label in metric.get_label() {
                    if label.name() == "entity" && !current.contains(label.value()) {
                        gone.push(label.value().to_string());
                    }
                }
            }
        }
        for path in gone {
            let _ = self.delivery_latency.remove_label_values(&[&path]);
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> Result<Vec<u8>, prometheus::Error> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        Ok(buffer)
    }
}
