//! Opening a connection and a session over the chosen transport (TCP, TLS, WebSocket or
//! secure WebSocket) with the chosen SASL mechanism, and closing both without letting a
//! slow peer hang the run.

use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::connection::OpenError;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::{Connection, Session};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::options::{ConnectOptions, Sasl, Transport};
use crate::transport;

/// How long opening or closing may take before the run gives up on it.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The session incoming window the generator advertises.
const SESSION_WINDOW: u32 = 1 << 20;

/// A connection with one session on it.
pub struct Endpoint {
    /// The connection, closed by [`Endpoint::close`].
    pub connection: ConnectionHandle<()>,
    /// The one session links attach to.
    pub session: SessionHandle<()>,
}

/// Why connecting failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// TCP, SASL or AMQP open failed.
    #[error("connection to {url} failed: {detail}")]
    Open { url: String, detail: String },
    /// The session was refused.
    #[error("session on {url} failed: {detail}")]
    Begin { url: String, detail: String },
    /// The peer took longer than the handshake timeout.
    #[error("connecting to {url} timed out")]
    Timeout { url: String },
}

/// Opens a connection named `container_id` over the chosen transport and begins a session.
pub async fn open(options: &ConnectOptions, container_id: &str) -> Result<Endpoint, ConnectError> {
    let url = options.url.clone();
    let attempt = async {
        let open_error = |detail: String| ConnectError::Open {
            url: url.clone(),
            detail,
        };
        let target = Target::parse(&url, options.transport).ok_or_else(|| {
            open_error("expected amqp://, amqps://, ws:// or wss:// HOST:PORT[/PATH]".to_string())
        })?;
        let stream = TcpStream::connect(target.authority)
            .await
            .map_err(|error| open_error(error.to_string()))?;
        // The client library leaves Nagle's algorithm on; small flow and disposition frames
        // would then wait for delayed acknowledgements and throttle the broker under test.
        stream
            .set_nodelay(true)
            .map_err(|error| open_error(error.to_string()))?;
        let ca = options.ca.as_deref();
        let opened = match target.transport {
            Transport::Amqp => open_amqp(options, container_id, target.host, stream).await,
            Transport::Tls => {
                let stream = transport::tls(stream, target.host, ca)
                    .await
                    .map_err(open_error)?;
                open_amqp(options, container_id, target.host, stream).await
            }
            Transport::Ws => {
                let stream = transport::websocket(stream, target.authority, target.path, false)
                    .await
                    .map_err(open_error)?;
                open_amqp(options, container_id, target.host, stream).await
            }
            Transport::Wss => {
                let stream = transport::tls(stream, target.host, ca)
                    .await
                    .map_err(open_error)?;
                let stream = transport::websocket(stream, target.authority, target.path, true)
                    .await
                    .map_err(open_error)?;
                open_amqp(options, container_id, target.host, stream).await
            }
        };
        let mut connection = opened.map_err(|error| ConnectError::Open {
            url: url.clone(),
            detail: error.to_string(),
        })?;
        // fe2o3-amqp's default incoming window (2,048 transfers) is only re-advertised with
        // link flows, so a credit above ~2,000 would stall on it: open it wide instead and
        // let link credit alone bound what is in flight.
        let session = Session::builder()
            .incoming_window(SESSION_WINDOW)
            .begin(&mut connection)
            .await
            .map_err(|error| ConnectError::Begin {
                url: url.clone(),
                detail: error.to_string(),
            })?;
        Ok(Endpoint {
            connection,
            session,
        })
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, attempt)
        .await
        .map_err(|_| ConnectError::Timeout { url: url.clone() })?
}

/// SASL and the AMQP open on an established byte stream (TCP, TLS or WebSocket).
async fn open_amqp<Io>(
    options: &ConnectOptions,
    container_id: &str,
    host: &str,
    stream: Io,
) -> Result<ConnectionHandle<()>, OpenError>
where
    Io: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let builder = Connection::builder()
        .container_id(container_id)
        .hostname(host);
    match options.sasl {
        Sasl::Anonymous => {
            builder
                .sasl_profile(SaslProfile::Anonymous)
                .open_with_stream(stream)
                .await
        }
        Sasl::Plain => {
            builder
                .sasl_profile(SaslProfile::Plain {
                    username: options.user.clone(),
                    password: options.password.clone(),
                })
                .open_with_stream(stream)
                .await
        }
        Sasl::None => builder.open_with_stream(stream).await,
    }
}

impl Endpoint {
    /// Ends the session and closes the connection; errors and time-outs are ignored, since
    /// the measurement is already taken.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
            let _ = self.session.end().await;
            let _ = self.connection.close().await;
        })
        .await;
    }
}

/// Where a URL points and over what.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    /// `HOST:PORT`.
    authority: &'a str,
    /// `HOST` (for TLS verification and the AMQP open's hostname).
    host: &'a str,
    /// The WebSocket path.
    path: &'a str,
    /// `--transport`, else the URL's scheme.
    transport: Transport,
}

impl<'a> Target<'a> {
    /// Parses `SCHEME://[USER@]HOST:PORT[/PATH]`.
    fn parse(url: &'a str, transport: Option<Transport>) -> Option<Target<'a>> {
        let (scheme, rest) = url.split_once("://")?;
        let from_scheme = match scheme {
            "amqp" => Transport::Amqp,
            "amqps" => Transport::Tls,
            "ws" => Transport::Ws,
            "wss" => Transport::Wss,
            _ => return None,
        };
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        let authority = authority.rsplit('@').next()?;
        let (host, port) = authority.rsplit_once(':')?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return None;
        }
        let path = if path.is_empty() || path == "/" {
            transport::DEFAULT_WEBSOCKET_PATH
        } else {
            path
        };
        Some(Target {
            authority,
            host,
            path,
            transport: transport.unwrap_or(from_scheme),
        })
    }
}
