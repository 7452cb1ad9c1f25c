//! Who may do what, with `[[auth.keys]]` configured: links to entities need Send or Listen
//! on the node's path (a sub-queue's own audience, `…/$DeadLetterQueue`, is covered by a
//! token for it or for its entity), `$management` operations need the right Service Bus
//! requires for each, and a link authorized by a `$cbs` token loses its access when that
//! token expires unless a fresh `put-token` renewed it (issue 10, items 5–7).
//!
//! Without keys everything is allowed (the emulator's behaviour); SASL PLAIN with a key
//! authorizes the whole connection for that key's rights, without expiry.

use super::connection::{Connection, ConnectionError};
use crate::amqp::errors::{self, Failure};
use crate::amqp::management::Plan;
use crate::amqp::sas::{self, Grant, Right};
use crate::broker::types::SubQueue;

/// The authorization an entity link was attached under.
#[derive(Debug, Clone)]
pub struct LinkAuthorization {
    /// The node path checked (entity path with its sub-queue suffix).
    pub path: String,
    /// The right it needs.
    pub right: Right,
    /// Unix seconds when the covering token expires; `None` never.
    pub until: Option<i64>,
}

/// What an authorization check found.
pub enum Access {
    /// Allowed, until the given Unix second (`None`: for good).
    Allowed(Option<i64>),
    /// Not allowed.
    Denied,
}

/// The path a token audience must cover for a node: the entity, or one of its sub-queues.
pub fn node_path(path: &str, sub_queue: SubQueue) -> String {
    let path = path.trim_matches('/');
    match sub_queue {
        SubQueue::Main => path.to_string(),
        SubQueue::DeadLetter => format!("{path}/$DeadLetterQueue"),
        SubQueue::TransferDeadLetter => format!("{path}/$Transfer/$DeadLetterQueue"),
    }
}

/// The path of a node's `$management` node, which the SDKs' tokens name.
pub fn management_path(path: &str, sub_queue: SubQueue) -> String {
    format!("{}/$management", node_path(path, sub_queue))
}

/// The right a `$management` operation needs, as Service Bus documents it: sending for
/// scheduling; receiving for everything that reads or settles messages and sessions, and
/// for a subscription's rules (the SDKs' rule managers "require only Listen claims", where
/// the ATOM administration client requires Manage).
pub fn management_right(plan: &Plan) -> Right {
    match plan {
        Plan::Schedule(_) | Plan::Cancel(_) => Right::Send,
        Plan::Rules(_)
        | Plan::RenewLocks(_)
        | Plan::Settle(..)
        | Plan::Peek { .. }
        | Plan::Session(..)
        | Plan::ListSessions { .. }
        | Plan::ReceiveDeferred { .. }
        | Plan::DeleteMessages { .. } => Right::Listen,
    }
}

/// The refusal for a missing right.
pub fn unauthorized(right: Right, path: &str) -> Failure {
    Failure::new(
        errors::UNAUTHORIZED_ACCESS,
        format!(
            "Unauthorized access. '{right:?}' claim(s) are required to perform this operation on '{path}'. Put a valid token on $cbs first."
        ),
        401,
    )
}

impl Connection {
    /// Whether `right` on `path` is allowed now, and until when.
    pub(super) fn access(&self, path: &str, right: Right) -> Access {
        if self.context.settings.keys.is_empty() {
            return Access::Allowed(None);
        }
        if let Some(rights) = self.sasl_rights {
            return if rights.allows(right) {
                Access::Allowed(None)
            } else {
                Access::Denied
            };
        }
        let now = self.context.clock.now().0 / 1000;
        self.grants
            .iter()
            .filter(|grant| grant.rights.allows(right) && sas::covers(grant, path, now))
            .map(|grant| grant.expires_at_seconds)
            .max()
            .map_or(Access::Denied, |until| Access::Allowed(Some(until)))
    }

    /// Keeps a token's grant: it replaces an earlier grant for the same audience and
    /// rights, and expired grants are dropped, so re-putting tokens for hours does not
    /// grow the connection. Links it covers get their access extended.
    pub(super) fn add_grant(&mut self, grant: Grant) {
        let now = self.context.clock.now().0 / 1000;
        self.grants.retain(|kept| {
            kept.expires_at_seconds >= now
                && !(kept.path_prefix == grant.path_prefix && kept.rights == grant.rights)
        });
        self.grants.push(grant);
        self.refresh_link_authorizations();
    }

    /// Re-reads every token-authorized link's expiry from the current grants.
    fn refresh_link_authorizations(&mut self) {
        let mut updates = Vec::new();
        for (channel, session) in &self.sessions {
            for (handle, link) in &session.links {
                if let Some(authorization) = &link.authorization
                    && let Access::Allowed(until) =
                        self.access(&authorization.path, authorization.right)
                {
                    updates.push((*channel, *handle, until));
                }
            }
        }
        for (channel, handle, until) in updates {
            if let Some(authorization) = self
                .sessions
                .get_mut(&channel)
                .and_then(|session| session.links.get_mut(&handle))
                .and_then(|link| link.authorization.as_mut())
            {
                authorization.until = until.max(authorization.until);
            }
        }
    }

    /// The earliest Unix second at which a link's token expires.
    pub(super) fn next_authorization_expiry(&self) -> Option<i64> {
        self.sessions
            .values()
            .flat_map(|session| session.links.values())
            .filter_map(|link| link.authorization.as_ref()?.until)
            .min()
    }

    /// Detaches, with `amqp:unauthorized-access`, every link whose token has expired and
    /// was not renewed.
    pub(super) async fn expire_authorizations(&mut self) -> Result<(), ConnectionError> {
        self.refresh_link_authorizations();
        let now = self.context.clock.now().0 / 1000;
        let mut expired = Vec::new();
        for (channel, session) in &self.sessions {
            for (handle, link) in &session.links {
                if let Some(authorization) = &link.authorization
                    && authorization.until.is_some_and(|until| until < now)
                {
                    expired.push((*channel, *handle, authorization.path.clone()));
                }
            }
        }
        for (channel, handle, path) in expired {
            tracing::info!(path = %crate::server::log_text::LogText(&path), "token expired: link detached");
            let error = errors::amqp_error(
                errors::UNAUTHORIZED_ACCESS,
                &format!(
                    "The token authorizing this link to '{path}' has expired. Put a new token on $cbs before it expires."
                ),
            );
            self.detach_with_error(channel, handle, error).await?;
        }
        Ok(())
    }
}
