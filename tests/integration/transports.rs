//! AMQP over TLS and over WebSockets (issue 14) on the broker's one port: a generic AMQP
//! client (fe2o3-amqp) runs over a rustls client session and over a WebSocket client
//! (tokio-tungstenite), against the development CA the broker uses.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::harness::{Broker, receive};

/// A data directory of this test's own, holding the development CA.
fn scratch(name: &str) -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("ferrobus-transports-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("scratch directory");
    directory
}

/// A broker keeping messages in memory whose development CA lives in `directory`.
async fn broker(directory: &std::path::Path, extra: &str) -> Broker {
    // Make the CA first, as a durable broker does at start, so the client can trust it.
    ferrobus::admin::tls::load(&ferrobus::admin::tls::Identity::Development {
        directory: directory.to_path_buf(),
    })
    .expect("development CA");
    Broker::start(&format!(
        "[storage]\nmode = \"memory\"\ndata_dir = {:?}\n{extra}\n[[queues]]\nname = \"q\"\n",
        directory.display().to_string()
    ))
    .await
}

/// A TLS client configuration trusting only the CA in `directory`.
fn client_tls(directory: &std::path::Path) -> tokio_rustls::TlsConnector {
    let pem = std::fs::read(directory.join("dev-ca.pem")).expect("CA file");
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots
            .add(certificate.expect("CA certificate parses"))
            .expect("CA added");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Sends "over the wire" to q and receives it back on the connection `connection`.
async fn send_and_receive(mut connection: fe2o3_amqp::connection::ConnectionHandle<()>) {
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("sender attaches");
    sender.send("over the wire").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "q")
        .await
        .expect("receiver attaches");
    let delivery = receive(&mut receiver).await;
    assert!(
        matches!(delivery.body(), Body::Value(value) if value.0 == Value::String("over the wire".into()))
    );
    receiver.accept(&delivery).await.expect("completed");
    sender.close().await.expect("sender closes");
    receiver.close().await.expect("receiver closes");
    session.end().await.expect("session ends");
    connection.close().await.expect("connection closes");
}

#[tokio::test]
async fn amqp_runs_inside_tls_on_the_amqp_port() {
    let directory = scratch("tls");
    let broker = broker(&directory, "").await;
    let tcp = TcpStream::connect(broker.address).await.expect("connect");
    let tls = client_tls(&directory)
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").expect("name"),
            tcp,
        )
        .await
        .expect("the development certificate is trusted for localhost");
    let connection = Connection::builder()
        .container_id("tls-client")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open_with_stream(tls)
        .await
        .expect("AMQP opens inside TLS");
    send_and_receive(connection).await;
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_certificate_cannot_connect() {
    let directory = scratch("untrusted");
    let broker = broker(&directory, "").await;
    let other = scratch("untrusted-other");
    ferrobus::admin::tls::load(&ferrobus::admin::tls::Identity::Development {
        directory: other.clone(),
    })
    .expect("another CA");
    let tcp = TcpStream::connect(broker.address).await.expect("connect");
    let refused = client_tls(&other)
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").expect("name"),
            tcp,
        )
        .await;
    assert!(
        refused.is_err(),
        "a certificate from an untrusted CA is refused"
    );
    let _ = std::fs::remove_dir_all(&directory);
    let _ = std::fs::remove_dir_all(&other);
}

/// A WebSocket client session turned into a byte stream for the AMQP client: a task pumps
/// binary messages to and from one end of an in-memory pipe.
async fn websocket_stream<S>(socket: S, path: &str, host: &str) -> tokio::io::DuplexStream
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut request = format!("ws://{host}{path}")
        .into_client_request()
        .expect("request");
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "AMQPWSB10".parse().expect("header"),
    );
    let (websocket, response) = tokio_tungstenite::client_async(request, socket)
        .await
        .expect("the WebSocket upgrade is accepted");
    assert_eq!(
        response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|value| value.to_str().ok()),
        Some("AMQPWSB10"),
        "the broker answers with the AMQP WebSocket subprotocol"
    );
    let (client_end, pump_end) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move {
        let (mut to_broker, mut from_broker) = websocket.split();
        let (mut pipe_read, mut pipe_write) = tokio::io::split(pump_end);
        let outbound = async {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                match pipe_read.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    // Split every chunk in two messages: frames may span messages.
                    Ok(read) => {
                        let middle = read / 2;
                        for part in [&buffer[..middle], &buffer[middle..read]] {
                            if !part.is_empty()
                                && to_broker
                                    .send(Message::Binary(part.to_vec().into()))
                                    .await
                                    .is_err()
                            {
                                return;
                            }
                        }
                    }
                }
            }
        };
        let inbound = async {
            while let Some(Ok(message)) = from_broker.next().await {
                if let Message::Binary(bytes) = message
                    && pipe_write.write_all(&bytes).await.is_err()
                {
                    break;
                }
            }
        };
        // Both directions to their end: the broker's last frames must reach the client.
        tokio::join!(outbound, inbound);
    });
    client_end
}

