//! The byte streams AMQP runs on besides plain TCP: TLS (rustls with the ring provider,
//! trusting only the `--ca` file, e.g. the broker's `dev-ca.pem`) and the AMQP WebSocket
//! binding (binary messages, subprotocol `AMQPWSB10`), over TCP (`ws`) or over TLS (`wss`).
//! fe2o3-amqp gets the finished stream through `open_with_stream`.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// The AMQP WebSocket binding's subprotocol.
pub const WEBSOCKET_SUBPROTOCOL: &str = "AMQPWSB10";

/// The path Service Bus (and ferrobus) serve AMQP over WebSockets at.
pub const DEFAULT_WEBSOCKET_PATH: &str = "/$servicebus/websocket/";

/// The client configuration trusting the CA file, built once per process (every connection
/// of a run trusts the same CA).
static CLIENT_CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();

fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    CLIENT_CONFIG
        .get_or_init(|| {
            let pem =
                std::fs::read(ca).map_err(|error| format!("--ca {}: {error}", ca.display()))?;
            let mut roots = rustls::RootCertStore::empty();
            for certificate in rustls_pemfile::certs(&mut pem.as_slice()) {
                let certificate =
                    certificate.map_err(|error| format!("--ca {}: {error}", ca.display()))?;
                roots
                    .add(certificate)
                    .map_err(|error| format!("--ca {}: {error}", ca.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("--ca {}: no PEM certificate in it", ca.display()));
            }
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS: {error}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// TLS over `stream`, verifying the server's certificate for `host` against `ca`.
pub async fn tls(
    stream: TcpStream,
    host: &str,
    ca: Option<&Path>,
) -> Result<TlsStream<TcpStream>, String> {
    let ca = ca.ok_or("TLS needs --ca PATH (the CA that signed the broker's certificate)")?;
    let config = client_config(ca)?;
    let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
        .map_err(|error| format!("TLS server name {host}: {error}"))?
        .to_owned();
    TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|error| format!("TLS handshake: {error}"))
}

/// The WebSocket upgrade (`GET path`, subprotocol `AMQPWSB10`) on `stream`; `secure` only
/// names the scheme in the request (the stream is already TLS for `wss`).
pub async fn websocket<S>(
    stream: S,
    authority: &str,
    path: &str,
    secure: bool,
) -> Result<WebSocketIo<S>, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let scheme = if secure { "wss" } else { "ws" };
    let url = format!("{scheme}://{authority}{path}");
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|error| format!("WebSocket request {url}: {error}"))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static(WEBSOCKET_SUBPROTOCOL),
    );
    let (socket, response) = tokio_tungstenite::client_async(request, stream)
        .await
        .map_err(|error| format!("WebSocket upgrade {url}: {error}"))?;
    let protocol = response.headers().get("Sec-WebSocket-Protocol");
    if protocol.is_none_or(|value| !value.as_bytes().eq_ignore_ascii_case(b"AMQPWSB10")) {
        return Err(format!(
            "WebSocket upgrade {url}: the server chose subprotocol {protocol:?}, not {WEBSOCKET_SUBPROTOCOL}"
        ));
    }
    Ok(WebSocketIo {
        socket,
        pending: Bytes::new(),
        ended: false,
    })
}

/// A WebSocket as a byte stream: every write becomes one binary message, reads return the
/// binary messages' bytes in order (AMQP frames may be split over messages in any way).
#[derive(Debug)]
pub struct WebSocketIo<S> {
    socket: WebSocketStream<S>,
    /// The unread rest of the last binary message.
    pending: Bytes,
    /// The peer closed: reads return end of stream.
    ended: bool,
}

fn io_error(error: WsError) -> io::Error {
    match error {
        WsError::Io(error) => error,
        other => io::Error::other(other),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WebSocketIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let taken = this.pending.len().min(buffer.remaining());
                buffer.put_slice(&this.pending.split_to(taken));
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.socket.poll_next_unpin(context)) {
                Some(Ok(Message::Binary(bytes))) => this.pending = bytes,
                Some(Ok(Message::Close(_)))
                | None
                | Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => {
                    this.ended = true;
                }
                // Pings are answered by tungstenite; text and pongs carry no AMQP bytes.
                Some(Ok(_)) => {}
                Some(Err(error)) => return Poll::Ready(Err(io_error(error))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WebSocketIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.socket.poll_ready_unpin(context)).map_err(io_error)?;
        this.socket
            .start_send_unpin(Message::Binary(Bytes::copy_from_slice(bytes)))
            .map_err(io_error)?;
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut()
            .socket
            .poll_flush_unpin(context)
            .map_err(io_error)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match ready!(self.get_mut().socket.poll_close_unpin(context)) {
            Ok(()) | Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Poll::Ready(Ok(())),
            Err(error) => Poll::Ready(Err(io_error(error))),
        }
    }
}
