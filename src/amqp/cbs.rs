//! The `$cbs` node: `put-token` requests authorise a connection for an audience
//! (wire contract §2). Without configured keys every token is accepted (emulator
//! behaviour); with keys, SAS tokens are validated and recorded as grants.

use bytes::Bytes;
use serde_amqp::Value;

use super::request::{self, Request, StatusKeys};
use super::sas::{self, AccessKey, Grant};

/// The outcome of a put-token: the grant to record (if any) and the response message.
pub struct PutTokenOutcome {
    /// Rights gained, when keys are configured and the token is valid.
    pub grant: Option<Grant>,
    /// The encoded response.
    pub response: Bytes,
}

/// Handles one `$cbs` request.
pub fn handle(request: &Request, keys: &[AccessKey], now_seconds: i64) -> PutTokenOutcome {
    let correlation = request.message_id.as_ref();
    let respond = |code: i32, description: &str| {
        request::response(correlation, StatusKeys::Cbs, code, description, None, None)
    };
    if request.property_text("operation") != Some("put-token") {
        return PutTokenOutcome {
            grant: None,
            response: respond(400, "The only supported $cbs operation is put-token."),
        };
    }
    if keys.is_empty() {
        return PutTokenOutcome {
            grant: None,
            response: respond(202, "Accepted"),
        };
    }
    let token = match &request.body {
        Value::String(token) => token.as_str(),
        _ => "",
    };
    match sas::validate(token, keys, now_seconds) {
        Ok(grant) => PutTokenOutcome {
            grant: Some(grant),
            response: respond(202, "Accepted"),
        },
        Err(error) => {
            tracing::info!(%error, "put-token refused");
            PutTokenOutcome {
                grant: None,
                response: respond(401, &error.to_string()),
            }
        }
    }
}
