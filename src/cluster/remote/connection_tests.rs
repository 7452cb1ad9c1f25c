//! A real AMQP connection (this crate's server, the fe2o3-amqp client) whose registry
//! reaches its entity through a [`Proxy`]: what the client sees when the stream to the
//! entity's node is lost.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use fe2o3_amqp::link::{LinkStateError, RecvError};
use fe2o3_amqp::types::definitions::LinkError;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use tokio::sync::{mpsc, watch};
use tokio::time::timeout;

use super::test_support::{spawn_entity, topic_codec};
use super::{Proxy, Target, serve};
use crate::broker::registry::{Registry, RemoteEntities};
use crate::broker::topic::TopicHandle;
use crate::clock::Clock;
use crate::config::Config;
use crate::server::{Admission, Context, ServerSettings, run_amqp};

const WAIT: Duration = Duration::from_secs(10);

/// A broker front end on a local port whose one queue, `orders`, is reached through
/// `proxy`; returns the port's address.
async fn front_end(proxy: Arc<Proxy>) -> std::net::SocketAddr {
    let namespace = Config::from_toml_str("[[queues]]\nname = \"orders\"\n", "test")
        .expect("a valid namespace");
    let remote = RemoteEntities {
        entity: Arc::new(move |path| proxy.handle(path)),
        topic: Arc::new(|path| TopicHandle::from_channel(path, mpsc::channel(1).0)),
    };
    let registry = Registry::start_remote(
        &namespace,
        &namespace,
        Clock::system(),
        topic_codec(),
        &remote,
    );
    registry.wait_ready().await;
    let context = Arc::new(Context {
        settings: ServerSettings {
            idle_timeout: Duration::from_secs(60),
            max_frame_size: 256 * 1024,
            max_connections: 4,
            keys: Vec::new(),
            shutdown_grace_period: Duration::from_secs(1),
            handshake_timeout: WAIT,
            tls_required: false,
            tls_disabled: true,
        },
        registry,
        clock: Clock::system(),
        next_receiver_id: AtomicU64::new(1),
        metrics: crate::metrics::Metrics::new(),
        connection_permits: Arc::new(tokio::sync::Semaphore::new(4)),
        lease: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a local port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        let (_keep, shutdown) = watch::channel(false);
        let (stream, _) = listener.accept().await.expect("a connection");
        let deadline = tokio::time::Instant::now() + WAIT;
        run_amqp(stream, context, shutdown, Admission::Admitted, deadline).await;
    });
    address
}

#[tokio::test]
async fn a_receiver_whose_entity_moved_is_detached_with_detach_forced() {
    let (near, far) = tokio::io::duplex(64 * 1024);
    let orders = spawn_entity("orders", |_| {});
    let serving = tokio::spawn(serve(far, move |path| {
        (path == "orders").then(|| Target::Entity(orders.clone()))
    }));
    let proxy = Arc::new(Proxy::start(near));
    let address = front_end(proxy.clone()).await;

    let mut connection = Connection::builder()
        .container_id("moved-test")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(format!("amqp://{address}").as_str())
        .await
        .expect("the connection opens");
    let mut session = Session::begin(&mut connection).await.expect("a session");
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("the receiver attaches");
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("the sender attaches");
    sender
        .send("through the proxy")
        .await
        .expect("the send is accepted");
    // The receiver is attached at the entity, on the other end of the stream.
    let delivery = timeout(WAIT, receiver.recv::<Body<Value>>())
        .await
        .expect("a delivery in time")
        .expect("a delivery");
    receiver.accept(&delivery).await.expect("accepted");

    // The stream to the entity's node is lost: the link is detached, retryably.
    serving.abort();
    let error = timeout(WAIT, receiver.recv::<Body<Value>>())
        .await
        .expect("the detach in time")
        .expect_err("the link is detached");
    let detached = match &error {
        RecvError::LinkStateError(
            LinkStateError::RemoteClosedWithError(detached)
            | LinkStateError::RemoteDetachedWithError(detached),
        ) => detached,
        other => panic!("expected a detach with an error, got {other:?}"),
    };
    assert_eq!(
        detached.condition,
        LinkError::DetachForced.into(),
        "{detached:?}"
    );
    assert!(
        detached
            .description
            .as_deref()
            .is_some_and(|text| text.contains("'orders'") && text.contains("attach the link again")),
        "{detached:?}"
    );
    assert!(proxy.is_closed());
}
