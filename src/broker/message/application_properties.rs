//! A message's application-properties section as the broker edits it: the values it writes
//! (dead-letter reasons, properties-to-modify, rule actions), merged into or taken out of the
//! section the client sent, and one value read back as text.

use bytes::BytesMut;

use super::Message;
use crate::broker::types::PropertyValue;
use crate::encoding::codec::{self, Writer};
use crate::encoding::sections::{APPLICATION_PROPERTIES, descriptor_length};

/// Writes one property value in its AMQP encoding.
pub fn write_property_value(writer: &mut Writer<'_>, value: &PropertyValue) {
    match value {
        PropertyValue::Null => writer.null(),
        PropertyValue::Bool(flag) => writer.boolean(*flag),
        PropertyValue::Long(number) => writer.long(*number),
        PropertyValue::Double(number) => {
            writer.raw(&[0x82]);
            writer.raw(&number.to_be_bytes());
        }
        PropertyValue::String(text) => writer.string(text),
        PropertyValue::Timestamp(millis) => writer.timestamp(*millis),
        PropertyValue::Uuid(bytes) => writer.uuid(bytes),
        PropertyValue::Binary(bytes) => writer.binary(bytes),
    }
}

/// An application-properties section: `original`'s entries with `changes` merged in (changed
/// keys replace the sender's values; later changes to the same key win).
pub fn merged_application_properties(
    original: &[u8],
    changes: &[(String, PropertyValue)],
) -> Vec<u8> {
    let mut output = BytesMut::new();
    write_changed_application_properties(&mut Writer::new(&mut output), original, changes);
    output.to_vec()
}

/// An application-properties section: `original`'s entries but those named in `names`;
/// empty (no section) when none is left, `original` itself when it cannot be read.
pub fn application_properties_without(original: &[u8], names: &[&str]) -> Vec<u8> {
    let mut output = BytesMut::new();
    let kept = write_application_properties(
        &mut Writer::new(&mut output),
        original,
        |name| !names.contains(&name),
        &[],
    );
    match kept {
        Some(0) => Vec::new(),
        Some(_) => output.to_vec(),
        None => original.to_vec(),
    }
}

/// Rewrites application properties with the broker's changes merged in (changed keys
/// replace the sender's values).
pub fn write_changed_application_properties(
    writer: &mut Writer<'_>,
    original: &[u8],
    changes: &[(String, PropertyValue)],
) {
    write_application_properties(
        writer,
        original,
        |name| !changes.iter().any(|(changed, _)| changed == name),
        changes,
    );
}

/// Writes an application-properties section: the entries of `original` whose names `keep`
/// accepts, then `changes` (later changes to the same key win). How many map elements it
/// wrote, or `None` when `original` is not a readable map (its entries are then left out).
fn write_application_properties(
    writer: &mut Writer<'_>,
    original: &[u8],
    keep: impl Fn(&str) -> bool,
    changes: &[(String, PropertyValue)],
) -> Option<u32> {
    writer.descriptor(APPLICATION_PROPERTIES as u8);
    let mut map = writer.start_map();
    let mut readable = true;
    if !original.is_empty() {
        let value_at = descriptor_length(original, 0).unwrap_or(original.len());
        match codec::compound_elements(original, value_at) {
            Ok(elements) => {
                for pair in elements.chunks(2) {
                    let [key, value] = pair else { break };
                    if keep(codec::read_text(original, key.clone()).unwrap_or("")) {
                        writer.raw(&original[key.start..value.end]);
                        map.count += 2;
                    }
                }
            }
            Err(_) => readable = false,
        }
    }
    for (index, (name, value)) in changes.iter().enumerate() {
        if changes[index + 1..].iter().any(|(later, _)| later == name) {
            continue;
        }
        writer.string(name);
        write_property_value(writer, value);
        map.count += 2;
    }
    let count = map.count;
    writer.finish_compound(map);
    readable.then_some(count)
}

/// The text of `message`'s application property `key` when it is a string or symbol.
pub fn application_property_text(message: &Message, key: &str) -> Option<String> {
    let section = message.application_properties_section();
    if section.is_empty() {
        return None;
    }
    let value_at = descriptor_length(section, 0).ok()?;
    let elements = codec::compound_elements(section, value_at).ok()?;
    elements.chunks(2).find_map(|pair| match pair {
        [name, value] if codec::read_text(section, name.clone()) == Some(key) => {
            codec::read_text(section, value.clone()).map(str::to_string)
        }
        _ => None,
    })
}