#[tokio::test]
async fn amqp_runs_over_a_websocket_on_the_amqp_port() {
    let directory = scratch("ws");
    let broker = broker(&directory, "").await;
    let tcp = TcpStream::connect(broker.address).await.expect("connect");
    let host = broker.address.to_string();
    let stream = websocket_stream(tcp, "/$servicebus/websocket/", &host).await;
    let connection = Connection::builder()
        .container_id("ws-client")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open_with_stream(stream)
        .await
        .expect("AMQP opens over the WebSocket");
    send_and_receive(connection).await;
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn amqp_runs_over_a_websocket_inside_tls() {
    let directory = scratch("wss");
    let broker = broker(&directory, "").await;
    let tcp = TcpStream::connect(broker.address).await.expect("connect");
    let tls = client_tls(&directory)
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").expect("name"),
            tcp,
        )
        .await
        .expect("TLS");
    // Without the trailing slash: the binding allows both.
    let stream = websocket_stream(tls, "/$servicebus/websocket", "localhost").await;
    let connection = Connection::builder()
        .container_id("wss-client")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open_with_stream(stream)
        .await
        .expect("AMQP opens over wss");
    send_and_receive(connection).await;
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn tls_required_refuses_plain_amqp_and_tls_disabled_refuses_tls() {
    let directory = scratch("required");
    let broker = broker(&directory, "[tls]\nrequired = true\n").await;
    let mut plain = TcpStream::connect(broker.address).await.expect("connect");
    plain
        .write_all(b"AMQP\x00\x01\x00\x00")
        .await
        .expect("write");
    let mut answer = Vec::new();
    // Closed (or reset: our header is left unread) without an answer.
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer))
        .await
        .expect("the broker closes the plain connection at once");
    assert!(answer.is_empty(), "no AMQP header comes back: {answer:?}");
    let tcp = TcpStream::connect(broker.address).await.expect("connect");
    let tls = client_tls(&directory)
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").expect("name"),
            tcp,
        )
        .await
        .expect("TLS still works");
    let connection = Connection::builder()
        .container_id("required")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open_with_stream(tls)
        .await
        .expect("AMQP inside TLS");
    send_and_receive(connection).await;

    let disabled = scratch("disabled");
    let no_tls = broker_without_ca(&disabled, "[tls]\nenabled = false\n").await;
    let tcp = TcpStream::connect(no_tls.address).await.expect("connect");
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        client_tls(&directory).connect(
            rustls::pki_types::ServerName::try_from("localhost").expect("name"),
            tcp,
        ),
    )
    .await
    .expect("the broker answers at once");
    assert!(refused.is_err(), "TLS is refused when switched off");
    let _ = std::fs::remove_dir_all(&directory);
    let _ = std::fs::remove_dir_all(&disabled);
}

async fn broker_without_ca(directory: &std::path::Path, extra: &str) -> Broker {
    Broker::start(&format!(
        "[storage]\nmode = \"memory\"\ndata_dir = {:?}\n{extra}\n",
        directory.display().to_string()
    ))
    .await
}

#[tokio::test]
async fn websockets_switched_off_answer_404() {
    let directory = scratch("ws-off");
    let broker = broker_without_ca(&directory, "[websocket]\nenabled = false\n").await;
    let mut tcp = TcpStream::connect(broker.address).await.expect("connect");
    tcp.write_all(
        b"GET /$servicebus/websocket/ HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n",
    )
    .await
    .expect("write");
    let mut answer = vec![0u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer))
        .await
        .expect("answered")
        .expect("read");
    let text = String::from_utf8_lossy(&answer[..read]);
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn websocket_connections_count_against_max_connections() {
    let directory = scratch("ws-limit");
    let broker = broker(&directory, "[server]\nmax_connections = 1\n").await;
    let (_held, _session) = broker.connect().await;
    let tcp = TcpStream::connect(broker.address).await.expect("connect");
    let host = broker.address.to_string();
    let stream = websocket_stream(tcp, "/$servicebus/websocket/", &host).await;
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        Connection::builder()
            .container_id("ws-over-the-limit")
            .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
            .open_with_stream(stream),
    )
    .await
    .expect("answered at once");
    let error = match refused {
        Ok(mut connection) => {
            // The broker's open arrives first, its close with the reason right after.
            let error = connection.on_close().await;
            format!("{error:?}")
        }
        Err(error) => format!("{error:?}"),
    };
    assert!(
        error.contains("resource-limit-exceeded") || error.contains("ResourceLimitExceeded"),
        "{error}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}
