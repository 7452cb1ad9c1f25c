//! Request/response messages of the `$cbs` and `$management` nodes: reading a request's
//! message-id (kept encoded, so the response's correlation-id has the same AMQP type —
//! uuid for Python, string for JS), reply-to, application properties and body, and
//! building the response message.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::messaging::ApplicationProperties;
use fe2o3_amqp_types::primitives::SimpleValue;
use serde_amqp::Value;

use super::message::MessageError;
use crate::encoding::codec::{self, Writer};

/// A parsed request.
#[derive(Debug)]
pub struct Request {
    /// The encoded message-id value (echoed as correlation-id); absent if none was sent.
    pub message_id: Option<Bytes>,
    /// `properties.reply-to`.
    pub reply_to: Option<String>,
    /// Application properties.
    pub application_properties: ApplicationProperties,
    /// The amqp-value body, decoded.
    pub body: Value,
}

impl Request {
    /// An application property as text.
    pub fn property_text(&self, key: &str) -> Option<&str> {
        match self.application_properties.0.get(key)? {
            SimpleValue::String(text) => Some(text),
            SimpleValue::Symbol(symbol) => Some(&symbol.0),
            _ => None,
        }
    }
}

/// Parses a request message from a transfer payload.
pub fn parse(payload: &Bytes) -> Result<Request, MessageError> {
    // Before serde_amqp (which recurses) sees any of it.
    crate::encoding::depth::check_values(payload)?;
    let mut request = Request {
        message_id: None,
        reply_to: None,
        application_properties: ApplicationProperties::default(),
        body: Value::Null,
    };
    let mut at = 0;
    while at < payload.len() {
        let length = codec::value_length(payload, at)?;
        let code = codec::section_code(payload, at).ok_or(MessageError::NotASection(at))?;
        let value_at = at + 1 + codec::value_length(payload, at + 1)?;
        match code {
            0x73 => {
                let elements = codec::compound_elements(payload, value_at)?;
                if let Some(id) = elements.first()
                    && payload[id.start] != 0x40
                {
                    request.message_id = Some(payload.slice(id.clone()));
                }
                if let Some(reply_to) = elements.get(4) {
                    request.reply_to =
                        codec::read_text(payload, reply_to.clone()).map(str::to_string);
                }
            }
            0x74 => {
                request.application_properties = serde_amqp::from_slice(&payload[at..at + length])
                    .map_err(|error| MessageError::Section {
                        section: "application-properties",
                        reason: error.to_string(),
                    })?;
            }
            0x77 => {
                request.body =
                    serde_amqp::from_slice(&payload[value_at..at + length]).map_err(|error| {
                        MessageError::Section {
                            section: "amqp-value",
                            reason: error.to_string(),
                        }
                    })?;
            }
            _ => {}
        }
        at += length;
    }
    Ok(request)
}

/// Status keys: `$cbs` uses `status-code`, `$management` uses `statusCode` (§6.3).
#[derive(Debug, Clone, Copy)]
pub enum StatusKeys {
    /// `status-code`, `status-description`.
    Cbs,
    /// `statusCode`, `statusDescription`, `errorCondition`.
    Management,
}

/// Builds a response message: correlation-id, status properties and an amqp-value body
/// (already encoded, or null).
pub fn response(
    correlation_id: Option<&Bytes>,
    keys: StatusKeys,
    status_code: i32,
    description: &str,
    error_condition: Option<&str>,
    encoded_body: Option<&[u8]>,
) -> Bytes {
    let mut output = BytesMut::with_capacity(256);
    let mut writer = Writer::new(&mut output);
    writer.descriptor(0x73);
    let mut properties = writer.start_list();
    for _ in 0..5 {
        writer.null();
    }
    match correlation_id {
        Some(id) => writer.raw(id),
        None => writer.null(),
    }
    properties.count = 6;
    writer.finish_compound(properties);

    writer.descriptor(0x74);
    let mut map = writer.start_map();
    let (code_key, description_key) = match keys {
        StatusKeys::Cbs => ("status-code", "status-description"),
        StatusKeys::Management => ("statusCode", "statusDescription"),
    };
    writer.string(code_key);
    writer.int(status_code);
    writer.string(description_key);
    writer.string(description);
    map.count += 4;
    if let Some(condition) = error_condition {
        writer.string("errorCondition");
        writer.symbol(condition);
        map.count += 2;
    }
    writer.finish_compound(map);

    writer.descriptor(0x77);
    match encoded_body {
        Some(body) => writer.raw(body),
        None => writer.null(),
    }
    output.freeze()
}
