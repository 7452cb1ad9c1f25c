//! The operator CLI's AMQP side (fe2o3-amqp): opening a connection and session with the
//! connection string's key, and what a refusal from the broker means as an [`OpsError`].
//!
//! SASL PLAIN with the key (the broker's whole-connection authentication), or ANONYMOUS
//! without one (a broker without keys; with keys, every link is then refused).

use fe2o3_amqp::connection::{ConnectionHandle, OpenError};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions;
use fe2o3_amqp::{Connection, Session};

use super::client::{OpsError, REQUEST_TIMEOUT, Target};

/// An open connection and its one session.
pub struct Link {
    /// The connection (closed by [`Link::close`]).
    pub connection: ConnectionHandle<()>,
    /// The session the command's link is attached on.
    pub session: SessionHandle<()>,
}

impl Link {
    /// Opens a connection to the target's AMQP port and begins a session.
    pub async fn open(target: &Target) -> Result<Link, OpsError> {
        let profile = match &target.key {
            Some((name, key)) => SaslProfile::Plain {
                username: name.clone(),
                password: key.clone(),
            },
            None => SaslProfile::Anonymous,
        };
        let url = format!("amqp://{}", target.authority());
        let mut connection = tokio::time::timeout(
            REQUEST_TIMEOUT,
            Connection::builder()
                .container_id(format!("ferrobus-cli-{}", std::process::id()))
                .sasl_profile(profile)
                .open(url.as_str()),
        )
        .await
        .map_err(|_| {
            OpsError::Unreachable(format!(
                "{} did not open an AMQP connection",
                target.authority()
            ))
        })?
        .map_err(|error| match error {
            OpenError::SaslError { code, .. } => OpsError::Unauthorized(format!(
                "SASL refused the key ({code:?}): unknown key name or wrong key"
            )),
            other => OpsError::Unreachable(format!("{}: {other}", target.authority())),
        })?;
        let session = Session::begin(&mut connection)
            .await
            .map_err(|error| OpsError::Unreachable(format!("cannot begin a session: {error}")))?;
        Ok(Link {
            connection,
            session,
        })
    }

    /// Ends the session and closes the connection (errors ignored: the work is done).
    pub async fn close(mut self) {
        let _ = self.session.end().await;
        let _ = self.connection.close().await;
    }
}

/// The error a broker's AMQP error condition means for `address`.
pub fn condition_error(address: &str, error: &definitions::Error) -> OpsError {
    let condition = format!("{:?}", error.condition);
    let text = format!(
        "'{address}': {}",
        error
            .description
            .clone()
            .unwrap_or_else(|| condition.clone())
    );
    if condition.contains("NotFound") {
        OpsError::NotFound(text)
    } else if condition.contains("UnauthorizedAccess") {
        OpsError::Unauthorized(text)
    } else {
        OpsError::Refused(text)
    }
}
