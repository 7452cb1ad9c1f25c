//! Message rewriting for topics: decoding application properties for filters, and
//! producing the copy a SQL rule action describes (user and system properties changed,
//! `RuleName` recorded). Only the changed sections are re-encoded; the body stays as sent.

use bytes::BytesMut;
use fe2o3_amqp_types::messaging::{ApplicationProperties, MessageId, Properties};
use fe2o3_amqp_types::primitives::{SimpleValue, Symbol};

use crate::broker::filter::{PropertyChange, PropertyTarget, SystemProperty};
use crate::broker::message::{Message, SystemProperties};
use crate::broker::rules;
use crate::broker::types::PropertyValue;
use crate::encoding::codec::Writer;

fn simple_to_property(value: &SimpleValue) -> PropertyValue {
    match value {
        SimpleValue::Bool(flag) => PropertyValue::Bool(*flag),
        SimpleValue::Ubyte(number) => PropertyValue::Long(*number as i64),
        SimpleValue::Ushort(number) => PropertyValue::Long(*number as i64),
        SimpleValue::Uint(number) => PropertyValue::Long(*number as i64),
        SimpleValue::Ulong(number) => PropertyValue::Long(*number as i64),
        SimpleValue::Byte(number) => PropertyValue::Long(*number as i64),
        SimpleValue::Short(number) => PropertyValue::Long(*number as i64),
        SimpleValue::Int(number) => PropertyValue::Long(*number as i64),
        SimpleValue::Long(number) => PropertyValue::Long(*number),
        SimpleValue::Float(number) => PropertyValue::Double(number.into_inner() as f64),
        SimpleValue::Double(number) => PropertyValue::Double(number.into_inner()),
        SimpleValue::Timestamp(time) => PropertyValue::Timestamp(time.milliseconds()),
        SimpleValue::Uuid(uuid) => PropertyValue::Uuid(*uuid.as_inner()),
        SimpleValue::Binary(bytes) => PropertyValue::Binary(bytes.to_vec()),
        SimpleValue::String(text) => PropertyValue::String(text.clone()),
        SimpleValue::Symbol(symbol) => PropertyValue::String(symbol.0.clone()),
        _ => PropertyValue::Null,
    }
}

/// Decodes application properties into name → value (unsupported types become null).
pub fn decode_user_properties(message: &Message) -> Vec<(String, PropertyValue)> {
    if message.application_properties_section().is_empty() {
        return Vec::new();
    }
    let decoded: Result<ApplicationProperties, _> =
        serde_amqp::from_slice(message.application_properties_section());
    match decoded {
        Ok(properties) => properties
            .0
            .iter()
            .map(|(name, value)| (name.clone(), simple_to_property(value)))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn text_of(value: &PropertyValue) -> Option<String> {
    match value {
        PropertyValue::Null => None,
        PropertyValue::String(text) => Some(text.clone()),
        PropertyValue::Uuid(bytes) => Some(crate::encoding::ids::format_guid(bytes)),
        PropertyValue::Long(number) => Some(number.to_string()),
        PropertyValue::Double(number) => Some(number.to_string()),
        PropertyValue::Bool(flag) => Some(flag.to_string()),
        PropertyValue::Timestamp(millis) => Some(millis.to_string()),
        PropertyValue::Binary(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
    }
}

fn set_system(properties: &mut Properties, property: SystemProperty, value: Option<String>) {
    match property {
        SystemProperty::MessageId => properties.message_id = value.map(MessageId::String),
        SystemProperty::CorrelationId => properties.correlation_id = value.map(MessageId::String),
        SystemProperty::To => properties.to = value,
        SystemProperty::ReplyTo => properties.reply_to = value,
        SystemProperty::Label => properties.subject = value,
        SystemProperty::SessionId => properties.group_id = value,
        SystemProperty::ReplyToSessionId => properties.reply_to_group_id = value,
        SystemProperty::ContentType => properties.content_type = value.map(Symbol::from),
        _ => {}
    }
}

/// The copy of `message` that a rule action produces.
pub fn apply_rule_action(
    message: &Message,
    changes: &[PropertyChange],
    rule_name: &str,
) -> Message {
    let mut copy = message.clone();
    let mut user = if copy.extras().user_properties.is_empty() {
        decode_user_properties(message)
    } else {
        copy.extras().user_properties.clone()
    };
    let mut properties: Option<Properties> = None;
    for change in changes {
        match change {
            PropertyChange::Set {
                target: PropertyTarget::User(name),
                value,
            } => {
                let value = rules::property_value(value);
                match user
                    .iter_mut()
                    .find(|(key, _)| key.eq_ignore_ascii_case(name))
                {
                    Some(entry) => entry.1 = value,
                    None => user.push((name.clone(), value)),
                }
            }
            PropertyChange::Remove {
                target: PropertyTarget::User(name),
            } => user.retain(|(key, _)| !key.eq_ignore_ascii_case(name)),
            PropertyChange::Set {
                target: PropertyTarget::System(property),
                value,
            } => {
                let decoded = properties.get_or_insert_with(|| {
                    serde_amqp::from_slice(
                        message
                            .delivered_properties(message.properties_section())
                            .as_slice(),
                    )
                    .unwrap_or_default()
                });
                set_system(decoded, *property, text_of(&rules::property_value(value)));
            }
            PropertyChange::Remove {
                target: PropertyTarget::System(property),
            } => {
                let decoded = properties.get_or_insert_with(|| {
                    serde_amqp::from_slice(
                        message
                            .delivered_properties(message.properties_section())
                            .as_slice(),
                    )
                    .unwrap_or_default()
                });
                set_system(decoded, *property, None);
            }
        }
    }
    user.retain(|(key, _)| key != "RuleName");
    user.push((
        "RuleName".to_string(),
        PropertyValue::String(rule_name.to_string()),
    ));
    let mut section = BytesMut::new();
    let mut writer = Writer::new(&mut section);
    writer.descriptor(0x74);
    let mut map = writer.start_map();
    for (name, value) in &user {
        writer.string(name);
        crate::broker::message::write_property_value(&mut writer, value);
        map.count += 2;
    }
    writer.finish_compound(map);
    copy.set_application_properties_section(&section);
    copy.edit_extras(|extras| extras.user_properties = user);
    if let Some(properties) = properties {
        if let Ok(encoded) = serde_amqp::to_vec(&properties) {
            copy.set_properties_section(&encoded);
        }
        let values = crate::encoding::sections::system_values(&properties);
        copy.set_system(SystemProperties::new(
            values.each_ref().map(|value| value.as_deref()),
        ));
    }
    copy
}
