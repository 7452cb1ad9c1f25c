//! SASL negotiation: ANONYMOUS (what the Azure SDKs use; authentication then happens via
//! `$cbs`) and PLAIN (a shared access key name and key, authenticating the whole
//! connection as Service Bus allows generic AMQP clients to do).

use bytes::BytesMut;
use fe2o3_amqp_types::primitives::{Array, Symbol};
use fe2o3_amqp_types::sasl::{SaslCode, SaslInit, SaslMechanisms, SaslOutcome};

use super::frame::{self, FRAME_TYPE_SASL};
use crate::amqp::sas::{AccessKey, Rights};

/// Result of SASL.
#[derive(Debug)]
pub enum SaslResult {
    /// Authenticated as anonymous: entity access needs CBS tokens when keys are configured.
    Anonymous,
    /// Authenticated with a key: its rights cover every entity.
    Key(Rights),
    /// Refused.
    Refused,
}

/// Writes the SASL header and the mechanisms frame.
pub fn write_mechanisms(output: &mut BytesMut) -> Result<(), frame::FrameError> {
    output.extend_from_slice(&frame::SASL_HEADER);
    let mechanisms = SaslMechanisms {
        sasl_server_mechanisms: Array::from(vec![Symbol::from("ANONYMOUS"), Symbol::from("PLAIN")]),
    };
    frame::write_frame(output, FRAME_TYPE_SASL, 0, &mechanisms)
}

/// Decodes a `sasl-init` frame body.
pub fn decode_init(body: &[u8]) -> Result<SaslInit, frame::FrameError> {
    crate::encoding::depth::check_described(body)
        .map_err(|error| frame::FrameError::Decode(format!("sasl-init is malformed: {error}")))?;
    serde_amqp::from_slice(body).map_err(|error| frame::FrameError::Decode(error.to_string()))
}

/// Decides the outcome of `init` against the configured keys.
pub fn authenticate(init: &SaslInit, keys: &[AccessKey]) -> SaslResult {
    match init.mechanism.0.as_str() {
        "ANONYMOUS" => SaslResult::Anonymous,
        "PLAIN" => {
            let response: &[u8] = init
                .initial_response
                .as_deref()
                .map(|bytes| bytes.as_slice())
                .unwrap_or(&[]);
            let mut parts = response.split(|byte| *byte == 0);
            let _authorization = parts.next();
            let user = parts
                .next()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            let password = parts
                .next()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            if keys.is_empty() {
                return SaslResult::Key(Rights {
                    manage: true,
                    send: true,
                    listen: true,
                });
            }
            // The password is compared in constant time against every key, so neither the
            // timing nor the outcome tells whether a key name exists.
            let mut granted = None;
            for key in keys {
                let matches =
                    crate::amqp::sas::constant_time_equal(key.key.as_bytes(), password.as_bytes());
                if matches && key.name == user {
                    granted = Some(key.rights);
                }
            }
            granted.map_or(SaslResult::Refused, SaslResult::Key)
        }
        _ => SaslResult::Refused,
    }
}

/// Writes the outcome frame.
pub fn write_outcome(output: &mut BytesMut, ok: bool) -> Result<(), frame::FrameError> {
    let outcome = SaslOutcome {
        code: if ok { SaslCode::Ok } else { SaslCode::Auth },
        additional_data: None,
    };
    frame::write_frame(output, FRAME_TYPE_SASL, 0, &outcome)
}
