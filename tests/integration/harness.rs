//! Starts the broker in-process on an ephemeral port with a TOML configuration.

use std::net::SocketAddr;

use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::{Connection, Session};
use fe2o3_amqp::{Delivery, Receiver};
use tokio::sync::watch;

/// A running broker; stopped on drop.
pub struct Broker {
    /// Where it listens.
    pub address: SocketAddr,
    /// Turns true to stop it.
    stop: watch::Sender<bool>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Broker {
    /// Starts a broker with the given configuration text.
    pub async fn start(config_text: &str) -> Broker {
        let mut config = ferrobus::config::Config::from_toml_str(config_text, "test.toml")
            .expect("test configuration is valid");
        // In-process brokers share a working directory: they keep messages in memory
        // unless the test names a data directory of its own.
        if !config_text.contains("[storage]") {
            config.storage.mode = ferrobus::config::StorageMode::Memory;
        }
        let storage = ferrobus::open_storage(&config).expect("the data directory opens");
        Broker::serve(config, storage).await
    }

    /// Starts a broker on a log of the test's (one that crashes at a chosen write), from
    /// what `recovered` holds.
    pub async fn start_with_log(
        config_text: &str,
        log: std::sync::Arc<dyn ferrobus::broker::storage::DurableLog>,
        recovered: ferrobus::broker::storage::Recovered,
    ) -> Broker {
        let config = ferrobus::config::Config::from_toml_str(config_text, "test.toml")
            .expect("test configuration is valid");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind an ephemeral port");
        let address = listener.local_addr().expect("bound address");
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(async move {
            ferrobus::run_with_log(listener, &config, log, recovered, stopped)
                .await
                .expect("broker starts")
        });
        Broker { address, stop }
    }

    /// Starts a broker on storage opened by the test (injected faults, small limits).
    pub async fn start_with_storage(
        config_text: &str,
        options: ferrobus::store::storage::StorageOptions,
    ) -> Broker {
        let config = ferrobus::config::Config::from_toml_str(config_text, "test.toml")
            .expect("test configuration is valid");
        let storage =
            ferrobus::store::storage::LogStorage::open(options).expect("the data directory opens");
        Broker::serve(config, Some(storage)).await
    }

    async fn serve(
        config: ferrobus::config::Config,
        storage: Option<(
            ferrobus::store::storage::LogStorage,
            ferrobus::store::storage::Recovery,
        )>,
    ) -> Broker {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind an ephemeral port");
        let address = listener.local_addr().expect("bound address");
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(async move {
            ferrobus::run_with_storage(listener, &config, storage, stopped)
                .await
                .expect("broker starts")
        });
        Broker { address, stop }
    }

    /// Starts the broker's shutdown (what SIGTERM does in the binary).
    pub fn shut_down(&self) {
        let _ = self.stop.send(true);
    }

    /// `amqp://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("amqp://{}", self.address)
    }

    /// Opens a connection (SASL ANONYMOUS) and a session.
    pub async fn connect(&self) -> (ConnectionHandle<()>, SessionHandle<()>) {
        let mut connection = Connection::builder()
            .container_id("ferrobus-test")
            .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
            .open(self.url().as_str())
            .await
            .expect("connection opens");
        let session = Session::begin(&mut connection)
            .await
            .expect("session begins");
        (connection, session)
    }
}

/// The next delivery on `receiver`, failing the test after 5 s.
pub async fn receive(receiver: &mut Receiver) -> Delivery<Body<Value>> {
    tokio::time::timeout(Duration::from_secs(5), receiver.recv::<Body<Value>>())
        .await
        .expect("a message arrives within 5 s")
        .expect("receive succeeds")
}

/// The message-id of a delivery, which must be a string (as the broker assigns one to a
/// message sent without it).
pub fn string_message_id(delivery: &Delivery<Body<Value>>) -> String {
    use fe2o3_amqp::types::messaging::MessageId;
    match delivery
        .message()
        .properties
        .as_ref()
        .and_then(|properties| properties.message_id.clone())
    {
        Some(MessageId::String(id)) => id,
        other => panic!("a string message-id, got {other:?}"),
    }
}

/// A message annotation of a delivery, by symbol name.
pub fn annotation(delivery: &Delivery<Body<Value>>, key: &str) -> Option<Value> {
    let annotations = delivery.message().message_annotations.as_ref()?;
    annotations.0.iter().find_map(|(name, value)| {
        format!("{name:?}")
            .contains(&format!("\"{key}\""))
            .then(|| value.clone())
    })
}

/// An application property of a delivery.
pub fn property(delivery: &Delivery<Body<Value>>, key: &str) -> Option<SimpleValue> {
    delivery
        .message()
        .application_properties
        .as_ref()?
        .0
        .get(key)
        .cloned()
}
