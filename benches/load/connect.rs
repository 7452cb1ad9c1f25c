//! Opening a connection and a session with the chosen SASL mechanism, and closing both
//! without letting a slow peer hang the run.

use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::{Connection, Session};
use tokio::net::TcpStream;

use crate::options::{ConnectOptions, Sasl};

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

/// Opens a connection named `container_id` and begins a session.
pub async fn open(options: &ConnectOptions, container_id: &str) -> Result<Endpoint, ConnectError> {
    let url = options.url.clone();
    let attempt = async {
        let host_port = host_and_port(&url).ok_or_else(|| ConnectError::Open {
            url: url.clone(),
            detail: "expected amqp://HOST:PORT".to_string(),
        })?;
        let host = host_port
            .rsplit_once(':')
            .map_or(host_port, |(host, _)| host);
        let open_error = |detail: String| ConnectError::Open {
            url: url.clone(),
            detail,
        };
        let stream = TcpStream::connect(host_port)
            .await
            .map_err(|error| open_error(error.to_string()))?;
        // The client library leaves Nagle's algorithm on; small flow and disposition frames
        // would then wait for delayed acknowledgements and throttle the broker under test.
        stream
            .set_nodelay(true)
            .map_err(|error| open_error(error.to_string()))?;
        let builder = Connection::builder()
            .container_id(container_id)
            .hostname(host);
        let opened = match options.sasl {
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

/// `HOST:PORT` of an `amqp://HOST:PORT[/...]` URL.
fn host_and_port(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("amqp://")?;
    let authority = rest.split('/').next()?;
    let authority = authority.rsplit('@').next()?;
    authority.contains(':').then_some(authority)
}
