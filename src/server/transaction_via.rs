//! Cross-entity transactions as the service infers them. The Java SDK's
//! `enableCrossEntityTransactions` puts every link and a transaction coordinator on one AMQP
//! session and names no via entity: the service takes the first entity a link on that
//! session attaches to (after the coordinator) as the transaction's entity, and every later
//! sender on the session to another entity sends through it (send-via), as if the sender
//! had named that entity as its target and its own target as
//! `com.microsoft:transfer-destination-address`. Sessions without a coordinator, and
//! senders that name their own transfer destination, are not touched.

use fe2o3_amqp_types::messaging::TargetArchetype;
use fe2o3_amqp_types::performatives::Attach;
use fe2o3_amqp_types::primitives::{Symbol, Value};

use crate::amqp::link_properties;

const TRANSFER_DESTINATION: &str = "com.microsoft:transfer-destination-address";

/// A session's part in cross-entity transactions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum SessionVia {
    /// No coordinator was attached on the session.
    #[default]
    None,
    /// A coordinator is attached; no entity link has been since.
    Awaiting,
    /// The entity (queue, topic or subscription path) the session's sends go through.
    Entity(String),
}

impl SessionVia {
    /// A transaction coordinator was attached on the session.
    pub fn coordinator_attached(&mut self) {
        if *self == SessionVia::None {
            *self = SessionVia::Awaiting;
        }
    }

    /// A sender or receiver was attached on the session to the entity at `path`.
    pub fn entity_attached(&mut self, path: &str) {
        if *self == SessionVia::Awaiting {
            *self = SessionVia::Entity(path.to_owned());
        }
    }

    /// The attach a client sender to `target` is resolved as: `None` to resolve it as it
    /// is; else a copy whose target is the session's entity and whose transfer destination
    /// is `target`.
    pub fn route(&self, attach: &Attach, target: &str) -> Option<Attach> {
        let SessionVia::Entity(via) = self else {
            return None;
        };
        if via.eq_ignore_ascii_case(target)
            || link_properties::transfer_destination(attach).is_some()
        {
            return None;
        }
        let mut routed = attach.clone();
        match routed.target.as_deref_mut() {
            Some(TargetArchetype::Target(routed_target)) => {
                routed_target.address = Some(via.clone())
            }
            _ => return None,
        }
        routed
            .properties
            .get_or_insert_with(Default::default)
            .insert(
                Symbol::from(TRANSFER_DESTINATION),
                Value::String(target.to_owned()),
            );
        Some(routed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp_types::definitions::{Handle, Role};
    use fe2o3_amqp_types::messaging::Target;

    fn sender_to(address: &str) -> Attach {
        Attach {
            name: "sender".into(),
            handle: Handle(1),
            role: Role::Sender,
            snd_settle_mode: Default::default(),
            rcv_settle_mode: Default::default(),
            source: None,
            target: Some(Box::new(TargetArchetype::Target(Target {
                address: Some(address.into()),
                ..Default::default()
            }))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    #[test]
    fn senders_after_the_first_entity_of_a_coordinator_session_send_through_it() {
        let mut via = SessionVia::None;
        via.entity_attached("in");
        assert_eq!(via, SessionVia::None, "no coordinator: nothing is inferred");
        via.coordinator_attached();
        via.entity_attached("in");
        via.entity_attached("other");
        assert_eq!(
            via,
            SessionVia::Entity("in".into()),
            "the first entity link decides"
        );

        let routed = via.route(&sender_to("out"), "out").expect("routed");
        let Some(TargetArchetype::Target(target)) = routed.target.as_deref() else {
            panic!("no target")
        };
        assert_eq!(target.address.as_deref(), Some("in"));
        assert_eq!(
            link_properties::transfer_destination(&routed).as_deref(),
            Some("out")
        );
        assert!(
            via.route(&sender_to("IN"), "IN").is_none(),
            "its own entity"
        );
        assert!(
            via.route(&routed, "in").is_none(),
            "a sender that names its transfer destination keeps it"
        );
        assert!(
            SessionVia::Awaiting
                .route(&sender_to("out"), "out")
                .is_none()
        );
    }
}
