//! Client outcomes → Service Bus settlements (§5.1 of the wire contract): `accepted` completes,
//! `modified` abandons (or defers, with `undeliverable-here`), `rejected` dead-letters with
//! the reason and description from its error info, anything else releases. Also the outcome
//! the broker echoes back when the client left its disposition unsettled.

use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Modified, Rejected, Released};
use fe2o3_amqp_types::primitives::Value;

use crate::amqp::management;
use crate::broker::types::Settlement;

/// Maps a client's outcome to a Service Bus settlement and the outcome to echo (§5.1).
pub fn settlement_for(state: Option<&DeliveryState>) -> (Settlement, DeliveryState) {
    match state {
        Some(DeliveryState::Accepted(_)) => {
            (Settlement::Complete, DeliveryState::Accepted(Accepted {}))
        }
        Some(DeliveryState::Modified(modified)) => {
            let properties = management::property_changes(
                modified
                    .message_annotations
                    .as_ref()
                    .map(|fields| {
                        Value::Map(
                            fields
                                .iter()
                                .map(|(key, value)| (Value::Symbol(key.clone()), value.clone()))
                                .collect(),
                        )
                    })
                    .as_ref(),
            );
            let echo = DeliveryState::Modified(Modified {
                delivery_failed: modified.delivery_failed,
                undeliverable_here: modified.undeliverable_here,
                message_annotations: None,
            });
            if modified.undeliverable_here == Some(true) {
                (Settlement::Defer { properties }, echo)
            } else {
                (Settlement::Abandon { properties }, echo)
            }
        }
        Some(DeliveryState::Rejected(rejected)) => {
            let mut properties = Vec::new();
            let mut reason = None;
            let mut description = rejected
                .error
                .as_ref()
                .and_then(|error| error.description.clone());
            if let Some(info) = rejected
                .error
                .as_ref()
                .and_then(|error| error.info.as_ref())
            {
                for (key, value) in info.iter() {
                    let value = management::property_value(value);
                    let text = match &value {
                        crate::broker::types::PropertyValue::String(text) => Some(text.clone()),
                        _ => None,
                    };
                    match key.0.as_str() {
                        "DeadLetterReason" => reason = text,
                        "DeadLetterErrorDescription" => description = text.or(description),
                        _ => properties.push((key.0.clone(), value)),
                    }
                }
            }
            (
                Settlement::DeadLetter {
                    reason,
                    description,
                    properties,
                },
                DeliveryState::Rejected(Rejected { error: None }),
            )
        }
        _ => (Settlement::Release, DeliveryState::Released(Released {})),
    }
}
